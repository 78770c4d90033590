"""What only the Postgres savers have: schema setup, advisory-lock liveness, query plans."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from _stores import drop_schema, wait_until

from handrail.checkpoint._records import Migration
from handrail.checkpoint.base import PendingFilter, StoredEvent, ThreadRecord
from handrail.errors import ConfigurationError, SerializationError

psycopg = pytest.importorskip("psycopg")
from handrail.checkpoint.postgres import AsyncPostgresSaver, PostgresSaver  # noqa: E402


@pytest.fixture
def schema(postgres: str) -> Iterator[str]:
    name = f"hr_test_{uuid.uuid4().hex[:16]}"
    yield name
    drop_schema(postgres, name)


def record(thread_id: str, head: int) -> ThreadRecord:
    return ThreadRecord(thread_id, head, "idle", "e", 1.0, 2.0, {}, ())


def events(start: int, count: int) -> list[StoredEvent]:
    return [StoredEvent(seq, "step", float(seq), b"{}") for seq in range(start, start + count)]


def _sql(dsn: str, schema: str, sql: str, params: Any = ()) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


class _Extended(PostgresSaver):
    def schema_migrations(self) -> tuple[Migration, ...]:
        p = self.table_prefix
        return (
            *super().schema_migrations(),
            Migration(2, "labels", (f"CREATE TABLE {p}labels (thread_id text, label text)",)),
            Migration(3, "label index", (f"CREATE INDEX ON {p}labels (label)",)),
        )


def test_setup_is_versioned_and_idempotent(postgres: str, schema: str) -> None:
    with PostgresSaver.from_conn_string(postgres, schema=schema) as saver:
        saver.setup()
        saver.setup()
        saver.append("t", events(1, 1), expected_seq=0, record=record("t", 1))
    assert _sql(postgres, schema, "SELECT version FROM handrail_schema_version") == [(1,)]
    with _Extended.from_conn_string(postgres, schema=schema) as saver:
        assert saver.get_thread("t") == record("t", 1)  # set up on first use
    rows = _sql(postgres, schema, "SELECT version, description FROM handrail_schema_version ORDER BY 1")
    assert rows == [(1, rows[0][1]), (2, "labels"), (3, "label index")]
    with (
        PostgresSaver.from_conn_string(postgres, schema=schema) as saver,
        pytest.raises(ConfigurationError, match="schema version 3, newer than this handrail knows"),
    ):
        saver.setup()


def test_setup_from_many_sessions_at_once(postgres: str, schema: str) -> None:
    sessions = 8
    barrier = threading.Barrier(sessions)
    errors: list[BaseException] = []

    def set_up() -> None:
        with _Extended.from_conn_string(postgres, schema=schema, pool_size=1) as saver:
            barrier.wait()
            try:
                saver.setup()
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=set_up) for _ in range(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert _sql(postgres, schema, "SELECT version FROM handrail_schema_version ORDER BY 1") == [
        (1,),
        (2,),
        (3,),
    ]


def test_connection_forms_and_their_checks(postgres: str, schema: str) -> None:
    with psycopg.connect(postgres, autocommit=True) as conn:
        saver = PostgresSaver(conn, schema=schema)
        saver.append("t", events(1, 2), expected_seq=0, record=record("t", 2))
        saver.claim_run("t", "r")
        assert saver.runs_alive("t") == {"r"}
        saver.close()
        assert not conn.closed  # the caller's connection stays open, without the saver's lock
        assert conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        ).fetchone() == (0,)
    with psycopg.connect(postgres) as conn, pytest.raises(ConfigurationError, match="autocommit"):
        PostgresSaver(conn, schema=schema)
    with pytest.raises(ConfigurationError, match="plain SQL identifier"):
        PostgresSaver.from_conn_string(postgres, schema='x"; DROP TABLE y; --')
    with pytest.raises(ConfigurationError, match="ConnectionPool or Connection"):
        PostgresSaver("postgresql://nowhere", schema=schema)  # type: ignore[arg-type]


async def test_async_forms_and_the_sync_bridge(postgres: str, schema: str) -> None:
    async with AsyncPostgresSaver.from_conn_string(postgres, schema=schema) as saver:
        await saver.aappend("t", events(1, 1), expected_seq=0, record=record("t", 1))
        # a sync call from another thread is handed to the loop
        assert await asyncio.to_thread(saver.get_thread, "t") == record("t", 1)
        with pytest.raises(ConfigurationError, match="from its event loop"):
            saver.get_thread("t")
    conn = await psycopg.AsyncConnection.connect(postgres, autocommit=True)
    try:
        saver = AsyncPostgresSaver(conn, schema=schema)
        await saver.aclaim_run("t", "r")
        assert await saver.aruns_alive("t") == {"r"}
        assert (await saver.aread("t")).events == events(1, 1)
        await saver.aclose()
    finally:
        await conn.close()


# Run liveness: an advisory lock that dies with its session -------------------------------------------
def _owner_backend_pid(saver: PostgresSaver) -> int:
    assert saver._owner_conn is not None
    return int(saver._owner_conn.info.backend_pid)


def test_runs_die_with_their_session_and_come_back_with_it(postgres: str, schema: str) -> None:
    with (
        PostgresSaver.from_conn_string(postgres, schema=schema) as runner,
        PostgresSaver.from_conn_string(postgres, schema=schema) as watcher,
    ):
        runner.claim_run("t", "r1")
        assert watcher.runs_alive("t") == {"r1"}
        _sql(postgres, schema, "SELECT pg_terminate_backend(%s)", (_owner_backend_pid(runner),))
        wait_until(lambda: watcher.runs_alive("t") == set(), "the lock to go with its session")
        runner.claim_run("t", "r2")  # reconnects, takes its key again and re-claims r1
        assert watcher.runs_alive("t") == {"r1", "r2"}
        runner.release_run("t", "r1")
        assert watcher.runs_alive("t") == {"r2"}
        runner.close()
        assert watcher.runs_alive("t") == set()


def test_a_killed_process_holds_no_run(postgres: str, schema: str) -> None:
    script = (
        "import sys; from handrail import PostgresSaver\n"
        f"saver = PostgresSaver.from_conn_string({postgres!r}, schema={schema!r})\n"
        "saver.claim_run('t', 'doomed'); print('claimed', flush=True); sys.stdin.read()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline() == b"claimed\n"
    with PostgresSaver.from_conn_string(postgres, schema=schema) as saver:
        assert saver.runs_alive("t") == {"doomed"}
        child.kill()
        child.wait()
        wait_until(lambda: saver.runs_alive("t") == set(), "the server to end the killed session")


# The inbox is answered from indexes -----------------------------------------------------------------
def test_the_inbox_queries_use_indexes(postgres: str, schema: str) -> None:
    rows = 50_000
    with PostgresSaver.from_conn_string(postgres, schema=schema) as saver:
        saver.setup()
        _sql(
            postgres,
            schema,
            "INSERT INTO handrail_threads SELECT 't' || n, 1, 'interrupted', 'e', 0, n, "
            "jsonb_build_object('team', 'team' || mod(n, 10)), 1 FROM generate_series(1, %s) AS n",
            (rows,),
        )
        _sql(
            postgres,
            schema,
            "INSERT INTO handrail_pending OVERRIDING SYSTEM VALUE SELECT n, 't' || n, 'i' || n, 0, "
            "CASE WHEN mod(n, 7) = 0 THEN 'outcome_unknown' ELSE 'interrupt' END, "
            "ARRAY['tool' || mod(n, 13)], n, '\\x7b7d' FROM generate_series(1, %s) AS n",
            (rows,),
        )
        _sql(
            postgres,
            schema,
            "INSERT INTO handrail_pending_tools SELECT 'tool' || mod(n, 13), n, 't' || n, 'i' || n, n "
            "FROM generate_series(1, %s) AS n",
            (rows,),
        )
        _sql(postgres, schema, "ANALYZE")
        now = time.time()
        filters = [
            PendingFilter(),
            PendingFilter(tool="tool3"),
            PendingFilter(kind="outcome_unknown"),
            PendingFilter(thread_id="t42"),
            PendingFilter(older_than=10.0, after=(100.0, "t100", "i100")),
            PendingFilter(tool="tool3", after=(100.0, "t100", "i100"), metadata={"team": "team3"}),
            PendingFilter(kind="interrupt", older_than=5.0, metadata={"team": "team1"}, limit=10),
        ]
        for filter in filters:
            query = saver._queries.pending_query(filter, now)
            plan = "\n".join(row[0] for row in _sql(postgres, schema, "EXPLAIN " + query.sql, query.params))
            assert "Seq Scan" not in plan, plan
            assert "Index Scan" in plan or "Index Only Scan" in plan, plan
            if filter.thread_id is None and filter.metadata is None:
                # walked in page order; a thread's few reviews, or the threads a metadata
                # filter finds through the GIN index, may be sorted in memory instead
                assert "Sort" not in plan, plan
        page = saver.list_pending(PendingFilter(tool="tool3", limit=3))
        assert [item.review.interrupt_id for item in page] == ["i3", "i16", "i29"]


def test_what_postgres_cannot_hold_is_refused_clearly(postgres: str, schema: str) -> None:
    with PostgresSaver.from_conn_string(postgres, schema=schema) as saver:
        nul = ThreadRecord("t", 1, "idle", "e", 1.0, 2.0, {"note": "a\x00b"}, ())
        with pytest.raises(SerializationError, match="cannot store thread 't' in PostgreSQL"):
            saver.append("t", events(1, 1), expected_seq=0, record=nul)
        assert saver.get_thread("t") is None
        saver.append("t", events(1, 1), expected_seq=0, record=record("t", 1))  # nothing was left behind
