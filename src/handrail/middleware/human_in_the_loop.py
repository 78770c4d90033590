"""HumanInTheLoopMiddleware: pause tool calls for a person to approve, edit, reject or answer.

How it works (SPEC §3 and rules 1-5):

* **Batched mode** (the default). ``after_model`` looks at the model's tool calls; the
  ones whose policy gates them (and whose ``when`` predicate, if any, is true) go into
  one interrupt whose value is a :class:`HITLRequest`, in call order. The answer is
  ``{"decisions": [...]}``, one decision per action request. The decisions are kept in
  the private state key ``_hitl_decisions``; ``wrap_tool_call`` applies them when the
  tools step runs each call, so every call ends with exactly one ``ToolMessage`` in
  call order whatever was decided.
* **Per-call mode**. ``wrap_tool_call`` raises one interrupt per gated call (value
  ``{"type": "tool_approval", ...}``), each answered by one decision; calls that are
  not gated run at once.
* Answers are checked by :meth:`validate_resume` before anything is saved: a bad
  answer raises :class:`~handrail.errors.InvalidDecisionError` and leaves the thread
  as it was.

The decisions:

``approve``  the call runs as proposed.
``edit``     ``edited_action`` runs instead; the model's ``AIMessage`` keeps its
             original call, and the result starts with the edit notice and says what ran.
``reject``   the tool does not run; an error ``ToolMessage`` tells the model why.
``respond``  the tool does not run; the person's ``message`` is the tool's result.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict, cast

import orjson

from handrail.errors import ConfigurationError, InvalidDecisionError, short_repr
from handrail.messages import AIMessage, ToolCall, ToolMessage
from handrail.middleware.types import (
    AgentMiddleware,
    AsyncToolHandler,
    ResumeContext,
    ToolCallRequest,
    ToolHandler,
)
from handrail.runtime.context import Runtime, current_task, interrupt
from handrail.tools import Tool, ToolArgumentsError

__all__ = [
    "DECISION_TYPES",
    "Action",
    "ActionRequest",
    "ApproveDecision",
    "Decision",
    "DecisionType",
    "EditDecision",
    "HITLRequest",
    "HITLResponse",
    "HumanInTheLoopMiddleware",
    "InterruptOnConfig",
    "RejectDecision",
    "RespondDecision",
    "ReviewConfig",
    "ToolApprovalRequest",
    "reject_message",
]

DecisionType = Literal["approve", "edit", "reject", "respond"]
DECISION_TYPES: tuple[DecisionType, ...] = ("approve", "edit", "reject", "respond")

DEFAULT_DESCRIPTION_PREFIX = "Tool execution requires approval"
DEFAULT_EDIT_NOTICE = (
    "Note: a human reviewer replaced this tool call before it ran. The call recorded in "
    "your message is the one you produced, not the one that executed. This was "
    "intentional and authorized. Do not re-issue your original call."
)
"""LangChain's default edit notice, word for word, so that a model reads the same text."""

DECISION_SOURCE = "hitl_interrupt_decision"
"""``additional_kwargs["lc_source"]`` of the ToolMessages that reject and respond decisions make."""


class Action(TypedDict):
    """A tool call as a person may rewrite it: the tool's name and its arguments."""

    name: str
    args: dict[str, Any]


class ActionRequest(TypedDict):
    """One call awaiting review."""

    name: str
    args: dict[str, Any]
    description: str
    tool_call_id: str


class ReviewConfig(TypedDict):
    """What the reviewer may decide for one action request."""

    action_name: str
    allowed_decisions: list[DecisionType]
    args_schema: NotRequired[dict[str, Any]]


class HITLRequest(TypedDict):
    """The value of a batched interrupt: the calls and, in parallel, their review configs."""

    action_requests: list[ActionRequest]
    review_configs: list[ReviewConfig]


class ToolApprovalRequest(TypedDict):
    """The value of a per-call interrupt."""

    type: Literal["tool_approval"]
    tool_call_id: str
    name: str
    args: dict[str, Any]
    description: str
    allowed_decisions: list[DecisionType]


class ApproveDecision(TypedDict):
    """Run the call as proposed."""

    type: Literal["approve"]


class EditDecision(TypedDict):
    """Run ``edited_action`` instead of the proposed call."""

    type: Literal["edit"]
    edited_action: Action


class RejectDecision(TypedDict):
    """Do not run the call; ``message`` tells the model why."""

    type: Literal["reject"]
    message: NotRequired[str]


class RespondDecision(TypedDict):
    """Do not run the call; ``message`` is its result."""

    type: Literal["respond"]
    message: str


Decision = ApproveDecision | EditDecision | RejectDecision | RespondDecision


class HITLResponse(TypedDict):
    """The answer to a batched interrupt: one decision per action request, in order."""

    decisions: list[Decision]


DescriptionFactory = Callable[[ToolCall, Mapping[str, Any], Runtime], str]


class InterruptOnConfig(TypedDict, total=False):
    """The review policy of one tool.

    ``allowed_decisions`` (required, non-empty); ``description`` (a string or a
    callable ``(tool_call, state, runtime) -> str``); ``when`` (``request -> bool``: review
    only when true); ``args_schema`` (the JSON schema shown to reviewers; defaults to the
    tool's own); ``reviewers`` (the roles that may decide, SPEC rule 12; default: any
    reviewer). The other SPEC §5.1 keys (``required_approvals``, ``expires_after``, ...)
    are refused with a ConfigurationError until a version enforces them.
    """

    allowed_decisions: list[DecisionType]
    description: str | DescriptionFactory
    when: Callable[[ToolCallRequest], bool]
    args_schema: dict[str, Any]
    reviewers: list[str]


_CONFIG_KEYS = frozenset({"allowed_decisions", "description", "when", "args_schema", "reviewers"})
# SPEC §5.1 keys that later versions enforce; refused until then, never silently ignored.
_NOT_YET_KEYS = frozenset(
    {"allow_self_approval", "required_approvals", "expires_after", "on_expiry", "grantable"}
)
_LEGACY_KEYS = {"allow_accept": ("approve",), "allow_edit": ("edit",), "allow_respond": ("respond", "reject")}
_DECISION_KEYS: dict[str, frozenset[str]] = {
    "approve": frozenset({"type"}),
    "edit": frozenset({"type", "edited_action", "editedAction"}),
    "reject": frozenset({"type", "message"}),
    "respond": frozenset({"type", "message"}),
}
_DECISIONS_STATE_KEY = "_hitl_decisions"


class _Policy(NamedTuple):
    allowed: tuple[DecisionType, ...]
    description: str | DescriptionFactory | None
    when: Callable[[ToolCallRequest], bool] | None
    args_schema: dict[str, Any] | None
    reviewers: tuple[str, ...] | None = None  # roles that may decide (SPEC rule 12); None: anyone


def reject_message(name: str, call_id: str, message: str | None) -> str:
    """The ``ToolMessage`` text for a rejected call (SPEC rule 4)."""
    if message:
        return f"User rejected the tool call for `{name}` with reason: {message}"
    return (
        f"User rejected the tool call for `{name}` with id {call_id}. The tool was not executed. "
        "Do not retry this tool call unless the user explicitly requests it."
    )


class HumanInTheLoopMiddleware(AgentMiddleware):
    """Pause gated tool calls until a person decides what happens to them.

    Example::

        HumanInTheLoopMiddleware(
            interrupt_on={
                "write_file": True,                      # all four decisions
                "execute_sql": {"allowed_decisions": ["approve", "reject"],
                                "description": "SQL execution needs DBA approval"},
                "read_data": False,                      # never reviewed
            },
            description_prefix="Tool execution pending approval",
        )

    ``interrupt_on`` maps tool names to ``True`` (all four decisions), ``False`` (never
    reviewed) or an :class:`InterruptOnConfig`. Anything else raises
    :class:`~handrail.errors.ConfigurationError` naming the tool: a bad config never
    means "auto-approve". ``edit_notice`` starts the result of an edited call
    (``None`` leaves the result as the tool returned it). ``interrupt_mode`` is
    ``"batched"`` (one interrupt per model turn) or ``"per_call"`` (one per call).
    """

    pure_hooks = frozenset({"after_model"})  # deciding what to ask touches nothing outside the state

    def __init__(
        self,
        interrupt_on: Mapping[str, bool | InterruptOnConfig | Mapping[str, Any]],
        *,
        description_prefix: str = DEFAULT_DESCRIPTION_PREFIX,
        edit_notice: str | None = DEFAULT_EDIT_NOTICE,
        interrupt_mode: Literal["batched", "per_call"] = "batched",
    ) -> None:
        if not isinstance(interrupt_on, Mapping):
            raise ConfigurationError(
                f"interrupt_on must be a dict of tool name -> True/False/config, got "
                f"{type(interrupt_on).__name__}"
            )
        if interrupt_mode not in ("batched", "per_call"):
            raise ConfigurationError(
                f"interrupt_mode must be 'batched' or 'per_call', got {interrupt_mode!r}"
            )
        if not isinstance(description_prefix, str):
            raise ConfigurationError("description_prefix must be a string")
        if edit_notice is not None and not isinstance(edit_notice, str):
            raise ConfigurationError("edit_notice must be a string or None")
        self.policies: dict[str, _Policy] = {}
        for tool_name, config in interrupt_on.items():
            if not isinstance(tool_name, str) or not tool_name:
                raise ConfigurationError(f"interrupt_on keys must be tool names, got {tool_name!r}")
            policy = _parse_policy(tool_name, config)
            if policy is not None:
                self.policies[tool_name] = policy
        self.interrupt_on = dict(interrupt_on)
        self.description_prefix = description_prefix
        self.edit_notice = edit_notice
        self.interrupt_mode = interrupt_mode
        self._tools: Mapping[str, Tool] = {}

    # Configuration ----------------------------------------------------------------
    def bind(self, tools: Mapping[str, Tool]) -> None:
        unknown = sorted(set(self.interrupt_on) - set(tools))
        if unknown:
            raise ConfigurationError(
                f"interrupt_on names {unknown}, which the agent does not have; its tools are "
                f"{sorted(tools)}. A misspelt name would leave the real tool unreviewed."
            )
        self._tools = tools

    def _gated(self, request: ToolCallRequest) -> _Policy | None:
        policy = self.policies.get(request.tool_call["name"])
        if policy is None:
            return None
        if policy.when is not None and not policy.when(request):
            return None
        return policy

    def _describe(self, policy: _Policy, call: ToolCall, state: Mapping[str, Any], runtime: Runtime) -> str:
        if callable(policy.description):
            return str(policy.description(call, state, runtime))
        if isinstance(policy.description, str):
            return policy.description
        args = orjson.dumps(call["args"], option=orjson.OPT_INDENT_2, default=str).decode()
        return f"{self.description_prefix}\n\nTool: {call['name']}\nArgs: {args}"

    def _schema(self, policy: _Policy, name: str) -> dict[str, Any] | None:
        if policy.args_schema is not None:
            return policy.args_schema
        tool = self._tools.get(name)
        return tool.json_schema if tool is not None else None

    # Batched mode: one interrupt per model turn ------------------------------------
    def after_model(self, state: dict[str, Any], runtime: Runtime) -> dict[str, Any] | None:
        if self.interrupt_mode != "batched":
            return None
        message = _last_ai_message(state)
        if message is None or not message.tool_calls:
            return None
        gated: list[tuple[ToolCall, _Policy]] = []
        # a call another middleware already answered (a limit, a structured-output answer)
        # will not run: there is nothing to review
        answered_calls: set[str] = set()
        for later in reversed(state["messages"]):  # results of this turn only: ids may repeat
            if later is message:
                break
            if isinstance(later, ToolMessage):
                answered_calls.add(later.tool_call_id)
        for call in message.tool_calls:
            policy = self.policies.get(call["name"])
            if policy is None or call.get("id") in answered_calls:
                continue
            if policy.when is not None:
                request = ToolCallRequest(
                    tool_call=call,
                    tool=self._tools.get(call["name"]),
                    state=state,
                    runtime=_tool_runtime(runtime, call, state),
                )
                if not policy.when(request):
                    continue
            gated.append((call, policy))
        if not gated:
            return None
        answered = _answered_decisions(len(gated))
        if answered is not None:
            # Run again on resume: the answer was checked against the request it answers
            # before it was saved (validate_resume), so the request need not be rebuilt.
            decisions = answered
        else:
            request_value = HITLRequest(action_requests=[], review_configs=[])
            for call, policy in gated:
                request_value["action_requests"].append(
                    ActionRequest(
                        name=call["name"],
                        args=call["args"],
                        description=self._describe(policy, call, state, runtime),
                        tool_call_id=str(call["id"]),
                    )
                )
                review = ReviewConfig(action_name=call["name"], allowed_decisions=list(policy.allowed))
                schema = self._schema(policy, call["name"])
                if schema is not None:
                    review["args_schema"] = schema
                request_value["review_configs"].append(review)
            response = interrupt(request_value)
            decisions = self._check_batch(request_value, response)
        # Only what changes a call is kept: a call without an entry runs as proposed.
        by_call = {
            str(call["id"]): decision
            for (call, _), decision in zip(gated, decisions, strict=True)
            if decision["type"] != "approve"
        }
        return {_DECISIONS_STATE_KEY: {"message_id": message.id, "by_call": by_call}}

    # Applying decisions, and per-call mode --------------------------------------------
    def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolMessage:
        outcome = self._plan(request)
        if isinstance(outcome, ToolMessage):
            return outcome
        to_run, edited = outcome
        return self._with_edit_notice(handler(to_run), edited)

    async def awrap_tool_call(self, request: ToolCallRequest, handler: AsyncToolHandler) -> ToolMessage:
        outcome = self._plan(request)
        if isinstance(outcome, ToolMessage):
            return outcome
        to_run, edited = outcome
        return self._with_edit_notice(await handler(to_run), edited)

    def _plan(self, request: ToolCallRequest) -> ToolMessage | tuple[ToolCallRequest, ToolCall | None]:
        """What the decision makes of a call: a result without running it, or what to run."""
        decision = self._decision_for(request)
        if decision is None or decision["type"] == "approve":
            return request, None
        call = request.tool_call
        call_id = str(call["id"])
        if decision["type"] in ("reject", "respond"):
            # marked as LangChain marks them: made by the harness, from this decision type
            marker = {"lc_source": DECISION_SOURCE, "lc_data": {"decision": decision["type"]}}
            if decision["type"] == "respond":
                return ToolMessage(
                    decision["message"], tool_call_id=call_id, name=call["name"], additional_kwargs=marker
                )
            text = reject_message(call["name"], call_id, decision.get("message"))
            return ToolMessage(
                text, tool_call_id=call_id, name=call["name"], status="error", additional_kwargs=marker
            )
        edited = cast("EditDecision", decision)["edited_action"]
        new_call = ToolCall(name=edited["name"], args=dict(edited["args"]), id=call_id, type="tool_call")
        return request.override(tool_call=new_call, tool=self._tools.get(edited["name"])), new_call

    def _decision_for(self, request: ToolCallRequest) -> Decision | None:
        call = request.tool_call
        if self.interrupt_mode == "per_call":
            policy = self._gated(request)
            if policy is None:
                return None
            value = ToolApprovalRequest(
                type="tool_approval",
                tool_call_id=str(call["id"]),
                name=call["name"],
                args=call["args"],
                description=self._describe(policy, call, request.state, request.runtime),
                allowed_decisions=list(policy.allowed),
            )
            return self._check_single(value, interrupt(value))
        stored = request.state.get(_DECISIONS_STATE_KEY)
        message = _last_ai_message(request.state)
        if not stored or message is None or stored.get("message_id") != message.id:
            return None  # decisions of an earlier turn never apply to this one
        return cast("Decision | None", stored["by_call"].get(str(call["id"])))

    def _with_edit_notice(self, result: ToolMessage, ran: ToolCall | None) -> ToolMessage:
        if ran is None or self.edit_notice is None:
            return result
        # LangChain's layout: the notice, what ran, then the tool's own response
        notice = (
            f"{self.edit_notice} Executed instead: {ran['name']} with arguments "
            f"{json.dumps(ran['args'], default=str)}."
        )
        content: Any
        if isinstance(result.content, str):
            content = f"{notice}\n\nTool response:\n{result.content}" if result.content else notice
        else:
            heading = f"{notice}\n\nTool response:" if result.content else notice
            plain = bool(result.content) and all(isinstance(block, str) for block in result.content)
            content = [heading if plain else {"type": "text", "text": heading}, *result.content]
        return ToolMessage(
            content,
            tool_call_id=result.tool_call_id,
            name=result.name,
            status=result.status,
            id=result.id,
            artifact=result.artifact,
            additional_kwargs=dict(result.additional_kwargs),
        )

    # Validation (SPEC rule 5) --------------------------------------------------------
    def validate_resume(self, value: Any, resume: Any, context: ResumeContext) -> Any:
        if isinstance(value, Mapping) and value.get("type") == "tool_approval":
            return self._check_single(cast(ToolApprovalRequest, value), resume)
        return {"decisions": self._check_batch(cast(HITLRequest, value), resume)}

    def _check_batch(self, request: HITLRequest, response: Any) -> list[Decision]:
        expected = len(request["action_requests"])
        if not isinstance(response, Mapping) or "decisions" not in response:
            raise InvalidDecisionError(
                "a review answer must be {'decisions': [...]}, one decision per action request, "
                f"got {_short(response)}"
            )
        extra = sorted(set(response) - {"decisions"})
        if extra:
            raise InvalidDecisionError(f"a review answer holds only 'decisions'; unexpected key(s) {extra}")
        decisions = response["decisions"]
        if not isinstance(decisions, Sequence) or isinstance(decisions, (str, bytes)):
            raise InvalidDecisionError(f"'decisions' must be a list, got {type(decisions).__name__}")
        if len(decisions) != expected:
            raise InvalidDecisionError(
                f"expected {expected} decision{'s' if expected != 1 else ''} (one per action "
                f"request, in order), got {len(decisions)}"
            )
        checked: list[Decision] = []
        for i, (decision, action, review) in enumerate(
            zip(decisions, request["action_requests"], request["review_configs"], strict=True)
        ):
            try:
                checked.append(
                    self._check_decision(
                        decision,
                        f"decision {i + 1} of {expected}",
                        action["name"],
                        action["tool_call_id"],
                        list(review["allowed_decisions"]),
                    )
                )
            except InvalidDecisionError as exc:
                exc.decision_index = i
                raise
        return checked

    def _check_single(self, request: ToolApprovalRequest, response: Any) -> Decision:
        if isinstance(response, Mapping) and "decisions" in response and "type" not in response:
            decisions = response["decisions"]
            if not isinstance(decisions, Sequence) or len(decisions) != 1:
                raise InvalidDecisionError(
                    "a per-call review is answered by one decision, e.g. {'type': 'approve'}"
                )
            response = decisions[0]
        return self._check_decision(
            response,
            "the decision",
            request["name"],
            request["tool_call_id"],
            list(request["allowed_decisions"]),
        )

    def _check_decision(
        self, decision: Any, label: str, tool_name: str, call_id: str, allowed: list[str]
    ) -> Decision:
        if not isinstance(decision, Mapping):
            raise InvalidDecisionError(
                f"{label} must be a dict like {{'type': 'approve'}}, got {_short(decision)}"
            )
        kind = decision.get("type")
        if not isinstance(kind, str) or kind not in DECISION_TYPES:
            raise InvalidDecisionError(
                f"{label} has unknown type {_short(kind)}; expected one of {list(DECISION_TYPES)}"
            )
        if kind not in allowed:
            raise InvalidDecisionError(f"{label} is {kind!r}, but tool {tool_name!r} allows only {allowed}")
        unexpected = sorted(str(key) for key in set(decision) - _DECISION_KEYS[kind])
        if unexpected:
            raise InvalidDecisionError(f"{label} ({kind}) has unexpected key(s) {_short(unexpected)}")
        if kind == "approve":
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
        return EditDecision(type="edit", edited_action=self._check_edit(decision, label, tool_name))

    def _check_edit(self, decision: Mapping[str, Any], label: str, tool_name: str) -> Action:
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
                f"{label} (edit) edited_action has unexpected key(s) {_short(unexpected)}"
            )
        name, args = action.get("name"), action.get("args")
        if not isinstance(name, str) or not isinstance(args, Mapping):
            raise InvalidDecisionError(
                f"{label} (edit) edited_action needs a string 'name' and a dict 'args'"
            )
        target = self._tools.get(name)
        if target is None:
            raise InvalidDecisionError(
                f"{label} edits the call into {_short(name)}, which is not one of the agent's tools "
                f"{sorted(self._tools)}"
            )
        if name != tool_name:
            policy = self.policies.get(name)
            if policy is not None and "approve" not in policy.allowed:
                raise InvalidDecisionError(
                    f"{label} turns {tool_name!r} into {name!r}, whose policy does not allow "
                    f"'approve' (allowed: {list(policy.allowed)})"
                )
        try:
            target.validate_args(args)
        except ToolArgumentsError as exc:
            raise InvalidDecisionError(f"{label} (edit): {exc}") from None
        return Action(name=name, args=dict(args))


def _parse_policy(tool_name: str, config: Any) -> _Policy | None:
    if config is True:
        return _Policy(DECISION_TYPES, None, None, None)
    if config is False:
        return None
    if not isinstance(config, Mapping):
        # None, 0, "yes"...: a bad config never means "not reviewed" (SPEC §3).
        raise ConfigurationError(
            f"interrupt_on[{tool_name!r}] must be True, False or a dict with 'allowed_decisions', "
            f"got {_short(config)} (False turns review off for this tool)"
        )
    later = sorted(set(config) & _NOT_YET_KEYS)
    if later:
        raise ConfigurationError(
            f"interrupt_on[{tool_name!r}] uses {later}, which this version of handrail does not "
            "enforce yet; remove them (a policy is never weaker than it reads)"
        )
    unknown = sorted(set(config) - _CONFIG_KEYS - set(_LEGACY_KEYS))
    if unknown:
        raise ConfigurationError(
            f"interrupt_on[{tool_name!r}] has unknown key(s) {unknown}; valid keys: {sorted(_CONFIG_KEYS)}"
        )
    legacy = [key for key in _LEGACY_KEYS if key in config]
    if legacy and "allowed_decisions" in config:
        raise ConfigurationError(
            f"interrupt_on[{tool_name!r}] mixes 'allowed_decisions' with legacy flags {legacy}"
        )
    if legacy:
        warnings.warn(
            f"interrupt_on[{tool_name!r}]: {legacy} are deprecated; use 'allowed_decisions'",
            DeprecationWarning,
            stacklevel=4,
        )
        allowed_list: list[Any] = []
        for key in legacy:
            if not isinstance(config[key], bool):
                raise ConfigurationError(f"interrupt_on[{tool_name!r}][{key!r}] must be True or False")
            if config[key]:
                allowed_list += [d for d in _LEGACY_KEYS[key] if d not in allowed_list]
        allowed_list.sort(key=DECISION_TYPES.index)
    else:
        if "allowed_decisions" not in config:
            raise ConfigurationError(
                f"interrupt_on[{tool_name!r}] needs 'allowed_decisions', a non-empty list of "
                f"{list(DECISION_TYPES)}"
            )
        allowed_list = config["allowed_decisions"]
    if (
        not isinstance(allowed_list, (list, tuple))
        or not allowed_list
        or not all(isinstance(d, str) for d in allowed_list)
    ):
        raise ConfigurationError(
            f"interrupt_on[{tool_name!r}] allowed_decisions must be a non-empty list of "
            f"{list(DECISION_TYPES)}, got {_short(allowed_list)}"
        )
    bad = [d for d in allowed_list if d not in DECISION_TYPES]
    if bad:
        raise ConfigurationError(
            f"interrupt_on[{tool_name!r}] has unknown decision type(s) {bad}; known: {list(DECISION_TYPES)}"
        )
    if len(set(allowed_list)) != len(allowed_list):
        raise ConfigurationError(f"interrupt_on[{tool_name!r}] allowed_decisions lists a type twice")
    description = config.get("description")
    if description is not None and not (isinstance(description, str) or callable(description)):
        raise ConfigurationError(
            f"interrupt_on[{tool_name!r}] description must be a string or a callable "
            "(tool_call, state, runtime) -> str"
        )
    when = config.get("when")
    if when is not None and not callable(when):
        raise ConfigurationError(f"interrupt_on[{tool_name!r}] when must be a callable (request) -> bool")
    schema = config.get("args_schema")
    if schema is not None and not isinstance(schema, Mapping):
        raise ConfigurationError(f"interrupt_on[{tool_name!r}] args_schema must be a JSON schema dict")
    reviewers = config.get("reviewers")
    if reviewers is not None and (
        not isinstance(reviewers, (list, tuple))
        or not reviewers
        or not all(isinstance(role, str) and role for role in reviewers)
    ):
        raise ConfigurationError(
            f"interrupt_on[{tool_name!r}] reviewers must be a non-empty list of role names, "
            f"got {_short(reviewers)}"
        )
    return _Policy(
        allowed=tuple(cast(list[DecisionType], allowed_list)),
        description=description,
        when=when,
        args_schema=dict(schema) if schema is not None else None,
        reviewers=tuple(reviewers) if reviewers is not None else None,
    )


def _answered_decisions(expected: int) -> list[Decision] | None:
    """The checked decisions this step's interrupt was answered with, if it was.

    An answer is saved only once ``validate_resume`` has checked it and made it
    ``{"decisions": [...]}`` in canonical form; None when there is no answer yet (or it
    is not one of those: then it goes through ``interrupt`` and the full check).
    """
    task = current_task()
    if task is None or task.counter not in task.answers:
        return None
    answer = task.answers[task.counter]
    decisions = answer.get("decisions") if isinstance(answer, Mapping) and len(answer) == 1 else None
    if not isinstance(decisions, list) or len(decisions) != expected:
        return None
    if not all(_canonical(d) for d in decisions):
        return None
    task.next_index()  # what interrupt() would have taken
    return cast("list[Decision]", decisions)


def _canonical(decision: Any) -> bool:
    """Whether a decision is in the form ``_check_decision`` gives (else: check it again)."""
    if not isinstance(decision, dict) or decision.get("type") not in DECISION_TYPES:
        return False
    if "editedAction" in decision or not decision.keys() <= _DECISION_KEYS[decision["type"]]:
        return False
    if decision["type"] == "edit":
        action = decision.get("edited_action")
        return (
            isinstance(action, dict)
            and isinstance(action.get("name"), str)
            and isinstance(action.get("args"), dict)
        )
    return decision["type"] != "respond" or isinstance(decision.get("message"), str)


def _last_ai_message(state: Mapping[str, Any]) -> AIMessage | None:
    for message in reversed(state.get("messages", ())):
        if isinstance(message, AIMessage):
            return message
    return None


def _tool_runtime(runtime: Runtime, call: ToolCall, state: Mapping[str, Any]) -> Any:
    from handrail.runtime.context import ToolRuntime

    return ToolRuntime(
        thread_id=runtime.thread_id,
        config=runtime.config,
        context=runtime.context,
        store=runtime.store,
        stream_writer=runtime.stream_writer,
        reviewer=runtime.reviewer,
        step=runtime.step,
        tool_call_id=str(call["id"]),
        state=state,
    )


def _short(value: Any) -> str:
    return short_repr(value)
