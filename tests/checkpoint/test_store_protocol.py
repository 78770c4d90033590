"""The store protocol (checkpoint/base.py), once, against every backend, sync and async."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from _stores import Store

from handrail.checkpoint.base import Append, PendingReview, StoredEvent, ThreadRecord
from handrail.errors import ConflictError


def ev(seq: int, kind: str = "step", payload: bytes | None = None, at: float = 1.0) -> StoredEvent:
    return StoredEvent(seq=seq, kind=kind, created_at=at + seq, payload=payload or b'{"n":%d}' % seq)


def review(
    interrupt_id: str,
    *,
    tools: tuple[str, ...] = ("write_file",),
    kind: str = "interrupt",
    created_at: float = 100.0,
    payload: bytes = b'{"ask":true}',
) -> PendingReview:
    return PendingReview(interrupt_id, kind, tools, created_at, payload)


def rec(
    thread_id: str,
    head: int,
    *,
    status: Any = "idle",
    metadata: dict[str, Any] | None = None,
    pending: tuple[PendingReview, ...] = (),
    updated_at: float = 50.0,
    epoch: str = "epoch-1",
) -> ThreadRecord:
    return ThreadRecord(
        thread_id=thread_id,
        head_seq=head,
        status=status,
        epoch=epoch,
        created_at=10.0,
        updated_at=updated_at,
        metadata=metadata or {},
        pending=pending,
    )


async def grow(store: Store, thread_id: str, count: int = 1, **record: Any) -> ThreadRecord:
    """Append ``count`` events at the thread's head, with a record built from ``record``."""
    current = await store.get_thread(thread_id)
    head = current.head_seq if current is not None else 0
    new = rec(thread_id, head + count, **record)
    await store.append(
        thread_id, Append([ev(head + i) for i in range(1, count + 1)], expected_seq=head, record=new)
    )
    return new


# Appends -----------------------------------------------------------------------------------
async def test_appends_number_events_without_gaps(store: Store) -> None:
    await store.append("t", Append([ev(1, "input"), ev(2), ev(3)], expected_seq=0, record=rec("t", 3)))
    await store.append("t", Append([ev(4), ev(5, "interrupt")], expected_seq=3, record=rec("t", 5)))
    read = await store.read("t")
    assert [e.seq for e in read.events] == [1, 2, 3, 4, 5]
    assert [e.kind for e in read.events] == ["input", "step", "step", "step", "interrupt"]
    assert read.events[3] == ev(4)
    assert read.record == rec("t", 5)


async def test_payload_bytes_come_back_exactly(store: Store) -> None:
    odd = bytes(range(256)) + b"\x00\xff" * 1000
    await store.append("t", Append([ev(1, payload=odd)], expected_seq=0, record=rec("t", 1)))
    assert (await store.read("t")).events[0].payload == odd


async def test_an_append_with_no_events_replaces_the_record(store: Store) -> None:
    await grow(store, "t", 2)
    await store.append("t", Append([], expected_seq=2, record=rec("t", 2, status="running", updated_at=60.0)))
    assert await store.get_thread("t") == rec("t", 2, status="running", updated_at=60.0)


@pytest.mark.parametrize(("stale", "head"), [(0, 2), (1, 2), (3, 2), (4, 0)])
async def test_a_stale_expected_seq_raises_conflict_and_saves_nothing(
    store: Store, stale: int, head: int
) -> None:
    before = await grow(store, "t", head, metadata={"v": 1}, pending=(review("i1"),)) if head else None
    with pytest.raises(ConflictError) as caught:
        await store.append(
            "t",
            Append(
                [ev(stale + 1)],
                expected_seq=stale,
                record=rec("t", stale + 1, metadata={"v": 2}, status="running"),
            ),
        )
    assert caught.value.thread_id == "t"
    assert "'t'" in str(caught.value)
    assert await store.get_thread("t") == before
    assert [e.seq for e in (await store.read("t")).events] == list(range(1, head + 1))
    assert [i.review.interrupt_id for i in await store.list_pending()] == (["i1"] if head else [])


async def test_concurrent_appends_at_one_head_exactly_one_wins(store: Store) -> None:
    await grow(store, "t", 1)
    writers = 8

    async def attempt(n: int) -> bool:
        try:
            await store.append(
                "t", Append([ev(2, payload=b'{"w":%d}' % n)], expected_seq=1, record=rec("t", 2))
            )
        except ConflictError:
            return False
        return True

    if store.is_async:
        outcomes = await asyncio.gather(*(attempt(n) for n in range(writers)))
    else:
        barrier = threading.Barrier(writers)
        outcomes = [False] * writers

        def worker(n: int) -> None:
            barrier.wait()
            outcomes[n] = asyncio.run(attempt(n))

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sum(outcomes) == 1
    (winner,) = [n for n, won in enumerate(outcomes) if won]
    events = (await store.read("t")).events
    assert [e.seq for e in events] == [1, 2]
    assert events[1].payload == b'{"w":%d}' % winner


# Reads ---------------------------------------------------------------------------------------
async def test_read_ranges(store: Store) -> None:
    await grow(store, "t", 6)
    await grow(store, "other", 2)

    async def seqs(**bounds: Any) -> list[int]:
        return [e.seq for e in (await store.read("t", **bounds)).events]

    assert await seqs() == [1, 2, 3, 4, 5, 6]
    assert await seqs(after_seq=4) == [5, 6]
    assert await seqs(upto_seq=2) == [1, 2]
    assert await seqs(after_seq=2, upto_seq=4) == [3, 4]
    assert await seqs(after_seq=6) == []
    assert await seqs(after_seq=3, upto_seq=3) == []
    assert await seqs(upto_seq=99) == [1, 2, 3, 4, 5, 6]
    read = await store.read("t", after_seq=5)
    assert read.record is not None and read.record.head_seq == 6


async def test_an_unknown_thread_reads_as_nothing(store: Store) -> None:
    read = await store.read("nobody")
    assert read.record is None and read.events == []
    assert await store.get_thread("nobody") is None


# Records -----------------------------------------------------------------------------------
async def test_records_are_replaced_with_their_events(store: Store) -> None:
    first = (review("b", tools=("write_file", "execute_sql"), created_at=5.0), review("a", created_at=6.0))
    await grow(store, "t", 2, status="interrupted", metadata={"user": "ann", "n": [1, 2]}, pending=first)
    record = await store.get_thread("t")
    assert record == rec("t", 2, status="interrupted", metadata={"user": "ann", "n": [1, 2]}, pending=first)
    assert [p.interrupt_id for p in record.pending] == ["b", "a"]  # the order raised, not sorted

    second = (review("c", kind="outcome_unknown", tools=("send",), created_at=7.0),)
    await grow(store, "t", 1, status="interrupted", metadata={"user": "bob"}, pending=second, updated_at=70.0)
    record = await store.get_thread("t")
    assert record == rec(
        "t", 3, status="interrupted", metadata={"user": "bob"}, pending=second, updated_at=70.0
    )
    assert [i.review.interrupt_id for i in await store.list_pending()] == ["c"]
    assert await store.list_pending(tool="write_file") == []

    await grow(store, "t", 1)
    assert (await store.get_thread("t")) == rec("t", 4)
    assert await store.list_pending() == []


async def test_metadata_keeps_its_values(store: Store) -> None:
    metadata = {"user": "ann", "nested": {"a": [1, 2.5, None, True]}, "unicode": "żółw 🐢", "n": 3}
    await grow(store, "t", 1, metadata=metadata)
    record = await store.get_thread("t")
    assert record is not None and dict(record.metadata) == metadata


# list_threads ---------------------------------------------------------------------------------
async def _some_threads(store: Store) -> None:
    await grow(store, "a", 1, metadata={"team": "x", "tier": 1}, updated_at=10.0)
    await grow(store, "b", 1, metadata={"team": "y"}, updated_at=30.0, status="interrupted")
    await grow(store, "c", 1, metadata={"team": "x", "tier": 2, "tags": ["p", "q"]}, updated_at=20.0)
    await grow(store, "d", 1, metadata={}, updated_at=30.0, status="running")


async def test_list_threads_newest_first(store: Store) -> None:
    await _some_threads(store)
    assert [r.thread_id for r in await store.list_threads()] == ["b", "d", "c", "a"]
    assert [r.thread_id for r in await store.list_threads(limit=2)] == ["b", "d"]
    assert [r.thread_id for r in await store.list_threads(limit=2, offset=2)] == ["c", "a"]
    assert await store.list_threads(offset=4) == []
    assert (await store.list_threads())[0] == rec(
        "b", 1, status="interrupted", metadata={"team": "y"}, updated_at=30.0
    )


async def test_list_threads_filters(store: Store) -> None:
    await _some_threads(store)

    async def ids(**filter: Any) -> list[str]:
        return [r.thread_id for r in await store.list_threads(**filter)]

    assert await ids(metadata={"team": "x"}) == ["c", "a"]
    assert await ids(metadata={"team": "x", "tier": 2}) == ["c"]
    assert await ids(metadata={"tags": ["p", "q"]}) == ["c"]
    assert await ids(metadata={"tags": ["p"]}) == []  # a subset of keys, not of values
    assert await ids(metadata={"team": "z"}) == []
    assert await ids(metadata={"missing": None}) == []
    assert await ids(metadata={}) == ["b", "d", "c", "a"]
    assert await ids(status="interrupted") == ["b"]
    assert await ids(status="running") == ["d"]
    assert await ids(updated_after=10.0) == ["b", "d", "c"]
    assert await ids(updated_before=30.0) == ["c", "a"]
    assert await ids(updated_after=10.0, updated_before=30.0) == ["c"]
    assert await ids(metadata={"team": "x"}, updated_after=15.0, status="idle") == ["c"]


# list_pending ---------------------------------------------------------------------------------
async def _inbox(store: Store, now: float) -> None:
    await grow(
        store,
        "t1",
        2,
        status="interrupted",
        metadata={"team": "x"},
        pending=(
            review("i-new", tools=("write_file",), created_at=now - 10),
            review("i-old", tools=("execute_sql", "write_file"), created_at=now - 1000),
        ),
    )
    await grow(
        store,
        "t2",
        1,
        status="interrupted",
        metadata={"team": "y"},
        pending=(review("o1", kind="outcome_unknown", tools=("send",), created_at=now - 500),),
    )
    await grow(
        store,
        "t0",
        1,
        status="interrupted",
        metadata={"team": "x"},
        pending=(review("z", tools=("write_file",), created_at=now - 10),),  # ties t1's i-new
    )
    await grow(store, "t3", 1)  # nothing pending


def keys(items: list[Any]) -> list[tuple[str, str]]:
    return [(i.thread_id, i.review.interrupt_id) for i in items]


async def test_list_pending_oldest_first_with_ties_broken_by_thread_then_id(store: Store) -> None:
    now = time.time()
    await _inbox(store, now)
    items = await store.list_pending()
    assert keys(items) == [("t1", "i-old"), ("t2", "o1"), ("t0", "z"), ("t1", "i-new")]
    first = items[0]
    assert first.metadata == {"team": "x"}
    assert first.review == review("i-old", tools=("execute_sql", "write_file"), created_at=now - 1000)


async def test_list_pending_filters(store: Store) -> None:
    now = time.time()
    await _inbox(store, now)

    async def found(**filter: Any) -> list[tuple[str, str]]:
        return keys(await store.list_pending(**filter))

    assert await found(tool="write_file") == [("t1", "i-old"), ("t0", "z"), ("t1", "i-new")]
    assert await found(tool="execute_sql") == [("t1", "i-old")]
    assert await found(tool="send") == [("t2", "o1")]
    assert await found(tool="nothing") == []
    assert await found(thread_id="t1") == [("t1", "i-old"), ("t1", "i-new")]
    assert await found(thread_id="t3") == []
    assert await found(older_than=100) == [("t1", "i-old"), ("t2", "o1")]
    assert await found(older_than=600) == [("t1", "i-old")]
    assert await found(metadata={"team": "x"}) == [("t1", "i-old"), ("t0", "z"), ("t1", "i-new")]
    assert await found(metadata={"team": "y"}) == [("t2", "o1")]
    assert await found(kind="outcome_unknown") == [("t2", "o1")]
    assert await found(kind="interrupt", older_than=100) == [("t1", "i-old")]
    assert await found(tool="write_file", thread_id="t1", older_than=100) == [("t1", "i-old")]
    assert await found(tool="write_file", metadata={"team": "x"}, limit=2) == [("t1", "i-old"), ("t0", "z")]


@pytest.mark.parametrize("tool", [None, "write_file"])
async def test_list_pending_pages_by_keyset(store: Store, tool: str | None) -> None:
    now = time.time()
    await _inbox(store, now)
    everything = keys(await store.list_pending(tool=tool))
    pages: list[list[tuple[str, str]]] = []
    after = None
    while True:
        page = await store.list_pending(tool=tool, limit=2, after=after)
        if not page:
            break
        pages.append(keys(page))
        last = page[-1]
        after = (last.review.created_at, last.thread_id, last.review.interrupt_id)
    assert [k for page in pages for k in page] == everything
    assert all(len(page) <= 2 for page in pages)


# delete_thread ---------------------------------------------------------------------------------
async def test_delete_thread(store: Store) -> None:
    await grow(store, "t", 3, status="interrupted", pending=(review("i"),))
    await grow(store, "keep", 1, pending=(review("k"),))
    await store.claim_run("t", "run-1")
    assert await store.delete_thread("t") is True
    assert await store.get_thread("t") is None
    assert (await store.read("t")).events == []
    assert keys(await store.list_pending()) == [("keep", "k")]
    assert [r.thread_id for r in await store.list_threads()] == ["keep"]
    assert await store.runs_alive("t") == set()
    assert await store.delete_thread("t") is False
    # the thread can start again from nothing, with a new epoch
    await store.append("t", Append([ev(1)], expected_seq=0, record=rec("t", 1, epoch="epoch-2")))
    record = await store.get_thread("t")
    assert record is not None and record.epoch == "epoch-2"
    assert [e.seq for e in (await store.read("t")).events] == [1]


# Run claims (rule 9) ----------------------------------------------------------------------------
async def test_run_claims(store: Store) -> None:
    assert await store.runs_alive("t") == set()
    await store.claim_run("t", "run-1")
    await store.claim_run("t", "run-2")
    await store.claim_run("u", "run-3")
    assert await store.runs_alive("t") == {"run-1", "run-2"}
    assert await store.runs_alive("u") == {"run-3"}
    await store.release_run("t", "run-1")
    assert await store.runs_alive("t") == {"run-2"}
    await store.release_run("t", "never-claimed")
    await store.claim_run("t", "run-2")  # claiming twice is harmless
    assert await store.runs_alive("t") == {"run-2"}
    await store.release_run("t", "run-2")
    assert await store.runs_alive("t") == set()
    assert await store.runs_alive("u") == {"run-3"}


async def test_claims_are_seen_by_another_saver_on_the_same_store(store: Store) -> None:
    other = Store(store.location.saver(), False, store.location)
    await store.claim_run("t", "run-1")
    assert await other.runs_alive("t") == {"run-1"}
    await store.release_run("t", "run-1")
    assert await other.runs_alive("t") == set()
