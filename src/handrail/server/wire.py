"""handrail's objects as the JSON the LangGraph Platform API sends.

Messages become LangChain's message dicts (``{"type": "ai", "content", "id",
"tool_calls", ...}``), an :class:`~handrail.Interrupt` ``{"value", "id"}``, a state
snapshot a ``ThreadState``. Everything is data: strings from tools and models are
JSON strings, never markup.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson

from handrail.agent import PendingInterrupt
from handrail.messages import BaseMessage
from handrail.types import AuditEntry, Interrupt, StateSnapshot

__all__ = ["audit_csv", "audit_entry", "checkpoint_of", "inbox_entry", "state_of", "to_wire", "wire_default"]


_FIELDS: dict[type, tuple[str, ...]] = {}
_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME


def to_wire(value: Any) -> Any:
    """A JSON-ready copy of ``value`` (messages, interrupts, tuples, datetimes converted).

    Made by orjson in one pass (:func:`wire_default` for what JSON has no form of), not
    by walking every dict and list in Python: an inbox page's items hold whole JSON
    schemas.
    """
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return orjson.loads(orjson.dumps(value, default=wire_default, option=_OPTIONS))


def wire_default(value: Any) -> Any:
    """What orjson makes of an object JSON has no form of: a message as LangChain's message
    dict, an :class:`~handrail.Interrupt` as ``{"value", "id"}``, a datetime in ISO form,
    any other mapping as a dict, anything else as its ``str``."""
    if isinstance(value, BaseMessage):
        names = _FIELDS.get(type(value))
        if names is None:
            names = _FIELDS[type(value)] = tuple(f.name for f in dataclasses.fields(value))
        out: dict[str, Any] = {"type": value.type}
        for name in names:
            out[name] = getattr(value, name)
        return out
    if isinstance(value, Interrupt):
        return {"value": value.value, "id": value.id}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (list, tuple)):
        return list(value)
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


def _review_configs(value: Mapping[str, Any]) -> list[Any]:
    configs = value.get("review_configs")
    if isinstance(configs, list):
        return configs
    if "name" in value:
        return [{"action_name": value["name"], "allowed_decisions": value.get("allowed_decisions", [])}]
    return []


def inbox_entry(item: PendingInterrupt, last_messages: Sequence[Any]) -> dict[str, Any]:
    """One inbox item: the review, its action requests and review configs, the last messages."""
    value = item.interrupt.value if isinstance(item.interrupt.value, Mapping) else {}
    requests = value.get("action_requests") or ([value] if "name" in value else [])
    return {
        "thread_id": item.thread_id,
        "interrupt_id": item.interrupt.id,
        "kind": item.kind,
        "tools": list(item.tools),
        "created_at": item.created_at.isoformat(),
        "metadata": to_wire(item.metadata),
        "value": to_wire(item.interrupt.value),
        "action_requests": to_wire(requests),
        "review_configs": to_wire(_review_configs(value)),
        "last_messages": to_wire(list(last_messages)),
        # rules 14-15: how far its approvals have come, and when it expires unanswered
        "approvals": [a.as_json() for a in item.approvals],
        "expires_at": item.expires_at.isoformat() if item.expires_at is not None else None,
    }


AUDIT_FIELDS = [
    *("thread_id", "seq", "at", "event", "interrupt_id", "kind", "reviewer", "channel"),
    *("tool_call_id", "tool", "args", "proposed", "value", "result", "by"),
]


def audit_entry(entry: AuditEntry) -> dict[str, Any]:
    """One audit entry as JSON."""
    return {name: to_wire(getattr(entry, name)) for name in AUDIT_FIELDS}


def audit_csv(entries: Sequence[Mapping[str, Any]]) -> str:
    """Audit entries (as :func:`audit_entry` gives them) as CSV, nested values as JSON.

    Tool arguments, messages and reviewer names are untrusted, and a spreadsheet may run a
    cell that starts with ``=``, ``+``, ``-`` or ``@`` as a formula (some read past a
    leading tab or carriage return first). Such a cell gets a leading single quote (``'=1+1``), as
    OWASP advises against CSV injection, and so does a cell that starts with a quote
    already, so the rule can be undone exactly: take one leading ``'`` off every cell
    that starts with one. A plain number (``-5``, ``-2.5``, ``1e-3``) is left as it is,
    since a spreadsheet reads it as a number, never as a formula. The result is ordinary
    CSV (Python's :mod:`csv` reads it back cell for cell).
    """
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=AUDIT_FIELDS)
    writer.writeheader()
    for entry in entries:
        writer.writerow({key: _csv_cell(value) for key, value in entry.items()})
    return out.getvalue()


_FORMULA_START = frozenset("=+-@\t\r'")
_PLAIN_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")


def _csv_cell(value: Any) -> str:
    """One CSV cell: text as it is, anything else as JSON; neutralised if a spreadsheet
    would read it as a formula (see :func:`audit_csv`)."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    if text[:1] in _FORMULA_START and not _PLAIN_NUMBER.fullmatch(text):
        return "'" + text
    return text
