"""The durable stores answer the inbox exactly as InMemorySaver does, for random data.

Hypothesis builds threads (ids that sort differently under a locale than by code
point, tied times, overlapping tools and metadata) and asks random questions of both
stores; the answers must be the same, in the same order.
"""

from __future__ import annotations

import time
from typing import Any

from _stores import Location
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handrail import InMemorySaver
from handrail.checkpoint.base import (
    Append,
    PendingFilter,
    PendingReview,
    StoredEvent,
    ThreadFilter,
    ThreadRecord,
)

NOW = time.time()
names = st.text(alphabet="aAbB_-é🐢z", min_size=1, max_size=3)
# No booleans: Postgres compares metadata as JSON, where true is not 1 (in Python it is).
values = st.sampled_from(["x", "y", "X", 1, 2, 2.5, 2.0, None, [1, 2], [2], {"a": 1}, {"a": [1]}])
metadata = st.dictionaries(st.sampled_from(["team", "tier", "tags"]), values, max_size=3)
tools = st.lists(st.sampled_from(["write_file", "sql", "send"]), max_size=3)


@st.composite
def threads(draw: st.DrawFn) -> list[ThreadRecord]:
    ids = draw(st.lists(names, min_size=1, max_size=6, unique=True))
    records = []
    for thread_id in ids:
        reviews = tuple(
            PendingReview(
                interrupt_id=interrupt_id,
                kind=draw(st.sampled_from(["interrupt", "outcome_unknown"])),
                tools=tuple(draw(tools)),
                created_at=NOW - 100 * draw(st.integers(0, 5)),
                payload=b'{"n":1}',
            )
            for interrupt_id in draw(st.lists(names, max_size=3, unique=True))
        )
        records.append(
            ThreadRecord(
                thread_id=thread_id,
                head_seq=1,
                status=draw(st.sampled_from(["idle", "running", "interrupted"])),
                epoch="e",
                created_at=1.0,
                updated_at=float(draw(st.integers(0, 4))),
                metadata=draw(metadata),
                pending=reviews,
            )
        )
    return records


thread_filters = st.builds(
    ThreadFilter,
    metadata=st.none() | metadata,
    status=st.none() | st.sampled_from(["idle", "running", "interrupted"]),
    updated_after=st.none() | st.integers(0, 4).map(float),
    updated_before=st.none() | st.integers(0, 4).map(float),
    limit=st.integers(0, 8),
    offset=st.integers(0, 4),
)


def pending_filters(known: list[ThreadRecord]) -> st.SearchStrategy[PendingFilter]:
    keys = [(r.created_at, t.thread_id, r.interrupt_id) for t in known for r in t.pending]
    after = st.none() | st.tuples(st.integers(0, 5).map(lambda k: NOW - 100 * k), names, names)
    if keys:
        after = after | st.sampled_from(keys)
    return st.builds(
        PendingFilter,
        tool=st.none() | st.sampled_from(["write_file", "sql", "send", "other"]),
        thread_id=st.none() | st.sampled_from([t.thread_id for t in known] + ["nobody"]),
        older_than=st.none() | st.integers(0, 5).map(lambda k: 100.0 * k + 50),
        metadata=st.none() | metadata,
        kind=st.none() | st.sampled_from(["interrupt", "outcome_unknown"]),
        after=after,
        limit=st.integers(1, 8),
    )


def pending_view(items: list[Any]) -> list[Any]:
    return [(i.thread_id, i.review, dict(i.metadata)) for i in items]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_durable_stores_answer_like_memory(durable_location: Location, data: st.DataObject) -> None:
    store = durable_location.shared_saver()
    oracle = InMemorySaver()
    records = data.draw(threads(), label="threads")
    try:
        for record in records:
            event = [StoredEvent(1, "input", 1.0, b"{}")]
            oracle.append(record.thread_id, Append(event, expected_seq=0, record=record))
            store.append(record.thread_id, Append(event, expected_seq=0, record=record))
        for record in records:
            assert store.get_thread(record.thread_id) == record
        for _ in range(6):
            thread_filter = data.draw(thread_filters, label="thread filter")
            assert store.list_threads(thread_filter) == oracle.list_threads(thread_filter), thread_filter
            pending_filter = data.draw(pending_filters(records), label="pending filter")
            assert pending_view(store.list_pending(pending_filter)) == pending_view(
                oracle.list_pending(pending_filter)
            ), pending_filter
    finally:
        for record in records:
            store.delete_thread(record.thread_id)
