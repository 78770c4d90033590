"""The Postgres drivers: perform the saver's steps on psycopg, blocking or on an event loop.

A *step* (:data:`Step`) is a generator written once (``core.py``, ``_protocol.py``) that
calls its saver's driver and yields what the call returns. :class:`SyncDriver` has done
the work by then and returns the value, which its :meth:`~SyncDriver.drive` sends
straight back; :class:`AsyncDriver` returns an awaitable, which its
:meth:`~AsyncDriver.drive` awaits, sending back the value or throwing the error in. So
``value = yield self._io.run(op)`` reads the same, and fails at the same place, under
either driver: the runtime's way (one generator, two drivers: ``runtime/effects.py``),
with the driver's methods as the effects.

The drivers' methods are the saver's I/O and nothing else, one small method each: run an
operation on a connection of the pool or on the saver's one connection
(:meth:`~SyncDriver.run`), or on a given one; open a connection like the pool's and close
one; wait for a notification; sleep; hold a lock over a step or over a change of state.
An operation (:data:`~handrail.checkpoint.postgres._base.Op`) is itself performed by a
step, :func:`operation`, that sends each batch in one round trip with psycopg's public
API only: ``execute`` (psycopg prepares a statement on the server once it has run
``prepare_threshold`` times on a connection) and, for several statements, pipeline mode.
How the savers open connections, and what they say when a server cannot be reached,
is :mod:`~handrail.checkpoint.postgres._connect`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Generator
from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar, Protocol, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from handrail.checkpoint.postgres._base import Op, Query, Result
from handrail.checkpoint.postgres._connect import connect_like, connect_like_async, not_autocommit
from handrail.errors import ConfigurationError

__all__ = ["AsyncDriver", "Driver", "Step", "SyncDriver", "operation"]

T = TypeVar("T")

Step = Generator[Any, Any, T]
"""A saver's method written once: yields what its driver's calls return (see above)."""

LOCKS = ("setup", "owner", "listen")
"""The saver's locks by name (the rules: ``core.py``); the one connection has its own."""

_IDLE = psycopg.pq.TransactionStatus.IDLE
_OPEN = (psycopg.pq.TransactionStatus.INTRANS, psycopg.pq.TransactionStatus.INERROR)


class Driver(Protocol):
    """What a step may call: :class:`SyncDriver` returns values, :class:`AsyncDriver` awaitables."""

    pool: Any  # the saver's pool, or None when it runs on one connection
    conn: Any  # that one connection, or None
    owns_pool: bool  # from_conn_string made the pool: the saver opens and closes it

    def run(self, op: Op[Any]) -> Any: ...
    def run_on(self, conn: Any, op: Op[Any], *, stay_open: bool = False) -> Any: ...
    def execute(self, conn: Any, batch: list[Query]) -> Any: ...
    def rollback(self, conn: Any) -> Any: ...
    def connect(self) -> Any: ...
    def close(self, conn: Any) -> Any: ...
    def notified(self, conn: Any, timeout: float) -> Any: ...
    def sleep(self, timeout: float) -> Any: ...
    def open_pool(self) -> Any: ...
    def close_pool(self) -> Any: ...
    def locked(self, name: str, step: Step[Any]) -> Any: ...
    def guard(self, name: str) -> AbstractContextManager[Any]: ...


def operation(io: Driver, conn: Any, op: Op[T], *, stay_open: bool = False) -> Step[T]:
    """Perform an operation on ``conn``, each batch in one round trip (several statements: one pipeline).

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
            results = yield io.execute(conn, batch)
    except BaseException:
        if not conn.closed and conn.info.transaction_status in _OPEN:
            try:
                yield io.rollback(conn)
            except psycopg.Error:
                pass  # the connection is unusable; the pool discards it
        raise
    if conn.info.transaction_status != _IDLE and not stay_open:
        yield io.rollback(conn)
        raise RuntimeError("a handrail operation left its transaction open")  # a bug in an operation
    return value


class _Connections:
    """A driver's pool, or the one connection it was given (in autocommit mode)."""

    pool_class: ClassVar[type[Any]]
    connection_class: ClassVar[type[Any]]
    refusal: ClassVar[str]  # the error for anything else

    def __init__(self, conn: Any) -> None:
        if isinstance(conn, self.pool_class):
            self.pool, self.conn = conn, None
        elif not isinstance(conn, self.connection_class):
            raise ConfigurationError(f"{self.refusal}, got {type(conn).__name__}")
        elif not conn.autocommit:
            raise not_autocommit()
        else:
            self.pool, self.conn = None, conn
        self.owns_pool = False  # from_conn_string made the pool: the saver opens and closes it


class SyncDriver(_Connections):
    """PostgresSaver's driver: blocking psycopg calls, from any number of threads."""

    pool_class = ConnectionPool
    connection_class = psycopg.Connection
    refusal = "PostgresSaver takes a psycopg ConnectionPool or Connection"
    pool: ConnectionPool[Any] | None
    conn: psycopg.Connection[Any] | None

    def __init__(self, conn: ConnectionPool[Any] | psycopg.Connection[Any]) -> None:
        super().__init__(conn)
        self._conn_lock = threading.RLock()  # the one connection: one operation at a time
        self._locks = {name: threading.Lock() for name in LOCKS}

    def drive(self, step: Step[T]) -> T:
        """Run a step to its end: every call it yields has been made already."""
        value: Any = None
        try:
            while True:
                value = step.send(value)
        except StopIteration as stop:
            result: T = stop.value
            return result

    def run(self, op: Op[T]) -> T:
        """Perform an operation on a connection of the pool, or on the one connection."""
        pool = self.pool
        if pool is None:
            assert self.conn is not None
            with self._conn_lock:
                return self.run_on(self.conn, op)
        # getconn/putconn rather than pool.connection(): an operation leaves its connection
        # idle (or rolls back), so the commit that one's exit makes is not needed
        conn = pool.getconn()
        try:
            return self.run_on(conn, op)
        finally:
            pool.putconn(conn)

    def run_on(self, conn: psycopg.Connection[Any], op: Op[T], *, stay_open: bool = False) -> T:
        """Perform an operation on ``conn`` (see :func:`operation`)."""
        if not conn.autocommit:
            raise not_autocommit()
        return self.drive(operation(self, conn, op, stay_open=stay_open))

    def execute(self, conn: psycopg.Connection[Any], batch: list[Query]) -> list[Result]:
        """Send a batch in one round trip: one statement, or several in a pipeline."""
        if len(batch) == 1:  # the usual case: no pipeline needed for one statement
            cursors = [conn.execute(batch[0].sql, batch[0].params)]
        else:
            with conn.pipeline():
                cursors = [conn.execute(query.sql, query.params) for query in batch]
        return [Result(c.fetchall() if c.description is not None else [], c.rowcount) for c in cursors]

    def rollback(self, conn: psycopg.Connection[Any]) -> None:
        conn.rollback()

    def connect(self) -> psycopg.Connection[Any]:
        """A new connection with the pool's settings, in autocommit mode."""
        assert self.pool is not None
        return connect_like(self.pool)

    def close(self, conn: psycopg.Connection[Any]) -> None:
        conn.close()

    def notified(self, conn: psycopg.Connection[Any], timeout: float) -> None:
        """Return at the first notification on ``conn``, or after ``timeout`` seconds."""
        for _ in conn.notifies(timeout=timeout, stop_after=1):
            pass

    def sleep(self, timeout: float) -> None:
        time.sleep(timeout)

    def open_pool(self) -> None:
        """Open the pool the saver made, once the server has answered (or said why not)."""
        if self.owns_pool and self.pool is not None and self.pool.closed:
            connect_like(self.pool).close()  # the server answers (or we say why not) ...
            self.pool.open()  # ... before the pool starts trying on its own

    def close_pool(self) -> None:
        if self.owns_pool and self.pool is not None:
            self.pool.close()

    def locked(self, name: str, step: Step[T]) -> T:
        """Run a step holding the lock ``name``."""
        with self._locks[name]:
            return self.drive(step)

    def guard(self, name: str) -> AbstractContextManager[Any]:
        """The lock ``name``, for a change of state with no I/O in it (other threads run)."""
        return self._locks[name]


class AsyncDriver(_Connections):
    """AsyncPostgresSaver's driver: psycopg's async API, on the event loop of its callers."""

    pool_class = AsyncConnectionPool
    connection_class = psycopg.AsyncConnection
    refusal = "AsyncPostgresSaver takes a psycopg AsyncConnectionPool or AsyncConnection"
    pool: AsyncConnectionPool[Any] | None
    conn: psycopg.AsyncConnection[Any] | None

    def __init__(self, conn: AsyncConnectionPool[Any] | psycopg.AsyncConnection[Any]) -> None:
        super().__init__(conn)
        # the loop the saver last ran on: its sync methods hand their steps to it
        self.loop: asyncio.AbstractEventLoop | None = None
        self._locks: dict[str, asyncio.Lock] = {}

    async def drive(self, step: Step[T]) -> T:
        """Run a step to its end, awaiting every call it yields."""
        self.loop = asyncio.get_running_loop()
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                awaitable = step.send(value) if error is None else step.throw(error)
            except StopIteration as stop:
                result: T = stop.value
                return result
            try:
                value, error = await awaitable, None
            except BaseException as exc:  # into the step, which says what it means (or re-raises)
                value, error = None, exc

    def _lock(self, name: str) -> asyncio.Lock:
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        return lock

    async def run(self, op: Op[T]) -> T:
        """Perform an operation on a connection of the pool, or on the one connection."""
        if self.pool is not None:
            if self.owns_pool:
                await self.pool.open()
            async with self.pool.connection() as conn:
                return await self.run_on(conn, op)
        assert self.conn is not None
        async with self._lock("conn"):
            return await self.run_on(self.conn, op)

    async def run_on(self, conn: psycopg.AsyncConnection[Any], op: Op[T], *, stay_open: bool = False) -> T:
        """Perform an operation on ``conn`` (see :func:`operation`)."""
        if not conn.autocommit:
            raise not_autocommit()
        return await self.drive(operation(self, conn, op, stay_open=stay_open))

    async def execute(self, conn: psycopg.AsyncConnection[Any], batch: list[Query]) -> list[Result]:
        """Send a batch in one round trip: one statement, or several in a pipeline."""
        if len(batch) == 1:
            cursors = [await conn.execute(batch[0].sql, batch[0].params)]
        else:
            async with conn.pipeline():
                cursors = [await conn.execute(query.sql, query.params) for query in batch]
        return [Result(await c.fetchall() if c.description is not None else [], c.rowcount) for c in cursors]

    async def rollback(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.rollback()

    async def connect(self) -> psycopg.AsyncConnection[Any]:
        """A new connection with the pool's settings, in autocommit mode."""
        assert self.pool is not None
        return await connect_like_async(self.pool)

    async def close(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.close()

    async def notified(self, conn: psycopg.AsyncConnection[Any], timeout: float) -> None:
        """Return at the first notification on ``conn``, or after ``timeout`` seconds."""
        async for _ in conn.notifies(timeout=timeout, stop_after=1):
            pass

    async def sleep(self, timeout: float) -> None:
        await asyncio.sleep(timeout)

    async def open_pool(self) -> None:
        """Check that the server answers (or say why not); the pool opens at its first use."""
        if self.owns_pool and self.pool is not None and self.pool.closed:
            await (await connect_like_async(self.pool)).close()

    async def close_pool(self) -> None:
        if self.owns_pool and self.pool is not None:
            await self.pool.close()

    async def locked(self, name: str, step: Step[T]) -> T:
        """Run a step holding the lock ``name``."""
        async with self._lock(name):
            return await self.drive(step)

    def guard(self, name: str) -> AbstractContextManager[Any]:
        """No lock: a change of state with no ``await`` in it runs alone on the event loop."""
        return nullcontext()
