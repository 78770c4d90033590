"""What input and a state update may write into a thread's state (SPEC rules 19-20).

Input, ``Command(update=...)`` and ``update_state`` all pass :func:`coerce_update`
before anything is saved; a refused update changes nothing.

Rule 19 - No input writes a decision. An update may not write a private state key: those
    belong to the agent's middleware, and no decision lives in the state (answers are
    events in the log). Nor may a ToolMessage by update stand in for a call the gate
    holds: one under review, or one a reviewer decided that has not run yet. Which calls
    run is the gate's to say, where tools run (``handrail.review``, ``_steps.py``).
Rule 20 - An update may not take a finished call's result away (remove it, or the
    messages after its call), which would make the call due again: a call that finished
    never runs again on its branch.

An update checked against the thread's state also may not put a message between an AI
message and the results of its tool calls: every provider refuses that order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from handrail.errors import InvalidInputError
from handrail.messages import AIMessage, ToolMessage, coerce_messages, merge_messages_into
from handrail.runtime._fold import ThreadFold
from handrail.runtime._pending import pending_tool_calls

if TYPE_CHECKING:
    from handrail.runtime.spec import AgentSpec

__all__ = ["coerce_update"]


def coerce_update(
    spec: AgentSpec, values: Any, *, where: str, fold: ThreadFold | None = None
) -> dict[str, Any]:
    """Check a state update's keys and coerce its messages.

    With ``fold``, also refuse messages that would land between an AI message and the
    results of its tool calls: every provider rejects that order.
    """
    if not isinstance(values, Mapping):
        raise InvalidInputError(f"{where} must be a dict of state keys, got {type(values).__name__}")
    private = sorted(str(key) for key in values if not isinstance(key, str) or key.startswith("_"))
    if private:
        raise InvalidInputError(
            f"{where} may not write private state key(s) {private}: they belong to the agent's "
            "middleware (and no decision lives in the state: answers are events in the log)"
        )
    unknown = sorted(key for key in values if key not in spec.state_keys)
    if unknown:
        public = sorted(key for key in spec.state_keys if not key.startswith("_"))
        raise InvalidInputError(f"{where} has unknown state key(s) {unknown}; the agent's state has {public}")
    out = dict(values)
    if "messages" in out:
        try:
            coerced = coerce_messages(out["messages"], where=f"{where}['messages']")
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None
        out["messages"] = [m if m.id is not None else _with_id(m) for m in coerced]
        if fold is not None:
            messages = list(fold.messages)
            merge_messages_into(messages, {m.id: i for i, m in enumerate(messages) if m.id}, out["messages"])
            _check_tool_results_follow_calls(messages, where)
            _check_results_by_update(fold, out["messages"], where)
            _check_results_stay(fold, messages, where)
    return out


def _check_results_by_update(fold: ThreadFold, update: list[Any], where: str) -> None:
    """Rule 19: a ToolMessage by update may not stand in for a call the gate holds: one
    under review, or one a reviewer decided that has not run yet."""
    _, calls = fold.pending_calls()
    due = {str(call.get("id")) for call in calls}
    held = _calls_under_review(fold)
    for message in update:
        if not isinstance(message, ToolMessage) or message.tool_call_id not in due:
            continue
        call_id = message.tool_call_id
        if call_id in held:
            raise InvalidInputError(
                f"{where} gives a result for tool call {call_id!r}, which is waiting for review "
                f"(interrupt {held[call_id]}); answer the review instead (a 'respond' decision "
                "gives the call a result)"
            )
        if call_id in fold.decided or call_id in fold.used:
            raise InvalidInputError(
                f"{where} gives a result for tool call {call_id!r}, which a reviewer has decided and "
                "which has not run yet; the decision is carried out by the next run"
            )


def _calls_under_review(fold: ThreadFold) -> dict[str, str]:
    """The tool call ids the pending reviews ask about, and the review asking."""
    held: dict[str, str] = {}
    for record in fold.pending.values():
        value = record.value
        if isinstance(value, Mapping):
            requests = value.get("action_requests")
            if isinstance(requests, list):
                for request in requests:
                    if isinstance(request, Mapping) and isinstance(request.get("tool_call_id"), str):
                        held.setdefault(request["tool_call_id"], record.id)
            elif isinstance(value.get("tool_call_id"), str):
                held.setdefault(value["tool_call_id"], record.id)
        if record.step == "tools":
            held.setdefault(record.task, record.id)
    return held


def _check_results_stay(fold: ThreadFold, messages: list[Any], where: str) -> None:
    """Rule 20: a call that has its result is never due again on its branch, so an update
    may not take a result away (remove it, or the messages after its call)."""
    ai, calls = pending_tool_calls(messages)
    position = fold.position_of(ai.id) if ai is not None and ai.id is not None else None
    if position is None:
        return
    before = fold.messages
    finished = {m.tool_call_id for m in before[position + 1 :] if isinstance(m, ToolMessage)}
    again = [str(call.get("id")) for call in calls if call.get("id") in finished]
    if again:
        raise InvalidInputError(
            f"{where} would make tool call(s) {', '.join(again)} due again, but they already have "
            "their results; a call that finished never runs again on its thread (fork from an "
            "earlier checkpoint to run it again, with a new review)"
        )


def _check_tool_results_follow_calls(messages: list[Any], where: str) -> None:
    last_ai = max((i for i, m in enumerate(messages) if isinstance(m, AIMessage)), default=None)
    if last_ai is None:
        return
    ai = messages[last_ai]
    assert isinstance(ai, AIMessage)
    after = messages[last_ai + 1 :]
    answered = {m.tool_call_id for m in after if isinstance(m, ToolMessage)}
    unanswered = [tc["id"] for tc in ai.tool_calls if tc["id"] not in answered]
    stray = [m for m in after if not isinstance(m, ToolMessage)]
    if unanswered and stray:
        raise InvalidInputError(
            f"{where} would put a {stray[0].type} message after tool calls that have no results yet "
            f"({', '.join(str(i) for i in unanswered)}); providers refuse that order. Answer the "
            "calls first (or add their ToolMessages in the same update), or edit the AI message "
            "itself (same id)"
        )


def _with_id(message: Any) -> Any:
    from dataclasses import replace

    from handrail.messages import new_id

    return replace(message, id=new_id())
