"""InMemorySaver: the store protocol in process memory, for tests and prototypes.

Its thread records and deletion records are sealed when written and checked whenever a
reader returns them; what damage means for objects kept in memory is in ``_kept``. The
logs are kept as the bytes the runtime wrote, and checked by the runtime's hash chain,
as everywhere.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, TypeVar

from handrail.checkpoint._kept import (
    Seal,
    check,
    check_deletion,
    found,
    kept_record,
    rebuilt,
    seal_deletion,
    seal_of,
)
from handrail.checkpoint._records import (
    deletion_passes,
    deletion_time,
    encode_by,
    encode_metadata,
)
from handrail.checkpoint._repair import ORPHAN, plan, without_log
from handrail.checkpoint._signal import QueueSignal
from handrail.checkpoint.base import (
    QUEUED_RUN,
    Append,
    BaseCheckpointSaver,
    ClaimFilter,
    DeletionRecord,
    Derived,
    FeedEntry,
    PendingFilter,
    PendingItem,
    StoredEvent,
    ThreadFilter,
    ThreadRead,
    ThreadRecord,
    feed_position,
    metadata_matches,
)
from handrail.checkpoint.grants import GrantFilter, GrantRecord, apply_change, page, spent
from handrail.checkpoint.integrity import sealed_hash
from handrail.checkpoint.seals import head_after
from handrail.checkpoint.serde import loads
from handrail.errors import ConflictError

__all__ = ["InMemorySaver", "MemorySaver"]

T = TypeVar("T")


class InMemorySaver(BaseCheckpointSaver):
    """Keeps every thread's log in memory; safe to share between Python threads.

    Events are stored serialised, exactly as a durable store keeps them, so a thread
    behaves the same here as in SQLite or Postgres. Everything is lost when the process
    exits: use ``SqliteSaver`` or ``PostgresSaver`` for pauses that must survive.

    Example::

        agent = create_agent(model, tools, middleware=[...], checkpointer=InMemorySaver())
    """

    in_process = True  # a pending review's inbox payload is its event's bytes: held once

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, list[StoredEvent]] = {}
        self._records: dict[str, ThreadRecord] = {}
        self._seals: dict[str, Seal] = {}  # each record's, made when it was appended
        self._runs: dict[str, set[str]] = {}
        self._readings: dict[str, StoredEvent] = {}
        self._queued: dict[str, float] = {}  # thread -> when it was queued (no dead runs in memory)
        self._feed: list[FeedEntry] = []  # cursors are numbers from 1, in order
        self._feed_next = 1
        self._signal = QueueSignal()
        # in the order they were made, so by time; each with its seal
        self._deletions: list[tuple[DeletionRecord, bytes]] = []
        self._grants: dict[str, GrantRecord] = {}  # by id (``checkpoint/grants.py``)

    def append(self, thread_id: str, change: Append) -> None:
        record, expected_seq, events = change.record, change.expected_seq, change.events
        metadata = encode_metadata(record.metadata, thread_id)  # refused before anything changes
        with self._lock:
            current = self._records.get(thread_id)
            head = current.head_seq if current is not None else 0
            if head != expected_seq:
                raise ConflictError(
                    f"thread {thread_id!r} moved on: expected it at event {expected_seq}, found it at {head}",
                    thread_id=thread_id,
                )
            if current is not None and expected_seq > 0 and current.epoch != record.epoch:
                raise ConflictError(
                    f"thread {thread_id!r} was deleted and started again since it was read",
                    thread_id=thread_id,
                )
            # grants born with these events: a bad one is refused before anything changes
            kept_grants = apply_change(self._grants, change.grants) if change.grants is not None else None
            head_hash = head_after(events, current.head_hash if current else None)
            kept = kept_record(record, head_hash)
            log = self._events.get(thread_id)
            if log is None:
                self._events[thread_id] = list(events)  # a list of its size: a paused thread holds little
            else:
                log.extend(events)
            self._records[thread_id] = kept
            self._seals[thread_id] = seal_of(kept, metadata)
            if change.reading is not None:
                self._readings[thread_id] = change.reading
            if kept_grants is not None:
                self._grants = kept_grants
            if change.claim is not None:
                self._runs.setdefault(thread_id, set()).add(change.claim)
                self._queued.pop(thread_id, None)
            if change.release is not None:
                self._release(thread_id, change.release)
            if change.queue:
                self._queued.setdefault(thread_id, time.time())
            at = time.time()  # the commit's time, as a durable store takes its transaction's
            for notice in change.notices:
                self._feed.append(
                    FeedEntry(str(self._feed_next), thread_id, record.head_seq, notice.kind, at, notice.data)
                )
                self._feed_next += 1
        if change.queue:
            self._signal.notify()

    def read(
        self, thread_id: str, *, after_seq: int = 0, upto_seq: int | None = None, from_reading: bool = False
    ) -> ThreadRead:
        with self._lock:
            record = self._checked(thread_id)
            log = self._events.get(thread_id, [])
            reading = self._readings.get(thread_id) if from_reading and not after_seq else None
            if reading is not None and upto_seq is None:
                after = (
                    log[reading.seq :] if log and log[0].seq == 1 else [e for e in log if e.seq > reading.seq]
                )
                return ThreadRead(record=record, events=after, reading=reading)
            if not log or log[0].seq == 1:
                # an unpruned log: seq n sits at index n - 1, slicing is O(events returned)
                end = len(log) if upto_seq is None else max(0, min(upto_seq, len(log)))
                return ThreadRead(record=record, events=log[max(after_seq, 0) : end])
            top = upto_seq if upto_seq is not None else log[-1].seq
            return ThreadRead(record=record, events=[e for e in log if after_seq < e.seq <= top])

    def get_thread(self, thread_id: str) -> ThreadRecord | None:
        with self._lock:
            return self._checked(thread_id)

    def _checked(self, thread_id: str) -> ThreadRecord | None:
        """The kept record of a thread, checked against its seal (with the lock held)."""
        record = self._records.get(thread_id)
        if record is not None:
            check(thread_id, record, self._seals[thread_id])
        return record

    def list_threads(self, filter: ThreadFilter) -> list[ThreadRecord]:
        with self._lock:
            kept = list(self._records.items())
            seals = dict(self._seals)
        with _checked_on_failure(kept, seals):
            chosen = [
                (thread_id, r)
                for thread_id, r in kept
                if (filter.status is None or r.status == filter.status)
                and (filter.updated_after is None or r.updated_at > filter.updated_after)
                and (filter.updated_before is None or r.updated_at < filter.updated_before)
                and metadata_matches(filter.metadata, r.metadata)
                and (filter.owners is None or filter.owners.matches(r.metadata))
            ]
            chosen.sort(key=lambda k: (-k[1].updated_at, k[1].thread_id))
        page = chosen[filter.offset : filter.offset + filter.limit]
        for thread_id, record in page:  # what a reader returns is checked
            check(thread_id, record, seals[thread_id])
        return [record for _, record in page]

    def list_pending(self, filter: PendingFilter) -> list[PendingItem]:
        now = time.time()
        with self._lock:
            # the records written with reviews, and any that has some now: their counts must agree
            seals = {thread_id: seal for thread_id, seal in self._seals.items() if seal.count}
            kept = [(t, r) for t, r in self._records.items() if r.pending or t in seals]
            seals.update((t, self._seals[t]) for t, _ in kept if t not in seals)
        for thread_id, record in kept:
            if not isinstance(record.pending, tuple) or len(record.pending) != seals[thread_id].count:
                check(thread_id, record, seals[thread_id])
        with _checked_on_failure(kept, seals):
            items = [
                (thread_id, PendingItem(thread_id=r.thread_id, review=p, metadata=r.metadata))
                for thread_id, r in kept
                if (filter.thread_id is None or r.thread_id == filter.thread_id)
                and metadata_matches(filter.metadata, r.metadata)
                and (filter.owners is None or filter.owners.matches(r.metadata))
                for p in r.pending
                if (filter.tool is None or filter.tool in p.tools)
                and (filter.kind is None or p.kind == filter.kind)
                and (filter.older_than is None or p.created_at <= now - filter.older_than)
            ]
            newest = filter.order == "newest"
            items.sort(key=lambda k: _pending_key(k[1]), reverse=newest)
            after = filter.after
            if after is not None:
                items = [
                    (thread_id, item)
                    for thread_id, item in items
                    if (_pending_key(item) < after if newest else _pending_key(item) > after)
                ]
        page = items[: filter.limit]
        records = dict(kept)
        for thread_id in dict.fromkeys(
            thread_id for thread_id, _ in page
        ):  # what a reader returns is checked
            check(thread_id, records[thread_id], seals[thread_id])
        return [item for _, item in page]

    def delete_thread(self, thread_id: str, *, by: Any = None) -> bool:
        # kept as a durable store keeps it (stored, then read back): a copy of the caller's value
        who = loads(encode_by(by, thread_id))
        with self._lock:
            log = self._events.pop(thread_id, None) or []
            self._runs.pop(thread_id, None)
            self._queued.pop(thread_id, None)
            self._readings.pop(thread_id, None)
            self._seals.pop(thread_id, None)
            record = self._records.pop(thread_id, None)
            if record is None:
                return False
            last = log[-1] if log else None
            deletion = DeletionRecord(
                thread_id=thread_id,
                deleted_at=deletion_time(),
                by=who,
                head_seq=last.seq if last is not None else 0,
                head_hash=sealed_hash(last.payload) if last is not None else None,
                metadata=dict(record.metadata),
            )
            self._deletions.append((deletion, seal_deletion(deletion)))
            return True

    def list_deletions(
        self,
        *,
        since: float | None = None,
        until: float | None = None,
        owners: ClaimFilter | None = None,
        metadata: Mapping[str, Any] | None = None,
        limit: int = 1000,
    ) -> list[DeletionRecord]:
        with self._lock:
            kept = list(enumerate(self._deletions, start=1))
        try:
            # made in order, but the clock may step back: sorted as the SQL stores sort them
            kept.sort(key=lambda k: (k[1][0].deleted_at, k[1][0].thread_id, k[0]))
            found = [k for k in kept if deletion_passes(k[1][0], since, until, owners, metadata)]
        except Exception:  # a field changed to a value of another type: name the record
            for number, (deletion, seal) in kept:
                check_deletion(number, deletion, seal)
            raise
        page = found[: max(limit, 0)]
        for number, (deletion, seal) in page:
            check_deletion(number, deletion, seal)
        return [deletion for _, (deletion, _) in page]

    def repair_thread(
        self, thread_id: str, derive: Callable[[list[StoredEvent]], Derived], *, dry_run: bool = False
    ) -> list[str]:
        with self._lock:
            log = list(self._events.get(thread_id, ()))
            record, seal = self._records.get(thread_id), self._seals.get(thread_id)
            kept = found(record, seal)
            if not log:
                if record is None or not without_log(thread_id, kept):
                    return []
                if not dry_run:
                    del self._records[thread_id]
                    self._seals.pop(thread_id, None)
                return [ORPHAN]
            derived = derive(log)
            new = plan(thread_id, derived, kept)
            if new is None:
                return []
            now, sealed, changes = rebuilt(thread_id, record, seal, new, derived)
            if not dry_run:
                self._records[thread_id], self._seals[thread_id] = now, sealed
            return changes

    def prune(
        self, thread_id: str, *, upto_seq: int, snapshot: StoredEvent, keep_kinds: frozenset[str]
    ) -> int:
        with self._lock:
            log = self._events.get(thread_id, [])
            position = next((i for i, e in enumerate(log) if e.seq == upto_seq), None)
            if position is None or snapshot.seq != upto_seq:
                raise ValueError(f"thread {thread_id!r} has no event {upto_seq} to replace with a snapshot")
            kept = [e for e in log[:position] if e.kind in keep_kinds]
            self._events[thread_id] = [*kept, snapshot, *log[position + 1 :]]
            self._readings.pop(thread_id, None)  # it holds the history before the snapshot
            return position - len(kept)

    def claim_run(self, thread_id: str, run_id: str) -> None:
        with self._lock:
            self._runs.setdefault(thread_id, set()).add(run_id)
            self._queued.pop(thread_id, None)

    def release_run(self, thread_id: str, run_id: str) -> None:
        with self._lock:
            self._release(thread_id, run_id)

    def _release(self, thread_id: str, run_id: str) -> None:
        runs = self._runs.get(thread_id)
        if runs is not None:
            runs.discard(run_id)
            if not runs:
                del self._runs[thread_id]

    def runs_alive(self, thread_id: str) -> set[str]:
        with self._lock:
            return set(self._runs.get(thread_id, ()))

    def read_feed(self, after: str | None = None, *, limit: int = 500) -> list[FeedEntry]:
        start = feed_position(after)
        with self._lock:
            feed = self._feed
            # cursors are increasing numbers: find the first one past ``start``
            low, high = 0, len(feed)
            while low < high:
                middle = (low + high) // 2
                if int(feed[middle].cursor) <= start:
                    low = middle + 1
                else:
                    high = middle
            return feed[low : low + max(limit, 0)]

    def feed_end(self) -> str | None:
        with self._lock:
            return self._feed[-1].cursor if self._feed else None

    def trim_feed(self, before: float) -> int:
        with self._lock:
            kept = [entry for entry in self._feed if entry.created_at >= before]
            dropped = len(self._feed) - len(kept)
            self._feed = kept
            return dropped

    def claim_queued(
        self, run_id: str, *, filter: ClaimFilter | None = None, thread_id: str | None = None
    ) -> str | None:
        if run_id == QUEUED_RUN:
            raise ValueError(f"{QUEUED_RUN!r} names a thread's queued row, not a run")
        with self._lock:
            for queued in sorted(self._queued, key=self._queued.__getitem__):
                if thread_id is not None and queued != thread_id:
                    continue
                record = self._records.get(queued)
                if record is None or self._runs.get(queued):
                    continue
                if filter is not None and not filter.matches(record.metadata):
                    continue
                del self._queued[queued]
                self._runs.setdefault(queued, set()).add(run_id)
                return queued
        return None

    def list_grants(self, filter: GrantFilter) -> list[GrantRecord]:
        with self._lock:
            return page(list(self._grants.values()), filter)

    def spend_grants(self, grant_ids: Sequence[str], *, thread_id: str, at: float) -> None:
        with self._lock:
            self._grants = spent(self._grants, grant_ids, thread_id, at)

    def revoke_grant(self, grant_id: str, *, by: Any = None, at: float | None = None) -> GrantRecord | None:
        with self._lock:
            record = self._grants.get(grant_id)
            if record is None or record.revoked_at is not None:
                return record
            revoked = replace(record, revoked_at=time.time() if at is None else at, revoked_by=by)
            self._grants[grant_id] = revoked
            return revoked

    # Nothing here blocks: the async twins (``BaseCheckpointSaver``'s) call the sync methods at once.
    async def _blocking(self, call: Callable[[], T]) -> T:
        return call()

    def wait_queued(self, timeout: float) -> None:
        self._signal.wait(timeout)

    async def await_queued(self, timeout: float) -> None:
        await self._signal.await_(timeout)


@contextmanager
def _checked_on_failure(kept: list[tuple[str, ThreadRecord]], seals: Mapping[str, Seal]) -> Iterator[None]:
    """Filtering or sorting kept records that fails (a field changed to a value of another
    type) raises the error of the record that is not as it was written, if one is not."""
    try:
        yield
    except Exception:
        for thread_id, record in kept:
            check(thread_id, record, seals[thread_id])
        raise


def _pending_key(item: PendingItem) -> tuple[float, str, str]:
    return (item.review.created_at, item.thread_id, item.review.interrupt_id)


MemorySaver = InMemorySaver
"""Alias of :class:`InMemorySaver` (LangGraph's older name)."""
