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
from _stores import Location, approve, build_agent, config, start
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handrail import InMemorySaver
from handrail.checkpoint.base import PendingFilter, StoredEvent, ThreadFilter, ThreadRecord
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
    saver.append(thread_id, damaged, expected_seq=0, record=replace(record, thread_id=thread_id))
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
        saver.append("t", damaged, expected_seq=0, record=record)
        build_agent(saver, tmp_path / "tool.log").get_state(config("t"))
    # a writer that sealed the unknown kind (rule 18 passes) is still refused (rule 10)
    saver.delete_thread("t")
    saver.append("t", resealed("t", damaged), expected_seq=0, record=record)
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
