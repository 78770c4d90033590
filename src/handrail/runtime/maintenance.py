"""Looking after a thread's log: the audit trail, and pruning old checkpoints.

The audit trail is the log itself (DESIGN: never a second bookkeeping that can
disagree): every review request, every answer with who gave it and when, every tool
call that started - with the arguments that actually ran - and its result.

Pruning keeps a thread's current state and its whole audit trail and drops the old
checkpoints: the events that only served time travel are deleted, and the oldest
checkpoint kept becomes a ``snapshot`` event holding the state at that point.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from datetime import UTC, datetime
from typing import Any

from handrail.errors import InvalidInputError
from handrail.messages import AIMessage, BaseMessage
from handrail.runtime.effects import Effect, Env, StoreCall
from handrail.runtime.events import AUDIT_KINDS, CHECKPOINT_KINDS, Event, decode_event, encode_event
from handrail.runtime.reading import fold_events, start_of
from handrail.types import AuditEntry

__all__ = ["audit_trail", "prune"]

Gen = Generator[Effect, Any, Any]


def prune(env: Env, keep_last: int) -> Gen:
    """Keep the newest ``keep_last`` checkpoints; return how many events were dropped."""
    if not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 1:
        raise InvalidInputError(f"keep_last must be a positive integer, got {keep_last!r}")
    read = yield StoreCall("read", (env.thread_id,), {})
    events = [decode_event(stored, env.thread_id) for stored in read.events]
    start, rest = start_of(env.spec, env.thread_id, events)
    checkpoints = ([start.base_seq] if start.base_seq else []) + [
        e.seq for e in rest if e.kind in CHECKPOINT_KINDS
    ]
    if len(checkpoints) <= keep_last:
        return 0
    cut = checkpoints[-keep_last]
    # A kept branch must still find the checkpoint it went back to.
    for event in reversed(events):
        if event.kind == "branch" and event.seq > cut and event.data["from_seq"] < cut:
            cut = event.data["from_seq"]
    if cut <= start.base_seq:
        return 0
    past = fold_events(env.spec, env.thread_id, [e for e in events if e.seq <= cut])
    at_cut = next(e for e in events if e.seq == cut)
    snapshot = Event("snapshot", {"state": past.to_snapshot()}, seq=cut, created_at=at_cut.created_at)
    dropped: int = yield StoreCall(
        "prune",
        (env.thread_id,),
        {"upto_seq": cut, "snapshot": encode_event(snapshot, env.thread_id), "keep_kinds": AUDIT_KINDS},
    )
    env.spec.cache.drop(env.thread_id)
    return dropped


def audit_trail(env: Env) -> Gen:
    """The thread's review requests, answers and tool runs, oldest first."""
    read = yield StoreCall("read", (env.thread_id,), {})
    events = [decode_event(stored, env.thread_id) for stored in read.events]
    proposed = _proposed_calls(events)
    entries: list[AuditEntry] = []
    for event in events:
        if event.kind in AUDIT_KINDS:
            entries.extend(_entries(env.thread_id, event, proposed))
    return entries


def _proposed_calls(events: Iterable[Event]) -> dict[str, dict[str, Any]]:
    """Every tool call the model proposed, by id (a start event omits unchanged args)."""
    calls: dict[str, dict[str, Any]] = {}
    for event in events:
        messages: Any = ()
        if event.kind == "snapshot":
            messages = event.data["state"].get("values", {}).get("messages", ())
        elif isinstance(event.data.get("values"), dict):
            messages = event.data["values"].get("messages", ())
        for message in messages:
            if isinstance(message, AIMessage):
                for call in message.tool_calls:
                    if call.get("id"):
                        calls[str(call["id"])] = dict(call)
    return calls


def _entries(thread_id: str, event: Event, proposed: dict[str, dict[str, Any]]) -> list[AuditEntry]:
    at = datetime.fromtimestamp(event.created_at, UTC)
    data = event.data
    if event.kind == "interrupt":
        return [
            AuditEntry(
                thread_id=thread_id,
                seq=event.seq,
                at=at,
                event="review_requested",
                interrupt_id=data["id"],
                value=data["value"],
                kind=data.get("kind", "interrupt"),
            )
        ]
    if event.kind == "resume":
        return [
            AuditEntry(
                thread_id=thread_id,
                seq=event.seq,
                at=at,
                event="answered",
                interrupt_id=interrupt_id,
                value=answer,
                reviewer=data.get("reviewer"),
                channel=data.get("channel"),
            )
            for interrupt_id, answer in data["answers"].items()
        ]
    if event.kind == "tool_started":
        call = proposed.get(data["task"], {})
        return [
            AuditEntry(
                thread_id=thread_id,
                seq=event.seq,
                at=at,
                event="tool_started",
                tool_call_id=data["task"],
                tool=data["name"],
                args=data["args"] if "args" in data else call.get("args"),
                proposed=call or None,
            )
        ]
    message: BaseMessage = data["message"]
    return [
        AuditEntry(
            thread_id=thread_id,
            seq=event.seq,
            at=at,
            event="tool_finished",
            tool_call_id=getattr(message, "tool_call_id", None),
            tool=message.name,
            result=message,
        )
    ]
