"""The events a thread's log is made of, and their (de)serialisation.

A thread is an append-only log of events numbered 1, 2, 3, ...; everything else (state,
checkpoints, pending interrupts, the audit trail) is a reading of it. The kinds:

``input``         new input starts a run: ``{"values", "next", "metadata"?}``
``step``          a step finished: ``{"step", "values", "next"}``; for ``tools`` the
                  results come from the step's ``tool_finished`` events, in call order
``update``        state changed by hand or by ``Command(update=...)``:
                  ``{"values", "next", "as_node", "supersede"}``
``interrupt``     a task paused: ``{"id", "step", "task", "index", "kind", "value", "source"}``
``resume``        answers arrived: ``{"answers": {interrupt_id: value}, "reviewer"}``
``tool_started``  a tool began to run: ``{"task", "name", "args", "run_id", "idempotent"}``
``tool_finished`` a tool call has its result: ``{"task", "message"}``
``branch``        time travel: the state goes back to the fold at ``{"from_seq"}``

``input``, ``step``, ``update`` and ``branch`` are checkpoints: positions a caller can
name with a ``checkpoint_id``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from handrail.checkpoint.base import StoredEvent
from handrail.checkpoint.serde import dumps, loads
from handrail.errors import SerializationError

__all__ = ["CHECKPOINT_KINDS", "EVENT_KINDS", "Event", "decode_event", "encode_event"]

EVENT_KINDS = frozenset(
    {"input", "step", "update", "interrupt", "resume", "tool_started", "tool_finished", "branch"}
)
CHECKPOINT_KINDS = frozenset({"input", "step", "update", "branch"})

_REQUIRED: dict[str, tuple[str, ...]] = {
    "input": ("values", "next"),
    "step": ("step", "next"),
    "update": ("values", "next"),
    "interrupt": ("id", "step", "task", "index", "kind", "value"),
    "resume": ("answers",),
    "tool_started": ("task", "name", "args"),
    "tool_finished": ("task", "message"),
    "branch": ("from_seq",),
}


@dataclass(slots=True)
class Event:
    """One entry of a thread's log."""

    kind: str
    data: dict[str, Any]
    seq: int = 0
    created_at: float = 0.0


def encode_event(event: Event, thread_id: str) -> StoredEvent:
    """Serialise an event for the store."""
    payload = dumps(event.data, where=f"{event.kind} event of thread {thread_id!r}")
    return StoredEvent(seq=event.seq, kind=event.kind, created_at=event.created_at, payload=payload)


def decode_event(stored: StoredEvent, thread_id: str) -> Event:
    """Load a stored event, refusing unknown kinds and damaged payloads (SPEC rule 10)."""
    if stored.kind not in EVENT_KINDS:
        raise SerializationError(
            f"cannot load thread {thread_id!r}, record {stored.seq}: unknown event kind {stored.kind!r}",
            thread_id=thread_id,
            seq=stored.seq,
        )
    data = loads(stored.payload, thread_id=thread_id, seq=stored.seq)
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
