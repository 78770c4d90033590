"""The agent's steps and the order they run in.

::

    input -> before_agent* -> before_model* -> model -> after_model* --tool calls--> tools
                                  ^                                                  |
                                  +--------------------------------------------------+
             after_model* --no tool calls--> after_agent* -> (end)

After the model's turn, calls that hooks answered themselves (every call has a
ToolMessage) send the model round again, unless one of them was the structured-output
answer, which ends the run.

Each hook a middleware defines is its own step, named ``"<middleware>.<hook>"``;
``before_*`` steps follow the middleware list, ``after_*`` steps run it backwards. A
hook may return ``jump_to`` (``"model"``, ``"tools"`` or ``"end"``) to change what runs
next.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from handrail.messages import BaseMessage
from handrail.middleware.types import AgentMiddleware, hook_is_defined
from handrail.runtime._pending import pending_tool_calls

__all__ = ["HookStep", "Plan"]

MODEL = "model"
TOOLS = "tools"
JUMP_TARGETS = ("model", "tools", "end")


class HookStep(NamedTuple):
    """A node-hook step: which middleware, which hook."""

    name: str
    middleware: AgentMiddleware
    hook: str


class Plan:
    """Computes, from a finished step and the state, which steps run next."""

    def __init__(self, middleware: Sequence[AgentMiddleware]) -> None:
        def chain(hook: str, ordered: Sequence[AgentMiddleware]) -> list[HookStep]:
            return [HookStep(f"{m.name}.{hook}", m, hook) for m in ordered if any(hook_is_defined(m, hook))]

        self.before_agent = chain("before_agent", middleware)
        self.before_model = chain("before_model", middleware)
        self.after_model = chain("after_model", list(reversed(middleware)))
        self.after_agent = chain("after_agent", list(reversed(middleware)))
        self.hooks: dict[str, HookStep] = {
            step.name: step
            for step in (*self.before_agent, *self.before_model, *self.after_model, *self.after_agent)
        }
        self.step_names = frozenset({MODEL, TOOLS, *self.hooks})
        self.final_tools: frozenset[str] = frozenset()
        """Tools whose answered call ends the run (the structured-output tools)."""

    def start(self) -> tuple[str, ...]:
        """The first step of a run that starts from new input."""
        return self._first(self.before_agent) or self._model_turn()

    def after(self, step: str, messages: list[BaseMessage], jump_to: str | None = None) -> tuple[str, ...]:
        """The step(s) due after ``step`` finished, given the state's messages now."""
        if jump_to == "model":
            return self._model_turn()
        if jump_to == "tools":
            return (TOOLS,)
        if jump_to == "end":
            return self._finish(step)
        if step == MODEL:
            return self._first(self.after_model) or self._route(messages)
        if step == TOOLS:
            return self._model_turn()
        for chain, then in (
            (self.before_agent, self._model_turn),
            (self.before_model, lambda: (MODEL,)),
            (self.after_model, lambda: self._route(messages)),
            (self.after_agent, lambda: ()),
        ):
            names = [s.name for s in chain]
            if step in names:
                position = names.index(step)
                return (names[position + 1],) if position + 1 < len(names) else then()
        return ()

    def _first(self, chain: list[HookStep]) -> tuple[str, ...]:
        return (chain[0].name,) if chain else ()

    def _model_turn(self) -> tuple[str, ...]:
        return self._first(self.before_model) or (MODEL,)

    def _route(self, messages: list[BaseMessage]) -> tuple[str, ...]:
        last, calls = pending_tool_calls(messages)
        if calls:
            return (TOOLS,)
        if (
            last is not None
            and last.tool_calls
            and not any(c["name"] in self.final_tools for c in last.tool_calls)
        ):
            # every call was answered without running (a hook's own ToolMessages, such as a
            # call limit's): the model reads the answers, as in LangChain
            return self._model_turn()
        return self._first(self.after_agent)

    def _finish(self, step: str) -> tuple[str, ...]:
        names = [s.name for s in self.after_agent]
        if step in names:
            position = names.index(step)
            return (names[position + 1],) if position + 1 < len(names) else ()
        return self._first(self.after_agent)
