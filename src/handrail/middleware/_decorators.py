"""Middleware from plain functions: ``@before_model``, ``@wrap_tool_call``, ``@dynamic_prompt``...

Each decorator turns a function into an :class:`~handrail.AgentMiddleware` instance with
that one hook, named after the function (or ``name=``). ``async def`` functions become
the async hook (``abefore_model`` ...), which sync runs use too. Options, as in
LangChain: ``state_schema`` (state keys the hook reads or writes), ``tools`` (tools the
middleware brings), ``can_jump_to`` on node hooks (the ``jump_to`` targets the hook may
return: ``"model"``, ``"tools"``, ``"end"``; they show as edges of ``agent.get_graph()``)
and ``name``.

Example::

    @before_model(can_jump_to=["end"])
    def stop_after_ten(state, runtime):
        if len(state["messages"]) > 10:
            return {"messages": [AIMessage("That is enough.")], "jump_to": "end"}
        return None

    @dynamic_prompt
    def by_user(request):
        return f"You help {request.runtime.context['user_name']}."

    agent = create_agent(model, tools, middleware=[stop_after_ten, by_user])
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from handrail.errors import ConfigurationError
from handrail.messages import BaseMessage
from handrail.middleware.types import AgentMiddleware, ModelRequest

__all__ = [
    "after_agent",
    "after_model",
    "before_agent",
    "before_model",
    "dynamic_prompt",
    "hook_config",
    "wrap_model_call",
    "wrap_tool_call",
]

F = TypeVar("F", bound=Callable[..., Any])
JUMP_TARGETS = ("model", "tools", "end")


def hook_config(*, can_jump_to: Sequence[str] | None = None) -> Callable[[F], F]:
    """Declare the ``jump_to`` targets of a hook method of a middleware class.

    Example::

        class Guard(AgentMiddleware):
            @hook_config(can_jump_to=["end"])
            def before_model(self, state, runtime):
                ...
    """

    def mark(func: F) -> F:
        if can_jump_to is not None:
            func.__can_jump_to__ = _jump_targets(can_jump_to, getattr(func, "__name__", "hook"))  # type: ignore[attr-defined]
        return func

    return mark


def _jump_targets(targets: Sequence[str], where: str) -> list[str]:
    if isinstance(targets, str) or not all(t in JUMP_TARGETS for t in targets):
        raise ConfigurationError(
            f"{where}: can_jump_to must be a list of {list(JUMP_TARGETS)}, got {targets!r}"
        )
    return list(targets)


def _build(
    func: Callable[..., Any],
    hook: str,
    method: Callable[..., Any],
    *,
    state_schema: type | None,
    tools: Sequence[Any] | None,
    name: str | None,
    can_jump_to: Sequence[str] | None = None,
) -> AgentMiddleware:
    if not callable(func):
        raise ConfigurationError(f"@{hook} decorates a function, got {func!r}")
    class_name = name or getattr(func, "__name__", None) or f"{hook}_middleware"
    targets = can_jump_to if can_jump_to is not None else getattr(func, "__can_jump_to__", None)
    if targets:
        method.__can_jump_to__ = _jump_targets(targets, class_name)  # type: ignore[attr-defined]
    attribute = ("a" + hook) if inspect.iscoroutinefunction(func) else hook
    cls = type(
        class_name,
        (AgentMiddleware,),
        {
            attribute: method,
            "state_schema": state_schema,
            "tools": list(tools or ()),
            "__doc__": func.__doc__,
            "__module__": getattr(func, "__module__", __name__),
        },
    )
    middleware: AgentMiddleware = cls()
    return middleware


def _node_hook(hook: str) -> Callable[..., Any]:
    def decorator(
        func: Callable[..., Any] | None = None,
        *,
        state_schema: type | None = None,
        tools: Sequence[Any] | None = None,
        can_jump_to: Sequence[str] | None = None,
        name: str | None = None,
    ) -> Any:
        def make(f: Callable[..., Any]) -> AgentMiddleware:
            async def async_method(self: AgentMiddleware, state: Any, runtime: Any) -> Any:
                return await f(state, runtime)

            def method(self: AgentMiddleware, state: Any, runtime: Any) -> Any:
                return f(state, runtime)

            chosen = async_method if inspect.iscoroutinefunction(f) else method
            return _build(
                f, hook, chosen, state_schema=state_schema, tools=tools, name=name, can_jump_to=can_jump_to
            )

        return make(func) if func is not None else make

    decorator.__name__ = hook
    decorator.__doc__ = (
        f"Make a middleware whose ``{hook}`` hook is the decorated ``(state, runtime)`` function.\n\n"
        "Use bare or with ``state_schema=``, ``tools=``, ``can_jump_to=`` and ``name=``."
    )
    return decorator


before_agent = _node_hook("before_agent")
before_model = _node_hook("before_model")
after_model = _node_hook("after_model")
after_agent = _node_hook("after_agent")


def _wrap_hook(hook: str) -> Callable[..., Any]:
    def decorator(
        func: Callable[..., Any] | None = None,
        *,
        state_schema: type | None = None,
        tools: Sequence[Any] | None = None,
        name: str | None = None,
    ) -> Any:
        def make(f: Callable[..., Any]) -> AgentMiddleware:
            async def async_method(self: AgentMiddleware, request: Any, handler: Any) -> Any:
                return await f(request, handler)

            def method(self: AgentMiddleware, request: Any, handler: Any) -> Any:
                return f(request, handler)

            chosen = async_method if inspect.iscoroutinefunction(f) else method
            return _build(f, hook, chosen, state_schema=state_schema, tools=tools, name=name)

        return make(func) if func is not None else make

    decorator.__name__ = hook
    decorator.__doc__ = (
        f"Make a middleware whose ``{hook}`` hook is the decorated ``(request, handler)`` function.\n\n"
        "Use bare or with ``state_schema=``, ``tools=`` and ``name=``."
    )
    return decorator


wrap_model_call = _wrap_hook("wrap_model_call")
wrap_tool_call = _wrap_hook("wrap_tool_call")


def dynamic_prompt(func: Callable[..., Any] | None = None) -> Any:
    """Make a middleware that sets the system prompt of each model call from a function.

    The function takes the :class:`~handrail.ModelRequest` and returns the prompt, as a
    string or a ``SystemMessage``; ``async def`` works too.

    Example::

        @dynamic_prompt
        def concise_when_long(request):
            if len(request.state["messages"]) > 10:
                return "Be concise."
            return "You are a helpful assistant."
    """

    def make(f: Callable[..., Any]) -> AgentMiddleware:
        def prompt_of(value: Any) -> str:
            return value.text if isinstance(value, BaseMessage) else str(value)

        async def async_method(self: AgentMiddleware, request: ModelRequest, handler: Any) -> Any:
            return await handler(request.override(system_prompt=prompt_of(await f(request))))

        def method(self: AgentMiddleware, request: ModelRequest, handler: Any) -> Any:
            return handler(request.override(system_prompt=prompt_of(f(request))))

        chosen = async_method if inspect.iscoroutinefunction(f) else method
        return _build(f, "wrap_model_call", chosen, state_schema=None, tools=None, name=None)

    return make(func) if func is not None else make
