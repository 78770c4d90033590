"""The store protocol on the Postgres core: each method written once, as a step.

A step (``_drivers.py``) is driven by a saver's sync method or by its async twin, which
:func:`blocking` and :func:`awaiting` make from it: ``read = blocking(_read)`` is
PostgresSaver's ``read`` and AsyncPostgresSaver's (which runs the step on its event
loop: ``_aio.py``); :class:`AsyncProtocol` adds the ``a``-methods, ``aread =
awaiting(_read)``. PostgresSaver keeps the protocol's own ``a``-methods, which call its
sync ones in a worker thread (``base.py``). The rules the steps keep are the core's
(``core.py``); the SQL is the concept modules' (``_queries.py``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from handrail.checkpoint._grant_rows import checked_change, checked_spend, revoked_by, revoked_time
from handrail.checkpoint.base import (
    Append,
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
)
from handrail.checkpoint.grants import GrantFilter, GrantRecord
from handrail.checkpoint.postgres._core import PostgresCore
from handrail.checkpoint.postgres._drivers import Step
from handrail.checkpoint.postgres._grants import spend_flow
from handrail.checkpoint.postgres._write import append_flow

__all__ = ["AsyncProtocol", "PostgresProtocol", "awaiting", "blocking"]

P = ParamSpec("P")
T = TypeVar("T")
S = TypeVar("S", bound=PostgresCore)


def _named(method: Any, step: Callable[..., Any], name: str) -> None:
    """Name ``method`` ``name`` and give it the step's parameters, docstring and return value."""
    functools.update_wrapper(method, step)
    method.__name__ = name
    method.__qualname__ = f"{step.__qualname__.rpartition('.')[0]}.{name}"
    returns = step.__annotations__.get("return", "Step[Any]").removeprefix("Step[").removesuffix("]")
    method.__annotations__ = {**step.__annotations__, "return": returns}
    method.__signature__ = inspect.signature(step).replace(return_annotation=returns)


def blocking(step: Callable[Concatenate[S, P], Step[T]]) -> Callable[Concatenate[S, P], T]:
    """The sync method of a step ``_name``: ``name``, which runs the step (the saver's ``_drive``)."""

    def method(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._drive(step(self, *args, **kwargs))

    _named(method, step, step.__name__.removeprefix("_"))
    return method


def awaiting(
    step: Callable[Concatenate[S, P], Step[T]],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
    """The async method of a step ``_name``: ``aname``, which awaits the step (``_adrive``)."""

    async def method(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._adrive(step(self, *args, **kwargs))

    _named(method, step, "a" + step.__name__.removeprefix("_"))
    return method


class PostgresProtocol(PostgresCore):
    """The store protocol's methods (see ``base.py``), each a step and its sync method."""

    def _append(self, thread_id: str, change: Append) -> Step[None]:
        """Append events (see the store protocol); returns once the server has committed them."""
        claim, release = change.claim, change.release
        added = checked_change(change.grants)  # refused before anything is written
        released = self._forget_claim(thread_id, release)
        flow = append_flow(
            self._queries,
            self._cleared,
            thread_id,
            change.events,
            change.expected_seq,
            change.record,
            claim=claim,
            release=release,
            durable=change.durable,
            reading=change.reading,
            notices=change.notices,
            queue=change.queue,
            grants=added,
        )
        try:
            yield from self._perform(flow)
        except BaseException:
            if released and release is not None:
                self._remember_claim(thread_id, release)
            raise
        if claim is not None and claim != release:
            self._remember_claim(thread_id, claim)

    append = blocking(_append)

    def _read(
        self, thread_id: str, *, after_seq: int = 0, upto_seq: int | None = None, from_reading: bool = False
    ) -> Step[ThreadRead]:
        """The thread's record and events (see the store protocol), read at one instant."""
        return (yield from self._run(self._queries.read(thread_id, after_seq, upto_seq, from_reading)))

    read = blocking(_read)

    def _get_thread(self, thread_id: str) -> Step[ThreadRecord | None]:
        """The thread's record, or None."""
        return (yield from self._run(self._queries.get_thread(thread_id)))

    get_thread = blocking(_get_thread)

    def _list_threads(self, filter: ThreadFilter) -> Step[list[ThreadRecord]]:
        """Thread records matching ``filter``, most recently updated first."""
        return (yield from self._run(self._queries.list_threads(filter)))

    list_threads = blocking(_list_threads)

    def _list_pending(self, filter: PendingFilter) -> Step[list[PendingItem]]:
        """Pending reviews matching ``filter`` (the reviewers' inbox)."""
        return (yield from self._run(self._queries.list_pending(filter)))

    list_pending = blocking(_list_pending)

    def _delete_thread(self, thread_id: str, *, by: Any = None) -> Step[bool]:
        """Delete a thread, leaving the record of it (see the store protocol); whether it existed."""
        self._cleared.forget(thread_id)
        return (yield from self._run(self._queries.delete_thread(thread_id, by)))

    delete_thread = blocking(_delete_thread)

    def _list_deletions(
        self,
        *,
        since: float | None = None,
        until: float | None = None,
        owners: ClaimFilter | None = None,
        metadata: Mapping[str, Any] | None = None,
        limit: int = 1000,
    ) -> Step[list[DeletionRecord]]:
        """The records deletions left, oldest first (see the store protocol)."""
        return (yield from self._run(self._queries.list_deletions(since, until, owners, metadata, limit)))

    list_deletions = blocking(_list_deletions)

    def _repair_thread(
        self, thread_id: str, derive: Callable[[list[StoredEvent]], Derived], *, dry_run: bool = False
    ) -> Step[list[str]]:
        """Rebuild the thread's damaged rows from its log (see the store protocol); what changed."""
        self._cleared.forget(thread_id)
        return (yield from self._run(self._queries.repair_thread(thread_id, derive, dry_run)))

    repair_thread = blocking(_repair_thread)

    def _prune(
        self, thread_id: str, *, upto_seq: int, snapshot: StoredEvent, keep_kinds: frozenset[str]
    ) -> Step[int]:
        """Put ``snapshot`` in place of event ``upto_seq`` and drop older events not kept."""
        if snapshot.seq != upto_seq:
            raise ValueError(f"the snapshot must take the place of event {upto_seq}")
        return (yield from self._run(self._queries.prune(thread_id, upto_seq, snapshot, keep_kinds)))

    prune = blocking(_prune)

    def _claim_run(self, thread_id: str, run_id: str) -> Step[None]:
        """Mark ``run_id`` alive, under this saver's liveness lock."""
        yield from self._perform(self._queries.claim_flow(thread_id, run_id))
        self._remember_claim(thread_id, run_id)

    claim_run = blocking(_claim_run)

    def _release_run(self, thread_id: str, run_id: str) -> Step[None]:
        """Mark ``run_id`` finished."""
        self._forget_claim(thread_id, run_id)
        yield from self._run(self._queries.release_run(thread_id, run_id))

    release_run = blocking(_release_run)

    def _runs_alive(self, thread_id: str) -> Step[set[str]]:
        """The runs of the thread whose owner's liveness lock is held."""
        return (yield from self._run(self._queries.runs_alive(thread_id)))

    runs_alive = blocking(_runs_alive)

    def _read_feed(self, after: str | None = None, *, limit: int = 500) -> Step[list[FeedEntry]]:
        """The feed's notices after ``after``, in commit order (``_feed.py``)."""
        return (yield from self._run(self._queries.read_feed(after, limit)))

    read_feed = blocking(_read_feed)

    def _feed_end(self) -> Step[str | None]:
        """The cursor of the feed's last notice."""
        return (yield from self._run(self._queries.feed_end()))

    feed_end = blocking(_feed_end)

    def _trim_feed(self, before: float) -> Step[int]:
        """Drop the feed's notices written before ``before``; how many."""
        return (yield from self._run(self._queries.trim_feed(before)))

    trim_feed = blocking(_trim_feed)

    wait_queued = blocking(PostgresCore._wait_queued)

    def _claim_queued(
        self, run_id: str, *, filter: ClaimFilter | None = None, thread_id: str | None = None
    ) -> Step[str | None]:
        """Claim ``run_id`` on one queued thread (or one whose run died); its id (``_feed.py``)."""
        claimed = yield from self._perform(self._queries.claim_queued_flow(run_id, filter, thread_id))
        if claimed is None:
            return None
        thread, read = claimed
        self._remember_claim(thread, run_id)
        with self._io.guard("owner"):
            self._claim_reads[(thread, run_id)] = read
        return thread

    claim_queued = blocking(_claim_queued)

    def claimed_read(self, thread_id: str, run_id: str) -> ThreadRead | None:
        """The read the claim of ``run_id`` made (``_feed.py``), once; no I/O."""
        with self._io.guard("owner"):
            return self._claim_reads.pop((thread_id, run_id), None)

    # Grants (``grants.py``) -------------------------------------------------------------
    def _list_grants(self, filter: GrantFilter) -> Step[list[GrantRecord]]:
        """Grants matching ``filter``, newest first."""
        return (yield from self._run(self._queries.list_grants(filter)))

    list_grants = blocking(_list_grants)

    def _spend_grants(self, grant_ids: Sequence[str], *, thread_id: str, at: float) -> Step[None]:
        """Spend one use of each grant, all or none (``grants.py``)."""
        ids = checked_spend(grant_ids, at)
        if ids:
            yield from self._perform(spend_flow(self._queries, ids, thread_id, at))

    spend_grants = blocking(_spend_grants)

    def _revoke_grant(
        self, grant_id: str, *, by: Any = None, at: float | None = None
    ) -> Step[GrantRecord | None]:
        """Revoke a grant once; it as revoked, or None."""
        who, when = revoked_by(grant_id, by).decode(), revoked_time(at)  # refused before anything changes
        return (yield from self._run(self._queries.revoke_grant(grant_id, who, when)))

    revoke_grant = blocking(_revoke_grant)


class AsyncProtocol(PostgresProtocol):
    """The ``a``-methods of AsyncPostgresSaver: the same steps, awaited on its event loop."""

    aappend = awaiting(PostgresProtocol._append)
    aread = awaiting(PostgresProtocol._read)
    aget_thread = awaiting(PostgresProtocol._get_thread)
    alist_threads = awaiting(PostgresProtocol._list_threads)
    alist_pending = awaiting(PostgresProtocol._list_pending)
    adelete_thread = awaiting(PostgresProtocol._delete_thread)
    alist_deletions = awaiting(PostgresProtocol._list_deletions)
    arepair_thread = awaiting(PostgresProtocol._repair_thread)
    aprune = awaiting(PostgresProtocol._prune)
    aclaim_run = awaiting(PostgresProtocol._claim_run)
    arelease_run = awaiting(PostgresProtocol._release_run)
    aruns_alive = awaiting(PostgresProtocol._runs_alive)
    aread_feed = awaiting(PostgresProtocol._read_feed)
    afeed_end = awaiting(PostgresProtocol._feed_end)
    atrim_feed = awaiting(PostgresProtocol._trim_feed)
    await_queued = awaiting(PostgresCore._wait_queued)
    aclaim_queued = awaiting(PostgresProtocol._claim_queued)
    alist_grants = awaiting(PostgresProtocol._list_grants)
    aspend_grants = awaiting(PostgresProtocol._spend_grants)
    arevoke_grant = awaiting(PostgresProtocol._revoke_grant)
