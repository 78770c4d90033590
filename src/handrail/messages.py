"""Chat messages and tool calls.

The message types mirror LangChain's (``HumanMessage``, ``AIMessage``, ``ToolMessage``,
``SystemMessage``) so code ports by changing an import. Each has ``content``, ``id``,
``type`` and ``name``. Anywhere handrail accepts messages it also accepts the loose forms
users write by hand, through :func:`coerce_message`::

    {"role": "user", "content": "Delete old records"}   # a dict
    ("assistant", "Done.")                              # a (role, content) tuple
    "What is in the table?"                             # a bare string (user)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal, NotRequired, TypedDict

import orjson

__all__ = [
    "REMOVE_ALL_MESSAGES",
    "AIMessage",
    "AIMessageChunk",
    "AnyMessage",
    "BaseMessage",
    "HumanMessage",
    "InvalidToolCall",
    "RemoveMessage",
    "SystemMessage",
    "ToolCall",
    "ToolCallChunk",
    "ToolMessage",
    "add_messages",
    "coerce_message",
    "coerce_messages",
    "merge_messages_into",
    "new_id",
]


def new_id(prefix: str = "") -> str:
    """Return a fresh random id, optionally with a readable prefix (``"call_..."``).

    128 random bits from the operating system, as 32 hex digits (the form of
    ``uuid4().hex``, without building a UUID object, which costs five times more).
    """
    return prefix + os.urandom(16).hex()


class ToolCall(TypedDict):
    """A tool call proposed by the model: ``{"name", "args", "id", "type": "tool_call"}``."""

    name: str
    args: dict[str, Any]
    id: str | None
    type: NotRequired[Literal["tool_call"]]


class InvalidToolCall(TypedDict):
    """A tool call the model sent malformed (arguments that are not a JSON object)."""

    name: str | None
    args: str | None
    id: str | None
    error: str | None
    type: NotRequired[Literal["invalid_tool_call"]]


class ToolCallChunk(TypedDict):
    """A piece of a streamed tool call; ``args`` is a fragment of JSON text."""

    name: str | None
    args: str | None
    id: str | None
    index: int | None
    type: NotRequired[Literal["tool_call_chunk"]]


Content = str | list[Any]


@dataclass(eq=True)
class BaseMessage:
    """What every message has: ``content``, ``id``, ``name`` and provider extras."""

    content: Content = ""
    id: str | None = field(default=None, kw_only=True)
    name: str | None = field(default=None, kw_only=True)
    additional_kwargs: dict[str, Any] = field(default_factory=dict, kw_only=True)
    response_metadata: dict[str, Any] = field(default_factory=dict, kw_only=True)

    type: ClassVar[str] = "base"

    @property
    def text(self) -> str:
        """The content as plain text (text blocks joined when content is a list)."""
        if isinstance(self.content, str):
            return self.content
        parts: list[str] = []
        for block in self.content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        return "".join(parts)

    @property
    def content_blocks(self) -> list[dict[str, Any]]:
        """The content as typed blocks (``{"type": "text", "text": ...}``, ``reasoning``,
        ``image``, ...; an AI message's tool calls as ``tool_call`` blocks), as in LangChain."""
        from handrail._message_display import content_blocks

        return content_blocks(self)

    def pretty_repr(self, html: bool = False) -> str:
        """The message laid out as LangChain prints it: a title rule, the name, the content,
        the tool calls."""
        from handrail._message_display import pretty_repr

        return pretty_repr(self)

    def pretty_print(self) -> None:
        """Print :meth:`pretty_repr`."""
        print(self.pretty_repr())


@dataclass(eq=True)
class HumanMessage(BaseMessage):
    """A message from the user.

    Example::

        HumanMessage("Delete old records")
    """

    type: ClassVar[str] = "human"


@dataclass(eq=True)
class SystemMessage(BaseMessage):
    """Instructions for the model."""

    type: ClassVar[str] = "system"


@dataclass(eq=True)
class AIMessage(BaseMessage):
    """A model answer, with the tool calls it proposes.

    Example::

        AIMessage("", tool_calls=[{"name": "read_data", "args": {"table": "t"}, "id": "c1"}])
    """

    tool_calls: list[ToolCall] = field(default_factory=list, kw_only=True)
    invalid_tool_calls: list[InvalidToolCall] = field(default_factory=list, kw_only=True)
    usage_metadata: dict[str, Any] | None = field(default=None, kw_only=True)

    type: ClassVar[str] = "ai"

    def __post_init__(self) -> None:
        self.tool_calls = [_normalise_tool_call(tc) for tc in self.tool_calls]


@dataclass(eq=True)
class AIMessageChunk(AIMessage):
    """A streamed piece of an :class:`AIMessage`; chunks add up with ``+``.

    ``tool_call_chunks`` carry partial tool calls (argument JSON arrives in fragments);
    :meth:`to_message` parses them into ``tool_calls`` once the stream is complete.
    """

    tool_call_chunks: list[ToolCallChunk] = field(default_factory=list, kw_only=True)

    type: ClassVar[str] = "AIMessageChunk"

    def __add__(self, other: AIMessageChunk) -> AIMessageChunk:
        if not isinstance(other, AIMessageChunk):
            return NotImplemented
        return AIMessageChunk(
            content=_add_content(self.content, other.content),
            id=self.id or other.id,
            name=self.name or other.name,
            additional_kwargs={**self.additional_kwargs, **other.additional_kwargs},
            response_metadata={**self.response_metadata, **other.response_metadata},
            tool_calls=[*self.tool_calls, *other.tool_calls],
            usage_metadata=_add_usage(self.usage_metadata, other.usage_metadata),
            tool_call_chunks=_merge_tool_call_chunks(self.tool_call_chunks, other.tool_call_chunks),
        )

    def to_message(self) -> AIMessage:
        """Return the complete :class:`AIMessage` these chunks add up to."""
        tool_calls = list(self.tool_calls)
        invalid: list[InvalidToolCall] = list(self.invalid_tool_calls)
        for chunk in self.tool_call_chunks:
            raw = chunk.get("args") or ""
            try:
                args = orjson.loads(raw) if raw.strip() else {}
            except orjson.JSONDecodeError as exc:
                invalid.append(_invalid(chunk, f"arguments are not valid JSON: {exc}"))
                continue
            if not isinstance(args, dict):
                invalid.append(_invalid(chunk, "arguments must be a JSON object"))
                continue
            tool_calls.append(
                ToolCall(name=chunk.get("name") or "", args=args, id=chunk.get("id"), type="tool_call")
            )
        return AIMessage(
            content=self.content,
            id=self.id,
            name=self.name,
            additional_kwargs=dict(self.additional_kwargs),
            response_metadata=dict(self.response_metadata),
            tool_calls=tool_calls,
            invalid_tool_calls=invalid,
            usage_metadata=self.usage_metadata,
        )


@dataclass(eq=True)
class ToolMessage(BaseMessage):
    """The result of one tool call, linked to it by ``tool_call_id``.

    ``status`` is ``"success"`` or ``"error"`` (a rejected call, a tool that raised).
    """

    tool_call_id: str = field(default="", kw_only=True)
    status: Literal["success", "error"] = field(default="success", kw_only=True)
    artifact: Any = field(default=None, kw_only=True)

    type: ClassVar[str] = "tool"

    def __post_init__(self) -> None:
        if not isinstance(self.tool_call_id, str) or not self.tool_call_id:
            raise ValueError("ToolMessage needs a non-empty tool_call_id naming the call it answers")
        if self.status not in ("success", "error"):
            raise ValueError(f"ToolMessage status must be 'success' or 'error', got {self.status!r}")


@dataclass(eq=True)
class RemoveMessage(BaseMessage):
    """Returned in a ``messages`` update, removes the message with this ``id``."""

    type: ClassVar[str] = "remove"

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("RemoveMessage needs the id of the message to remove")


AnyMessage = HumanMessage | AIMessage | ToolMessage | SystemMessage

_ROLES: dict[str, type[BaseMessage]] = {
    "user": HumanMessage,
    "human": HumanMessage,
    "assistant": AIMessage,
    "ai": AIMessage,
    "system": SystemMessage,
    "developer": SystemMessage,
    "tool": ToolMessage,
    "remove": RemoveMessage,
}


def coerce_message(value: Any, *, where: str = "message") -> BaseMessage:
    """Turn a message object, dict, ``(role, content)`` tuple or bare string into a message.

    Raises ``ValueError`` naming ``where`` and the accepted forms when ``value`` is none
    of those.
    """
    if isinstance(value, BaseMessage):
        return value
    if isinstance(value, str):
        return HumanMessage(value)
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return _from_role(value[0], {"content": value[1]}, where)
    if isinstance(value, Mapping):
        role = value.get("role", value.get("type"))
        if not isinstance(role, str):
            raise ValueError(
                f"{where} is a dict without a 'role'; expected e.g. "
                "{'role': 'user', 'content': '...'} (roles: user, assistant, system, tool)"
            )
        fields = {k: v for k, v in value.items() if k not in ("role", "type")}
        return _from_role(role, fields, where)
    raise ValueError(
        f"{where} must be a message object, a dict {{'role', 'content'}}, a (role, content) "
        f"tuple or a string, got {type(value).__name__}"
    )


def coerce_messages(value: Any, *, where: str = "messages") -> list[BaseMessage]:
    """Coerce a list of loose messages (or one message) with :func:`coerce_message`."""
    if isinstance(value, (str, BaseMessage, Mapping)) or (
        isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str)
    ):
        return [coerce_message(value, where=where)]
    if not isinstance(value, Iterable):
        raise ValueError(f"{where} must be a list of messages, got {type(value).__name__}")
    return [coerce_message(item, where=f"{where}[{i}]") for i, item in enumerate(value)]


def _from_role(role: str, fields: dict[str, Any], where: str) -> BaseMessage:
    cls = _ROLES.get(role)
    if cls is None:
        raise ValueError(
            f"{where} has unknown role {role!r}; expected one of user, human, assistant, ai, system, tool"
        )
    allowed = {"content", "id", "name", "additional_kwargs", "response_metadata"}
    if cls is AIMessage:
        allowed |= {"tool_calls", "invalid_tool_calls", "usage_metadata"}
    if cls is ToolMessage:
        allowed |= {"tool_call_id", "status", "artifact"}
    unknown = sorted(set(fields) - allowed)
    if unknown:
        raise ValueError(f"{where} ({role}) has unexpected field(s) {unknown}; allowed: {sorted(allowed)}")
    content = fields.get("content", "")
    if content is None:
        content = ""
    if not isinstance(content, (str, list)):
        raise ValueError(
            f"{where} content must be a string or a list of blocks, got {type(content).__name__}"
        )
    _check_field_types(fields, where, role)
    try:
        return cls(**{**fields, "content": content})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where} ({role}) is not a valid message: {exc}") from None


# The type each field of a message dict must have, when given (None: leave it out).
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "name": (str,),
    "tool_call_id": (str,),
    "status": (str,),
    "additional_kwargs": (dict,),
    "response_metadata": (dict,),
    "usage_metadata": (dict,),
    "tool_calls": (list, tuple),
    "invalid_tool_calls": (list, tuple),
}
_TYPE_NAMES: dict[type, str] = {str: "a string", dict: "an object", list: "a list", tuple: "a list"}


def _check_field_types(fields: Mapping[str, Any], where: str, role: str) -> None:
    """Refuse a field of the wrong type (an id that is an object, say): such a message would be
    saved and then fail every read of its thread (an id is a key of the messages' index)."""
    for key, types in _FIELD_TYPES.items():
        value = fields.get(key)
        if value is not None and not isinstance(value, types):
            raise ValueError(
                f"{where} ({role}) {key} must be {_TYPE_NAMES[types[0]]}, got {type(value).__name__}"
            )


def _normalise_tool_call(tc: Any) -> ToolCall:
    if not isinstance(tc, Mapping) or not isinstance(tc.get("name"), str):
        raise ValueError(f"a tool call must be a dict with a string 'name', got {tc!r}")
    args = tc.get("args", {})
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise ValueError(f"tool call {tc.get('name')!r} args must be a dict, got {type(args).__name__}")
    call_id = tc.get("id")
    if call_id is not None and not isinstance(call_id, str):
        raise ValueError(f"tool call {tc['name']!r} id must be a string, got {type(call_id).__name__}")
    return ToolCall(name=tc["name"], args=dict(args), id=call_id, type="tool_call")


def _invalid(chunk: ToolCallChunk, error: str) -> InvalidToolCall:
    return InvalidToolCall(
        name=chunk.get("name"),
        args=chunk.get("args"),
        id=chunk.get("id"),
        error=error,
        type="invalid_tool_call",
    )


def _add_content(a: Content, b: Content) -> Content:
    if isinstance(a, str) and isinstance(b, str):
        return a + b
    left = [{"type": "text", "text": a}] if isinstance(a, str) and a else (a if isinstance(a, list) else [])
    right = [{"type": "text", "text": b}] if isinstance(b, str) and b else (b if isinstance(b, list) else [])
    return [*left, *right]


def _add_usage(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    if a is None or b is None:
        return a or b
    merged = dict(a)
    for key, value in b.items():
        if isinstance(value, (int, float)) and isinstance(merged.get(key), (int, float)):
            merged[key] = merged[key] + value
        else:
            merged[key] = value
    return merged


def _merge_tool_call_chunks(
    left: Sequence[ToolCallChunk], right: Sequence[ToolCallChunk]
) -> list[ToolCallChunk]:
    merged = [ToolCallChunk(**c) for c in left]
    for chunk in right:
        index = chunk.get("index")
        target = next((c for c in merged if index is not None and c.get("index") == index), None)
        if target is None:
            merged.append(ToolCallChunk(**chunk))
            continue
        target["name"] = (target.get("name") or "") + (chunk.get("name") or "") or None
        target["args"] = (target.get("args") or "") + (chunk.get("args") or "")
        target["id"] = target.get("id") or chunk.get("id")
    return merged


def add_messages(current: Sequence[BaseMessage], update: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The ``messages`` reducer: append, replace messages with the same id, apply removals.

    Messages without an id get one. Returns a new list and leaves ``current`` untouched.

    Example::

        add_messages([HumanMessage("hi", id="1")], [HumanMessage("hello", id="1")])
        # -> [HumanMessage("hello", id="1")]
    """
    result = list(current)
    merge_messages_into(result, {m.id: i for i, m in enumerate(result) if m.id is not None}, update)
    return result


def merge_messages_into(
    messages: list[BaseMessage], index: dict[str, int], update: Iterable[Any]
) -> dict[str, int]:
    """Apply ``update`` to ``messages`` in place, as :func:`add_messages` does.

    ``index`` maps message ids to positions; the returned index is the one to keep
    (rebuilt when messages were removed).
    """
    removed = False
    for message in update:
        if not isinstance(message, BaseMessage):
            raise TypeError(f"messages must be message objects, found {type(message).__name__}")
        if message.id is None:
            message = replace(message, id=new_id())
        message_id: str = message.id  # type: ignore[assignment]
        if isinstance(message, RemoveMessage) and message_id == REMOVE_ALL_MESSAGES:
            messages.clear()  # what follows in the update is the new conversation
            index.clear()
            removed = False
            continue
        if isinstance(message, RemoveMessage):
            position = index.pop(message_id, None)
            if position is not None:
                messages[position] = _REMOVED
                removed = True
            continue
        position = index.get(message_id)
        if position is None:
            index[message_id] = len(messages)
            messages.append(message)
        else:
            messages[position] = message
    if not removed:
        return index
    messages[:] = [m for m in messages if m is not _REMOVED]
    return {m.id: i for i, m in enumerate(messages) if m.id is not None}


_REMOVED = RemoveMessage(id="__removed__")

REMOVE_ALL_MESSAGES = "__remove_all__"
"""``RemoveMessage(id=REMOVE_ALL_MESSAGES)`` in a ``messages`` update drops every message
before it (LangGraph's spelling): ``{"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *new]}``."""
