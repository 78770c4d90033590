"""Review policies: ``interrupt_on`` parsed once, and the review requests they ask.

The shapes a reviewer sees (SPEC §3) are defined here and re-exported by
``handrail.middleware.human_in_the_loop``, where the SPEC names them.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict, cast

import orjson

from handrail.errors import ConfigurationError, short_repr
from handrail.messages import ToolCall, ToolMessage
from handrail.review.terms import parse_terms

__all__ = [
    "DECISION_SOURCE",
    "DECISION_TYPES",
    "DEFAULT_DESCRIPTION_PREFIX",
    "DEFAULT_EDIT_NOTICE",
    "EDIT_MARK",
    "NO_POLICIES",
    "Action",
    "ActionRequest",
    "ApproveDecision",
    "Decision",
    "DecisionType",
    "EditDecision",
    "HITLRequest",
    "HITLResponse",
    "InterruptOnConfig",
    "Policies",
    "Policy",
    "RejectDecision",
    "RespondDecision",
    "ReviewConfig",
    "ToolApprovalRequest",
    "parse_policy",
    "reject_message",
    "with_edit_notice",
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
    """Run the call as proposed; ``grant`` (SPEC rule 16) lets later calls of the tool run
    without a pause: ``{"scope": "thread" | "agent", "args": "exact" | None, "ttl":
    seconds, "uses": n}``."""

    type: Literal["approve"]
    grant: NotRequired[dict[str, Any]]


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


DescriptionFactory = Callable[[ToolCall, Mapping[str, Any], Any], str]


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
    when: Callable[[Any], bool]
    args_schema: dict[str, Any]
    reviewers: list[str]
    allow_self_approval: bool
    required_approvals: int
    expires_after: float | timedelta
    on_expiry: Literal["reject", "approve"]
    grantable: bool


_CONFIG_KEYS = frozenset(
    {
        "allowed_decisions",
        "description",
        "when",
        "args_schema",
        "reviewers",
        "allow_self_approval",
        "required_approvals",
        "expires_after",
        "on_expiry",
        "grantable",
    }
)
_LEGACY_KEYS = {"allow_accept": ("approve",), "allow_edit": ("edit",), "allow_respond": ("respond", "reject")}


class Policy(NamedTuple):
    """The review policy of one tool, parsed from its ``interrupt_on`` entry."""

    allowed: tuple[DecisionType, ...]
    description: str | DescriptionFactory | None
    when: Callable[[Any], bool] | None
    args_schema: dict[str, Any] | None
    reviewers: tuple[str, ...] | None = None  # roles that may decide (SPEC rule 12); None: anyone
    allow_self_approval: bool = True  # rule 13
    required_approvals: int = 1  # rule 14
    expires_after: float | None = None  # rule 15, seconds
    on_expiry: Literal["reject", "approve"] = "reject"
    grantable: bool = True  # rule 16


class Policies:
    """The review policies of one agent (``AgentSpec.policies``), parsed once.

    ``by_tool`` maps each gated tool to its :class:`Policy` (a tool absent from it is
    never reviewed); ``mode`` is ``"batched"`` or ``"per_call"``; ``source`` names the
    middleware that asks, so an answer is known as the gate's own (rule 19).

    Example::

        policies = Policies({"execute_sql": parse_policy("execute_sql", True)})
        policies.by_tool["execute_sql"].allowed   # ('approve', 'edit', 'reject', 'respond')
    """

    __slots__ = ("by_tool", "description_prefix", "edit_notice", "has_terms", "mode", "source", "tools")

    def __init__(
        self,
        by_tool: Mapping[str, Policy],
        *,
        mode: Literal["batched", "per_call"] = "batched",
        description_prefix: str = DEFAULT_DESCRIPTION_PREFIX,
        edit_notice: str | None = DEFAULT_EDIT_NOTICE,
        source: str | None = None,
    ) -> None:
        self.by_tool: dict[str, Policy] = dict(by_tool)
        # whether any policy sets a key of rules 13-16 (its reviews then save their terms)
        self.has_terms = any(
            (p.allow_self_approval, p.required_approvals, p.expires_after, p.grantable)
            != (True, 1, None, True)
            for p in self.by_tool.values()
        )
        self.mode = mode
        self.description_prefix = description_prefix
        self.edit_notice = edit_notice
        self.source = source
        self.tools: Mapping[str, Any] = {}  # the agent's tools (``Tool``), set by ``bind``

    def bind(self, tools: Mapping[str, Any]) -> None:
        """Check the policies against the agent's tools and keep them (their schemas)."""
        unknown = sorted(set(self.by_tool) - set(tools))
        if unknown:
            raise ConfigurationError(
                f"interrupt_on names {unknown}, which the agent does not have; its tools are "
                f"{sorted(tools)}. A misspelt name would leave the real tool unreviewed."
            )
        self.tools = tools

    def gates(self, name: str, request: Callable[[], Any]) -> Policy | None:
        """The policy that gates a call to ``name`` now, or None when it is not reviewed.

        ``request`` builds the ``ToolCallRequest`` a ``when`` predicate reads (only
        built for a policy that has one).
        """
        policy = self.by_tool.get(name)
        if policy is None or (policy.when is not None and not policy.when(request())):
            return None
        return policy

    def describe(self, policy: Policy, call: ToolCall, state: Mapping[str, Any], runtime: Any) -> str:
        """The description a reviewer reads for ``call``."""
        if callable(policy.description):
            return str(policy.description(call, state, runtime))
        if isinstance(policy.description, str):
            return policy.description
        args = orjson.dumps(call["args"], option=orjson.OPT_INDENT_2, default=str).decode()
        return f"{self.description_prefix}\n\nTool: {call['name']}\nArgs: {args}"

    def schema(self, policy: Policy, name: str) -> dict[str, Any] | None:
        """The JSON schema shown with a call to ``name``."""
        if policy.args_schema is not None:
            return policy.args_schema
        tool = self.tools.get(name)
        schema = getattr(tool, "json_schema", None)
        return schema if isinstance(schema, dict) else None

    def batch_request(
        self, gated: list[tuple[ToolCall, Policy]], state: Mapping[str, Any], runtime: Any
    ) -> HITLRequest:
        """The value of one batched review of ``gated`` calls, in call order (rule 2)."""
        value = HITLRequest(action_requests=[], review_configs=[])
        for call, policy in gated:
            value["action_requests"].append(
                ActionRequest(
                    name=call["name"],
                    args=call["args"],
                    description=self.describe(policy, call, state, runtime),
                    tool_call_id=str(call["id"]),
                )
            )
            review = ReviewConfig(action_name=call["name"], allowed_decisions=list(policy.allowed))
            schema = self.schema(policy, call["name"])
            if schema is not None:
                review["args_schema"] = schema
            value["review_configs"].append(review)
        return value

    def call_request(
        self, call: ToolCall, policy: Policy, state: Mapping[str, Any], runtime: Any
    ) -> ToolApprovalRequest:
        """The value of a per-call review of ``call`` (rule 3)."""
        return ToolApprovalRequest(
            type="tool_approval",
            tool_call_id=str(call["id"]),
            name=call["name"],
            args=call["args"],
            description=self.describe(policy, call, state, runtime),
            allowed_decisions=list(policy.allowed),
        )


NO_POLICIES = Policies({})
"""The policies of an agent without a review gate: no tool is reviewed."""


def reject_message(name: str, call_id: str, message: str | None) -> str:
    """The ``ToolMessage`` text for a rejected call (SPEC rule 4)."""
    if message:
        return f"User rejected the tool call for `{name}` with reason: {message}"
    return (
        f"User rejected the tool call for `{name}` with id {call_id}. The tool was not executed. "
        "Do not retry this tool call unless the user explicitly requests it."
    )


def with_edit_notice(result: ToolMessage, ran: ToolCall, notice: str | None) -> ToolMessage:
    """The result of an edited call, starting with the edit notice and what ran (rule 4).

    The model reads the notice as LangChain words it. The message is marked for the
    people who read it later: ``additional_kwargs["handrail_edit_notice"]`` says how much
    of the content is the notice (``{"chars": n}`` of a text, ``{"blocks": n}`` of a list
    of blocks), so a display shows the tool's own result (``_message_display.reviewer_content``).
    """
    if notice is None:
        return result
    # LangChain's layout: the notice, what ran, then the tool's own response
    said = f"{notice} Executed instead: {ran['name']} with arguments {json.dumps(ran['args'], default=str)}."
    content: Any
    if isinstance(result.content, str):
        content = f"{said}\n\nTool response:\n{result.content}" if result.content else said
        mark = {"chars": len(content) - len(result.content)}
    else:
        heading = f"{said}\n\nTool response:" if result.content else said
        plain = bool(result.content) and all(isinstance(block, str) for block in result.content)
        content = [heading if plain else {"type": "text", "text": heading}, *result.content]
        mark = {"blocks": 1}
    return ToolMessage(
        content,
        tool_call_id=result.tool_call_id,
        name=result.name,
        status=result.status,
        id=result.id,
        artifact=result.artifact,
        additional_kwargs={**result.additional_kwargs, EDIT_MARK: mark},
    )


EDIT_MARK = "handrail_edit_notice"
"""The key of ``additional_kwargs`` that marks a tool result led by the edit notice."""


def parse_policy(tool_name: str, config: Any) -> Policy | None:
    """One ``interrupt_on`` entry as a :class:`Policy` (None: never reviewed).

    Anything but ``True``, ``False`` or a well-formed dict raises ConfigurationError
    naming the tool: a bad config never means "auto-approve" (SPEC §3).
    """
    if config is True:
        return Policy(DECISION_TYPES, None, None, None)
    if config is False:
        return None
    if not isinstance(config, Mapping):
        raise ConfigurationError(
            f"interrupt_on[{tool_name!r}] must be True, False or a dict with 'allowed_decisions', "
            f"got {short_repr(config)} (False turns review off for this tool)"
        )
    unknown = sorted(set(config) - _CONFIG_KEYS - set(_LEGACY_KEYS))
    if unknown:
        raise ConfigurationError(
            f"interrupt_on[{tool_name!r}] has unknown key(s) {unknown}; valid keys: {sorted(_CONFIG_KEYS)}"
        )
    allowed = _allowed_decisions(tool_name, config)
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
            f"got {short_repr(reviewers)}"
        )
    return Policy(
        allowed=allowed,
        description=description,
        when=when,
        args_schema=dict(schema) if schema is not None else None,
        reviewers=tuple(reviewers) if reviewers is not None else None,
        **parse_terms(tool_name, config, allowed),
    )


def _allowed_decisions(tool_name: str, config: Mapping[str, Any]) -> tuple[DecisionType, ...]:
    legacy = [key for key in _LEGACY_KEYS if key in config]
    if legacy and "allowed_decisions" in config:
        raise ConfigurationError(
            f"interrupt_on[{tool_name!r}] mixes 'allowed_decisions' with legacy flags {legacy}"
        )
    if legacy:
        warnings.warn(
            f"interrupt_on[{tool_name!r}]: {legacy} are deprecated; use 'allowed_decisions'",
            DeprecationWarning,
            stacklevel=5,
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
            f"{list(DECISION_TYPES)}, got {short_repr(allowed_list)}"
        )
    bad = [d for d in allowed_list if d not in DECISION_TYPES]
    if bad:
        raise ConfigurationError(
            f"interrupt_on[{tool_name!r}] has unknown decision type(s) {bad}; known: {list(DECISION_TYPES)}"
        )
    if len(set(allowed_list)) != len(allowed_list):
        raise ConfigurationError(f"interrupt_on[{tool_name!r}] allowed_decisions lists a type twice")
    return tuple(cast(list[DecisionType], allowed_list))
