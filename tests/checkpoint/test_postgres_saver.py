"""What only the Postgres savers have: schema setup, advisory-lock liveness, query plans."""

from __future__ import annotations

import asyncio
import math
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
from handrail.checkpoint.base import (
    Append,
    ClaimFilter,
    PendingFilter,
    PendingReview,
    StoredEvent,
    ThreadFilter,
    ThreadRecord,
)
from handrail.checkpoint.postgres._read import page_key
from handrail.checkpoint.postgres._schema import migrations
from handrail.errors import ConfigurationError, ConflictError, SerializationError

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
    # one transaction, and SET LOCAL: behind PgBouncer the session is not ours
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(f'SET LOCAL search_path TO "{schema}"')
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


OURS = migrations("")[-1].version  # handrail's own schema versions


class _Extended(PostgresSaver):
    def schema_migrations(self) -> tuple[Migration, ...]:
        p = self.table_prefix
        return (
            *super().schema_migrations(),
            Migration(OURS + 1, "labels", (f"CREATE TABLE {p}labels (thread_id text, label text)",)),
            Migration(OURS + 2, "label index", (f"CREATE INDEX ON {p}labels (label)",)),
        )


def test_setup_is_versioned_and_idempotent(postgres: str, schema: str) -> None:
    with PostgresSaver.from_conn_string(postgres, schema=schema) as saver:
        assert [m.version for m in saver.schema_migrations()] == list(range(1, OURS + 1))
        saver.setup()
        saver.setup()
        saver.append("t", Append(events(1, 1), expected_seq=0, record=record("t", 1)))
    versions = list(range(1, OURS + 1))
    assert _sql(postgres, schema, "SELECT version FROM handrail_schema_version ORDER BY 1") == [
        (v,) for v in versions
    ]
    with _Extended.from_conn_string(postgres, schema=schema) as saver:
        assert saver.get_thread("t") == record("t", 1)  # set up on first use
    rows = _sql(postgres, schema, "SELECT version, description FROM handrail_schema_version ORDER BY 1")
    assert rows[OURS:] == [(OURS + 1, "labels"), (OURS + 2, "label index")]
    with (
        PostgresSaver.from_conn_string(postgres, schema=schema) as saver,
        pytest.raises(ConfigurationError, match=f"schema version {OURS + 2}, newer than this handrail knows"),
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
        (v,) for v in range(1, OURS + 3)
    ]


def test_connection_forms_and_their_checks(postgres: str, schema: str) -> None:
    with psycopg.connect(postgres, autocommit=True) as conn:
        saver = PostgresSaver(conn, schema=schema)
        saver.append("t", Append(events(1, 2), expected_seq=0, record=record("t", 2)))
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
        await saver.aappend("t", Append(events(1, 1), expected_seq=0, record=record("t", 1)))
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
    """The server process of the saver's liveness session (asked: behind PgBouncer, the
    client's ``backend_pid`` is the pooler's own number)."""
    assert saver._owner_conn is not None
    row = saver._owner_conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


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


def test_a_killed_process_holds_no_run(postgres: str, schema: str, behind_pgbouncer: bool) -> None:
    # the child is not under conftest's without_prepared_statements: behind PgBouncer it
    # would leave statements prepared on PgBouncer's server connections for later tests
    threshold = None if behind_pgbouncer else 2
    script = (
        "import sys; from handrail import PostgresSaver\n"
        f"saver = PostgresSaver.from_conn_string({postgres!r}, schema={schema!r}, "
        f"prepare_threshold={threshold})\n"
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
@pytest.mark.slow  # 50,000 rows a table
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
            "INSERT INTO handrail_pending_tools (tool, created_at, thread_id, interrupt_id, pending_id, "
            "page_key) SELECT 'tool' || mod(n, 13), n, 't' || n, 'i' || n, n, "
            "handrail_page_key(n, 't' || n, 'i' || n) FROM generate_series(1, %s) AS n",
            (rows,),
        )
        _sql(
            postgres,
            schema,
            "INSERT INTO handrail_pending_metadata (key, value, page_key, thread_id, pending_id) "
            "SELECT 'team', to_jsonb('team' || mod(n, 10)), handrail_page_key(n, 't' || n, 'i' || n), "
            "'t' || n, n FROM generate_series(1, %s) AS n",
            (rows,),
        )
        # this schema's tables only: a database-wide ANALYZE can deadlock with another test's DDL
        _sql(
            postgres,
            schema,
            "ANALYZE handrail_threads, handrail_pending, handrail_pending_tools, handrail_pending_metadata",
        )
        now = time.time()
        filters = [
            PendingFilter(),
            PendingFilter(tool="tool3"),
            PendingFilter(kind="outcome_unknown"),
            PendingFilter(thread_id="t42"),
            PendingFilter(older_than=10.0, after=(100.0, "t100", "i100")),
            PendingFilter(tool="tool3", after=(100.0, "t100", "i100"), metadata={"team": "team3"}),
            PendingFilter(kind="interrupt", older_than=5.0, metadata={"team": "team1"}, limit=10),
            # the agents a service hosts (on the thread's row), or one of them (the metadata index)
            PendingFilter(owners=ClaimFilter("assistant_id", ("sql", "ops"), or_missing=True)),
            PendingFilter(owners=ClaimFilter("team", ("team3",)), after=(100.0, "t100", "i100")),
            PendingFilter(tool="tool3", owners=ClaimFilter("team", ("team3", "team4")), order="newest"),
        ]
        for filter in filters:
            query = saver._queries.pending_query(filter, now)
            plan = "\n".join(row[0] for row in _sql(postgres, schema, "EXPLAIN " + query.sql, query.params))
            assert "Seq Scan" not in plan, plan
            assert "Index Scan" in plan or "Index Only Scan" in plan, plan
            if filter.thread_id is None:  # walked in page order (a thread's few reviews may be sorted)
                assert "Sort" not in plan, plan
        page = saver.list_pending(PendingFilter(tool="tool3", limit=3))
        assert [item.review.interrupt_id for item in page] == ["i3", "i16", "i29"]


def test_what_postgres_cannot_hold_is_refused_clearly(postgres: str, schema: str) -> None:
    with PostgresSaver.from_conn_string(postgres, schema=schema) as saver:
        nul = ThreadRecord("t", 1, "idle", "e", 1.0, 2.0, {"note": "a\x00b"}, ())
        with pytest.raises(SerializationError, match="cannot store thread 't' in PostgreSQL"):
            saver.append("t", Append(events(1, 1), expected_seq=0, record=nul))
        assert saver.get_thread("t") is None
        saver.append(
            "t", Append(events(1, 1), expected_seq=0, record=record("t", 1))
        )  # nothing was left behind


def test_a_nul_in_a_text_field_is_refused_not_cut(postgres: str, schema: str) -> None:
    """Rule 10: appends send their parameters through libpq, which would end a text value at
    a NUL; such a value is refused, never stored cut."""
    ask = PendingReview("i\x00tail", "interrupt", ("write_file",), 5.0, b"{}")
    paused = ThreadRecord("t", 1, "interrupted", "e", 1.0, 2.0, {}, (ask,))
    with PostgresSaver.from_conn_string(postgres, schema=schema) as saver:
        with pytest.raises(SerializationError, match="cannot store thread 't' in PostgreSQL"):
            saver.append("t", Append(events(1, 1), expected_seq=0, record=paused))
        assert saver.get_thread("t") is None


def test_appends_survive_a_session_that_forgets_its_prepared_statements(postgres: str, schema: str) -> None:
    """psycopg prepares the appends on the connection (its ``prepare_threshold``); DISCARD
    ALL (a pool's reset) drops them, and the saver goes on."""
    with psycopg.connect(postgres, autocommit=True, prepare_threshold=0) as conn:
        saver = PostgresSaver(conn, schema=schema)
        saver.append("t", Append(events(1, 1), expected_seq=0, record=record("t", 1)))
        saver.append("t", Append(events(2, 1), expected_seq=1, record=record("t", 2)))
        if conn.prepare_threshold is not None:  # not through PgBouncer (see conftest.postgres)
            prepared = conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
            assert prepared is not None and prepared[0] > 0
        conn.execute("DISCARD ALL")  # the server forgets
        saver.append("t", Append(events(3, 1), expected_seq=2, record=record("t", 3)))
        saver.append("t", Append(events(4, 1), expected_seq=3, record=record("t", 4)))
        with pytest.raises(ConflictError):  # errors still come back as before
            saver.append("t", Append(events(4, 1), expected_seq=3, record=record("t", 4)))
        assert [e.seq for e in saver.read("t").events] == [1, 2, 3, 4]
        assert saver.get_thread("t") == record("t", 4)
        saver.close()


def test_prepare_threshold_none_prepares_no_statement_on_the_server(postgres: str, schema: str) -> None:
    """``from_conn_string(prepare_threshold=None)``, for poolers in transaction mode that do
    not track prepared statements: a whole review cycle's statements, none prepared."""
    with PostgresSaver.from_conn_string(
        postgres, schema=schema, pool_size=1, prepare_threshold=None
    ) as saver:
        for seq in range(1, 11):
            saver.append("t", Append(events(seq, 1), expected_seq=seq - 1, record=record("t", seq)))
            saver.read("t")
        assert saver._io.pool is not None
        with saver._io.pool.connection() as conn:
            assert conn.prepare_threshold is None
            assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (0,)


async def test_async_appends_survive_a_session_that_forgets_its_prepared_statements(
    postgres: str, schema: str
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres, autocommit=True) as conn:
        saver = AsyncPostgresSaver(conn, schema=schema)
        await saver.aappend("t", Append(events(1, 1), expected_seq=0, record=record("t", 1)))
        await saver.aappend("t", Append(events(2, 1), expected_seq=1, record=record("t", 2)))
        await conn.execute("DISCARD ALL")  # psycopg sees it, and forgets what it prepared
        await saver.aappend("t", Append(events(3, 1), expected_seq=2, record=record("t", 3)))
        assert [e.seq for e in (await saver.aread("t")).events] == [1, 2, 3]
        await saver.aclose()


def test_an_append_leaves_out_the_deletes_only_where_no_review_can_be_pending(
    postgres: str, schema: str
) -> None:
    """A saver remembers where its own last append left no review; elsewhere it clears."""
    ask = PendingReview("i1", "interrupt", ("write_file",), 5.0, b"{}")
    sent: list[str] = []
    with (
        PostgresSaver.from_conn_string(postgres, schema=schema) as mine,
        PostgresSaver.from_conn_string(postgres, schema=schema) as other,
    ):
        original = mine._queries.append

        def spy(*args: Any, **kwargs: Any) -> Any:  # records the SQL of each append
            op = original(*args, **kwargs)
            batch = next(op)
            sent.append(batch[0].sql)
            results = yield batch
            try:
                op.send(results)
            except StopIteration as stop:
                return stop.value
            raise AssertionError("an append is one statement")  # pragma: no cover

        mine._queries.append = spy  # type: ignore[method-assign]
        mine.append("t", Append(events(1, 1), expected_seq=0, record=record("t", 1)))
        mine.append("t", Append(events(2, 1), expected_seq=1, record=record("t", 2)))
        assert "cleared" not in sent[-1]  # its own last append left no review
        # another saver pauses the thread: this saver's memory is of an older head
        other.append(
            "t",
            Append(
                events(3, 1),
                expected_seq=2,
                record=ThreadRecord("t", 3, "interrupted", "e", 1.0, 2.0, {}, (ask,)),
            ),
        )
        assert [i.review.interrupt_id for i in mine.list_pending(PendingFilter())] == ["i1"]
        mine.append("t", Append(events(4, 1), expected_seq=3, record=record("t", 4)))
        assert "cleared" in sent[-1]
        assert mine.list_pending(PendingFilter()) == []
        assert _sql(postgres, schema, "SELECT count(*) FROM handrail_pending_tools") == [(0,)]
        # a stale head conflicts before anything is written, whatever the statement
        other.append(
            "t",
            Append(
                events(5, 1),
                expected_seq=4,
                record=ThreadRecord("t", 5, "interrupted", "e", 1.0, 2.0, {}, (ask,)),
            ),
        )
        with pytest.raises(ConflictError):
            mine.append("t", Append(events(5, 1), expected_seq=4, record=record("t", 5)))
        assert [i.review.interrupt_id for i in mine.list_pending(PendingFilter())] == ["i1"]

        # what it knows of the metadata rows: none where the thread had no metadata
        def paused(head: int, metadata: dict[str, Any]) -> ThreadRecord:
            return ThreadRecord("m", head, "interrupted", "e", 1.0, 2.0, metadata, (ask,))

        mine.append("m", Append(events(1, 1), expected_seq=0, record=paused(1, {})))
        assert "tagged" not in sent[-1]  # no metadata: no metadata rows to write
        mine.append("m", Append(events(2, 1), expected_seq=1, record=paused(2, {"team": "a"})))
        assert "cleared_tools" in sent[-1] and "cleared_metadata" not in sent[-1] and "tagged" in sent[-1]
        assert [i.thread_id for i in mine.list_pending(PendingFilter(metadata={"team": "a"}))] == ["m"]
        mine.append("m", Append(events(3, 1), expected_seq=2, record=record("m", 3)))
        assert "cleared_metadata" in sent[-1]
        assert _sql(postgres, schema, "SELECT count(*) FROM handrail_pending_metadata") == [(0,)]
        assert mine.list_pending(PendingFilter(metadata={"team": "a"})) == []


# Round trips, the liveness lock, page keys, migrations -------------------------------------------------
def _round_trips(conn: Any, path: str, call: Any) -> int:
    """How many times ``call`` waited for the server: its ReadyForQuery messages (libpq trace)."""
    with open(path, "w") as trace:
        conn.pgconn.trace(trace.fileno())
        try:
            call()
        finally:
            conn.pgconn.untrace()
    with open(path) as trace:
        return sum(1 for line in trace if "\tReadyForQuery" in line)


def test_every_call_is_one_round_trip(postgres: str, schema: str, tmp_path: Any) -> None:
    if psycopg.pq.version() < 140000:
        pytest.skip("libpq before 14 writes another trace format")
    ask = PendingReview("i1", "interrupt", ("write_file",), 5.0, b"{}")

    def paused(thread_id: str) -> ThreadRecord:
        return ThreadRecord(thread_id, 3, "interrupted", "e", 1.0, 2.0, {"team": "a"}, (ask,))

    with psycopg.connect(postgres, autocommit=True) as conn:
        saver = PostgresSaver(conn, schema=schema)
        saver.setup()
        saver.claim_run("warm-up", "r")  # takes the liveness lock, once
        trace = str(tmp_path / "trace")

        def appends(t: str) -> dict[str, Any]:
            return {
                "append, new thread": lambda: saver.append(
                    t, Append(events(1, 2), expected_seq=0, record=record(t, 2))
                ),
                "append with a claim and a pause": lambda: saver.append(
                    t, Append(events(3, 1), expected_seq=2, record=paused(t), claim=f"{t}-r1")
                ),
                "append with a release": lambda: saver.append(
                    t, Append(events(4, 1), expected_seq=3, record=record(t, 4), release=f"{t}-r1")
                ),
                "append, relaxed": lambda: saver.append(
                    t, Append(events(5, 1), expected_seq=4, record=record(t, 5), durable=False)
                ),
            }

        # psycopg prepares a statement at its (prepare_threshold + 1)-th run on a connection,
        # in one more round trip, once; the runs here are fewer, so each is one round trip
        first = {name: _round_trips(conn, trace, call) for name, call in appends("w").items()}
        assert first == dict.fromkeys(first, 1)
        calls = {
            **appends("t"),
            "read": lambda: saver.read("t"),
            "get_thread": lambda: saver.get_thread("t"),
            "list_threads": lambda: saver.list_threads(ThreadFilter(metadata={"team": "a"})),
            "list_pending": lambda: saver.list_pending(PendingFilter(tool="x", metadata={"team": "a"})),
            "claim_run": lambda: saver.claim_run("t", "r2"),
            "release_run": lambda: saver.release_run("t", "r2"),
            "runs_alive": lambda: saver.runs_alive("t"),
            "prune": lambda: saver.prune(
                "t", upto_seq=2, snapshot=StoredEvent(2, "snapshot", 2.0, b"{}"), keep_kinds=frozenset()
            ),
            "delete_thread": lambda: saver.delete_thread("t"),
        }
        trips = {name: _round_trips(conn, trace, call) for name, call in calls.items()}
        assert trips == dict.fromkeys(calls, 1)
        saver.append("t", Append(events(1, 1), expected_seq=0, record=record("t", 1)))

        def lose() -> None:
            with pytest.raises(ConflictError):
                saver.append("t", Append(events(1, 1), expected_seq=0, record=record("t", 1)))

        conflict = _round_trips(conn, trace, lose)
        assert conflict == 1  # the server tells the conflict: no second query, nothing to roll back
        saver.close()


def _wal_syncs(writer: Any, watcher: Any) -> int:
    """WAL flushes so far, the writer's own included (a backend sends its counts when idle)."""
    writer.execute("SELECT pg_stat_force_next_flush()")
    writer.execute("SELECT 1")  # idle once more: the counts are flushed
    watcher.execute("SELECT pg_stat_clear_snapshot()")
    return int(watcher.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()[0])


@pytest.mark.serial  # counts the server's WAL flushes: other tests' commits would add theirs
def test_a_relaxed_append_commits_without_waiting_for_the_wal_flush(postgres: str, schema: str) -> None:
    """``durable=False`` turns synchronous_commit off for that statement's transaction only."""
    count = 60
    with psycopg.connect(postgres, autocommit=True) as conn, psycopg.connect(postgres) as watcher:
        watcher.autocommit = True
        if conn.info.server_version < 150000:
            pytest.skip("pg_stat_force_next_flush() needs PostgreSQL 15")
        saver = PostgresSaver(conn, schema=schema)
        saver.setup()
        syncs: dict[bool, int] = {}
        for durable in (True, False):
            thread_id = f"t-{durable}"
            before = _wal_syncs(conn, watcher)
            for seq in range(1, count + 1):
                saver.append(
                    thread_id,
                    Append(
                        events(seq, 1),
                        expected_seq=seq - 1,
                        record=record(thread_id, seq),
                        durable=durable,
                    ),
                )
            syncs[durable] = _wal_syncs(conn, watcher) - before
            # the setting did not outlive its transaction
            assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
            assert [e.seq for e in saver.read(thread_id).events] == list(range(1, count + 1))
        # each durable commit flushed the WAL; relaxed ones left it to the WAL writer (a few
        # flushes at most in the time the loop takes; other sessions may add some, and a
        # commit of another session's can share one of ours: a flush covers both)
        assert syncs[True] >= count - count // 10, syncs
        assert syncs[False] < count // 3, syncs
        with pytest.raises(ConflictError):  # a relaxed append still conflicts
            saver.append(
                "t-False", Append(events(1, 1), expected_seq=0, record=record("t-False", 1), durable=False)
            )
        saver.close()


def test_a_claim_takes_a_lost_liveness_lock_again(postgres: str, schema: str, behind_pgbouncer: bool) -> None:
    with (
        PostgresSaver.from_conn_string(postgres, schema=schema) as runner,
        PostgresSaver.from_conn_string(postgres, schema=schema) as watcher,
    ):
        runner.claim_run("t", "r1")
        _sql(postgres, schema, "SELECT pg_terminate_backend(%s)", (_owner_backend_pid(runner),))
        wait_until(lambda: watcher.runs_alive("t") == set(), "the lock to go with its session")
        # the claim's transaction finds no session holding the lock, so it saves nothing;
        # the saver locks again, re-claims r1, and the append goes through
        runner.append("t", Append(events(1, 1), expected_seq=0, record=record("t", 1), claim="r2"))
        assert watcher.runs_alive("t") == {"r1", "r2"}
        assert [e.seq for e in watcher.read("t").events] == [1]
    if behind_pgbouncer:
        return  # one connection's lock needs a session of its own (production guide)
    with psycopg.connect(postgres, autocommit=True) as conn:  # one connection carries the lock
        saver = PostgresSaver(conn, schema=schema)
        with PostgresSaver.from_conn_string(postgres, schema=schema) as watcher:
            saver.claim_run("u", "r1")
            conn.execute("SELECT pg_advisory_unlock_all()")
            assert watcher.runs_alive("u") == set()
            saver.claim_run("u", "r2")
            assert watcher.runs_alive("u") == {"r1", "r2"}
            saver.close()
            assert watcher.runs_alive("u") == set()


async def test_an_async_claim_takes_a_lost_liveness_lock_again(postgres: str, schema: str) -> None:
    async with AsyncPostgresSaver.from_conn_string(postgres, schema=schema) as runner:
        with PostgresSaver.from_conn_string(postgres, schema=schema) as watcher:
            await runner.aclaim_run("t", "r1")
            assert runner._owner_conn is not None
            cursor = await runner._owner_conn.execute(
                "SELECT pg_backend_pid()"
            )  # the server's, not PgBouncer's
            pid = (await cursor.fetchone() or (0,))[0]
            _sql(postgres, schema, "SELECT pg_terminate_backend(%s)", (pid,))
            wait_until(lambda: watcher.runs_alive("t") == set(), "the lock to go with its session")
            await runner.aappend("t", Append(events(1, 1), expected_seq=0, record=record("t", 1), claim="r2"))
            assert watcher.runs_alive("t") == {"r1", "r2"}
            await runner.aappend(
                "t", Append(events(2, 1), expected_seq=1, record=record("t", 2), release="r2")
            )
            assert watcher.runs_alive("t") == {"r1"}


def test_page_keys_sort_like_the_inbox(postgres: str, schema: str) -> None:
    times = [-1e300, -2.5, -1.0, -5e-324, -0.0, 0.0, 5e-324, 1e-9, 1.0, 1.5, 1700000000.25, 1e300]
    ids = ["", "a", "a\x01", "ab", "b", "é", "\uffff", "🐢", "z" * 30]
    keys = [(at, thread, interrupt) for at in times for thread in ids[:5] for interrupt in ("", "i", "🐢")]
    keys += [(1.0, thread, "i") for thread in ids]
    assert sorted(keys, key=lambda key: page_key(*key)) == sorted(keys)  # -0.0 == 0.0, as in a tuple
    with PostgresSaver.from_conn_string(postgres, schema=schema) as saver:
        saver.setup()
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        rows = conn.execute(
            "SELECT handrail_page_key(k.at, k.thread, k.interrupt) FROM unnest(%s::float8[], %s::text[], "
            "%s::text[]) WITH ORDINALITY AS k (at, thread, interrupt, n) ORDER BY k.n",
            ([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]),
        ).fetchall()
        assert [row[0] for row in rows] == [page_key(*key) for key in keys]  # SQL and Python agree
        for at in times[1:-1]:  # the bound list_pending puts on older_than: created_at <= at
            bound = page_key(math.nextafter(at, math.inf), "", "")[:8]
            assert {x for x in times if page_key(x, "a", "i") < bound} == {x for x in times if x <= at}


class _Version1(PostgresSaver):
    def schema_migrations(self) -> tuple[Migration, ...]:
        return super().schema_migrations()[:1]


def test_a_version_1_schema_is_migrated_with_its_inbox(postgres: str, schema: str) -> None:
    with _Version1.from_conn_string(postgres, schema=schema) as old:
        old.setup()
    for n, (team, tool) in enumerate([("a", "write_file"), ("b", "sql"), ("a", "sql")]):
        _sql(
            postgres,
            schema,
            "INSERT INTO handrail_threads VALUES (%s, 1, 'interrupted', 'e', 1.0, 2.0, %s::jsonb, 1)",
            (f"t{n}", f'{{"team": "{team}", "tags": [1]}}'),
        )
        _sql(
            postgres, schema, "INSERT INTO handrail_events VALUES (%s, 1, 'step', 1.0, '\\x7b7d')", (f"t{n}",)
        )
        _sql(
            postgres,
            schema,
            "INSERT INTO handrail_pending (thread_id, interrupt_id, position, kind, tools, created_at, "
            "payload) VALUES (%s, %s, 0, 'interrupt', %s, %s, '\\x7b7d')",
            (f"t{n}", f"i{n}", [tool], 10.0 - n),
        )
        _sql(
            postgres,
            schema,
            "INSERT INTO handrail_pending_tools SELECT %s, p.created_at, p.thread_id, p.interrupt_id, p.id "
            "FROM handrail_pending AS p WHERE p.thread_id = %s",
            (tool, f"t{n}"),
        )
    with PostgresSaver.from_conn_string(postgres, schema=schema) as saver:

        def found(**filter: Any) -> list[str]:
            return [item.thread_id for item in saver.list_pending(PendingFilter(**filter))]

        assert found(metadata={"team": "a"}) == ["t2", "t0"]
        assert found(metadata={"team": "a"}, tool="sql") == ["t2"]
        assert found(tool="sql") == ["t2", "t1"]
        assert found(tool="sql", after=(8.0, "t2", "i2")) == ["t1"]
        assert found(metadata={"team": "a", "tags": [1]}, limit=1) == ["t2"]
        saver.append("t2", Append(events(2, 1), expected_seq=1, record=record("t2", 2)))  # answered
        assert found(metadata={"team": "a"}) == ["t0"]
        assert found(tool="sql") == ["t1"]
    assert _sql(postgres, schema, "SELECT version FROM handrail_schema_version ORDER BY 1") == [
        (v,) for v in range(1, OURS + 1)
    ]


class _Version2(PostgresSaver):
    def schema_migrations(self) -> tuple[Migration, ...]:
        return super().schema_migrations()[:2]


def test_a_version_2_schema_gets_saved_readings_and_keeps_its_threads(postgres: str, schema: str) -> None:
    """Version 3 adds handrail_readings: a thread written before it reads whole, then gets one."""
    with _Version2.from_conn_string(postgres, schema=schema) as old:
        old.setup()
    # the thread as that version wrote it
    _sql(postgres, schema, "INSERT INTO handrail_threads VALUES ('t', 3, 'idle', 'e', 1.0, 2.0, '{}', 0)")
    for event in events(1, 3):
        _sql(
            postgres,
            schema,
            "INSERT INTO handrail_events VALUES ('t', %s, %s, %s, %s)",
            (event.seq, event.kind, event.created_at, event.payload),
        )
    with PostgresSaver.from_conn_string(postgres, schema=schema) as saver:
        read = saver.read("t", from_reading=True)
        assert read.reading is None and [e.seq for e in read.events] == [1, 2, 3]
        reading = StoredEvent(4, "reading", 4.0, b"state")
        saver.append("t", Append(events(4, 1), expected_seq=3, record=record("t", 4), reading=reading))
        read = saver.read("t", from_reading=True)
        assert read.reading == reading and read.events == []
    assert _sql(postgres, schema, "SELECT version FROM handrail_schema_version ORDER BY 1") == [
        (v,) for v in range(1, OURS + 1)
    ]


def test_liveness_is_checked_by_trying_the_lock_where_no_checking_session_holds_one(
    postgres: str, schema: str, behind_pgbouncer: bool
) -> None:
    """On a pool the liveness lock has a session of its own: a claim tries a shared lock on
    the key (fails at once while the owner lives) instead of copying pg_locks. On one
    connection the lock is that connection's own, which its own try would not see."""
    with PostgresSaver.from_conn_string(postgres, schema=schema) as pooled:
        assert "pg_try_advisory_xact_lock_shared" in pooled._queries._claim_sql
        assert "pg_locks" not in pooled._queries._claim_sql
        pooled.claim_run("t", "r1")
        if behind_pgbouncer:
            return  # one connection's lock needs a session of its own (production guide)
        with psycopg.connect(postgres, autocommit=True) as conn:
            single = PostgresSaver(conn, schema=schema)
            assert "pg_locks" in single._queries._claim_sql
            assert single.runs_alive("t") == {"r1"}  # seen from another session: alive
            single.claim_run("u", "r2")
            assert single.runs_alive("u") == {"r2"} and pooled.runs_alive("u") == {"r2"}
            single.close()
        assert pooled.runs_alive("u") == set()  # its session ended, and with it its lock
        assert pooled.runs_alive("t") == {"r1"}
