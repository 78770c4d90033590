"""What a review's policy shows on the pages: approvals counted (SPEC rule 14) and expiry (rule 15).

A review that needs several approvals shows, per call that counts them, how far it has
come - "1 of 2 approvals" - who approved (their ids), and, when the count stands at an
edit, that the approvals are for the edit and its arguments. A review with an expiry
shows the time left ("expires in 43 min", or "expired" once past) and the absolute time
(UTC, ISO 8601 in a ``<time>`` element's ``datetime`` and title, and as a clock beside).

Both are read from what the library says: an inbox item's ``approvals`` and
``expires_at`` (``wire.inbox_entry``, the JSON inbox's own fields) for the inbox's rows,
the review's :class:`~handrail.runtime.inbox.PendingInterrupt` for its page, and the
audit trail's ``approval`` entries for the votes given. Time left is judged by the clock
expiry is judged by (``handrail.runtime.answering.now``), so a page never says a review
is open that the library would refuse as expired.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from handrail._duration import time_left
from handrail.review import reviewer_id
from handrail.review.terms import calls_asked, terms_of
from handrail.runtime import answering
from handrail.runtime.inbox import PendingInterrupt
from handrail.server.pages._lookup import ReviewAt
from handrail.server.pages._markup import clock
from handrail.types import AuditEntry

__all__ = [
    "Count",
    "Expiry",
    "Vote",
    "counts_of",
    "expiry_of",
    "pending_item",
    "review_policy",
    "time_left",
    "votes_of",
]

_DECIDED = {"approve": "approved", "edit": "approved as edited", "reject": "rejected", "respond": "answered"}


@dataclass(frozen=True, slots=True)
class Count:
    """How far one call's approvals have come, as a page shows it."""

    tool_call_id: str
    tool: str
    approvals: int
    needed: int
    approved_by: tuple[str, ...]
    edited: bool
    args: Any  # the arguments of the action the approvals are for
    decided: str | None  # the decision's type, once the call is decided

    @property
    def text(self) -> str:
        """``1 of 2 approvals``."""
        return f"{self.approvals} of {self.needed} approval{'' if self.needed == 1 else 's'}"

    @property
    def who(self) -> str:
        """Who approved, by id: ``alice, bob`` (empty for nobody yet)."""
        return ", ".join(self.approved_by)

    @property
    def missing(self) -> int:
        """How many approvals the call still needs."""
        return max(0, self.needed - self.approvals)

    @property
    def outcome(self) -> str | None:
        """How the call was decided (``approved``, ``rejected`` ...), once it is."""
        return None if self.decided is None else _DECIDED.get(self.decided, self.decided)


def counts_of(approvals: Sequence[Any]) -> list[Count]:
    """The calls that count approvals, from an inbox item's ``approvals`` (``CallApprovals.as_json``)
    or :class:`~handrail.review.quorum.CallApprovals` themselves."""
    out = []
    for found in approvals:
        a = found.as_json() if hasattr(found, "as_json") else found
        if not isinstance(a, Mapping):
            continue
        needed = a.get("needed")
        if not isinstance(needed, int) or needed < 2:
            continue  # one approval decides it: nothing is counted
        action = a.get("action")
        action = action if isinstance(action, Mapping) else {}
        by = a.get("approved_by")
        decided = a.get("decided")
        out.append(
            Count(
                tool_call_id=str(a.get("tool_call_id") or ""),
                tool=str(action.get("name") or ""),
                approvals=len(by) if isinstance(by, list) else 0,
                needed=needed,
                approved_by=tuple(str(who) for who in by) if isinstance(by, list) else (),
                edited=a.get("edited") is True,
                args=action.get("args"),
                decided=str(decided.get("type")) if isinstance(decided, Mapping) else None,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class Expiry:
    """When a review expires unanswered, and what its expiry decides."""

    at: datetime
    seconds_left: float
    on_expiry: str | None  # "reject" or "approve", when known

    @property
    def expired(self) -> bool:
        """Whether the time has passed (the library refuses any answer now)."""
        return self.seconds_left <= 0

    @property
    def text(self) -> str:
        """``expires in 43 min`` or ``expired``."""
        return time_left(self.seconds_left)

    @property
    def iso(self) -> str:
        """The time in UTC, ISO 8601: ``2026-12-04T17:47:06Z``."""
        return self.at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")

    @property
    def clock(self) -> str:
        """The time as the pages write one: ``17:47 UTC`` today, with the date another day."""
        return clock(self.at, datetime.fromtimestamp(answering.now(), UTC))

    @property
    def outcome(self) -> str | None:
        """What the expiry decides: ``rejected`` or ``approved`` (None when not known)."""
        return {"reject": "rejected", "approve": "approved"}.get(self.on_expiry or "")


def expiry_of(expires_at: Any, on_expiry: str | None = None, now: float | None = None) -> Expiry | None:
    """The expiry of an item's ``expires_at`` (ISO text or a datetime; None: it never expires)."""
    if isinstance(expires_at, str):
        try:
            expires_at = datetime.fromisoformat(expires_at)
        except ValueError:
            return None
    if not isinstance(expires_at, datetime):
        return None
    at = expires_at if expires_at.tzinfo is not None else expires_at.replace(tzinfo=UTC)
    current = answering.now() if now is None else now
    return Expiry(at, at.timestamp() - current, on_expiry)


def _on_expiry(item: PendingInterrupt) -> str | None:
    """What the review's expiry decides, when it is the same for every call it asks about."""
    ids = [call_id for call_id, _, _ in calls_asked(item.interrupt.value)]
    found = {terms_of(item.terms, call_id).on_expiry for call_id in ids} or {"reject"}
    return next(iter(found)) if len(found) == 1 else None


@dataclass(frozen=True, slots=True)
class Vote:
    """One approval given to a review that counts them (an ``approval`` audit entry)."""

    who: str
    at: datetime
    channel: str | None
    progress: str  # ``1 of 2`` after this vote
    edited_args: Any  # the edited arguments it approved, if it approved an edit


def votes_of(trail: Sequence[AuditEntry], interrupt_id: str) -> list[Vote]:
    """The approvals given to ``interrupt_id``, oldest first."""
    out = []
    for e in trail:
        if e.event != "approval" or e.interrupt_id != interrupt_id:
            continue
        value = e.value
        decisions = value.get("decisions") if isinstance(value, Mapping) else None
        first = decisions[0] if isinstance(decisions, list) and decisions else value
        edited = first.get("edited_action") if isinstance(first, Mapping) else None
        out.append(
            Vote(
                who=reviewer_id(e.reviewer) or "a caller who gave no name",
                at=e.at,
                channel=e.channel,
                progress=e.kind or "",
                edited_args=edited.get("args") if isinstance(edited, Mapping) else None,
            )
        )
    return out


async def pending_item(review: ReviewAt) -> PendingInterrupt | None:
    """The inbox's item of a pending review (its approvals and expiry), or None."""
    if review.pending is None:
        return None
    page = await review.agent.alist_interrupts(thread_id=review.thread_id, limit=1000)
    return next((i for i in page.items if i.interrupt.id == review.interrupt_id), None)


@dataclass(frozen=True, slots=True)
class ReviewPolicy:
    """What a review page shows of its policy: each counting call's approvals, the expiry,
    and whether the visitor's approval is among those counted."""

    counts: dict[str, Count]  # by tool call id
    expiry: Expiry | None
    mine: list[Count]  # the calls the visitor's approval counts for

    @property
    def waiting(self) -> list[Count]:
        """The calls that still wait for approvals."""
        return [c for c in self.counts.values() if c.decided is None and c.missing]


def review_policy(item: PendingInterrupt | None, visitor_id: str | None) -> ReviewPolicy:
    """The policy view of a pending review's inbox item (empty for None)."""
    if item is None:
        return ReviewPolicy({}, None, [])
    counts = {c.tool_call_id: c for c in counts_of(item.approvals)}
    mine = [c for c in counts.values() if visitor_id is not None and visitor_id in c.approved_by]
    return ReviewPolicy(counts, expiry_of(item.expires_at, _on_expiry(item)), mine)
