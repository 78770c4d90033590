"""The notification events and their payloads (SPEC §5.4), made from the store's feed.

The store writes a notice to its feed in the same transaction as the events that cause
it (``runtime.notices``); this module says which notices are which notification event
and what each delivery's JSON says. The payload follows the Standard Webhooks shape::

    {
      "type": "review.requested",
      "timestamp": "2026-12-04T10:42:00.123Z",       # when the event was committed
      "data": {
        "thread_id": "...", "interrupt_id": "...", "agent": "support",
        "tools": ["refund"],
        "action_requests": [{"name": "refund", "args": {...}, "description": "..."}],
        "allowed_decisions": {"refund": ["approve", "reject"]},
        "reviewers": {"refund": ["support"]},        # roles that may decide; absent: anyone
        "expires_at": 1764844920.0,                  # when it expires unanswered, if it does
        "decided_by": null,                          # review.decided: {"id", "channel"}
        "decision": null,                            # review.decided: the answer recorded
        "links": {"review": "https://.../inbox/reviews/T/I", "api": "https://.../handrail/..."}
      }
    }

``run.finished`` and ``run.failed`` name the thread, the agent, the run and the
thread's status instead of a review. A notice of a kind this module does not know is
not an event (the feed also serves the live inbox, which reads more).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import orjson

from handrail.checkpoint.base import FeedEntry
from handrail.runtime.events import decode_notice

__all__ = [
    "EVENT_TYPES",
    "REVIEW_EVENTS",
    "TEST_EVENT",
    "Event",
    "check_event_types",
    "event_of",
    "example_event",
]

REVIEW_EVENTS = ("review.requested", "review.decided", "review.expired", "review.outcome_unknown")
EVENT_TYPES = (*REVIEW_EVENTS, "review.approved", "run.finished", "run.failed")
"""Every event an endpoint may subscribe to. ``review.approved`` is one approval counted
toward a review that needs several (rule 14); the review is ``review.decided`` once it has
them all."""

TEST_EVENT = "handrail.test"
"""The event of ``handrail webhooks test``: every endpoint takes it, whatever its events."""


class Event:
    """One notification event: its ``type``, the thread and review it is about, and the
    JSON ``body`` every endpoint that takes it is sent."""

    __slots__ = ("body", "interrupt_id", "thread_id", "type")

    def __init__(self, type: str, thread_id: str, interrupt_id: str | None, body: bytes) -> None:
        self.type = type
        self.thread_id = thread_id
        self.interrupt_id = interrupt_id
        self.body = body


def check_event_types(events: Any, where: str = "events") -> tuple[str, ...]:
    """``events`` as a tuple of known event types; ``ValueError`` naming the first unknown
    one and the known ones. A string is split on commas (the CLI's ``--events``)."""
    if isinstance(events, str):
        events = [part.strip() for part in events.split(",") if part.strip()]
    if not isinstance(events, (list, tuple)) or not events:
        raise ValueError(f"{where} must name at least one event of {', '.join(EVENT_TYPES)}")
    chosen: list[str] = []
    for name in events:
        if name == "*":
            return EVENT_TYPES
        if not isinstance(name, str) or name not in EVENT_TYPES:
            raise ValueError(
                f"{where}: unknown event {name!r}; the events are {', '.join(EVENT_TYPES)} (or *)"
            )
        if name not in chosen:
            chosen.append(name)
    return tuple(chosen)


def event_of(entry: FeedEntry, public_url: str) -> Event | None:
    """The notification event a feed notice is, or None when it is none. ``public_url``
    is where the service is reached (links in the payload)."""
    data = decode_notice(entry.data, entry.thread_id, entry.cursor)
    if not isinstance(data, dict):
        return None
    kind = entry.kind
    if kind == "review.requested" and data.get("kind") == "outcome_unknown":
        kind = "review.outcome_unknown"
    elif kind == "run.finished" and data.get("status") == "error":
        kind = "run.failed"
    if kind not in EVENT_TYPES:
        return None
    interrupt_id = data.get("interrupt_id") if kind.startswith("review.") else None
    if interrupt_id is not None and not isinstance(interrupt_id, str):
        return None
    payload = _data(kind, entry, data, public_url)
    return Event(kind, entry.thread_id, interrupt_id, _body(kind, entry.created_at, payload))


def example_event(public_url: str, endpoint_id: str) -> Event:
    """The event ``handrail webhooks test`` sends: a ``handrail.test`` with no review."""
    data = {
        "endpoint_id": endpoint_id,
        "message": "a test delivery from handrail",
        "links": _links(public_url),
    }
    return Event(TEST_EVENT, "", None, _body(TEST_EVENT, time.time(), data))


def _body(kind: str, at: float, data: Mapping[str, Any]) -> bytes:
    stamp = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return orjson.dumps({"type": kind, "timestamp": stamp, "data": data}, default=str)


def _data(kind: str, entry: FeedEntry, notice: dict[str, Any], public_url: str) -> dict[str, Any]:
    agent = notice.get("agent")
    data: dict[str, Any] = {"thread_id": entry.thread_id, "agent": agent if isinstance(agent, str) else None}
    if kind.startswith("run."):
        data.update(
            run_id=notice.get("run_id"),
            status=notice.get("status"),
            thread_status=notice.get("thread_status"),
            links=_links(public_url, entry.thread_id),
        )
        return data
    interrupt_id = str(notice.get("interrupt_id"))
    value = notice.get("value")
    requests = value.get("action_requests") if isinstance(value, dict) else None
    configs = value.get("review_configs") if isinstance(value, dict) else None
    data["interrupt_id"] = interrupt_id
    data["tools"] = [t for t in notice.get("tools") or () if isinstance(t, str)]
    data["action_requests"] = (
        requests if isinstance(requests, list) else ([value] if value is not None else [])
    )
    data["allowed_decisions"] = {
        str(c.get("action_name")): c.get("allowed_decisions")
        for c in (configs if isinstance(configs, list) else ())
        if isinstance(c, dict)
    }
    data["reviewers"] = notice.get("reviewers") or {}
    if notice.get("expires_at") is not None:
        data["expires_at"] = notice["expires_at"]
    if kind in ("review.decided", "review.expired", "review.approved"):
        data["decided_by"] = {"id": _who(notice.get("reviewer")), "channel": notice.get("channel")}
        if "answer" in notice:
            data["decision"] = notice["answer"]
        if kind == "review.approved" and isinstance(notice.get("approvals"), list):
            data["approvals"] = notice["approvals"]  # each call's {"approvals", "needed", "approved_by", ...}
    data["links"] = _links(public_url, entry.thread_id, interrupt_id)
    return data


def _who(reviewer: Any) -> str | None:
    if isinstance(reviewer, dict):
        found = reviewer.get("id")
        return found if isinstance(found, str) else None
    return reviewer if isinstance(reviewer, str) else None


def _links(public_url: str, thread_id: str | None = None, interrupt_id: str | None = None) -> dict[str, str]:
    base = public_url.rstrip("/")
    if thread_id is None:
        return {"inbox": f"{base}/inbox", "api": f"{base}/handrail/inbox"}
    thread = quote(thread_id, safe="")
    if interrupt_id is None:
        return {"thread": f"{base}/inbox/threads/{thread}", "api": f"{base}/threads/{thread}/state"}
    review = quote(interrupt_id, safe="")
    return {
        "review": f"{base}/inbox/reviews/{thread}/{review}",
        "api": f"{base}/handrail/threads/{thread}/interrupts/{review}/answer",
        "thread": f"{base}/inbox/threads/{thread}",
    }
