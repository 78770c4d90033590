"""Grants as a store keeps them (SPEC rule 16): records, filters and what a use checks.

A grant lets later calls to one tool run without a pause: on the thread it was given on
(``scope="thread"``) or on every thread of its agent (``scope="agent"``), optionally only
for arguments equal to those approved (``args_digest``), until ``expires_at`` and/or for
``uses`` calls. It is born with the approval that carries it, in the same transaction as
that answer (``append(..., grants=GrantChange(new=...))``). Each use is spent on its own
(``spend_grants``), atomically, just before the call it lets run is planned: a revoked,
lapsed or spent grant raises :class:`~handrail.errors.GrantSpentError` and spends nothing.
Two calls racing for a grant's last use: one spends it, the other is refused and its run
asks a person instead. A process that dies between the spend and the plan loses a use; it
never runs a call twice.

The rules of who may give a grant and what it may cover are the gate's
(``handrail.review.grants``); the store keeps the records and spends uses atomically.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from handrail.errors import GrantSpentError

__all__ = [
    "GrantChange",
    "GrantFilter",
    "GrantRecord",
    "apply_change",
    "check_record",
    "grant_matches",
    "page",
    "spend_refusal",
    "spent",
]

GrantScope = Literal["thread", "agent"]


@dataclass(frozen=True, slots=True)
class GrantRecord:
    """One grant: what it covers, for how long and how often, who gave it and when.

    ``agent`` is the agent (assistant id) whose threads it covers; ``thread_id`` the
    thread it was given on (for ``scope="thread"``, the only one it covers); ``tool`` the
    tool; ``args_digest`` (``handrail.review.call_digest``) limits it to calls with the
    approved arguments (``args`` keeps them to show), None covers any arguments;
    ``expires_at`` (epoch seconds) and ``uses`` (None: no limit of that kind; at least
    one is set) bound it, ``used`` counts the calls it let run. ``given_by`` is the
    reviewer who approved, ``given_at`` when, ``interrupt_id`` and ``tool_call_id`` the
    review and call the approval answered. ``revoked_at``/``revoked_by``: set once revoked.
    """

    grant_id: str
    agent: str
    tool: str
    scope: GrantScope
    thread_id: str
    args_digest: str | None
    args: Any
    expires_at: float | None
    uses: int | None
    used: int
    given_by: Any
    given_at: float
    interrupt_id: str
    tool_call_id: str
    revoked_at: float | None = None
    revoked_by: Any = None

    def in_force(self, at: float) -> bool:
        """Whether it covers a call that starts at ``at``."""
        return spend_refusal(self, at) is None

    @property
    def uses_left(self) -> int | None:
        """How many more calls it may let run (None: no limit by count)."""
        return None if self.uses is None else max(0, self.uses - self.used)


@dataclass(frozen=True, slots=True)
class GrantFilter:
    """Which grants :meth:`BaseCheckpointSaver.list_grants` returns, newest first.

    ``agent``, ``tool``: equal; ``thread_id``: given on that thread; ``covering``: the
    grants that may cover a call on that thread (``scope="agent"``, or ``"thread"`` and
    given on it); ``active_at``: only those in force at that time.
    """

    agent: str | None = None
    tool: str | None = None
    thread_id: str | None = None
    covering: str | None = None
    active_at: float | None = None
    limit: int = 100
    offset: int = 0


@dataclass(frozen=True, slots=True)
class GrantChange:
    """What an append does to grants, in its transaction: ``new`` records to add."""

    new: Sequence[GrantRecord] = ()


def spend_refusal(record: GrantRecord | None, at: float) -> str | None:
    """Why a use of ``record`` cannot be spent at ``at``, or None when it can."""
    if record is None:
        return "there is no such grant"
    if record.revoked_at is not None:
        return f"grant {record.grant_id} was revoked"
    if record.expires_at is not None and not at < record.expires_at:
        return f"grant {record.grant_id} lapsed"
    if record.uses is not None and record.used >= record.uses:
        return f"grant {record.grant_id} has no use left"
    return None


def grant_matches(record: GrantRecord, filter: GrantFilter) -> bool:
    """Whether ``record`` is one ``filter`` lists (its limit and offset aside)."""
    if filter.agent is not None and record.agent != filter.agent:
        return False
    if filter.tool is not None and record.tool != filter.tool:
        return False
    if filter.thread_id is not None and record.thread_id != filter.thread_id:
        return False
    if filter.covering is not None and not (record.scope == "agent" or record.thread_id == filter.covering):
        return False
    return filter.active_at is None or record.in_force(filter.active_at)


def apply_change(kept: dict[str, GrantRecord], change: GrantChange) -> dict[str, GrantRecord]:
    """The grants after ``change`` (a new dict; ``kept`` is left as it was); a record no
    grant could be, or one whose id exists, raises ValueError."""
    out = dict(kept)
    for record in change.new:
        check_record(record)
        if record.grant_id in out:
            raise ValueError(f"grant {record.grant_id} exists already")
        out[record.grant_id] = record
    return out


def spent(
    kept: dict[str, GrantRecord], grant_ids: Sequence[str], thread_id: str, at: float
) -> dict[str, GrantRecord]:
    """The grants after one use of each of ``grant_ids`` at ``at`` (a new dict), or
    :class:`GrantSpentError` naming the first that has no use to give (nothing spent)."""
    out = dict(kept)
    for grant_id in grant_ids:
        found = out.get(grant_id)
        reason = spend_refusal(found, at)
        if reason is not None or found is None:
            raise GrantSpentError(
                f"thread {thread_id!r}: {reason or 'no such grant'} ({grant_id}); nothing was spent",
                thread_id=thread_id,
                grant_id=grant_id,
            )
        out[grant_id] = replace(found, used=found.used + 1)
    return out


def check_record(record: GrantRecord) -> None:
    """Refuse a record no grant could be: ValueError naming what is wrong."""
    if record.scope not in ("thread", "agent"):
        raise ValueError(f"grant {record.grant_id}: scope must be 'thread' or 'agent'")
    if record.expires_at is None and record.uses is None:
        raise ValueError(f"grant {record.grant_id}: needs an expiry, a number of uses or both")
    if record.uses is not None and (isinstance(record.uses, bool) or record.uses < 1):
        raise ValueError(f"grant {record.grant_id}: uses must be at least 1")
    if record.expires_at is not None and not math.isfinite(record.expires_at):
        raise ValueError(f"grant {record.grant_id}: expires_at must be a finite time")
    if record.used < 0:
        raise ValueError(f"grant {record.grant_id}: used must not be negative")


def page(records: Sequence[GrantRecord], filter: GrantFilter) -> list[GrantRecord]:
    """The page of ``records`` that ``filter`` lists, newest first."""
    found = sorted(
        (r for r in records if grant_matches(r, filter)), key=lambda r: (r.given_at, r.grant_id), reverse=True
    )
    return found[filter.offset : filter.offset + filter.limit]
