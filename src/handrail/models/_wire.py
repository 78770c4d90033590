"""Wire-format pieces the provider adapters share: message text, tool specs and tool
calls, streamed tool-call assembly, and the error for an HTTP error answer. Pure
functions; no client, no I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from handrail.messages import BaseMessage, InvalidToolCall, ToolCall, ToolCallChunk
from handrail.models.base import ToolSpec
from handrail.models.errors import (
    ModelAuthenticationError,
    ModelContextLengthError,
    ModelError,
    ModelRateLimitError,
    ModelRequestError,
    ModelServerError,
    error_detail,
    looks_like_context_overflow,
)

__all__ = [
    "ToolCallAssembler",
    "content_text",
    "parse_tool_call",
    "preview",
    "status_error",
    "system_and_rest",
    "to_openai_tool",
    "tool_choice_name",
    "tool_parts",
]


def content_text(content: str | list[Any]) -> str:
    """Plain text of message content: a string, or the text blocks of a list joined."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "".join(parts)


def parse_tool_call(
    name: str | None,
    raw: str | None,
    call_id: str | None,
    *,
    into: list[ToolCall],
    invalid: list[InvalidToolCall],
) -> None:
    """Parse a tool call's raw JSON arguments; append it to ``into``, or to ``invalid``
    with the reason when they are not a JSON object (or the call has no name).

    Empty arguments mean ``{}`` (a tool without parameters).
    """
    text = raw or ""
    error: str | None = None
    args: Any = None
    if not name:
        error = "the tool call has no name"
    else:
        try:
            args = orjson.loads(text) if text.strip() else {}
        except orjson.JSONDecodeError as exc:
            error = f"arguments are not valid JSON: {exc}"
        else:
            if not isinstance(args, dict):
                error = f"arguments must be a JSON object, got {type(args).__name__}"
    if error is not None:
        invalid.append(
            InvalidToolCall(name=name, args=raw, id=call_id, error=error, type="invalid_tool_call")
        )
    else:
        into.append(ToolCall(name=name or "", args=args, id=call_id, type="tool_call"))


def preview(value: Any) -> str:
    """A short repr of something unexpected a server sent, for error messages."""
    text = value if isinstance(value, str) else repr(value)
    return repr(text[:120] + ("..." if len(text) > 120 else ""))


def tool_parts(spec: ToolSpec) -> tuple[str, str, dict[str, Any]]:
    """``(name, description, parameters)`` of a handrail tool spec."""
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"a tool spec needs a 'name', got {dict(spec)!r}")
    parameters = spec.get("parameters") or {"type": "object", "properties": {}}
    return name, str(spec.get("description") or ""), dict(parameters)


def to_openai_tool(spec: ToolSpec) -> dict[str, Any]:
    """A handrail tool spec as an OpenAI function tool (``{"type": "function", "function"}``),
    the shape most libraries take. A spec already in that shape passes as is."""
    if spec.get("type") == "function" and isinstance(spec.get("function"), Mapping):
        return dict(spec)
    name, description, parameters = tool_parts(spec)
    function: dict[str, Any] = {"name": name, "parameters": parameters}
    if description:
        function["description"] = description
    return {"type": "function", "function": function}


def tool_choice_name(choice: Any) -> str | None:
    """The tool a ``tool_choice`` forces, when it names one (a string that is not a mode)."""
    if isinstance(choice, str) and choice not in ("auto", "none", "any", "required"):
        return choice
    return None


def system_and_rest(messages: Sequence[BaseMessage]) -> tuple[list[BaseMessage], list[BaseMessage]]:
    """Split messages into the system ones and the conversation."""
    system = [m for m in messages if m.type == "system"]
    return system, [m for m in messages if m.type != "system"]


@dataclass
class _Slot:
    index: int
    id: str | None = None
    name: str = ""


class ToolCallAssembler:
    """Turns streamed tool-call deltas into :class:`ToolCallChunk` s with stable indexes.

    Providers number streamed tool calls by ``index``; the id and name come in the first
    delta and argument JSON in the following ones. Some OpenAI-compatible servers repeat
    the name in every delta or reuse an index for a second call; here a repeated name is
    sent once, and a new id on a used index opens a new call.
    """

    def __init__(self) -> None:
        self._slots: dict[Any, _Slot] = {}
        self._count = 0
        self._last: _Slot | None = None

    def delta(
        self, key: Any, call_id: str | None, name: str | None, arguments: str | None
    ) -> ToolCallChunk | None:
        slot = self._slots.get(key) if key is not None else self._last
        if slot is None or (call_id and slot.id and call_id != slot.id):
            slot = _Slot(index=self._count)
            self._count += 1
            self._slots[key] = slot
        self._last = slot
        new_id = call_id if call_id and not slot.id else None
        if new_id:
            slot.id = new_id
        new_name = name if name and name != slot.name else None
        if new_name:
            slot.name += new_name
        if not (new_id or new_name or arguments):
            return None
        return ToolCallChunk(
            name=new_name, args=arguments or "", id=new_id, index=slot.index, type="tool_call_chunk"
        )


_RATE_LIMIT_KINDS = ("rate_limit_error", "rate_limit_exceeded", "insufficient_quota")
_SERVER_KINDS = ("api_error", "overloaded_error", "server_error")


def status_error(
    *,
    provider: str,
    model: str,
    status: int | None,
    body: Any,
    fallback: str,
    request_id: str | None,
    key_env: str,
    retries: int,
) -> ModelError:
    """The :class:`ModelError` for an HTTP error answer (or an error event in a stream).

    ``status`` may be 200 for an error event inside a stream; then the error's own type
    (``overloaded_error``, ``rate_limit_error``, ...) decides.
    """
    detail, code = error_detail(body, fallback)
    kind = (code or "").lower()
    extra = {"provider": provider, "status_code": status, "request_id": request_id, "body": body}
    streamed = not status or status == 200
    shown = "error event in the stream" if streamed else f"HTTP {status}"
    retried = "" if streamed else f" and {retries} automatic retries did not help"
    if status == 401 or kind == "authentication_error":
        return ModelAuthenticationError(
            f"{provider} rejected the API key ({shown}): {detail}. Check the key: set the "
            f"{key_env} environment variable or pass api_key=... to init_chat_model.",
            **extra,
        )
    if status == 403 or kind == "permission_error":
        return ModelAuthenticationError(
            f"{provider} refused the request ({shown}, permission denied): {detail}. The key is "
            f"valid but may not use {model!r} or this endpoint.",
            **extra,
        )
    if status == 429 or kind in _RATE_LIMIT_KINDS:
        return ModelRateLimitError(
            f"{provider} is rate limiting these requests ({shown}){retried}: {detail}. Wait and "
            "run again (invoke(None, config) continues the thread), raise max_retries, or check "
            "the account's quota.",
            **extra,
        )
    is_client_error = status is not None and 400 <= status < 500
    if status == 413 or (is_client_error and looks_like_context_overflow(code, detail)):
        return ModelContextLengthError(
            f"the conversation is too long for {model!r} ({shown}): {detail}. Shorten the "
            "history (drop or summarise old messages and long tool results) or lower max_tokens.",
            **extra,
        )
    if status == 404 or kind == "not_found_error":
        return ModelRequestError(
            f"{provider} answered {shown} (not found): {detail}. Check the model name "
            f"{model!r} and the base_url.",
            **extra,
        )
    if is_client_error:
        return ModelRequestError(f"{provider} refused the request ({shown}): {detail}", **extra)
    if kind in _SERVER_KINDS or streamed or (status is not None and status >= 500):
        return ModelServerError(
            f"{provider} failed ({shown}){retried}: {detail}. Try again later; "
            "invoke(None, config) continues the thread.",
            **extra,
        )
    return ModelError(f"{provider} answered {shown}: {detail}", **extra)
