"""SPEC rules 10 and 18 on every backend: the hash chain over a thread's log.

A record whose content, number, time or kind changed, one copied from another row or
another thread, and one removed or moved never load: every reader raises
SerializationError naming the thread and the first record that does not match, and
``verify_audit`` names it too. Pruning keeps the chain verifiable from its anchors.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from _stores import Location, approve, build_agent, config, start
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handrail import Command, HumanInTheLoopMiddleware, InMemorySaver, ScriptedModel, create_agent, tool
from handrail.checkpoint.base import Append, StoredEvent, ThreadRecord
from handrail.checkpoint.integrity import unseal
from handrail.errors import SerializationError

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _payment_agent(saver: Any) -> Any:
    @tool
    def pay(order: int, amount: int) -> str:
        """Pay for an order."""
        return f"paid {amount} for order {order}"

    turns = [
        {"content": "", "tool_calls": [{"name": "pay", "args": {"order": 7, "amount": 5}, "id": "p1"}]},
        {"content": "Paid."},
        {"content": "", "tool_calls": [{"name": "pay", "args": {"order": 8, "amount": 9}, "id": "p2"}]},
        {"content": "Paid again."},
    ]
    return create_agent(
        ScriptedModel(turns),
        [pay],
        middleware=[HumanInTheLoopMiddleware({"pay": True})],
        checkpointer=saver,
    )


def _new_id() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def _payment_log(thread_id: str) -> tuple[list[StoredEvent], ThreadRecord]:
    """Two reviewed payments, as stored for ``thread_id`` (its id is part of every hash)."""
    memory = InMemorySaver()
    agent = _payment_agent(memory)
    for text in ("pay order 7", "pay order 8"):
        agent.invoke({"messages": text}, config(thread_id))
        agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config(thread_id))
    read = memory.read(thread_id)
    assert read.record is not None
    return read.events, read.record


def _store_log(location: Location, events: list[StoredEvent], record: ThreadRecord) -> tuple[Any, str]:
    """``events`` appended as they are to the location's store, as the thread they were made for."""
    thread_id = record.thread_id
    saver = location.shared_saver()
    renumbered = replace(record, head_seq=events[-1].seq if events else 0)
    saver.append(thread_id, Append(events, expected_seq=0, record=renumbered))
    return saver, thread_id


def _readers(agent: Any, thread_id: str) -> dict[str, Any]:
    return {
        "get_state": lambda: agent.get_state(config(thread_id)),
        "get_state_history": lambda: list(agent.get_state_history(config(thread_id))),
        "get_audit_trail": lambda: agent.get_audit_trail(config(thread_id)),
        "invoke(None)": lambda: agent.invoke(None, config(thread_id)),
    }


def _all_refuse(agent: Any, thread_id: str, first_bad: int | None = None) -> None:
    for name, reader in _readers(agent, thread_id).items():
        with pytest.raises(SerializationError) as caught:
            reader()
        exc = caught.value
        assert exc.thread_id == thread_id, name
        assert repr(thread_id) in str(exc) and f"record {exc.seq}" in str(exc), (name, str(exc))
        if first_bad is not None:
            assert exc.seq == first_bad, (name, str(exc))
    report = agent.verify_audit(config(thread_id))
    assert not report.ok and report.first_bad is not None and report.reason


def test_an_intact_log_verifies(location: Location, tmp_path: Path) -> None:
    """Rule 18: every record's hash matches; the report says how many were checked."""
    events, record = _payment_log(_new_id())
    saver, thread_id = _store_log(location, events, record)
    agent = _payment_agent(saver)
    report = agent.verify_audit(config(thread_id))
    assert (report.ok, report.records, report.head_seq, report.first_bad) == (
        True,
        len(events),
        len(events),
        None,
    )
    assert agent.get_state(config(thread_id)).values["messages"][-1].content == "Paid again."
    # the head's hash is the last record's seal: it vouches for every record before it
    assert report.head_hash == unseal(events[-1].payload)[0].hex()  # type: ignore[union-attr]
    assert not agent.verify_audit(config("no-such-thread")).ok


def test_one_flipped_bit_in_a_small_record_never_loads_as_other_data(location: Location) -> None:
    """Defect 6: "paid 5 for order 7" flipped to "paid 4 ..." used to load silently."""
    events, record = _payment_log(_new_id())
    (victim,) = [e for e in events if e.kind == "tool_finished" and b"paid 5 for order 7" in e.payload]
    assert len(unseal(victim.payload)[1]) <= 256  # small: stored without compression, no checksum of its own
    damaged = [
        replace(e, payload=e.payload.replace(b"paid 5", b"paid 4")) if e is victim else e for e in events
    ]
    saver, thread_id = _store_log(location, damaged, record)
    _all_refuse(_payment_agent(saver), thread_id, first_bad=victim.seq)


def _copied_row(events: list[StoredEvent], index: int, source: int) -> list[StoredEvent]:
    donor = events[source]
    return [replace(donor, seq=e.seq) if i == index else e for i, e in enumerate(events)]


def test_a_record_copied_from_another_row_or_thread_never_loads(location: Location) -> None:
    """Defect 6: a whole record copied from another row used to load in the audit trail."""
    events, record = _payment_log(_new_id())
    finished = [i for i, e in enumerate(events) if e.kind == "tool_finished"]
    saver, thread_id = _store_log(location, _copied_row(events, finished[1], finished[0]), record)
    _all_refuse(_payment_agent(saver), thread_id, first_bad=events[finished[1]].seq)

    events, record = _payment_log(_new_id())
    other, _ = _payment_log("another-thread")
    from_other = [other[i] if i == finished[0] else e for i, e in enumerate(events)]
    saver, thread_id = _store_log(location, from_other, record)
    _all_refuse(_payment_agent(saver), thread_id, first_bad=events[finished[0]].seq)


def test_a_removed_or_moved_record_never_loads(location: Location) -> None:
    events, record = _payment_log(_new_id())
    middle = len(events) // 2
    removed = [replace(e, seq=e.seq - 1) if i > middle else e for i, e in enumerate(events) if i != middle]
    saver, thread_id = _store_log(location, removed, record)
    _all_refuse(_payment_agent(saver), thread_id, first_bad=middle + 1)

    events, record = _payment_log(_new_id())
    a, b = middle, middle + 1
    swapped = [
        replace(events[b], seq=e.seq) if i == a else replace(events[a], seq=e.seq) if i == b else e
        for i, e in enumerate(events)
    ]
    saver, thread_id = _store_log(location, swapped, record)
    _all_refuse(_payment_agent(saver), thread_id, first_bad=a + 1)


column_damage = st.one_of(
    st.tuples(st.just("flip"), st.tuples(st.integers(0, 100_000), st.integers(1, 255))),
    st.tuples(st.just("truncate"), st.integers(0, 100_000)),
    st.tuples(st.just("replace"), st.binary(max_size=80)),
    st.tuples(
        st.just("kind"), st.sampled_from(["input", "step", "update", "interrupt", "resume", "tool_finished"])
    ),
    st.tuples(
        st.just("time"),
        st.sampled_from([0.0, 1.0, -1e18, 1e300, float("inf"), 1.5e9]) | st.floats(0, 4e9, allow_nan=False),
    ),
    st.tuples(st.just("copy"), st.integers(0, 1_000)),
    st.tuples(st.just("swap"), st.integers(0, 1_000)),
)


def _damaged(events: list[StoredEvent], index: int, how: tuple[str, Any]) -> list[StoredEvent]:
    kind, detail = how
    victim = events[index]
    out = list(events)
    if kind == "copy":
        return _copied_row(events, index, detail % len(events))
    if kind == "swap":
        other = detail % len(events)
        out[index] = replace(events[other], seq=victim.seq)
        out[other] = replace(victim, seq=events[other].seq)
        return out
    if kind == "kind":
        out[index] = replace(victim, kind=detail)
    elif kind == "time":
        out[index] = replace(victim, created_at=detail)
    elif kind == "replace":
        out[index] = replace(victim, payload=bytes(detail))
    elif kind == "truncate":
        out[index] = replace(victim, payload=victim.payload[: detail % len(victim.payload)])
    else:
        position, mask = detail
        position %= len(victim.payload)
        payload = victim.payload
        out[index] = replace(
            victim, payload=payload[:position] + bytes([payload[position] ^ mask]) + payload[position + 1 :]
        )
    return out


@SETTINGS
@given(data=st.data())
def test_any_damaged_column_of_any_record_fails_loudly_and_never_loads(
    location: Location, data: st.DataObject
) -> None:
    """Rules 10 and 18: only SerializationError, naming the thread and a record, from every
    reader, and verify_audit names the first record that does not match."""
    events, record = _payment_log(_new_id())
    index = data.draw(st.integers(0, len(events) - 1), label="record")
    damaged = _damaged(events, index, data.draw(column_damage, label="damage"))
    if damaged == events:
        return  # the damage changed nothing (a swap with itself, a time set to its own value)
    saver, thread_id = _store_log(location, damaged, record)
    _all_refuse(_payment_agent(saver), thread_id)


def test_a_pending_review_whose_kind_was_changed_fails_loudly(location: Location, tmp_path: Path) -> None:
    """Defect 6: a review's kind column changed (or set to nonsense) used to load as that kind."""
    damaged: dict[str, str] = {}
    for kind in ("outcome_unknown", "bogus"):
        memory = InMemorySaver()
        agent = build_agent(memory, tmp_path / "tool.log")
        new = _new_id()
        damaged[new] = start(agent, new)
        read = memory.read(new)
        assert read.record is not None and read.record.pending
        review = replace(read.record.pending[0], kind=kind)
        saver, _ = _store_log(location, read.events, replace(read.record, pending=(review,)))
        with pytest.raises(SerializationError, match=r"thread 't-[0-9a-f]+', pending interrupt") as caught:
            build_agent(saver, tmp_path / "tool.log").list_interrupts()
        assert caught.value.thread_id in damaged
        assert damaged[caught.value.thread_id] in str(caught.value)


def test_a_pruned_thread_stays_verifiable_and_goes_on(location: Location, tmp_path: Path) -> None:
    """Rule 18 with pruning: the snapshot's anchors vouch for the rows kept after a gap,
    through several prunes, a prune at the head, and runs after each."""
    saver = location.shared_saver()
    agent = build_agent(saver, tmp_path / "tool.log")
    for turn in range(4):
        agent.invoke(approve(start(agent, "t")), config("t"))
        assert agent.prune_thread("t", keep_last=1 + turn % 2) > 0
        report = agent.verify_audit(config("t"))
        assert report.ok, report
        fresh = build_agent(saver, tmp_path / "tool.log")
        assert fresh.get_state(config("t")).values["messages"][-1].content == "done"
        assert len([e for e in fresh.get_audit_trail(config("t")) if e.event == "answered"]) == turn + 1


def test_a_kept_audit_record_damaged_after_pruning_is_found(tmp_path: Path) -> None:
    saver = InMemorySaver()
    agent = build_agent(saver, tmp_path / "tool.log")
    for _ in range(3):
        agent.invoke(approve(start(agent, "t")), config("t"))
    agent.prune_thread("t", keep_last=1)
    rows = saver._events["t"]  # type: ignore[attr-defined]
    index = next(i for i, e in enumerate(rows) if e.kind == "resume")
    rows[index] = replace(rows[index], payload=rows[index].payload.replace(b"approve", b"apprxve"))
    fresh = build_agent(saver, tmp_path / "tool.log")
    report = fresh.verify_audit(config("t"))
    assert (report.ok, report.first_bad) == (False, rows[index].seq)
    with pytest.raises(SerializationError, match=f"record {rows[index].seq}: it does not match its hash"):
        fresh.get_audit_trail(config("t"))


def test_the_hash_of_a_record_is_the_one_rule_2_defines_and_never_changes() -> None:
    """Rule 2, pinned: records sealed by any earlier version keep verifying."""
    import hashlib
    import struct

    from handrail.checkpoint.integrity import GENESIS, link

    body = b'{"step":"model","next":["tools"]}'
    expected = hashlib.sha256(GENESIS)
    for part in (
        (2).to_bytes(4, "big"),
        b"t1",
        struct.pack(">qd", 7, 1764633600.25),
        (4).to_bytes(4, "big"),
        b"step",
        body,
    ):
        expected.update(part)
    assert link(GENESIS, "t1", 7, "step", 1764633600.25, body) == expected.digest()
    # the value the version that sealed the first records gave
    assert expected.hexdigest() == "2d15033bc981a07c3aeec733d430ccd57afdf00626d95dc005a9b178b37bc7df"
