"""Counting approvals (SPEC rule 14): a call runs after N different reviewers approved it.

A review whose terms need more than one approval for some call (``terms.needs_count``)
takes its answers as votes: each is checked as any answer is (rules 5, 12, 13) and
saved as an ``approval`` event; the review stays pending until every call it asks about
is decided, and then one ``resume`` event holds the decision of each call (the answer
the gate reads, ``"quorum": true``). How a call is decided, vote by vote:

- A reject or a respond decides it at once: one reject ends it.
- An approval counts for the action the call stands at: the call as proposed, or the
  last edit made to it. The vote is saved as what it approved - an approval of an
  edited call is saved as an edit to the same action - so each vote names the exact
  tool and arguments it was for (the digest the gate compares).
- An edit to another action is a new action: its count starts again, with its author's
  approval. An edit to the action the call stands at is an approval of it.
- The same reviewer counts once per action, however often they vote.
- Once the action has as many approvers as the call's terms need, the call is decided:
  ``approve`` (the call as proposed) or ``edit`` (the action).

A call already decided takes no more votes: a later vote's decision for it is ignored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from handrail.review._outcome import call_digest
from handrail.review._who import reviewer_id
from handrail.review.terms import calls_asked, terms_of

__all__ = [
    "CallApprovals",
    "Count",
    "count_votes",
    "decisions_of",
    "progress",
    "settled_answer",
    "vote_as_cast",
]


class Count(NamedTuple):
    """Where one call of a review stands: the ``action`` (``{"name", "args"}``) the
    approvals count for, whether it is an ``edited`` one, who approved it (``approvers``,
    as recorded), how many the call ``needs``, and its ``decision`` once decided."""

    call_id: str
    needs: int
    action: dict[str, Any]
    edited: bool
    approvers: tuple[Any, ...]
    decision: dict[str, Any] | None

    @property
    def digest(self) -> str:
        """The digest of the action the approvals are for (``outcome.call_digest``)."""
        return call_digest(self.action["name"], self.action["args"])

    @property
    def approver_ids(self) -> list[str]:
        """The ids of who approved, in the order they did."""
        return [who for who in (reviewer_id(r) for r in self.approvers) if who is not None]


def decisions_of(value: Any, answer: Any) -> list[Any]:
    """The decision an answer gives each call of the review, in the review's order."""
    if isinstance(value, Mapping) and "action_requests" in value:
        decisions = answer.get("decisions") if isinstance(answer, Mapping) else None
        return list(decisions) if isinstance(decisions, list) else []
    return [answer]


def count_votes(value: Any, terms: Any, votes: Sequence[tuple[Any, Any]]) -> list[Count]:
    """Where each call of a review with ``value`` stands after ``votes``
    (``(answer, reviewer)`` in the order saved)."""
    counts = [
        Count(call_id, terms_of(terms, call_id).approvals, {"name": name, "args": args}, False, (), None)
        for call_id, name, args in calls_asked(value)
    ]
    for answer, reviewer in votes:
        for i, decision in enumerate(decisions_of(value, answer)[: len(counts)]):
            counts[i] = _vote(counts[i], decision, reviewer)
    return counts


def _vote(count: Count, decision: Any, reviewer: Any) -> Count:
    if count.decision is not None or not isinstance(decision, Mapping):
        return count
    kind = decision.get("type")
    if kind in ("reject", "respond"):
        return count._replace(decision=dict(decision))
    if kind == "approve":
        count = _approve(count, reviewer)
    elif kind == "edit":
        action = decision.get("edited_action")
        if not isinstance(action, Mapping):
            return count
        if call_digest(str(action.get("name")), action.get("args")) == count.digest:
            count = _approve(count, reviewer)
        else:
            count = count._replace(action=dict(action), edited=True, approvers=(reviewer,))
    else:
        return count
    if len({reviewer_id(r) for r in count.approvers}) >= count.needs:
        settled = {"type": "edit", "edited_action": count.action} if count.edited else {"type": "approve"}
        count = count._replace(decision=settled)
    return count


def _approve(count: Count, reviewer: Any) -> Count:
    who = reviewer_id(reviewer)
    if any(reviewer_id(r) == who for r in count.approvers):
        return count
    return count._replace(approvers=(*count.approvers, reviewer))


def vote_as_cast(value: Any, answer: Any, counts: Sequence[Count]) -> Any:
    """An answer as the vote it casts: an approval of a call that stands at an edit is an
    edit to that same action (so the vote names what it approved)."""
    decisions = decisions_of(value, answer)
    changed = False
    out = []
    for decision, count in zip(decisions, counts, strict=False):
        if (
            isinstance(decision, Mapping)
            and decision.get("type") == "approve"
            and count.edited
            and count.decision is None
        ):
            decision = {"type": "edit", "edited_action": count.action}
            changed = True
        out.append(decision)
    if not changed:
        return answer
    if isinstance(value, Mapping) and "action_requests" in value:
        return {"decisions": out}
    return out[0]


def settled_answer(value: Any, counts: Sequence[Count]) -> Any:
    """The answer of a review whose calls are all decided, in the review's own form."""
    decisions = [c.decision for c in counts]
    if isinstance(value, Mapping) and "action_requests" in value:
        return {"decisions": decisions}
    return decisions[0]


@dataclass(frozen=True, slots=True)
class CallApprovals:
    """How far one call of a review that counts approvals has come (rule 14).

    ``approved_by`` are the ids of the reviewers who approved ``action`` (the call as
    proposed, or the edit it stands at: ``edited``), ``needed`` how many it takes;
    ``decision`` is set once the call is decided (by the count, or one reject).
    ``str()`` gives ``"1 of 2"``.

    Example::

        decision = agent.decide(thread, review_id, APPROVE, reviewer=alice)
        [str(a) for a in decision.approvals]     # ['1 of 2']
    """

    tool_call_id: str
    needed: int
    approved_by: tuple[str, ...]
    action: Mapping[str, Any]
    edited: bool
    decision: Mapping[str, Any] | None

    def __str__(self) -> str:
        return f"{len(self.approved_by)} of {self.needed}"

    def as_json(self) -> dict[str, Any]:
        """The JSON the service and the CLI show."""
        return {
            "tool_call_id": self.tool_call_id,
            "approvals": len(self.approved_by),
            "needed": self.needed,
            "approved_by": list(self.approved_by),
            "action": dict(self.action),
            "edited": self.edited,
            "decided": dict(self.decision) if self.decision is not None else None,
        }


def progress(value: Any, terms: Any, votes: Sequence[tuple[Any, Any]]) -> tuple[CallApprovals, ...]:
    """Each call's :class:`CallApprovals` after ``votes``."""
    return tuple(
        CallApprovals(c.call_id, c.needs, tuple(c.approver_ids), c.action, c.edited, c.decision)
        for c in count_votes(value, terms, votes)
    )
