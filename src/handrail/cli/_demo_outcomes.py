"""What became of each tool call of a demo thread, read from the thread's audit trail.

The summary the demo prints ("What ran") must say what the store recorded, not what this
process happened to decide: a thread resumed in a new process, or answered by another
reviewer first, was decided elsewhere. The audit trail (``Agent.get_audit_trail``) holds
every review request, every answer and every tool start with the arguments that actually
ran, so it is the one source for the review column and the arguments column alike.

Private: :mod:`handrail.cli.demo` re-exports :class:`ToolOutcome`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from handrail.messages import AIMessage, BaseMessage, ToolMessage
from handrail.types import AuditEntry

__all__ = ["ToolOutcome", "outcomes_from_trail"]

_LABELS = {"approve": "approved", "edit": "edited", "reject": "rejected", "respond": "answered"}


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """One tool call of the run and what became of it.

    ``review`` is ``"approved"``, ``"edited"``, ``"rejected"``, ``"answered"`` (the person
    replied in the tool's place) or ``"not reviewed"``, as the thread's audit trail records
    it, whichever process or reviewer decided. ``final_args`` are the arguments it ran
    with (after any edit), None if it did not run. ``message`` is what the reviewer wrote:
    the reason of a rejection (None when none was given) or the reply given in the tool's place.
    """

    name: str
    proposed_args: dict[str, Any]
    final_args: dict[str, Any] | None
    review: str
    result: str
    status: str
    message: str | None = None

    @property
    def ran(self) -> bool:
        """Whether the tool was executed."""
        return self.final_args is not None


def outcomes_from_trail(messages: Sequence[BaseMessage], trail: Iterable[AuditEntry]) -> list[ToolOutcome]:
    """The outcome of every tool call in ``messages`` that has a result, in call order.

    ``trail`` is the thread's audit trail: its answers give the review of each call, its
    ``tool_started`` entries the arguments each call ran with.
    """
    entries = list(trail)
    decisions = _decisions_by_call(entries)
    ran_with = {
        entry.tool_call_id: dict(entry.args or {})
        for entry in entries
        if entry.event == "tool_started" and entry.tool_call_id
    }
    results = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    outcomes = []
    for message in messages:
        if not isinstance(message, AIMessage):
            continue
        for call in message.tool_calls:
            call_id = str(call["id"])
            reply = results.get(call_id)
            if reply is None:
                continue
            decision = decisions.get(call_id)
            review = _LABELS.get(str(decision.get("type")), "answered") if decision else "not reviewed"
            outcomes.append(
                ToolOutcome(
                    name=call["name"],
                    proposed_args=dict(call["args"]),
                    final_args=ran_with.get(call_id),
                    review=review,
                    result=reply.text,
                    status=reply.status,
                    message=_message_of(decision),
                )
            )
    return outcomes


def _message_of(decision: Mapping[str, Any] | None) -> str | None:
    message = decision.get("message") if decision else None
    return message if isinstance(message, str) and message.strip() else None


def _decisions_by_call(entries: Sequence[AuditEntry]) -> dict[str, Mapping[str, Any]]:
    """The last decision recorded for each tool call id, from the requests and their answers."""
    asked: dict[str, list[str]] = {}
    batched: dict[str, bool] = {}
    for entry in entries:
        if entry.event != "review_requested" or entry.interrupt_id is None:
            continue
        value = entry.value
        if isinstance(value, Mapping) and isinstance(value.get("action_requests"), list):
            asked[entry.interrupt_id] = [str(r.get("tool_call_id", "")) for r in value["action_requests"]]
            batched[entry.interrupt_id] = True
        elif isinstance(value, Mapping) and value.get("tool_call_id"):
            asked[entry.interrupt_id] = [str(value["tool_call_id"])]
            batched[entry.interrupt_id] = False
    found: dict[str, Mapping[str, Any]] = {}
    for entry in entries:
        if entry.event != "answered" or entry.interrupt_id not in asked:
            continue
        answer = entry.value
        if batched[entry.interrupt_id]:
            given = answer.get("decisions", []) if isinstance(answer, Mapping) else []
        else:
            given = [answer]
        for call_id, decision in zip(asked[entry.interrupt_id], given, strict=False):
            if isinstance(decision, Mapping):
                found[call_id] = decision
    return found
