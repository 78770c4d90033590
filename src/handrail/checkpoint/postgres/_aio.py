"""AsyncPostgresSaver: the store protocol on PostgreSQL, for asyncio (a facade over the core).

What is its own: the connection types it takes, ``setup`` and ``aclose`` as coroutines,
the ``a``-methods (``_protocol.py``) and its driver (``_drivers.py``), which awaits every
step's calls on the event loop; and its sync methods, which hand their step to that loop
from another thread and wait. Everything else is the core's (``core.py``).
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from handrail.checkpoint.postgres._drivers import AsyncDriver, Step
from handrail.checkpoint.postgres._protocol import AsyncProtocol
from handrail.errors import ConfigurationError

__all__ = ["AsyncPostgresSaver"]

T = TypeVar("T")


class AsyncPostgresSaver(AsyncProtocol):
    """PostgresSaver for asyncio: the ``a``-methods run on psycopg's async driver.

    ``conn`` is a ``psycopg_pool.AsyncConnectionPool`` or a ``psycopg.AsyncConnection``
    in autocommit mode. The sync methods also work when called from a thread other
    than the event loop's (they hand the work to the loop and wait).

    Example::

        async with AsyncPostgresSaver.from_conn_string("postgresql://localhost/app") as saver:
            agent = create_agent(model, tools, middleware=[...], checkpointer=saver)
            await agent.ainvoke({"messages": ["hi"]}, {"configurable": {"thread_id": "t1"}})
    """

    _driver = AsyncDriver
    _io: AsyncDriver

    def __init__(
        self, conn: AsyncConnectionPool[Any] | psycopg.AsyncConnection[Any], *, schema: str | None = None
    ) -> None:
        super().__init__(conn, schema=schema)

    async def __aenter__(self) -> AsyncPostgresSaver:
        await self.setup()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def setup(self) -> None:
        """Create or migrate the schema; idempotent, safe from many processes at once."""
        await self._io.drive(self._setup())

    async def aclose(self) -> None:
        """Release this saver's runs and its liveness lock; close the pool it opened."""
        await self._io.drive(self._close())

    async def _adrive(self, step: Step[T]) -> T:
        return await self._io.drive(step)

    def _drive(self, step: Step[T]) -> T:
        """A sync method's step, run on the saver's event loop from another thread."""
        loop = self._io.loop
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
        return asyncio.run_coroutine_threadsafe(self._io.drive(step), loop).result()
