"""The Postgres saver, written once: what PostgresSaver and AsyncPostgresSaver both are.

Theory of operation
-------------------
Every method of a saver is a *step*, a generator that calls the saver's driver and yields
what the call returns (``_drivers.py``): PostgresSaver's driver makes blocking psycopg
calls, AsyncPostgresSaver's awaits them on its event loop. The SQL is written once too
(``_queries.py``, one concept a module); a step runs its operations (each one or more
statements, one round trip a batch) and flows (an operation under the liveness lock,
``_liveness.py``), and keeps the little a saver remembers between calls. The store
protocol's methods are steps in ``_protocol.py``; the facades (``_sync.py``, ``_aio.py``)
add their constructors' types, ``setup`` and ``close``, and how a method reaches its
driver. The rules the core keeps:

Rule 1 (an operation, a connection). An operation runs on a connection taken from the
pool for it alone, or on the one connection the saver was given, under that
connection's lock (one operation at a time). Connections are in autocommit mode
(checked: ``ConfigurationError`` otherwise); an operation of several statements brings
its own ``BEGIN``/``COMMIT`` and sends them in one pipeline, and leaves its connection
idle (a transaction left open is rolled back, and is a bug: ``drivers.operation``).
Nothing lives on a pooled connection between operations: no session state, no
statement prepared but by psycopg's own ``prepare_threshold`` (``None`` behind a
PgBouncer that does not track prepared statements), so every operation works through
PgBouncer in transaction mode. The saver keeps two connections of its own: the liveness
lock's (rule 3) and the listener's (rule 6).

Rule 2 (setup, once). The schema is created or migrated (``_schema.py``, under an advisory
lock across processes) before the first operation, once per saver, under the lock
``setup``. A pool that :meth:`~PostgresCore.from_conn_string` made opens only after one
connection to the server succeeded (``_connect.py``): an unreachable server fails
``setup``, and every call that needs it, with ``StoreUnavailableError``.

Rule 3 (the liveness lock, ``_liveness.py``). The saver holds an advisory lock on its key
from its first claim until ``close``: on a pool, on a connection of its own, in a
transaction held open (so that PgBouncer keeps that client on one server connection,
and the lock ends with the client); on one connection, a session lock on it. A claim
(``claim_run``, an append's ``claim``, ``claim_queued``) names the key without asking the
server first whether its lock is still held: the claim's own statement checks, and when
no session holds the lock (its connection was lost) fails with ``HR410``, saving nothing.
The saver then takes the lock again, on the same key if it is free, unless another call
did so meanwhile (the key and connection the claim saw are compared, under the lock
``owner``), claims again every run it remembers, and the claim runs once more.

Rule 4 (remembered claims). The runs this saver claimed are remembered only to claim
them again under a new liveness lock. Safe: the server's rows are the truth (a stale
entry re-claims a released run at worst until the saver closes, and is removed by
``release_run`` and ``close``); each claim's statement checks the lock itself. An append
that releases a run forgets it first, and remembers it again if the append fails. Raced
by ``test_a_claim_takes_a_lost_liveness_lock_again``. A claim of a queued thread also
keeps the read it made (``_feed.py``) for its run, which takes it once
(``claimed_read``); releasing the run forgets it too.

Rule 5 (appends). An append returns once the server has committed it or refused it,
never sooner: ``durable=False`` only lets its own transaction's commit skip the WAL
flush (``_write.py``), and nothing is left for a later call to confirm. The only other
memory between calls is which deletes an append may leave out (``_cleared.py``): a hint,
never a reason to skip the head check that every append makes on the server.

Rule 6 (waiting for the queue). ``wait_queued`` ``LISTEN`` s on a connection of its own,
made like the pool's at the first wait and kept, under the lock ``listen`` (held through
the wait, so one caller waits on it at a time); a connection that fails is closed and
made again at the next wait. A saver on one connection, or whose server cannot be
reached, sleeps the time out instead: a wait is a hint, never a promise (``base.py``).

Rule 7 (closing). ``close`` forgets the remembered claims, deletes the saver's runs (an
error is ignored: the lock's end frees every claim anyway), ends the liveness lock
(closing its connection, or unlocking on the one connection, which stays open), and
closes the listening connection and the pool the saver made.

Rule 8 (locks). PostgresSaver is called from many threads, AsyncPostgresSaver from many
tasks on one loop. A step holds a lock across I/O with ``driver.locked(name, step)``
(``setup``, ``owner``, ``listen``: a thread lock, or an ``asyncio.Lock``), and changes
the state those locks guard without I/O in ``with driver.guard(name)``: the same thread
lock on threads, no lock on the event loop, where no other task runs before the next
``await``. AsyncPostgresSaver's sync methods run their step on the saver's loop from
another thread and wait (``_aio.py``); on the loop itself they would block it, and raise.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self, TypeVar

import psycopg

from handrail.checkpoint._records import Migration
from handrail.checkpoint.base import BaseCheckpointSaver, ThreadRead
from handrail.checkpoint.postgres._base import Op
from handrail.checkpoint.postgres._cleared import Cleared
from handrail.checkpoint.postgres._connect import CONNECT_TIMEOUT, PREPARE_THRESHOLD, pool_options
from handrail.checkpoint.postgres._drivers import AsyncDriver, Driver, Step, SyncDriver
from handrail.checkpoint.postgres._liveness import NEED_OWNER, Flow, LockAgain
from handrail.checkpoint.postgres._queries import Queries
from handrail.errors import StoreUnavailableError

__all__ = ["PostgresCore"]

T = TypeVar("T")


class PostgresCore(BaseCheckpointSaver):
    """What both Postgres savers hold, and the steps that keep the rules above."""

    _driver: ClassVar[type[SyncDriver] | type[AsyncDriver]]  # the facade's
    _io: Driver

    def __init__(self, conn: Any, *, schema: str | None = None) -> None:
        # on a pool, the liveness lock has a connection of its own: check it by trying it
        self._queries = Queries(schema, probe_locks=isinstance(conn, self._driver.pool_class))
        self._io = self._driver(conn)
        self._ready = False
        self._owner_conn: Any = None  # the connection that holds the liveness lock, on a pool
        self._owner_key: int | None = None  # the liveness lock's key (rule 3)
        self._claimed: set[tuple[str, str]] = set()  # rule 4
        self._claim_reads: dict[tuple[str, str], ThreadRead] = {}  # rule 4: a claim's read, once
        self._cleared = Cleared()
        self._listener: Any = None  # the connection that LISTENs for queued threads (rule 6)

    @classmethod
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        schema: str | None = None,
        pool_size: int = 8,
        prepare_threshold: int | None = PREPARE_THRESHOLD,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> Self:
        """A saver with its own connection pool, opened on first use; a context manager closes it.

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

            async with AsyncPostgresSaver.from_conn_string("postgresql://localhost/app") as saver:
                ...  # set up on entering
        """
        options = pool_options(pool_size, prepare_threshold, connect_timeout)
        saver = cls(cls._driver.pool_class(conn_string, **options), schema=schema)
        saver._io.owns_pool = True
        return saver

    def schema_migrations(self) -> tuple[Migration, ...]:
        """The schema, version by version (a subclass may add its own at the end).

        Statements name tables through :attr:`table_prefix` (schema and ``handrail_``).
        """
        return self._queries.migrations

    @property
    def table_prefix(self) -> str:
        """What every table name starts with: the quoted schema, if any, and ``handrail_``."""
        return self._queries.prefix

    def _drive(self, step: Step[T]) -> T:
        """Run a step for a sync method (the facade's)."""
        raise NotImplementedError

    async def _adrive(self, step: Step[T]) -> T:
        """Run a step for an async method (the facade's)."""
        raise NotImplementedError

    # Operations, setup and close (rules 1, 2 and 7) ---------------------------------------
    def _run(self, op: Op[T]) -> Step[T]:
        """Perform an operation, on a schema set up first (rule 2)."""
        if not self._ready:
            yield from self._setup()
        value: T = yield self._io.run(op)
        return value

    def _setup(self) -> Step[None]:
        yield self._io.locked("setup", self._setup_once())

    def _setup_once(self) -> Step[None]:
        if self._ready:
            return
        yield self._io.open_pool()
        migrations = self.schema_migrations()
        if (yield self._io.run(self._queries.version())) != migrations[-1].version:
            yield self._io.run(self._queries.setup(migrations))
        self._ready = True

    def _close(self) -> Step[None]:
        io = self._io
        with io.guard("owner"):
            key, owner, self._owner_conn, self._owner_key = self._owner_key, self._owner_conn, None, None
            self._claimed.clear()
            self._claim_reads.clear()
        if key is not None:
            try:
                yield from self._run(self._queries.forget_owner(key))
            except psycopg.Error:
                pass  # the lock below goes anyway, and with it every claim
        if owner is not None:
            yield io.close(owner)
        elif key is not None and io.conn is not None:
            yield io.run(self._queries.unlock(key))
        with io.guard("listen"):
            listener, self._listener = self._listener, None
        if listener is not None:
            yield io.close(listener)
        yield io.close_pool()

    # Waiting for the queue (rule 6) --------------------------------------------------------
    def _wait_queued(self, timeout: float) -> Step[None]:
        """Wait for a ``NOTIFY`` of a queued thread (``_feed.py``), at most ``timeout`` seconds.

        On a connection of its own, made from the pool's settings; a saver on one
        connection, or a server that cannot be reached, just waits the time out.
        """
        if not (yield self._io.locked("listen", self._listen(timeout))):
            yield self._io.sleep(timeout)

    def _listen(self, timeout: float) -> Step[bool]:
        """Wait on the listening connection (made on first use); False: there is none."""
        conn = self._listener
        if conn is None and self._io.pool is not None:
            try:
                conn = yield self._io.connect()
                yield self._io.run_on(conn, self._queries.listen())
            except (psycopg.Error, StoreUnavailableError):
                conn = None
            self._listener = conn
        if conn is None:
            return False
        try:
            yield self._io.notified(conn, timeout)
            return True
        except psycopg.Error:  # the connection is gone: a new one next time
            self._listener = None
            yield self._io.close(conn)
            return False

    # The liveness lock (rules 3 and 4) -----------------------------------------------------
    def _perform(self, flow: Flow[T]) -> Step[T]:
        """Run a flow (see :data:`~handrail.checkpoint.postgres._liveness.Flow`)."""
        answer: Any = None
        error: BaseException | None = None
        while True:
            try:
                request = flow.send(answer) if error is None else flow.throw(error)
            except StopIteration as stop:
                value: T = stop.value
                return value
            answer, error = None, None
            try:
                if request is NEED_OWNER:
                    answer = yield self._io.locked("owner", self._owner())
                elif isinstance(request, LockAgain):
                    yield self._io.locked("owner", self._lock_again(request.seen))
                else:
                    answer = yield from self._run(request)
            except BaseException as exc:  # into the flow, which says what it means (or re-raises)
                error = exc

    def _owner(self) -> Step[tuple[int, object]]:
        """This saver's key and the connection that holds its lock (locking on first use)."""
        if self._io.pool is None:  # the one connection carries the lock
            if self._owner_key is None:
                self._owner_key = yield self._io.run(self._queries.take_lock(None))
            return self._owner_key, self._io.conn
        if self._owner_conn is None or self._owner_conn.closed or self._owner_key is None:
            yield from self._relock()
        assert self._owner_key is not None
        return self._owner_key, self._owner_conn

    def _lock_again(self, seen: tuple[int, object]) -> Step[None]:
        """A claim found the lock of ``seen`` gone: take it again (unless done meanwhile)."""
        if self._io.pool is None:
            if self._owner_key == seen[0]:
                self._owner_key = yield self._io.run(self._queries.take_lock(self._owner_key))
                yield from self._run(self._queries.reclaim_runs(sorted(self._claimed), self._owner_key))
        elif (self._owner_key, self._owner_conn) == seen:
            yield from self._relock()

    def _relock(self) -> Step[None]:
        """Lock on a new connection, on the same key if it is free, and re-claim (``owner`` held)."""
        if self._owner_conn is not None:
            yield self._io.close(self._owner_conn)
        self._owner_conn = owner = yield self._io.connect()
        previous = self._owner_key
        take = self._queries.take_lock(previous, hold=True)
        self._owner_key = yield self._io.run_on(owner, take, stay_open=True)
        if previous is not None:
            yield from self._run(self._queries.reclaim_runs(sorted(self._claimed), self._owner_key))

    def _remember_claim(self, thread_id: str, run_id: str) -> None:
        with self._io.guard("owner"):
            self._claimed.add((thread_id, run_id))

    def _forget_claim(self, thread_id: str, run_id: str | None) -> bool:
        """Forget a claimed run; whether it was remembered."""
        if run_id is None:
            return False
        with self._io.guard("owner"):
            known = (thread_id, run_id) in self._claimed
            self._claimed.discard((thread_id, run_id))
            self._claim_reads.pop((thread_id, run_id), None)
            return known
