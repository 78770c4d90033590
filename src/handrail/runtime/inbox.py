"""The inbox: its filters and cursors, its pages, and what one reviewer sees (SPEC rule 12).

:func:`pending_filter` and :func:`thread_filter` check a listing's arguments and read
its cursor; :func:`page_of` turns the store's items into an :class:`InterruptPage`.

The store lists pending reviews by the filters it indexes (tool, thread, age, thread
metadata, kind); whether a reviewer holds the roles a review needs is the agent's
policy, asked of ``handrail.review.refusal`` for each item. :func:`visible_pending` reads
pages from the store until it has ``limit`` items the reviewer may decide or the store
has no more, so paging with the cursor of the last item kept never skips one.
"""

from __future__ import annotations

import base64
from collections.abc import Generator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from handrail.checkpoint.base import ClaimFilter, PendingFilter, PendingItem, PendingOrder, ThreadFilter
from handrail.errors import InvalidInputError, stored_time
from handrail.review import refusal
from handrail.review.quorum import CallApprovals, progress
from handrail.review.terms import expires_at, needs_count
from handrail.runtime.effects import Effect, Env, StoreCall
from handrail.runtime.events import decode_review, decode_review_terms
from handrail.runtime.reading import load
from handrail.types import Interrupt, RunnableConfig

__all__ = [
    "InterruptPage",
    "PendingInterrupt",
    "listing",
    "page_of",
    "pending_filter",
    "thread_filter",
    "visible_pending",
]


def visible_pending(
    env: Env, filter: PendingFilter, reviewer: Any
) -> Generator[Effect, Any, list[PendingItem]]:
    """Up to ``filter.limit`` pending items, in the store's order, that ``reviewer`` may decide."""
    kept: list[PendingItem] = []
    page_filter = filter
    while True:
        items: list[PendingItem] = yield StoreCall("list_pending", (page_filter,))
        for item in items:
            value = decode_review(item.review.payload, item.thread_id, item.review.interrupt_id)
            if refusal(env.spec.policies, value, reviewer) is None:
                kept.append(item)
                if len(kept) == filter.limit:
                    return kept
        if len(items) < page_filter.limit:
            return kept
        last = items[-1]
        page_filter = replace(
            page_filter, after=(last.review.created_at, last.thread_id, last.review.interrupt_id)
        )


@dataclass(frozen=True, slots=True)
class PendingInterrupt:
    """One entry of the reviewers' inbox (:meth:`Agent.list_interrupts`)."""

    thread_id: str
    interrupt: Interrupt
    kind: str
    tools: tuple[str, ...]
    created_at: datetime
    metadata: Mapping[str, Any]
    expires_at: datetime | None = None  # when it expires unanswered (SPEC rule 15)
    approvals: tuple[CallApprovals, ...] = ()  # how far each call has come, when it counts (rule 14)
    terms: Mapping[str, Any] | None = None  # what it was asked under (``handrail.review.terms``)

    @property
    def needs_approvals(self) -> bool:
        """Whether the review counts approvals from several reviewers."""
        return needs_count(self.terms)

    @property
    def config(self) -> RunnableConfig:
        """The config to answer it with: ``agent.invoke(Command(...), item.config)``."""
        return {"configurable": {"thread_id": self.thread_id}}


@dataclass(frozen=True, slots=True)
class InterruptPage:
    """A page of the inbox; pass ``next_cursor`` as ``cursor`` to get the next one."""

    items: list[PendingInterrupt]
    next_cursor: str | None


def thread_filter(
    metadata: Mapping[str, Any] | None,
    status: str | None,
    updated_after: datetime | float | None,
    updated_before: datetime | float | None,
    limit: int,
    offset: int,
    owners: ClaimFilter | None = None,
) -> ThreadFilter:
    """The store's filter for one listing of threads, its arguments checked."""
    _check_owners(owners)
    if status not in (None, "idle", "running", "interrupted"):
        raise InvalidInputError(f"status must be 'idle', 'running' or 'interrupted', got {status!r}")
    if not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise InvalidInputError(f"limit must be an integer from 1 to 10000, got {limit!r}")
    if not isinstance(offset, int) or offset < 0:
        raise InvalidInputError(f"offset must be a non-negative integer, got {offset!r}")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise InvalidInputError("metadata must be a dict")

    def seconds(value: datetime | float | None, name: str) -> float | None:
        if value is None:
            return None
        if isinstance(value, datetime):
            if value.tzinfo is None:
                raise InvalidInputError(f"{name} must be an aware datetime (with a tzinfo)")
            return value.timestamp()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise InvalidInputError(f"{name} must be a datetime or epoch seconds, got {value!r}")

    return ThreadFilter(
        metadata=metadata,
        status=status,  # type: ignore[arg-type]
        updated_after=seconds(updated_after, "updated_after"),
        updated_before=seconds(updated_before, "updated_before"),
        limit=limit,
        offset=offset,
        owners=owners,
    )


def _check_owners(owners: Any) -> None:
    if owners is not None and not isinstance(owners, ClaimFilter):
        raise InvalidInputError(
            "owners must be a ClaimFilter (e.g. ClaimFilter('assistant_id', ('sql',), or_missing=True)), "
            f"got {type(owners).__name__}"
        )


def pending_filter(
    tool: str | None,
    thread_id: str | None,
    older_than: float | timedelta | None,
    metadata: Mapping[str, Any] | None,
    kind: str | None,
    limit: int,
    cursor: str | None,
    order: PendingOrder = "oldest",
    owners: ClaimFilter | None = None,
) -> PendingFilter:
    """The store's filter for one inbox listing, its arguments checked and its cursor read."""
    _check_owners(owners)
    if not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise InvalidInputError(f"limit must be an integer from 1 to 1000, got {limit!r}")
    seconds = older_than.total_seconds() if isinstance(older_than, timedelta) else older_than
    if seconds is not None and (not isinstance(seconds, (int, float)) or seconds < 0):
        raise InvalidInputError(f"older_than must be a non-negative number of seconds, got {older_than!r}")
    if order not in ("oldest", "newest"):
        raise InvalidInputError(f"order must be 'oldest' or 'newest', got {order!r}")
    after = None
    if cursor is not None:
        try:
            created, thread, interrupt_id, *made_for = orjson.loads(base64.urlsafe_b64decode(cursor.encode()))
            after = (float(created), str(thread), str(interrupt_id))
            cursor_order = made_for[0] if made_for else "oldest"
            if len(made_for) > 1 or cursor_order not in ("oldest", "newest"):
                raise ValueError(cursor_order)
        except Exception:
            raise InvalidInputError(f"cursor {cursor!r} is not one list_interrupts returned") from None
        if cursor_order != order:
            raise InvalidInputError(
                f"cursor {cursor!r} continues an order={cursor_order!r} listing; pass order={cursor_order!r} "
                f"with it, or start order={order!r} without a cursor"
            )
    return PendingFilter(
        tool=tool,
        thread_id=thread_id,
        older_than=float(seconds) if seconds is not None else None,
        metadata=metadata,
        kind=kind,
        after=after,
        limit=limit,
        order=order,
        owners=owners,
    )


def listing(env: Env, filter: PendingFilter, reviewer: Any) -> Generator[Effect, Any, InterruptPage]:
    """One page of the inbox (only what ``reviewer`` may decide, unless None), each review
    that counts approvals with how far it has come (read from its thread's log)."""
    if reviewer is None:
        items: list[PendingItem] = yield StoreCall("list_pending", (filter,))
    else:
        items = yield from visible_pending(env, filter, reviewer)
    page = page_of(items, filter)
    counted: list[PendingInterrupt] = []
    for entry in page.items:
        if entry.needs_approvals:
            fold = yield from load(Env(env.spec, env.store, entry.thread_id))
            record = fold.pending.get(entry.interrupt.id)
            votes = fold.votes.get(entry.interrupt.id, [])
            if record is not None:
                entry = replace(entry, approvals=progress(record.value, record.terms, votes))
        counted.append(entry)
    return InterruptPage(items=counted, next_cursor=page.next_cursor)


def page_of(items: list[Any], filter: PendingFilter) -> InterruptPage:
    """The inbox page the store's items make, with the cursor that continues it."""
    out = []
    for item in items:
        review = item.review
        value, terms = decode_review_terms(review.payload, item.thread_id, review.interrupt_id, review.kind)
        created = stored_time(review.created_at, item.thread_id, f"pending interrupt {review.interrupt_id}")
        expiry = expires_at(terms, created.timestamp())
        out.append(
            PendingInterrupt(
                thread_id=item.thread_id,
                interrupt=Interrupt(value=value, id=review.interrupt_id),
                kind=review.kind,
                tools=review.tools,
                created_at=created,
                metadata=dict(item.metadata),
                expires_at=datetime.fromtimestamp(expiry, UTC) if expiry is not None else None,
                terms=terms,
            )
        )
    next_cursor = None
    if len(items) == filter.limit and items:
        last = items[-1]
        key = [last.review.created_at, last.thread_id, last.review.interrupt_id]
        if filter.order != "oldest":  # cursors of oldest-first pages keep their earlier form
            key.append(filter.order)
        next_cursor = base64.urlsafe_b64encode(orjson.dumps(key)).decode()
    return InterruptPage(items=out, next_cursor=next_cursor)
