"""SPEC rule 10 on PostgreSQL, column by column: a damaged column never loads as something else.

The PostgreSQL twin of ``test_sqlite_damaged_columns.py`` (issue 24, part 4: 665 of 4,500
damaged cases used to load other data without an error). On a schema of real threads
(``_damage.fill``), Hypothesis damages one column of one row of any of the saver's
tables - a flipped bit, byte or character, a truncated value, another value of the
column's type, an out-of-range number, NULL - and every reader must raise
SerializationError naming a thread or return exactly what it returned undamaged (a
filtered listing may leave out items of the damaged row's thread: ``_damage``). Each
example puts the value back afterwards, so the examples share one schema.
"""

from __future__ import annotations

import math
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg.errors
import pytest
from _damage import baseline, check_readers, fill
from _stores import drop_schema
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from handrail.checkpoint.postgres import PostgresSaver

TABLES = (
    "handrail_threads",
    "handrail_events",
    "handrail_pending",
    "handrail_pending_tools",
    "handrail_pending_metadata",
    "handrail_readings",
    "handrail_runs",
    "handrail_deletions",
    "handrail_feed",
)
_TEXTS = [
    "",
    "x",
    "t",
    "u",
    "d",
    "zz",
    "idle",
    "interrupted",
    "interrupt",
    "outcome_unknown",
    "write_file",
    "sql",
]
_JSON = ["null", "1", "true", '"x"', '"y"', "[]", "{}", '{"team": "y"}', '{"team": "x"}', '{"id": "ann"}']
_LISTS: list[list[str]] = [[], ["sql"], ["write_file"], ["touch_file"], ["touch_file", "write_file"]]


class Store:
    """The schema of real threads, a saver on it, what every reader returns, its columns."""

    def __init__(self, dsn: str, schema: str, saver: PostgresSaver, expected: dict[str, Any]) -> None:
        self.dsn, self.schema, self.saver, self.expected = dsn, schema, saver, expected
        with self.connect() as conn:
            self.columns = [
                (table, str(name), str(kind))
                for table, name, kind in conn.execute(
                    "SELECT table_name, column_name, udt_name FROM information_schema.columns "
                    "WHERE table_schema = %s AND table_name = ANY(%s) ORDER BY table_name, ordinal_position",
                    (schema, list(TABLES)),
                )
            ]

    def connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self.dsn, autocommit=True)
        conn.execute(f'SET search_path TO "{self.schema}"')
        return conn


@pytest.fixture(scope="module")
def store(postgres_server: str) -> Iterator[Store]:
    schema = f"hr_damage_{uuid.uuid4().hex[:12]}"
    saver = PostgresSaver.from_conn_string(postgres_server, schema=schema, pool_size=2)
    try:
        saver.setup()
        fill(saver)
        saver.claim_run("t", "r1")  # a live run's row, to damage too
        yield Store(postgres_server, schema, saver, baseline(saver))
    finally:
        saver.close()
        drop_schema(postgres_server, schema)


def _flip_float(value: float, bit: int) -> float:
    (raw,) = struct.unpack("<Q", struct.pack("<d", value))
    (result,) = struct.unpack("<d", struct.pack("<Q", raw ^ (1 << bit)))
    return float(result)


@st.composite
def damage(draw: st.DrawFn, kind: str, original: Any) -> tuple[str, Any]:
    """Another value for a column of type ``kind`` holding ``original``: ("value", v), or
    ("json", text) for jsonb, or ("null", None)."""
    if draw(st.integers(0, 9)) == 0:
        return "null", None
    if kind in ("int8", "int4"):
        top = 62 if kind == "int8" else 30
        flipped = draw(st.one_of(st.just(None), st.integers(0, top)))
        if flipped is not None and isinstance(original, int):
            return "value", original ^ (1 << flipped)
        return "value", draw(st.sampled_from([-1, 0, 1, 2, 3, 7, 2**30]))
    if kind == "float8":
        if isinstance(original, float) and draw(st.booleans()):
            return "value", _flip_float(original, draw(st.integers(0, 63)))
        base = original if isinstance(original, float) and math.isfinite(original) else 0.0
        return "value", draw(
            st.sampled_from([0.0, -1.0, 1e300, math.inf, -math.inf, math.nan, base + 1, base - 1e-6])
        )
    if kind == "jsonb":
        return "json", draw(st.sampled_from(_JSON))
    if kind == "_text":
        return "value", draw(st.sampled_from(_LISTS))
    if kind == "bytea":
        raw = bytes(original) if original is not None else b""
        how = draw(st.sampled_from(["flip", "truncate", "other"]))
        if how == "other" or not raw:
            return "value", draw(st.sampled_from([b"", b"\x00", b"\x06" + bytes(32), b"{}"]))
        if how == "truncate":
            return "value", raw[: draw(st.integers(0, len(raw) - 1))]
        at = draw(st.integers(0, len(raw) - 1))
        return "value", raw[:at] + bytes([raw[at] ^ draw(st.integers(1, 255))]) + raw[at + 1 :]
    text = original if isinstance(original, str) else ""
    how = draw(st.sampled_from(["flip", "truncate", "other"]))
    if how == "other" or not text:
        return "value", draw(st.sampled_from(_TEXTS))
    if how == "truncate":
        return "value", text[: draw(st.integers(0, len(text) - 1))]
    at = draw(st.integers(0, len(text) - 1))
    return "value", text[:at] + draw(st.sampled_from("abxyz019_-é")) + text[at + 1 :]


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
def test_any_damaged_column_of_real_threads_loads_exactly_or_is_refused_naming_a_thread(
    store: Store, data: st.DataObject
) -> None:
    table, column, kind = data.draw(st.sampled_from(store.columns), label="column")
    shown = f"{column}::text" if kind == "jsonb" else column
    with store.connect() as conn:
        # in an order that does not change when a value is put back (unlike the rows' places)
        rows = sorted(
            conn.execute(f"SELECT ctid::text, thread_id, {shown}, {table}::text FROM {table}").fetchall(),
            key=lambda row: row[3],
        )
        if not rows:
            reject()
        place, thread_id, original, _ = data.draw(st.sampled_from(rows), label="row")
        how, value = data.draw(damage(kind, original), label="damage")
        if how == "null":
            try:
                conn.execute(f"ALTER TABLE {table} ALTER COLUMN {column} DROP NOT NULL")
            except psycopg.Error:  # a key column
                reject()
        setter = "%s::jsonb" if kind == "jsonb" else "%s"
        try:
            found = conn.execute(
                f"UPDATE {table} SET {column} = {setter} WHERE ctid = %s::tid AND {column} IS DISTINCT FROM "
                f"{setter} RETURNING ctid::text",
                (value, place, value),
            ).fetchone()
        except psycopg.Error:  # a key another row has, a value its type refuses, an identity
            reject()
        if found is None:  # the same value again
            reject()
        try:
            check_readers(store.saver, store.expected, thread_id, f"{table}.{column} = {value!r:.80}")
        finally:
            conn.execute(f"UPDATE {table} SET {column} = {setter} WHERE ctid = %s::tid", (original, found[0]))
