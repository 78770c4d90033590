"""Answers recorded without running them: what :meth:`~handrail.Agent.decide` returns.

An answer is an event (SPEC §5, DESIGN "the reviewer side"): recording it validates it
from what the thread and the agent know (rules 5 and 12), appends it with the expected
head (rule 8) and stops. A process that hosts the agent - ``agent.invoke(None,
config)``, the service's worker - then runs what it allows.

When the interrupt was answered first by someone else, :func:`name_first_answer` turns
the store's plain :class:`~handrail.errors.ConflictError` into an
:class:`~handrail.errors.AlreadyAnsweredError` that says by whom, when and through which
channel, read from the audit trail (the log itself).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from handrail.errors import AlreadyAnsweredError, ConflictError, ReviewExpiredError
from handrail.review import reviewer_id
from handrail.review.quorum import CallApprovals
from handrail.types import AuditEntry

__all__ = ["Decision", "name_first_answer"]


@dataclass(frozen=True, slots=True)
class Decision:
    """An answer that was recorded (and not yet run).

    ``answer`` is the answer as validated and saved (for the human-in-the-loop
    middleware ``{"decisions": [...]}`` in canonical form); ``reviewer`` who gave it and
    ``channel`` how it arrived (SPEC rule 11).

    For a review that needs several approvals (rule 14), an answer that does not decide
    every call yet is recorded as a vote: ``answer`` is then None, ``waiting`` is True
    and ``approvals`` says how far each call has come (``str(a)``: ``"1 of 2"``).
    """

    thread_id: str
    interrupt_id: str
    answer: Any
    reviewer: Any
    channel: str
    approvals: tuple[CallApprovals, ...] = ()

    @property
    def waiting(self) -> bool:
        """Whether the review still waits for more approvals (the answer was a vote)."""
        return self.answer is None and bool(self.approvals)


def name_first_answer(exc: ConflictError, interrupt_id: str, trail: Sequence[AuditEntry]) -> ConflictError:
    """The conflict to raise for an answer that lost: named after the answer that won, if found."""
    for entry in trail:
        if entry.event == "answered" and entry.interrupt_id == interrupt_id and entry.channel == "expiry":
            return ReviewExpiredError(
                f"thread {entry.thread_id!r}: interrupt {interrupt_id} expired unanswered; its policy's "
                f"on_expiry decided it at {entry.at.isoformat()}; nothing was saved",
                thread_id=entry.thread_id,
                interrupt_id=interrupt_id,
                expired_at=entry.at,
            )
        if entry.event == "answered" and entry.interrupt_id == interrupt_id:
            who = reviewer_id(entry.reviewer)
            by = f"by {who!r}" if who else "by a caller who gave no reviewer"
            through = f" through {entry.channel}" if entry.channel else ""
            return AlreadyAnsweredError(
                f"thread {entry.thread_id!r}: interrupt {interrupt_id} was already answered {by} at "
                f"{entry.at.isoformat()}{through}; nothing was saved",
                thread_id=entry.thread_id,
                interrupt_id=interrupt_id,
                answered_by=who,
                answered_at=entry.at,
                channel=entry.channel,
            )
    return exc
