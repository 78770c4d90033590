"""A store's in-process wake-up for workers: "a thread was queued here".

Stores whose queue lives in this process's memory or in a file (``InMemorySaver``,
``SqliteSaver``) cannot hear other processes; they wake the waiters of their own
process at once, and workers poll for the rest (``handrail.worker``). PostgreSQL has
``LISTEN``/``NOTIFY`` for that instead (``checkpoint/postgres/_feed.py``).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # asyncio loads when something runs async, not on `import handrail`
    import asyncio

__all__ = ["QueueSignal"]


class QueueSignal:
    """Wake the threads and coroutines of this process that wait for a queued thread."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def notify(self) -> None:
        """A thread was queued (after the commit that queued it)."""
        with self._changed:
            waiters, self._waiters = self._waiters, []
            self._changed.notify_all()
        for loop, future in waiters:
            try:
                loop.call_soon_threadsafe(_settle, future)
            except RuntimeError:  # that loop is closed: nobody waits there any more
                pass

    def wait(self, timeout: float) -> None:
        """Block until :meth:`notify` or ``timeout`` seconds, whichever comes first."""
        with self._changed:
            self._changed.wait(timeout)

    async def await_(self, timeout: float) -> None:
        """Async :meth:`wait`, without a thread of its own."""
        import asyncio

        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        entry = (loop, future)
        with self._changed:
            self._waiters.append(entry)
        try:
            async with asyncio.timeout(timeout):  # not wait_for: it can drop a cancel on 3.11
                await future
        except TimeoutError:
            pass
        finally:
            with self._changed:
                if entry in self._waiters:
                    self._waiters.remove(entry)


def _settle(future: Any) -> None:
    if not future.done():
        future.set_result(None)
