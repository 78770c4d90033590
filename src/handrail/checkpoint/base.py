"""The store protocol every checkpointer implements.

A store keeps, per thread, an append-only log of serialised events and one small
*thread record* (head sequence number, status, pending reviews, metadata), written in
the same transaction as the events. It knows nothing about agents: the runtime decides
what the events mean.

The whole protocol:

``append(thread_id, change)``
    Save one :class:`Append` atomically: add its events ``expected_seq + 1 ...`` and
    replace the thread record. If the thread's head is not ``expected_seq``, or (for
    ``expected_seq > 0``) its stored epoch is not ``record.epoch``, another writer got
    there first: raise :class:`~handrail.errors.ConflictError` and save nothing (SPEC
    rule 8). What else rides on an append (a run's claim and release, durability, a
    saved reading, the feed's notices, the queue, grants) is documented on
    :class:`Append`, field by field; the runtime asks for a durable append before a
    tool may act and at the end of a run (``runtime/commit.py``).
``read(thread_id, after_seq=0, upto_seq=None, from_reading=False)``
    The thread record and the events in ``(after_seq, upto_seq]``, read at one instant.
    With ``from_reading`` (and no range): the thread's saved reading as well, if it
    has one, and only the events after it - what a new process loads.
``get_thread``, ``list_threads``, ``list_pending``
    The cross-thread views the reviewers' inbox is built on (their filters:
    :mod:`handrail.checkpoint.filters`).
``delete_thread(thread_id, by=None)``, ``list_deletions(since=, until=, owners=, metadata=, limit=)``
    Deleting a thread removes it and its log and, in the same transaction, leaves a
    :class:`DeletionRecord`: who (``by``), when, the number and hash of the log's last
    record, the thread's metadata (SPEC rule 21). The audit across threads lists them.
``repair_thread(thread_id, derive, dry_run=False)``
    Rebuild the rows derived from a thread's log - its row, its pending reviews, their
    index rows - where they are damaged (``checkpoint/seals.py``): ``derive`` turns the
    log into the record the runtime would write (:class:`Derived`). Returns what changed
    (with ``dry_run``, what would change, and changes nothing).
``prune(thread_id, upto_seq=, snapshot=, keep_kinds=)``
    Compact old history: drop the events before ``upto_seq`` whose kind is not in
    ``keep_kinds`` and put ``snapshot`` in place of event ``upto_seq``, atomically.
``claim_run``, ``release_run``, ``runs_alive``
    Which runs are alive, so a tool call left unfinished by a dead run can be told
    apart from one still running (SPEC rule 9).
``Append.notices``, ``Append.queue``, ``read_feed``, ``feed_end``, ``claim_queued``
    What the review service and its workers read (``handrail.worker``). ``notices`` are
    rows of the store's *feed*, written in the append's transaction, so that a review
    asked or answered through any process or channel is seen by every reader, once,
    in commit order (:class:`FeedEntry`; a crash loses none). ``queue=True`` leaves the
    thread *queued*: an answer was recorded and nobody runs it yet. ``claim_queued``
    hands one queued thread - or one whose claimed run died - to one caller, as a run
    claimed for it, skipping threads with a live run: exactly one worker runs each.
    They are optional: a store without a feed or a queue keeps the defaults here, which
    refuse to read.

Every store takes every keyword of every method (the runtime calls them all).

Each method has an async twin with an ``a`` prefix. The defaults here run the sync
method in a worker thread (``_blocking``); stores with a native async driver override
them. The records the protocol takes and gives are in :mod:`handrail.checkpoint.stored`,
its filters in :mod:`handrail.checkpoint.filters`; both are re-exported here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from handrail.checkpoint.filters import (
    ClaimFilter,
    PendingFilter,
    PendingOrder,
    ThreadFilter,
    ThreadStatus,
    metadata_matches,
)
from handrail.checkpoint.grants import GrantFilter, GrantRecord
from handrail.checkpoint.stored import (
    NOTICE_KINDS,
    QUEUED_RUN,
    Append,
    DeletionRecord,
    Derived,
    FeedEntry,
    Notice,
    PendingItem,
    PendingReview,
    StoredEvent,
    ThreadRead,
    ThreadRecord,
)

__all__ = [
    "NOTICE_KINDS",
    "QUEUED_RUN",
    "Append",
    "BaseCheckpointSaver",
    "ClaimFilter",
    "DeletionRecord",
    "Derived",
    "FeedEntry",
    "Notice",
    "PendingFilter",
    "PendingItem",
    "PendingOrder",
    "PendingReview",
    "StoredEvent",
    "ThreadFilter",
    "ThreadRead",
    "ThreadRecord",
    "ThreadStatus",
    "metadata_matches",
]

T = TypeVar("T")


class BaseCheckpointSaver(ABC):
    """The store protocol (see the module docstring). Subclass it to add a backend."""

    in_process: ClassVar[bool] = False
    """True for a store that keeps what it is given as objects of this process, read by no
    other program (the memory store): a pending review's inbox payload may then be its
    interrupt event's bytes themselves, which only readers of this version know."""

    # Sync -------------------------------------------------------------------
    @abstractmethod
    def append(self, thread_id: str, change: Append) -> None:
        """Save ``change`` (see :class:`Append`): add its events and replace the record, atomically.

        Refuse a stale ``change.expected_seq`` or epoch with
        :class:`~handrail.errors.ConflictError`, saving nothing. An append returns once the
        store has committed it or raised: never sooner.
        """

    @abstractmethod
    def read(
        self, thread_id: str, *, after_seq: int = 0, upto_seq: int | None = None, from_reading: bool = False
    ) -> ThreadRead:
        """Return the thread record and its events in ``(after_seq, upto_seq]``.

        ``from_reading=True`` (with the default range): also the thread's saved reading,
        when it has one, and then only the events after it.
        """

    @abstractmethod
    def get_thread(self, thread_id: str) -> ThreadRecord | None:
        """Return the thread record, or None if the thread does not exist."""

    @abstractmethod
    def list_threads(self, filter: ThreadFilter) -> list[ThreadRecord]:
        """Return thread records matching ``filter``, most recently updated first."""

    @abstractmethod
    def list_pending(self, filter: PendingFilter) -> list[PendingItem]:
        """Return pending reviews matching ``filter``, oldest first."""

    @abstractmethod
    def delete_thread(self, thread_id: str, *, by: Any = None) -> bool:
        """Delete a thread and its log; return whether it existed.

        In the same transaction, leave a :class:`DeletionRecord` of it: ``by`` (who; a
        JSON value, None when nobody was named), the time, the number and sealed hash of
        the log's last record, the thread's metadata. A thread that does not exist
        leaves none. A ``by`` that cannot be stored raises
        :class:`~handrail.errors.SerializationError` and deletes nothing.
        """

    @abstractmethod
    def prune(
        self, thread_id: str, *, upto_seq: int, snapshot: StoredEvent, keep_kinds: frozenset[str]
    ) -> int:
        """Replace event ``upto_seq`` by ``snapshot`` and drop older events not in ``keep_kinds``.

        One transaction; returns how many events were dropped. Raises ``ValueError`` when the
        thread has no event ``upto_seq``. Events after ``upto_seq`` and the thread record are
        left alone, so pruning never conflicts with a run appending at the head.
        """

    @abstractmethod
    def claim_run(self, thread_id: str, run_id: str) -> None:
        """Mark ``run_id`` as alive while it may run tools of ``thread_id``."""

    @abstractmethod
    def release_run(self, thread_id: str, run_id: str) -> None:
        """Mark ``run_id`` as finished."""

    @abstractmethod
    def runs_alive(self, thread_id: str) -> set[str]:
        """The ids of the runs of ``thread_id`` that are still alive."""

    def list_deletions(
        self,
        *,
        since: float | None = None,
        until: float | None = None,
        owners: ClaimFilter | None = None,
        metadata: Mapping[str, Any] | None = None,
        limit: int = 1000,
    ) -> list[DeletionRecord]:
        """The records deletions left, oldest first: at most ``limit`` of them.

        ``since``/``until`` (epoch seconds, both included) bound their times;
        ``owners`` and ``metadata`` (a subset match) test the deleted thread's metadata,
        as :class:`ThreadFilter` tests a live thread's. A damaged record raises
        :class:`~handrail.errors.SerializationError` naming it. This default (a store
        that keeps no records of deletions) lists none.
        """
        return []

    def repair_thread(
        self, thread_id: str, derive: Callable[[list[StoredEvent]], Derived], *, dry_run: bool = False
    ) -> list[str]:
        """Rebuild the rows derived from the thread's log where they are damaged; what changed.

        In one transaction: read the log and call ``derive`` with it (it raises
        :class:`~handrail.errors.SerializationError` for a log that fails its checks:
        then nothing is written); keep the thread row and pending rows that pass every
        check and are bound to the log's head, and write the others from the derived
        record; make the index rows of the pending reviews their own. A row that is
        intact but ahead of the log (records lost from the log's end) or bound to
        another head is not rebuilt from it: ``SerializationError``. Returns one line per
        change (an empty list: nothing was damaged). A thread without a log and without
        a row: nothing. With ``dry_run``, nothing is written: the lines say what a repair
        would change (``handrail audit verify`` reports them). An optional capability:
        this default refuses it.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot rebuild a thread's rows")

    # The feed and the queue (the review service's; optional for other stores) --
    def read_feed(self, after: str | None = None, *, limit: int = 500) -> list[FeedEntry]:
        """The feed's notices after ``after`` (a cursor; None: from the start), oldest first.

        Only notices of committed appends, in the order of their commits: a notice is
        never returned before one committed earlier, so a reader that goes on from the
        last cursor it saw misses none.
        """
        raise NotImplementedError(f"{type(self).__name__} keeps no feed of notices")

    def feed_end(self) -> str | None:
        """The cursor of the feed's last notice (None when it is empty): where "from now on" starts."""
        raise NotImplementedError(f"{type(self).__name__} keeps no feed of notices")

    def trim_feed(self, before: float) -> int:
        """Drop the feed's notices written before ``before`` (epoch seconds); how many."""
        raise NotImplementedError(f"{type(self).__name__} keeps no feed of notices")

    def claim_queued(
        self, run_id: str, *, filter: ClaimFilter | None = None, thread_id: str | None = None
    ) -> str | None:
        """Claim ``run_id`` on one thread that is queued or whose claimed run died; its id.

        Only threads with no live run, passing ``filter`` (and, if given, ``thread_id``
        alone); the thread's queued and dead rows are dropped and ``run_id`` claimed in
        one transaction, so two callers never get the same thread. None: nothing to do.
        The caller runs the thread under ``run_id`` and releases it (``release_run``, or
        the last append's ``release``).
        """
        raise NotImplementedError(f"{type(self).__name__} keeps no queue of runs")

    def wait_queued(self, timeout: float) -> None:
        """Return when a thread may have been queued, or after ``timeout`` seconds.

        A hint for workers, never a promise: they look (``claim_queued``) after every
        return. This default only sleeps; stores that can tell wake sooner.
        """
        import time

        time.sleep(timeout)

    def claimed_read(self, thread_id: str, run_id: str) -> ThreadRead | None:
        """The read of ``thread_id`` (as ``read(thread_id, from_reading=True)`` gives it)
        that the claim of ``run_id`` on it made in its own transaction (``claim_queued``),
        once; None when the claim made none, or it was taken already.

        For the claimed run's first attempt, which trusts it as a cached reading: the
        run's first append checks the head, and a run refused there reads again. Stores
        that read nothing with a claim (this default) return None.
        """
        return None

    def list_grants(self, filter: GrantFilter) -> list[GrantRecord]:
        """Grants matching ``filter``, newest first (SPEC rule 16)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no grants")

    def spend_grants(self, grant_ids: Sequence[str], *, thread_id: str, at: float) -> None:
        """Spend one use of each grant, for calls on ``thread_id`` about to be planned at
        ``at``: all of them in one transaction, or none and
        :class:`~handrail.errors.GrantSpentError` naming the first that is revoked, lapsed
        or used up (two callers racing for a last use: exactly one gets it)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no grants")

    def revoke_grant(self, grant_id: str, *, by: Any = None, at: float | None = None) -> GrantRecord | None:
        """Revoke a grant: it covers no call that starts after. Returns it as revoked (as
        it was, when it was revoked already), or None when there is no such grant."""
        raise NotImplementedError(f"{type(self).__name__} keeps no grants")

    # Async twins (defaults hand the sync method to :meth:`_blocking`) ------
    async def _blocking(self, call: Callable[[], T]) -> T:
        """How the async defaults call a sync method: in a worker thread, so the event loop
        never waits on it. A store whose sync methods never block overrides it to call
        them at once (``InMemorySaver``)."""
        import asyncio

        return await asyncio.to_thread(call)

    async def aappend(self, thread_id: str, change: Append) -> None:
        """Async :meth:`append`."""
        await self._blocking(lambda: self.append(thread_id, change))

    async def aread(
        self, thread_id: str, *, after_seq: int = 0, upto_seq: int | None = None, from_reading: bool = False
    ) -> ThreadRead:
        """Async :meth:`read`."""
        return await self._blocking(
            lambda: self.read(thread_id, after_seq=after_seq, upto_seq=upto_seq, from_reading=from_reading)
        )

    async def aget_thread(self, thread_id: str) -> ThreadRecord | None:
        """Async :meth:`get_thread`."""
        return await self._blocking(lambda: self.get_thread(thread_id))

    async def alist_threads(self, filter: ThreadFilter) -> list[ThreadRecord]:
        """Async :meth:`list_threads`."""
        return await self._blocking(lambda: self.list_threads(filter))

    async def alist_pending(self, filter: PendingFilter) -> list[PendingItem]:
        """Async :meth:`list_pending`."""
        return await self._blocking(lambda: self.list_pending(filter))

    async def alist_grants(self, filter: GrantFilter) -> list[GrantRecord]:
        """Async :meth:`list_grants`."""
        return await self._blocking(lambda: self.list_grants(filter))

    async def aspend_grants(self, grant_ids: Sequence[str], *, thread_id: str, at: float) -> None:
        """Async :meth:`spend_grants`."""
        await self._blocking(lambda: self.spend_grants(grant_ids, thread_id=thread_id, at=at))

    async def arevoke_grant(
        self, grant_id: str, *, by: Any = None, at: float | None = None
    ) -> GrantRecord | None:
        """Async :meth:`revoke_grant`."""
        return await self._blocking(lambda: self.revoke_grant(grant_id, by=by, at=at))

    async def adelete_thread(self, thread_id: str, *, by: Any = None) -> bool:
        """Async :meth:`delete_thread`."""
        return await self._blocking(lambda: self.delete_thread(thread_id, by=by))

    async def alist_deletions(
        self,
        *,
        since: float | None = None,
        until: float | None = None,
        owners: ClaimFilter | None = None,
        metadata: Mapping[str, Any] | None = None,
        limit: int = 1000,
    ) -> list[DeletionRecord]:
        """Async :meth:`list_deletions`."""
        return await self._blocking(
            lambda: self.list_deletions(
                since=since, until=until, owners=owners, metadata=metadata, limit=limit
            )
        )

    async def aprune(
        self, thread_id: str, *, upto_seq: int, snapshot: StoredEvent, keep_kinds: frozenset[str]
    ) -> int:
        """Async :meth:`prune`."""
        return await self._blocking(
            lambda: self.prune(thread_id, upto_seq=upto_seq, snapshot=snapshot, keep_kinds=keep_kinds)
        )

    async def aclaim_run(self, thread_id: str, run_id: str) -> None:
        """Async :meth:`claim_run`."""
        await self._blocking(lambda: self.claim_run(thread_id, run_id))

    async def arelease_run(self, thread_id: str, run_id: str) -> None:
        """Async :meth:`release_run`."""
        await self._blocking(lambda: self.release_run(thread_id, run_id))

    async def aruns_alive(self, thread_id: str) -> set[str]:
        """Async :meth:`runs_alive`."""
        return await self._blocking(lambda: self.runs_alive(thread_id))

    async def arepair_thread(
        self, thread_id: str, derive: Callable[[list[StoredEvent]], Derived], *, dry_run: bool = False
    ) -> list[str]:
        """Async :meth:`repair_thread`."""
        return await self._blocking(lambda: self.repair_thread(thread_id, derive, dry_run=dry_run))

    async def aread_feed(self, after: str | None = None, *, limit: int = 500) -> list[FeedEntry]:
        """Async :meth:`read_feed`."""
        return await self._blocking(lambda: self.read_feed(after, limit=limit))

    async def afeed_end(self) -> str | None:
        """Async :meth:`feed_end`."""
        return await self._blocking(self.feed_end)

    async def atrim_feed(self, before: float) -> int:
        """Async :meth:`trim_feed`."""
        return await self._blocking(lambda: self.trim_feed(before))

    async def await_queued(self, timeout: float) -> None:
        """Async :meth:`wait_queued` (this default sleeps without a thread)."""
        import asyncio

        await asyncio.sleep(timeout)

    async def aclaim_queued(
        self, run_id: str, *, filter: ClaimFilter | None = None, thread_id: str | None = None
    ) -> str | None:
        """Async :meth:`claim_queued`."""
        return await self._blocking(lambda: self.claim_queued(run_id, filter=filter, thread_id=thread_id))

    async def aclaimed_read(self, thread_id: str, run_id: str) -> ThreadRead | None:
        """Async :meth:`claimed_read` (no I/O: the sync method, on the caller's loop)."""
        return self.claimed_read(thread_id, run_id)


def feed_position(after: str | None) -> int:
    """The number a feed cursor stands for (the stores' cursors are decimal numbers, rising
    in commit order); ``ValueError`` for one no store gave. None: before the first notice."""
    if after is None:
        return 0
    if not isinstance(after, str) or not after.isdigit() or len(after) > 18:
        raise ValueError(f"not a cursor of this feed: {after!r:.60}")
    return int(after)
