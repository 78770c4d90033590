"""AgentMiddleware and the requests its wrap hooks receive.

A middleware hooks into the agent loop::

    before_agent -> [ before_model -> model -> after_model -> tools ]* -> after_agent

``before_*`` hooks run in list order, ``after_*`` hooks in reverse order, and
``wrap_model_call`` / ``wrap_tool_call`` nest with the first middleware outermost. A
node hook takes ``(state, runtime)`` and returns a state update (a dict) or None; a wrap
hook takes ``(request, handler)`` and calls ``handler(request)`` zero or more times.
Every hook has an async twin (``abefore_model``, ``awrap_tool_call``, ...) used by
``ainvoke``/``astream`` when defined; otherwise the sync hook is used there too.

Middleware sees state and returns updates; it never writes to the store itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from handrail.context import Runtime, ToolRuntime
from handrail.messages import AIMessage, BaseMessage, SystemMessage, ToolCall, ToolMessage

if TYPE_CHECKING:
    from handrail.models.base import ChatModel
    from handrail.review import Policies
    from handrail.tools import Tool

__all__ = [
    "AgentMiddleware",
    "AgentState",
    "ModelRequest",
    "ModelResponse",
    "ResumeContext",
    "ToolCallRequest",
    "hook_is_defined",
]


class AgentState(TypedDict):
    """The state every agent has: the conversation."""

    messages: list[BaseMessage]


@dataclass(slots=True)
class ModelRequest:
    """What ``wrap_model_call`` receives: everything the model call will use.

    Change it with :meth:`override`, which returns a copy::

        def wrap_model_call(self, request, handler):
            return handler(request.override(system_prompt="Be brief."))

    Only ``model`` and ``messages`` are required, so a test can build one with
    ``ModelRequest(model=..., messages=[...])`` as in LangChain.
    """

    model: ChatModel
    messages: list[BaseMessage]
    system_prompt: str | None = None
    tools: list[Tool] = field(default_factory=list)
    state: Mapping[str, Any] = field(default_factory=dict)
    runtime: Runtime = field(default_factory=Runtime)
    tool_choice: Any = None
    model_settings: dict[str, Any] = field(default_factory=dict)
    response_format: Any = None

    @property
    def system_message(self) -> SystemMessage | None:
        """The system prompt as a ``SystemMessage`` (LangChain's spelling), or None."""
        return SystemMessage(self.system_prompt) if self.system_prompt is not None else None

    def override(self, **changes: Any) -> ModelRequest:
        """Return a copy with ``changes`` applied.

        ``system_message=SystemMessage(...)`` is accepted as well as ``system_prompt=``.
        """
        if "system_message" in changes:
            message = changes.pop("system_message")
            changes["system_prompt"] = message.text if isinstance(message, BaseMessage) else message
        return dataclasses.replace(self, **changes)


@dataclass(slots=True)
class ModelResponse:
    """What the model handler returns: the new messages (normally one ``AIMessage``)."""

    result: list[BaseMessage]
    structured_response: Any = None

    @property
    def message(self) -> AIMessage:
        """The model's ``AIMessage`` (the last one in ``result``)."""
        for message in reversed(self.result):
            if isinstance(message, AIMessage):
                return message
        raise ValueError("the model response holds no AIMessage")


@dataclass(slots=True)
class ToolCallRequest:
    """What ``wrap_tool_call`` (and the ``when`` predicate) receives.

    ``tool_call`` is the ``{name, args, id, type}`` dict; ``tool`` the matching
    :class:`~handrail.Tool`, or None when the model named a tool that does not exist.
    """

    tool_call: ToolCall
    tool: Tool | None
    state: Mapping[str, Any]
    runtime: ToolRuntime

    def override(self, **changes: Any) -> ToolCallRequest:
        """Return a copy with ``changes`` applied (for example a new ``tool_call``)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class ResumeContext:
    """Given to :meth:`AgentMiddleware.validate_resume`: where the answer is going."""

    thread_id: str
    interrupt_id: str
    tools: Mapping[str, Tool]


ModelHandler = Callable[[ModelRequest], ModelResponse]
AsyncModelHandler = Callable[[ModelRequest], Awaitable[ModelResponse]]
ToolHandler = Callable[[ToolCallRequest], ToolMessage]
AsyncToolHandler = Callable[[ToolCallRequest], Awaitable[ToolMessage]]

StateUpdate = dict[str, Any] | None


class AgentMiddleware:
    """Base class for middleware. Override the hooks you need; the rest do nothing.

    ``state_schema`` (a ``TypedDict``) adds state keys; a key annotated
    ``Annotated[T, reducer]`` merges updates with ``reducer(old, new)``, any other key
    is replaced by its update. Keys starting with ``_`` are private: saved and visible
    to hooks, but not part of the state returned to callers. ``tools`` adds tools to
    the agent. ``name`` defaults to the class name and must be unique in an agent.

    Example::

        class CountCalls(AgentMiddleware):
            state_schema = CountState          # TypedDict with model_calls: int

            def before_model(self, state, runtime):
                return {"model_calls": state.get("model_calls", 0) + 1}
    """

    state_schema: type | None = None
    tools: Sequence[Tool] = ()
    pure_hooks: frozenset[str] = frozenset()
    """Node hooks that only read state and return an update (no I/O, no side effects).

    Their step is saved in the same commit as the step after it, which saves a commit
    per step. Leave empty unless you are sure; a hook that calls ``interrupt()`` can
    still be pure.
    """

    @property
    def name(self) -> str:
        """The middleware's name: the class name unless a subclass sets its own."""
        return getattr(self, "_name", None) or type(self).__name__

    @name.setter
    def name(self, value: str) -> None:
        self._name = value

    # Node hooks ---------------------------------------------------------------
    def before_agent(self, state: dict[str, Any], runtime: Runtime) -> StateUpdate:
        """Runs once when a run starts with new input, before anything else."""
        return None

    def before_model(self, state: dict[str, Any], runtime: Runtime) -> StateUpdate:
        """Runs before each model call."""
        return None

    def after_model(self, state: dict[str, Any], runtime: Runtime) -> StateUpdate:
        """Runs after each model call, before its tool calls run."""
        return None

    def after_agent(self, state: dict[str, Any], runtime: Runtime) -> StateUpdate:
        """Runs once when the agent has its final answer."""
        return None

    async def abefore_agent(self, state: dict[str, Any], runtime: Runtime) -> StateUpdate:
        """Async twin of :meth:`before_agent`."""
        return None

    async def abefore_model(self, state: dict[str, Any], runtime: Runtime) -> StateUpdate:
        """Async twin of :meth:`before_model`."""
        return None

    async def aafter_model(self, state: dict[str, Any], runtime: Runtime) -> StateUpdate:
        """Async twin of :meth:`after_model`."""
        return None

    async def aafter_agent(self, state: dict[str, Any], runtime: Runtime) -> StateUpdate:
        """Async twin of :meth:`after_agent`."""
        return None

    # Wrap hooks ---------------------------------------------------------------
    def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse | AIMessage:
        """Surround the model call; call ``handler(request)`` to call the model."""
        return handler(request)

    async def awrap_model_call(
        self, request: ModelRequest, handler: AsyncModelHandler
    ) -> ModelResponse | AIMessage:
        """Async twin of :meth:`wrap_model_call`."""
        return await handler(request)

    def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolMessage:
        """Surround one tool call; call ``handler(request)`` to run the tool."""
        return handler(request)

    async def awrap_tool_call(self, request: ToolCallRequest, handler: AsyncToolHandler) -> ToolMessage:
        """Async twin of :meth:`wrap_tool_call`."""
        return await handler(request)

    # handrail extensions --------------------------------------------------------
    def bind(self, tools: Mapping[str, Tool]) -> None:
        """Called once by ``create_agent`` with the agent's tools, to check the config."""
        return None

    def review_policies(self) -> Policies | None:
        """The review policies this middleware holds, if it is the agent's review gate.

        ``HumanInTheLoopMiddleware`` returns its parsed ``interrupt_on``; the run loop then
        enforces them where tools run (``handrail.review``). An agent has at most one gate.
        """
        return None

    def validate_resume(self, value: Any, resume: Any, context: ResumeContext) -> Any:
        """Check an answer to an interrupt this middleware raised, before it is saved.

        ``value`` is the interrupt's value, ``resume`` the answer. Return the answer to
        store (possibly normalised) or raise a ``ValueError`` subclass saying what was
        wrong; a refused answer leaves the thread unchanged (SPEC rule 5).
        """
        return resume


_HOOK_PAIRS = {
    "before_agent": "abefore_agent",
    "before_model": "abefore_model",
    "after_model": "aafter_model",
    "after_agent": "aafter_agent",
    "wrap_model_call": "awrap_model_call",
    "wrap_tool_call": "awrap_tool_call",
}


def hook_is_defined(middleware: AgentMiddleware, hook: str) -> tuple[bool, bool]:
    """Whether ``middleware`` overrides the sync and the async version of ``hook``."""
    cls = type(middleware)
    sync_defined = getattr(cls, hook) is not getattr(AgentMiddleware, hook)
    async_name = _HOOK_PAIRS[hook]
    async_defined = getattr(cls, async_name) is not getattr(AgentMiddleware, async_name)
    return sync_defined, async_defined
