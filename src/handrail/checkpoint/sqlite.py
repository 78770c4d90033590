"""SqliteSaver: the store protocol in one SQLite file, the embedded default.

Theory of operation
-------------------
The file holds a versioned schema (table ``handrail_schema_version``;
:meth:`SqliteSaver.setup` applies :meth:`SqliteSaver.schema_migrations` in order,
idempotently, under SQLite's write lock so that many processes may open a new file at
once). Every table and index is named ``handrail_*``, so the file may be an
application's own: handrail adds its tables and touches nothing else, refuses objects
under its names that it did not make, and renames the tables of a file written before
the prefix (``_adopt_plain_names``). A damaged file raises
:class:`~handrail.errors.SerializationError` naming it. The tables (without the prefix):

``events``         the logs: ``(thread_id, seq)`` is the primary key, ``payload`` the
                   serialised event (JSON, never pickle).
``threads``        one row per thread: head, status, epoch, times, metadata (JSON).
``pending``        one row per pending review, indexed for the inbox: by
                   ``(created_at, thread_id, interrupt_id)`` for keyset paging and by
                   ``kind``; ``pending_tools`` indexes the tool names of each review.
``readings``       each thread's saved reading (its state at an event).
``runs``,          which runs are alive (SPEC rule 9), see below.
``run_owners``

The file is opened in WAL mode, so readers never wait for the writer. An append is
one ``BEGIN IMMEDIATE`` transaction that reads the thread's head and epoch, refuses a
stale ``expected_seq`` (or, past event 0, another epoch: the thread was deleted and
created again) with :class:`~handrail.errors.ConflictError`, and writes the events, the
thread row, its pending reviews and the append's run ``claim``/``release``;
``BEGIN IMMEDIATE`` takes the write lock first, so two writers cannot both see the
same head. The saver keeps a small pool of connections, one per concurrent caller, so
it is safe to share between Python threads; after a fork the child opens its own
connections.

Durability: ``synchronous``
---------------------------
Every append, claim and release is one transaction, and its commit is most of its
cost. With ``synchronous="FULL"`` (the default) a durable commit waits for an fsync of
the WAL: once it returns, the events survive a crash of the process, of the operating
system and a power cut. The runtime asks for that where its promises rest on it: the
commit that records the tool calls a step is about to run (so after any crash a tool
never runs twice without a review: its result is reported as unknown instead), and
the run's last commit (a pause or a final answer is never lost once ``invoke``
returns). The commits in between - a finished tool's result, the state before a
model call - are appended with ``durable=False`` and made with ``synchronous=NORMAL``:
committed and visible to every process, kept if the process dies, but synced to disk
only by the next durable commit (in WAL mode the log is written in order, so one
fsync covers every frame before it). A power cut between the two rolls the thread
back to the last durable commit, where the calls that had begun come back as
``outcome_unknown`` reviews.

``synchronous="NORMAL"`` makes every commit skip the fsync (SQLite syncs the WAL at
checkpoints instead): commits are several times cheaper (on the benchmark machine's
disk an append takes about 0.05 ms instead of 0.3 ms), the file is never corrupted,
and nothing is lost when the *process* crashes or is killed; but a crash of the
operating system or a power cut may roll back the last commits. The thread then comes
back as it was a few commits earlier: a review answered just before the crash is
pending again, and if its tools had already run, approving it again runs them a
second time. Use ``"NORMAL"`` where that is acceptable (development, tests, workers
whose disk does not outlive the machine, tools that are safe to repeat); keep
``"FULL"`` where a tool must never run twice.

Run liveness (SPEC rule 9)
--------------------------
A claimed run is a ``runs`` row pointing at its *owner*: one ``run_owners`` row per
saver per process, holding the process id, an identity of the host's pid space, and a
lease expiry. While the saver has claimed runs, a daemon thread renews the lease every
``lease_seconds / 3``. A run is alive when its owner's lease has not lapsed **and**,
when the owner shares this process's pid space (same host, boot and pid namespace:
the usual case, since a WAL database cannot be shared over a network), its process
still exists. So a killed process is seen dead as soon as it is gone; one that cannot
be checked (another container, a reused pid) is seen dead when its lease lapses.
Nothing a dead process left behind keeps a run alive. A claim (by ``claim_run`` or an
append) writes the saver's ``run_owners`` row only when the heartbeat has not renewed
it within the last ``lease_seconds / 3``, so a claim riding on an append usually costs
a read of the thread's runs and one ``INSERT`` in the append's transaction.

Example::

    from handrail import SqliteSaver, create_agent

    with SqliteSaver.from_conn_string("threads.db") as saver:
        agent = create_agent(model, tools, middleware=[...], checkpointer=saver)
        agent.invoke({"messages": ["hi"]}, {"configurable": {"thread_id": "t1"}})
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import orjson

from handrail.checkpoint._records import (
    Migration,
    check_append,
    check_reading,
    conflict,
    decode_metadata,
    encode_metadata,
    encode_tools,
    epoch_conflict,
    event_from_row,
    host_identity,
    metadata_filter_matches,
    pending_from_row,
    pid_exists,
    record_from_row,
)
from handrail.checkpoint.base import (
    BaseCheckpointSaver,
    PendingFilter,
    PendingItem,
    PendingReview,
    StoredEvent,
    ThreadFilter,
    ThreadRead,
    ThreadRecord,
)
from handrail.checkpoint.serde import dumps
from handrail.errors import ConfigurationError, SerializationError

__all__ = ["AsyncSqliteSaver", "SqliteSaver"]

log = logging.getLogger(__name__)

Synchronous = Literal["FULL", "NORMAL"]

PAGE_SIZE = 1024
"""The page size of a new database file (SQLite's default is 4096)."""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "event logs, thread rows, the pending-review inbox and run leases",
        (
            """CREATE TABLE handrail_threads (
                thread_id     TEXT PRIMARY KEY,
                head_seq      INTEGER NOT NULL,
                status        TEXT NOT NULL,
                epoch         TEXT NOT NULL,
                created_at    REAL NOT NULL,
                updated_at    REAL NOT NULL,
                metadata      BLOB NOT NULL,
                pending_count INTEGER NOT NULL DEFAULT 0
            )""",
            "CREATE INDEX handrail_threads_by_update ON handrail_threads (updated_at DESC, thread_id)",
            "CREATE INDEX handrail_threads_by_status ON handrail_threads (status, updated_at DESC, "
            "thread_id)",
            """CREATE TABLE handrail_events (
                thread_id  TEXT NOT NULL,
                seq        INTEGER NOT NULL,
                kind       TEXT NOT NULL,
                created_at REAL NOT NULL,
                payload    BLOB NOT NULL,
                PRIMARY KEY (thread_id, seq)
            )""",
            """CREATE TABLE handrail_pending (
                thread_id    TEXT NOT NULL,
                interrupt_id TEXT NOT NULL,
                position     INTEGER NOT NULL,
                kind         TEXT NOT NULL,
                tools        TEXT NOT NULL,
                created_at   REAL NOT NULL,
                payload      BLOB NOT NULL,
                PRIMARY KEY (thread_id, interrupt_id)
            )""",
            "CREATE INDEX handrail_pending_inbox ON handrail_pending (created_at, thread_id, interrupt_id)",
            "CREATE INDEX handrail_pending_by_kind ON handrail_pending (kind, created_at, thread_id, "
            "interrupt_id)",
            """CREATE TABLE handrail_pending_tools (
                tool         TEXT NOT NULL,
                created_at   REAL NOT NULL,
                thread_id    TEXT NOT NULL,
                interrupt_id TEXT NOT NULL,
                PRIMARY KEY (tool, created_at, thread_id, interrupt_id)
            ) WITHOUT ROWID""",
            "CREATE INDEX handrail_pending_tools_by_thread ON handrail_pending_tools (thread_id)",
            """CREATE TABLE handrail_run_owners (
                owner_id   TEXT PRIMARY KEY,
                pid        INTEGER NOT NULL,
                host       TEXT NOT NULL,
                expires_at REAL NOT NULL
            )""",
            """CREATE TABLE handrail_runs (
                thread_id  TEXT NOT NULL,
                run_id     TEXT NOT NULL,
                owner_id   TEXT NOT NULL,
                claimed_at REAL NOT NULL,
                PRIMARY KEY (thread_id, run_id)
            )""",
        ),
    ),
    Migration(
        2,
        "events, pending reviews and runs in clustered tables (WITHOUT ROWID): a commit writes fewer pages",
        (
            """CREATE TABLE handrail_events_v2 (
                thread_id  TEXT NOT NULL,
                seq        INTEGER NOT NULL,
                kind       TEXT NOT NULL,
                created_at REAL NOT NULL,
                payload    BLOB NOT NULL,
                PRIMARY KEY (thread_id, seq)
            ) WITHOUT ROWID""",
            "INSERT INTO handrail_events_v2 SELECT thread_id, seq, kind, created_at, payload FROM "
            "handrail_events",
            "DROP TABLE handrail_events",
            "ALTER TABLE handrail_events_v2 RENAME TO handrail_events",
            """CREATE TABLE handrail_pending_v2 (
                thread_id    TEXT NOT NULL,
                interrupt_id TEXT NOT NULL,
                position     INTEGER NOT NULL,
                kind         TEXT NOT NULL,
                tools        TEXT NOT NULL,
                created_at   REAL NOT NULL,
                payload      BLOB NOT NULL,
                PRIMARY KEY (thread_id, interrupt_id)
            ) WITHOUT ROWID""",
            "INSERT INTO handrail_pending_v2 SELECT thread_id, interrupt_id, position, kind, tools, "
            "created_at, "
            "payload FROM handrail_pending",
            "DROP TABLE handrail_pending",
            "ALTER TABLE handrail_pending_v2 RENAME TO handrail_pending",
            "CREATE INDEX handrail_pending_inbox ON handrail_pending (created_at, thread_id, interrupt_id)",
            "CREATE INDEX handrail_pending_by_kind ON handrail_pending (kind, created_at, thread_id, "
            "interrupt_id)",
            """CREATE TABLE handrail_runs_v2 (
                thread_id  TEXT NOT NULL,
                run_id     TEXT NOT NULL,
                owner_id   TEXT NOT NULL,
                claimed_at REAL NOT NULL,
                PRIMARY KEY (thread_id, run_id)
            ) WITHOUT ROWID""",
            "INSERT INTO handrail_runs_v2 SELECT thread_id, run_id, owner_id, claimed_at FROM handrail_runs",
            "DROP TABLE handrail_runs",
            "ALTER TABLE handrail_runs_v2 RENAME TO handrail_runs",
        ),
    ),
    Migration(
        3,
        "each thread's saved reading (its state at an event), which a new process loads",
        (
            """CREATE TABLE handrail_readings (
                thread_id  TEXT PRIMARY KEY,
                seq        INTEGER NOT NULL,
                created_at REAL NOT NULL,
                payload    BLOB NOT NULL
            )""",
        ),
    ),
)

# The file: handrail's tables among others, older files, damage ---------------------------
VERSIONS = "handrail_schema_version"
"""The table of applied migrations (``version``, ``description``, ``applied_at``)."""

PREFIX = "handrail_"
"""Every table and index handrail makes starts with this: it adds nothing else to a file."""

IMPLAUSIBLE_VERSION = 1000
"""A stored schema version above this was never written by handrail: the file is damaged."""

# Before its names were prefixed, handrail kept these tables under their plain names, and
# its versions in ``schema_version``, whose first row (version 1) has this description.
_LEGACY_TABLES = ("threads", "events", "pending", "pending_tools", "run_owners", "runs", "readings")
_LEGACY_FIRST = MIGRATIONS[0].description
_LAST_PLAIN = 3  # the last version handrail made under plain names
_VERSION_COLUMNS = ["version", "description", "applied_at"]
_RENAMED = "handrail's tables are named handrail_* now (in handrail_schema_version): use a newer handrail"

_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26


def _schema_at(conn: sqlite3.Connection) -> int | None:
    """The version handrail's tables are at, or None if that takes a closer look (``_prepare``)."""
    try:
        row = conn.execute(f"SELECT MAX(version) FROM {VERSIONS}").fetchone()
    except sqlite3.OperationalError:  # no such table (or not ours): ``_prepare`` tells
        return None
    return row[0] if row and isinstance(row[0], int) else None


def _prepare(conn: sqlite3.Connection, path: str | None) -> int:
    """Find handrail's schema in the file, in the open write transaction: its version.

    A file without handrail's tables gets the version table (version 0). A file of a
    handrail from before the prefix has its tables and indexes renamed (see
    ``_adopt_plain_names``). Objects under handrail's names that handrail did not make
    are refused, with nothing changed.
    """
    objects = {
        str(name): str(kind)
        for name, kind in conn.execute(
            "SELECT name, type FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
        )
    }
    if VERSIONS in objects:
        if objects[VERSIONS] != "table" or _columns(conn, VERSIONS) != _VERSION_COLUMNS:
            raise _clash(path, [VERSIONS])
        return _stored_version(conn, path, VERSIONS)
    if _holds_plain_names(conn, objects):
        return _adopt_plain_names(conn, path, objects)
    clashing = sorted(name for name in objects if name.startswith(PREFIX))
    if clashing:
        raise _clash(path, clashing)
    conn.execute(
        f"CREATE TABLE {VERSIONS} (version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at REAL "
        "NOT NULL)"
    )
    return 0


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [str(row[1]) for row in conn.execute(f'PRAGMA table_info("{table}")')]


def _stored_version(conn: sqlite3.Connection, path: str | None, table: str) -> int:
    """The highest applied version; one handrail never wrote means damage, not a newer handrail."""
    (version,) = conn.execute(f"SELECT MAX(version) FROM {table}").fetchone()
    if version is None:
        return 0
    if not isinstance(version, int) or not 0 < version <= IMPLAUSIBLE_VERSION:
        raise _damaged_file(f"its schema version reads {version!r}", path)
    return version


def _holds_plain_names(conn: sqlite3.Connection, objects: dict[str, str]) -> bool:
    """Whether the file holds handrail's tables as a handrail before the prefix made them."""
    if any(objects.get(name) != "table" for name in ("schema_version", "threads", "events")):
        return False
    if _columns(conn, "schema_version") != _VERSION_COLUMNS:
        return False
    row = conn.execute("SELECT description FROM schema_version WHERE version = 1").fetchone()
    return row is not None and row[0] == _LEGACY_FIRST


def _adopt_plain_names(conn: sqlite3.Connection, path: str | None, objects: dict[str, str]) -> int:
    """Rename an older handrail's tables and indexes to ``handrail_*``; returns their version.

    The rows of ``schema_version`` move to ``handrail_schema_version``; ``schema_version``
    keeps one row, a version above any that handrail knew, so that an older handrail
    opening the file refuses it ("newer than this handrail knows") instead of making
    empty tables beside the renamed ones. Nothing else of the file is touched.
    """
    version = _stored_version(conn, path, "schema_version")
    tables = [name for name in _LEGACY_TABLES if objects.get(name) == "table"]
    taken = sorted(PREFIX + name for name in tables if PREFIX + name in objects)
    if taken:
        raise _clash(path, taken)
    for name in tables:
        conn.execute(f'ALTER TABLE "{name}" RENAME TO "{PREFIX}{name}"')
    marks = ", ".join("?" * len(tables))
    indexes = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN "
        f"({marks})",
        [PREFIX + name for name in tables],
    ).fetchall()
    for name, sql in indexes:  # SQLite cannot rename an index: make it again under its new name
        if str(name).startswith(PREFIX) or " ON " not in sql:
            continue
        conn.execute(f'DROP INDEX "{name}"')
        conn.execute(f'CREATE INDEX "{PREFIX}{name}" ON {sql.split(" ON ", 1)[1]}')
    conn.execute(
        f"CREATE TABLE {VERSIONS} (version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at REAL "
        "NOT NULL)"
    )
    conn.execute(f"INSERT INTO {VERSIONS} SELECT version, description, applied_at FROM schema_version")
    conn.execute("DELETE FROM schema_version")
    conn.execute(
        "INSERT INTO schema_version VALUES (?, ?, ?)", (max(version, _LAST_PLAIN) + 1, _RENAMED, time.time())
    )
    return version


def _clash(path: str | None, names: Sequence[str]) -> ConfigurationError:
    shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    return ConfigurationError(
        f"the SQLite file {path!r} holds tables or indexes under handrail's names that handrail did not "
        f"make ({shown}); handrail keeps its data only in objects named handrail_*: rename or drop "
        "these, or give handrail a file of its own"
    )


def _is_damage(exc: BaseException | None) -> bool:
    """Whether an error from SQLite says the file is damaged (not locked, full, missing, ...)."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    # a damaged header's schema format reads as one SQLite does not know: damage too
    return code in (_SQLITE_CORRUPT, _SQLITE_NOTADB) or "unsupported file format" in str(exc)


def _damaged_file(reason: BaseException | str, path: str | None) -> SerializationError:
    """The error for a damaged file: which file, that it is damaged, and what to do."""
    name = path if path not in (None, ":memory:") else None
    shown = repr(name) if name is not None else "(an open connection)"
    target = name or "FILE"
    return SerializationError(
        f"the SQLite file {shown} is damaged ({reason}); handrail cannot use it. Restore it from a "
        f"backup, or save what is still readable with: sqlite3 {target} .recover | sqlite3 recovered.db"
    )


_RECORD_COLUMNS = "thread_id, head_seq, status, epoch, created_at, updated_at, metadata, pending_count"
_PENDING_COLUMNS = "p.thread_id, p.interrupt_id, p.kind, p.tools, p.created_at, p.payload"


class _SqliteStore(BaseCheckpointSaver):
    """What SqliteSaver and AsyncSqliteSaver share: everything but setup and closing."""

    def __init__(
        self,
        conn: str | os.PathLike[str] | sqlite3.Connection,
        *,
        lease_seconds: float = 30.0,
        timeout: float = 30.0,
        synchronous: Synchronous = "FULL",
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ConfigurationError(f'synchronous must be "FULL" or "NORMAL", got {synchronous!r}')
        if not lease_seconds > 0:
            raise ConfigurationError(f"lease_seconds must be positive, got {lease_seconds!r}")
        self.lease_seconds = float(lease_seconds)
        self._timeout = float(timeout)
        self._synchronous = synchronous
        self._pid = os.getpid()
        self._idle: list[sqlite3.Connection] = []
        self._abandoned: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()
        self._closed = False
        self._shared: sqlite3.Connection | None = None
        self._shared_lock = threading.RLock()
        self._failure = threading.local()  # why a SQL function of ours failed, per thread
        self._group_lock = threading.Lock()
        self._group: list[_Write] = []  # appends waiting for the leader's transaction
        self._known = _Known()
        self._leading = False
        if isinstance(conn, sqlite3.Connection):
            conn.isolation_level = None
            self._register_functions(conn)
            self._shared = conn
            self.path: str | None = None
        else:
            self.path = os.fspath(conn)
            if self.path == ":memory:":
                self._shared = self._open()
            elif not self.path.startswith("file:"):
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._owner_id = uuid.uuid4().hex
        self._renewed: tuple[str, float] = ("", 0.0)  # this saver's lease, last written: owner, time
        self._claimed: set[tuple[str, str]] = set()
        self._runs_lock = threading.Lock()
        self._heartbeat: threading.Thread | None = None
        self._stop = threading.Event()
        self._migrate()

    # Connections -----------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        assert self.path is not None
        conn = sqlite3.connect(
            self.path,
            timeout=self._timeout,
            isolation_level=None,
            check_same_thread=False,
            uri=self.path.startswith("file:"),
            factory=_Connection,
        )
        conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        conn.synchronous = self._synchronous
        self._register_functions(conn)
        return conn

    def _register_functions(self, conn: sqlite3.Connection) -> None:
        failure = self._failure

        def matches(thread_id: str, stored: Any, wanted: bytes) -> int:
            try:
                return int(metadata_filter_matches(thread_id, stored, wanted))
            except SerializationError as exc:
                failure.error = exc  # sqlite3 only reports "user-defined function raised exception"
                raise

        conn.create_function("handrail_metadata_matches", 3, matches, deterministic=True)

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        conn = self._acquire()
        try:
            yield conn
        finally:
            self._release(conn)

    def _acquire(self) -> sqlite3.Connection:
        """A connection of the pool (or the shared one, locked); give it back with ``_release``."""
        if self._closed:
            raise ConfigurationError("this SqliteSaver is closed")
        if self._shared is not None:
            self._shared_lock.acquire()
            return self._shared
        with self._pool_lock:
            if os.getpid() != self._pid:  # forked: never touch the parent's connections
                self._abandoned.extend(self._idle)
                self._idle = []
                self._pid = os.getpid()
                self._owner_id = uuid.uuid4().hex
                self._claimed = set()
                self._heartbeat = None
            conn = self._idle.pop() if self._idle else None
        return conn if conn is not None else self._open()

    def _release(self, conn: sqlite3.Connection) -> None:
        if conn is self._shared:
            self._shared_lock.release()
        elif conn.in_transaction:  # interrupted half-way: do not reuse it
            conn.close()
        else:
            with self._pool_lock:
                if self._closed or os.getpid() != self._pid:
                    conn.close()
                else:
                    self._idle.append(conn)

    def _transaction(self, *, write: bool, durable: bool = True) -> _Transaction:
        """One transaction; a write takes SQLite's write lock before reading anything.

        ``durable=False`` commits with ``synchronous=NORMAL`` (no fsync; in WAL mode the
        next FULL commit syncs the log, this commit's frames included).
        """
        return _Transaction(self, write, durable)

    def schema_migrations(self) -> tuple[Migration, ...]:
        """The schema, version by version (a subclass may add its own at the end)."""
        return MIGRATIONS

    def _migrate(self) -> None:
        try:
            self._migrate_schema()
        except sqlite3.DatabaseError as exc:
            if not _is_damage(exc):
                raise
            raise _damaged_file(exc, self.path) from exc

    def _migrate_schema(self) -> None:
        migrations = self.schema_migrations()
        latest = migrations[-1].version
        with self._connection() as conn:
            if self.path != ":memory:":
                # A new file gets small pages: an append touches a dozen b-trees, one page
                # each, and a commit writes (and syncs) whole pages. No-op on an existing file.
                conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
                mode = self._switch_to_wal(conn)
                if mode is None or str(mode[0]).lower() not in ("wal", "memory"):
                    log.warning("SQLite could not switch %s to WAL mode (%s)", self.path, mode)
            if _schema_at(conn) == latest:
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                current = _prepare(conn, self.path)
                if current > latest:
                    raise ConfigurationError(
                        f"the SQLite database {self.path!r} has schema version {current}, newer than "
                        f"this handrail knows ({latest}); upgrade handrail"
                    )
                for migration in migrations:
                    if migration.version <= current:
                        continue
                    for statement in migration.statements:
                        conn.execute(statement)
                    if migration.run is not None:
                        migration.run(conn)
                    conn.execute(
                        f"INSERT INTO {VERSIONS} (version, description, applied_at) VALUES (?, ?, ?)",
                        (migration.version, migration.description, time.time()),
                    )
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _switch_to_wal(self, conn: sqlite3.Connection) -> Any:
        """``PRAGMA journal_mode = WAL``, retried while another opener holds the file.

        Switching needs an exclusive lock, and SQLite may refuse it at once ("database
        is locked") instead of waiting, when several processes open a new file together.
        """
        deadline = time.monotonic() + self._timeout
        pause = 0.001
        while True:
            try:
                return conn.execute("PRAGMA journal_mode = WAL").fetchone()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def close(self) -> None:
        """Forget this process's runs, stop the lease heartbeat and close the connections."""
        if self._closed:
            return
        self._stop.set()
        if os.getpid() == self._pid:
            try:
                with self._transaction(write=True) as conn:
                    conn.execute("DELETE FROM handrail_runs WHERE owner_id = ?", (self._owner_id,))
                    conn.execute("DELETE FROM handrail_run_owners WHERE owner_id = ?", (self._owner_id,))
            except (sqlite3.Error, SerializationError):  # a damaged file: closing still closes
                log.warning("could not release the runs of %s on close", self.path, exc_info=True)
        with self._pool_lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        if self._shared is not None and self.path == ":memory:":
            self._shared.close()

    # The protocol ----------------------------------------------------------------------
    # No ``wait`` keyword (issue 12, defect 2: the unwaited append is gone); the ignores
    # go when ``BaseCheckpointSaver.append`` drops it too.
    def append(  # type: ignore[override]
        self,
        thread_id: str,
        events: Sequence[StoredEvent],
        *,
        expected_seq: int,
        record: ThreadRecord,
        claim: str | None = None,
        release: str | None = None,
        durable: bool = True,
        reading: StoredEvent | None = None,
    ) -> None:
        write = self._write_of(thread_id, events, expected_seq, record, claim, release, durable, reading)
        released = self._forget_release(write)
        try:
            self._commit_together(write)
        except BaseException:
            self._restore_release(write, released)
            raise
        self._claimed_after(write)

    async def aappend(  # type: ignore[override]
        self,
        thread_id: str,
        events: Sequence[StoredEvent],
        *,
        expected_seq: int,
        record: ThreadRecord,
        claim: str | None = None,
        release: str | None = None,
        durable: bool = True,
        reading: StoredEvent | None = None,
    ) -> None:
        """Queue the append for the group commit and wait for it without a thread of its own.

        One worker thread leads while appends keep coming, so concurrent runs share
        both the transaction (one fsync) and the hop to a thread (see
        :meth:`_commit_together`).
        """
        write = self._write_of(thread_id, events, expected_seq, record, claim, release, durable, reading)
        loop = asyncio.get_running_loop()
        write.loop, write.future = loop, loop.create_future()
        released = self._forget_release(write)
        with self._group_lock:
            self._group.append(write)
            lead = not self._leading
            self._leading = True
        if lead:
            loop.run_in_executor(None, self._lead, True)
        try:
            await write.future
        except BaseException:
            self._restore_release(write, released)
            raise
        self._claimed_after(write)

    def _write_of(
        self,
        thread_id: str,
        events: Sequence[StoredEvent],
        expected_seq: int,
        record: ThreadRecord,
        claim: str | None,
        release: str | None,
        durable: bool,
        reading: StoredEvent | None = None,
    ) -> _Write:
        check_append(thread_id, events, expected_seq, record)
        check_reading(reading, record)
        pending_rows, tool_rows = _pending_rows(thread_id, record.pending)
        return _Write(
            thread_id=thread_id,
            event_rows=[(thread_id, e.seq, e.kind, e.created_at, e.payload) for e in events],
            expected_seq=expected_seq,
            record=record,
            metadata=encode_metadata(record.metadata, thread_id),
            pending_rows=pending_rows,
            tool_rows=tool_rows,
            claim=claim,
            release=release,
            durable=durable,
            reading=reading,
        )

    def _forget_release(self, write: _Write) -> bool:
        """Stop renewing a run this append releases; whether it was ours to renew."""
        if write.release is None:
            return False
        with self._runs_lock:
            key = (write.thread_id, write.release)
            released = key in self._claimed
            self._claimed.discard(key)
        return released

    def _restore_release(self, write: _Write, released: bool) -> None:
        if write.release is not None and released:
            with self._runs_lock:
                self._claimed.add((write.thread_id, write.release))

    def _claimed_after(self, write: _Write) -> None:
        if write.claim is not None and write.claim != write.release:
            self._claimed_now(write.thread_id, write.claim, write.renewed)

    # Group commit -------------------------------------------------------------------------
    def _commit_together(self, write: _Write) -> None:
        """Commit ``write``, in one transaction with the appends of other threads waiting.

        SQLite has one writer at a time and a durable commit costs an fsync, so appends
        made at the same moment (the threads of a server, the concurrent runs of an
        event loop) share a transaction: the first caller *leads*, takes every append
        queued meanwhile and commits them together, each under its own savepoint (an
        append that conflicts is rolled back alone and raises in its own caller); then
        it hands the lead to the next caller in the queue. Alone, an append is simply
        its own transaction. :meth:`aappend` queues the same way, without a thread of
        its own: the first one starts a worker thread that leads until the queue is
        empty.
        """
        with self._group_lock:
            self._group.append(write)
            leader = not self._leading
            self._leading = True
            if not leader:
                write.turn = threading.Event()
        if write.turn is not None:
            write.turn.wait()  # done by a leader, or asked to lead
        if not write.done:
            self._lead()
        if write.error is not None:
            raise write.error

    def _lead(self, until_empty: bool = False) -> None:
        """Commit the queued appends, batch after batch, then pass the lead on or end it.

        A sync caller hands the lead to the next sync caller in the queue; appends of
        async callers have no thread waiting, so the leader goes on with them itself
        (``until_empty``: the worker thread :meth:`aappend` started always does).
        """
        while True:
            with self._group_lock:
                batch, self._group = self._group, []
            try:
                self._commit_batch(batch)  # an append's error is kept on it, for its caller
            except BaseException as exc:  # KeyboardInterrupt and the like: fail what waits
                with self._group_lock:
                    waiting, self._group = batch + self._group, []
                    self._leading = False
                    for write in waiting:
                        write.error = write.error or exc
                        write.done = True
                        if write.turn is not None:
                            write.turn.set()
                    _resolve_futures(waiting)
                raise
            with self._group_lock:
                for write in batch:
                    write.done = True
                    if write.turn is not None:
                        write.turn.set()
                _resolve_futures(batch)
                if not self._group:
                    self._leading = False
                    return
                if self._group[0].turn is not None and not until_empty:
                    self._group[0].turn.set()  # the next waiting caller leads
                    return
                # appends of async callers are next: nobody else would commit them

    def _commit_batch(self, batch: list[_Write]) -> None:
        """One transaction for ``batch``; each append's error is left on it (``write.error``)."""
        durable = any(write.durable for write in batch)
        try:
            with self._transaction(write=True, durable=durable) as conn:
                if len(batch) == 1:
                    batch[0].renewed = self._apply(conn, batch[0])
                else:
                    for write in batch:
                        conn.execute("SAVEPOINT handrail_append")
                        try:
                            write.renewed = self._apply(conn, write)
                        except Exception as exc:
                            conn.execute("ROLLBACK TO handrail_append")
                            write.error = _damaged_file(exc, self.path) if _is_damage(exc) else exc
                        conn.execute("RELEASE handrail_append")
        except Exception as exc:  # the transaction failed: nothing of the batch was saved
            for write in batch:
                if write.error is None:
                    write.error = exc
        for write in batch:
            if write.error is None:
                self._known.committed(write)
            else:
                self._known.forget(write.thread_id)

    def _apply(self, conn: sqlite3.Connection, write: _Write) -> tuple[str, float] | None:
        """One append inside the open write transaction (see :meth:`append`)."""
        thread_id, expected_seq, record = write.thread_id, write.expected_seq, write.record
        row = self._known.row(thread_id, expected_seq, record.epoch) if expected_seq else None
        if row is None or not self._update_row(conn, write, row, True):
            row = conn.execute(
                "SELECT head_seq, epoch, pending_count, status, created_at, updated_at, metadata "
                "FROM handrail_threads WHERE thread_id = ?",
                (thread_id,),
            ).fetchone()
            head = row[0] if row is not None else 0
            if head != expected_seq:
                raise conflict(thread_id, expected_seq, head)
            if row is not None and expected_seq > 0 and row[1] != record.epoch:
                raise epoch_conflict(thread_id)
            self._update_row(conn, write, row, False)
        try:
            conn.executemany(
                "INSERT INTO handrail_events (thread_id, seq, kind, created_at, payload) VALUES (?, ?, ?, "
                "?, ?)",
                write.event_rows,
            )
        except sqlite3.IntegrityError:
            raise conflict(thread_id, expected_seq, None) from None
        if row is not None and row[2]:
            conn.execute("DELETE FROM handrail_pending WHERE thread_id = ?", (thread_id,))
            conn.execute("DELETE FROM handrail_pending_tools WHERE thread_id = ?", (thread_id,))
        if write.pending_rows:
            conn.executemany(
                "INSERT INTO handrail_pending (thread_id, interrupt_id, position, kind, tools, created_at, "
                "payload) VALUES (?, ?, ?, ?, ?, ?, ?)",
                write.pending_rows,
            )
            conn.executemany(
                "INSERT OR IGNORE INTO handrail_pending_tools (tool, created_at, thread_id, interrupt_id) "
                "VALUES (?, ?, ?, ?)",
                write.tool_rows,
            )
        renewed = self._claim(conn, thread_id, write.claim) if write.claim is not None else None
        if write.release is not None:
            conn.execute(
                "DELETE FROM handrail_runs WHERE thread_id = ? AND run_id = ?", (thread_id, write.release)
            )
        if write.reading is not None:
            conn.execute(
                "INSERT OR REPLACE INTO handrail_readings (thread_id, seq, created_at, payload) VALUES (?, "
                "?, ?, ?)",
                (thread_id, write.reading.seq, write.reading.created_at, write.reading.payload),
            )
        return renewed

    @staticmethod
    def _update_row(
        conn: sqlite3.Connection, write: _Write, row: tuple[Any, ...] | None, known: bool
    ) -> bool:
        """Write the thread's row; ``known``: only if it is still at the expected head and epoch.

        Returns whether the row was written (always, unless ``known`` and it moved).
        """
        record, thread_id = write.record, write.thread_id
        # the columns in the order of both statements below, the thread id last
        values = (
            record.head_seq,
            record.status,
            record.epoch,
            record.created_at,
            record.updated_at,
            write.metadata,
            len(record.pending),
            thread_id,
        )
        if row is None:
            conn.execute(
                "INSERT INTO handrail_threads (head_seq, status, epoch, created_at, updated_at, metadata, "
                "pending_count, thread_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                values,
            )
            return True
        where, at = (
            (" AND head_seq = ? AND epoch = ?", (write.expected_seq, record.epoch)) if known else ("", ())
        )
        if row[1] == record.epoch and row[3:] == (
            record.status,
            record.created_at,
            record.updated_at,
            write.metadata,
        ):
            # only the head moved (a step inside a run): leave the indexed columns alone,
            # or SQLite rewrites their index entries (two by-time indexes) all the same
            cursor = conn.execute(
                "UPDATE handrail_threads SET head_seq = ?, pending_count = ? WHERE thread_id = ?" + where,
                (record.head_seq, len(record.pending), thread_id, *at),
            )
        else:
            cursor = conn.execute(
                "UPDATE handrail_threads SET head_seq = ?, status = ?, epoch = ?, created_at = ?, "
                "updated_at = ?, metadata = ?, pending_count = ? WHERE thread_id = ?" + where,
                values + at,
            )
        return not known or cursor.rowcount == 1

    def read(
        self, thread_id: str, *, after_seq: int = 0, upto_seq: int | None = None, from_reading: bool = False
    ) -> ThreadRead:
        sql = "SELECT seq, kind, created_at, payload FROM handrail_events WHERE thread_id = ? AND seq > ?"
        reading = None
        with self._transaction(write=False) as conn:
            if from_reading and not after_seq and upto_seq is None:
                row = conn.execute(
                    "SELECT seq, created_at, payload FROM handrail_readings WHERE thread_id = ?", (thread_id,)
                ).fetchone()
                if row is not None:
                    reading = event_from_row(thread_id, row[0], "reading", row[1], row[2])
                    after_seq = reading.seq
            params: list[Any] = [thread_id, after_seq]
            if upto_seq is not None:
                sql += " AND seq <= ?"
                params.append(upto_seq)
            records = self._records(conn, "WHERE thread_id = ?", [thread_id])
            rows = conn.execute(sql + " ORDER BY seq", params).fetchall()
        events = [event_from_row(thread_id, *row) for row in rows]
        return ThreadRead(record=records[0] if records else None, events=events, reading=reading)

    def get_thread(self, thread_id: str) -> ThreadRecord | None:
        with self._transaction(write=False) as conn:
            records = self._records(conn, "WHERE thread_id = ?", [thread_id])
        return records[0] if records else None

    def list_threads(self, filter: ThreadFilter) -> list[ThreadRecord]:
        where: list[str] = []
        params: list[Any] = []
        if filter.status is not None:
            where.append("status = ?")
            params.append(filter.status)
        if filter.updated_after is not None:
            where.append("updated_at > ?")
            params.append(filter.updated_after)
        if filter.updated_before is not None:
            where.append("updated_at < ?")
            params.append(filter.updated_before)
        if filter.metadata:
            where.append("handrail_metadata_matches(thread_id, metadata, ?)")
            params.append(dumps(dict(filter.metadata), where="the metadata filter"))
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        clause += " ORDER BY updated_at DESC, thread_id LIMIT ? OFFSET ?"
        params += [max(filter.limit, 0), max(filter.offset, 0)]
        with self._transaction(write=False) as conn:
            return self._records(conn, clause, params)

    def list_pending(self, filter: PendingFilter) -> list[PendingItem]:
        sql, params = self._pending_query(filter, time.time())
        with self._transaction(write=False) as conn:
            rows = conn.execute(sql, params).fetchall()
        metadata_of: dict[str, Any] = {}
        items = []
        for *pending, metadata in rows:
            thread_id = pending[0]
            if thread_id not in metadata_of:
                metadata_of[thread_id] = decode_metadata(metadata, thread_id)
            items.append(
                PendingItem(
                    thread_id=thread_id, review=pending_from_row(*pending), metadata=metadata_of[thread_id]
                )
            )
        return items

    def _pending_query(self, filter: PendingFilter, now: float) -> tuple[str, list[Any]]:
        """The inbox query: an index range in ``(created_at, thread_id, interrupt_id)`` order."""
        where: list[str] = []
        params: list[Any] = []
        # ``o`` is the table whose index orders the page: the tool index when a tool is named
        if filter.tool is not None:
            o = "o"
            source = (
                "handrail_pending_tools AS o JOIN handrail_pending AS p "
                "ON p.thread_id = o.thread_id AND p.interrupt_id = o.interrupt_id"
            )
            where.append("o.tool = ?")
            params.append(filter.tool)
        else:
            o = "p"
            source = "handrail_pending AS p"
        if filter.kind is not None:
            where.append("p.kind = ?")
            params.append(filter.kind)
        if filter.thread_id is not None:
            where.append(f"{o}.thread_id = ?")
            params.append(filter.thread_id)
        if filter.older_than is not None:
            where.append(f"{o}.created_at <= ?")
            params.append(now - filter.older_than)
        if filter.after is not None:
            where.append(f"({o}.created_at, {o}.thread_id, {o}.interrupt_id) > (?, ?, ?)")
            params += list(filter.after)
        if filter.metadata:
            where.append("handrail_metadata_matches(t.thread_id, t.metadata, ?)")
            params.append(dumps(dict(filter.metadata), where="the metadata filter"))
        sql = (
            f"SELECT {_PENDING_COLUMNS}, t.metadata FROM {source} "
            "JOIN handrail_threads AS t ON t.thread_id = p.thread_id"
            + ((" WHERE " + " AND ".join(where)) if where else "")
            + f" ORDER BY {o}.created_at, {o}.thread_id, {o}.interrupt_id LIMIT ?"
        )
        params.append(max(filter.limit, 0))
        return sql, params

    def delete_thread(self, thread_id: str) -> bool:
        self._known.forget(thread_id)
        with self._transaction(write=True) as conn:
            existed = (
                conn.execute("DELETE FROM handrail_threads WHERE thread_id = ?", (thread_id,)).rowcount > 0
            )
            for table in (
                "handrail_events",
                "handrail_pending",
                "handrail_pending_tools",
                "handrail_runs",
                "handrail_readings",
            ):
                conn.execute(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))
        return existed

    def prune(
        self, thread_id: str, *, upto_seq: int, snapshot: StoredEvent, keep_kinds: frozenset[str]
    ) -> int:
        if snapshot.seq != upto_seq:
            raise ValueError(f"the snapshot must take the place of event {upto_seq}")
        kinds = sorted(keep_kinds)
        kept = f" AND kind NOT IN ({', '.join('?' * len(kinds))})" if kinds else ""
        with self._transaction(write=True) as conn:
            replaced = conn.execute(
                "UPDATE handrail_events SET kind = ?, created_at = ?, payload = ? WHERE thread_id = ? AND "
                "seq = ?",
                (snapshot.kind, snapshot.created_at, snapshot.payload, thread_id, upto_seq),
            ).rowcount
            if replaced != 1:
                raise ValueError(f"thread {thread_id!r} has no event {upto_seq} to replace with a snapshot")
            dropped: int = conn.execute(
                f"DELETE FROM handrail_events WHERE thread_id = ? AND seq < ?{kept}",
                (thread_id, upto_seq, *kinds),
            ).rowcount
            # a saved reading holds the history before the snapshot: the next run saves another
            conn.execute("DELETE FROM handrail_readings WHERE thread_id = ?", (thread_id,))
        return dropped

    # Run liveness (rule 9) ---------------------------------------------------------------
    def claim_run(self, thread_id: str, run_id: str) -> None:
        with self._transaction(write=True) as conn:
            renewed = self._claim(conn, thread_id, run_id)
        self._claimed_now(thread_id, run_id, renewed)

    def _claim(self, conn: sqlite3.Connection, thread_id: str, run_id: str) -> tuple[str, float] | None:
        """Claim a run in the open write transaction, forgetting the thread's dead runs.

        Returns ``(owner_id, time)`` when it renewed this saver's lease, for
        :meth:`_claimed_now` to note once the transaction has committed.
        """
        now = time.time()
        owner_id = self._owner_id
        renewed = None
        if self._renewed[0] != owner_id or self._renewed[1] < now - self.lease_seconds / 3:
            # the owner row: written once a heartbeat period (the heartbeat keeps it fresh
            # while runs are claimed), and a chance to forget the owners of dead processes
            self._renew_owner(conn, now)
            conn.execute(
                "DELETE FROM handrail_run_owners WHERE expires_at < ? AND owner_id NOT IN (SELECT owner_id "
                "FROM handrail_runs)",
                (now,),
            )
            renewed = (owner_id, now)
        rows = conn.execute(_RUNS_SQL, (thread_id,)).fetchall()
        dead = [
            (thread_id, run) for run, *owner in rows if run != run_id and not self._owner_alive(now, *owner)
        ]
        if dead:
            conn.executemany("DELETE FROM handrail_runs WHERE thread_id = ? AND run_id = ?", dead)
        conn.execute(
            "INSERT INTO handrail_runs (thread_id, run_id, owner_id, claimed_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (thread_id, run_id) DO UPDATE SET owner_id = excluded.owner_id, "
            "claimed_at = excluded.claimed_at",
            (thread_id, run_id, owner_id, now),
        )
        return renewed

    def _claimed_now(self, thread_id: str, run_id: str, renewed: tuple[str, float] | None) -> None:
        """After a claim commits: remember it, and keep the lease renewed while runs are claimed."""
        with self._runs_lock:
            if renewed is not None:
                self._renewed = renewed
            self._claimed.add((thread_id, run_id))
            if self._heartbeat is None or not self._heartbeat.is_alive():
                self._heartbeat = threading.Thread(
                    target=self._renew_leases, name="handrail-sqlite-lease", daemon=True
                )
                self._heartbeat.start()

    def release_run(self, thread_id: str, run_id: str) -> None:
        with self._runs_lock:
            self._claimed.discard((thread_id, run_id))
        with self._transaction(write=True) as conn:
            conn.execute("DELETE FROM handrail_runs WHERE thread_id = ? AND run_id = ?", (thread_id, run_id))

    def runs_alive(self, thread_id: str) -> set[str]:
        now = time.time()
        with self._transaction(write=False) as conn:
            rows = conn.execute(_RUNS_SQL, (thread_id,)).fetchall()
        return {run for run, *owner in rows if self._owner_alive(now, *owner)}

    @staticmethod
    def _owner_alive(now: float, pid: int | None, host: str | None, expires_at: float | None) -> bool:
        if pid is None or expires_at is None or expires_at <= now:
            return False
        return host != host_identity() or pid_exists(pid)

    def _renew_owner(self, conn: sqlite3.Connection, now: float) -> None:
        conn.execute(
            "INSERT INTO handrail_run_owners (owner_id, pid, host, expires_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (owner_id) DO UPDATE SET expires_at = excluded.expires_at",
            (self._owner_id, os.getpid(), host_identity(), now + self.lease_seconds),
        )

    def _renew_leases(self) -> None:
        """The heartbeat: renew this process's lease while it has claimed runs."""
        while not self._stop.wait(self.lease_seconds / 3):
            with self._runs_lock:
                if not self._claimed or os.getpid() != self._pid:
                    self._heartbeat = None
                    return
            try:
                now = time.time()
                with self._transaction(write=True) as conn:
                    self._renew_owner(conn, now)
                with self._runs_lock:
                    self._renewed = (self._owner_id, now)
            except Exception:
                log.warning("could not renew the run lease in %s", self.path, exc_info=True)

    # Reading rows --------------------------------------------------------------------------
    def _records(self, conn: sqlite3.Connection, clause: str, params: Sequence[Any]) -> list[ThreadRecord]:
        rows = conn.execute(f"SELECT {_RECORD_COLUMNS} FROM handrail_threads {clause}", params).fetchall()
        with_pending = [row[0] for row in rows if row[7]]
        pending: dict[str, list[PendingReview]] = {}
        for start in range(0, len(with_pending), 500):
            chunk = with_pending[start : start + 500]
            marks = ", ".join("?" * len(chunk))
            for row in conn.execute(
                f"SELECT {_PENDING_COLUMNS} FROM handrail_pending AS p WHERE p.thread_id IN ({marks}) "
                "ORDER BY p.thread_id, p.position",
                chunk,
            ):
                pending.setdefault(row[0], []).append(pending_from_row(*row))
        return [_record(row, pending.get(row[0], ())) for row in rows]


@dataclass(slots=True, eq=False)
class _Write:
    """One append waiting for its group's transaction (see ``_commit_together``)."""

    thread_id: str
    event_rows: list[tuple[Any, ...]]
    expected_seq: int
    record: ThreadRecord
    metadata: bytes
    pending_rows: list[tuple[Any, ...]]
    tool_rows: list[tuple[Any, ...]]
    claim: str | None
    release: str | None
    durable: bool
    reading: StoredEvent | None = None
    turn: threading.Event | None = None  # made only for a caller that waits for a leader
    loop: asyncio.AbstractEventLoop | None = None  # an async caller waits on ``future`` instead
    future: asyncio.Future[None] | None = None
    done: bool = False
    error: BaseException | None = None
    renewed: tuple[str, float] | None = None


def _resolve_futures(batch: list[_Write]) -> None:
    """Wake the async callers of a committed batch: one call into each event loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Write]] = {}
    for write in batch:
        if write.loop is not None:
            by_loop.setdefault(write.loop, []).append(write)
    for loop, writes in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle, writes)
        except RuntimeError:  # the loop was closed: nobody is waiting any more
            pass


def _settle(writes: list[_Write]) -> None:
    for write in writes:
        future = write.future
        if future is None or future.done():
            continue
        if write.error is not None:
            future.set_exception(write.error)
        else:
            future.set_result(None)


class _Known:
    """Each thread's row as this saver's own last committed append left it.

    An append at that head and epoch takes the row from here instead of reading it:
    its ``UPDATE`` carries the head and epoch in its ``WHERE`` clause, so a row that
    another writer moved meanwhile is not changed, and the append reads the row and
    fails as it would have (one statement less for every append of a run).
    """

    __slots__ = ("rows",)
    LIMIT = 4096  # threads remembered; an older one is just read again

    def __init__(self) -> None:
        self.rows: dict[str, tuple[Any, ...]] = {}

    def row(self, thread_id: str, expected_seq: int, epoch: str) -> tuple[Any, ...] | None:
        """The row (as ``_apply`` selects it) if this saver left it at ``expected_seq``."""
        known = self.rows.get(thread_id)
        return known if known is not None and known[0] == expected_seq and known[1] == epoch else None

    def committed(self, write: _Write) -> None:
        record, rows = write.record, self.rows
        rows.pop(write.thread_id, None)  # re-insert: the dict's order is the order of use
        rows[write.thread_id] = (
            record.head_seq,
            record.epoch,
            len(record.pending),
            record.status,
            record.created_at,
            record.updated_at,
            write.metadata,
        )
        if len(rows) > self.LIMIT:
            rows.pop(next(iter(rows)), None)

    def forget(self, thread_id: str) -> None:
        self.rows.pop(thread_id, None)


class _Connection(sqlite3.Connection):
    """A connection that remembers its ``PRAGMA synchronous`` level."""

    synchronous = ""


class _Transaction:
    """``with store._transaction(...) as conn``: begin, then commit, or roll back on error.

    A class rather than a generator: every append opens one, and this costs a fraction.
    """

    __slots__ = ("conn", "durable", "store", "write")

    def __init__(self, store: _SqliteStore, write: bool, durable: bool) -> None:
        self.store, self.write, self.durable = store, write, durable

    def __enter__(self) -> sqlite3.Connection:
        store = self.store
        conn = self.conn = store._acquire()
        try:
            store._failure.error = None
            level = store._synchronous if self.durable else "NORMAL"
            if isinstance(conn, _Connection) and conn.synchronous != level:
                conn.execute(f"PRAGMA synchronous = {level}")
                conn.synchronous = level
            conn.execute("BEGIN IMMEDIATE" if self.write else "BEGIN")
        except BaseException as exc:
            store._release(conn)
            if _is_damage(exc):
                raise _damaged_file(exc, store.path) from exc
            raise
        return conn

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        conn = self.conn
        try:
            if kind is None:
                try:
                    conn.execute("COMMIT")
                except sqlite3.DatabaseError as exc:
                    if _is_damage(exc):
                        raise _damaged_file(exc, self.store.path) from exc
                    raise
                return
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.DatabaseError:
                    if not _is_damage(error):  # a damaged file may refuse this too: say why
                        raise
            if issubclass(kind, sqlite3.OperationalError):
                failure: SerializationError | None = self.store._failure.error
                if failure is not None:  # sqlite3 only says "user-defined function raised exception"
                    raise failure from None
            if error is not None and _is_damage(error):
                raise _damaged_file(error, self.store.path) from error
        finally:
            self.store._release(conn)


def _record(row: Sequence[Any], pending: Sequence[PendingReview]) -> ThreadRecord:
    thread_id, head_seq, status, epoch, created_at, updated_at, metadata = row[:7]
    return record_from_row(thread_id, head_seq, status, epoch, created_at, updated_at, metadata, pending)


_RUNS_SQL = (
    "SELECT r.run_id, o.pid, o.host, o.expires_at FROM handrail_runs AS r "
    "LEFT JOIN handrail_run_owners AS o ON o.owner_id = r.owner_id WHERE r.thread_id = ?"
)


def _pending_rows(
    thread_id: str, pending: Sequence[PendingReview]
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    rows: list[tuple[Any, ...]] = []
    tools: list[tuple[Any, ...]] = []
    for position, review in enumerate(pending):
        names = encode_tools(review.tools)
        rows.append(
            (
                thread_id,
                review.interrupt_id,
                position,
                review.kind,
                orjson.dumps(names),
                review.created_at,
                review.payload,
            )
        )
        tools += [(name, review.created_at, thread_id, review.interrupt_id) for name in dict.fromkeys(names)]
    return rows, tools


class SqliteSaver(_SqliteStore):
    """Keeps threads in one SQLite file; safe to share between threads and processes.

    ``conn`` is a path (the file is created when missing), ``":memory:"``, or an open
    ``sqlite3.Connection`` (used as the only connection, behind a lock). The schema is
    created or migrated when the saver opens.

    Options: ``lease_seconds`` - how long a claimed run stays alive without its
    process renewing it (rule 9; on one host a dead process is also seen at once);
    ``timeout`` - how long to wait for another writer's lock; ``synchronous`` -
    ``"FULL"`` (the default: every commit survives a power cut) or ``"NORMAL"``
    (commits several times cheaper; they survive a crash of the process, not of the
    machine). See "Durability" in the module's documentation.

    Example::

        saver = SqliteSaver("threads.db")
        agent = create_agent(model, tools, middleware=[...], checkpointer=saver)
        ...
        saver.close()
    """

    @classmethod
    def from_conn_string(cls, conn_string: str | os.PathLike[str], **options: Any) -> SqliteSaver:
        """Open a saver on a file path; also a context manager that closes it.

        Example::

            with SqliteSaver.from_conn_string("threads.db") as saver:
                ...
        """
        return cls(conn_string, **options)

    def __enter__(self) -> SqliteSaver:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def setup(self) -> None:
        """Create or migrate the schema; idempotent and safe from many processes at once.

        The saver does this when it opens. Migrations newer than the version stored in
        ``handrail_schema_version`` run in order (a migration's Python step, if any, after
        its statements), all in one transaction under the write lock. A database written
        by a newer handrail (a version this one does not know) raises ConfigurationError;
        a damaged file, or tables under handrail's names that handrail did not make, raise
        the errors described in the module's documentation.
        """
        self._migrate()


class AsyncSqliteSaver(_SqliteStore):
    """:class:`SqliteSaver` for asyncio code: the async twins run in worker threads.

    SQLite has no asynchronous interface (aiosqlite, too, runs each connection in a
    thread), so this saver performs each operation in a worker thread with
    ``asyncio.to_thread``; the event loop never waits on the file. The sync methods
    work as well. It takes the same arguments as :class:`SqliteSaver`;
    ``from_conn_string`` gives a saver usable with ``async with``.

    Example::

        async with AsyncSqliteSaver.from_conn_string("threads.db") as saver:
            agent = create_agent(model, tools, middleware=[...], checkpointer=saver)
            await agent.ainvoke({"messages": ["hi"]}, {"configurable": {"thread_id": "t1"}})
    """

    @classmethod
    def from_conn_string(cls, conn_string: str | os.PathLike[str], **options: Any) -> AsyncSqliteSaver:
        """Open a saver on a file path; also an (async) context manager that closes it."""
        return cls(conn_string, **options)

    def __enter__(self) -> AsyncSqliteSaver:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> AsyncSqliteSaver:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def setup(self) -> None:
        """Create or migrate the schema (see :meth:`SqliteSaver.setup`); done on opening."""
        await asyncio.to_thread(self._migrate)

    async def aclose(self) -> None:
        """Async :meth:`close`."""
        await asyncio.to_thread(self.close)
