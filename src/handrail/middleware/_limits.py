"""``ModelCallLimitMiddleware`` and ``ToolCallLimitMiddleware``: stop runaway agents.

As in LangChain: a ``thread_limit`` counts every call on the thread, a ``run_limit``
the calls of one run; the counts live in the thread's state, so they survive pauses,
resumes and restarts. In handrail a run is what one new input starts: its count
starts at zero when new input arrives (``before_agent``), and a pause for review and
its resume stay the same run.

- ``ModelCallLimitMiddleware(thread_limit=, run_limit=, exit_behavior="end"|"error")``:
  before a model call that would pass a limit, ``"end"`` finishes the run with an
  ``AIMessage`` saying which limit was hit; ``"error"`` raises
  :class:`ModelCallLimitExceededError`.
- ``ToolCallLimitMiddleware(tool_name=None, thread_limit=, run_limit=,
  exit_behavior="continue"|"error"|"end")``: after the model's answer, calls past the
  limit get an error ``ToolMessage`` instead of running (``"continue"``), stop the run
  (``"end"``, with an ``AIMessage``) or raise :class:`ToolCallLimitExceededError`.

A blocked call never reaches review: list the limit **after** the review middleware so
its ``after_model`` runs first (``after_*`` hooks run in reverse order).
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from handrail.context import Runtime
from handrail.errors import ConfigurationError, HandrailError
from handrail.messages import AIMessage, ToolCall, ToolMessage
from handrail.middleware._decorators import hook_config
from handrail.middleware.types import AgentMiddleware

__all__ = [
    "ModelCallLimitExceededError",
    "ModelCallLimitMiddleware",
    "ToolCallLimitExceededError",
    "ToolCallLimitMiddleware",
]


class ModelCallLimitState(TypedDict):
    """The counts ``ModelCallLimitMiddleware`` keeps in the thread's state."""

    thread_model_call_count: NotRequired[int]
    run_model_call_count: NotRequired[int]


class ToolCallLimitState(TypedDict):
    """The counts ``ToolCallLimitMiddleware`` keeps, by tool name (``"__all__"`` for every tool)."""

    thread_tool_call_count: NotRequired[dict[str, int]]
    run_tool_call_count: NotRequired[dict[str, int]]


def _check_limits(thread_limit: int | None, run_limit: int | None) -> None:
    if thread_limit is None and run_limit is None:
        raise ConfigurationError("At least one limit must be specified (thread_limit or run_limit)")
    for label, value in (("thread_limit", thread_limit), ("run_limit", run_limit)):
        if value is not None and (not isinstance(value, int) or value < 0):
            raise ConfigurationError(f"{label} must be a non-negative integer or None, got {value!r}")
    if thread_limit is not None and run_limit is not None and run_limit > thread_limit:
        raise ConfigurationError(
            f"run_limit ({run_limit}) cannot exceed thread_limit ({thread_limit}). "
            "The run limit should be less than or equal to the thread limit."
        )


class ModelCallLimitExceededError(HandrailError):
    """A model call limit was reached with ``exit_behavior="error"``."""

    def __init__(
        self, thread_count: int, run_count: int, thread_limit: int | None, run_limit: int | None
    ) -> None:
        self.thread_count, self.run_count = thread_count, run_count
        self.thread_limit, self.run_limit = thread_limit, run_limit
        super().__init__(_model_limit_text(thread_count, run_count, thread_limit, run_limit))


def _model_limit_text(
    thread_count: int, run_count: int, thread_limit: int | None, run_limit: int | None
) -> str:
    exceeded = []
    if thread_limit is not None and thread_count >= thread_limit:
        exceeded.append(f"thread limit ({thread_count}/{thread_limit})")
    if run_limit is not None and run_count >= run_limit:
        exceeded.append(f"run limit ({run_count}/{run_limit})")
    return f"Model call limits exceeded: {', '.join(exceeded)}"


class ModelCallLimitMiddleware(AgentMiddleware):
    """Limit the model calls of a thread and of a run.

    Example::

        create_agent(model, tools, middleware=[ModelCallLimitMiddleware(thread_limit=10, run_limit=5)])
    """

    state_schema = ModelCallLimitState

    def __init__(
        self,
        *,
        thread_limit: int | None = None,
        run_limit: int | None = None,
        exit_behavior: Literal["end", "error"] = "end",
    ) -> None:
        _check_limits(thread_limit, run_limit)
        if exit_behavior not in ("end", "error"):
            raise ConfigurationError(f"exit_behavior must be 'end' or 'error', got {exit_behavior!r}")
        self.thread_limit = thread_limit
        self.run_limit = run_limit
        self.exit_behavior = exit_behavior

    def before_agent(self, state: dict[str, Any], runtime: Runtime) -> dict[str, Any] | None:
        return {"run_model_call_count": 0} if state.get("run_model_call_count") else None

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: dict[str, Any], runtime: Runtime) -> dict[str, Any] | None:
        thread_count = state.get("thread_model_call_count", 0)
        run_count = state.get("run_model_call_count", 0)
        over = (self.thread_limit is not None and thread_count >= self.thread_limit) or (
            self.run_limit is not None and run_count >= self.run_limit
        )
        if not over:
            return None
        if self.exit_behavior == "error":
            raise ModelCallLimitExceededError(thread_count, run_count, self.thread_limit, self.run_limit)
        text = _model_limit_text(thread_count, run_count, self.thread_limit, self.run_limit)
        return {"jump_to": "end", "messages": [AIMessage(text)]}

    def after_model(self, state: dict[str, Any], runtime: Runtime) -> dict[str, Any] | None:
        return {
            "thread_model_call_count": state.get("thread_model_call_count", 0) + 1,
            "run_model_call_count": state.get("run_model_call_count", 0) + 1,
        }


class ToolCallLimitExceededError(HandrailError):
    """A tool call limit was reached with ``exit_behavior="error"``."""

    def __init__(
        self,
        thread_count: int,
        run_count: int,
        thread_limit: int | None,
        run_limit: int | None,
        tool_name: str | None = None,
    ) -> None:
        self.thread_count, self.run_count = thread_count, run_count
        self.thread_limit, self.run_limit, self.tool_name = thread_limit, run_limit, tool_name
        super().__init__(_tool_limit_text(thread_count, run_count, thread_limit, run_limit, tool_name))


def _tool_limit_text(
    thread_count: int, run_count: int, thread_limit: int | None, run_limit: int | None, tool_name: str | None
) -> str:
    what = f"'{tool_name}' tool" if tool_name else "Tool"
    exceeded = []
    if thread_limit is not None and thread_count > thread_limit:
        exceeded.append(f"thread limit exceeded ({thread_count}/{thread_limit} calls)")
    if run_limit is not None and run_count > run_limit:
        exceeded.append(f"run limit exceeded ({run_count}/{run_limit} calls)")
    return f"{what} call limit reached: {' and '.join(exceeded)}."


class ToolCallLimitMiddleware(AgentMiddleware):
    """Limit tool calls (of one tool, or of all) per thread and per run.

    Its name is ``ToolCallLimitMiddleware[<tool>]`` when it limits one tool, so several
    can be stacked.

    Example::

        middleware=[ToolCallLimitMiddleware(tool_name="search", run_limit=3)]
    """

    state_schema = ToolCallLimitState

    def __init__(
        self,
        *,
        tool_name: str | None = None,
        thread_limit: int | None = None,
        run_limit: int | None = None,
        exit_behavior: Literal["continue", "error", "end"] = "continue",
    ) -> None:
        _check_limits(thread_limit, run_limit)
        if exit_behavior not in ("continue", "error", "end"):
            raise ConfigurationError(
                f"Invalid exit_behavior: {exit_behavior!r}. Must be one of ('continue', 'error', 'end')"
            )
        self.tool_name = tool_name
        self.thread_limit = thread_limit
        self.run_limit = run_limit
        self.exit_behavior = exit_behavior
        self.name = f"ToolCallLimitMiddleware[{tool_name}]" if tool_name else "ToolCallLimitMiddleware"

    @property
    def _key(self) -> str:
        return self.tool_name or "__all__"

    def before_agent(self, state: dict[str, Any], runtime: Runtime) -> dict[str, Any] | None:
        counts = dict(state.get("run_tool_call_count") or {})
        if not counts.get(self._key):
            return None
        counts[self._key] = 0
        return {"run_tool_call_count": counts}

    def _over(self, thread_count: int, run_count: int) -> bool:
        return (self.thread_limit is not None and thread_count + 1 > self.thread_limit) or (
            self.run_limit is not None and run_count + 1 > self.run_limit
        )

    @hook_config(can_jump_to=["end"])
    def after_model(self, state: dict[str, Any], runtime: Runtime) -> dict[str, Any] | None:
        last = next((m for m in reversed(state.get("messages", [])) if isinstance(m, AIMessage)), None)
        if last is None or not last.tool_calls:
            return None
        answered: set[str] = set()
        for later in reversed(state["messages"]):  # results of this turn only: ids may repeat
            if later is last:
                break
            if isinstance(later, ToolMessage):
                answered.add(later.tool_call_id)
        thread_counts = dict(state.get("thread_tool_call_count") or {})
        run_counts = dict(state.get("run_tool_call_count") or {})
        thread_before = thread_count = thread_counts.get(self._key, 0)
        run_count = run_counts.get(self._key, 0)
        blocked: list[ToolCall] = []
        allowed = 0
        for call in last.tool_calls:
            if call.get("id") in answered or (self.tool_name is not None and call["name"] != self.tool_name):
                continue
            if self._over(thread_count, run_count):
                blocked.append(call)
            else:
                allowed += 1
                thread_count += 1
                run_count += 1
        thread_counts[self._key] = thread_count
        run_counts[self._key] = run_count + len(blocked)
        update: dict[str, Any] = {"thread_tool_call_count": thread_counts, "run_tool_call_count": run_counts}
        if not blocked:
            return update if allowed else None
        if self.exit_behavior == "error":
            raise ToolCallLimitExceededError(
                thread_count + len(blocked),
                run_counts[self._key],
                self.thread_limit,
                self.run_limit,
                self.tool_name,
            )
        notice = (
            f"Tool call limit exceeded. Do not call '{self.tool_name}' again."
            if self.tool_name
            else "Tool call limit exceeded. Do not make additional tool calls."
        )
        messages: list[Any] = [
            ToolMessage(notice, tool_call_id=str(c["id"]), name=c["name"], status="error") for c in blocked
        ]
        if self.exit_behavior == "end":
            blocked_ids = {c["id"] for c in blocked}
            messages += [
                ToolMessage(
                    "Execution stopped before this tool call could run because another tool call in the "
                    "same batch exceeded the limit.",
                    tool_call_id=str(c["id"]),
                    name=c["name"],
                    status="error",
                )
                for c in last.tool_calls
                if c["id"] not in blocked_ids and c.get("id") not in answered
            ]
            messages.append(
                AIMessage(
                    _tool_limit_text(
                        thread_count + len(blocked),
                        run_counts[self._key],
                        self.thread_limit,
                        self.run_limit,
                        self.tool_name,
                    )
                )
            )
            thread_counts[self._key] = thread_before
            return {**update, "messages": messages, "jump_to": "end"}
        return {**update, "messages": messages}
