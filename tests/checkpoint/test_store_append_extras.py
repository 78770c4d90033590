"""What an append does besides appending: run claims and releases, and the epoch check.

``append(..., claim=run, release=run)`` marks runs alive or finished in the append's
own transaction, so a conflicting append claims and releases nothing; with
``expected_seq > 0`` the stored thread's epoch must be the record's, so a writer
working from a thread that was deleted and created again cannot append to the new one.
Every test runs against every backend, sync and async. Also here: the inbox's metadata
filters with values an index may not hold, and pending reviews kept across appends.
"""

from __future__ import annotations

from typing import Any

import pytest
from _stores import Location, Store
from test_store_protocol import ev, grow, rec, review

from handrail import InMemorySaver
from handrail.checkpoint.base import Append, PendingFilter, StoredEvent
from handrail.errors import ConflictError


async def other_saver(store: Store) -> Store:
    """Another saver of the same kind on the same location (the same one, in memory)."""
    if store.is_async:
        return Store(await store.location.asaver(), True, store.location)
    return Store(store.location.saver(), False, store.location)


async def head_of(store: Store, thread_id: str) -> int:
    record = await store.get_thread(thread_id)
    return record.head_seq if record is not None else 0


async def step(store: Store, thread_id: str, **options: Any) -> None:
    """Append one event at the thread's head, with ``claim``/``release`` and record ``options``."""
    head = await head_of(store, thread_id)
    runs = {key: options.pop(key) for key in ("claim", "release") if key in options}
    await store.append(
        thread_id,
        Append([ev(head + 1)], expected_seq=head, record=rec(thread_id, head + 1, **options), **runs),
    )


# Claims and releases ride on appends --------------------------------------------------------------
async def test_a_claim_made_by_an_append_is_seen_by_every_saver(store: Store) -> None:
    other = await other_saver(store)
    await store.append("t", Append([ev(1), ev(2)], expected_seq=0, record=rec("t", 2), claim="run-1"))
    assert await store.runs_alive("t") == {"run-1"}
    assert await other.runs_alive("t") == {"run-1"}
    assert [e.seq for e in (await other.read("t")).events] == [1, 2]
    await step(store, "t", claim="run-2")  # a later append, a second run
    assert await other.runs_alive("t") == {"run-1", "run-2"}
    assert await store.runs_alive("u") == set()


async def test_a_release_made_by_an_append_clears_the_claim(store: Store) -> None:
    other = await other_saver(store)
    await store.claim_run("t", "run-1")
    await step(store, "t", claim="run-2")
    await step(store, "t", release="run-1")
    assert await other.runs_alive("t") == {"run-2"}
    await step(other, "t", release="run-2")  # any saver may release a run
    assert await store.runs_alive("t") == set()
    await step(store, "t", release="never-claimed")  # harmless, like release_run
    assert await store.runs_alive("t") == set()
    assert await head_of(store, "t") == 4


async def test_one_append_can_claim_a_run_and_release_another(store: Store) -> None:
    await store.claim_run("t", "old")
    await step(store, "t", claim="new", release="old")
    assert await store.runs_alive("t") == {"new"}
    # the same run claimed and released by one append: claimed, then released
    await step(store, "t", claim="brief", release="brief")
    assert await store.runs_alive("t") == {"new"}
    await step(store, "t", claim="new", release="new")
    assert await store.runs_alive("t") == set()


async def test_a_claim_by_an_append_and_a_standalone_release_go_together(store: Store) -> None:
    await step(store, "t", claim="run-1")
    await store.release_run("t", "run-1")
    assert await store.runs_alive("t") == set()
    await store.claim_run("t", "run-2")
    await step(store, "t", release="run-2")
    assert await store.runs_alive("t") == set()


async def test_a_conflicting_append_claims_and_releases_nothing(store: Store) -> None:
    await grow(store, "t", 2)
    await store.claim_run("t", "running")
    with pytest.raises(ConflictError):
        await store.append(
            "t", Append([ev(2)], expected_seq=1, record=rec("t", 2), claim="late", release="running")
        )
    with pytest.raises(ConflictError):  # a new thread that already exists
        await store.append("t", Append([ev(1)], expected_seq=0, record=rec("t", 1), claim="late"))
    assert await store.runs_alive("t") == {"running"}
    assert await head_of(store, "t") == 2
    # and the saver did not forget its own claim: it can still release it
    await step(store, "t", release="running")
    assert await store.runs_alive("t") == set()


async def test_a_malformed_append_claims_nothing(store: Store) -> None:
    with pytest.raises(ValueError, match="numbered from 1"):
        await store.append("t", Append([ev(2)], expected_seq=0, record=rec("t", 2), claim="run-1"))
    assert await store.runs_alive("t") == set()
    assert await store.get_thread("t") is None


async def test_an_append_with_no_events_can_claim(store: Store) -> None:
    await grow(store, "t", 1)
    await store.append("t", Append([], expected_seq=1, record=rec("t", 1, status="running"), claim="run-1"))
    assert await store.runs_alive("t") == {"run-1"}
    record = await store.get_thread("t")
    assert record is not None and record.status == "running"


def test_claims_made_by_appends_go_when_their_saver_closes(durable_location: Location) -> None:
    runner, watcher = durable_location.saver(), durable_location.saver()
    runner.append("t", Append([ev(1)], expected_seq=0, record=rec("t", 1), claim="run-1"))
    runner.append("u", Append([ev(1)], expected_seq=0, record=rec("u", 1), claim="run-2"))
    assert watcher.runs_alive("t") == {"run-1"}
    runner.close()  # type: ignore[attr-defined]
    assert watcher.runs_alive("t") == set()
    assert watcher.runs_alive("u") == set()


# The epoch check ---------------------------------------------------------------------------------
async def test_an_append_to_a_thread_created_again_is_a_conflict(store: Store) -> None:
    await grow(store, "t", 2, epoch="first")
    await store.delete_thread("t")
    await store.append(
        "t",
        Append(
            [ev(1, payload=b'{"new":1}'), ev(2, payload=b'{"new":2}')],
            expected_seq=0,
            record=rec("t", 2, epoch="second"),
        ),
    )
    # a writer still working from the first thread, at the same head
    with pytest.raises(ConflictError) as caught:
        await store.append(
            "t",
            Append(
                [ev(3)],
                expected_seq=2,
                record=rec("t", 3, epoch="first", status="interrupted", pending=(review("stale"),)),
                claim="stale-run",
            ),
        )
    assert caught.value.thread_id == "t"
    assert "'t'" in str(caught.value)
    record = await store.get_thread("t")
    assert record == rec("t", 2, epoch="second")
    assert [e.payload for e in (await store.read("t")).events] == [b'{"new":1}', b'{"new":2}']
    assert await store.list_pending() == []
    assert await store.runs_alive("t") == set()
    # the writer of the new thread goes on
    await store.append("t", Append([ev(3)], expected_seq=2, record=rec("t", 3, epoch="second")))
    assert await head_of(store, "t") == 3


async def test_the_epoch_is_checked_only_once_a_thread_has_events(store: Store) -> None:
    await store.append("t", Append([], expected_seq=0, record=rec("t", 0, epoch="first")))
    # at event 0 a thread may start over under a new epoch (a new thread)
    await store.append("t", Append([ev(1)], expected_seq=0, record=rec("t", 1, epoch="second")))
    record = await store.get_thread("t")
    assert record is not None and record.epoch == "second"
    with pytest.raises(ConflictError):
        await store.append("t", Append([ev(2)], expected_seq=1, record=rec("t", 2, epoch="first")))
    await store.append("t", Append([ev(2)], expected_seq=1, record=rec("t", 2, epoch="second")))
    assert await head_of(store, "t") == 2


async def test_a_stale_head_is_reported_before_a_stale_epoch(store: Store) -> None:
    await grow(store, "t", 3, epoch="second")
    with pytest.raises(ConflictError, match="expected it at event 2, found it at"):
        await store.append("t", Append([ev(3)], expected_seq=2, record=rec("t", 3, epoch="first")))


# Pending reviews across appends, and the inbox's metadata index -------------------------------------
async def test_a_pending_review_kept_across_appends_follows_the_record(store: Store) -> None:
    ask = review("i1", tools=("write_file", "write_file", "sql"))
    await grow(store, "t", 1, status="interrupted", metadata={"team": "a"}, pending=(ask,))
    # the same review, kept while the metadata changes and another review joins it
    await grow(store, "t", 1, status="interrupted", metadata={"team": "b"}, pending=(ask, review("i2")))
    assert [i.review.interrupt_id for i in await store.list_pending(metadata={"team": "b"})] == ["i1", "i2"]
    assert await store.list_pending(metadata={"team": "a"}) == []
    assert [i.review for i in await store.list_pending(tool="sql")] == [ask]
    assert [i.review.interrupt_id for i in await store.list_pending(tool="write_file")] == ["i1", "i2"]
    record = await store.get_thread("t")
    assert record is not None and record.pending == (ask, review("i2"))
    await grow(store, "t", 1, metadata={"team": "b"})  # answered: nothing pending any more
    assert await store.list_pending(metadata={"team": "b"}) == []
    assert await store.list_pending(tool="sql") == []


LONG = "x" * 500  # longer than an index entry may be
METADATA: list[dict[str, Any]] = [
    {"team": "a", "note": LONG, "tags": ["p", "q"], "n": 2, "none": None, "k" * 450: "long key"},
    {"team": "a", "note": "short", "tags": ["p"], "n": 2.0, "none": None},
    {"team": "b", "note": LONG, "deep": {"a": [1]}, "n": 3, "é🐢": "ü"},
]
FILTERS: list[dict[str, Any]] = [
    {"team": "a"},
    {"note": LONG},
    {"note": LONG, "team": "a"},
    {"tags": ["p"]},
    {"tags": ["p"], "team": "a"},
    {"n": 2},
    {"n": 2.0, "team": "a"},
    {"none": None},
    {"k" * 450: "long key"},
    {"deep": {"a": [1]}},
    {"é🐢": "ü", "n": 3},
    {"team": "c"},
    {"team": "a", "missing": None},
]


@pytest.mark.parametrize("tool", [None, "write_file"])
async def test_metadata_filters_match_like_memory_whatever_the_values(store: Store, tool: str | None) -> None:
    oracle = InMemorySaver()
    for n, metadata in enumerate(METADATA):
        thread = f"t{n}"
        reviews = (review(f"i{n}", tools=("write_file",) if n != 1 else ("sql",), created_at=100.0 + n),)
        record = rec(thread, 1, status="interrupted", metadata=metadata, pending=reviews)
        await store.append(thread, Append([ev(1)], expected_seq=0, record=record))
        oracle.append(thread, Append([ev(1)], expected_seq=0, record=record))
    for metadata in FILTERS:
        wanted = PendingFilter(metadata=metadata, tool=tool)
        found = [(i.thread_id, i.review.interrupt_id) for i in await store.list_pending(wanted)]
        expected = [(i.thread_id, i.review.interrupt_id) for i in oracle.list_pending(wanted)]
        assert found == expected, metadata
        pages = []
        after = None
        while page := await store.list_pending(
            PendingFilter(metadata=metadata, tool=tool, after=after, limit=1)
        ):
            pages += [(i.thread_id, i.review.interrupt_id) for i in page]
            last = page[-1]
            after = (last.review.created_at, last.thread_id, last.review.interrupt_id)
        assert pages == expected, metadata


def test_events_of_every_append_keep_their_order(location: Location) -> None:
    saver = location.saver()
    events = [StoredEvent(seq, "step", float(seq), b'{"n":%d}' % seq) for seq in range(1, 301)]
    for start in range(0, 300, 30):
        saver.append(
            "t",
            Append(
                events[start : start + 30],
                expected_seq=start,
                record=rec("t", start + 30),
                claim=f"r{start}",
            ),
        )
    assert saver.read("t").events == events
    assert saver.read("t", after_seq=100, upto_seq=110).events == events[100:110]
    assert saver.runs_alive("t") == {f"r{start}" for start in range(0, 300, 30)}
