"""What a checked answer becomes in the log: an answer, a vote, or a refusal (rules 13-15).

An answer that :func:`rules.start_events` has authorized (rule 12) and checked (rule 5)
is held to the terms its review was asked under (``handrail.review.terms``) before
anything is saved:

Rule 13 - Self-approval: where a call's terms say ``self_approval: false``, whoever
    started the run (``ThreadFold.started_by``) may reject or respond to it, never
    approve or edit it; nor may an answer that names nobody, who could be that starter.
Rule 14 - Approvals counted: a review whose terms need more than one approval for a
    call takes each answer as a vote (an ``approval`` event, ``handrail.review.quorum``);
    a vote must name its reviewer. When the votes have decided every call, a ``resume``
    event with ``quorum: true`` holds what they decided, after the last vote.
Rule 15 - Expiry: a review whose expiry has passed cannot be answered
    (:class:`~handrail.errors.ReviewExpiredError`, naming when it expired); the expiry
    resolves it (:func:`expiry_events`: by ``invoke(None, config)``, the sweeper).

A review may also be withdrawn by whoever asked for it (:class:`Withdrawal`: an MCP
client that cancelled its call, ``handrail.mcp``): every call it holds, decided by votes
or not, is rejected with the reason given, channel and withdrawer recorded. A withdrawal
can only reject, so it needs no reviewer's role; it never makes anything run.

The gate checks the same terms again where the call runs (``handrail.review._outcome``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from handrail.errors import InvalidDecisionError, NotAllowedError, ReviewExpiredError
from handrail.review import check_answer, reviewer_id, terms_of
from handrail.review.grants import grants_given
from handrail.review.quorum import count_votes, decisions_of, settled_answer, vote_as_cast
from handrail.review.terms import calls_asked, needs_count
from handrail.runtime._fold import ThreadFold
from handrail.runtime._pending import InterruptRecord
from handrail.runtime.events import Event

if TYPE_CHECKING:
    from handrail.runtime.spec import AgentSpec

__all__ = [
    "CLOCK",
    "Withdrawal",
    "answer_events",
    "expired_reviews",
    "expiry_events",
    "now",
    "refuse_expired",
    "withdrawal_events",
]

CLOCK: Callable[[], float] = time.time
"""The clock expiry is read by (seconds since the epoch): a test may set it, to be an
hour later without waiting an hour."""


def now() -> float:
    """The time by :data:`CLOCK`."""
    return CLOCK()


def refuse_expired(
    fold: ThreadFold, pending: Mapping[str, InterruptRecord], answered: list[str], at: float | None = None
) -> None:
    """Rule 15: raise :class:`ReviewExpiredError` for the first answered review that has expired
    (at ``at``, or now)."""
    if all(pending[interrupt_id].terms is None for interrupt_id in answered):
        return  # no review of these has terms, so none expires
    at = now() if at is None else at
    for interrupt_id in answered:
        expiry = pending[interrupt_id].expires_at
        if expiry is not None and at >= expiry:
            when = datetime.fromtimestamp(expiry, UTC)
            raise ReviewExpiredError(
                f"thread {fold.thread_id!r}: interrupt {interrupt_id} expired unanswered at "
                f"{when.isoformat()} and can no longer be answered; its policy's on_expiry decides it; "
                "nothing was saved",
                thread_id=fold.thread_id,
                interrupt_id=interrupt_id,
                expired_at=when,
            )


def answer_events(
    spec: AgentSpec,
    fold: ThreadFold,
    pending: Mapping[str, InterruptRecord],
    checked: Mapping[str, Any],
    reviewer: Any,
    channel: str,
) -> list[Event]:
    """The events that record ``checked`` answers (rules 11, 13, 14), or a refusal."""
    resolved: dict[str, Any] = {}
    votes: list[Event] = []
    quorum = False
    granting = False
    for interrupt_id, answer in checked.items():
        record = pending[interrupt_id]
        if _carries_grant(record, answer):
            _check_grants(spec, record, answer, reviewer)
            granting = True
        if record.terms is None or record.kind != "interrupt":
            resolved[interrupt_id] = answer
            continue
        _check_self(fold, record, answer, reviewer)
        if not needs_count(record.terms):
            resolved[interrupt_id] = answer
            continue
        cast, settled = _vote(spec, fold, record, answer, reviewer)
        votes.append(
            Event("approval", {"interrupt": interrupt_id, "answer": cast, **_who(reviewer, channel)})
        )
        if settled is not None:
            resolved[interrupt_id] = settled
            quorum = True
    if not resolved:
        return votes
    resume = _resume(resolved, reviewer, channel, quorum=quorum)
    given = [
        grant
        for interrupt_id, answer in (resolved.items() if granting else ())
        for grant in grants_given(fold.thread_id, interrupt_id, pending[interrupt_id].value, answer)
        if pending[interrupt_id].source == spec.policies.source
    ]
    if given:
        resume.data["grants"] = given  # rule 16: born with this answer (``handrail.review.grants``)
    return [*votes, resume]


def _resume(answers: dict[str, Any], reviewer: Any, channel: str, *, quorum: bool = False) -> Event:
    data: dict[str, Any] = {"answers": answers}
    if reviewer is not None:
        data["reviewer"] = reviewer
    data["channel"] = channel  # rule 11: who, through which channel (the event has the time)
    if quorum:
        data["quorum"] = True
    return Event("resume", data)


def _who(reviewer: Any, channel: str) -> dict[str, Any]:
    return {"reviewer": reviewer, "channel": channel} if reviewer is not None else {"channel": channel}


def _carries_grant(record: InterruptRecord, answer: Any) -> bool:
    """Whether any decision of ``answer`` carries a grant (most answers: none)."""
    if record.kind != "interrupt":
        return False
    return any(isinstance(d, Mapping) and "grant" in d for d in decisions_of(record.value, answer))


def _check_grants(spec: AgentSpec, record: InterruptRecord, answer: Any, reviewer: Any) -> None:
    """Rule 16 (``handrail.review.grants`` G1): an approval grants only where its review may."""
    if record.kind != "interrupt":
        return
    if record.source is None or record.source != spec.policies.source:
        raise InvalidDecisionError(
            f"interrupt {record.id}: this review was not asked by the agent's review policy "
            f"({spec.policies.source or 'none'}), so an approval of it cannot grant; nothing was saved",
            interrupt_id=record.id,
        )
    counting = needs_count(record.terms)
    for (call_id, name, _), decision in zip(
        calls_asked(record.value), decisions_of(record.value, answer), strict=False
    ):
        if not isinstance(decision, Mapping) or "grant" not in decision:
            continue
        if counting:
            reason = (
                f"a review that needs several approvals cannot grant: one reviewer may not stand "
                f"in for the approvals {name!r} needs"
            )
        elif not terms_of(record.terms, call_id).grantable:
            reason = (
                f"tool {name!r} is not grantable (its policy has grantable: False): approve without a grant"
            )
        elif reviewer_id(reviewer) is None:
            reason = (
                "a grant needs a named giver: pass config['configurable']['reviewer'] = "
                "{'id': ..., 'roles': [...]}"
            )
        else:
            continue
        raise InvalidDecisionError(
            f"interrupt {record.id}: {reason}; nothing was saved", interrupt_id=record.id
        )


def _check_self(fold: ThreadFold, record: InterruptRecord, answer: Any, reviewer: Any) -> None:
    """Rule 13: the run's starter (or an answer naming nobody) may not approve or edit a
    call whose terms forbid self-approval."""
    who = reviewer_id(reviewer)
    for (call_id, name, _), decision in zip(
        calls_asked(record.value), decisions_of(record.value, answer), strict=False
    ):
        kind = decision.get("type") if isinstance(decision, Mapping) else None
        if kind not in ("approve", "edit") or terms_of(record.terms, call_id).self_approval:
            continue
        if who is None:
            reason = (
                f"tool {name!r} may not be approved by whoever started the run, and the answer names no "
                "reviewer: pass config['configurable']['reviewer'] = {'id': ..., 'roles': [...]}"
            )
        elif who == fold.started_by:
            reason = (
                f"reviewer {who!r} started this run, and tool {name!r} does not allow self-approval: "
                f"{who!r} may reject its call or respond to it, not {kind} it; another reviewer must"
            )
        else:
            continue
        raise NotAllowedError(
            f"interrupt {record.id}: {reason}; nothing was saved", interrupt_id=record.id, reviewer=who
        )


def _vote(
    spec: AgentSpec, fold: ThreadFold, record: InterruptRecord, answer: Any, reviewer: Any
) -> tuple[Any, Any]:
    """Rule 14: the vote ``answer`` casts, and the review's answer when it decides the last call."""
    who = reviewer_id(reviewer)
    if who is None:
        raise NotAllowedError(
            f"interrupt {record.id}: this review needs approvals from several different reviewers, and "
            "the answer names no reviewer: pass config['configurable']['reviewer'] = {'id': ..., "
            "'roles': [...]}; nothing was saved",
            interrupt_id=record.id,
        )
    earlier = fold.votes.get(record.id, [])
    counts = count_votes(record.value, record.terms, earlier)
    cast = vote_as_cast(record.value, answer, counts)
    if cast is not answer:  # an approval of an edited call: checked as the edit it is
        cast = check_answer(spec.policies, record.value, cast, reviewer=reviewer, interrupt_id=record.id)
    after = count_votes(record.value, record.terms, [*earlier, (cast, reviewer)])
    if any(count.decision is None for count in after):
        return cast, None
    return cast, settled_answer(record.value, after)


def expired_reviews(fold: ThreadFold, at: float | None = None) -> list[InterruptRecord]:
    """The pending reviews of ``fold`` whose expiry has passed (rule 15)."""
    at = now() if at is None else at
    return [r for r in fold.pending.values() if r.expires_at is not None and at >= r.expires_at]


def expiry_events(fold: ThreadFold, records: list[InterruptRecord]) -> list[Event]:
    """The ``resume`` that resolves lapsed reviews by their expiry: channel ``expiry``, no
    reviewer; each call the votes have not decided takes its terms' ``on_expiry``."""
    answers: dict[str, Any] = {}
    expired: list[str] = []
    for record in records:
        counts = count_votes(record.value, record.terms, fold.votes.get(record.id, []))
        decided = list(counts)
        for i, count in enumerate(counts):
            if count.decision is None:
                kind = terms_of(record.terms, count.call_id).on_expiry
                decided[i] = count._replace(decision={"type": kind})
                expired.append(count.call_id)
        answers[record.id] = settled_answer(record.value, decided)
    if not answers:
        return []
    return [Event("resume", {"answers": answers, "channel": "expiry", "expired": expired})]


@dataclass(frozen=True, slots=True)
class Withdrawal:
    """A run's input that withdraws pending reviews: every call of each is rejected with
    ``message`` (``interrupt_ids`` empty: every pending review of the gate's own asking).
    ``by`` is who withdrew (recorded as the answer's reviewer), ``channel`` how."""

    message: str
    interrupt_ids: tuple[str, ...] = ()
    by: Any = None
    channel: str = "withdrawn"


def withdrawal_events(pending: Mapping[str, InterruptRecord], withdrawal: Withdrawal) -> list[Event]:
    """The ``resume`` that withdraws the reviews ``withdrawal`` names (those still pending)."""
    chosen = withdrawal.interrupt_ids or tuple(pending)
    answers: dict[str, Any] = {}
    for interrupt_id in chosen:
        record = pending.get(interrupt_id)
        if record is None or record.kind != "interrupt":
            continue
        counts = count_votes(record.value, record.terms, [])
        rejected = [c._replace(decision={"type": "reject", "message": withdrawal.message}) for c in counts]
        answers[record.id] = settled_answer(record.value, rejected)
    if not answers:
        return []
    data: dict[str, Any] = {"answers": answers}
    if withdrawal.by is not None:
        data["reviewer"] = withdrawal.by
    data["channel"] = withdrawal.channel
    data["withdrawn"] = True
    return [Event("resume", data)]
