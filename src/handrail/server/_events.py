"""The live inbox: ``GET /handrail/events``, server-sent events of reviews and runs.

The events are the store's feed (``BaseCheckpointSaver.read_feed``): notices written by
whichever process and channel made them - this service, another one on the same
database, a worker, a Python program's ``agent.decide``, the review CLI - in the same
transaction as the events they tell of, so none is lost and none is told before it is
saved. Each event's id is its place in the feed (a decimal number, rising): a client
that reconnects with ``Last-Event-ID`` (or ``?after=ID``) gets what it missed, in order. The kinds:

``review.requested``  a run paused for review: ``{"thread_id", "interrupt_id", "kind",
                      "tools", "value"}`` - only to callers who may decide it
                      (``Agent.may_decide``, SPEC rule 12)
``review.decided``    an answer was recorded: ``{"thread_id", "interrupt_id",
                      "reviewer", "channel"}``
``review.approved``   one approval of a review that needs several (SPEC rule 14),
                      which stays pending: the same keys
``review.expired``    a review expired unanswered and its policy's ``on_expiry``
                      decided it (rule 15): the same keys, channel ``expiry``
``run.finished``      a run ended: ``{"thread_id", "run_id", "status"}`` (``success`` or
                      ``error``) and ``thread_status`` (``interrupted``, ``idle``, ``running``)

Only the threads of the agents this service serves are told of (SPEC rule 21): a
thread another agent's program or service wrote on the same store is not.

One reader per process reads the feed five times a second (and at once when this
process records an answer) for all its streams (:class:`LiveFeed`); an idle stream
sends a comment line every 15 seconds to keep proxies from closing it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from fastapi import APIRouter, Depends, Header, Query, Request
from starlette.responses import StreamingResponse

from handrail.checkpoint.base import BaseCheckpointSaver, FeedEntry
from handrail.errors import SerializationError
from handrail.runtime.events import decode_notice as read_notice
from handrail.server._access import require
from handrail.server._auth import RECHECK_SECONDS, caller, recheck
from handrail.server._problems import Problem, documented
from handrail.server._service import Service
from handrail.server.tokens import Credential
from handrail.server.wire import to_wire

__all__ = ["LiveFeed", "decode_notice", "router"]

log = logging.getLogger("handrail.server")
router = APIRouter(prefix="/handrail", tags=["reviews"], responses=documented(400, 401, 413))
POLL_SECONDS = 0.2
HEARTBEAT_SECONDS = 15.0


class LiveFeed:
    """The store's feed as this process's live streams see it: one reader for all of them.

    A background task reads the feed (five times a second, or at once when this process
    records something: :meth:`poke`) and keeps the last :data:`KEPT` notices; a stream
    takes what follows its position from them, or from the store while it catches up
    on older ones (a reconnect with an old ``Last-Event-ID``).
    """

    KEPT = 2000

    def __init__(self, service: Service) -> None:
        self.service = service
        first = service.agents[service.default_assistant]
        assert first.checkpointer is not None
        self.store: BaseCheckpointSaver = first.checkpointer
        self._kept: deque[FeedEntry] = deque(maxlen=self.KEPT)
        self._places: dict[str, int] = {}  # cursor -> its number in the kept window (counted from 0)
        self._count = 0  # notices read so far (the number of the next one)
        self.cursor: str | None = None  # the last notice read
        self._poked = asyncio.Event()
        self._news = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._stopping = False
        self.listeners: list[Callable[[], None]] = []  # told when new notices were read (the deliverer)

    async def start(self) -> None:
        """Begin reading the feed from its end (called when the app starts)."""
        self.cursor = await self.store.afeed_end()
        self._reader = asyncio.create_task(self._read())

    async def stop(self) -> None:
        """Stop the reader (when the app stops); it ends whatever it was doing."""
        self._stopping = True
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)

    async def end(self) -> str | None:
        """The feed's end as the store has it now: an event id a page can start its stream from."""
        return await self.store.afeed_end()

    def poke(self) -> None:
        """Something was just recorded here: read the feed now."""
        self._poked.set()

    async def _read(self) -> None:
        while not self._stopping:
            try:
                batch = await self.store.aread_feed(self.cursor)
            except Exception:
                log.warning("could not read the feed for the live inbox", exc_info=True)
                batch = []
            if batch:
                for entry in batch:
                    if len(self._kept) == self.KEPT:
                        self._places.pop(self._kept[0].cursor, None)
                    self._kept.append(entry)
                    self._places[entry.cursor] = self._count
                    self._count += 1
                self.cursor = batch[-1].cursor
                news, self._news = self._news, asyncio.Event()
                news.set()
                for listener in self.listeners:
                    listener()
                if len(batch) >= 500:  # more waiting: read on at once
                    continue
            # asyncio.timeout, not wait_for: on Python 3.11 a wait_for whose wait ends as the
            # task is cancelled drops the cancel, and a stopping service would hang on its reader
            try:
                async with asyncio.timeout(POLL_SECONDS):
                    await self._poked.wait()
            except TimeoutError:
                pass
            self._poked.clear()

    async def after(self, position: str | None) -> list[FeedEntry]:
        """The notices after ``position`` (None: from the feed's start), a batch at a time."""
        if position is not None and position == self.cursor:
            return []
        place = None if position is None else self._places.get(position)
        if place is not None:
            first = self._count - len(self._kept)
            return list(self._kept)[place - first + 1 :]
        return await self.store.aread_feed(position)  # older than what is kept: from the store

    async def news(self, timeout: float) -> None:
        """Wait until the reader has read something new (or ``timeout`` seconds)."""
        try:
            async with asyncio.timeout(timeout):  # not wait_for: it can drop a cancel on 3.11
                await self._news.wait()
        except TimeoutError:
            pass

    async def event(self, entry: FeedEntry, credential: Credential) -> bytes | None:
        """The SSE bytes of one feed entry for this caller, or None if it is not theirs to see:
        of a thread of an agent not served here (SPEC rule 21), or a review they may not decide."""
        data = decode_notice(entry)
        if data is None:
            return None  # a damaged notice tells nothing; the thread's own log is the truth
        assistant = (await self.service.locate(entry.thread_id)).assistant
        if assistant is None:
            return None
        if entry.kind == "review.requested":
            agent = self.service.agents[assistant]
            if not agent.may_decide(data.get("value"), credential.reviewer):
                return None
        body = orjson.dumps({"thread_id": entry.thread_id, **to_wire(data)}, default=str)
        return b"id: %s\nevent: %s\ndata: %s\n\n" % (entry.cursor.encode(), entry.kind.encode(), body)


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
    after: str | None = Query(
        None, max_length=64, description="start after this event id (as Last-Event-ID does)"
    ),
    credential: Credential = Depends(caller),
) -> StreamingResponse:
    """The live inbox: review.requested, review.decided and run.finished, as they happen
    (``review`` scope). The stream ends within about a second of its credential being
    revoked or its session ending."""
    require(credential, "review", "the live inbox")
    service = request.app.state.service
    assert isinstance(service, Service)
    feed = service.live
    assert isinstance(feed, LiveFeed)
    start = after if after is not None else last_event_id
    if start is not None:
        try:
            await feed.store.aread_feed(start, limit=0)
        except ValueError:
            raise Problem(400, f"{start!r:.80} is not an event id of this service's live inbox") from None
    # from now on: the feed's end as the store has it (this process's reader may lag behind)
    position = start if start is not None else await feed.end()

    async def stream() -> AsyncIterator[bytes]:
        nonlocal position
        quiet_since = time.monotonic()
        yield b": handrail live inbox\n\n"
        checked = time.monotonic()
        while not await request.is_disconnected():
            if time.monotonic() - checked >= RECHECK_SECONDS:  # revoked or signed out: the stream ends
                now = await recheck(request)
                if now is None or not (now.has("review") or now.has("admin")):
                    return
                checked = time.monotonic()
            batch = await feed.after(position)
            for entry in batch:
                position = entry.cursor
                event = await feed.event(entry, credential)
                if event is not None:
                    yield event
                    quiet_since = time.monotonic()
            if not batch:
                if time.monotonic() - quiet_since > HEARTBEAT_SECONDS:
                    yield b": keep-alive\n\n"
                    quiet_since = time.monotonic()
                await feed.news(RECHECK_SECONDS)

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})


def decode_notice(entry: FeedEntry) -> dict[str, Any] | None:
    """A feed entry's data, or None if it cannot be read."""
    try:
        data = read_notice(entry.data, entry.thread_id, entry.cursor)
    except SerializationError:
        return None
    return data if isinstance(data, dict) else None
