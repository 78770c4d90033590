"""ScriptedModel: a deterministic model for tests, demos and benchmarks."""

from __future__ import annotations

import re
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any

import orjson

from handrail.errors import HandrailError
from handrail.messages import AIMessage, AIMessageChunk, BaseMessage, ToolCallChunk, new_id
from handrail.models._common import AdapterModel, ModelCall

__all__ = ["ScriptExhaustedError", "ScriptedModel"]

Response = AIMessage | Mapping[str, Any] | Callable[[list[BaseMessage]], Any]

_TOKEN_RE = re.compile(r"\s*\S+|\s+")


class ScriptExhaustedError(HandrailError):
    """The :class:`ScriptedModel` was called more times than it has responses."""


class ScriptedModel(AdapterModel):
    """A model that answers from a script, one item per call.

    Each item is an :class:`AIMessage`, a dict ``{"content", "tool_calls": [{"name",
    "args", "id"?}]}`` (missing tool-call ids are generated), or a callable
    ``(messages) -> AIMessage | dict``. A call past the end raises
    :class:`ScriptExhaustedError`. ``.calls`` records every call's input messages.
    In ``"messages"`` stream mode the content arrives token by token.

    By default the script is one sequence shared by every call, whatever the thread: the
    right thing for a test that runs one conversation. With ``per_conversation=True``
    each conversation plays the script from its start: the reply to a call is the item
    whose position is the number of model (AI) messages the conversation already holds.
    Use it when one model object serves many threads (``handrail serve``, workers in
    other processes): the position comes from the conversation itself, so a thread
    resumed in another process, or ten threads at once, each get the next reply of
    their own.

    Example::

        model = ScriptedModel([
            {"content": "", "tool_calls": [{"name": "read_data", "args": {"table": "users"}}]},
            {"content": "There are 3 users."},
        ])
    """

    provider = "scripted"
    model_name = "scripted"

    def __init__(self, responses: Sequence[Response] = (), *, per_conversation: bool = False) -> None:
        if isinstance(responses, (str, bytes, Mapping)) or not isinstance(responses, Sequence):
            raise TypeError("ScriptedModel takes a list of responses (AIMessage, dict or callable)")
        for i, item in enumerate(responses):
            if not (isinstance(item, (AIMessage, Mapping)) or callable(item)):
                raise TypeError(
                    f"ScriptedModel response {i} must be an AIMessage, a dict or a callable, "
                    f"got {type(item).__name__}"
                )
        self.responses: list[Response] = list(responses)
        self.per_conversation = bool(per_conversation)
        self.calls: list[list[BaseMessage]] = []
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        """How many responses are left in the script (with ``per_conversation``: in a new
        conversation, so the script's length)."""
        return len(self.responses) - (0 if self.per_conversation else len(self.calls))

    def _next(self, messages: Sequence[BaseMessage]) -> AIMessage:
        with self._lock:
            if self.per_conversation:
                position = sum(1 for m in messages if isinstance(m, AIMessage))
                if position >= len(self.responses):
                    raise ScriptExhaustedError(
                        f"ScriptedModel ran out of responses: this conversation already holds "
                        f"{position} model replies and the script has {len(self.responses)}"
                    )
            else:
                position = len(self.calls)
                if position >= len(self.responses):
                    raise ScriptExhaustedError(
                        f"ScriptedModel ran out of responses: this is call {position + 1} but the "
                        f"script has {len(self.responses)}"
                    )
            self.calls.append(list(messages))
            item = self.responses[position]
        if callable(item) and not isinstance(item, (AIMessage, Mapping)):
            item = item(list(messages))
        return _to_message(item, position)

    def _invoke(self, call: ModelCall) -> AIMessage:
        return self._next(call.messages)

    async def _ainvoke(self, call: ModelCall) -> AIMessage:
        return self._next(call.messages)

    def _stream(self, call: ModelCall) -> Iterator[AIMessageChunk]:
        yield from _chunks(self._next(call.messages))

    async def _astream(self, call: ModelCall) -> AsyncIterator[AIMessageChunk]:
        for chunk in _chunks(self._next(call.messages)):
            yield chunk


def _to_message(item: Any, position: int) -> AIMessage:
    if isinstance(item, AIMessage):
        message = AIMessage(
            content=item.content,
            id=item.id,
            name=item.name,
            additional_kwargs=dict(item.additional_kwargs),
            response_metadata=dict(item.response_metadata),
            tool_calls=[dict(tc) for tc in item.tool_calls],  # type: ignore[misc]
            invalid_tool_calls=list(item.invalid_tool_calls),
            usage_metadata=item.usage_metadata,
        )
    elif isinstance(item, Mapping):
        unknown = set(item) - {"content", "tool_calls", "id"}
        if unknown:
            raise ValueError(
                f"ScriptedModel response {position} has unexpected key(s) {sorted(unknown)}; "
                "expected 'content' and 'tool_calls'"
            )
        message = AIMessage(
            content=item.get("content", "") or "",
            id=item.get("id"),
            tool_calls=list(item.get("tool_calls", [])),
        )
    else:
        raise TypeError(
            f"ScriptedModel response {position} returned {type(item).__name__}; "
            "expected an AIMessage or a dict"
        )
    for call in message.tool_calls:
        if not call.get("id"):
            call["id"] = new_id("call_")
    if message.id is None:
        message.id = new_id("run-")
    message.response_metadata.setdefault("model_name", "scripted")
    return message


def _chunks(message: AIMessage) -> Iterator[AIMessageChunk]:
    text = message.content if isinstance(message.content, str) else message.text
    tokens = _TOKEN_RE.findall(text) or [""]
    for token in tokens:
        yield AIMessageChunk(content=token, id=message.id)
    if message.tool_calls:
        yield AIMessageChunk(
            content="",
            id=message.id,
            tool_call_chunks=[
                ToolCallChunk(
                    name=call["name"],
                    args=orjson.dumps(call["args"]).decode(),
                    id=call["id"],
                    index=i,
                    type="tool_call_chunk",
                )
                for i, call in enumerate(message.tool_calls)
            ],
        )
    yield AIMessageChunk(
        content="",
        id=message.id,
        response_metadata=dict(message.response_metadata),
        usage_metadata=message.usage_metadata,
    )
