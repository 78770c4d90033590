"""The sweeper: reviews nobody answered in time resolve by their policies (SPEC rule 15).

A review whose policy sets ``expires_after`` expires that long after it was asked; its
``on_expiry`` (``"reject"`` or ``"approve"``) then decides it, with outcome ``expired``
and channel ``expiry``. Something must notice: the sweeper inside ``handrail serve``,
``handrail sweep`` (one pass, or ``--every 30s``), :func:`sweep` in Python, or
``invoke(None, config)`` on the thread itself.

Rule S1 - Each lapsed review resolves once. The resolution is appended like any answer,
    naming the head it expects (rule 8): many sweepers at once are safe (one resolves
    each review, the others find nothing left), and a decision racing the expiry ends
    with exactly one of them applied. A decision that arrives after the expiry is
    refused (``ReviewExpiredError``, 409 over HTTP), whether or not a sweep has run.
Rule S2 - A sweeper takes only the threads of the agents it hosts (SPEC rule 21,
    ``worker.py`` rule W3).
Rule S3 - Sweeping records, it does not run: the thread is queued and a worker runs
    what the expiry decided (the tool, for ``on_expiry="approve"``; the model's next
    turn with the expiry's ToolMessage, for ``"reject"``).

It lists the pending reviews of its agents (the inbox) and resolves those whose time has
passed, one thread at a time; its cost grows with the number of pending reviews.

Example::

    from handrail.sweep import sweep

    expired = sweep({"support": agent})          # one pass
    [(e.thread_id, e.interrupt_id) for e in expired]
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from handrail.agent import Agent
from handrail.checkpoint.base import ClaimFilter
from handrail.errors import ConfigurationError
from handrail.runtime import answering
from handrail.worker import ASSISTANT_KEY, hosted_names

__all__ = ["Expired", "asweep", "sweep", "sweep_forever"]

log = logging.getLogger("handrail.sweep")

PAGE = 200


@dataclass(frozen=True, slots=True)
class Expired:
    """A review the sweep resolved by its expiry."""

    thread_id: str
    interrupt_id: str
    expired_at: datetime


async def asweep(
    agents: Mapping[str, Agent], *, now: float | None = None, unbound: bool = True
) -> list[Expired]:
    """One pass over the pending reviews of ``agents`` (by assistant name): resolve each
    whose expiry has passed at ``now`` (seconds since the epoch; default the clock's).
    ``unbound=False``: leave the threads bound to no agent alone (rule S2's first agent
    takes them otherwise)."""
    if not agents:
        raise ConfigurationError("a sweep needs at least one agent")
    at = answering.now() if now is None else now
    names = hosted_names(agents)
    first = next(iter(agents))
    done: list[Expired] = []
    for key, agent in agents.items():
        if agent.checkpointer is None:
            raise ConfigurationError(f"agent {key!r} has no checkpointer: a sweep resolves stored reviews")
        mine = tuple(name for name, owner in names.items() if owner == key)
        owners = ClaimFilter(ASSISTANT_KEY, mine, or_missing=unbound and key == first)
        lapsed: dict[str, list[tuple[str, datetime]]] = {}
        cursor = None
        while True:
            page = await agent.alist_interrupts(limit=PAGE, cursor=cursor, owners=owners)
            for item in page.items:
                if item.expires_at is not None and item.expires_at.timestamp() <= at:
                    lapsed.setdefault(item.thread_id, []).append((item.interrupt.id, item.expires_at))
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        for thread_id, reviews in lapsed.items():
            resolved = set(await agent.aexpire(thread_id, now=at))
            done += [Expired(thread_id, i, when) for i, when in reviews if i in resolved]
    return done


def sweep(agents: Mapping[str, Agent], *, now: float | None = None) -> list[Expired]:
    """:func:`asweep` from code that is not async (it runs its own event loop)."""
    return asyncio.run(asweep(agents, now=now))


async def sweep_forever(agents: Mapping[str, Agent], every: float, *, unbound: bool = True) -> None:
    """Sweep every ``every`` seconds until cancelled; a failed pass is logged, not fatal."""
    if not every > 0:
        raise ConfigurationError(f"a sweep interval must be above 0 seconds, got {every!r}")
    while True:
        try:
            for expired in await asweep(agents, unbound=unbound):
                log.info(
                    "review %s of thread %s expired at %s",
                    expired.interrupt_id,
                    expired.thread_id,
                    expired.expired_at.astimezone(UTC).isoformat(),
                )
        except Exception:
            log.exception("a sweep failed; the next one tries again")
        await asyncio.sleep(every)
