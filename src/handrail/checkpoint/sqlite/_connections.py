"""The SQLite saver's connections: a pool (or one shared connection), and transactions.

The saver keeps a small pool of connections, one per concurrent caller, so it is safe
to share between Python threads; after a fork the child opens its own connections and
never touches its parent's. Every operation is one transaction (:class:`_Transaction`):
a write takes SQLite's write lock first (``BEGIN IMMEDIATE``), so two writers cannot
both see the same head; a commit that need not survive a power cut runs at
``synchronous=NORMAL``. Opening the saver opens the file in WAL mode and migrates it
(see ``_schema``); an error that says the file is damaged becomes the handrail error
that names the file.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from handrail.checkpoint._records import Migration, metadata_filter_matches, owners_filter_matches
from handrail.checkpoint.base import BaseCheckpointSaver
from handrail.checkpoint.sqlite import _schema as schema
from handrail.errors import ConfigurationError, SerializationError

log = logging.getLogger("handrail.checkpoint.sqlite")

Synchronous = Literal["FULL", "NORMAL"]


class _Connections(BaseCheckpointSaver):
    """Options, the connection pool, transactions, migrating on opening, closing."""

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
        # why a SQL function of ours failed: per Python thread, cleared as each
        # transaction begins, read only by that transaction's own error handling
        self._failure = threading.local()
        self._stop = threading.Event()  # set on closing: background work ends
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

        def checked(test: Callable[[Any, Any, bytes], bool]) -> Callable[[Any, Any, bytes], int]:
            def matches(thread_id: Any, stored: Any, wanted: bytes) -> int:
                # the id comes as bytes: sqlite3 would refuse text that is not UTF-8 (damage)
                # before this function could name the thread
                if isinstance(thread_id, bytes):
                    thread_id = _text_or_bytes(thread_id)
                try:
                    return int(test(thread_id, stored, wanted))
                except SerializationError as exc:
                    failure.error = exc  # sqlite3 only reports "user-defined function raised exception"
                    raise

            return matches

        conn.create_function(
            "handrail_metadata_matches", 3, checked(metadata_filter_matches), deterministic=True
        )
        conn.create_function("handrail_owners_match", 3, checked(owners_filter_matches), deterministic=True)

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
                self._forked()
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
        return schema.MIGRATIONS

    def _forked(self) -> None:
        """Forget what belongs to the parent process (called in a forked child)."""

    def _migrate(self) -> None:
        try:
            self._migrate_schema()
        except sqlite3.DatabaseError as exc:
            if not schema.is_damage(exc):
                raise
            raise schema.damaged_file(exc, self.path) from exc

    def _migrate_schema(self) -> None:
        migrations = self.schema_migrations()
        latest = migrations[-1].version
        with self._connection() as conn:
            if self.path != ":memory:":
                # A new file gets small pages: an append touches a dozen b-trees, one page
                # each, and a commit writes (and syncs) whole pages. No-op on an existing file.
                conn.execute(f"PRAGMA page_size = {schema.PAGE_SIZE}")
                mode = self._switch_to_wal(conn)
                if mode is None or str(mode[0]).lower() not in ("wal", "memory"):
                    log.warning("SQLite could not switch %s to WAL mode (%s)", self.path, mode)
            if schema.schema_at(conn) == latest:
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                schema.apply(conn, self.path, migrations)
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
        """Stop background work and close the connections."""
        if self._closed:
            return
        self._stop.set()
        with self._pool_lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        if self._shared is not None and self.path == ":memory:":
            self._shared.close()


class _Connection(sqlite3.Connection):
    """A connection that remembers its ``PRAGMA synchronous`` level.

    Safe because it is set only after the PRAGMA ran, and a connection serves one caller
    at a time (taken from the pool, or the shared one under its lock). Raced by
    test_a_relaxed_append_commits_without_waiting_for_the_disk and the shared-saver tests.
    """

    synchronous = ""


class _Transaction:
    """``with store._transaction(...) as conn``: begin, then commit, or roll back on error.

    A class rather than a generator: every append opens one, and this costs a fraction.
    """

    __slots__ = ("conn", "durable", "store", "write")

    def __init__(self, store: _Connections, write: bool, durable: bool) -> None:
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
            if schema.is_damage(exc):
                raise schema.damaged_file(exc, store.path) from exc
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
                    if schema.is_damage(exc):
                        raise schema.damaged_file(exc, self.store.path) from exc
                    raise
                return
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.DatabaseError:
                    if not schema.is_damage(error):  # a damaged file may refuse this too: say why
                        raise
            if issubclass(kind, sqlite3.OperationalError):
                failure: SerializationError | None = self.store._failure.error
                if failure is not None:  # sqlite3 only says "user-defined function raised exception"
                    raise failure from None
            if error is not None and schema.is_damage(error):
                raise schema.damaged_file(error, self.store.path) from error
        finally:
            self.store._release(conn)


def fetch_all(conn: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """``conn.execute(sql, params).fetchall()``, also when a text column is not UTF-8.

    SQLite returns such a value (damage) as is, and ``sqlite3`` refuses the whole row
    with an ``OperationalError``. Then the query runs again in the same transaction,
    reading the value as its bytes, so that the checks of the row name the thread and
    the record (SPEC rule 10). The first attempt costs nothing more than before.
    """
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError as exc:
        if "Could not decode to UTF-8" not in str(exc):
            raise
    conn.text_factory = _text_or_bytes
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.text_factory = str


def _text_or_bytes(raw: bytes) -> str | bytes:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw
