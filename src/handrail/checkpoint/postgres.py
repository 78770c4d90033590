"""PostgresSaver and AsyncPostgresSaver: the store protocol in PostgreSQL (psycopg 3).

Install with ``pip install 'handrail[postgres]'`` (psycopg 3 and psycopg_pool).

Theory of operation
-------------------
Tables (prefixed ``handrail_``, in ``schema`` or the connection's search path):
``events`` (primary key ``(thread_id, seq)``), ``threads`` (one row per thread),
``pending`` (one row per pending review, indexed in the inbox's ``(created_at,
thread_id, interrupt_id)`` keyset order), ``pending_tools`` and ``pending_metadata``
(the inbox's tool and metadata filters: one row per review and tool, per review and
metadata entry of its thread, keyed by filter value and *page key*, that order as one
``bytea``), ``runs`` (claimed runs) and ``schema_version``; the functions
``handrail_conflict``, ``handrail_fail`` and ``handrail_page_key``. Key columns use
the ``"C"`` collation so that the inbox orders exactly as the in-memory store does.

:meth:`setup` creates or migrates the schema in one transaction under
``pg_advisory_xact_lock``, so any number of processes may call it at once; the savers
call it on first use. Schema versions: 1, the tables; 2, the functions, the page keys
and ``pending_metadata`` (filled from the pending reviews already there).

**Every call is one statement, one round trip** (only :meth:`setup` takes more). An
append is one statement of data-modifying CTEs: it moves the thread row from the
expected head to the new one (``UPDATE ... WHERE head_seq = expected AND epoch =
record's``, or ``INSERT ... ON CONFLICT`` for a new thread) and, if it moved, replaces
the pending rows and inserts the events, the run claim and release; if it did not move,
the statement calls ``handrail_conflict()``, which raises (SQLSTATE ``HR409``, with
the head and epoch it found), so nothing is saved and no second query is needed. A
second writer with the same expected head finds no row to move once the first
commits, or collides on the ``(thread_id, seq)`` key: either way it gets
:class:`~handrail.errors.ConflictError` (SPEC rule 8). A read returns the record and
the events from one statement, so from one snapshot. Metadata filters compare JSON
values (``true`` is not ``1``, as it is in Python), and text cannot hold NUL
characters: storing one raises :class:`~handrail.errors.SerializationError`.

The inbox walks one index in page order and stops after a page: ``pending`` without a
tool or metadata filter; otherwise ``pending_tools`` and one ``pending_metadata`` alias
per filtered entry, joined on the page key, so that the planner walks the most
selective and merges the others. ``pending_metadata`` holds the entries whose value
is a number, a boolean, null or a string of at most 200 bytes (keys too); a filter on
another value (a list, an object, a long string) is compared on the thread's row.

Every operation is written once (``_postgres_sql.py``), as a generator that yields
batches of SQL and receives their results; :func:`_run_sync` and :func:`_run_async`
perform it with psycopg's public API (``execute``, prepared by psycopg once a
statement has run ``prepare_threshold`` times on a connection; a batch of several
statements in pipeline mode).

Run liveness (SPEC rule 9)
--------------------------
Each saver holds an *advisory lock* on a random 62-bit key, on a connection of its
own, in a transaction left open for the life of that connection (so that a pooler in
transaction mode, PgBouncer, keeps one server connection with it and closes that one
when the client goes); or, on the one connection it was given, a session lock. A claimed run is a
``runs`` row naming that key, and a run is alive while some session holds the lock on
its key, which ``runs_alive`` reads from ``pg_locks``. The server releases a session's
locks when its connection ends, and a dead process cannot keep a connection: a killed
process's kernel closes it at once, so its runs are dead for every other process
within moments, without leases or clocks; a host that vanishes (power, network) is
noticed by the server's TCP keepalives, which the saver sets to about 30 seconds on
its liveness connection (TCP only; not for Unix sockets, which cannot outlive their
host anyway). A claim (by ``claim_run`` or an append) names the key without asking
first; its statement checks that a session holds the lock, and raises (SQLSTATE
``HR410``, via ``handrail_fail``) when none does, saving nothing. So if the saver's own
connection dropped, its next claim fails once, the saver connects, takes its key again,
re-claims its runs and retries; in between, its runs look dead.

Example::

    from handrail import PostgresSaver, create_agent

    with PostgresSaver.from_conn_string("postgresql://localhost/app") as saver:
        agent = create_agent(model, tools, middleware=[...], checkpointer=saver)
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from types import TracebackType
from typing import Any, TypeVar

try:
    import psycopg
    import psycopg.errors
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import AsyncConnectionPool, ConnectionPool
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "PostgresSaver and AsyncPostgresSaver need psycopg 3 and psycopg_pool: "
        "pip install 'handrail[postgres]'"
    ) from exc

from handrail.checkpoint._postgres_sql import CONFLICT_STATE, LOST_LOCK_STATE, Op, Queries, Result
from handrail.checkpoint._records import Migration, check_append, check_reading, conflict
from handrail.checkpoint.base import (
    BaseCheckpointSaver,
    PendingFilter,
    PendingItem,
    StoredEvent,
    ThreadFilter,
    ThreadRead,
    ThreadRecord,
)
from handrail.errors import ConfigurationError, SerializationError, StoreUnavailableError

__all__ = ["CONNECT_TIMEOUT", "PREPARE_THRESHOLD", "AsyncPostgresSaver", "PostgresSaver"]

T = TypeVar("T")

CONNECT_TIMEOUT = 5
"""``from_conn_string``'s default connect timeout, in seconds (libpq's ``connect_timeout``)."""

PREPARE_THRESHOLD = 2
"""``from_conn_string``'s default: a statement is prepared on a connection at its third run.

The savers run few distinct statements (an append has a handful of shapes), each many
times; preparing one saves the server's parse and plan of it on every later run.
"""


# Drivers: perform the operations of _postgres_sql.py --------------------------------------
# psycopg's public API only: ``execute`` (which prepares a statement on the server once it
# has run ``prepare_threshold`` times on a connection) and, for a batch of several
# statements, pipeline mode (one round trip).
_IDLE = psycopg.pq.TransactionStatus.IDLE
_OPEN = (psycopg.pq.TransactionStatus.INTRANS, psycopg.pq.TransactionStatus.INERROR)


def _run_sync(conn: psycopg.Connection[Any], op: Op[T], *, stay_open: bool = False) -> T:
    """Perform an operation, each batch in one round trip (several statements: one pipeline).

    Every operation but setup is one statement, so one transaction. A batch of several
    statements brings its own ``BEGIN``/``COMMIT``. If anything fails, a transaction
    left open is rolled back (one more round trip, on the error path only).
    ``stay_open``: the operation leaves its transaction open on purpose (the liveness lock).
    """
    results: Any = None  # a just-started generator only accepts None
    try:
        while True:
            try:
                batch = op.send(results)
            except StopIteration as stop:
                value: T = stop.value
                break
            if len(batch) == 1:  # the usual case: no pipeline needed for one statement
                cursors = [conn.execute(batch[0].sql, batch[0].params)]
            else:
                with conn.pipeline():
                    cursors = [conn.execute(query.sql, query.params) for query in batch]
            results = [
                Result(cursor.fetchall() if cursor.description is not None else [], cursor.rowcount)
                for cursor in cursors
            ]
    except BaseException:
        if not conn.closed and conn.info.transaction_status in _OPEN:
            try:
                conn.rollback()
            except psycopg.Error:
                pass  # the connection is unusable; the pool discards it
        raise
    if conn.info.transaction_status != _IDLE and not stay_open:
        conn.rollback()
        raise RuntimeError("a handrail operation left its transaction open")  # a bug in _postgres_sql
    return value


async def _run_async(conn: psycopg.AsyncConnection[Any], op: Op[T], *, stay_open: bool = False) -> T:
    """Async :func:`_run_sync`."""
    results: Any = None  # a just-started generator only accepts None
    try:
        while True:
            try:
                batch = op.send(results)
            except StopIteration as stop:
                value: T = stop.value
                break
            if len(batch) == 1:
                cursors = [await conn.execute(batch[0].sql, batch[0].params)]
            else:
                async with conn.pipeline():
                    cursors = [await conn.execute(query.sql, query.params) for query in batch]
            results = [
                Result(await cursor.fetchall() if cursor.description is not None else [], cursor.rowcount)
                for cursor in cursors
            ]
    except BaseException:
        if not conn.closed and conn.info.transaction_status in _OPEN:
            try:
                await conn.rollback()
            except psycopg.Error:
                pass
        raise
    if conn.info.transaction_status != _IDLE and not stay_open:
        await conn.rollback()
        raise RuntimeError("a handrail operation left its transaction open")
    return value


def _append_error(queries: Queries, exc: psycopg.Error, thread_id: str, expected_seq: int) -> Exception:
    """What a failed append means for the caller."""
    if exc.sqlstate == CONFLICT_STATE:  # handrail_conflict(): a stale head or epoch
        return queries.conflict_error(exc.diag.message_detail, thread_id, expected_seq)
    if isinstance(exc, psycopg.errors.UniqueViolation):  # another writer's events
        return conflict(thread_id, expected_seq, None)
    if isinstance(exc, psycopg.DataError):
        return _unstorable(thread_id, exc)
    return exc


def _not_autocommit() -> ConfigurationError:
    return ConfigurationError(
        "the saver's PostgreSQL connections must be in autocommit mode: "
        "psycopg.connect(dsn, autocommit=True) or ConnectionPool(dsn, kwargs={'autocommit': True})"
    )


def _unstorable(thread_id: str, exc: psycopg.DataError) -> SerializationError:
    # e.g. a NUL character, which PostgreSQL text and jsonb cannot hold
    reason = str(exc).splitlines()[0]
    return SerializationError(
        f"cannot store thread {thread_id!r} in PostgreSQL: {reason}", thread_id=thread_id
    )


def _check_pool_size(pool_size: int) -> None:
    if pool_size < 1:
        raise ConfigurationError(f"pool_size must be at least 1, got {pool_size}")


def _pool_kwargs(prepare_threshold: int | None, connect_timeout: float) -> dict[str, Any]:
    """The connection options of a pool ``from_conn_string`` opens."""
    if not connect_timeout > 0:
        raise ConfigurationError(
            f"connect_timeout must be a number of seconds above 0, got {connect_timeout!r}"
        )
    # libpq takes whole seconds, and waits at least 2
    return {
        "autocommit": True,
        "prepare_threshold": prepare_threshold,
        "connect_timeout": math.ceil(connect_timeout),
    }


def _unreachable(conninfo: str, exc: psycopg.Error) -> StoreUnavailableError:
    """The error for a server that did not let us connect: where, and what it (or the network) said."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error:
        params = {}
    host = str(params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST") or "localhost")
    port = str(params.get("port") or os.environ.get("PGPORT") or "5432")
    reason = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__
    return StoreUnavailableError(
        f"cannot connect to PostgreSQL at {host}:{port}: {reason}", host=host, port=port
    )


class _Cleared:
    """What this saver's own last append left in a thread's pending tables, at which head.

    An append at that head and epoch finds exactly that (another writer would have
    moved the head, and the append's head check would fail), so its statement leaves
    out the deletes that would find nothing: fewer tables for the server to open.
    """

    __slots__ = ("heads",)
    LIMIT = 4096  # threads remembered; an older one just takes the full statement

    def __init__(self) -> None:
        self.heads: dict[str, tuple[int, str, int]] = {}

    def rows_at(self, thread_id: str, expected_seq: int, epoch: str) -> int:
        """``clear`` for :meth:`Queries.append`: 2 (anything) unless known better."""
        known = self.heads.get(thread_id)
        return known[2] if known is not None and known[:2] == (expected_seq, epoch) else 2

    def appended(self, thread_id: str, record: ThreadRecord) -> None:
        heads = self.heads
        heads.pop(thread_id, None)  # re-insert: the dict's order is the order of use
        rows = 0 if not record.pending else (2 if record.metadata else 1)
        heads[thread_id] = (record.head_seq, record.epoch, rows)
        if len(heads) > self.LIMIT:
            heads.pop(next(iter(heads)), None)

    def forget(self, thread_id: str) -> None:
        self.heads.pop(thread_id, None)


# The sync saver ------------------------------------------------------------------------------
class PostgresSaver(BaseCheckpointSaver):
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
        self._owner_key: int | None = None
        self._claimed: set[tuple[str, str]] = set()
        self._cleared = _Cleared()

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
        return _run_sync(conn, op)

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
                _connect_like(self._pool).close()  # the server answers (or we say why not) ...
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
        if self._owns_pool and self._pool is not None:
            self._pool.close()

    # The protocol ----------------------------------------------------------------------
    def append(  # type: ignore[override]  # base.py's ``wait`` goes in the same change (issue 12)
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
        """Append events (see the store protocol); returns once the server has committed them."""
        check_append(thread_id, events, expected_seq, record)
        check_reading(reading, record)
        released = self._forget_claim(thread_id, release)
        try:
            for attempt in range(2):
                owner = self._owner() if claim is not None else None
                op = self._queries.append(
                    thread_id,
                    events,
                    expected_seq,
                    record,
                    claim=(claim, owner[0]) if claim is not None and owner is not None else None,
                    release=release,
                    durable=durable,
                    reading=reading,
                    clear=self._cleared.rows_at(thread_id, expected_seq, record.epoch),
                )
                try:
                    self._run(op)
                    break
                except psycopg.Error as exc:
                    if exc.sqlstate == LOST_LOCK_STATE and owner is not None and attempt == 0:
                        self._lock_again(owner)  # nothing was saved: take the lock, try again
                        continue
                    raise _append_error(self._queries, exc, thread_id, expected_seq) from None
        except BaseException:
            self._cleared.forget(thread_id)
            self._restore_claim(thread_id, release, released)
            raise
        self._cleared.appended(thread_id, record)
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

    def delete_thread(self, thread_id: str) -> bool:
        self._cleared.forget(thread_id)
        return self._run(self._queries.delete_thread(thread_id))

    def prune(
        self, thread_id: str, *, upto_seq: int, snapshot: StoredEvent, keep_kinds: frozenset[str]
    ) -> int:
        if snapshot.seq != upto_seq:
            raise ValueError(f"the snapshot must take the place of event {upto_seq}")
        return self._run(self._queries.prune(thread_id, upto_seq, snapshot, keep_kinds))

    def claim_run(self, thread_id: str, run_id: str) -> None:
        for attempt in range(2):
            owner = self._owner()
            try:
                self._run(self._queries.claim_run(thread_id, run_id, owner[0]))
                break
            except psycopg.Error as exc:
                if exc.sqlstate != LOST_LOCK_STATE or attempt > 0:
                    raise
                self._lock_again(owner)
        with self._owner_lock:
            self._claimed.add((thread_id, run_id))

    def release_run(self, thread_id: str, run_id: str) -> None:
        self._forget_claim(thread_id, run_id)
        self._run(self._queries.release_run(thread_id, run_id))

    def runs_alive(self, thread_id: str) -> set[str]:
        return self._run(self._queries.runs_alive(thread_id))

    # This saver's liveness lock ------------------------------------------------------------
    # A claim names the saver's key without asking the server first whether its lock is
    # still held: the claim's own transaction checks, and when no session holds the lock
    # (the liveness connection was lost) it fails, saving nothing; the saver then takes
    # the lock again, re-claims its runs and tries once more.
    def _owner(self) -> tuple[int, object]:
        """This saver's key and the connection that holds its lock (locking on first use)."""
        with self._owner_lock:
            if self._pool is None:  # the one connection carries the lock
                if self._owner_key is None:
                    with self._connection() as conn:
                        self._owner_key = _run_sync(conn, self._queries.take_lock(None))
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
                        self._owner_key = _run_sync(conn, self._queries.take_lock(self._owner_key))
                    self._run(self._queries.reclaim_runs(sorted(self._claimed), self._owner_key))
            elif (self._owner_key, self._owner_conn) == seen:
                self._relock()

    def _relock(self) -> None:
        """Lock on a new connection, on the same key if it is free, and re-claim (owner lock held)."""
        assert self._pool is not None
        if self._owner_conn is not None:
            self._owner_conn.close()
        self._owner_conn = owner = _connect_like(self._pool)
        previous = self._owner_key
        self._owner_key = _run_sync(owner, self._queries.take_lock(previous, hold=True), stay_open=True)
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


def _connect_like(pool: ConnectionPool[Any]) -> psycopg.Connection[Any]:
    conninfo = pool.conninfo() if callable(pool.conninfo) else pool.conninfo
    kwargs = pool.kwargs() if callable(pool.kwargs) else pool.kwargs or {}
    try:
        connection: psycopg.Connection[Any] = pool.connection_class.connect(
            conninfo, **{**kwargs, "autocommit": True}
        )
    except psycopg.OperationalError as exc:
        raise _unreachable(conninfo, exc) from exc
    return connection


# The async saver -------------------------------------------------------------------------
class AsyncPostgresSaver(BaseCheckpointSaver):
    """PostgresSaver for asyncio: the ``a``-methods run on psycopg's async driver.

    ``conn`` is a ``psycopg_pool.AsyncConnectionPool`` or a ``psycopg.AsyncConnection``
    in autocommit mode. The sync methods also work when called from a thread other
    than the event loop's (they hand the work to the loop and wait).

    Example::

        async with AsyncPostgresSaver.from_conn_string("postgresql://localhost/app") as saver:
            agent = create_agent(model, tools, middleware=[...], checkpointer=saver)
            await agent.ainvoke({"messages": ["hi"]}, {"configurable": {"thread_id": "t1"}})
    """

    def __init__(
        self,
        conn: AsyncConnectionPool[Any] | psycopg.AsyncConnection[Any],
        *,
        schema: str | None = None,
    ) -> None:
        self._queries = Queries(schema, probe_locks=isinstance(conn, AsyncConnectionPool))
        self._pool: AsyncConnectionPool[Any] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        if isinstance(conn, AsyncConnectionPool):
            self._pool = conn
        elif isinstance(conn, psycopg.AsyncConnection):
            if not conn.autocommit:
                raise _not_autocommit()
            self._conn = conn
        else:
            raise ConfigurationError(
                "AsyncPostgresSaver takes a psycopg AsyncConnectionPool or AsyncConnection, "
                f"got {type(conn).__name__}"
            )
        self._owns_pool = False
        self._ready = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._locks: dict[str, asyncio.Lock] = {}
        self._owner_conn: psycopg.AsyncConnection[Any] | None = None
        self._owner_key: int | None = None
        self._claimed: set[tuple[str, str]] = set()
        self._cleared = _Cleared()

    @classmethod
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        schema: str | None = None,
        pool_size: int = 8,
        prepare_threshold: int | None = PREPARE_THRESHOLD,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> AsyncPostgresSaver:
        """A saver with its own pool; use it with ``async with`` (it opens on first use too).

        ``prepare_threshold`` and ``connect_timeout``: as in
        :meth:`PostgresSaver.from_conn_string` (an unreachable server fails :meth:`setup`
        with :class:`~handrail.errors.StoreUnavailableError`).
        """
        _check_pool_size(pool_size)
        kwargs = _pool_kwargs(prepare_threshold, connect_timeout)
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            conn_string, min_size=1, max_size=pool_size, kwargs=kwargs, open=False
        )
        saver = cls(pool, schema=schema)
        saver._owns_pool = True
        return saver

    async def __aenter__(self) -> AsyncPostgresSaver:
        await self.setup()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def _lock(self, name: str) -> asyncio.Lock:
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        return lock

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        if self._pool is not None:
            if self._owns_pool:
                await self._pool.open()
            async with self._pool.connection() as conn:
                yield conn
        else:
            assert self._conn is not None
            async with self._lock("conn"):
                yield self._conn

    async def _run(self, op: Op[T], *, ready: bool = True) -> T:
        self._loop = asyncio.get_running_loop()
        if ready and not self._ready:
            await self.setup()
        async with self._connection() as conn:
            if not conn.autocommit:
                raise _not_autocommit()
            return await _run_async(conn, op)

    def schema_migrations(self) -> tuple[Migration, ...]:
        """The schema, version by version (a subclass may add its own at the end)."""
        return self._queries.migrations

    @property
    def table_prefix(self) -> str:
        """What every table name starts with: the quoted schema, if any, and ``handrail_``."""
        return self._queries.prefix

    async def setup(self) -> None:
        """Create or migrate the schema; idempotent, safe from many processes at once."""
        async with self._lock("setup"):
            if self._ready:
                return
            if self._owns_pool and self._pool is not None and self._pool.closed:
                await (await _connect_like_async(self._pool)).close()  # see PostgresSaver.setup
            migrations = self.schema_migrations()
            if await self._run(self._queries.version(), ready=False) != migrations[-1].version:
                await self._run(self._queries.setup(migrations), ready=False)
            self._ready = True

    async def aclose(self) -> None:
        """Release this saver's runs and its liveness lock; close the pool it opened."""
        key, owner, self._owner_conn, self._owner_key = self._owner_key, self._owner_conn, None, None
        self._claimed.clear()
        if key is not None:
            try:
                await self._run(self._queries.forget_owner(key))
            except psycopg.Error:
                pass
        if owner is not None:
            await owner.close()
        elif key is not None and self._conn is not None:
            async with self._lock("conn"):
                await self._conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        if self._owns_pool and self._pool is not None:
            await self._pool.close()

    # The protocol, async ----------------------------------------------------------------------
    async def aappend(  # type: ignore[override]  # base.py's ``wait`` goes in the same change
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
        check_append(thread_id, events, expected_seq, record)
        check_reading(reading, record)
        released = release is not None and (thread_id, release) in self._claimed
        if release is not None:
            self._claimed.discard((thread_id, release))
        try:
            for attempt in range(2):
                owner = await self._owner() if claim is not None else None
                op = self._queries.append(
                    thread_id,
                    events,
                    expected_seq,
                    record,
                    claim=(claim, owner[0]) if claim is not None and owner is not None else None,
                    release=release,
                    durable=durable,
                    reading=reading,
                    clear=self._cleared.rows_at(thread_id, expected_seq, record.epoch),
                )
                try:
                    await self._run(op)
                    break
                except psycopg.Error as exc:
                    if exc.sqlstate == LOST_LOCK_STATE and owner is not None and attempt == 0:
                        await self._lock_again(owner)  # nothing was saved: take the lock, try again
                        continue
                    raise _append_error(self._queries, exc, thread_id, expected_seq) from None
        except BaseException:
            self._cleared.forget(thread_id)
            if released and release is not None:
                self._claimed.add((thread_id, release))
            raise
        self._cleared.appended(thread_id, record)
        if claim is not None and claim != release:
            self._claimed.add((thread_id, claim))

    async def aread(
        self, thread_id: str, *, after_seq: int = 0, upto_seq: int | None = None, from_reading: bool = False
    ) -> ThreadRead:
        return await self._run(self._queries.read(thread_id, after_seq, upto_seq, from_reading))

    async def aget_thread(self, thread_id: str) -> ThreadRecord | None:
        return await self._run(self._queries.get_thread(thread_id))

    async def alist_threads(self, filter: ThreadFilter) -> list[ThreadRecord]:
        return await self._run(self._queries.list_threads(filter))

    async def alist_pending(self, filter: PendingFilter) -> list[PendingItem]:
        return await self._run(self._queries.list_pending(filter))

    async def adelete_thread(self, thread_id: str) -> bool:
        self._cleared.forget(thread_id)
        return await self._run(self._queries.delete_thread(thread_id))

    async def aprune(
        self, thread_id: str, *, upto_seq: int, snapshot: StoredEvent, keep_kinds: frozenset[str]
    ) -> int:
        if snapshot.seq != upto_seq:
            raise ValueError(f"the snapshot must take the place of event {upto_seq}")
        return await self._run(self._queries.prune(thread_id, upto_seq, snapshot, keep_kinds))

    async def aclaim_run(self, thread_id: str, run_id: str) -> None:
        for attempt in range(2):
            owner = await self._owner()
            try:
                await self._run(self._queries.claim_run(thread_id, run_id, owner[0]))
                break
            except psycopg.Error as exc:
                if exc.sqlstate != LOST_LOCK_STATE or attempt > 0:
                    raise
                await self._lock_again(owner)
        self._claimed.add((thread_id, run_id))

    async def arelease_run(self, thread_id: str, run_id: str) -> None:
        self._claimed.discard((thread_id, run_id))
        await self._run(self._queries.release_run(thread_id, run_id))

    async def aruns_alive(self, thread_id: str) -> set[str]:
        return await self._run(self._queries.runs_alive(thread_id))

    # This saver's liveness lock (see PostgresSaver) -------------------------------------------
    async def _owner(self) -> tuple[int, object]:
        async with self._lock("owner"):
            if self._pool is None:
                if self._owner_key is None:
                    async with self._connection() as conn:
                        self._owner_key = await _run_async(conn, self._queries.take_lock(None))
                return self._owner_key, self._conn
            if self._owner_conn is None or self._owner_conn.closed or self._owner_key is None:
                await self._relock()
            assert self._owner_key is not None
            return self._owner_key, self._owner_conn

    async def _lock_again(self, seen: tuple[int, object]) -> None:
        async with self._lock("owner"):
            if self._pool is None:
                if self._owner_key == seen[0]:
                    async with self._connection() as conn:
                        self._owner_key = await _run_async(conn, self._queries.take_lock(self._owner_key))
                    await self._run(self._queries.reclaim_runs(sorted(self._claimed), self._owner_key))
            elif (self._owner_key, self._owner_conn) == seen:
                await self._relock()

    async def _relock(self) -> None:
        assert self._pool is not None
        if self._owner_conn is not None:
            await self._owner_conn.close()
        self._owner_conn = owner = await _connect_like_async(self._pool)
        previous = self._owner_key
        self._owner_key = await _run_async(
            owner, self._queries.take_lock(previous, hold=True), stay_open=True
        )
        if previous is not None:
            await self._run(self._queries.reclaim_runs(sorted(self._claimed), self._owner_key))

    # The sync methods hand the work to the saver's event loop ---------------------------------
    def _call(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        loop = self._loop
        if loop is None or not loop.is_running():
            raise ConfigurationError(
                "AsyncPostgresSaver's sync methods need its event loop running in another thread; "
                "use the async methods (ainvoke, astream, ...) or PostgresSaver"
            )
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise ConfigurationError(
                "a sync method of AsyncPostgresSaver was called from its event loop, which would "
                "block it; use the async methods (ainvoke, aget_state, ...)"
            )
        return asyncio.run_coroutine_threadsafe(make(), loop).result()

    def append(  # type: ignore[override]  # base.py's ``wait`` goes in the same change (issue 12)
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
        self._call(
            lambda: self.aappend(
                thread_id,
                events,
                expected_seq=expected_seq,
                record=record,
                claim=claim,
                release=release,
                durable=durable,
                reading=reading,
            )
        )

    def read(
        self, thread_id: str, *, after_seq: int = 0, upto_seq: int | None = None, from_reading: bool = False
    ) -> ThreadRead:
        return self._call(
            lambda: self.aread(thread_id, after_seq=after_seq, upto_seq=upto_seq, from_reading=from_reading)
        )

    def get_thread(self, thread_id: str) -> ThreadRecord | None:
        return self._call(lambda: self.aget_thread(thread_id))

    def list_threads(self, filter: ThreadFilter) -> list[ThreadRecord]:
        return self._call(lambda: self.alist_threads(filter))

    def list_pending(self, filter: PendingFilter) -> list[PendingItem]:
        return self._call(lambda: self.alist_pending(filter))

    def delete_thread(self, thread_id: str) -> bool:
        return self._call(lambda: self.adelete_thread(thread_id))

    def prune(
        self, thread_id: str, *, upto_seq: int, snapshot: StoredEvent, keep_kinds: frozenset[str]
    ) -> int:
        return self._call(
            lambda: self.aprune(thread_id, upto_seq=upto_seq, snapshot=snapshot, keep_kinds=keep_kinds)
        )

    def claim_run(self, thread_id: str, run_id: str) -> None:
        self._call(lambda: self.aclaim_run(thread_id, run_id))

    def release_run(self, thread_id: str, run_id: str) -> None:
        self._call(lambda: self.arelease_run(thread_id, run_id))

    def runs_alive(self, thread_id: str) -> set[str]:
        return self._call(lambda: self.aruns_alive(thread_id))


async def _connect_like_async(pool: AsyncConnectionPool[Any]) -> psycopg.AsyncConnection[Any]:
    conninfo = pool.conninfo() if callable(pool.conninfo) else pool.conninfo
    if isinstance(conninfo, Awaitable):
        conninfo = await conninfo
    kwargs = pool.kwargs() if callable(pool.kwargs) else dict(pool.kwargs or {})
    if isinstance(kwargs, Awaitable):
        kwargs = await kwargs
    kwargs = {**kwargs, "autocommit": True}
    try:
        connection: psycopg.AsyncConnection[Any] = await pool.connection_class.connect(conninfo, **kwargs)
    except psycopg.OperationalError as exc:
        raise _unreachable(conninfo, exc) from exc
    return connection
