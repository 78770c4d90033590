"""The Chat Completions wire format: handrail messages to request JSON, and completions
and stream chunks back to handrail messages. Pure functions; no client, no I/O."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.completion_usage import CompletionUsage

from handrail.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    InvalidToolCall,
    ToolCall,
    ToolCallChunk,
    ToolMessage,
    new_id,
)
from handrail.models._wire import (
    ToolCallAssembler,
    content_text,
    parse_tool_call,
    preview,
    tool_choice_name,
)
from handrail.models.errors import ModelResponseError

__all__ = [
    "StreamReader",
    "from_openai_completion",
    "openai_tool_choice",
    "to_openai_messages",
    "usage_metadata",
]


# Conversion: handrail -> OpenAI ----------------------------------------------------------------
def openai_tool_choice(choice: Any) -> Any:
    """handrail's ``tool_choice`` (``"auto"``, ``"any"``, a tool name, ...) for Chat Completions."""
    name = tool_choice_name(choice)
    if name is not None:
        return {"type": "function", "function": {"name": name}}
    if choice == "any":
        return "required"
    return choice


def to_openai_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """handrail messages as Chat Completions messages.

    An AI message's tool calls (and malformed ones, with their raw arguments) become
    ``tool_calls``; each ToolMessage becomes a ``tool`` message answering its call id.

    Example::

        to_openai_messages([SystemMessage("Be brief."), HumanMessage("hi")])
        # [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, AIMessage):
            out.append(_assistant_message(message))
        elif isinstance(message, ToolMessage):
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": message.tool_call_id,
                    "content": _tool_result_text(message),
                }
            )
        elif message.type == "system":
            out.append({"role": "system", "content": content_text(message.content)})
        elif message.type == "human":
            out.append({"role": "user", "content": _user_content(message.content)})
        else:
            raise ValueError(f"cannot send a {type(message).__name__} to an OpenAI model")
    return out


def _assistant_message(message: AIMessage) -> dict[str, Any]:
    calls = [
        {
            "id": call["id"],
            "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call["args"], ensure_ascii=False)},
        }
        for call in message.tool_calls
    ]
    calls += [
        {
            "id": bad.get("id"),
            "type": "function",
            "function": {"name": bad.get("name") or "", "arguments": bad.get("args") or ""},
        }
        for bad in message.invalid_tool_calls
    ]
    text = content_text(message.content)
    result: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if calls:
        result["tool_calls"] = calls
    return result


def _user_content(content: str | list[Any]) -> Any:
    if isinstance(content, str):
        return content
    return [{"type": "text", "text": block} if isinstance(block, str) else block for block in content]


def _tool_result_text(message: ToolMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    text = content_text(message.content)
    return text if text or not message.content else json.dumps(message.content, ensure_ascii=False)


# Conversion: OpenAI -> handrail ----------------------------------------------------------------
def usage_metadata(usage: CompletionUsage | None) -> dict[str, Any] | None:
    """Token counts in handrail's shape: ``{"input_tokens", "output_tokens", "total_tokens"}``
    plus cache and reasoning details when the server reports them."""
    if usage is None:
        return None
    result: dict[str, Any] = {
        "input_tokens": usage.prompt_tokens or 0,
        "output_tokens": usage.completion_tokens or 0,
        "total_tokens": usage.total_tokens or (usage.prompt_tokens or 0) + (usage.completion_tokens or 0),
    }
    prompt_details = usage.prompt_tokens_details
    if prompt_details is not None and prompt_details.cached_tokens is not None:
        result["input_token_details"] = {"cache_read": prompt_details.cached_tokens}
    completion_details = usage.completion_tokens_details
    if completion_details is not None and completion_details.reasoning_tokens is not None:
        result["output_token_details"] = {"reasoning": completion_details.reasoning_tokens}
    return result


def from_openai_completion(completion: ChatCompletion) -> AIMessage:
    """The first choice of a chat completion as an :class:`AIMessage`.

    Tool calls whose arguments are not a JSON object become ``invalid_tool_calls`` (the run
    answers each with an error the model can correct). The message gets a fresh id; the
    provider's completion id is ``response_metadata["id"]`` (local servers reuse ids).
    """
    choice = completion.choices[0]
    message = choice.message
    tool_calls: list[ToolCall] = []
    invalid: list[InvalidToolCall] = []
    for call in message.tool_calls or []:
        function = getattr(call, "function", None)
        if function is None:  # a custom (non-function) tool call: handrail never offers those
            continue
        parse_tool_call(
            getattr(function, "name", None),
            getattr(function, "arguments", None),
            getattr(call, "id", None),  # some local servers leave it out; the run assigns one
            into=tool_calls,
            invalid=invalid,
        )
    additional: dict[str, Any] = {}
    if message.refusal:
        additional["refusal"] = message.refusal
    extra = message.model_extra or {}
    reasoning = extra.get("reasoning_content") or extra.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        additional["reasoning_content"] = reasoning
    metadata: dict[str, Any] = {
        "model_provider": "openai",
        "model_name": completion.model,
        "finish_reason": choice.finish_reason,
        "id": completion.id,
    }
    if completion.system_fingerprint:
        metadata["system_fingerprint"] = completion.system_fingerprint
    return AIMessage(
        content=message.content or "",
        id=new_id("run-"),
        additional_kwargs=additional,
        response_metadata=metadata,
        tool_calls=tool_calls,
        invalid_tool_calls=invalid,
        usage_metadata=usage_metadata(completion.usage),
    )


class StreamReader:
    """Turns ``ChatCompletionChunk`` events into handrail chunks (no I/O: both the sync
    and the async stream feed it)."""

    def __init__(self, model_name: str) -> None:
        self.id = new_id("run-")
        self.calls = ToolCallAssembler()
        self.events = 0
        self.metadata: dict[str, Any] = {"model_provider": "openai", "model_name": model_name}
        self.usage: dict[str, Any] | None = None
        self.extras: dict[str, str] = {}

    def feed(self, event: ChatCompletionChunk) -> list[AIMessageChunk]:
        if not isinstance(event, ChatCompletionChunk):
            raise ModelResponseError(
                f"the stream sent something that is not a chat completion chunk: {preview(event)}",
                provider="openai",
            )
        self.events += 1
        if event.model:
            self.metadata["model_name"] = event.model
        if event.id:
            self.metadata["id"] = event.id
        if event.system_fingerprint:
            self.metadata["system_fingerprint"] = event.system_fingerprint
        if event.usage is not None:
            self.usage = usage_metadata(event.usage)
        out: list[AIMessageChunk] = []
        for choice in event.choices or []:
            # lenient reads: compatible servers leave out fields the schema calls required
            if (getattr(choice, "index", 0) or 0) != 0:
                continue  # other choices (n > 1) are not asked for
            delta = getattr(choice, "delta", None)
            if delta is not None:
                out += self._delta(delta)
            if getattr(choice, "finish_reason", None):
                self.metadata["finish_reason"] = choice.finish_reason
        return out

    def _delta(self, delta: Any) -> list[AIMessageChunk]:
        pieces: list[ToolCallChunk] = []
        for call in getattr(delta, "tool_calls", None) or []:
            function = getattr(call, "function", None)
            piece = self.calls.delta(
                getattr(call, "index", None),
                getattr(call, "id", None),
                getattr(function, "name", None),
                getattr(function, "arguments", None),
            )
            if piece is not None:
                pieces.append(piece)
        refusal = getattr(delta, "refusal", None)
        if refusal:
            self.extras["refusal"] = self.extras.get("refusal", "") + refusal
        extra = getattr(delta, "model_extra", None) or {}
        reasoning = extra.get("reasoning_content") or extra.get("reasoning")
        if isinstance(reasoning, str):
            self.extras["reasoning_content"] = self.extras.get("reasoning_content", "") + reasoning
        content = getattr(delta, "content", None)
        if content or pieces:
            return [AIMessageChunk(content=content or "", id=self.id, tool_call_chunks=pieces)]
        return []

    def finish(self) -> AIMessageChunk:
        """The last chunk: finish reason, model name, usage and any refusal or reasoning."""
        if not self.events:
            raise ModelResponseError(
                "the stream ended without a single chunk; does this server stream Chat Completions?",
                provider="openai",
            )
        return AIMessageChunk(
            content="",
            id=self.id,
            additional_kwargs=dict(self.extras),
            response_metadata=dict(self.metadata),
            usage_metadata=self.usage,
        )
