"""What only SqliteSaver has: the file, WAL, the schema versions, leases, query plans."""

from __future__ import annotations

import inspect
import os
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from _stores import wait_until

from handrail import AsyncSqliteSaver, SqliteSaver
from handrail.checkpoint._records import Migration, host_identity
from handrail.checkpoint.base import (
    Append,
    ClaimFilter,
    PendingFilter,
    PendingReview,
    StoredEvent,
    ThreadFilter,
    ThreadRecord,
)
from handrail.checkpoint.sqlite._schema import MIGRATIONS
from handrail.errors import ConfigurationError, ConflictError


def record(thread_id: str, head: int, pending: tuple[PendingReview, ...] = ()) -> ThreadRecord:
    return ThreadRecord(thread_id, head, "interrupted" if pending else "idle", "e", 1.0, 2.0, {}, pending)


def events(start: int, count: int) -> list[StoredEvent]:
    return [StoredEvent(seq, "step", float(seq), b"{}") for seq in range(start, start + count)]


def test_opens_or_creates_the_file_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "threads.db"
    with SqliteSaver(path) as saver:
        saver.append("t", Append(events(1, 2), expected_seq=0, record=record("t", 2)))
    assert path.exists()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT version FROM handrail_schema_version").fetchall() == [
            (v,) for v in range(1, OURS + 1)
        ]
        assert conn.execute("PRAGMA page_size").fetchone() == (1024,)  # a new file: small pages
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {
        f"handrail_{name}"
        for name in ("events", "threads", "pending", "pending_tools", "runs", "run_owners", "readings")
    } <= tables
    with SqliteSaver.from_conn_string(path) as again:  # reopening keeps everything
        assert [e.seq for e in again.read("t").events] == [1, 2]


def test_from_conn_string_works_with_and_without_with(tmp_path: Path) -> None:
    saver = SqliteSaver.from_conn_string(str(tmp_path / "a.db"))
    saver.append("t", Append(events(1, 1), expected_seq=0, record=record("t", 1)))
    saver.close()
    with SqliteSaver.from_conn_string(tmp_path / "a.db") as saver:
        assert saver.get_thread("t") == record("t", 1)
    with pytest.raises(ConfigurationError, match="closed"):
        saver.get_thread("t")


def test_memory_and_connection_forms(tmp_path: Path) -> None:
    with SqliteSaver(":memory:") as saver:
        saver.append("t", Append(events(1, 3), expected_seq=0, record=record("t", 3)))
        saver.claim_run("t", "r")
        assert len(saver.read("t").events) == 3 and saver.runs_alive("t") == {"r"}
    conn = sqlite3.connect(tmp_path / "c.db", check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.append("t", Append(events(1, 1), expected_seq=0, record=record("t", 1)))
    assert saver.get_thread("t") == record("t", 1)
    saver.close()
    assert conn.execute("SELECT COUNT(*) FROM handrail_events").fetchone() == (1,)  # the caller's, still open
    conn.close()


@pytest.mark.parametrize("kind", [SqliteSaver, AsyncSqliteSaver])
def test_append_has_no_unwaited_form(kind: type[SqliteSaver] | type[AsyncSqliteSaver]) -> None:
    """Issue 12, defect 2: ``append(wait=False)`` is gone; every append returns once committed."""
    for method in (kind.append, kind.aappend):
        assert "wait" not in inspect.signature(method).parameters


OURS = MIGRATIONS[-1].version  # handrail's own schema versions


class _Extended(SqliteSaver):
    def schema_migrations(self) -> tuple[Migration, ...]:
        return (
            *super().schema_migrations(),
            Migration(OURS + 1, "labels", ("CREATE TABLE labels (thread_id TEXT, label TEXT)",)),
            Migration(OURS + 2, "label index", ("CREATE INDEX labels_by_label ON labels (label)",)),
        )


class _Broken(SqliteSaver):
    def schema_migrations(self) -> tuple[Migration, ...]:
        return (
            *super().schema_migrations(),
            Migration(OURS + 1, "half", ("CREATE TABLE half (x)", "CREATE TABLE nonsense (")),
        )


class _Version1(SqliteSaver):
    def schema_migrations(self) -> tuple[Migration, ...]:
        return super().schema_migrations()[:1]


def test_a_version_1_file_is_migrated_with_everything_in_it(tmp_path: Path) -> None:
    """Version 2 rebuilds events, pending and runs as clustered tables, keeping every row."""
    path = tmp_path / "v1.db"
    review = PendingReview("i1", "interrupt", ("write_file",), 5.0, b'{"a": 1}')
    old = _Version1(path)  # left open: its run stays alive
    with closing(sqlite3.connect(path)) as conn, conn:  # the rows as that version wrote them
        for thread_id, head, status, count in (("t", 3, "idle", 0), ("u", 1, "interrupted", 1)):
            conn.executemany(
                "INSERT INTO handrail_events VALUES (?, ?, ?, ?, ?)",
                [(thread_id, e.seq, e.kind, e.created_at, e.payload) for e in events(1, head)],
            )
            conn.execute(
                "INSERT INTO handrail_threads VALUES (?, ?, ?, 'e', 1.0, 2.0, x'7b7d', ?)",
                (thread_id, head, status, count),
            )
        conn.execute(
            "INSERT INTO handrail_pending VALUES ('u', 'i1', 0, 'interrupt', '[\"write_file\"]', 5.0, ?)",
            (review.payload,),
        )
        conn.execute("INSERT INTO handrail_pending_tools VALUES ('write_file', 5.0, 'u', 'i1')")
    old.claim_run("u", "r1")
    with SqliteSaver(path) as saver:
        assert [e.seq for e in saver.read("t").events] == [1, 2, 3]
        assert saver.get_thread("u") == record("u", 1, (review,))
        assert [item.review for item in saver.list_pending(PendingFilter(tool="write_file"))] == [review]
        assert saver.runs_alive("u") == {"r1"}
        saver.append("t", Append(events(4, 1), expected_seq=3, record=record("t", 4)))
    old.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM handrail_schema_version").fetchall() == [
            (v,) for v in range(1, OURS + 1)
        ]
        for table in ("handrail_events", "handrail_pending", "handrail_runs"):
            (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
            assert sql.endswith("WITHOUT ROWID"), table


def test_migrations_apply_in_order_once(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    SqliteSaver(path).close()
    with _Extended(path) as saver:
        saver.setup()  # idempotent
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT version, description FROM handrail_schema_version ORDER BY version"
        ).fetchall()
        assert [v for v, _ in rows] == list(range(1, OURS + 3)) and rows[OURS][1] == "labels"
        assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'labels_by_label'").fetchone()
    with pytest.raises(
        ConfigurationError, match=f"schema version {OURS + 2}, newer than this handrail knows"
    ):
        SqliteSaver(path)


def test_a_failing_migration_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    SqliteSaver(path).close()
    with pytest.raises(sqlite3.OperationalError):
        _Broken(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT MAX(version) FROM handrail_schema_version").fetchone() == (OURS,)
        assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'half'").fetchone() is None


def test_many_openers_of_a_new_file_at_once(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    openers = 8
    barrier = threading.Barrier(openers)
    errors: list[BaseException] = []

    def open_it() -> None:
        barrier.wait()
        try:
            _Extended(path).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(openers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with sqlite3.connect(path) as conn:
        versions = conn.execute("SELECT version FROM handrail_schema_version ORDER BY version").fetchall()
        assert versions == [(v,) for v in range(1, OURS + 3)]


def test_one_saver_shared_by_many_python_threads(tmp_path: Path) -> None:
    saver = SqliteSaver(tmp_path / "shared.db")
    workers, appends = 8, 25
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        barrier.wait()
        try:
            for seq in range(1, appends + 1):
                saver.append(
                    f"t{n}", Append(events(seq, 1), expected_seq=seq - 1, record=record(f"t{n}", seq))
                )
                assert saver.read(f"t{n}", after_seq=seq - 1).events == events(seq, 1)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for n in range(workers):
        assert [e.seq for e in saver.read(f"t{n}").events] == list(range(1, appends + 1))
    saver.close()


class _Slow:
    """Holds its first transaction open a moment, so the appends made meanwhile queue up."""

    batches: list[int]

    def _commit_batch(self, batch: list[Any]) -> None:
        if not self.batches:
            time.sleep(0.3)
        self.batches.append(len(batch))
        super()._commit_batch(batch)  # type: ignore[misc]


class _SlowLeader(_Slow, SqliteSaver):
    pass


class _SlowAsyncLeader(_Slow, AsyncSqliteSaver):
    pass


def test_appends_made_at_once_share_one_commit_and_fail_alone(tmp_path: Path) -> None:
    """Group commit: one transaction (one fsync) for appends queued together; rule 8 per append."""
    saver = _SlowLeader(tmp_path / "group.db")
    saver.batches = []
    saver.append("contested", Append(events(1, 1), expected_seq=0, record=record("contested", 1)))
    saver.batches.clear()
    outcomes: dict[str, str] = {}

    def first() -> None:
        saver.append("first", Append(events(1, 1), expected_seq=0, record=record("first", 1)))

    def work(name: str, thread_id: str, expected: int) -> None:
        try:
            saver.append(
                thread_id,
                Append(
                    events(expected + 1, 1),
                    expected_seq=expected,
                    record=record(thread_id, expected + 1),
                ),
            )
            outcomes[name] = "ok"
        except ConflictError:
            outcomes[name] = "conflict"

    leader = threading.Thread(target=first)
    leader.start()
    wait_until(lambda: saver._leading, "the first append to lead")
    time.sleep(0.05)  # the leader is inside its slow first batch
    others = [threading.Thread(target=work, args=(f"w{n}", f"w{n}", 0)) for n in range(5)]
    others += [threading.Thread(target=work, args=(f"race{n}", "contested", 1)) for n in range(2)]
    for thread in others:
        thread.start()
    for thread in [leader, *others]:
        thread.join()
    assert saver.batches[0] == 1 and sum(saver.batches) == 8 and max(saver.batches) > 1, saver.batches
    assert sorted(outcomes.items()) == sorted(
        {
            **{f"w{n}": "ok" for n in range(5)},
            **{"race0": outcomes["race0"], "race1": outcomes["race1"]},
        }.items()
    )
    assert sorted([outcomes["race0"], outcomes["race1"]]) == ["conflict", "ok"]  # one wins, alone
    assert [e.seq for e in saver.read("contested").events] == [1, 2]
    for n in range(5):
        assert [e.seq for e in saver.read(f"w{n}").events] == [1]
    saver.close()


async def test_concurrent_async_appends_share_commits_and_fail_alone(tmp_path: Path) -> None:
    """aappend queues for the group commit; one conflicting append fails, the others land."""
    import asyncio

    saver = _SlowAsyncLeader(tmp_path / "agroup.db")
    saver.batches = []
    await saver.aappend("contested", Append(events(1, 1), expected_seq=0, record=record("contested", 1)))
    saver.batches.clear()

    async def append(thread_id: str, expected: int) -> str:
        try:
            await saver.aappend(
                thread_id,
                Append(
                    events(expected + 1, 1),
                    expected_seq=expected,
                    record=record(thread_id, expected + 1),
                ),
            )
            return "ok"
        except ConflictError:
            return "conflict"

    first = asyncio.ensure_future(append("first", 0))
    await asyncio.sleep(0.05)  # the first batch is being committed, slowly
    outcomes = await asyncio.gather(
        *(append(f"w{n}", 0) for n in range(5)), append("contested", 1), append("contested", 1)
    )
    assert await first == "ok"
    assert outcomes[:5] == ["ok"] * 5 and sorted(outcomes[5:]) == ["conflict", "ok"]
    assert saver.batches[0] == 1 and sum(saver.batches) == 8 and max(saver.batches) > 1, saver.batches
    assert [e.seq for e in (await saver.aread("contested")).events] == [1, 2]
    await saver.aclose()


async def test_async_saver_as_an_async_context_manager(tmp_path: Path) -> None:
    async with AsyncSqliteSaver.from_conn_string(tmp_path / "a.db") as saver:
        await saver.setup()
        await saver.aappend("t", Append(events(1, 2), expected_seq=0, record=record("t", 2)))
        assert (await saver.aget_thread("t")) == record("t", 2)
        await saver.aclaim_run("t", "r")
        assert await saver.aruns_alive("t") == {"r"}
        assert saver.get_thread("t") == record("t", 2)  # the sync methods work too
    with pytest.raises(ConfigurationError, match="closed"):
        await saver.aget_thread("t")


# Run liveness (rule 9) ----------------------------------------------------------------------------
def _forge_owner(
    path: Path, owner: str, pid: int, host: str, expires_at: float, thread: str, run: str
) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO handrail_run_owners VALUES (?, ?, ?, ?)", (owner, pid, host, expires_at))
        conn.execute("INSERT INTO handrail_runs VALUES (?, ?, ?, ?)", (thread, run, owner, time.time()))


def _a_dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_run_is_alive_while_its_lease_holds_and_its_process_exists(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    saver = SqliteSaver(path)
    now = time.time()
    here, elsewhere = host_identity(), "another-host|boot|ns"
    _forge_owner(path, "o1", os.getpid(), here, now + 600, "t", "live")
    _forge_owner(path, "o2", os.getpid(), here, now - 1, "t", "lapsed")
    _forge_owner(path, "o3", _a_dead_pid(), here, now + 600, "t", "process gone")
    _forge_owner(path, "o4", 1, elsewhere, now + 600, "t", "remote, leased")
    _forge_owner(path, "o5", 1, elsewhere, now - 1, "t", "remote, lapsed")
    assert saver.runs_alive("t") == {"live", "remote, leased"}
    saver.claim_run("t", "mine")  # a claim also forgets the dead runs of the thread
    with sqlite3.connect(path) as conn:
        runs = {row[0] for row in conn.execute("SELECT run_id FROM handrail_runs WHERE thread_id = 't'")}
    assert runs == {"live", "remote, leased", "mine"}
    saver.close()


def test_the_heartbeat_renews_the_lease(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    saver = SqliteSaver(path, lease_seconds=1.0)  # renewed every third of a second

    def expiry() -> float:
        with sqlite3.connect(path) as conn:
            row = conn.execute("SELECT expires_at FROM handrail_run_owners").fetchone()
            return float(row[0])

    saver.claim_run("t", "r")
    first = expiry()
    wait_until(lambda: expiry() > first, "the heartbeat to renew the lease")
    wait_until(lambda: time.time() > first, "the first lease to have run out")
    assert saver.runs_alive("t") == {"r"}  # renewed, so still alive
    saver.release_run("t", "r")
    assert saver.runs_alive("t") == set()
    saver.close()


def test_close_gives_up_the_processes_runs(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    saver, other = SqliteSaver(path), SqliteSaver(path)
    saver.claim_run("t", "r")
    assert other.runs_alive("t") == {"r"}
    saver.close()
    assert other.runs_alive("t") == set()
    other.close()


def test_a_killed_process_holds_no_run(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    script = (
        "import sys; from handrail import SqliteSaver\n"
        f"saver = SqliteSaver({str(path)!r})\n"
        "saver.claim_run('t', 'doomed'); print('claimed', flush=True); sys.stdin.read()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline() == b"claimed\n"
    saver = SqliteSaver(path)
    assert saver.runs_alive("t") == {"doomed"}
    child.kill()
    child.wait()
    assert saver.runs_alive("t") == set()  # gone with its process, without waiting for the lease
    saver.close()


# The inbox is answered from indexes ---------------------------------------------------------------
def test_the_inbox_queries_use_indexes(tmp_path: Path) -> None:
    path = tmp_path / "big.db"
    saver = SqliteSaver(path)
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO handrail_threads (thread_id, head_seq, status, epoch, created_at, updated_at, "
            "metadata, pending_count) VALUES (?, 1, 'interrupted', 'e', 0, ?, x'7b7d', 1)",
            [(f"t{n:05d}", float(n)) for n in range(5000)],
        )
        conn.executemany(
            "INSERT INTO handrail_pending (thread_id, interrupt_id, position, kind, tools, created_at, "
            "payload) VALUES (?, ?, 0, ?, ?, ?, x'7b7d')",
            [
                (
                    f"t{n:05d}",
                    f"i{n}",
                    "interrupt" if n % 7 else "outcome_unknown",
                    f'["tool{n % 13}"]',
                    float(n),
                )
                for n in range(5000)
            ],
        )
        conn.executemany(
            "INSERT INTO handrail_pending_tools VALUES (?, ?, ?, ?)",
            [(f"tool{n % 13}", float(n), f"t{n:05d}", f"i{n}") for n in range(5000)],
        )
        conn.execute("ANALYZE")
    filters = [
        PendingFilter(),
        PendingFilter(tool="tool3"),
        PendingFilter(kind="outcome_unknown"),
        PendingFilter(thread_id="t00042"),
        PendingFilter(older_than=10.0, after=(100.0, "t00100", "i100")),
        PendingFilter(tool="tool3", after=(100.0, "t00100", "i100"), metadata={"a": 1}),
        PendingFilter(owners=ClaimFilter("assistant_id", ("sql",), or_missing=True)),
        PendingFilter(tool="tool3", owners=ClaimFilter("assistant_id", ("sql", "ops")), order="newest"),
    ]
    with saver._connection() as conn:  # it knows handrail's SQL functions
        for filter in filters:
            sql, params = saver._pending_query(filter, time.time())
            plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
            # every step over the inbox tables walks an index, in page order (no sort)
            steps = [step for step in plan if step.split()[1:2] in (["p"], ["o"])]
            assert steps and all(" USING " in step for step in steps), (filter, plan)
            if filter.thread_id is None:  # one thread's few reviews may be sorted in memory
                assert not any("TEMP B-TREE" in step for step in plan), (filter, plan)
    assert [i.review.interrupt_id for i in saver.list_pending(PendingFilter(tool="tool3", limit=3))] == [
        "i3",
        "i16",
        "i29",
    ]
    saver.close()


# Durability and claims made by appends ------------------------------------------------------------
def test_synchronous_is_full_unless_normal_is_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with SqliteSaver(path) as first:
        first.append("t", Append(events(1, 1), expected_seq=0, record=record("t", 1)))
    for option, expected in ({}, 2), ({"synchronous": "NORMAL"}, 1), ({"synchronous": "FULL"}, 2):
        with SqliteSaver(path, **option) as saver:  # type: ignore[arg-type]
            with saver._connection() as conn:
                assert conn.execute("PRAGMA synchronous").fetchone() == (expected,), option
            assert saver.get_thread("t") == record("t", 1)
    for wrong in ("OFF", "EXTRA", "full"):
        with pytest.raises(ConfigurationError, match='"FULL" or "NORMAL"'):
            SqliteSaver(path, synchronous=wrong)  # type: ignore[arg-type]


def test_a_relaxed_append_commits_without_waiting_for_the_disk(tmp_path: Path) -> None:
    """``durable=False`` commits at synchronous=NORMAL (no fsync); durable ones keep the saver's level."""
    path = tmp_path / "r.db"
    for option, durable_level in ({}, 2), ({"synchronous": "NORMAL"}, 1):
        path.unlink(missing_ok=True)
        with SqliteSaver(path, **option) as saver:  # type: ignore[arg-type]
            levels = []
            for seq, durable in enumerate([True, False, False, True, False], start=1):
                saver.append(
                    "t",
                    Append(events(seq, 1), expected_seq=seq - 1, record=record("t", seq), durable=durable),
                )
                with saver._connection() as conn:  # one Python thread: the same pooled connection
                    levels.append(conn.execute("PRAGMA synchronous").fetchone()[0])
            assert levels == [durable_level, 1, 1, durable_level, 1], option
            with SqliteSaver(path) as other:  # committed: another connection sees every append
                assert [e.seq for e in other.read("t").events] == [1, 2, 3, 4, 5]


def test_a_claim_made_by_an_append_keeps_its_lease(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    saver = SqliteSaver(path, lease_seconds=1.0)  # renewed every third of a second

    def expiry() -> float:
        with sqlite3.connect(path) as conn:
            row = conn.execute("SELECT expires_at FROM handrail_run_owners").fetchone()
            return float(row[0])

    saver.append("t", Append(events(1, 1), expected_seq=0, record=record("t", 1), claim="r"))
    first = expiry()
    wait_until(lambda: expiry() > first, "the heartbeat to renew the lease")
    wait_until(lambda: time.time() > first, "the first lease to have run out")
    assert saver.runs_alive("t") == {"r"}
    saver.append("t", Append(events(2, 1), expected_seq=1, record=record("t", 2), release="r"))
    assert saver.runs_alive("t") == set()
    saver.close()


def test_claims_write_the_lease_once_a_heartbeat_period(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    saver = SqliteSaver(path, lease_seconds=600.0)
    saver.claim_run("t", "r1")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE handrail_run_owners SET expires_at = 12345.0")  # a mark, not a real expiry
    saver.append("t", Append(events(1, 1), expected_seq=0, record=record("t", 1), claim="r2"))
    saver.claim_run("u", "r3")
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT expires_at FROM handrail_run_owners").fetchall() == [(12345.0,)]
    saver._renewed = ("", 0.0)  # as if a heartbeat period had passed
    saver.claim_run("u", "r4")
    with sqlite3.connect(path) as conn:
        (expires_at,) = conn.execute("SELECT expires_at FROM handrail_run_owners").fetchone()
    assert expires_at > time.time() + 500
    saver.close()


def test_an_append_that_only_moves_the_head_leaves_the_by_time_indexes_alone(tmp_path: Path) -> None:
    """SQLite rewrites an index entry whenever its column is SET, even to the same value."""
    path = tmp_path / "t.db"

    def row(head: int, status: str = "running", updated: float = 2.0, meta: Any = None) -> ThreadRecord:
        return ThreadRecord("t", head, status, "e", 1.0, updated, meta or {}, ())  # type: ignore[arg-type]

    with SqliteSaver(path) as saver, sqlite3.connect(path) as watcher:
        # a few pages, far from an automatic checkpoint: the WAL only grows, its size counts pages
        saver.append("t", Append(events(1, 1), expected_seq=0, record=row(1)))
        saver.append("u", Append(events(1, 1), expected_seq=0, record=row(1)))

        def pages_written(call: Any) -> int:
            wal = Path(f"{path}-wal")
            before = wal.stat().st_size
            call()
            return (wal.stat().st_size - before) // (1024 + 24)

        same = pages_written(lambda: saver.append("t", Append(events(2, 1), expected_seq=1, record=row(2))))
        moved = pages_written(
            lambda: saver.append("t", Append(events(3, 1), expected_seq=2, record=row(3, updated=3.0)))
        )
        assert same < moved  # the two by-time indexes were left alone
        assert saver.get_thread("t") == row(3, updated=3.0)
        # every column still changes when it must
        saver.append("t", Append(events(4, 1), expected_seq=3, record=row(4, "idle", 3.0, {"k": 1})))
        assert saver.get_thread("t") == row(4, "idle", 3.0, {"k": 1})
        saver.append("t", Append(events(5, 1), expected_seq=4, record=row(5, "idle", 3.0, {"k": 1})))
        assert saver.get_thread("t") == row(5, "idle", 3.0, {"k": 1})
        assert [t.thread_id for t in saver.list_threads(ThreadFilter(updated_after=2.5))] == ["t"]
        assert [t.thread_id for t in saver.list_threads(ThreadFilter(status="running"))] == ["u"]
        assert watcher.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def _statements(saver: SqliteSaver, call: Any) -> list[str]:
    """The SQL statements the saver runs during ``call`` (on every connection of its pool)."""
    seen: list[str] = []
    conn = saver._acquire()
    saver._release(conn)
    conn.set_trace_callback(seen.append)
    try:
        call()
    finally:
        conn.set_trace_callback(None)
    return seen


def test_an_append_after_its_own_last_one_checks_the_head_in_its_update(tmp_path: Path) -> None:
    """Rule 8 at a statement less: the row this saver left is not read again, only checked."""
    with SqliteSaver(tmp_path / "t.db") as saver:
        saver.append("t", Append(events(1, 1), expected_seq=0, record=record("t", 1)))
        seen = _statements(
            saver, lambda: saver.append("t", Append(events(2, 2), expected_seq=1, record=record("t", 3)))
        )
        assert not [s for s in seen if s.startswith("SELECT")], seen
        (update,) = [s for s in seen if s.startswith("UPDATE handrail_threads")]
        assert "head_seq = 1 AND epoch = 'e'" in update
        assert saver.get_thread("t") == record("t", 3)
        assert [e.seq for e in saver.read("t").events] == [1, 2, 3]


@pytest.mark.parametrize("how", ["moved", "deleted", "recreated"])
def test_a_row_another_writer_changed_since_is_read_and_the_append_refused(tmp_path: Path, how: str) -> None:
    """Rule 8: what this saver remembers of its last append never hides another writer's."""
    path = tmp_path / "t.db"
    with SqliteSaver(path) as mine, SqliteSaver(path) as other:
        mine.append("t", Append(events(1, 1), expected_seq=0, record=record("t", 1)))
        if how == "moved":
            other.append("t", Append(events(2, 1), expected_seq=1, record=record("t", 2)))
            message = "expected it at event 1, found it at event 2"
        elif how == "deleted":
            other.delete_thread("t")
            message = "expected it at event 1, found it at event 0"
        else:
            other.delete_thread("t")
            again = ThreadRecord("t", 1, "idle", "e2", 1.0, 2.0, {}, ())
            other.append("t", Append(events(1, 1), expected_seq=0, record=again))
            message = "deleted and started again"
        before = other.read("t")
        with pytest.raises(ConflictError, match=message):
            mine.append("t", Append(events(2, 1), expected_seq=1, record=record("t", 2)))
        assert other.read("t") == before  # nothing of the refused append was saved
        # the saver reads the row again next time: an append at the real head goes through
        head = before.record.head_seq if before.record is not None else 0
        epoch = before.record.epoch if before.record is not None else "e"
        after = ThreadRecord("t", head + 1, "idle", epoch, 1.0, 2.0, {}, ())
        mine.append("t", Append(events(head + 1, 1), expected_seq=head, record=after))
        assert mine.get_thread("t") == after


def test_what_the_saver_remembers_of_each_thread_is_small(tmp_path: Path) -> None:
    """The row kept per thread (to skip reading it again) holds no oversized buffers."""
    import gc
    import tracemalloc

    with SqliteSaver(tmp_path / "t.db") as saver:
        saver.append("warm", Append(events(1, 1), expected_seq=0, record=record("warm", 1)))
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for i in range(300):
                saver.append(f"t{i}", Append(events(1, 1), expected_seq=0, record=record(f"t{i}", 1)))
            gc.collect()
            per_thread = (tracemalloc.get_traced_memory()[0] - before) / 300
        finally:
            tracemalloc.stop()
        assert per_thread < 1024, per_thread


def test_a_row_created_again_with_the_same_head_and_epoch_is_read_not_remembered(tmp_path: Path) -> None:
    """The remembered row is used only while the stored row is exactly it, every column."""
    path = tmp_path / "t.db"
    review = PendingReview("i1", "interrupt", ("write_file",), 5.0, b"{}")
    again = ThreadRecord("t", 1, "interrupted", "e", 3.0, 4.0, {"team": "x"}, (review,))
    outcomes = []
    for remembered in (True, False):
        with SqliteSaver(path) as mine, SqliteSaver(path) as other:
            mine.append("t", Append(events(1, 1), expected_seq=0, record=record("t", 1)))
            if not remembered:
                mine._known.forget("t")
            other.delete_thread("t")
            other.append("t", Append(events(1, 1), expected_seq=0, record=again))  # same head, same epoch
            mine.append("t", Append(events(2, 1), expected_seq=1, record=record("t", 2)))
            outcomes.append((mine.read("t"), mine.list_pending(PendingFilter())))
            mine.delete_thread("t")
    assert outcomes[0] == outcomes[1]  # as if nothing had been remembered
    read, inbox = outcomes[0]
    assert read.record == record("t", 2) and inbox == []  # the other writer's review went with its row


def test_savers_racing_on_one_thread_keep_one_log(tmp_path: Path) -> None:
    """Rule 8 under a real race: two savers (each remembering its last rows), four Python threads."""
    path = tmp_path / "race.db"
    savers = [SqliteSaver(path), SqliteSaver(path)]
    attempts, workers = 60, 4
    barrier = threading.Barrier(workers)
    won: list[int] = []
    errors: list[BaseException] = []

    def thread_record(head: int) -> ThreadRecord:
        # a review on every odd head: the appends also replace the thread's pending rows
        pending = (PendingReview(f"i{head}", "interrupt", ("write_file",), float(head), b"{}"),)
        return ThreadRecord(
            "t",
            head,
            "interrupted" if head % 2 else "idle",
            "e",
            1.0,
            float(head),
            {},
            (pending if head % 2 else ()),
        )

    def work(n: int) -> None:
        saver = savers[n % 2]
        head = 0
        barrier.wait()
        try:
            for _ in range(attempts):
                try:
                    saver.append(
                        "t", Append(events(head + 1, 1), expected_seq=head, record=thread_record(head + 1))
                    )
                except ConflictError:
                    found = saver.get_thread("t")
                    head = found.head_seq if found is not None else 0
                    continue
                head += 1
                won.append(head)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        read = savers[0].read("t")
        assert read.record is not None
        head = read.record.head_seq
        assert sorted(won) == list(range(1, head + 1))  # every head won exactly once
        assert [e.seq for e in read.events] == list(range(1, head + 1))
        assert read.record == thread_record(head)
        assert [item.review for item in savers[1].list_pending(PendingFilter())] == list(read.record.pending)
    finally:
        for saver in savers:
            saver.close()
