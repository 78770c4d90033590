"""The inbox in both orders (``PendingFilter.order``), against every backend, sync and async.

Newest first is the oldest-first order reversed, ties included ((created_at, thread_id,
interrupt_id) descending), and keyset paging with ``after`` walks it without skipping or
repeating an item, through each index the inbox query can walk (the pending table, the
tool index, the metadata index).
"""

from __future__ import annotations

from typing import Any

import pytest
from _stores import Store
from test_store_protocol import grow, review

from handrail.checkpoint.base import PendingItem

FILTERS: list[dict[str, Any]] = [{}, {"tool": "write_file"}, {"metadata": {"team": "x"}}, {"older_than": 0}]


def keys(items: list[PendingItem]) -> list[tuple[float, str, str]]:
    return [(i.review.created_at, i.thread_id, i.review.interrupt_id) for i in items]


async def _crowded_inbox(store: Store) -> None:
    """Nine reviews, most of them created at the same instant, two threads holding several."""
    await grow(
        store,
        "b",
        1,
        status="interrupted",
        metadata={"team": "x"},
        pending=(review("2", created_at=100.0), review("1", created_at=100.0), review("0", created_at=50.0)),
    )
    await grow(
        store,
        "a",
        1,
        status="interrupted",
        metadata={"team": "x"},
        pending=(review("9", created_at=100.0), review("3", created_at=100.0, tools=("send",))),
    )
    for thread in ("c", "d"):
        await grow(
            store,
            thread,
            1,
            status="interrupted",
            metadata={"team": "y" if thread == "d" else "x"},
            pending=(review("1", created_at=100.0),),
        )
    await grow(
        store, "e", 1, status="interrupted", metadata={"team": "x"}, pending=(review("1", created_at=200.0),)
    )
    await grow(store, "f", 1, status="interrupted", pending=(review("1", created_at=0.0),))


async def _pages(store: Store, limit: int, **filter: Any) -> list[list[tuple[float, str, str]]]:
    pages = []
    after = None
    while True:
        page = keys(await store.list_pending(limit=limit, after=after, **filter))
        if not page:
            return pages
        pages.append(page)
        after = page[-1]


async def test_newest_first_is_the_oldest_first_order_reversed_ties_included(store: Store) -> None:
    await _crowded_inbox(store)
    oldest = keys(await store.list_pending())
    assert oldest == sorted(oldest) and len(oldest) == 9
    assert [k[1:] for k in oldest[:3]] == [("f", "1"), ("b", "0"), ("a", "3")]
    assert keys(await store.list_pending(order="newest")) == oldest[::-1]


@pytest.mark.parametrize("filter", FILTERS, ids=["all", "tool", "metadata", "older_than"])
async def test_newest_first_agrees_with_oldest_first_under_each_filter(
    store: Store, filter: dict[str, Any]
) -> None:
    await _crowded_inbox(store)
    oldest = keys(await store.list_pending(**filter))
    assert oldest, filter
    assert keys(await store.list_pending(order="newest", **filter)) == oldest[::-1]
    assert keys(await store.list_pending(order="newest", limit=3, **filter)) == oldest[::-1][:3]


@pytest.mark.parametrize("order", ["oldest", "newest"])
@pytest.mark.parametrize("filter", FILTERS, ids=["all", "tool", "metadata", "older_than"])
@pytest.mark.parametrize("limit", [1, 2, 4])
async def test_keyset_pages_in_either_order_cover_every_item_once_with_equal_created_at(
    store: Store, order: str, filter: dict[str, Any], limit: int
) -> None:
    await _crowded_inbox(store)
    everything = keys(await store.list_pending(order=order, **filter))
    pages = await _pages(store, limit, order=order, **filter)
    assert [k for page in pages for k in page] == everything
    assert all(len(page) == limit for page in pages[:-1])


async def test_a_page_after_a_key_that_is_gone_starts_at_the_next_one_in_order(store: Store) -> None:
    await _crowded_inbox(store)
    gone = (100.0, "b", "15")  # between ("b", "1") and ("b", "2"), which no review holds
    newest = keys(await store.list_pending(order="newest", after=gone, limit=2))
    oldest = keys(await store.list_pending(order="oldest", after=gone, limit=2))
    assert [k[1:] for k in newest] == [("b", "1"), ("a", "9")]
    assert [k[1:] for k in oldest] == [("b", "2"), ("c", "1")]
