"""Migrations with a step in Python (PostgresMigration): run once, in version order with
the SQL ones, inside the migration's transaction, and rolled back with it on failure."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from _stores import drop_schema

from handrail.checkpoint._records import Migration
from handrail.checkpoint.base import Append, StoredEvent, ThreadRecord
from handrail.checkpoint.integrity import SEAL, unseal
from handrail.checkpoint.postgres._schema import Op, PostgresMigration, Query, migrations

pytest.importorskip("psycopg")
from handrail.checkpoint.postgres import AsyncPostgresSaver, PostgresSaver

OURS = migrations("")[-1].version  # handrail's own schema versions


@pytest.fixture
def schema(postgres: str) -> Iterator[str]:
    name = f"hr_test_{uuid.uuid4().hex[:16]}"
    yield name
    drop_schema(postgres, name)


def _upper_payloads(prefix: str) -> Op[None]:
    """A Python step: every stored payload in upper case, one UPDATE per event, and a count."""
    (found,) = yield [Query(f"SELECT thread_id, seq, payload FROM {prefix}events ORDER BY thread_id, seq")]
    for thread_id, seq, payload in found.rows:
        yield [
            Query(
                f"UPDATE {prefix}events SET payload = %s WHERE thread_id = %s AND seq = %s",
                (_upper(bytes(payload)), thread_id, seq),
            )
        ]
    yield [Query(f"INSERT INTO {prefix}step_runs (events) VALUES (%s)", (len(found.rows),))]


def _upper(payload: bytes) -> bytes:
    digest, body = unseal(payload)  # the seal stays (a test of the step, not of the chain)
    return (SEAL + digest if digest is not None else b"") + body.upper()


def _bodies(events: list[StoredEvent]) -> list[bytes]:
    return [unseal(e.payload)[1] for e in events]


def _failing(prefix: str) -> Op[None]:
    yield from _upper_payloads(prefix)
    raise RuntimeError("the step failed half-way")


def _extra(prefix: str, step: Any) -> tuple[Migration, ...]:
    return (
        Migration(OURS + 1, "a table for the step", (f"CREATE TABLE {prefix}step_runs (events int)",)),
        PostgresMigration(OURS + 2, "payloads in upper case", (), step=step),
    )


def _with_step(step: Any) -> type[PostgresSaver]:
    class Saver(PostgresSaver):
        def schema_migrations(self) -> tuple[Migration, ...]:
            return (*super().schema_migrations(), *_extra(self.table_prefix, step))

    return Saver


def _one_thread(saver: PostgresSaver) -> None:
    events = [StoredEvent(1, "input", 1.0, b'{"a":"x"}'), StoredEvent(2, "step", 2.0, b'{"b":"y"}')]
    saver.append(
        "t", Append(events, expected_seq=0, record=ThreadRecord("t", 2, "idle", "e", 1.0, 2.0, {}, ()))
    )


def _versions(saver: PostgresSaver) -> list[int]:
    with saver._io.pool.connection() as conn:
        return [row[0] for row in conn.execute(f"SELECT version FROM {saver.table_prefix}schema_version")]


def test_a_python_step_runs_once_in_version_order_inside_its_transaction(postgres: str, schema: str) -> None:
    with PostgresSaver.from_conn_string(postgres, schema=schema) as plain:
        _one_thread(plain)  # a store at handrail's own version, with a thread
    with _with_step(_upper_payloads).from_conn_string(postgres, schema=schema) as saver:
        saver.setup()
        assert _bodies(saver.read("t").events) == [b'{"A":"X"}', b'{"B":"Y"}']
        assert _versions(saver) == [*range(1, OURS + 1), OURS + 1, OURS + 2]
    with _with_step(_upper_payloads).from_conn_string(postgres, schema=schema) as again:
        again.setup()  # current: the step does not run again
        with again._io.pool.connection() as conn:
            assert conn.execute(f"SELECT events FROM {again.table_prefix}step_runs").fetchall() == [(2,)]


async def test_the_async_saver_runs_the_same_step(postgres: str, schema: str) -> None:
    with PostgresSaver.from_conn_string(postgres, schema=schema) as plain:
        _one_thread(plain)

    class Saver(AsyncPostgresSaver):
        def schema_migrations(self) -> tuple[Migration, ...]:
            return (*super().schema_migrations(), *_extra(self.table_prefix, _upper_payloads))

    async with Saver.from_conn_string(postgres, schema=schema) as saver:
        assert _bodies((await saver.aread("t")).events) == [b'{"A":"X"}', b'{"B":"Y"}']


def test_a_failing_python_step_rolls_back_with_its_migration(postgres: str, schema: str) -> None:
    with PostgresSaver.from_conn_string(postgres, schema=schema) as plain:
        _one_thread(plain)
    with (
        _with_step(_failing).from_conn_string(postgres, schema=schema) as saver,
        pytest.raises(RuntimeError, match="half-way"),
    ):
        saver.setup()
    with PostgresSaver.from_conn_string(postgres, schema=schema) as plain:
        assert _bodies(plain.read("t").events) == [b'{"a":"x"}', b'{"b":"y"}']  # unchanged
        assert _versions(plain) == list(range(1, OURS + 1))  # neither migration of that setup was kept
        with plain._io.pool.connection() as conn:
            assert conn.execute("SELECT to_regclass(%s)", (f"{plain.table_prefix}step_runs",)).fetchone() == (
                None,
            )
