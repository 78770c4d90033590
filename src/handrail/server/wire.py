"""handrail's objects as the JSON the LangGraph Platform API sends.

Messages become LangChain's message dicts (``{"type": "ai", "content", "id",
"tool_calls", ...}``), an :class:`~handrail.Interrupt` ``{"value", "id"}``, a state
snapshot a ``ThreadState``. Everything is data: strings from tools and models are
JSON strings, never markup.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from handrail.messages import BaseMessage
from handrail.types import Interrupt, StateSnapshot

__all__ = ["checkpoint_of", "state_of", "to_wire"]


def to_wire(value: Any) -> Any:
    """A JSON-ready copy of ``value`` (messages, interrupts, tuples, datetimes converted)."""
    if isinstance(value, BaseMessage):
        out: dict[str, Any] = {"type": value.type}
        for field in dataclasses.fields(value):
            out[field.name] = to_wire(getattr(value, field.name))
        return out
    if isinstance(value, Interrupt):
        return {"value": to_wire(value.value), "id": value.id}
    if isinstance(value, Mapping):
        return {str(k): to_wire(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_wire(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def checkpoint_of(thread_id: str, checkpoint_id: str | None) -> dict[str, Any]:
    """A LangGraph ``Checkpoint`` dict."""
    return {
        "thread_id": thread_id,
        "checkpoint_ns": "",
        "checkpoint_id": checkpoint_id,
        "checkpoint_map": None,
    }


def state_of(thread_id: str, snapshot: StateSnapshot) -> dict[str, Any]:
    """A LangGraph ``ThreadState`` dict from a :class:`~handrail.StateSnapshot`."""
    checkpoint_id = (snapshot.config.get("configurable") or {}).get("checkpoint_id")
    parent = (snapshot.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    interrupts = [to_wire(i) for i in snapshot.interrupts]
    tasks = [
        {
            "id": f"{thread_id}:{step}",
            "name": step,
            "error": None,
            "interrupts": interrupts if index == 0 else [],
            "checkpoint": None,
            "state": None,
            "result": None,
        }
        for index, step in enumerate(snapshot.next)
    ]
    return {
        "values": to_wire(snapshot.values),
        "next": list(snapshot.next),
        "checkpoint": checkpoint_of(thread_id, checkpoint_id),
        "metadata": to_wire(snapshot.metadata),
        "created_at": snapshot.created_at,
        "parent_checkpoint": checkpoint_of(thread_id, parent) if parent else None,
        "tasks": tasks,
        "interrupts": interrupts,
    }
