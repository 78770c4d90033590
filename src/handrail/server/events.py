"""The live inbox: ``GET /handrail/events``, server-sent events of reviews and runs.

Events are rows of ``handrail_server_events`` (SQLite or PostgreSQL, beside the store),
so every service process on one database sees the events of all of them, and a client
that reconnects with ``Last-Event-ID`` gets what it missed. The kinds:

``review.requested``  a run paused for review: ``{"thread_id", "interrupt_id", "kind",
                      "tools", "value"}`` (once per interrupt, whichever process saw it)
``review.decided``    an answer was recorded: ``{"thread_id", "interrupt_id",
                      "reviewer", "channel"}``
``run.finished``      a run ended: ``{"thread_id", "run_id", "status"}``

Each caller sees only the reviews they may decide (``authority.refusal``, SPEC rule 12).
A stream polls the table a few times a second; an idle stream sends a comment line
every 15 seconds to keep proxies from closing it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import APIRouter, Depends, Header, Query, Request
from starlette.responses import StreamingResponse

from handrail.runtime.authority import refusal
from handrail.server.auth import caller
from handrail.server.db import ServerDB
from handrail.server.problems import documented
from handrail.server.service import Service
from handrail.server.tokens import Credential

__all__ = ["EventLog", "router"]

router = APIRouter(prefix="/handrail", tags=["reviews"], responses=documented(400, 401, 413))
POLL_SECONDS = 0.2
HEARTBEAT_SECONDS = 15.0


class EventLog:
    """Append and read the service's events."""

    def __init__(self, db: ServerDB) -> None:
        self._db = db

    def publish(self, kind: str, data: dict[str, Any], *, key: str | None = None) -> None:
        """Add an event; with ``key``, only the first event of that key is kept."""
        self._db.execute(
            "INSERT INTO handrail_server_events (key, kind, data, created_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (key) DO NOTHING",
            (key, kind, orjson.dumps(data, default=str).decode(), time.time()),
        )

    def since(self, last_id: int, limit: int = 500) -> list[tuple[int, str, dict[str, Any]]]:
        """Events after ``last_id``, oldest first."""
        rows = self._db.query(
            "SELECT id, kind, data FROM handrail_server_events WHERE id > ? ORDER BY id LIMIT ?",
            (last_id, limit),
        )
        return [(int(row[0]), str(row[1]), orjson.loads(str(row[2]))) for row in rows]

    def last_id(self) -> int:
        """The id of the newest event (0 when there is none)."""
        rows = self._db.query("SELECT MAX(id) FROM handrail_server_events")
        return int(rows[0][0] or 0)


def _visible(service: Service, kind: str, data: dict[str, Any], credential: Credential) -> bool:
    if kind != "review.requested":
        return True
    agent = service.agents.get(str(data.get("assistant_id")), service.agents[service.default_assistant])
    return refusal(agent._spec, data.get("value"), credential.reviewer) is None


class _EventStream(StreamingResponse):
    """Server-sent events: what the OpenAPI document names as the live inbox's content type."""

    media_type = "text/event-stream"


@router.get(
    "/events",
    response_class=_EventStream,
    responses={
        200: {
            "description": "Server-sent events",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        }
    },
)
async def events(
    request: Request,
    last_event_id: str | None = Header(None),
    after: int | None = Query(None, ge=0, description="start after this event id (as Last-Event-ID does)"),
    credential: Credential = Depends(caller),
) -> StreamingResponse:
    """The live inbox: review.requested, review.decided and run.finished, as they happen."""
    service = request.app.state.service
    assert isinstance(service, Service)
    log: EventLog = service.events
    start = after if after is not None else None
    if start is None and last_event_id is not None and last_event_id.isdigit():
        start = int(last_event_id)
    position = start if start is not None else await asyncio.to_thread(log.last_id)

    async def stream() -> AsyncIterator[bytes]:
        nonlocal position
        quiet_since = time.monotonic()
        yield b": handrail live inbox\n\n"
        while not await request.is_disconnected():
            batch = await asyncio.to_thread(log.since, position)
            for event_id, kind, data in batch:
                position = event_id
                if _visible(service, kind, data, credential):
                    body = orjson.dumps(data)
                    yield b"id: %d\nevent: %s\ndata: %s\n\n" % (event_id, kind.encode(), body)
                    quiet_since = time.monotonic()
            if not batch:
                if time.monotonic() - quiet_since > HEARTBEAT_SECONDS:
                    yield b": keep-alive\n\n"
                    quiet_since = time.monotonic()
                await asyncio.sleep(POLL_SECONDS)

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})
