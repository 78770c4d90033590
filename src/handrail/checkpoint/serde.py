"""Explicit, pickle-free serialisation of stored records (SPEC rule 10).

Stored payloads are JSON (written with orjson). JSON's own types stand for themselves;
every other stored type has a *name* and a to/from-JSON pair in one registry, and is
written as an object tagged with the reserved key ``"__hr__"``::

    {"__hr__": "ai", "content": "", "id": "...", "tool_calls": [...]}

Loading walks the decoded JSON and rebuilds tagged objects. A tag that is not in the
registry, a tagged object with fields its type does not have, or bytes that are not
JSON raise :class:`~handrail.errors.SerializationError`; nothing unknown is ever
constructed, and no code path uses pickle. Writing a value of a type the registry does
not know (a set, a custom class) also raises, naming where the value sits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson

from handrail.errors import SerializationError
from handrail.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    _normalise_tool_call,
)

__all__ = ["TAG", "compact", "dumps", "loads", "register_type"]

TAG = "__hr__"
_TAG_KEY = b'"__hr__"'  # how the tag appears as a key in JSON that spells it without escapes

_Encoder = Callable[[Any], dict[str, Any]]
_Decoder = Callable[[dict[str, Any]], Any]

_ENCODERS: dict[type, tuple[str, _Encoder]] = {}
_DECODERS: dict[str, _Decoder] = {}

_TAGGED_OK: set[str] = set()  # decoders that take the tagged dict as it is (and drop the tag)
_CALL_KEYS = frozenset(("name", "args", "id", "type"))  # the keys of a tool call in its normal form

_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def register_type(name: str, cls: type, encode: _Encoder, decode: _Decoder) -> None:
    """Register a stored type under ``name`` with its to/from-JSON pair.

    ``encode`` returns a JSON-compatible dict (without the tag); ``decode`` receives that
    dict and returns the object, raising ``ValueError`` or ``TypeError`` when the fields
    are wrong. Names are permanent: renaming one breaks every record that uses it.
    """
    if name in _DECODERS:
        raise ValueError(f"stored type name {name!r} is already registered")
    _ENCODERS[cls] = (name, encode)
    _DECODERS[name] = decode


def _message_encoder(name: str, cls: type[BaseMessage]) -> _Encoder:
    """The stored form of a ``cls``: its tag, its content and the fields that differ
    from their defaults (an empty list or dict, None, a default string), in field order."""
    checks: list[tuple[str, Any, type | None]] = []
    for f in dataclasses.fields(cls):
        if f.name == "content":
            continue
        if f.default_factory is not dataclasses.MISSING:
            checks.append((f.name, None, type(f.default_factory())))  # kept unless empty
        else:
            checks.append((f.name, f.default, None))

    def encode(message: Any) -> dict[str, Any]:
        state = message.__dict__
        out: dict[str, Any] = {TAG: name, "content": state["content"]}
        for field_name, default, kind in checks:
            value = state[field_name]
            if kind is not None:
                if value or type(value) is not kind:
                    out[field_name] = value
            elif value is not default and value != default:
                out[field_name] = value
        return out

    return encode


def _message_decoder(cls: type[BaseMessage]) -> _Decoder:
    """A loader of stored ``cls`` fields that checks each field's type and builds the
    message without the work its constructor does for hand-written input: stored tool
    calls are already in their normal form (one that is not is normalised as before)."""
    fields_of = dataclasses.fields(cls)
    known = frozenset(f.name for f in fields_of)
    allowed = known | {TAG}
    template = {f.name: f.default for f in fields_of if f.default is not dataclasses.MISSING}
    containers = tuple(
        (f.name, type(f.default_factory())) for f in fields_of if f.default_factory is not dataclasses.MISSING
    )
    is_ai, is_tool, is_remove = "tool_calls" in known, cls is ToolMessage, cls is RemoveMessage
    new = object.__new__
    text, optional = (str, list), (str, type(None))

    def decode(fields: dict[str, Any]) -> BaseMessage:
        """Build the message from its fields (with or without the tag, which is dropped)."""
        if not allowed.issuperset(fields):
            raise ValueError(f"unexpected field(s) {sorted(set(fields) - allowed)} for a {cls.__name__}")
        state = {**template, **fields}
        state.pop(TAG, None)
        if type(state["content"]) not in text:
            raise ValueError(f"{cls.__name__} content must be a string or a list")
        if type(state["id"]) not in optional or type(state["name"]) not in optional:
            raise ValueError(f"{cls.__name__} id and name must be strings")
        for field_name, kind in containers:
            if field_name not in state:
                state[field_name] = kind()
            elif kind is list and type(state[field_name]) is not list:  # (what a dict field holds, it keeps)
                raise ValueError(f"{cls.__name__} {field_name} must be a list")
        if is_ai:
            calls = state["tool_calls"]
            for call in calls:
                if (
                    type(call) is not dict
                    or call.keys() != _CALL_KEYS
                    or call["type"] != "tool_call"
                    or type(call["name"]) is not str
                    or type(call["args"]) is not dict
                ):  # not the form ``AIMessage`` gives its calls
                    state["tool_calls"] = [_normalise_tool_call(tc) for tc in calls]
                    break
        elif is_tool:
            call_id, status = state["tool_call_id"], state["status"]
            if type(call_id) is not str or not call_id:
                raise ValueError("ToolMessage needs a non-empty tool_call_id naming the call it answers")
            if status != "success" and status != "error":
                raise ValueError(f"ToolMessage status must be 'success' or 'error', got {status!r}")
        elif is_remove and not state["id"]:
            raise ValueError("RemoveMessage needs the id of the message to remove")
        message: Any = new(cls)
        message.__dict__ = state
        return message  # type: ignore[no-any-return]

    return decode


for _name, _cls in (
    ("human", HumanMessage),
    ("ai", AIMessage),
    ("ai_chunk", AIMessageChunk),
    ("system", SystemMessage),
    ("tool", ToolMessage),
    ("remove", RemoveMessage),
):
    register_type(_name, _cls, _message_encoder(_name, _cls), _message_decoder(_cls))
    _TAGGED_OK.add(_name)  # its encoder writes the tag and its decoder drops it


def _decode_datetime(fields: dict[str, Any]) -> datetime:
    if set(fields) != {"iso"} or not isinstance(fields["iso"], str):
        raise ValueError("a datetime record holds exactly one string field 'iso'")
    return datetime.fromisoformat(fields["iso"])


register_type("datetime", datetime, lambda d: {"iso": d.isoformat()}, _decode_datetime)


def _default(obj: Any) -> Any:
    entry = _ENCODERS.get(type(obj))
    if entry is None:
        raise TypeError(
            f"a value of type {type(obj).__name__} cannot be stored: handrail stores JSON "
            "types (dict, list, str, int, float, bool, None), messages and datetimes"
        )
    name, encode = entry
    if name in _TAGGED_OK:
        return encode(obj)
    return {TAG: name, **encode(obj)}


def dumps(value: Any, *, where: str | Callable[[], str] = "value") -> bytes:
    """Serialise ``value`` to JSON bytes; raise :class:`SerializationError` naming ``where``.

    ``where`` may be a function that returns the name, called only when there is an
    error to report (a hot path need not format it every time). A plain dict that uses
    the reserved key ``"__hr__"`` is refused: it would load as a typed object, or not at
    all (rule 10).
    """
    tagged = 0

    def default(obj: Any) -> Any:
        nonlocal tagged
        out = _default(obj)
        tagged += 1
        return out

    try:
        raw = orjson.dumps(value, default=default, option=_OPTIONS)
    except TypeError as exc:
        reason = exc.__cause__ if isinstance(exc.__cause__, TypeError) else exc
        named = where if isinstance(where, str) else where()
        raise SerializationError(f"cannot store {named}: {reason}") from None
    # Inside a JSON string a quote is escaped, so the key spelled so is always an object's key.
    if raw.count(_TAG_KEY) > tagged:
        named = where if isinstance(where, str) else where()
        raise SerializationError(
            f"cannot store {named}: it holds a dict with the key {TAG!r}, which handrail reserves "
            "for the types it stores; rename that key"
        )
    return raw


def compact(raw: bytes) -> bytes:
    """``raw`` in bytes of its own size, for JSON that is kept after it is made.

    orjson's output keeps a buffer of at least 4 KiB: a small payload held for long (an
    event in memory, a row a saver remembers) is copied out of it.
    """
    return bytes(bytearray(raw)) if len(raw) < 2048 else raw


def loads(
    payload: bytes | str,
    *,
    thread_id: str | None = None,
    seq: int | None = None,
    record: str | None = None,
) -> Any:
    """Load JSON bytes written by :func:`dumps`, rebuilding registered types.

    Any problem raises :class:`SerializationError` naming the thread and the record
    (``record`` describes it when it is not an event number, e.g. a pending interrupt).
    """
    try:
        decoded = orjson.loads(payload)
        if type(payload) is bytes and b"\\u" not in payload:
            # Without escapes, every tagged object spells its key so: counted, the tags
            # tell whether a walk that does not look inside tagged objects found them all.
            tags = payload.count(_TAG_KEY)
            if not tags:
                return decoded
            walk = _Walk(shallow=True)
            try:
                revived = walk.revive(decoded)
            except _BadRecord:
                walk.found = -1
            if walk.found == tags:
                return revived
            decoded = orjson.loads(payload)  # a tag nested inside a tagged object: the whole walk
        return _revive(decoded)
    except orjson.JSONDecodeError as exc:
        reason = f"not valid JSON ({exc})"
    except _BadRecord as exc:
        reason = str(exc)
    except RecursionError:
        reason = "nested too deeply"
    what = record if record is not None else f"record {seq}"
    where = f"thread {thread_id!r}, {what}" if thread_id is not None else what
    raise SerializationError(f"cannot load {where}: {reason}", thread_id=thread_id, seq=seq) from None


class _BadRecord(Exception):
    pass


class _Walk:
    """Rebuilds tagged objects inside decoded JSON; untouched containers come back as they are.

    ``shallow`` is the walk for the usual record, whose tagged objects hold no tagged
    object inside them: each is rebuilt from its fields as they are, and counted
    (``found``); the caller compares the count with the tags the bytes hold and walks
    again whole when they differ. The whole walk rebuilds what a tagged object holds
    first. Neither changes the decoded JSON it walks.
    """

    __slots__ = ("found", "shallow")

    def __init__(self, *, shallow: bool) -> None:
        self.found = 0
        self.shallow = shallow

    def revive(self, value: Any) -> Any:
        if type(value) is dict:
            tag = value.get(TAG)
            if tag is None:
                changed: dict[str, Any] | None = None
                for key, item in value.items():
                    if type(item) is dict or type(item) is list:
                        revived = self.revive(item)
                        if revived is not item:
                            if changed is None:
                                changed = dict(value)
                            changed[key] = revived
                return value if changed is None else changed
            return self._typed(tag, value)
        if type(value) is not list:
            return value
        out: list[Any] | None = None
        for position, item in enumerate(value):
            kind = type(item)
            if kind is dict:
                tag = item.get(TAG)
                if tag is None:
                    revived = self.revive(item)
                elif self.shallow and type(tag) is str and tag in _TAGGED_OK:  # a message in a list
                    try:
                        revived = _DECODERS[tag](item)
                    except (TypeError, ValueError) as exc:
                        raise _BadRecord(f"damaged {tag!r} record: {exc}") from None
                    self.found += 1
                else:
                    revived = self._typed(tag, item)
            elif kind is list:
                revived = self.revive(item)
            else:
                continue
            if revived is not item:
                if out is None:
                    out = list(value)
                out[position] = revived
        return value if out is None else out

    def _typed(self, tag: Any, value: dict[str, Any]) -> Any:
        decoder = _DECODERS.get(tag) if type(tag) is str else None
        if decoder is None:
            raise _BadRecord(f"unknown stored type {tag!r}")
        if not self.shallow:
            fields = {k: self.revive(v) for k, v in value.items() if k != TAG}
        elif tag in _TAGGED_OK:
            fields = value  # its decoder drops the tag and copies what it keeps
        else:
            fields = {k: v for k, v in value.items() if k != TAG}
        try:
            out = decoder(fields)
        except (TypeError, ValueError) as exc:
            raise _BadRecord(f"damaged {tag!r} record: {exc}") from None
        self.found += 1
        return out


def _revive(value: Any) -> Any:
    """Rebuild every tagged object inside decoded JSON (the whole walk)."""
    return _Walk(shallow=False).revive(value)
