"""SPEC rule 10 on every backend: damaged records fail loudly, naming thread and record.

Whatever bytes a stored record holds, loading it either gives the thread back or raises
SerializationError that names the thread and the record - never another error, and
never pickle.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from _damage import baseline, check_readers, fill
from _stores import Location, approve, build_agent, config, start
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handrail import InMemorySaver
from handrail.checkpoint.base import Append, PendingFilter, StoredEvent, ThreadFilter, ThreadRecord
from handrail.errors import SerializationError

from _support import resealed

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _a_valid_log(tmp_path: Path) -> tuple[list[StoredEvent], ThreadRecord]:
    """A whole review cycle's log: input, model, interrupt, resume, tool, ..., final answer."""
    memory = InMemorySaver()
    agent = build_agent(memory, tmp_path / "tool.log")
    agent.invoke(approve(start(agent, "t")), config("t"))
    read = memory.read("t")
    assert read.record is not None
    return read.events, read.record


@pytest.fixture(scope="module")
def valid_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[StoredEvent], ThreadRecord]:
    return _a_valid_log(tmp_path_factory.mktemp("log"))


def _damage(payload: bytes, how: tuple[str, Any]) -> bytes:
    kind, detail = how
    if kind == "replace":
        return bytes(detail)
    if kind == "truncate":
        return payload[: detail % len(payload)]
    position, mask = detail
    position %= len(payload)
    return payload[:position] + bytes([payload[position] ^ mask]) + payload[position + 1 :]


damage = st.one_of(
    st.tuples(st.just("replace"), st.binary(max_size=120)),
    st.tuples(
        st.just("replace"), st.sampled_from([b"", b"null", b"[]", b"1", b'"x"', b'{"__hr__":"pickle"}'])
    ),
    st.tuples(st.just("truncate"), st.integers(min_value=0, max_value=100_000)),
    st.tuples(st.just("flip"), st.tuples(st.integers(0, 100_000), st.integers(1, 255))),
)


def _expect_loud(exc: SerializationError, thread_id: str, head: int) -> None:
    assert exc.thread_id == thread_id
    assert exc.seq is not None and 1 <= exc.seq <= head
    assert repr(thread_id) in str(exc) and f"record {exc.seq}" in str(exc)


@SETTINGS
@given(data=st.data())
def test_damaged_event_payloads_load_or_fail_loudly(
    location: Location, tmp_path: Path, valid_log: tuple[list[StoredEvent], ThreadRecord], data: st.DataObject
) -> None:
    events, record = valid_log
    index = data.draw(st.integers(0, len(events) - 1), label="damaged event")
    how = data.draw(damage, label="damage")
    thread_id = f"t-{uuid.uuid4().hex[:8]}"
    damaged = [replace(e, payload=_damage(e.payload, how)) if i == index else e for i, e in enumerate(events)]
    saver = location.shared_saver()
    saver.append(thread_id, Append(damaged, expected_seq=0, record=replace(record, thread_id=thread_id)))
    assert saver.read(thread_id).events == damaged  # stored exactly as given

    agent = build_agent(saver, tmp_path / "tool.log")  # a fresh agent: no cached reading
    try:
        agent.get_state(config(thread_id))
        list(agent.get_state_history(config(thread_id)))
    except SerializationError as exc:
        _expect_loud(exc, thread_id, record.head_seq)


def test_an_unknown_event_kind_fails_loudly(
    location: Location, tmp_path: Path, valid_log: tuple[list[StoredEvent], ThreadRecord]
) -> None:
    events, record = valid_log
    saver = location.saver()
    damaged = [replace(e, kind="pickled") if e.seq == 2 else e for e in events]
    with pytest.raises(SerializationError, match=r"thread 't', record 2: it does not match its hash"):
        saver.append("t", Append(damaged, expected_seq=0, record=record))
        build_agent(saver, tmp_path / "tool.log").get_state(config("t"))
    # a writer that sealed the unknown kind (rule 18 passes) is still refused (rule 10)
    saver.delete_thread("t")
    saver.append("t", Append(resealed("t", damaged), expected_seq=0, record=record))
    with pytest.raises(
        SerializationError, match=r"thread 't', record 2: unknown event kind 'pickled'"
    ) as caught:
        build_agent(saver, tmp_path / "tool.log").get_state(config("t"))
    _expect_loud(caught.value, "t", record.head_seq)


# The thread row, written by the SQL savers themselves -------------------------------------------
def _corrupt(location: Location, sql_sqlite: str, sql_postgres: str, params: tuple[Any, ...]) -> None:
    if location.backend == "sqlite":
        import sqlite3

        with sqlite3.connect(location.path) as conn:
            conn.execute(sql_sqlite, params)
    else:
        import psycopg

        assert location.dsn is not None
        with psycopg.connect(location.dsn, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{location.schema}"')
            conn.execute(sql_postgres.replace("{t}", "handrail_"), params)


def _paused_thread(location: Location, tmp_path: Path, thread_id: str) -> Any:
    saver = location.saver()
    agent = build_agent(saver, tmp_path / "tool.log")
    agent.invoke(
        {"messages": [f"write_file:{thread_id}"]},
        {"configurable": {"thread_id": thread_id}, "metadata": {"team": "x"}},
    )
    return saver, agent


def _every_reader_is_loud(saver: Any, agent: Any, thread_id: str, what: str) -> None:
    readers = {
        "get_thread": lambda: saver.get_thread(thread_id),
        "read": lambda: saver.read(thread_id),
        "list_threads": lambda: saver.list_threads(ThreadFilter()),
        "get_state": lambda: agent.get_state(config(thread_id)),
    }
    for name, reader in readers.items():
        with pytest.raises(SerializationError, match=f"thread {thread_id!r}.*{what}") as caught:
            reader()
        assert caught.value.thread_id == thread_id, name
    # A filter may leave a damaged row out without reading it (Postgres compares JSON in
    # the server); if it reads the row, it fails loudly.
    filtered = {
        "list_threads by metadata": lambda: saver.list_threads(ThreadFilter(metadata={"team": "x"})),
        "list_pending by metadata": lambda: saver.list_pending(PendingFilter(metadata={"team": "x"})),
    }
    for name, reader in filtered.items():
        try:
            assert reader() == [], name
        except SerializationError as exc:
            assert exc.thread_id == thread_id and what in str(exc), name


@pytest.mark.parametrize(
    ("sqlite_value", "postgres_value"),
    [
        (b"\x80\x04pickle", '"not an object"'),
        (b"[1, 2]", "[1, 2]"),
        (b'{"__hr__": "pickle", "x": 1}', '{"__hr__": "pickle", "x": 1}'),
        (b'{"team": "x", "when": {"__hr__": "datetime", "iso": 5}}', '{"team": "x", "w": {"__hr__": 3}}'),
    ],
)
def test_damaged_thread_metadata_fails_loudly(
    durable_location: Location, tmp_path: Path, sqlite_value: bytes, postgres_value: str
) -> None:
    saver, agent = _paused_thread(durable_location, tmp_path, "t")
    _corrupt(
        durable_location,
        "UPDATE handrail_threads SET metadata = ? WHERE thread_id = ?",
        "UPDATE {t}threads SET metadata = %s::jsonb WHERE thread_id = %s",
        (sqlite_value if durable_location.backend == "sqlite" else postgres_value, "t"),
    )
    _every_reader_is_loud(saver, agent, "t", "thread record")


def test_an_unknown_status_fails_loudly(durable_location: Location, tmp_path: Path) -> None:
    saver, agent = _paused_thread(durable_location, tmp_path, "t")
    _corrupt(
        durable_location,
        "UPDATE handrail_threads SET status = ? WHERE thread_id = ?",
        "UPDATE {t}threads SET status = %s WHERE thread_id = %s",
        ("frozen", "t"),
    )
    with pytest.raises(SerializationError, match="thread 't', thread record: unknown status 'frozen'"):
        saver.get_thread("t")
    with pytest.raises(SerializationError, match="thread 't'"):
        agent.get_state(config("t"))


def test_damaged_pending_review_fails_loudly(durable_location: Location, tmp_path: Path) -> None:
    saver, agent = _paused_thread(durable_location, tmp_path, "t")
    _corrupt(
        durable_location,
        "UPDATE handrail_pending SET payload = ? WHERE thread_id = ?",
        "UPDATE {t}pending SET payload = %s WHERE thread_id = %s",
        (b"\x80\x04\x95pickle", "t"),
    )
    with pytest.raises(SerializationError, match="thread 't'") as caught:
        agent.list_interrupts()
    assert caught.value.thread_id == "t"
    if durable_location.backend == "sqlite":
        _corrupt(
            durable_location, "UPDATE handrail_pending SET tools = ? WHERE thread_id = ?", "", ("{oops", "t")
        )
        with pytest.raises(SerializationError, match=r"thread 't', pending review '[0-9a-f]+'"):
            saver.get_thread("t")
        with pytest.raises(SerializationError, match="thread 't'"):
            saver.list_pending(PendingFilter())


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@SETTINGS
@given(data=st.data())
def test_random_thread_metadata_loads_or_fails_loudly(
    durable_location: Location, tmp_path: Path, data: st.DataObject
) -> None:
    saver = durable_location.shared_saver()
    if not durable_location.scratch.setdefault("paused", False):
        durable_location.scratch["paused"] = True
        build_agent(saver, tmp_path / "tool.log").invoke(
            {"messages": ["write_file:t"]}, {"configurable": {"thread_id": "t"}, "metadata": {"team": "x"}}
        )
    if durable_location.backend == "sqlite":
        value: Any = data.draw(st.binary(max_size=60) | json_values.map(lambda v: repr(v).encode()))
    else:
        import json

        value = json.dumps(data.draw(json_values)).replace("\\u0000", "")
    _corrupt(
        durable_location,
        "UPDATE handrail_threads SET metadata = ? WHERE thread_id = ?",
        "UPDATE {t}threads SET metadata = %s::jsonb WHERE thread_id = %s",
        (value, "t"),
    )
    for read in (
        lambda: saver.get_thread("t"),
        lambda: saver.list_threads(ThreadFilter(metadata={"team": "x"})),
        lambda: saver.list_pending(PendingFilter(metadata={"team": "x"})),
    ):
        try:
            read()
        except SerializationError as exc:
            assert exc.thread_id == "t" and "thread 't', thread record" in str(exc)


# A log whose last record was lost (issue 24, part 4) ---------------------------------------------
def _lose_last_record(location: Location, thread_id: str, how: str) -> int:
    """Lose the last record of a thread's log, as a damaged ``seq`` or ``thread_id`` column
    loses it (in memory: the record taken from its list, or moved to another thread's);
    return its number."""
    saver = location.shared_saver()
    if location.backend == "memory":
        log = saver._events[thread_id]
        last = log.pop()
        if how == "thread_id":
            saver._events.setdefault("elsewhere", []).append(last)
        return int(last.seq)
    head = saver.get_thread(thread_id).head_seq
    change = "seq = -seq" if how == "seq" else "thread_id = 'elsewhere'"
    _corrupt(
        location,
        f"UPDATE handrail_events SET {change} WHERE thread_id = ? AND seq = ?",
        f"UPDATE {{t}}events SET {change} WHERE thread_id = %s AND seq = %s",
        (thread_id, head),
    )
    return int(head)


@pytest.mark.parametrize("how", ["seq", "thread_id"])
def test_a_log_that_lost_its_last_record_is_refused_naming_the_thread(
    location: Location, tmp_path: Path, how: str
) -> None:
    """Issue 24, part 4: the thread loaded as it was one record earlier, its review gone.
    Now every reader of its log compares the log's end with the thread's row."""
    saver = location.shared_saver()
    start(build_agent(saver, tmp_path / "tool.log"), "t")  # its last record asks for the review
    head = _lose_last_record(location, "t", how)
    agent = build_agent(saver, tmp_path / "tool.log")  # a new agent: nothing cached
    for name, read in {
        "get_state": lambda: agent.get_state(config("t")),
        "history": lambda: list(agent.get_state_history(config("t"))),
        "audit trail": lambda: agent.get_audit_trail(config("t")),
        "resume": lambda: agent.invoke(None, config("t")),
    }.items():
        # the row's head is not where the log ends; or (SQLite) the store refuses the
        # negative number it reads back
        gone = rf"cannot load thread 't', (thread record: its head is record {head}|record -{head}: )"
        with pytest.raises(SerializationError, match=gone) as caught:
            read()
        assert caught.value.thread_id == "t", name
    report = agent.verify_audit(config("t"))
    assert not report.ok and report.first_bad in (0, head), report


# The in-memory store: a kept record changed after it was written -------------------------------------
def _kept_objects(saver: InMemorySaver) -> list[tuple[str, Any]]:
    """Every object the saver keeps for the rows derived from logs, by a name: thread
    records, their pending reviews, deletion records."""
    found: list[tuple[str, Any]] = []
    for thread_id, record in sorted(saver._records.items()):
        found.append((f"thread record {thread_id}", record))
        found += [(f"pending review {n} of {thread_id}", review) for n, review in enumerate(record.pending)]
    found += [(f"deletion record {n}", deletion) for n, (deletion, _) in enumerate(saver._deletions)]
    return found


@st.composite
def _changed(draw: st.DrawFn, value: Any) -> Any:
    """Another value for a field that holds ``value``: of its type, or of another."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.sampled_from([None, 0, 1, -1, "", "x", b"", (), {}, 1.5, True]))
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + draw(st.sampled_from([-1, 1, 2**32]))
    if isinstance(value, float):
        return value + draw(st.sampled_from([-1.0, 1e-6, 3600.0]))
    if isinstance(value, str):
        return draw(st.sampled_from(["", value + "x", value[:-1], "interrupted", "idle", "t", "u"]))
    if isinstance(value, bytes):
        return value[:-1] if value and draw(st.booleans()) else value + b"x"
    if isinstance(value, tuple):
        return value[:-1] if value else ("x",)
    if isinstance(value, dict):
        return {**value, "team": "z"}
    return "x"


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_changed_row_of_the_memory_store_loads_exactly_or_is_refused_naming_a_thread(
    memory_store: tuple[InMemorySaver, dict[str, Any]], data: st.DataObject
) -> None:
    """What damage means in memory (``checkpoint/_kept.py``): a field of a kept record set
    to another value. Every reader refuses it, naming a thread, or returns what it did."""
    from dataclasses import fields

    saver, expected = memory_store
    name, kept = data.draw(st.sampled_from(_kept_objects(saver)), label="object")
    field = data.draw(st.sampled_from([f.name for f in fields(kept)]), label="field")
    original = getattr(kept, field)
    value = data.draw(_changed(original), label="value")
    if value == original and type(value) is type(original):
        return
    thread_id = getattr(kept, "thread_id", None) or next(
        (record.thread_id for record in saver._records.values() if kept in record.pending), None
    )
    object.__setattr__(kept, field, value)
    try:
        check_readers(saver, expected, thread_id, f"{name}.{field} = {value!r:.80}")
    finally:
        object.__setattr__(kept, field, original)


def test_metadata_changed_in_place_in_memory_is_refused(
    memory_store: tuple[InMemorySaver, dict[str, Any]],
) -> None:
    saver, _ = memory_store
    metadata = saver._records["t"].metadata
    assert isinstance(metadata, dict)
    metadata["team"] = "z"
    try:
        with pytest.raises(SerializationError, match="thread 't', thread record: it does not match its seal"):
            saver.get_thread("t")
        with pytest.raises(SerializationError, match="thread 't'"):
            saver.list_pending(PendingFilter(metadata={"team": "z"}))
    finally:
        metadata["team"] = "x"
    assert saver.get_thread("t") is not None


@pytest.fixture
def memory_store() -> tuple[InMemorySaver, dict[str, Any]]:
    """An in-memory store of the threads of ``_damage.fill`` and what each reader returns
    (copied: a damaged object must not change what the test expects)."""
    import copy

    saver = InMemorySaver()
    fill(saver)
    return saver, copy.deepcopy(baseline(saver))
