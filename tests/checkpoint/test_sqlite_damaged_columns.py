"""SPEC rule 10 on SQLite, column by column: a damaged column never loads as something else.

Hypothesis damages one column of one row of every kind the SQLite saver stores
(threads, events, pending reviews and their tool index, saved readings, runs and their
owners, the records deletions leave) in a real file: a flipped bit or byte, a truncated
value, a value of another type, an out-of-range number, NULL. Then every read of the
saver either works or raises SerializationError naming the thread (issue 12, defects 6
and 7: never OverflowError, OSError, ValueError, AttributeError or a bare sqlite3 error).
When the damaged value is out of the range its column allows, some read must refuse it.

On a store of real threads (``_damage``), the same damage, to any column of any table,
must leave every reader - the agent's ``get_state``, history, audit trails, thread
list and inbox with each filter, the store's own - either refusing it, naming a thread,
or returning exactly what it returned undamaged (issue 24, part 4: 566 of 6,000 such
cases used to load other data silently, all in rows derived from the logs, whose seals
now find it: ``checkpoint/seals.py``).
"""

from __future__ import annotations

import math
import os
import shutil
import sqlite3
import struct
import time
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import pytest
from _damage import baseline, check_readers, fill, row_thread
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from handrail import SqliteSaver
from handrail.checkpoint._records import MAX_TIME, STATUSES, host_identity
from handrail.checkpoint.base import (
    Append,
    PendingFilter,
    PendingReview,
    StoredEvent,
    ThreadFilter,
    ThreadRecord,
)
from handrail.errors import SerializationError

NOW = time.time()
REVIEW = PendingReview("i1", "interrupt", ("write_file", "sql"), NOW, b'{"question": "may I?"}')


def _is_int(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _is_time(value: Any) -> bool:
    return type(value) in (int, float) and 0 <= value < MAX_TIME


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 65536


def _is_hash(value: Any) -> bool:
    return value is None or (
        isinstance(value, str) and len(value) == 64 and not value.strip("0123456789abcdef")
    )


def _is_tools(value: Any) -> bool:
    try:
        tools = orjson.loads(value)
    except (orjson.JSONDecodeError, TypeError):
        return False
    return isinstance(tools, list) and all(isinstance(tool, str) for tool in tools)


# Each column: (primary key of its table, whether a value is in range); None: not read back
# (an index, an order, a join key: damage there hides or reorders a row, it never loads as
# another value), or only the event hash can tell (a payload's bytes, the metadata's JSON).
ValidIf = Callable[[Any], bool] | None
COLUMNS: dict[str, tuple[tuple[str, ...], dict[str, ValidIf]]] = {
    "handrail_threads": (
        ("thread_id",),
        {
            "thread_id": _is_name,
            "head_seq": lambda v: _is_int(v, 0, 2**63 - 1),
            "status": lambda v: v in STATUSES,
            "epoch": lambda v: isinstance(v, str),
            "created_at": _is_time,
            "updated_at": _is_time,
            "metadata": None,
            # 0 skips the read of the thread's reviews: it loads without them (the inbox still
            # lists them); any other count that is not the number found is refused
            "pending_count": lambda v: _is_int(v, 0, 2**63 - 1),
        },
    ),
    "handrail_events": (
        ("thread_id", "seq"),
        {
            "thread_id": None,
            # a number below 1 (or NULL) takes the event out of the range every read asks
            # for: it is missing, not loaded as another (the event hash tells it is gone)
            "seq": lambda v: v is None or type(v) is int,
            "kind": _is_name,
            "created_at": _is_time,
            "payload": lambda v: isinstance(v, (bytes, str)),
        },
    ),
    "handrail_pending": (
        ("thread_id", "interrupt_id"),
        {
            "thread_id": lambda v: v == "t",  # elsewhere, the thread's row counts a review missing
            "interrupt_id": _is_name,
            "position": None,
            "kind": _is_name,
            "tools": _is_tools,
            "created_at": _is_time,
            "payload": lambda v: isinstance(v, bytes),
        },
    ),
    "handrail_pending_tools": (
        ("tool", "created_at", "thread_id", "interrupt_id"),
        {"tool": None, "created_at": None, "thread_id": None, "interrupt_id": None},
    ),
    "handrail_readings": (
        ("thread_id",),
        {
            "thread_id": None,
            "seq": lambda v: _is_int(v, 1, 3),
            "created_at": _is_time,
            "payload": lambda v: isinstance(v, (bytes, str)),
        },
    ),
    "handrail_runs": (
        ("thread_id", "run_id"),
        {"thread_id": None, "run_id": _is_name, "owner_id": None, "claimed_at": None},
    ),
    "handrail_run_owners": (
        ("owner_id",),
        {
            "owner_id": None,
            "pid": lambda v: _is_int(v, 1, 2**31 - 1),
            "host": lambda v: isinstance(v, str),
            "expires_at": _is_time,
        },
    ),
    "handrail_deletions": (
        ("id",),
        {
            "thread_id": _is_name,
            "deleted_at": _is_time,
            "deleted_by": None,  # JSON: another value that parses is for nothing to tell
            "head_seq": lambda v: _is_int(v, 0, 2**63 - 1),
            "head_hash": _is_hash,
            "metadata": None,
        },
    ),
}
CELLS = [(table, column) for table, (_, columns) in COLUMNS.items() for column in columns]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file with a paused thread 't' (a review, a saved reading, a live run), an idle 'u',
    and the records of two deleted threads, 'v' and 'w'."""
    path = tmp_path_factory.mktemp("template") / "threads.db"
    with SqliteSaver(path) as saver:
        for thread_id, pending in (("t", (REVIEW,)), ("u", ()), ("v", ()), ("w", ())):
            saver.append(
                thread_id,
                Append(
                    [StoredEvent(seq, "step", NOW + seq, b'{"n": %d}' % seq) for seq in (1, 2, 3)],
                    expected_seq=0,
                    record=ThreadRecord(
                        thread_id,
                        3,
                        "interrupted" if pending else "idle",
                        "epoch-1",
                        NOW,
                        NOW + 3,
                        {"team": "x"},
                        pending,
                    ),
                    reading=StoredEvent(3, "reading", NOW + 3, b'{"state": 3}'),
                ),
            )
        saver.delete_thread("v", by={"id": "ops", "roles": ["admin"]})
        saver.delete_thread("w")
    # closed on leaving, not when collected (Python 3.11's sqlite3 connection is in a cycle), so
    # that the file is whole, its write-ahead log folded in, when the tests copy it
    with closing(sqlite3.connect(path)) as conn, conn:
        # a run alive in this process (closing released the saver's)
        conn.execute(
            "INSERT INTO handrail_run_owners VALUES ('owner', ?, ?, ?)",
            (os.getpid(), host_identity(), NOW + 3600),
        )
        conn.execute("INSERT INTO handrail_runs VALUES ('t', 'r1', 'owner', ?)", (NOW,))
        # as if 'v''s last record had been sealed
        conn.execute("UPDATE handrail_deletions SET head_hash = ? WHERE thread_id = 'v'", ("ab" * 32,))
    return path


def _flip_number(value: int | float, bit: int) -> int | float:
    if isinstance(value, int):
        flipped = (value ^ (1 << bit)) & (2**64 - 1)
        return flipped - 2**64 if flipped >= 2**63 else flipped
    (raw,) = struct.unpack("<Q", struct.pack("<d", value))
    (result,) = struct.unpack("<d", struct.pack("<Q", raw ^ (1 << bit)))
    return float(result)


@st.composite
def damage(draw: st.DrawFn, original: Any) -> tuple[str, Any]:
    """How to damage ``original``: ("value", v), ("text", utf-8 bytes or not), or ("null", None)."""
    how = draw(st.sampled_from(["flip", "truncate", "type", "range", "null"]))
    if how == "null":
        return "null", None
    if how == "type":
        return "value", draw(
            st.sampled_from([0, 1, -7, 3.5, "x", "", "idle", b"\x00\xff", b"{}", "[]", "{}"])
        )
    if how == "range":
        return "value", draw(
            st.sampled_from(
                [-1, 0, 2**31, 2**63 - 1, -(2**63), 1e300, -1e18, math.inf, -math.inf, MAX_TIME, 1e-300, -0.5]
            )
        )
    if original is None:  # NULL (a deletion record's head hash): nothing to flip or cut
        reject()
    if isinstance(original, (int, float)):
        if how == "truncate":
            return "value", int(original) // 1000
        return "value", _flip_number(original, draw(st.integers(0, 63)))
    raw = original.encode() if isinstance(original, str) else bytes(original)
    if not raw:
        reject()
    if how == "truncate":
        raw = raw[: draw(st.integers(0, len(raw) - 1))]
    else:
        position = draw(st.integers(0, len(raw) - 1))
        raw = raw[:position] + bytes([raw[position] ^ draw(st.integers(1, 255))]) + raw[position + 1 :]
    return ("text", raw) if isinstance(original, str) else ("value", raw)


def _lenient(raw: bytes) -> str | bytes:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw


def _values(conn: sqlite3.Connection, table: str, column: str) -> Counter[Any]:
    conn.text_factory = _lenient
    return Counter(row[0] for row in conn.execute(f"SELECT {column} FROM {table}"))


def _damage_file(
    path: Path, table: str, column: str, data: st.DataObject, keys: tuple[str, ...] | None = None
) -> Any:
    """Damage one row's ``column`` in the file; returns the value stored now (and, with
    ``keys``, the row's key before the damage)."""
    found_keys = keys if keys is not None else COLUMNS[table][0]
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.text_factory = _lenient
        rows = conn.execute(f"SELECT {', '.join(found_keys)}, {column} FROM {table}").fetchall()
        if not rows:
            reject()
        *key, original = data.draw(st.sampled_from(rows), label="row")
        how, value = data.draw(damage(original), label="damage")
        if how == "null":  # the schema refuses NULL: damage the schema first
            conn.execute("PRAGMA writable_schema = ON")
            conn.execute(
                "UPDATE sqlite_master SET sql = replace(sql, 'NOT NULL', '') "
                "WHERE type = 'table' AND name = ?",
                (table,),
            )
            conn.execute("PRAGMA writable_schema = OFF")
            conn.close()
            conn = sqlite3.connect(path, isolation_level=None)
            conn.text_factory = _lenient
        before = _values(conn, table, column)
        where = " AND ".join(f"{k} IS ?" for k in found_keys)
        setter = "CAST(? AS TEXT)" if how == "text" else "?"
        try:
            changed = conn.execute(
                f"UPDATE {table} SET {column} = {setter} WHERE {where}", (value, *key)
            ).rowcount
        except sqlite3.IntegrityError:  # a key another row has, or NULL in a key
            reject()
        assert changed == 1
        added = _values(conn, table, column) - before
        if not added:  # the same value again
            reject()
        (stored,) = added
        return (key, stored) if keys is not None else stored
    finally:
        conn.close()


def _reads(saver: SqliteSaver) -> list[tuple[str, Callable[[], Any]]]:
    return [
        ("get_thread", lambda: saver.get_thread("t")),
        ("read", lambda: saver.read("t")),
        ("read from reading", lambda: saver.read("t", from_reading=True)),
        ("list_threads", lambda: saver.list_threads(ThreadFilter(limit=100))),
        ("list_threads by metadata", lambda: saver.list_threads(ThreadFilter(metadata={"team": "x"}))),
        ("list_pending", lambda: saver.list_pending(PendingFilter())),
        ("list_pending by tool", lambda: saver.list_pending(PendingFilter(tool="write_file"))),
        ("runs_alive", lambda: saver.runs_alive("t")),
        ("read u", lambda: saver.read("u")),
        ("read u from reading", lambda: saver.read("u", from_reading=True)),
        ("list_deletions", lambda: saver.list_deletions()),
        ("list_deletions by metadata", lambda: saver.list_deletions(metadata={"team": "x"})),
    ]


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)
@given(data=st.data())
def test_a_damaged_column_loads_or_raises_serialization_error_naming_the_thread(
    template: Path, tmp_path: Path, data: st.DataObject
) -> None:
    table, column = data.draw(st.sampled_from(CELLS), label="column")
    path = tmp_path / f"damaged-{time.monotonic_ns()}.db"
    shutil.copyfile(template, path)
    try:
        stored = _damage_file(path, table, column, data)
        refused: list[str] = []
        with SqliteSaver(path) as saver:
            for name, read in _reads(saver):
                try:
                    read()
                except SerializationError as exc:
                    assert exc.thread_id is not None, (name, exc)
                    assert str(exc).startswith("cannot load thread "), (name, exc)
                    refused.append(name)
        valid = COLUMNS[table][1][column]
        if valid is not None and not valid(stored):
            assert refused, f"{table}.{column} = {stored!r} loaded without an error"
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


@pytest.mark.parametrize(
    ("column", "value"),
    [("created_at", math.inf), ("created_at", 1e300), ("created_at", -1e18), ("updated_at", MAX_TIME)],
)
def test_a_stored_time_out_of_range_is_damage_not_an_overflow(
    template: Path, tmp_path: Path, column: str, value: float
) -> None:
    """Issue 12, defect 7: inf, 1e300 and -1e18 raised OverflowError/OSError/ValueError."""
    path = tmp_path / "times.db"
    shutil.copyfile(template, path)
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE handrail_threads SET {column} = ? WHERE thread_id = 't'", (value,))
    with (
        SqliteSaver(path) as saver,
        pytest.raises(SerializationError, match="cannot load thread 't', thread record: a time is"),
    ):
        saver.get_thread("t")


def test_an_unknown_pending_kind_is_not_loaded(template: Path, tmp_path: Path) -> None:
    """Issue 12, defect 6: a review whose kind was damaged loaded as that kind."""
    path = tmp_path / "kind.db"
    shutil.copyfile(template, path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE handrail_pending SET kind = ?", (b"\xffbogus",))
        conn.execute("UPDATE handrail_pending SET kind = CAST(kind AS TEXT)")
    with SqliteSaver(path) as saver:
        with pytest.raises(SerializationError, match="cannot load thread 't', pending review 'i1'"):
            saver.get_thread("t")
        with pytest.raises(SerializationError, match="cannot load thread 't', pending review 'i1'"):
            saver.list_pending(PendingFilter())


def test_a_review_gone_from_its_thread_is_damage(template: Path, tmp_path: Path) -> None:
    path = tmp_path / "gone.db"
    shutil.copyfile(template, path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE handrail_pending SET thread_id = 'elsewhere'")
    with (
        SqliteSaver(path) as saver,
        pytest.raises(SerializationError, match="counts 1 pending reviews, 0 found"),
    ):
        saver.get_thread("t")


# Every reader, on a store of real threads: exactly as undamaged, or refused --------------------
KEYS: dict[str, tuple[str, ...]] = {
    "handrail_threads": ("thread_id",),
    "handrail_events": ("thread_id", "seq"),
    "handrail_pending": ("thread_id", "interrupt_id"),
    "handrail_pending_tools": ("tool", "created_at", "thread_id", "interrupt_id"),
    "handrail_readings": ("thread_id",),
    "handrail_runs": ("thread_id", "run_id"),
    "handrail_run_owners": ("owner_id",),
    "handrail_deletions": ("id",),
    "handrail_feed": ("id",),
}


@pytest.fixture(scope="module")
def real_store(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, Any], list[tuple[str, str]]]:
    """A file of real threads (``_damage.fill``) and a live run, what every reader returns
    from it, and every (table, column) it has."""
    path = tmp_path_factory.mktemp("real") / "threads.db"
    with SqliteSaver(path) as saver:
        fill(saver)
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            "INSERT INTO handrail_run_owners VALUES ('owner', ?, ?, ?)",
            (os.getpid(), host_identity(), NOW + 3600),
        )
        conn.execute("INSERT INTO handrail_runs VALUES ('t', 'r1', 'owner', ?)", (NOW,))
        cells = [
            (table, str(row[1])) for table in KEYS for row in conn.execute(f"PRAGMA table_info({table})")
        ]
    with SqliteSaver(path) as saver:
        expected = baseline(saver)
    return path, expected, cells


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)
@given(data=st.data())
def test_any_damaged_column_of_real_threads_loads_exactly_or_is_refused_naming_a_thread(
    real_store: tuple[Path, dict[str, Any], list[tuple[str, str]]], tmp_path: Path, data: st.DataObject
) -> None:
    """Issue 24, part 4: with one column of one row damaged, each reader (``_damage.readers``)
    raises SerializationError naming a thread or returns what the undamaged file gives."""
    template, expected, cells = real_store
    table, column = data.draw(st.sampled_from(cells), label="column")
    path = tmp_path / f"damaged-{time.monotonic_ns()}.db"
    shutil.copyfile(template, path)
    try:
        key, stored = _damage_file(path, table, column, data, KEYS[table])
        with SqliteSaver(path) as saver:
            check_readers(
                saver, expected, row_thread(table, KEYS[table], key), f"{table}.{column} = {stored!r:.80}"
            )
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
