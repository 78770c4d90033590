"""Saved readings: a new process loads a long thread without folding its whole log.

Now and then (after twice as many events as the thread has messages, at least
``READING_MIN`` and at most ``READING_EVERY``) a run's last append also keeps the whole
state at the new head, the thread's *saved reading*; ``read(from_reading=True)`` gives
it back with only the events after it. SPEC §6: loading a thread for resume must not
cost more with every past checkpoint. Every test runs on every backend; the protocol
ones sync and async.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import orjson
import pytest
from _stores import Location, Store, approve, build_agent, config, start
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_store_protocol import ev, rec

from handrail import Command, InMemorySaver
from handrail.checkpoint.base import Append, StoredEvent, ThreadRead, ThreadRecord
from handrail.errors import ConflictError, SerializationError
from handrail.runtime import commit
from handrail.runtime._fold_codec import restore_reading
from handrail.runtime.reading import checked_log, fold_events


def reading(seq: int, payload: bytes = b"state") -> StoredEvent:
    return StoredEvent(seq=seq, kind="reading", created_at=float(seq), payload=payload + str(seq).encode())


# The protocol ---------------------------------------------------------------------------------
async def test_a_saved_reading_comes_back_with_only_the_events_after_it(store: Store) -> None:
    await store.append("t", Append([ev(1), ev(2), ev(3)], expected_seq=0, record=rec("t", 3)))
    await store.append("t", Append([ev(4), ev(5)], expected_seq=3, record=rec("t", 5), reading=reading(5)))
    await store.append("t", Append([ev(6)], expected_seq=5, record=rec("t", 6)))

    read = await store.read("t", from_reading=True)
    assert read.reading == reading(5)
    assert [e.seq for e in read.events] == [6]
    assert read.record is not None and read.record.head_seq == 6
    # without the flag, or with a range, a read is what it always was
    for plain in (await store.read("t"), await store.read("t", after_seq=2, from_reading=True)):
        assert plain.reading is None
    assert [e.seq for e in (await store.read("t")).events] == [1, 2, 3, 4, 5, 6]
    assert [e.seq for e in (await store.read("t", after_seq=2, from_reading=True)).events] == [3, 4, 5, 6]
    assert [e.seq for e in (await store.read("t", upto_seq=4, from_reading=True)).events] == [1, 2, 3, 4]


async def test_a_later_reading_takes_the_place_of_the_earlier_one(store: Store) -> None:
    await store.append("t", Append([ev(1)], expected_seq=0, record=rec("t", 1), reading=reading(1)))
    await store.append(
        "t", Append([ev(2), ev(3)], expected_seq=1, record=rec("t", 3), reading=reading(3, b"new"))
    )
    read = await store.read("t", from_reading=True)
    assert read.reading == reading(3, b"new") and read.events == []


async def test_a_thread_without_a_reading_is_read_whole(store: Store) -> None:
    await store.append("t", Append([ev(1), ev(2)], expected_seq=0, record=rec("t", 2)))
    read = await store.read("t", from_reading=True)
    assert read.reading is None and [e.seq for e in read.events] == [1, 2]
    nothing = await store.read("unknown", from_reading=True)
    assert nothing == ThreadRead(record=None, events=[])


async def test_a_conflicting_append_saves_no_reading(store: Store) -> None:
    await store.append("t", Append([ev(1), ev(2)], expected_seq=0, record=rec("t", 2)))
    with pytest.raises(ConflictError):
        await store.append(
            "t", Append([ev(2), ev(3)], expected_seq=1, record=rec("t", 3), reading=reading(3))
        )
    assert (await store.read("t", from_reading=True)).reading is None


async def test_deleting_or_pruning_a_thread_drops_its_reading(store: Store) -> None:
    await store.append("t", Append([ev(1), ev(2)], expected_seq=0, record=rec("t", 2), reading=reading(2)))
    assert await store.delete_thread("t")
    await store.append("t", Append([ev(1)], expected_seq=0, record=rec("t", 1, epoch="e2")))
    assert (await store.read("t", from_reading=True)).reading is None

    await store.append(
        "u", Append([ev(1), ev(2), ev(3)], expected_seq=0, record=rec("u", 3), reading=reading(3))
    )
    snapshot = StoredEvent(seq=2, kind="snapshot", created_at=2.0, payload=b"{}")
    await store._call("prune", "u", upto_seq=2, snapshot=snapshot, keep_kinds=frozenset())
    read = await store.read("u", from_reading=True)
    assert read.reading is None and [e.seq for e in read.events] == [2, 3]


# Agents -----------------------------------------------------------------------------------------
def _grow(agent: Any, thread_id: str, turns: int) -> str:
    """``turns`` reviewed turns on one thread; the last one left paused. Returns its interrupt."""
    interrupt_id = start(agent, thread_id)
    for turn in range(turns):
        agent.invoke(approve(interrupt_id), config(thread_id))
        interrupt_id = start(agent, thread_id, "touch_file" if turn % 2 else "write_file")
    return interrupt_id


class _Spy:
    """Wraps a saver's ``read`` to see what a new agent asked the store for."""

    def __init__(self, saver: Any) -> None:
        self.reads: list[ThreadRead] = []
        original = saver.read

        def read(thread_id: str, **options: Any) -> ThreadRead:
            result: ThreadRead = original(thread_id, **options)
            self.reads.append(result)
            return result

        saver.read = read


def test_a_new_agent_loads_a_long_thread_from_its_saved_reading(
    location: Location, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commit, "READING_EVERY", 25)
    log = tmp_path / "tool.log"
    first = build_agent(location.saver(), log)
    interrupt_id = _grow(first, "t", 12)

    saver = location.saver()
    spy = _Spy(saver)
    second = build_agent(saver, log)
    state = second.get_state(config("t"))
    (read,) = spy.reads
    assert read.reading is not None and read.record is not None
    assert len(read.events) < 25 <= read.reading.seq  # it folded only what came after the reading
    assert read.reading.seq + len(read.events) == read.record.head_seq

    # exactly the state, history and pending review a full reading of the log gives
    full = build_agent(location.saver(), log)
    expected = full.get_state(config("t"))
    assert state.values == expected.values and state.next == expected.next
    assert state.config == expected.config and state.metadata == expected.metadata
    assert state.parent_config == expected.parent_config and state.created_at == expected.created_at
    assert [i.id for i in state.interrupts] == [interrupt_id]
    assert list(second.get_state_history(config("t"))) == list(full.get_state_history(config("t")))

    # and it goes on from there: the resume runs the tool once
    lines = len(log.read_text().splitlines())
    second.invoke(approve(interrupt_id), config("t"))
    assert len(log.read_text().splitlines()) == lines + 1


def test_a_short_thread_is_saved_as_often_as_it_has_messages_so_a_cold_load_folds_few_events(
    location: Location, tmp_path: Path
) -> None:
    """SPEC §6 for small threads: with the shipped settings, a new agent folds fewer than
    ``max(READING_MIN, 2 * messages)`` events on top of the saved reading."""
    log = tmp_path / "tool.log"
    interrupt_id = _grow(build_agent(location.saver(), log), "t", 10)
    saver = location.saver()
    spy = _Spy(saver)
    state = build_agent(saver, log).get_state(config("t"))
    (read,) = spy.reads
    messages = len(state.values["messages"])
    assert read.reading is not None and read.record is not None
    assert read.record.head_seq > commit.READING_MIN  # more events than the least interval
    assert len(read.events) < max(commit.READING_MIN, 2 * messages) < commit.READING_EVERY
    assert [i.id for i in state.interrupts] == [interrupt_id]
    full = build_agent(location.saver(), log).get_state(config("t"))
    assert state.values == full.values and state.next == full.next


def test_each_saved_reading_folds_to_the_same_thread_as_the_log(
    location: Location, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fold restored from every reading saved along the way equals folding the log up to it."""
    monkeypatch.setattr(commit, "READING_EVERY", 7)
    saver = location.saver()
    agent = build_agent(saver, tmp_path / "tool.log")
    seen: set[int] = set()
    interrupt_id = start(agent, "t")
    for turn in range(8):
        decision = [{"type": "approve"}] if turn % 3 else [{"type": "reject", "message": f"no {turn}"}]
        agent.invoke(Command(resume={interrupt_id: {"decisions": decision}}), config("t"))
        interrupt_id = start(agent, "t")
        read = saver.read("t", from_reading=True)
        assert read.reading is not None
        if read.reading.seq in seen:
            continue
        seen.add(read.reading.seq)
        _assert_restores_the_log(agent, saver, read.reading)
    assert len(seen) >= 3


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    every=st.integers(min_value=2, max_value=15),
    answers=st.lists(st.sampled_from(["approve", "reject", "edit", "respond"]), min_size=1, max_size=8),
)
def test_any_saved_reading_restores_the_fold_exactly(tmp_path: Path, every: int, answers: list[str]) -> None:
    """Whatever the decisions and however often readings are saved, a restored reading is
    the fold of the log up to it, slot for slot (memory store)."""
    saver = InMemorySaver()
    agent = build_agent(saver, tmp_path / "tool.log")
    interrupt_id = start(agent, "t")
    original = commit.READING_EVERY
    commit.READING_EVERY = every
    try:
        for n, answer in enumerate(answers):
            decision: dict[str, Any] = {"type": answer}
            if answer == "edit":
                decision["edited_action"] = {"name": "write_file", "args": {"path": f"edited-{n}"}}
            if answer == "respond":
                decision["message"] = f"answered {n}"
            agent.invoke(Command(resume={interrupt_id: {"decisions": [decision]}}), config("t"))
            interrupt_id = start(agent, "t")
            read = saver.read("t", from_reading=True)
            if read.reading is not None:
                _assert_restores_the_log(agent, saver, read.reading)
    finally:
        commit.READING_EVERY = original


def _assert_restores_the_log(agent: Any, saver: Any, stored: StoredEvent) -> None:
    """The fold a saved reading holds is the fold of the log up to it, slot for slot."""
    restored = restore_reading(agent._spec, "t", stored)
    assert restored is not None
    log, walked = checked_log("t", saver.read("t", upto_seq=stored.seq).events)
    folded = fold_events(agent._spec, "t", log)
    folded.reading_seq, folded.epoch = restored.reading_seq, restored.epoch  # the store's to know
    folded.chain, folded.chain_sealed = walked.next_prev, walked.sealed  # the loader's to know
    assert _slots(restored) == _slots(folded)


_NOT_STATE = {"reducers", "_calls", "_messages_changed"}  # the agent's, and a cache of the fold's own


def _slots(fold: Any) -> dict[str, Any]:
    return {name: getattr(fold, name) for name in type(fold).__slots__ if name not in _NOT_STATE}


def test_a_damaged_reading_fails_loudly_naming_thread_and_event(
    location: Location, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEC rule 10 for saved readings: never loaded as something else."""
    monkeypatch.setattr(commit, "READING_EVERY", 5)
    saver = location.saver()
    agent = build_agent(saver, tmp_path / "tool.log")
    _grow(agent, "t", 2)
    read = saver.read("t", from_reading=True)
    assert read.reading is not None and read.record is not None
    head = read.record.head_seq
    damages = (b"", b"\x03garbage", b"\x04garbage", b'{"values": 1}', b"[]", read.reading.payload[:-5])
    for payload in damages:
        damaged = StoredEvent(seq=head + 1, kind="reading", created_at=1.0, payload=payload)
        saver.append(
            "t",
            Append(
                [
                    StoredEvent(
                        seq=head + 1,
                        kind="step",
                        created_at=1.0,
                        payload=b'{"step":"x","values":null,"next":[]}',
                    )
                ],
                expected_seq=head,
                record=_moved(read.record, head + 1),
                reading=damaged,
            ),
        )
        head += 1
        with pytest.raises(SerializationError, match=rf"thread 't', saved reading at record {head}") as info:
            build_agent(location.saver(), tmp_path / "tool.log").get_state(config("t"))
        assert info.value.thread_id == "t" and info.value.seq == head


@functools.cache
def _a_reading() -> tuple[Any, StoredEvent]:
    """A real saved reading (memory store), made once for the hypothesis test below."""
    saver = InMemorySaver()
    agent = build_agent(saver, "/dev/null")
    original = commit.READING_EVERY
    commit.READING_EVERY = 3
    try:
        _grow(agent, "t", 2)
    finally:
        commit.READING_EVERY = original
    reading = saver.read("t", from_reading=True).reading
    assert reading is not None
    return agent, reading


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_random_and_truncated_readings_raise_only_serialization_errors(data: st.DataObject) -> None:
    """SPEC rule 10: a damaged saved reading never loads as something else."""
    agent, reading = _a_reading()
    mode = data.draw(st.sampled_from(["truncate", "random", "flip", "json"]))
    payload = reading.payload
    if mode == "truncate":
        payload = payload[: data.draw(st.integers(0, max(0, len(payload) - 1)))]
    elif mode == "random":
        payload = data.draw(st.binary(max_size=300))
    elif mode == "flip":
        at = data.draw(st.integers(0, len(payload) - 1))
        payload = payload[:at] + bytes([payload[at] ^ data.draw(st.integers(1, 255))]) + payload[at + 1 :]
    else:  # valid JSON of the wrong shape
        leaves = st.none() | st.integers(-(2**40), 2**40) | st.text(max_size=5)
        payload = orjson.dumps(data.draw(st.recursive(leaves, _json_of)))
    damaged = dataclasses.replace(reading, payload=payload)
    with pytest.raises(SerializationError) as caught:
        restore_reading(agent._spec, "t", damaged)
    assert caught.value.thread_id == "t" and caught.value.seq == reading.seq
    assert f"saved reading at record {reading.seq}" in str(caught.value)


def _json_of(children: Any) -> Any:
    return st.lists(children, max_size=3) | st.dictionaries(
        st.sampled_from(["values", "next", "head_seq", "checkpoint", "pending", "x"]), children, max_size=4
    )


_EMPTY_STEP = b'{"step":"x","values":null,"next":[]}'


def _moved(record: ThreadRecord, head: int) -> ThreadRecord:
    return dataclasses.replace(record, head_seq=head)


def test_time_travel_after_a_saved_reading_reads_the_whole_log(
    location: Location, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A branch back past the saved reading needs the older log: the load falls back to it."""
    monkeypatch.setattr(commit, "READING_EVERY", 10)
    log = tmp_path / "tool.log"
    agent = build_agent(location.saver(), log)
    _grow(agent, "t", 4)
    ended = [h for h in agent.get_state_history(config("t")) if not h.next and not h.interrupts]
    monkeypatch.setattr(commit, "READING_EVERY", 10_000)  # the branch's run saves none
    monkeypatch.setattr(commit, "READING_MIN", 10_000)
    agent.invoke({"messages": ["write_file:again"]}, ended[-1].config)  # a branch from an old checkpoint
    saver = location.saver()
    after = saver.read("t", from_reading=True)
    assert after.reading is not None and "branch" in [e.kind for e in after.events]
    fresh = build_agent(saver, log).get_state(config("t"))
    full = agent.get_state(config("t"))
    assert fresh.values == full.values and fresh.next == full.next
    assert [i.id for i in fresh.interrupts] == [i.id for i in full.interrupts]
