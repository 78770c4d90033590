"""PostgresSaver: the store protocol on PostgreSQL, for threads (a facade over the operations)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from handrail.checkpoint._grant_rows import checked_change
from handrail.checkpoint._records import Migration, check_append, check_reading
from handrail.checkpoint.base import (
    BaseCheckpointSaver,
    ClaimFilter,
    DeletionRecord,
    Derived,
    FeedEntry,
    Notice,
    PendingFilter,
    PendingItem,
    StoredEvent,
    ThreadFilter,
    ThreadRead,
    ThreadRecord,
)
from handrail.checkpoint.grants import GrantChange
from handrail.checkpoint.postgres._base import Op
from handrail.checkpoint.postgres.cleared import Cleared
from handrail.checkpoint.postgres.drivers import (
    CONNECT_TIMEOUT,
    PREPARE_THRESHOLD,
    _check_pool_size,
    _not_autocommit,
    _pool_kwargs,
    connect_like,
    run_sync,
)
from handrail.checkpoint.postgres.feed import QUEUE_CHANNEL
from handrail.checkpoint.postgres.grants import GrantMethods
from handrail.checkpoint.postgres.liveness import NEED_OWNER, Flow, LockAgain
from handrail.checkpoint.postgres.queries import Queries
from handrail.checkpoint.postgres.write import append_flow
from handrail.errors import ConfigurationError, StoreUnavailableError

__all__ = ["PostgresSaver"]

T = TypeVar("T")


class PostgresSaver(GrantMethods, BaseCheckpointSaver):
    """Keeps threads in PostgreSQL; share one saver per process between threads.

    ``conn`` is a ``psycopg_pool.ConnectionPool`` or a ``psycopg.Connection`` (used
    alone, behind a lock); connections must be in autocommit mode. ``schema`` puts the
    tables in that schema (created by :meth:`setup`) instead of the search path. The
    schema is created or migrated on first use; call :meth:`setup` to do it up front.

    Example::

        from psycopg_pool import ConnectionPool

        pool = ConnectionPool("postgresql://localhost/app", kwargs={"autocommit": True})
        saver = PostgresSaver(pool)
        saver.setup()
    """

    def __init__(
        self,
        conn: ConnectionPool[Any] | psycopg.Connection[Any],
        *,
        schema: str | None = None,
    ) -> None:
        # on a pool, the liveness lock has a connection of its own: check it by trying it
        self._queries = Queries(schema, probe_locks=isinstance(conn, ConnectionPool))
        self._pool: ConnectionPool[Any] | None = None
        self._conn: psycopg.Connection[Any] | None = None
        if isinstance(conn, ConnectionPool):
            self._pool = conn
        elif isinstance(conn, psycopg.Connection):
            if not conn.autocommit:
                raise _not_autocommit()
            self._conn = conn
        else:
            raise ConfigurationError(
                f"PostgresSaver takes a psycopg ConnectionPool or Connection, got {type(conn).__name__}"
            )
        self._conn_lock = threading.RLock()
        self._owns_pool = False
        self._ready = False
        self._setup_lock = threading.Lock()
        self._owner_lock = threading.Lock()
        self._owner_conn: psycopg.Connection[Any] | None = None
        # this saver's liveness key and connection: checked by every claim's statement
        # on the server (HR410 when the lock is gone), never trusted alone
        self._owner_key: int | None = None
        # The runs this saver claimed, remembered only to claim them again under a new
        # liveness lock after its connection was lost. Safe: the server's rows are the
        # truth (a stale entry re-claims a released run at worst until the saver closes,
        # and is removed by release_run and close); each claim's statement checks the
        # lock itself. Raced by test_a_claim_takes_a_lost_liveness_lock_again.
        self._claimed: set[tuple[str, str]] = set()
        self._cleared = Cleared()
        # the connection that LISTENs for queued threads (wait_queued), made on first use
        self._listener: psycopg.Connection[Any] | None = None
        self._listen_lock = threading.Lock()

    @classmethod
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        schema: str | None = None,
        pool_size: int = 8,
        prepare_threshold: int | None = PREPARE_THRESHOLD,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> PostgresSaver:
        """Open a saver with its own connection pool; also a context manager that closes it.

        ``prepare_threshold`` is psycopg's: a statement run that many times on a connection
        is prepared on the server. Behind a pooler in transaction mode that does not track
        prepared statements (PgBouncer before 1.21, or without ``max_prepared_statements``),
        pass ``None``: no statement is prepared.

        ``connect_timeout`` (seconds) bounds each attempt to connect. The pool opens on
        first use (:meth:`setup`), once one connection has been made: a server that cannot
        be reached fails then with :class:`~handrail.errors.StoreUnavailableError`, which
        names its host and port and the reason given, instead of the pool retrying.

        Example::

            with PostgresSaver.from_conn_string("postgresql://localhost/app") as saver:
                saver.setup()
        """
        _check_pool_size(pool_size)
        kwargs = _pool_kwargs(prepare_threshold, connect_timeout)
        pool: ConnectionPool[Any] = ConnectionPool(
            conn_string, min_size=1, max_size=pool_size, kwargs=kwargs, open=False
        )
        saver = cls(pool, schema=schema)
        saver._owns_pool = True
        return saver

    def __enter__(self) -> PostgresSaver:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        # getconn/putconn rather than pool.connection(): our operations leave the connection
        # idle (_run_sync rolls back otherwise), so the commit its exit makes is not needed
        if self._pool is not None:
            conn = self._pool.getconn()
            try:
                yield conn
            finally:
                self._pool.putconn(conn)
        else:
            assert self._conn is not None
            with self._conn_lock:
                yield self._conn

    def _run(self, op: Op[T], *, ready: bool = True) -> T:
        if ready and not self._ready:
            self.setup()
        pool = self._pool
        if pool is None:
            with self._connection() as conn:
                return self._run_on(conn, op)
        conn = pool.getconn()  # what _connection() does, without a generator: every append
        try:
            return self._run_on(conn, op)
        finally:
            pool.putconn(conn)

    @staticmethod
    def _run_on(conn: psycopg.Connection[Any], op: Op[T]) -> T:
        if not conn.autocommit:
            raise _not_autocommit()
        return run_sync(conn, op)

    def schema_migrations(self) -> tuple[Migration, ...]:
        """The schema, version by version (a subclass may add its own at the end).

        Statements name tables through :attr:`table_prefix` (schema and ``handrail_``).
        """
        return self._queries.migrations

    @property
    def table_prefix(self) -> str:
        """What every table name starts with: the quoted schema, if any, and ``handrail_``."""
        return self._queries.prefix

    def setup(self) -> None:
        """Create or migrate the schema; idempotent, safe from many processes at once."""
        with self._setup_lock:
            if self._ready:
                return
            if self._owns_pool and self._pool is not None and self._pool.closed:
                connect_like(self._pool).close()  # the server answers (or we say why not) ...
                self._pool.open()  # ... before the pool starts trying on its own
            migrations = self.schema_migrations()
            if self._run(self._queries.version(), ready=False) != migrations[-1].version:
                self._run(self._queries.setup(migrations), ready=False)
            self._ready = True

    def close(self) -> None:
        """Release this saver's runs and its liveness lock; close the pool it opened."""
        with self._owner_lock:
            key, owner, self._owner_conn, self._owner_key = self._owner_key, self._owner_conn, None, None
            self._claimed.clear()
        if key is not None:
            try:
                self._run(self._queries.forget_owner(key))
            except psycopg.Error:
                pass  # the lock below goes anyway, and with it every claim
        if owner is not None:
            owner.close()
        elif key is not None and self._conn is not None:
            with self._conn_lock:
                self._conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        with self._listen_lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        if self._owns_pool and self._pool is not None:
            self._pool.close()

    # The protocol ----------------------------------------------------------------------
    def append(
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
        notices: Sequence[Notice] = (),
        queue: bool = False,
        grants: GrantChange | None = None,
    ) -> None:
        """Append events (see the store protocol); returns once the server has committed them."""
        check_append(thread_id, events, expected_seq, record)
        check_reading(reading, record)
        added = checked_change(grants)  # refused before anything is written
        released = self._forget_claim(thread_id, release)
        try:
            self._perform(
                append_flow(
                    self._queries,
                    self._cleared,
                    thread_id,
                    events,
                    expected_seq,
                    record,
                    claim=claim,
                    release=release,
                    durable=durable,
                    reading=reading,
                    notices=notices,
                    queue=queue,
                    grants=added,
                )
            )
        except BaseException:
            self._restore_claim(thread_id, release, released)
            raise
        if claim is not None and claim != release:
            with self._owner_lock:
                self._claimed.add((thread_id, claim))

    def read(
        self, thread_id: str, *, after_seq: int = 0, upto_seq: int | None = None, from_reading: bool = False
    ) -> ThreadRead:
        return self._run(self._queries.read(thread_id, after_seq, upto_seq, from_reading))

    def get_thread(self, thread_id: str) -> ThreadRecord | None:
        return self._run(self._queries.get_thread(thread_id))

    def list_threads(self, filter: ThreadFilter) -> list[ThreadRecord]:
        return self._run(self._queries.list_threads(filter))

    def list_pending(self, filter: PendingFilter) -> list[PendingItem]:
        return self._run(self._queries.list_pending(filter))

    def delete_thread(self, thread_id: str, *, by: Any = None) -> bool:
        self._cleared.forget(thread_id)
        return self._run(self._queries.delete_thread(thread_id, by))

    def list_deletions(
        self,
        *,
        since: float | None = None,
        until: float | None = None,
        owners: ClaimFilter | None = None,
        metadata: Mapping[str, Any] | None = None,
        limit: int = 1000,
    ) -> list[DeletionRecord]:
        return self._run(self._queries.list_deletions(since, until, owners, metadata, limit))

    def repair_thread(
        self, thread_id: str, derive: Callable[[list[StoredEvent]], Derived], *, dry_run: bool = False
    ) -> list[str]:
        self._cleared.forget(thread_id)
        return self._run(self._queries.repair_thread(thread_id, derive, dry_run))

    def prune(
        self, thread_id: str, *, upto_seq: int, snapshot: StoredEvent, keep_kinds: frozenset[str]
    ) -> int:
        if snapshot.seq != upto_seq:
            raise ValueError(f"the snapshot must take the place of event {upto_seq}")
        return self._run(self._queries.prune(thread_id, upto_seq, snapshot, keep_kinds))

    def claim_run(self, thread_id: str, run_id: str) -> None:
        self._perform(self._queries.claim_flow(thread_id, run_id))
        with self._owner_lock:
            self._claimed.add((thread_id, run_id))

    def release_run(self, thread_id: str, run_id: str) -> None:
        self._forget_claim(thread_id, run_id)
        self._run(self._queries.release_run(thread_id, run_id))

    def runs_alive(self, thread_id: str) -> set[str]:
        return self._run(self._queries.runs_alive(thread_id))

    def read_feed(self, after: str | None = None, *, limit: int = 500) -> list[FeedEntry]:
        return self._run(self._queries.read_feed(after, limit))

    def feed_end(self) -> str | None:
        return self._run(self._queries.feed_end())

    def trim_feed(self, before: float) -> int:
        return self._run(self._queries.trim_feed(before))

    def wait_queued(self, timeout: float) -> None:
        """Wait for a ``NOTIFY`` of a queued thread (``feed.py``), at most ``timeout`` seconds.

        On a connection of its own, made from the pool's settings; a saver on one
        connection, or a server that cannot be reached, just waits the time out.
        """
        with self._listen_lock:
            conn = self._listener
            if conn is None and self._pool is not None:
                try:
                    conn = connect_like(self._pool)
                    conn.execute(f"LISTEN {QUEUE_CHANNEL}")
                except (psycopg.Error, StoreUnavailableError):
                    conn = None
                self._listener = conn
            if conn is not None:
                try:
                    for _ in conn.notifies(timeout=timeout, stop_after=1):
                        pass
                    return
                except psycopg.Error:  # the connection is gone: a new one next time
                    self._listener = None
                    conn.close()
        time.sleep(timeout)

    def claim_queued(
        self, run_id: str, *, filter: ClaimFilter | None = None, thread_id: str | None = None
    ) -> str | None:
        claimed = self._perform(self._queries.claim_queued_flow(run_id, filter, thread_id))
        if claimed is not None:
            with self._owner_lock:
                self._claimed.add((claimed, run_id))
        return claimed

    # This saver's liveness lock ------------------------------------------------------------
    # A claim names the saver's key without asking the server first whether its lock is
    # still held: the claim's own transaction checks, and when no session holds the lock
    # (the liveness connection was lost) it fails, saving nothing; the saver then takes
    # the lock again, re-claims its runs and tries once more.
    def _perform(self, flow: Flow[T]) -> T:
        """Run a flow (see :data:`~handrail.checkpoint.postgres.liveness.Flow`), blocking."""
        answer: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = flow.send(answer) if error is None else flow.throw(error)
            except StopIteration as stop:
                value: T = stop.value
                return value
            answer, error = None, None
            try:
                if step is NEED_OWNER:
                    answer = self._owner()
                elif isinstance(step, LockAgain):
                    self._lock_again(step.seen)
                else:
                    answer = self._run(step)
            except BaseException as exc:  # into the flow, which says what it means (or re-raises)
                error = exc

    def _owner(self) -> tuple[int, object]:
        """This saver's key and the connection that holds its lock (locking on first use)."""
        with self._owner_lock:
            if self._pool is None:  # the one connection carries the lock
                if self._owner_key is None:
                    with self._connection() as conn:
                        self._owner_key = run_sync(conn, self._queries.take_lock(None))
                return self._owner_key, self._conn
            if self._owner_conn is None or self._owner_conn.closed or self._owner_key is None:
                self._relock()
            assert self._owner_key is not None
            return self._owner_key, self._owner_conn

    def _lock_again(self, seen: tuple[int, object]) -> None:
        """A claim found the lock of ``seen`` gone: take it again (unless done meanwhile)."""
        with self._owner_lock:
            if self._pool is None:
                if self._owner_key == seen[0]:
                    with self._connection() as conn:
                        self._owner_key = run_sync(conn, self._queries.take_lock(self._owner_key))
                    self._run(self._queries.reclaim_runs(sorted(self._claimed), self._owner_key))
            elif (self._owner_key, self._owner_conn) == seen:
                self._relock()

    def _relock(self) -> None:
        """Lock on a new connection, on the same key if it is free, and re-claim (owner lock held)."""
        assert self._pool is not None
        if self._owner_conn is not None:
            self._owner_conn.close()
        self._owner_conn = owner = connect_like(self._pool)
        previous = self._owner_key
        self._owner_key = run_sync(owner, self._queries.take_lock(previous, hold=True), stay_open=True)
        if previous is not None:
            self._run(self._queries.reclaim_runs(sorted(self._claimed), self._owner_key))

    def _forget_claim(self, thread_id: str, run_id: str | None) -> bool:
        if run_id is None:
            return False
        with self._owner_lock:
            known = (thread_id, run_id) in self._claimed
            self._claimed.discard((thread_id, run_id))
            return known

    def _restore_claim(self, thread_id: str, run_id: str | None, known: bool) -> None:
        if run_id is not None and known:
            with self._owner_lock:
                self._claimed.add((thread_id, run_id))
