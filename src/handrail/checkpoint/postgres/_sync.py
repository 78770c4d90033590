"""PostgresSaver: the store protocol on PostgreSQL, for threads (a facade over the core).

What is its own: the connection types it takes, ``setup`` and ``close`` as blocking
calls, and its driver (``_drivers.py``), which runs every step with blocking calls in the
caller's thread. Everything else is the core's (``core.py``, ``_protocol.py``).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from handrail.checkpoint.postgres._drivers import Step, SyncDriver
from handrail.checkpoint.postgres._protocol import PostgresProtocol

__all__ = ["PostgresSaver"]

T = TypeVar("T")


class PostgresSaver(PostgresProtocol):
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

    _driver = SyncDriver
    _io: SyncDriver

    def __init__(
        self, conn: ConnectionPool[Any] | psycopg.Connection[Any], *, schema: str | None = None
    ) -> None:
        super().__init__(conn, schema=schema)

    def __enter__(self) -> PostgresSaver:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def setup(self) -> None:
        """Create or migrate the schema; idempotent, safe from many processes at once."""
        self._io.drive(self._setup())

    def close(self) -> None:
        """Release this saver's runs and its liveness lock; close the pool it opened."""
        self._io.drive(self._close())

    def _drive(self, step: Step[T]) -> T:
        return self._io.drive(step)
