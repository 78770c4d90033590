"""The deliverer: turns the feed into deliveries and sends them (inside ``handrail serve``,
or as ``handrail deliver``; many may run against one database).

One loop, in each process; each round is one transaction (``Outbox.turn``):

1. **Record** how the attempts finished since the last round went; a failed one is due
   again after a backoff.
2. **Expand**: read the store's feed after the lowest endpoint cursor, and record a
   delivery for each notice each endpoint takes (idempotent).
3. **Claim** up to as many due deliveries as there are free places (``concurrency``),
   each for a lease, and send each in a task of its own: a receiver that hangs holds
   its place until the channel's timeout, never the loop, the other deliveries or the
   service's answers (the service runs this loop as a background task and its database
   calls in threads).

It sleeps ``poll`` seconds between rounds with nothing to do, and less when woken
(:meth:`Deliverer.wake`: the service wakes it when it records an answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Mapping
from typing import Any

from handrail.checkpoint.base import BaseCheckpointSaver
from handrail.errors import SerializationError
from handrail.notify.channels import Channel, Delivery, Endpoint, Sent
from handrail.notify.events import TEST_EVENT, Event, event_of
from handrail.notify.outbox import LEASE, RETRY_FOR, Outbox
from handrail.server.db import ServerDB

__all__ = ["RETENTION", "Deliverer", "default_channels"]

log = logging.getLogger("handrail.notify")

_FEED_BATCH = 500  # notices read at once while expanding
RETENTION = 7 * 24 * 3600.0
"""Seconds the delivery log keeps a delivered or failed delivery (the feed's own retention)."""


def default_channels(db: ServerDB, *, slack_api_url: str | None = None) -> dict[str, Channel]:
    """The channels of every kind: webhooks; Slack when a bot token is set up
    (``handrail slack setup``); email (its settings come with each endpoint)."""
    from handrail.notify._email import EmailChannel
    from handrail.notify.webhooks import WebhookChannel

    channels: dict[str, Channel] = {"webhook": WebhookChannel(), "email": EmailChannel(db)}
    try:
        from handrail.notify.slack import SlackChannel
    except ImportError:  # the slack extra is not installed
        return channels
    slack = SlackChannel.from_db(db, base_url=slack_api_url)
    if slack is not None:
        channels["slack"] = slack
    return channels


class Deliverer:
    """Delivers the outbox of ``store``'s feed to the endpoints of ``outbox`` (``store``
    None: it only sends deliveries already made).

    Example::

        db = ServerDB.open(db_path="handrail.db")
        deliverer = Deliverer(Outbox(db), store, public_url="https://handrail.example.com",
                              channels=default_channels(db))
        await deliverer.run()            # until cancelled; or: await deliverer.run_once()
    """

    def __init__(
        self,
        outbox: Outbox,
        store: BaseCheckpointSaver | None,
        *,
        public_url: str,
        channels: Mapping[str, Channel],
        concurrency: int = 16,
        poll: float = 0.5,
        retry_for: float = RETRY_FOR,
        backoff_base: float = 2.0,
        lease: float = LEASE,
        retention: float = RETENTION,
    ) -> None:
        self.outbox = outbox
        self.store = store
        self.public_url = public_url
        self.channels = dict(channels)
        self.concurrency = max(int(concurrency), 1)
        self.poll = poll
        self.retry_for = retry_for
        self.backoff_base = backoff_base
        self.lease = lease
        self.retention = retention
        self._pruned_at = 0.0  # when the log was last pruned (monotonic seconds; 0: never)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._inflight: set[asyncio.Task[None]] = set()
        self._results: list[tuple[Delivery, Sent]] = []  # finished attempts not recorded yet
        self._more = False  # the last round left notices in the feed to turn
        self._woken = asyncio.Event()

    def wake(self) -> None:
        """Look for work now rather than at the next poll."""
        self._woken.set()

    # One round --------------------------------------------------------------------------
    async def run_once(self) -> tuple[int, int]:
        """One round, one transaction (``Outbox.turn``): record the attempts finished since
        the last round, turn the feed's new notices into deliveries, claim what is due for
        the free places and start sending it. (new deliveries, attempts started and recorded)"""
        results, self._results = self._results, []
        made = await self._made()
        free = self.concurrency - len(self._inflight)
        try:
            turn = await asyncio.to_thread(
                self.outbox.turn,
                self.owner,
                attempts=results,
                made=made,
                claim=max(free, 0),
                lease=self.lease,
                retry_for=self.retry_for,
                base=self.backoff_base,
            )
        except BaseException:
            self._results[:0] = results  # not recorded: the next round tries again
            raise
        self._told(results, turn.statuses)
        if turn.claimed:
            endpoints = {e.id: e for e in await asyncio.to_thread(self.outbox.endpoints)}
            for delivery in turn.claimed:
                self._start(endpoints.get(delivery.endpoint_id), delivery)
        return turn.added, len(turn.claimed) + len(results)

    async def _made(self) -> dict[str, tuple[list[tuple[int, Event]], int]]:
        """The deliveries the feed's next notices make, per endpoint, and where each
        endpoint's cursor goes (reads only)."""
        self._more = False
        if self.store is None:  # a deliverer that only sends (``handrail webhooks test``)
            return {}
        cursors = await asyncio.to_thread(self.outbox.cursors)
        if not cursors:
            return {}
        entries = await self.store.aread_feed(str(min(cursors.values())), limit=_FEED_BATCH)
        if not entries:
            return {}
        self._more = len(entries) == _FEED_BATCH
        endpoints = {e.id: e for e in await asyncio.to_thread(self.outbox.endpoints)}
        events = [(int(entry.cursor), self._event(entry)) for entry in entries]
        last = int(entries[-1].cursor)
        return {
            endpoint_id: (
                [(c, e) for c, e in events if e is not None and c > cursor and e.type in endpoint.events],
                last,
            )
            for endpoint_id, cursor in cursors.items()
            if (endpoint := endpoints.get(endpoint_id)) is not None and cursor < last
        }

    def _event(self, entry: Any) -> Event | None:
        try:
            return event_of(entry, self.public_url)
        except SerializationError as exc:  # a damaged notice: said once, never sent
            log.error("the feed's notice %s cannot be read, so it is not delivered: %s", entry.cursor, exc)
            return None

    def _start(self, endpoint: Endpoint | None, delivery: Delivery) -> None:
        task = asyncio.create_task(self._attempt(endpoint, delivery))
        self._inflight.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        self._woken.set()  # a place is free, and an attempt to record

    async def _attempt(self, endpoint: Endpoint | None, delivery: Delivery) -> None:
        # recorded with the next round, in its transaction; the list is looked up after the
        # send: a round swaps it for a new one meanwhile
        sent = await self._send(endpoint, delivery)
        self._results.append((delivery, sent))

    def _told(self, results: list[tuple[Delivery, Sent]], statuses: list[str]) -> None:
        for (delivery, sent), status in zip(results, statuses, strict=True):
            if status == "failed":
                log.warning(
                    "delivery %s to %s failed for good: %s", delivery.id, delivery.endpoint_id, sent.error
                )

    async def record(self) -> int:
        """Record the attempts finished since the last round, now; how many."""
        results, self._results = self._results, []
        if not results:
            return 0
        try:
            statuses = await asyncio.to_thread(
                self.outbox.finish, results, self.owner, retry_for=self.retry_for, base=self.backoff_base
            )
        except BaseException:
            self._results[:0] = results
            raise
        self._told(results, statuses)
        return len(results)

    async def _send(self, endpoint: Endpoint | None, delivery: Delivery) -> Sent:
        if endpoint is None:
            return Sent(False, error="the endpoint was removed", retry=False)
        channel = self.channels.get(endpoint.kind)
        if channel is None:
            hint = " (run handrail slack setup)" if endpoint.kind == "slack" else ""
            return Sent(False, error=f"no {endpoint.kind} channel is set up here{hint}")
        try:
            return await channel.send(endpoint, delivery, self.outbox)
        except Exception as exc:  # a channel's defect is a failed attempt, retried like any
            log.exception("the %s channel failed on delivery %s", endpoint.kind, delivery.id)
            return Sent(False, error=f"{type(exc).__name__}: {exc}")

    async def attempt(self, delivery_id: str) -> Delivery | None:
        """Attempt one due delivery now and wait for it (``handrail webhooks test``); the
        delivery as it then stands, or None when it was not due (or is another's)."""
        claimed = await asyncio.to_thread(
            self.outbox.claim, self.owner, limit=1, lease=self.lease, only=delivery_id
        )
        if not claimed:
            return None
        endpoint = await asyncio.to_thread(self.outbox.endpoint, claimed[0].endpoint_id)
        await self._attempt(endpoint, claimed[0])
        await self.record()
        return await asyncio.to_thread(self.outbox.delivery, delivery_id)

    async def drain(self, timeout: float = 30.0) -> None:
        """Wait until the attempts in flight are finished and recorded (tests, a clean stop)."""
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=timeout)
        await self.record()

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Deliver until cancelled (or ``stop`` is set); a failed round is logged and the
        next one tries again."""
        try:
            while stop is None or not stop.is_set():
                self._woken.clear()
                await self._prune()
                busy = False
                try:
                    added, started = await self.run_once()
                    busy = bool(added or started or self._more)
                except RuntimeError as exc:
                    if "after shutdown" in str(exc):  # the process is exiting: its threads are gone
                        return
                    log.exception("a delivery round failed; the next one tries again")
                except Exception:
                    log.exception("a delivery round failed; the next one tries again")
                if not busy:
                    # asyncio.timeout, not wait_for: on Python 3.11 a wait_for whose wait ends as
                    # the task is cancelled can drop the cancel, and a stopping service then
                    # waits for this loop for ever (seen in the tests)
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self.poll):
                            await self._woken.wait()
        finally:
            await self.close()

    async def _prune(self) -> None:
        """Once an hour: drop what the log delivered or failed more than ``retention`` ago."""
        if self._pruned_at and time.monotonic() - self._pruned_at < 3600:
            return
        self._pruned_at = time.monotonic()
        try:
            await asyncio.to_thread(self.outbox.prune, time.time() - self.retention)
        except Exception:
            log.warning("could not prune the delivery log; the next hour tries again", exc_info=True)

    async def close(self) -> None:
        """Stop the attempts in flight (their leases run out; another deliverer retries) and
        close the channels."""
        for task in list(self._inflight):
            task.cancel()
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.record()  # what finished before the stop
        for channel in self.channels.values():
            closing = getattr(channel, "aclose", None)
            if closing is not None:
                with contextlib.suppress(Exception):
                    await closing()


def is_test(delivery: Delivery) -> bool:
    """Whether ``delivery`` is the one-off of ``handrail webhooks test``."""
    return delivery.event == TEST_EVENT
