"""``SummarizationMiddleware``: when the conversation grows too long, summarise its start.

As in LangChain: ``SummarizationMiddleware(model, trigger=..., keep=("messages", 20),
token_counter=..., summary_prompt=..., trim_tokens_to_summarize=4000)``. ``trigger`` is
a context size - ``("messages", 50)``, ``("tokens", 4000)`` or ``("fraction", 0.8)`` of
the model's ``max_input_tokens`` - or a list of them (any one triggers). Before a
model call that finds the conversation past the trigger, the older messages are sent
to ``model`` to be summarised, and the state's messages become one ``HumanMessage``
holding the summary (marked ``additional_kwargs["lc_source"] = "summarization"``)
followed by the messages ``keep`` keeps.

The cut never separates a tool call from its result: when it would fall between an
``AIMessage`` and the ``ToolMessage`` that answers one of its calls, it moves back to
keep the ``AIMessage`` too. The summary is a step of its own, saved like any other, so a
resumed thread does not summarise twice.

Example::

    summarize = SummarizationMiddleware("openai:gpt-5.4-mini", trigger=("tokens", 4000))
    agent = create_agent(model, tools, middleware=[summarize])
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from handrail.context import Runtime
from handrail.errors import ConfigurationError
from handrail.messages import (
    REMOVE_ALL_MESSAGES,
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from handrail.middleware.types import AgentMiddleware
from handrail.models import init_chat_model
from handrail.models.base import ChatModel

__all__ = ["DEFAULT_SUMMARY_PROMPT", "SummarizationMiddleware", "count_tokens_approximately"]

ContextSize = tuple[str, float]
TokenCounter = Callable[[Sequence[BaseMessage]], int]

DEFAULT_SUMMARY_PROMPT = """You are condensing the history of a conversation between a user and an \
AI agent that uses tools. The history below will be replaced by what you write, so keep \
everything the agent needs to carry on without repeating work:

- the user's goal, in their own terms;
- what has been done so far: decisions taken and why, tool calls made and what they \
returned, options ruled out;
- files, records or other artifacts created or changed, by name;
- what is left to do.

Write only the condensed history, with no preamble.

<messages>
{messages}
</messages>"""
"""The prompt the summarising model gets; ``{messages}`` is replaced by the messages."""

SUMMARY_SOURCE = "summarization"


def count_tokens_approximately(messages: Sequence[BaseMessage]) -> int:
    """About four characters a token, plus a few tokens a message: a model-free estimate."""
    total = 0.0
    for message in messages:
        text = (
            message.content if isinstance(message.content, str) else json.dumps(message.content, default=str)
        )
        total += len(text) / 4 + 3
        for call in getattr(message, "tool_calls", ()) or ():
            total += len(json.dumps(call.get("args", {}), default=str)) / 4 + len(call.get("name", "")) / 4
    return int(total + 0.999)


def _size(value: Any, label: str) -> ContextSize:
    if not (isinstance(value, tuple) and len(value) == 2 and value[0] in ("messages", "tokens", "fraction")):
        raise ConfigurationError(
            f"{label} must be ('messages', n), ('tokens', n) or ('fraction', f), got {value!r}"
        )
    kind, amount = value
    if kind == "fraction" and not 0 < amount <= 1:
        raise ConfigurationError(f"{label}: a fraction must be in (0, 1], got {amount!r}")
    if kind != "fraction" and (not isinstance(amount, int) or amount < 0):
        raise ConfigurationError(f"{label}: {kind} must be a non-negative integer, got {amount!r}")
    return (kind, amount)


class SummarizationMiddleware(AgentMiddleware):
    """Summarise the older part of the conversation when it passes ``trigger``."""

    def __init__(
        self,
        model: str | ChatModel,
        *,
        trigger: ContextSize | list[ContextSize] | None = None,
        keep: ContextSize = ("messages", 20),
        token_counter: TokenCounter = count_tokens_approximately,
        summary_prompt: str = DEFAULT_SUMMARY_PROMPT,
        trim_tokens_to_summarize: int | None = 4000,
        **deprecated: Any,
    ) -> None:
        if "max_tokens_before_summary" in deprecated:
            warnings.warn(
                "max_tokens_before_summary is deprecated; use trigger=('tokens', n)", DeprecationWarning, 2
            )
            value = deprecated.pop("max_tokens_before_summary")
            trigger = trigger if trigger is not None or value is None else ("tokens", value)
        if "messages_to_keep" in deprecated:
            warnings.warn("messages_to_keep is deprecated; use keep=('messages', n)", DeprecationWarning, 2)
            keep = ("messages", deprecated.pop("messages_to_keep"))
        if deprecated:
            raise ConfigurationError(
                f"unexpected argument(s) {sorted(deprecated)} for SummarizationMiddleware"
            )
        self.model = model if isinstance(model, ChatModel) else init_chat_model(model)
        triggers = [] if trigger is None else trigger if isinstance(trigger, list) else [trigger]
        self.triggers = [_size(t, "trigger") for t in triggers]
        self.keep = _size(keep, "keep")
        if "{messages}" not in summary_prompt:
            raise ConfigurationError("summary_prompt must contain the {messages} placeholder")
        uses_fraction = any(kind == "fraction" for kind, _ in [*self.triggers, self.keep])
        if uses_fraction and not isinstance(getattr(self.model, "max_input_tokens", None), int):
            raise ConfigurationError(
                "a ('fraction', f) trigger or keep needs the model's max_input_tokens; use ('tokens', n)"
            )
        self.token_counter = token_counter
        self.summary_prompt = summary_prompt
        self.trim_tokens_to_summarize = trim_tokens_to_summarize

    # Deciding -------------------------------------------------------------------------
    def _tokens(self, fraction: float) -> int:
        return int(getattr(self.model, "max_input_tokens", 0) * fraction)

    def _triggered(self, messages: list[BaseMessage]) -> bool:
        for kind, amount in self.triggers:
            if kind == "messages" and len(messages) >= amount:
                return True
            if kind in ("tokens", "fraction"):
                limit = amount if kind == "tokens" else self._tokens(amount)
                if self.token_counter(messages) >= limit:
                    return True
        return False

    def _cutoff(self, messages: list[BaseMessage]) -> int:
        kind, amount = self.keep
        if kind == "messages":
            target = max(len(messages) - int(amount), 0)
        else:
            budget = amount if kind == "tokens" else self._tokens(amount)
            target = len(messages)
            while target > 0 and self.token_counter(messages[target - 1 :]) <= budget:
                target -= 1
        return _safe_cutoff(messages, target)

    # The hook -------------------------------------------------------------------------
    def _plan(self, state: dict[str, Any]) -> tuple[list[BaseMessage], list[BaseMessage]] | None:
        messages: list[BaseMessage] = list(state.get("messages", []))
        if not self.triggers or not self._triggered(messages):
            return None
        cutoff = self._cutoff(messages)
        if cutoff <= 0:
            return None
        return messages[:cutoff], messages[cutoff:]

    def _prompt(self, older: list[BaseMessage]) -> list[BaseMessage]:
        if self.trim_tokens_to_summarize is not None:
            start = 0
            while (
                start < len(older) - 1 and self.token_counter(older[start:]) > self.trim_tokens_to_summarize
            ):
                start += 1
            older = older[_safe_cutoff(older, start) :] or older[-1:]
        return [HumanMessage(self.summary_prompt.replace("{messages}", _transcript(older)))]

    def _update(self, summary: AIMessage, kept: list[BaseMessage]) -> dict[str, Any]:
        note = HumanMessage(
            f"Here is a summary of the conversation to date:\n\n{summary.text}",
            additional_kwargs={"lc_source": SUMMARY_SOURCE},
        )
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), note, *kept]}

    def before_model(self, state: dict[str, Any], runtime: Runtime) -> dict[str, Any] | None:
        plan = self._plan(state)
        if plan is None:
            return None
        older, kept = plan
        return self._update(self.model.invoke(self._prompt(older)), kept)

    async def abefore_model(self, state: dict[str, Any], runtime: Runtime) -> dict[str, Any] | None:
        plan = self._plan(state)
        if plan is None:
            return None
        older, kept = plan
        return self._update(await self.model.ainvoke(self._prompt(older)), kept)


def _safe_cutoff(messages: list[BaseMessage], cutoff: int) -> int:
    """Move ``cutoff`` back so no kept ``ToolMessage`` loses the ``AIMessage`` that called it."""
    if cutoff <= 0 or cutoff >= len(messages):
        return max(cutoff, 0)
    while True:
        kept_results = {m.tool_call_id for m in messages[cutoff:] if isinstance(m, ToolMessage)}
        callers = [
            index
            for index, message in enumerate(messages[:cutoff])
            if isinstance(message, AIMessage) and any(c.get("id") in kept_results for c in message.tool_calls)
        ]
        if not callers:
            return cutoff
        cutoff = min(callers)


def _transcript(messages: list[BaseMessage]) -> str:
    lines = []
    for message in messages:
        role = {"human": "Human", "ai": "AI", "tool": "Tool", "system": "System"}.get(
            message.type, message.type
        )
        line = f"{role}: {message.text}"
        for call in getattr(message, "tool_calls", ()) or ():
            line += f"\n  [called {call['name']} with {json.dumps(call.get('args', {}), default=str)}]"
        lines.append(line)
    return "\n".join(lines)
