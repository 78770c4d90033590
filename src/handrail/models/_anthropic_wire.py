"""The Messages API wire format: handrail messages to request JSON, and messages and
stream events back to handrail messages. Pure functions; no client, no I/O."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from anthropic.types import (
    InputJSONDelta,
    Message,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RedactedThinkingBlock,
    SignatureDelta,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolUseBlock,
)

from handrail.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    InvalidToolCall,
    ToolCall,
    ToolMessage,
    new_id,
)
from handrail.models._wire import ToolCallAssembler, content_text, tool_choice_name, tool_parts
from handrail.models.base import ToolSpec
from handrail.models.errors import ModelResponseError

__all__ = [
    "StreamReader",
    "anthropic_tool_choice",
    "from_anthropic_message",
    "system_field",
    "to_anthropic_messages",
    "to_anthropic_tool",
    "usage_metadata",
]


# Conversion: handrail -> Anthropic ----------------------------------------------------------
def to_anthropic_tool(spec: ToolSpec) -> dict[str, Any]:
    """A handrail tool spec as a Messages API tool (``input_schema`` for ``parameters``).

    A spec already in Anthropic's shape (with ``input_schema``) passes as is.
    """
    if "input_schema" in spec:
        return dict(spec)
    name, description, parameters = tool_parts(spec)
    tool: dict[str, Any] = {"name": name, "input_schema": parameters}
    if description:
        tool["description"] = description
    return tool


def anthropic_tool_choice(choice: Any) -> dict[str, Any] | None:
    """handrail's ``tool_choice`` (``"auto"``, ``"any"``, a tool name, ...) for the Messages API."""
    if choice is None:
        return None
    if isinstance(choice, Mapping):
        return dict(choice)
    name = tool_choice_name(choice)
    if name is not None:
        return {"type": "tool", "name": name}
    if choice in ("any", "required"):
        return {"type": "any"}
    return {"type": str(choice)}  # "auto" | "none"


def system_field(system: Sequence[BaseMessage]) -> str | list[dict[str, Any]] | None:
    """The ``system`` request field from the system messages (joined; blocks kept if any)."""
    if not system:
        return None
    if all(isinstance(m.content, str) for m in system):
        return "\n\n".join(m.content for m in system if m.content) or None  # type: ignore[misc]
    blocks: list[dict[str, Any]] = []
    for message in system:
        blocks += [b for b in _blocks(message.content) if b.get("type") == "text"]
    return blocks or None


def to_anthropic_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """Conversation messages (no system ones) as Messages API turns.

    AI tool calls become ``tool_use`` blocks; ToolMessages become ``tool_result`` blocks
    (``is_error`` when ``status="error"``); consecutive turns of one role merge into one,
    so all results of a turn travel together, followed by any new user text.

    Example::

        to_anthropic_messages([HumanMessage("hi")])   # [{"role": "user", "content": "hi"}]
    """
    turns: list[dict[str, Any]] = []
    for message in messages:
        content: str | list[dict[str, Any]]
        if isinstance(message, AIMessage):
            role, content = "assistant", _assistant_blocks(message)
            if not content:
                continue  # the API refuses empty turns
        elif isinstance(message, ToolMessage):
            role, content = "user", [_tool_result(message)]
        elif message.type == "human":
            role = "user"
            content = message.content if isinstance(message.content, str) else _blocks(message.content)
        else:
            raise ValueError(f"cannot send a {type(message).__name__} to an Anthropic model")
        if turns and turns[-1]["role"] == role:
            previous = turns[-1]["content"]
            turns[-1]["content"] = _as_blocks(previous) + _as_blocks(content)
        else:
            turns.append({"role": role, "content": content})
    return turns


def _as_blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return content


def _blocks(content: str | list[Any]) -> list[dict[str, Any]]:
    """Content as blocks: strings become text blocks, adjacent text merges, empty text goes,
    stream bookkeeping (``index``) is dropped."""
    out: list[dict[str, Any]] = []
    items = [content] if isinstance(content, str) else content
    for item in items:
        block = {"type": "text", "text": item} if isinstance(item, str) else dict(item)
        block.pop("index", None)
        if block.get("type") == "text":
            if not block.get("text"):
                continue
            if out and out[-1].get("type") == "text" and set(out[-1]) == {"type", "text"} == set(block):
                out[-1] = {"type": "text", "text": out[-1]["text"] + block["text"]}
                continue
        out.append(block)
    return out


def _assistant_blocks(message: AIMessage) -> list[dict[str, Any]]:
    blocks = [b for b in _blocks(message.content) if b.get("type") != "tool_use"]
    for call in message.tool_calls:
        blocks.append({"type": "tool_use", "id": call["id"], "name": call["name"], "input": call["args"]})
    for bad in message.invalid_tool_calls:
        # the API needs an object; the error result sent next tells the model what went wrong
        blocks.append({"type": "tool_use", "id": bad.get("id"), "name": bad.get("name") or "", "input": {}})
    return blocks


def _tool_result(message: ToolMessage) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
    if isinstance(message.content, str):
        if message.content:
            block["content"] = message.content
    else:
        content = _blocks(message.content)
        if content:
            block["content"] = content
    if message.status == "error":
        block["is_error"] = True
    return block


# Conversion: Anthropic -> handrail ----------------------------------------------------------
def usage_metadata(
    input_tokens: int | None,
    output_tokens: int | None,
    cache_read: int | None = None,
    cache_creation: int | None = None,
) -> dict[str, Any]:
    """Token counts in handrail's shape; ``input_tokens`` includes cached prompt tokens."""
    total_input = (input_tokens or 0) + (cache_read or 0) + (cache_creation or 0)
    result: dict[str, Any] = {
        "input_tokens": total_input,
        "output_tokens": output_tokens or 0,
        "total_tokens": total_input + (output_tokens or 0),
    }
    if cache_read is not None or cache_creation is not None:
        result["input_token_details"] = {
            "cache_read": cache_read or 0,
            "cache_creation": cache_creation or 0,
        }
    return result


def from_anthropic_message(message: Message) -> AIMessage:
    """A Messages API answer as an :class:`AIMessage`.

    Text blocks become the content (a string); thinking blocks, which must go back to the
    API unchanged, keep the content a list of blocks. ``tool_use`` blocks become
    ``tool_calls``. The message gets a fresh id; Anthropic's is ``response_metadata["id"]``.
    """
    tool_calls: list[ToolCall] = []
    invalid: list[InvalidToolCall] = []
    blocks: list[dict[str, Any]] = []
    plain = True
    for block in message.content:
        if isinstance(block, ToolUseBlock):
            if isinstance(block.input, dict):
                tool_calls.append(
                    ToolCall(name=block.name, args=dict(block.input), id=block.id, type="tool_call")
                )
            else:
                invalid.append(
                    InvalidToolCall(
                        name=block.name,
                        args=json.dumps(block.input),
                        id=block.id,
                        error="arguments must be a JSON object",
                        type="invalid_tool_call",
                    )
                )
        elif isinstance(block, TextBlock):
            blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ThinkingBlock):
            blocks.append({"type": "thinking", "thinking": block.thinking, "signature": block.signature})
            plain = False
        else:  # redacted thinking, server tool blocks: kept whole, to send back as they came
            blocks.append(block.model_dump(mode="json", exclude_none=True))
            plain = False
    usage = message.usage
    return AIMessage(
        content=content_text(blocks) if plain else blocks,
        id=new_id("run-"),
        response_metadata={
            "model_provider": "anthropic",
            "model_name": message.model,
            "finish_reason": message.stop_reason,
            "stop_reason": message.stop_reason,
            "stop_sequence": message.stop_sequence,
            "id": message.id,
        },
        tool_calls=tool_calls,
        invalid_tool_calls=invalid,
        usage_metadata=usage_metadata(
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_input_tokens,
            usage.cache_creation_input_tokens,
        )
        if usage is not None
        else None,
    )


class StreamReader:
    """Turns raw Messages stream events into handrail chunks (no I/O: both the sync and
    the async stream feed it).

    Text deltas and tool-input JSON pieces are passed on as they come; a thinking block
    is passed on whole when it ends, since its signature arrives last.
    """

    def __init__(self, model_name: str) -> None:
        self.id = new_id("run-")
        self.calls = ToolCallAssembler()
        self.started = False
        self.metadata: dict[str, Any] = {"model_provider": "anthropic", "model_name": model_name}
        self.usage: dict[str, int | None] = {}
        self.thinking: dict[int, dict[str, str]] = {}
        self.tool_inputs: dict[int, tuple[dict[str, Any], bool]] = {}

    def _chunk(self, **fields: Any) -> AIMessageChunk:
        return AIMessageChunk(id=self.id, **fields)

    def feed(self, event: Any) -> list[AIMessageChunk]:
        if isinstance(event, RawMessageStartEvent):
            self.started = True
            message = event.message
            self.metadata.update(model_name=message.model or self.metadata["model_name"], id=message.id)
            if message.usage is not None:
                self.usage.update(
                    input=message.usage.input_tokens,
                    output=message.usage.output_tokens,
                    cache_read=message.usage.cache_read_input_tokens,
                    cache_creation=message.usage.cache_creation_input_tokens,
                )
            return []
        if isinstance(event, RawContentBlockStartEvent):
            return self._block_start(event)
        if isinstance(event, RawContentBlockDeltaEvent):
            return self._block_delta(event)
        if isinstance(event, RawContentBlockStopEvent):
            return self._block_stop(event.index)
        if isinstance(event, RawMessageDeltaEvent):
            if event.delta.stop_reason is not None:
                self.metadata["finish_reason"] = self.metadata["stop_reason"] = event.delta.stop_reason
            if event.delta.stop_sequence is not None:
                self.metadata["stop_sequence"] = event.delta.stop_sequence
            usage = event.usage
            self.usage["output"] = usage.output_tokens
            for key, value in (
                ("input", usage.input_tokens),
                ("cache_read", usage.cache_read_input_tokens),
                ("cache_creation", usage.cache_creation_input_tokens),
            ):
                if value is not None:
                    self.usage[key] = value
        return []

    def _block_start(self, event: RawContentBlockStartEvent) -> list[AIMessageChunk]:
        block = event.content_block
        if isinstance(block, TextBlock):
            return [self._chunk(content=block.text)] if block.text else []
        if isinstance(block, ToolUseBlock):
            self.tool_inputs[event.index] = (dict(block.input or {}), False)
            piece = self.calls.delta(event.index, block.id, block.name, "")
            return [self._chunk(content="", tool_call_chunks=[piece])] if piece else []
        if isinstance(block, ThinkingBlock):
            self.thinking[event.index] = {"thinking": block.thinking, "signature": block.signature or ""}
            return []
        if isinstance(block, RedactedThinkingBlock):
            return [self._chunk(content=[block.model_dump(mode="json", exclude_none=True)])]
        return []

    def _block_delta(self, event: RawContentBlockDeltaEvent) -> list[AIMessageChunk]:
        delta = event.delta
        if isinstance(delta, TextDelta):
            return [self._chunk(content=delta.text)] if delta.text else []
        if isinstance(delta, InputJSONDelta):
            start_input, _ = self.tool_inputs.get(event.index, ({}, False))
            self.tool_inputs[event.index] = (start_input, True)
            piece = self.calls.delta(event.index, None, None, delta.partial_json)
            return [self._chunk(content="", tool_call_chunks=[piece])] if piece else []
        if isinstance(delta, (ThinkingDelta, SignatureDelta)):
            block = self.thinking.setdefault(event.index, {"thinking": "", "signature": ""})
            if isinstance(delta, ThinkingDelta):
                block["thinking"] += delta.thinking
            else:
                block["signature"] += delta.signature
        return []

    def _block_stop(self, index: int) -> list[AIMessageChunk]:
        if index in self.thinking:
            block = {"type": "thinking", **self.thinking.pop(index)}
            return [self._chunk(content=[block])]
        start_input, had_deltas = self.tool_inputs.pop(index, ({}, True))
        if not had_deltas and start_input:  # the whole input came with the block's start
            piece = self.calls.delta(index, None, None, json.dumps(start_input))
            return [self._chunk(content="", tool_call_chunks=[piece])] if piece else []
        return []

    def finish(self) -> AIMessageChunk:
        """The last chunk: stop reason, model name and usage."""
        if not self.started:
            raise ModelResponseError(
                "the stream ended without a message_start event; does this server stream the Messages API?",
                provider="anthropic",
            )
        usage = None
        if self.usage:
            usage = usage_metadata(
                self.usage.get("input"),
                self.usage.get("output"),
                self.usage.get("cache_read"),
                self.usage.get("cache_creation"),
            )
        return self._chunk(content="", response_metadata=dict(self.metadata), usage_metadata=usage)
