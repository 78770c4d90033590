"""HumanInTheLoopMiddleware: pause tool calls for a person to approve, edit, reject or answer.

How it works (SPEC §3 and rules 1-5, 19-20):

* The middleware holds the agent's review policies (``interrupt_on``, parsed once into
  :class:`~handrail.review.Policies`) and asks; it never decides what runs. The gate
  (``handrail.review``) does, where tools run: the tools step asks it about every call,
  reading the answers from the thread's log, bound to the call and to the tool and
  arguments the reviewer saw.
* **Batched mode** (the default). ``after_model`` looks at the model's tool calls; the
  ones whose policy gates them (and whose ``when`` predicate, if any, is true) go into
  one interrupt whose value is a :class:`HITLRequest`, in call order. The answer is
  ``{"decisions": [...]}``, one decision per action request.
* **Per-call mode**. The tools step raises one interrupt per gated call (value
  ``{"type": "tool_approval", ...}``), each answered by one decision; calls that are
  not gated run at once.
* Answers are checked before anything is saved (``handrail.review.check_answer``): a
  bad answer raises :class:`~handrail.errors.InvalidDecisionError` and leaves the
  thread as it was.

The decisions:

``approve``  the call runs as proposed.
``edit``     ``edited_action`` runs instead; the model's ``AIMessage`` keeps its
             original call, and the result starts with the edit notice and says what ran.
``reject``   the tool does not run; an error ``ToolMessage`` tells the model why.
``respond``  the tool does not run; the person's ``message`` is the tool's result.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, Literal

from handrail.context import Runtime, ToolRuntime, current_task, interrupt
from handrail.errors import ConfigurationError
from handrail.messages import AIMessage, ToolCall, ToolMessage
from handrail.middleware.types import AgentMiddleware, ResumeContext, ToolCallRequest
from handrail.review import Policies, Policy, check_answer, parse_policy
from handrail.review.policy import (
    DECISION_SOURCE,
    DECISION_TYPES,
    DEFAULT_DESCRIPTION_PREFIX,
    DEFAULT_EDIT_NOTICE,
    Action,
    ActionRequest,
    ApproveDecision,
    Decision,
    DecisionType,
    EditDecision,
    HITLRequest,
    HITLResponse,
    InterruptOnConfig,
    RejectDecision,
    RespondDecision,
    ReviewConfig,
    ToolApprovalRequest,
    reject_message,
)
from handrail.tools import Tool

__all__ = [
    "DECISION_SOURCE",
    "DECISION_TYPES",
    "DEFAULT_EDIT_NOTICE",
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
        self.policies: dict[str, Policy] = {}
        for tool_name, config in interrupt_on.items():
            if not isinstance(tool_name, str) or not tool_name:
                raise ConfigurationError(f"interrupt_on keys must be tool names, got {tool_name!r}")
            policy = parse_policy(tool_name, config)
            if policy is not None:
                self.policies[tool_name] = policy
        self.interrupt_on = dict(interrupt_on)
        self.description_prefix = description_prefix
        self.edit_notice = edit_notice
        self.interrupt_mode = interrupt_mode
        self._gate = Policies(
            self.policies, mode=interrupt_mode, description_prefix=description_prefix, edit_notice=edit_notice
        )

    # Configuration ----------------------------------------------------------------
    def bind(self, tools: Mapping[str, Tool]) -> None:
        unknown = sorted(set(self.interrupt_on) - set(tools))
        if unknown:
            raise ConfigurationError(
                f"interrupt_on names {unknown}, which the agent does not have; its tools are "
                f"{sorted(tools)}. A misspelt name would leave the real tool unreviewed."
            )
        self._gate.bind(tools)
        self._gate.source = self.name

    def review_policies(self) -> Policies:
        """The agent's review policies, which the gate (``handrail.review``) enforces."""
        self._gate.source = self.name
        return self._gate

    # Batched mode: one interrupt per model turn ------------------------------------
    def after_model(self, state: dict[str, Any], runtime: Runtime) -> dict[str, Any] | None:
        if self.interrupt_mode != "batched":
            return None
        message = _last_ai_message(state)
        if message is None or not message.tool_calls:
            return None
        task = current_task()
        if task is not None and task.counter in task.answers:
            # Run again on resume: the answer is in the log, where the tools step reads it.
            task.next_index()  # what interrupt() would have taken
            return None
        gated: list[tuple[ToolCall, Policy]] = []
        # a call another middleware already answered (a limit, a structured-output answer)
        # will not run: there is nothing to review
        answered_calls: set[str] = set()
        for later in reversed(state["messages"]):  # results of this turn only: ids may repeat
            if later is message:
                break
            if isinstance(later, ToolMessage):
                answered_calls.add(later.tool_call_id)
        for call in message.tool_calls:
            if call.get("id") in answered_calls:
                continue
            policy = self._gate.gates(call["name"], partial(self._when_request, call, state, runtime))
            if policy is not None:
                gated.append((call, policy))
        if gated:
            interrupt(self._gate.batch_request(gated, state, runtime))
        return None

    def _when_request(self, call: ToolCall, state: Mapping[str, Any], runtime: Runtime) -> ToolCallRequest:
        return ToolCallRequest(
            tool_call=call,
            tool=self._gate.tools.get(call["name"]),
            state=state,
            runtime=ToolRuntime.of_call(runtime, str(call["id"]), state),
        )

    # Validation (SPEC rule 5) --------------------------------------------------------
    def validate_resume(self, value: Any, resume: Any, context: ResumeContext) -> Any:
        """Check an answer to one of this middleware's reviews (``handrail.review.check_answer``)."""
        return check_answer(self._gate, value, resume, interrupt_id=context.interrupt_id)


def _last_ai_message(state: Mapping[str, Any]) -> AIMessage | None:
    for message in reversed(state.get("messages", ())):
        if isinstance(message, AIMessage):
            return message
    return None
