"""The events a thread's log is made of, and their (de)serialisation.

A thread is an append-only log of events numbered 1, 2, 3, ...; everything else (state,
checkpoints, pending interrupts, the audit trail) is a reading of it. The kinds:

``input``         new input starts a run: ``{"values", "next", "metadata"?}``
``step``          a step finished: ``{"step", "values", "next"}``; for ``tools`` the
                  results come from the step's ``tool_finished`` events, in call order
``update``        state changed by hand or by ``Command(update=...)``:
                  ``{"values", "next", "as_node", "supersede"}``
``interrupt``     a task paused: ``{"id", "step", "value", "task"?, "index"?, "kind"?,
                  "source"?}`` (task defaults to the step, index to 0, kind to
                  ``"interrupt"``)
``resume``        answers arrived: ``{"answers": {interrupt_id: value}, "reviewer"}``
``tools_planned`` a tools step is about to run these calls: ``{"calls", "run_id"}``; saved
                  before any of them can act, so a call of a run that died before its
                  result was saved is never run again silently (rule 9)
``tool_started``  a tool began to run: ``{"task", "name", "args"?, "run_id",
                  "idempotent"}``; ``args`` is left out when the call runs as proposed
``tool_finished`` a tool call has its result: ``{"message"}`` (its ``tool_call_id``
                  names the call)

Storage adds only what each event adds (SPEC §6): nothing is written twice that the
fold can read from an earlier event, and a payload over ``COMPRESS_OVER`` bytes is
stored compressed against a preset dictionary of the strings events repeat, marked by
its first byte (JSON never starts so): ``0x03`` is a Zstandard frame with a checksum
(written now: a compression context is kept per Python thread and reused, so a small
payload costs a few microseconds), ``0x02`` zlib (written before; still read). The
dictionary is part of the storage format: it is never edited, only superseded by a
new marker byte.
``branch``        time travel: the state goes back to the fold at ``{"from_seq"}``
``snapshot``      left by pruning in place of an old checkpoint: ``{"state"}`` is the whole
                  fold at that point. A reading starts at the last snapshot; the events
                  before it that pruning kept (interrupts, resumes, tool runs) are the
                  audit trail and are not folded again.

``input``, ``step``, ``update``, ``branch`` and ``snapshot`` are checkpoints: positions a
caller can name with a ``checkpoint_id``.
"""

from __future__ import annotations

import threading
import zlib
from dataclasses import dataclass
from typing import Any

import zstandard

from handrail.checkpoint.base import StoredEvent
from handrail.checkpoint.serde import dumps, loads
from handrail.errors import SerializationError

__all__ = ["AUDIT_KINDS", "CHECKPOINT_KINDS", "EVENT_KINDS", "Event", "decode_event", "encode_event"]

EVENT_KINDS = frozenset(
    {
        "input",
        "step",
        "update",
        "interrupt",
        "resume",
        "tools_planned",
        "tool_started",
        "tool_finished",
        "branch",
        "snapshot",
    }
)
CHECKPOINT_KINDS = frozenset({"input", "step", "update", "branch", "snapshot"})
AUDIT_KINDS = frozenset({"interrupt", "resume", "tool_started", "tool_finished"})
"""The events pruning keeps: every review request, answer and tool run."""

_REQUIRED: dict[str, tuple[str, ...]] = {
    "input": ("values", "next"),
    "step": ("step", "next"),
    "update": ("values", "next"),
    "interrupt": ("id", "step", "value"),
    "resume": ("answers",),
    "tools_planned": ("calls",),
    "tool_started": ("task", "name"),
    "tool_finished": ("message",),
    "branch": ("from_seq",),
    "snapshot": ("state",),
}


@dataclass(slots=True)
class Event:
    """One entry of a thread's log."""

    kind: str
    data: dict[str, Any]
    seq: int = 0
    created_at: float = 0.0


COMPRESS_OVER = 256
_ZDICT_V1_MARK = b"\x02"  # zlib against _ZDICT_V1 (read only)
_ZSTD_V1_MARK = b"\x03"  # Zstandard with _ZDICT_V1 as a raw-content dictionary, checksummed
_MAX_PAYLOAD = 64 * 1024 * 1024  # a frame that claims more is damaged, not loaded
# Storage format, version 1: NEVER EDIT. Strings that events of every thread repeat.
_ZDICT_V1 = b"".join(
    [
        b'{"answers":{"',
        b'{"decisions":[{"type":"approve"},{"type":"edit","edited_action":{"name":"',
        b'{"type":"reject","message":"{"type":"respond","message":"',
        b'{"task":"call_","name":"","run_id":"run-',
        b'{"message":{"__hr__":"tool","content":"',
        b'","tool_call_id":"call_',
        b'{"step":"tools","values":null,"next":["model"]}',
        b'{"step":"model","values":{"messages":[{"__hr__":"ai","content":"","id":"run-',
        b'","response_metadata":{"model_name":"',
        b'"usage_metadata":{"input_tokens":,"output_tokens":,"total_tokens":',
        b'"tool_calls":[{"name":"',
        b'","args":{"',
        b'","id":"call_',
        b'","type":"tool_call"},{"name":"',
        b'{"id":"","step":"HumanInTheLoopMiddleware.after_model","value":',
        b'{"action_requests":[{"name":"',
        b'"description":"Tool execution requires approval\n\nTool: ',
        b'\nArgs: {\n  "',
        b'"review_configs":[{"action_name":"',
        b'"allowed_decisions":["approve","edit","reject","respond"]',
        b',"args_schema":{"additionalProperties":false,"properties":{"',
        b'":{"title":"","type":"string"},"',
        b'"required":["',
        b'],"type":"object"}}',
        b',"source":"HumanInTheLoopMiddleware"}',
        b'"values":{"_hitl_decisions":{"message_id":"run-","by_call":{',
        b'"next":["HumanInTheLoopMiddleware.after_model"]}',
    ]
)


class _Codecs(threading.local):
    """One Zstandard compressor and decompressor per Python thread (they are not thread-safe)."""

    def __init__(self) -> None:
        self.packer = zstandard.ZstdCompressor(
            level=1, dict_data=_ZSTD_DICT, write_checksum=True, write_content_size=True, write_dict_id=False
        )
        self.unpacker = zstandard.ZstdDecompressor(dict_data=_ZSTD_DICT)


_ZSTD_DICT = zstandard.ZstdCompressionDict(_ZDICT_V1, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
_codecs = _Codecs()


def pack_payload(payload: bytes) -> bytes:
    """Compress a stored JSON payload when that pays (larger than ``COMPRESS_OVER``)."""
    if len(payload) > COMPRESS_OVER:
        packed = _ZSTD_V1_MARK + _codecs.packer.compress(payload)
        if len(packed) < len(payload):
            return packed
    elif len(payload) < 2048:
        # orjson's bytes keep a buffer of at least 4 KiB: hold a small payload in its own copy
        return bytes(bytearray(payload))
    return payload


def unpack_payload(payload: bytes, thread_id: str, record: str, seq: int | None = None) -> bytes:
    """The JSON of a stored payload (as it is, or decompressed), or SerializationError.

    ``record`` names the record in the error (``"record 12"``, ``"pending interrupt X"``).
    """
    marker = payload[:1]
    if marker != _ZSTD_V1_MARK and marker != _ZDICT_V1_MARK:
        return payload
    try:
        if marker == _ZSTD_V1_MARK:
            frame = payload[1:]
            size = zstandard.frame_content_size(frame)
            if not 0 <= size <= _MAX_PAYLOAD:
                raise zstandard.ZstdError(f"the frame declares {size} bytes")
            return _codecs.unpacker.decompress(frame)
        unpacker = zlib.decompressobj(zdict=_ZDICT_V1)
        data = unpacker.decompress(payload[1:], _MAX_PAYLOAD) + unpacker.flush()
        if not unpacker.eof:
            raise zlib.error("the compressed data is truncated")
        return data
    except (zlib.error, zstandard.ZstdError) as exc:
        raise SerializationError(
            f"cannot load thread {thread_id!r}, {record}: damaged compressed payload ({exc})",
            thread_id=thread_id,
            seq=seq,
        ) from None


def encode_event(event: Event, thread_id: str) -> StoredEvent:
    """Serialise an event for the store (compressing larger payloads)."""
    payload = pack_payload(dumps(event.data, where=lambda: f"{event.kind} event of thread {thread_id!r}"))
    return StoredEvent(seq=event.seq, kind=event.kind, created_at=event.created_at, payload=payload)


def decode_event(stored: StoredEvent, thread_id: str) -> Event:
    """Load a stored event, refusing unknown kinds and damaged payloads (SPEC rule 10)."""
    if stored.kind not in EVENT_KINDS:
        raise SerializationError(
            f"cannot load thread {thread_id!r}, record {stored.seq}: unknown event kind {stored.kind!r}",
            thread_id=thread_id,
            seq=stored.seq,
        )
    payload = unpack_payload(stored.payload, thread_id, f"record {stored.seq}", stored.seq)
    data = loads(payload, thread_id=thread_id, seq=stored.seq)
    if not isinstance(data, dict):
        raise SerializationError(
            f"cannot load thread {thread_id!r}, record {stored.seq}: a {stored.kind} event "
            f"must hold an object, found {type(data).__name__}",
            thread_id=thread_id,
            seq=stored.seq,
        )
    missing = [key for key in _REQUIRED[stored.kind] if key not in data]
    if missing:
        raise SerializationError(
            f"cannot load thread {thread_id!r}, record {stored.seq}: {stored.kind} event lacks {missing}",
            thread_id=thread_id,
            seq=stored.seq,
        )
    return Event(kind=stored.kind, data=data, seq=stored.seq, created_at=stored.created_at)
