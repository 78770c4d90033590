"""The inbox as one reviewer sees it: only what they may decide (SPEC rule 12).

The store lists pending reviews by the filters it indexes (tool, thread, age, thread
metadata, kind); whether a reviewer holds the roles a review needs is the agent's
policy, asked of ``authority.refusal`` for each item. :func:`visible_pending` reads
pages from the store until it has ``limit`` items the reviewer may decide or the store
has no more, so paging with the cursor of the last item kept never skips one.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import replace
from typing import Any

from handrail.checkpoint.base import PendingFilter, PendingItem
from handrail.runtime.authority import refusal
from handrail.runtime.effects import Effect, Env, StoreCall
from handrail.runtime.events import decode_review

__all__ = ["visible_pending"]


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
            if refusal(env.spec, value, reviewer) is None:
                kept.append(item)
                if len(kept) == filter.limit:
                    return kept
        if len(items) < page_filter.limit:
            return kept
        last = items[-1]
        page_filter = replace(
            page_filter, after=(last.review.created_at, last.thread_id, last.review.interrupt_id)
        )
