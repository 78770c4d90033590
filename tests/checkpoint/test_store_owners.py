"""Listing only the threads of some agents (``owners``, SPEC rule 21), on every backend.

``PendingFilter.owners`` and ``ThreadFilter.owners`` keep the threads whose metadata
``assistant_id`` is one of the names given - and, with ``or_missing``, those that have
none - exactly as ``ClaimFilter.matches`` says (a value that is not a string never
matches). Each store is checked against that rule, with the other filters, in both
orders and page by page; then through the library (``list_interrupts``,
``list_threads``, ``audit`` with ``owners=``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _stores import Location, Store, build_agent, config
from test_store_protocol import grow, review

from handrail.checkpoint.base import ClaimFilter, PendingItem
from handrail.errors import InvalidInputError

# thread -> its metadata: bound to strict, lax, demo, to nothing, and to a name that is not a string
THREADS: dict[str, dict[str, Any]] = {
    "s1": {"assistant_id": "strict", "team": "x"},
    "s2": {"assistant_id": "strict", "team": "y"},
    "l1": {"assistant_id": "lax", "team": "x"},
    "d1": {"assistant_id": "demo", "team": "x"},
    "u1": {"team": "x"},
    "u2": {},
    "n1": {"assistant_id": 5, "team": "x"},
    "z1": {"assistant_id": None},
}

OWNERS = {
    "hosted": ClaimFilter("assistant_id", ("strict", "lax"), or_missing=True),
    "one": ClaimFilter("assistant_id", ("strict",)),
    "one_or_none": ClaimFilter("assistant_id", ("strict",), or_missing=True),
    "two": ClaimFilter("assistant_id", ("lax", "demo")),
    "only_unbound": ClaimFilter("assistant_id", (), or_missing=True),
    "nobody": ClaimFilter("assistant_id", ()),
    "other_key": ClaimFilter("team", ("x",)),
}


async def _threads(store: Store) -> None:
    """Each thread of ``THREADS`` with two pending reviews, at times that interleave them."""
    for n, (thread, metadata) in enumerate(THREADS.items()):
        await grow(
            store,
            thread,
            1,
            status="interrupted",
            metadata=metadata,
            updated_at=10.0 + n,
            pending=(
                review("a", created_at=100.0 + n),
                review("b", created_at=200.0 - n, tools=("send",)),
            ),
        )


def _passes(owners: ClaimFilter, thread: str) -> bool:
    return owners.matches(THREADS[thread])


def _keys(items: list[PendingItem]) -> list[tuple[float, str, str]]:
    return [(i.review.created_at, i.thread_id, i.review.interrupt_id) for i in items]


@pytest.mark.parametrize("name", list(OWNERS))
async def test_the_inbox_lists_only_the_owners_threads(store: Store, name: str) -> None:
    await _threads(store)
    owners = OWNERS[name]
    everything = _keys(await store.list_pending(limit=100))
    expected = [key for key in everything if _passes(owners, key[1])]
    assert _keys(await store.list_pending(owners=owners, limit=100)) == expected
    newest = _keys(await store.list_pending(owners=owners, limit=100, order="newest"))
    assert newest == expected[::-1]
    # with the other filters: each narrows the same listing
    team = [k for k in expected if THREADS[k[1]].get("team") == "x"]
    assert _keys(await store.list_pending(owners=owners, metadata={"team": "x"}, limit=100)) == team
    send = [k for k in expected if k[2] == "b"]
    assert _keys(await store.list_pending(owners=owners, tool="send", limit=100)) == send
    assert _keys(await store.list_pending(owners=owners, thread_id="s1", limit=100)) == [
        k for k in expected if k[1] == "s1"
    ]
    # page by page (two at a time), neither skipping nor repeating an item
    pages: list[tuple[float, str, str]] = []
    after = None
    while True:
        page = _keys(await store.list_pending(owners=owners, limit=2, after=after))
        if not page:
            break
        pages += page
        after = page[-1]
    assert pages == expected
    # the items carry their thread's metadata, as without the filter
    for item in await store.list_pending(owners=owners, limit=100):
        assert dict(item.metadata) == THREADS[item.thread_id]


@pytest.mark.parametrize("name", list(OWNERS))
async def test_the_thread_list_keeps_only_the_owners_threads(store: Store, name: str) -> None:
    await _threads(store)
    owners = OWNERS[name]
    everything = [r.thread_id for r in await store.list_threads(limit=100)]
    expected = [t for t in everything if _passes(owners, t)]
    assert [r.thread_id for r in await store.list_threads(owners=owners, limit=100)] == expected
    team = [t for t in expected if THREADS[t].get("team") == "x"]
    found = await store.list_threads(owners=owners, metadata={"team": "x"}, limit=100)
    assert [r.thread_id for r in found] == team
    paged = [r.thread_id for r in await store.list_threads(owners=owners, limit=2, offset=1)]
    assert paged == expected[1:3]
    recent = await store.list_threads(owners=owners, updated_after=13.5, status="interrupted", limit=100)
    assert [r.thread_id for r in recent] == [t for t in expected if 10.0 + list(THREADS).index(t) > 13.5]


async def test_owners_and_a_metadata_filter_on_the_same_key_both_hold(store: Store) -> None:
    await _threads(store)
    one = OWNERS["one"]
    same = await store.list_pending(owners=one, metadata={"assistant_id": "strict"}, limit=100)
    assert {i.thread_id for i in same} == {"s1", "s2"}
    assert await store.list_pending(owners=one, metadata={"assistant_id": "lax"}, limit=100) == []
    assert await store.list_threads(owners=one, metadata={"assistant_id": "lax"}) == []


async def test_a_thread_bound_later_moves_between_listings(store: Store) -> None:
    """The filter reads the record as it is now: a record written again with a binding
    (an old thread's first binding, say) is listed by its new owner only."""
    await grow(store, "t", 1, status="interrupted", pending=(review("a"),))
    unbound = OWNERS["only_unbound"]
    assert [i.thread_id for i in await store.list_pending(owners=unbound)] == ["t"]
    await grow(store, "t", 1, status="interrupted", metadata={"assistant_id": "lax"}, pending=(review("a"),))
    assert await store.list_pending(owners=unbound) == []
    assert [i.thread_id for i in await store.list_pending(owners=OWNERS["two"])] == ["t"]
    assert [r.thread_id for r in await store.list_threads(owners=OWNERS["two"])] == ["t"]


# Through the library ----------------------------------------------------------------------------
def _bound(location: Location, tmp_path: Path) -> Any:
    """One agent on the store; threads bound (by their first input) to strict, lax, demo, or none."""
    agent = build_agent(location.saver(), tmp_path / "tool.log")
    for thread, name in (("s", "strict"), ("l", "lax"), ("d", "demo"), ("u", None)):
        metadata = {"assistant_id": name} if name else {}
        agent.invoke({"messages": [f"write_file:{thread}"]}, {**config(thread), "metadata": metadata})
    return agent


def test_the_library_lists_interrupts_threads_and_audit_by_owner(location: Location, tmp_path: Path) -> None:
    agent = _bound(location, tmp_path)
    hosted = OWNERS["hosted"]
    assert sorted(i.thread_id for i in agent.list_interrupts(owners=hosted).items) == ["l", "s", "u"]
    assert sorted(i.thread_id for i in agent.list_interrupts().items) == ["d", "l", "s", "u"]
    reviewer = {"id": "ann", "roles": []}
    seen = agent.list_interrupts(owners=OWNERS["one"], reviewer=reviewer, limit=1)
    assert [i.thread_id for i in seen.items] == ["s"] and seen.next_cursor is not None
    assert agent.list_interrupts(owners=OWNERS["one"], cursor=seen.next_cursor, limit=1).items == []
    assert sorted(r.thread_id for r in agent.list_threads(owners=hosted)) == ["l", "s", "u"]
    assert {e.thread_id for e in agent.audit(owners=OWNERS["two"])} == {"d", "l"}
    assert {e.thread_id for e in agent.audit(owners=OWNERS["only_unbound"])} == {"u"}
    with pytest.raises(InvalidInputError, match="owners must be a ClaimFilter"):
        agent.list_interrupts(owners={"assistant_id": "strict"})
    with pytest.raises(InvalidInputError, match="owners must be a ClaimFilter"):
        agent.list_threads(owners=("strict",))


async def test_the_async_library_lists_by_owner(location: Location, tmp_path: Path) -> None:
    agent = _bound(location, tmp_path)
    one = OWNERS["one_or_none"]
    page = await agent.alist_interrupts(owners=one)
    assert sorted(i.thread_id for i in page.items) == ["s", "u"]
    assert sorted(r.thread_id for r in await agent.alist_threads(owners=one)) == ["s", "u"]
    assert {e.thread_id for e in await agent.aaudit(owners=one)} == {"s", "u"}
