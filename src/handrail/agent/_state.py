"""Reading and changing threads: a thread's state and history, ``update_state``, the inbox, the thread list.

A thread's state is the fold of its log (DESIGN); ``get_state`` and
``get_state_history`` read it at a checkpoint or at each one, and ``update_state``
appends a change made by hand, recorded with who made it (SPEC rule 21). Across
threads, ``list_interrupts`` is the reviewers' inbox and ``list_threads`` the store's
thread rows; both read the store's small per-thread rows, not the logs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Literal

from handrail.agent._callers import caller_of, reviewer_of
from handrail.agent._work import Steps, Work
from handrail.agent.core import AgentCore
from handrail.checkpoint.base import ClaimFilter, PendingFilter, PendingOrder, ThreadRecord
from handrail.runtime import inbox, loop, reading
from handrail.runtime.effects import Env
from handrail.runtime.inbox import InterruptPage
from handrail.types import RunnableConfig, StateSnapshot

__all__ = ["State"]


class State(AgentCore):
    """A thread's state, history and hand-made updates; the inbox and the thread list."""

    def get_state(self, config: RunnableConfig) -> StateSnapshot:
        """The thread's state now, or at ``config["configurable"]["checkpoint_id"]``.

        ``interrupts`` holds only the pending interrupts; ``next`` the steps due.
        """
        return self._snapshot(config).run()

    async def aget_state(self, config: RunnableConfig) -> StateSnapshot:
        """Async :meth:`get_state`."""
        return await self._snapshot(config).arun()

    def _snapshot(self, config: RunnableConfig) -> Work[StateSnapshot]:
        env, configurable = self._reader(config)
        return Work(reading.snapshot(env, configurable.get("checkpoint_id")), env)

    def get_state_history(
        self, config: RunnableConfig, *, before: RunnableConfig | None = None, limit: int | None = None
    ) -> Iterator[StateSnapshot]:
        """Every checkpoint of the thread, newest first."""
        yield from self._history(config, before, limit).run()

    async def aget_state_history(
        self, config: RunnableConfig, *, before: RunnableConfig | None = None, limit: int | None = None
    ) -> AsyncIterator[StateSnapshot]:
        """Async :meth:`get_state_history`."""
        for item in await self._history(config, before, limit).arun():
            yield item

    def _history(
        self, config: RunnableConfig, before: RunnableConfig | None, limit: int | None
    ) -> Work[list[StateSnapshot]]:
        env, _ = self._reader(config)
        return Work(reading.history(env, before=_checkpoint_of(before), limit=limit), env)

    def update_state(
        self, config: RunnableConfig, values: dict[str, Any] | None, as_node: str | None = None
    ) -> RunnableConfig:
        """Change the thread's state by hand; return the config of the new checkpoint.

        With ``as_node`` the update counts as that step's output and the steps after it
        are due next. Pending interrupts are superseded: the paused step asks again,
        with new ids, when the thread continues.
        """
        return self._update(config, values, as_node).run()

    async def aupdate_state(
        self, config: RunnableConfig, values: dict[str, Any] | None, as_node: str | None = None
    ) -> RunnableConfig:
        """Async :meth:`update_state`."""
        return await self._update(config, values, as_node).arun()

    def _update(
        self, config: RunnableConfig, values: dict[str, Any] | None, as_node: str | None
    ) -> Work[RunnableConfig]:
        env, configurable = self._reader(config)
        checkpoint_id = configurable.get("checkpoint_id")
        update = loop.update_state(env, checkpoint_id, values, as_node, *caller_of(configurable))
        return Work(_forgotten_if_broken(update, env), env)

    # Threads and the inbox ----------------------------------------------------------------------
    def list_interrupts(
        self,
        *,
        tool: str | None = None,
        thread_id: str | None = None,
        older_than: float | timedelta | None = None,
        metadata: Mapping[str, Any] | None = None,
        kind: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        reviewer: Any = None,
        order: PendingOrder = "oldest",
        owners: ClaimFilter | None = None,
    ) -> InterruptPage:
        """Pending interrupts across all threads, oldest first: the reviewers' inbox.

        Filter by ``tool`` name, ``thread_id``, ``older_than`` (seconds or a timedelta),
        thread ``metadata`` (a subset match) and ``kind`` (``"interrupt"`` or
        ``"outcome_unknown"``). With ``reviewer`` (``{"id", "roles"}``), only what that
        reviewer may decide (SPEC rule 12). ``order="newest"`` lists the newest first.
        Pages hold ``limit`` items; pass ``next_cursor`` on, with the same ``order``.
        ``owners`` (a :class:`~handrail.checkpoint.base.ClaimFilter`) keeps only the
        threads of some agents: ``ClaimFilter("assistant_id", ("sql",), or_missing=True)``
        lists the threads bound to ``sql`` and those bound to no agent (SPEC rule 21).

        Example::

            page = agent.list_interrupts(order="newest", limit=20)
            more = agent.list_interrupts(order="newest", limit=20, cursor=page.next_cursor)
        """
        filters = (tool, thread_id, older_than, metadata, kind, limit, cursor, order)
        return self._inbox(partial(inbox.pending_filter, *filters, owners=owners), reviewer).run()

    async def alist_interrupts(
        self,
        *,
        tool: str | None = None,
        thread_id: str | None = None,
        older_than: float | timedelta | None = None,
        metadata: Mapping[str, Any] | None = None,
        kind: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        reviewer: Any = None,
        order: PendingOrder = "oldest",
        owners: ClaimFilter | None = None,
    ) -> InterruptPage:
        """Async :meth:`list_interrupts`."""
        filters = (tool, thread_id, older_than, metadata, kind, limit, cursor, order)
        return await self._inbox(partial(inbox.pending_filter, *filters, owners=owners), reviewer).arun()

    def _inbox(self, filter: Callable[[], PendingFilter], reviewer: Any) -> Work[InterruptPage]:
        """The inbox's page: ``filter`` makes the filter, once the agent is known to have a store."""
        store = self._store_or_raise()
        env = Env(self._spec, store, "")
        return Work(inbox.listing(env, filter(), reviewer_of(reviewer)), env)

    def list_threads(
        self,
        *,
        metadata: Mapping[str, Any] | None = None,
        status: Literal["idle", "running", "interrupted"] | None = None,
        updated_after: datetime | float | None = None,
        updated_before: datetime | float | None = None,
        limit: int = 100,
        offset: int = 0,
        owners: ClaimFilter | None = None,
    ) -> list[ThreadRecord]:
        """The store's threads, most recently updated first.

        Filter by thread ``metadata`` (a subset match), ``status`` (``"idle"``,
        ``"running"`` or ``"interrupted"``), last update time (datetimes, or epoch
        seconds) and ``owners``, the agents the threads belong to (as in
        :meth:`list_interrupts`).

        Example::

            stale = agent.list_threads(status="interrupted", updated_before=datetime(2026, 11, 1, tzinfo=UTC))
        """
        return self._store_or_raise().list_threads(
            inbox.thread_filter(metadata, status, updated_after, updated_before, limit, offset, owners)
        )

    async def alist_threads(
        self,
        *,
        metadata: Mapping[str, Any] | None = None,
        status: Literal["idle", "running", "interrupted"] | None = None,
        updated_after: datetime | float | None = None,
        updated_before: datetime | float | None = None,
        limit: int = 100,
        offset: int = 0,
        owners: ClaimFilter | None = None,
    ) -> list[ThreadRecord]:
        """Async :meth:`list_threads`."""
        return await self._store_or_raise().alist_threads(
            inbox.thread_filter(metadata, status, updated_after, updated_before, limit, offset, owners)
        )


def _forgotten_if_broken(steps: Steps[RunnableConfig], env: Env) -> Steps[RunnableConfig]:
    """``steps``; a thread whose reading they left unlike the store's is dropped from the cache."""
    try:
        return (yield from steps)
    finally:
        if env.broken:
            env.spec.cache.drop(env.thread_id)


def _checkpoint_of(config: RunnableConfig | None) -> str | None:
    if not config:
        return None
    value = config.get("configurable", {}).get("checkpoint_id")
    return value if isinstance(value, str) else None
