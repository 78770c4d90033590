"""What an answer to a review may say (SPEC rule 5), checked before anything is saved.

An answer is checked against what the review asked (its value: the calls, the decisions
each allows) and against the agent's policies now: an edit must name one of the agent's
tools with arguments its schema accepts (and takes: one it would drop is refused), and an
edit into another tool must be one its author could have approved there (the tool's
``allowed_decisions`` include ``approve`` and the author holds one of its ``reviewers``
roles). An edit is kept with its arguments as the schema read them, the values the tool
gets (``"12"`` for a ``float`` is kept as ``12.0``): the answer, the audit and what ran
agree, whatever channel brought it. A refused answer raises a
``ValueError`` subclass (or :class:`~handrail.errors.NotAllowedError` for roles) and
leaves the thread as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from handrail.errors import InvalidDecisionError, short_repr
from handrail.review._who import not_allowed, tool_refusal
from handrail.review.policy import (
    DECISION_TYPES,
    Action,
    ApproveDecision,
    Decision,
    EditDecision,
    HITLRequest,
    Policies,
    RejectDecision,
    RespondDecision,
    ToolApprovalRequest,
)
from handrail.tools import ToolArgumentsError

__all__ = ["ANYONE", "OUTCOME_DECISIONS", "check_answer", "check_outcome_decision", "is_canonical"]

OUTCOME_DECISIONS = ("approve", "respond", "reject")

ANYONE: Any = object()
"""A reviewer whose roles are not checked: for :meth:`validate_resume` called on its own."""

_DECISION_KEYS: dict[str, frozenset[str]] = {
    "approve": frozenset({"type", "grant"}),  # a grant: rule 16 (``grants.py``)
    "edit": frozenset({"type", "edited_action", "editedAction"}),
    "reject": frozenset({"type", "message"}),
    "respond": frozenset({"type", "message"}),
}


def check_answer(
    policies: Policies, value: Any, answer: Any, *, reviewer: Any = ANYONE, interrupt_id: str = ""
) -> Any:
    """The answer to a review with ``value``, checked and in canonical form (rule 5).

    A batched review is answered ``{"decisions": [...]}``, one per action request; a
    per-call or ``outcome_unknown`` review by one decision.
    """
    if isinstance(value, Mapping) and value.get("type") == "outcome_unknown":
        return check_outcome_decision(answer)
    checker = _Checker(policies, reviewer, interrupt_id)
    if isinstance(value, Mapping) and value.get("type") == "tool_approval":
        return checker.single(cast(ToolApprovalRequest, value), answer)
    return {"decisions": checker.batch(cast(HITLRequest, value), answer)}


def check_outcome_decision(answer: Any) -> dict[str, Any]:
    """An answer to an ``outcome_unknown`` review: approve (run it again), respond, reject."""
    if isinstance(answer, Mapping) and "decisions" in answer and "type" not in answer:
        decisions = answer["decisions"]
        if isinstance(decisions, list) and len(decisions) == 1:
            answer = decisions[0]
    if not isinstance(answer, Mapping) or answer.get("type") not in OUTCOME_DECISIONS:
        raise InvalidDecisionError(
            "an outcome_unknown interrupt is answered by one decision: {'type': 'approve'} "
            "(run it again), {'type': 'respond', 'message': result} or {'type': 'reject'}"
        )
    kind = answer["type"]
    unexpected = sorted(str(key) for key in set(answer) - {"type", "message"})
    if unexpected:
        raise InvalidDecisionError(f"the decision ({kind}) has unexpected key(s) {short_repr(unexpected)}")
    message = answer.get("message")
    if kind == "respond" and not isinstance(message, str):
        raise InvalidDecisionError("the decision (respond) needs a string 'message': the tool's result")
    if message is not None and not isinstance(message, str):
        raise InvalidDecisionError(f"the decision ({kind}) 'message' must be a string")
    if kind == "approve":
        return {"type": "approve"}
    if kind == "respond":
        return {"type": "respond", "message": message}  # an empty result is a result
    return {"type": kind, "message": message} if message else {"type": kind}


def is_canonical(decision: Any) -> bool:
    """Whether a decision is in the form :func:`check_answer` gives (a stored answer is)."""
    if not isinstance(decision, dict) or decision.get("type") not in DECISION_TYPES:
        return False
    if "editedAction" in decision or not decision.keys() <= _DECISION_KEYS[decision["type"]]:
        return False
    if decision["type"] == "approve" and "grant" in decision:
        grant = decision["grant"]
        return isinstance(grant, dict) and grant.keys() == {"scope", "args", "ttl", "uses"}
    if decision["type"] == "edit":
        action = decision.get("edited_action")
        return (
            isinstance(action, dict)
            and isinstance(action.get("name"), str)
            and isinstance(action.get("args"), dict)
        )
    return decision["type"] != "respond" or isinstance(decision.get("message"), str)


class _Checker:
    """Checks the decisions of one answer, for one reviewer."""

    __slots__ = ("interrupt_id", "policies", "reviewer")

    def __init__(self, policies: Policies, reviewer: Any, interrupt_id: str) -> None:
        self.policies = policies
        self.reviewer = reviewer
        self.interrupt_id = interrupt_id

    def batch(self, request: HITLRequest, response: Any) -> list[Decision]:
        expected = len(request["action_requests"])
        if not isinstance(response, Mapping) or "decisions" not in response:
            raise InvalidDecisionError(
                "a review answer must be {'decisions': [...]}, one decision per action request, "
                f"got {short_repr(response)}"
            )
        extra = sorted(set(response) - {"decisions"})
        if extra:
            raise InvalidDecisionError(f"a review answer holds only 'decisions'; unexpected key(s) {extra}")
        decisions = response["decisions"]
        if not isinstance(decisions, Sequence) or isinstance(decisions, (str, bytes)):
            raise InvalidDecisionError(f"'decisions' must be a list, got {type(decisions).__name__}")
        if len(decisions) != expected:
            raise InvalidDecisionError(
                f"Number of human decisions ({len(decisions)}) does not match number of hanging "
                f"tool calls ({expected}): expected {expected} decision{'s' if expected != 1 else ''} "
                f"(one per action request, in order), got {len(decisions)}"
            )
        checked: list[Decision] = []
        for i, (decision, action, review) in enumerate(
            zip(decisions, request["action_requests"], request["review_configs"], strict=True)
        ):
            try:
                checked.append(
                    self.decision(
                        decision,
                        f"decision {i + 1} of {expected}",
                        action["name"],
                        list(review["allowed_decisions"]),
                    )
                )
            except InvalidDecisionError as exc:
                exc.decision_index = i
                raise
        return checked

    def single(self, request: ToolApprovalRequest, response: Any) -> Decision:
        if isinstance(response, Mapping) and "decisions" in response and "type" not in response:
            decisions = response["decisions"]
            if not isinstance(decisions, Sequence) or len(decisions) != 1:
                raise InvalidDecisionError(
                    "a per-call review is answered by one decision, e.g. {'type': 'approve'}"
                )
            response = decisions[0]
        return self.decision(response, "the decision", request["name"], list(request["allowed_decisions"]))

    def decision(self, decision: Any, label: str, tool_name: str, allowed: list[str]) -> Decision:
        if not isinstance(decision, Mapping):
            raise InvalidDecisionError(
                f"{label} must be a dict like {{'type': 'approve'}}, got {short_repr(decision)}"
            )
        kind = decision.get("type")
        if not isinstance(kind, str) or kind not in DECISION_TYPES:
            raise InvalidDecisionError(
                f"{label} has unknown type {short_repr(kind)}; expected one of {list(DECISION_TYPES)}"
            )
        if kind not in allowed:
            raise InvalidDecisionError(  # LangChain's words first, then ours
                f"Decision type '{kind}' is not allowed for tool '{tool_name}': "
                f"{label} is {kind!r}, but tool {tool_name!r} allows only {allowed}"
            )
        unexpected = sorted(str(key) for key in set(decision) - _DECISION_KEYS[kind])
        if unexpected:
            raise InvalidDecisionError(f"{label} ({kind}) has unexpected key(s) {short_repr(unexpected)}")
        if kind == "approve":
            if "grant" in decision:
                from handrail.review.grants import check_grant

                return cast(Decision, {"type": "approve", "grant": check_grant(decision["grant"], label)})
            return ApproveDecision(type="approve")
        if kind in ("reject", "respond"):
            message = decision.get("message")
            if kind == "respond" and message is None:
                raise InvalidDecisionError(f"{label} (respond) needs a 'message': the tool's result")
            if message is not None and not isinstance(message, str):
                raise InvalidDecisionError(f"{label} ({kind}) 'message' must be a string")
            if kind == "respond":
                return RespondDecision(type="respond", message=cast(str, message))
            return (
                RejectDecision(type="reject", message=message) if message else RejectDecision(type="reject")
            )
        return EditDecision(type="edit", edited_action=self.edit(decision, label, tool_name))

    def edit(self, decision: Mapping[str, Any], label: str, tool_name: str) -> Action:
        if "edited_action" in decision and "editedAction" in decision:
            raise InvalidDecisionError(f"{label} (edit) gives both 'edited_action' and 'editedAction'")
        action = decision.get("edited_action", decision.get("editedAction"))
        if not isinstance(action, Mapping):
            raise InvalidDecisionError(
                f"{label} (edit) needs 'edited_action': {{'name': tool, 'args': {{...}}}}"
            )
        unexpected = sorted(str(key) for key in set(action) - {"name", "args"})
        if unexpected:
            raise InvalidDecisionError(
                f"{label} (edit) edited_action has unexpected key(s) {short_repr(unexpected)}"
            )
        name, args = action.get("name"), action.get("args")
        if not isinstance(name, str) or not isinstance(args, Mapping):
            raise InvalidDecisionError(
                f"{label} (edit) edited_action needs a string 'name' and a dict 'args'"
            )
        tools = self.policies.tools
        target = tools.get(name)
        if target is None:
            raise InvalidDecisionError(
                f"Reviewer edited tool call to {short_repr(name)}, which is not an available tool: "
                f"{label} edits the call into {short_repr(name)}, which is not one of the agent's tools "
                f"{sorted(tools)}"
            )
        if name != tool_name:
            self._may_run_instead(label, tool_name, name)
        try:
            values = target.validate_args(args)
        except ToolArgumentsError as exc:
            raise InvalidDecisionError(f"{label} (edit): {exc}") from None
        read = target.args_as_read(args, values)  # what the tool gets is what is recorded
        ignored = sorted(str(key) for key in set(args) - set(read))
        if ignored:  # a schema that drops them would run something else than the reviewer wrote
            raise InvalidDecisionError(
                f"{label} (edit): {name!r} takes no argument(s) {short_repr(ignored)}; "
                f"it takes {sorted(target.json_schema.get('properties', {}))}"
            )
        return Action(name=name, args=read)

    def _may_run_instead(self, label: str, tool_name: str, name: str) -> None:
        """An edit into another tool is a call to that tool its author approves (rule 19)."""
        policy = self.policies.by_tool.get(name)
        if policy is None:
            return  # an ungated tool runs without review
        if "approve" not in policy.allowed:
            raise InvalidDecisionError(
                f"{label} turns {tool_name!r} into {name!r}, whose policy does not allow "
                f"'approve' (allowed: {list(policy.allowed)})"
            )
        if self.reviewer is ANYONE:
            return
        reason = tool_refusal(self.policies, name, self.reviewer)
        if reason is not None:
            raise not_allowed(
                self.policies,
                self.interrupt_id,
                f"{label} edits the call into {name!r}: {reason}",
                self.reviewer,
                [name],
            )
