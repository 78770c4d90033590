"""How the Postgres savers open connections, and what they say when a server cannot be reached.

``from_conn_string`` makes a pool (:func:`pool_options`) that opens on first use, once
one connection has been made: a server that cannot be reached fails then with
:class:`~handrail.errors.StoreUnavailableError`, which names its host and port and the
reason given, instead of the pool retrying. The liveness lock and ``LISTEN`` have
connections of their own, made like the pool's (:func:`connect_like`). Every connection
is in autocommit mode: an operation brings its own ``BEGIN``/``COMMIT`` when it needs one.
"""

from __future__ import annotations

import math
import os
from collections.abc import Awaitable
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from handrail.errors import ConfigurationError, StoreUnavailableError

__all__ = [
    "CONNECT_TIMEOUT",
    "PREPARE_THRESHOLD",
    "connect_like",
    "connect_like_async",
    "not_autocommit",
    "pool_options",
]

CONNECT_TIMEOUT = 5
"""``from_conn_string``'s default connect timeout, in seconds (libpq's ``connect_timeout``)."""

PREPARE_THRESHOLD = 2
"""``from_conn_string``'s default: a statement is prepared on a connection at its third run.

The savers run few distinct statements (an append has a handful of shapes), each many
times; preparing one saves the server's parse and plan of it on every later run.
"""


def not_autocommit() -> ConfigurationError:
    """The error for a connection the saver cannot use: not in autocommit mode."""
    return ConfigurationError(
        "the saver's PostgreSQL connections must be in autocommit mode: "
        "psycopg.connect(dsn, autocommit=True) or ConnectionPool(dsn, kwargs={'autocommit': True})"
    )


def pool_options(pool_size: int, prepare_threshold: int | None, connect_timeout: float) -> dict[str, Any]:
    """The arguments of the pool ``from_conn_string`` makes (closed: it opens on first use)."""
    if pool_size < 1:
        raise ConfigurationError(f"pool_size must be at least 1, got {pool_size}")
    if not connect_timeout > 0:
        raise ConfigurationError(
            f"connect_timeout must be a number of seconds above 0, got {connect_timeout!r}"
        )
    # libpq takes whole seconds, and waits at least 2
    kwargs = {
        "autocommit": True,
        "prepare_threshold": prepare_threshold,
        "connect_timeout": math.ceil(connect_timeout),
    }
    return {"min_size": 1, "max_size": pool_size, "kwargs": kwargs, "open": False}


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
    """A new connection with the pool's settings, in autocommit mode, not from the pool."""
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
    """:func:`connect_like` for an async pool (whose settings may be awaitables)."""
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
