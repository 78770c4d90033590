"""The Postgres drivers: perform an operation on a psycopg connection, sync or async.

psycopg's public API only: ``execute`` (psycopg prepares a statement on the server once
it has run ``prepare_threshold`` times on a connection) and, for a batch of several
statements, pipeline mode (one round trip). Also how the savers open connections and
what they say when a server cannot be reached.
"""

from __future__ import annotations

import math
import os
from collections.abc import Awaitable
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from handrail.checkpoint.postgres._base import Op, Result
from handrail.errors import ConfigurationError, StoreUnavailableError

__all__ = [
    "CONNECT_TIMEOUT",
    "PREPARE_THRESHOLD",
    "connect_like",
    "connect_like_async",
    "run_async",
    "run_sync",
]

T = TypeVar("T")

CONNECT_TIMEOUT = 5
"""``from_conn_string``'s default connect timeout, in seconds (libpq's ``connect_timeout``)."""

PREPARE_THRESHOLD = 2
"""``from_conn_string``'s default: a statement is prepared on a connection at its third run.

The savers run few distinct statements (an append has a handful of shapes), each many
times; preparing one saves the server's parse and plan of it on every later run.
"""

# psycopg's public API only: ``execute`` (which prepares a statement on the server once it
# has run ``prepare_threshold`` times on a connection) and, for a batch of several
# statements, pipeline mode (one round trip).
_IDLE = psycopg.pq.TransactionStatus.IDLE
_OPEN = (psycopg.pq.TransactionStatus.INTRANS, psycopg.pq.TransactionStatus.INERROR)


def run_sync(conn: psycopg.Connection[Any], op: Op[T], *, stay_open: bool = False) -> T:
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
        raise RuntimeError("a handrail operation left its transaction open")  # a bug in an operation
    return value


async def run_async(conn: psycopg.AsyncConnection[Any], op: Op[T], *, stay_open: bool = False) -> T:
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


def _not_autocommit() -> ConfigurationError:
    return ConfigurationError(
        "the saver's PostgreSQL connections must be in autocommit mode: "
        "psycopg.connect(dsn, autocommit=True) or ConnectionPool(dsn, kwargs={'autocommit': True})"
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


def connect_like(pool: ConnectionPool[Any]) -> psycopg.Connection[Any]:
    conninfo = pool.conninfo() if callable(pool.conninfo) else pool.conninfo
    kwargs = pool.kwargs() if callable(pool.kwargs) else pool.kwargs or {}
    try:
        connection: psycopg.Connection[Any] = pool.connection_class.connect(
            conninfo, **{**kwargs, "autocommit": True}
        )
    except psycopg.OperationalError as exc:
        raise _unreachable(conninfo, exc) from exc
    return connection


async def connect_like_async(pool: AsyncConnectionPool[Any]) -> psycopg.AsyncConnection[Any]:
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
