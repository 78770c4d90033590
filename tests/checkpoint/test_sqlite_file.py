"""The SQLite file handrail is given: older files, an application's own file, damaged files.

Issue 13, items 5 and 12: handrail keeps its data in tables named ``handrail_*`` and
adds nothing else to a file; a file of an older handrail (plain table names) is renamed
in place when opened, with everything in it; a file whose ``handrail_*`` names belong to
someone else, or a damaged file, raises a handrail error naming the file and what to do.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import pytest

from handrail import SqliteSaver
from handrail.checkpoint._records import Migration, host_identity
from handrail.checkpoint.base import (
    Append,
    PendingFilter,
    PendingReview,
    StoredEvent,
    ThreadFilter,
    ThreadRecord,
)
from handrail.errors import ConfigurationError, SerializationError

# The schema as handrail wrote it before its tables were prefixed (versions 1 to 3).
LEGACY_DDL: dict[int, tuple[str, tuple[str, ...]]] = {
    1: (
        "event logs, thread rows, the pending-review inbox and run leases",
        (
            "CREATE TABLE threads (thread_id TEXT PRIMARY KEY, head_seq INTEGER NOT NULL, "
            "status TEXT NOT NULL, epoch TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL, "
            "metadata BLOB NOT NULL, pending_count INTEGER NOT NULL DEFAULT 0)",
            "CREATE INDEX threads_by_update ON threads (updated_at DESC, thread_id)",
            "CREATE INDEX threads_by_status ON threads (status, updated_at DESC, thread_id)",
            "CREATE TABLE events (thread_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, "
            "created_at REAL NOT NULL, payload BLOB NOT NULL, PRIMARY KEY (thread_id, seq))",
            "CREATE TABLE pending (thread_id TEXT NOT NULL, interrupt_id TEXT NOT NULL, "
            "position INTEGER NOT NULL, kind TEXT NOT NULL, tools TEXT NOT NULL, created_at REAL NOT NULL, "
            "payload BLOB NOT NULL, PRIMARY KEY (thread_id, interrupt_id))",
            "CREATE INDEX pending_inbox ON pending (created_at, thread_id, interrupt_id)",
            "CREATE INDEX pending_by_kind ON pending (kind, created_at, thread_id, interrupt_id)",
            "CREATE TABLE pending_tools (tool TEXT NOT NULL, created_at REAL NOT NULL, "
            "thread_id TEXT NOT NULL, interrupt_id TEXT NOT NULL, "
            "PRIMARY KEY (tool, created_at, thread_id, interrupt_id)) WITHOUT ROWID",
            "CREATE INDEX pending_tools_by_thread ON pending_tools (thread_id)",
            "CREATE TABLE run_owners (owner_id TEXT PRIMARY KEY, pid INTEGER NOT NULL, host TEXT NOT NULL, "
            "expires_at REAL NOT NULL)",
            "CREATE TABLE runs (thread_id TEXT NOT NULL, run_id TEXT NOT NULL, owner_id TEXT NOT NULL, "
            "claimed_at REAL NOT NULL, PRIMARY KEY (thread_id, run_id))",
        ),
    ),
    2: (
        "events, pending reviews and runs in clustered tables (WITHOUT ROWID): a commit writes fewer pages",
        (
            "CREATE TABLE events_v2 (thread_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, "
            "created_at REAL NOT NULL, payload BLOB NOT NULL, PRIMARY KEY (thread_id, seq)) WITHOUT ROWID",
            "INSERT INTO events_v2 SELECT thread_id, seq, kind, created_at, payload FROM events",
            "DROP TABLE events",
            "ALTER TABLE events_v2 RENAME TO events",
            "CREATE TABLE pending_v2 (thread_id TEXT NOT NULL, interrupt_id TEXT NOT NULL, "
            "position INTEGER NOT NULL, kind TEXT NOT NULL, tools TEXT NOT NULL, created_at REAL NOT NULL, "
            "payload BLOB NOT NULL, PRIMARY KEY (thread_id, interrupt_id)) WITHOUT ROWID",
            "INSERT INTO pending_v2 SELECT thread_id, interrupt_id, position, kind, tools, created_at, "
            "payload FROM pending",
            "DROP TABLE pending",
            "ALTER TABLE pending_v2 RENAME TO pending",
            "CREATE INDEX pending_inbox ON pending (created_at, thread_id, interrupt_id)",
            "CREATE INDEX pending_by_kind ON pending (kind, created_at, thread_id, interrupt_id)",
            "CREATE TABLE runs_v2 (thread_id TEXT NOT NULL, run_id TEXT NOT NULL, owner_id TEXT NOT NULL, "
            "claimed_at REAL NOT NULL, PRIMARY KEY (thread_id, run_id)) WITHOUT ROWID",
            "INSERT INTO runs_v2 SELECT thread_id, run_id, owner_id, claimed_at FROM runs",
            "DROP TABLE runs",
            "ALTER TABLE runs_v2 RENAME TO runs",
        ),
    ),
    3: (
        "each thread's saved reading (its state at an event), which a new process loads",
        (
            "CREATE TABLE readings (thread_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, "
            "created_at REAL NOT NULL, payload BLOB NOT NULL)",
        ),
    ),
}
LEGACY_TABLES = {"threads", "events", "pending", "pending_tools", "run_owners", "runs", "readings"}
REVIEW = PendingReview("i1", "interrupt", ("write_file",), 5.0, b'{"a": 1}')


def legacy_file(path: Path, version: int) -> None:
    """A file as an older handrail left it at ``version``: a paused thread, a live run, an app table."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO customers (name) VALUES ('Ada')")
    conn.execute(
        "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, description TEXT NOT NULL, "
        "applied_at REAL NOT NULL)"
    )
    for number in range(1, version + 1):
        description, statements = LEGACY_DDL[number]
        for statement in statements:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version VALUES (?, ?, ?)", (number, description, 1.0))
    conn.execute(
        "INSERT INTO threads VALUES ('t', 3, 'interrupted', 'e', 1.0, 2.0, ?, 1)", (b'{"team": "x"}',)
    )
    conn.executemany(
        "INSERT INTO events VALUES ('t', ?, 'step', ?, ?)", [(seq, float(seq), b"{}") for seq in (1, 2, 3)]
    )
    conn.execute(
        "INSERT INTO pending VALUES ('t', 'i1', 0, 'interrupt', '[\"write_file\"]', 5.0, ?)",
        (REVIEW.payload,),
    )
    conn.execute("INSERT INTO pending_tools VALUES ('write_file', 5.0, 't', 'i1')")
    conn.execute(
        "INSERT INTO run_owners VALUES ('o', ?, ?, ?)", (os.getpid(), host_identity(), time.time() + 3600)
    )
    conn.execute("INSERT INTO runs VALUES ('t', 'r1', 'o', 1.0)")
    if version >= 3:
        conn.execute("INSERT INTO readings VALUES ('t', 2, 2.5, ?)", (b'{"reading": 1}',))
    conn.close()


def names(path: Path, kind: str) -> set[str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = ? AND name NOT LIKE 'sqlite_%'", (kind,)
        )
        return {row[0] for row in rows}


def expected_record() -> ThreadRecord:
    return ThreadRecord("t", 3, "interrupted", "e", 1.0, 2.0, {"team": "x"}, (REVIEW,))


@pytest.mark.parametrize("version", [1, 2, 3])
def test_a_file_of_an_older_handrail_is_renamed_with_everything_in_it(tmp_path: Path, version: int) -> None:
    """Issue 13 item 12: plain table names become handrail_* ones; no row is lost; the app's table stays."""
    path = tmp_path / "old.db"
    legacy_file(path, version)
    with SqliteSaver(path) as saver:
        assert [e.seq for e in saver.read("t").events] == [1, 2, 3]
        assert saver.get_thread("t") == expected_record()
        assert [item.review for item in saver.list_pending(PendingFilter(tool="write_file"))] == [REVIEW]
        assert [r.thread_id for r in saver.list_threads(ThreadFilter(status="interrupted"))] == ["t"]
        assert saver.runs_alive("t") == {"r1"}
        # migration 4 seals every event and drops the readings of that time (a cache)
        assert saver.read("t", from_reading=True).reading is None
        assert all(e.payload[:1] == b"\x06" for e in saver.read("t").events)
        saver.append(
            "t",
            Append(
                [StoredEvent(4, "step", 4.0, b"{}")],
                expected_seq=3,
                record=ThreadRecord("t", 4, "idle", "e", 1.0, 4.0, {}, ()),
            ),
        )
    tables, indexes = names(path, "table"), names(path, "index")
    assert tables == {"customers", "schema_version"} | {
        f"handrail_{t}" for t in LEGACY_TABLES | {"schema_version", "feed", "deletions", "grants"}
    }
    assert indexes and all(name.startswith("handrail_") for name in indexes), indexes
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT name FROM customers").fetchall() == [("Ada",)]
        versions = conn.execute("SELECT version FROM handrail_schema_version ORDER BY version").fetchall()
        assert versions[:3] == [(1,), (2,), (3,)]
        # the plain table left behind tells an older handrail that this file is newer than it
        (left,) = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        assert left > 3
        for table in ("handrail_events", "handrail_pending", "handrail_runs"):
            (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
            assert sql.endswith("WITHOUT ROWID"), table
    with SqliteSaver(path) as again:  # opened again: nothing more to do
        assert [e.seq for e in again.read("t").events] == [1, 2, 3, 4]


def test_an_application_file_keeps_its_own_tables_and_gains_only_prefixed_ones(tmp_path: Path) -> None:
    """Issue 13 item 12: a file with the app's own threads/events tables simply works."""
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE threads (id INTEGER PRIMARY KEY, title TEXT)")
        conn.execute("CREATE TABLE events (name TEXT)")
        conn.execute("CREATE TABLE schema_version (v INTEGER)")
        conn.execute("INSERT INTO threads (title) VALUES ('hello')")
    before = names(path, "table")
    with SqliteSaver(path) as saver:
        saver.append(
            "t",
            Append(
                [StoredEvent(1, "step", 1.0, b"{}")],
                expected_seq=0,
                record=ThreadRecord("t", 1, "idle", "e", 1.0, 1.0, {}, ()),
            ),
        )
        assert saver.get_thread("t") is not None
    added = names(path, "table") - before
    assert added and all(name.startswith("handrail_") for name in added), added
    assert all(name.startswith("handrail_") for name in names(path, "index"))
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT title FROM threads").fetchall() == [("hello",)]


@pytest.mark.parametrize(
    "ddl",
    [
        "CREATE TABLE handrail_threads (id INTEGER PRIMARY KEY)",
        "CREATE TABLE handrail_schema_version (n INTEGER)",
        "CREATE VIEW handrail_events AS SELECT 1",
    ],
)
def test_tables_under_handrails_names_that_are_not_handrails_are_refused(tmp_path: Path, ddl: str) -> None:
    path = tmp_path / "clash.db"
    with sqlite3.connect(path) as conn:
        conn.execute(ddl)
    before = names(path, "table") | names(path, "view")
    with pytest.raises(ConfigurationError) as caught:
        SqliteSaver(path)
    message = str(caught.value)
    assert (
        repr(str(path)) in message and "handrail_" in message and "give handrail a file of its own" in message
    )
    assert names(path, "table") | names(path, "view") == before  # nothing added


# Damaged files ---------------------------------------------------------------------------
def a_file_with_threads(path: Path, threads: int = 300) -> None:
    with SqliteSaver(path) as saver:
        for n in range(threads):
            saver.append(
                f"t{n}",
                Append(
                    [StoredEvent(1, "step", 1.0, b'{"text": "' + b"x" * 200 + b'"}')],
                    expected_seq=0,
                    record=ThreadRecord(f"t{n}", 1, "idle", "e", 1.0, 1.0, {"n": n}, ()),
                ),
            )
    assert not Path(f"{path}-wal").exists()  # closing checkpointed the log into the file


def every_use(path: Path) -> None:
    with SqliteSaver(path) as saver:
        saver.list_threads(ThreadFilter(limit=1000))
        for n in range(0, 300, 7):
            saver.read(f"t{n}")
        saver.list_pending(PendingFilter())


def assert_names_damage(exc: BaseException, path: Path) -> None:
    message = str(exc)
    assert isinstance(exc, SerializationError), repr(exc)
    assert repr(str(path)) in message and "damaged" in message, message
    assert "backup" in message and ".recover" in message, message
    assert "upgrade" not in message, message


def damage(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(data)


@pytest.mark.parametrize(
    ("what", "offset", "data"),
    [
        ("the magic string", 0, b"not a database!!"),
        ("the page size", 16, b"\xff\xff"),
        ("the schema format (reads as a huge version)", 44, b"\xff\xff\xff\xff"),
        ("the page count and freelist", 28, b"\xff" * 12),
        ("pages in the middle", 8 * 1024, b"\xa5" * 16 * 1024),
    ],
)
def test_a_damaged_file_raises_an_error_naming_it_and_what_to_do(
    tmp_path: Path, what: str, offset: int, data: bytes
) -> None:
    """Issue 13 item 5: never a bare sqlite3 error, never 'upgrade handrail' for damage."""
    path = tmp_path / "damaged.db"
    a_file_with_threads(path)
    damage(path, offset, data)
    with pytest.raises(SerializationError) as caught:
        every_use(path)
    assert_names_damage(caught.value, path)


def test_a_truncated_file_raises_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "cut.db"
    a_file_with_threads(path)
    os.truncate(path, path.stat().st_size // 3)
    with pytest.raises(SerializationError) as caught:
        every_use(path)
    assert_names_damage(caught.value, path)


def test_a_file_that_is_not_a_database_raises_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    with pytest.raises(SerializationError) as caught:
        SqliteSaver(path)
    assert_names_damage(caught.value, path)
    assert path.read_bytes() == b"these are my notes, not a database\n" * 200


@pytest.mark.parametrize("version", [1001, 2**40, 2**63 - 1])
def test_an_implausible_schema_version_is_damage_not_a_newer_handrail(tmp_path: Path, version: int) -> None:
    path = tmp_path / "v.db"
    SqliteSaver(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE handrail_schema_version SET version = ? WHERE version = 3", (version,))
    with pytest.raises(SerializationError) as caught:
        SqliteSaver(path)
    assert_names_damage(caught.value, path)


def test_a_plausible_newer_schema_version_asks_for_a_newer_handrail(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    SqliteSaver(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO handrail_schema_version VALUES (50, 'from the future', 1.0)")
    with pytest.raises(
        ConfigurationError, match=r"schema version 50, newer than this handrail knows.*upgrade"
    ):
        SqliteSaver(path)


# Python steps in migrations -----------------------------------------------------------------
calls: list[str] = []


def _mark(conn: sqlite3.Connection) -> None:
    calls.append("ran")
    conn.execute("INSERT INTO handrail_marks VALUES ('from python')")


def _mark_then_fail(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO handrail_marks VALUES ('half')")
    raise RuntimeError("the step failed half-way")


class _WithPython(SqliteSaver):
    step = staticmethod(_mark)

    def schema_migrations(self) -> tuple[Migration, ...]:
        ours = super().schema_migrations()
        return (
            *ours,
            Migration(
                ours[-1].version + 1, "marks", ("CREATE TABLE handrail_marks (text TEXT)",), run=self.step
            ),
        )


class _FailingPython(_WithPython):
    step = staticmethod(_mark_then_fail)


def test_a_python_migration_step_runs_once_in_its_transaction(tmp_path: Path) -> None:
    path = tmp_path / "py.db"
    calls.clear()
    with _WithPython(path) as saver:
        saver.setup()
    _WithPython(path).close()
    assert calls == ["ran"]
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT text FROM handrail_marks").fetchall() == [("from python",)]


def test_a_failing_python_step_rolls_back_its_migration(tmp_path: Path) -> None:
    path = tmp_path / "py.db"
    SqliteSaver(path).close()
    before = names(path, "table")
    with pytest.raises(RuntimeError, match="half-way"):
        _FailingPython(path)
    assert names(path, "table") == before  # the migration's table went with it
    with sqlite3.connect(path) as conn:
        latest = SqliteSaver.schema_migrations(SqliteSaver.__new__(SqliteSaver))[-1].version
        assert conn.execute("SELECT MAX(version) FROM handrail_schema_version").fetchone() == (latest,)
    calls.clear()
    _WithPython(path).close()  # fixed, it runs
    assert calls == ["ran"]


def test_the_cli_opens_a_file_of_an_older_handrail_and_names_a_damaged_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from handrail.cli import main

    old = tmp_path / "old.db"
    legacy_file(old, 3)
    assert main(["demo", "--yes", "--db", str(old), "--list"]) == 0
    assert "handrail_threads" in names(old, "table") and "threads" not in names(old, "table")
    capsys.readouterr()

    damaged = tmp_path / "damaged.db"
    a_file_with_threads(damaged)
    damage(damaged, 8 * 1024, b"\xa5" * 16 * 1024)
    assert main(["demo", "--yes", "--db", str(damaged), "--list"]) == 1
    err = capsys.readouterr().err.strip()
    assert "damaged" in err and ".recover" in err and "Traceback" not in err, err
