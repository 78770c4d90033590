"""The append record (``checkpoint/stored.py``): one frozen value per append, checked once.

What no store could accept - events not numbered on from ``expected_seq``, a record whose
head is not the last of them or whose status is unknown, a saved reading of another
event than the new head - is refused when the record is built, so every store refuses
it the same way (the same ``ValueError``) and none of them sees it. Whether the thread is
still at ``expected_seq`` stays the store's to check (SPEC rule 8).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from _stores import Store
from test_store_protocol import ev, rec

from handrail.checkpoint import Append as PublicAppend
from handrail.checkpoint.base import Append, StoredEvent


def reading(seq: int) -> StoredEvent:
    return StoredEvent(seq=seq, kind="reading", created_at=float(seq), payload=b"state")


MALFORMED: list[tuple[str, dict[str, Any], str]] = [
    ("a gap at the start", {"events": [ev(2)], "record": rec("t", 1)}, "numbered from 1"),
    ("a gap inside", {"events": [ev(1), ev(3)], "record": rec("t", 2)}, "numbered from 1"),
    ("a head before the last event", {"events": [ev(1), ev(2)], "record": rec("t", 1)}, "head_seq"),
    ("a head after the last event", {"events": [ev(1)], "record": rec("t", 2)}, "head_seq"),
    ("an unknown status", {"events": [ev(1)], "record": rec("t", 1, status="done")}, "status"),
    (
        "a reading of another event",
        {"events": [ev(1), ev(2)], "record": rec("t", 2), "reading": reading(1)},
        "must be of the new head",
    ),
]


def test_an_append_is_frozen_and_has_the_protocols_defaults() -> None:
    change = Append([ev(1)], expected_seq=0, record=rec("t", 1))
    assert PublicAppend is Append
    with pytest.raises(dataclasses.FrozenInstanceError):
        change.durable = False  # type: ignore[misc]
    assert not hasattr(change, "__dict__")  # slots: nothing can be added to it either
    assert (change.claim, change.release, change.reading, change.grants) == (None, None, None, None)
    assert (change.durable, tuple(change.notices), change.queue) == (True, (), False)
    relaxed = dataclasses.replace(change, durable=False)  # another record; this one is unchanged
    assert relaxed.durable is False and change.durable is True


@pytest.mark.parametrize(("fields", "problem"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_a_malformed_append_cannot_be_built(fields: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Append(expected_seq=0, **fields)
    good = Append([ev(1)], expected_seq=0, record=rec("t", 1))
    with pytest.raises(ValueError, match=problem):  # replace() builds a new record: checked again
        dataclasses.replace(good, expected_seq=0, **fields)


@pytest.mark.parametrize(("fields", "problem"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
async def test_every_store_refuses_a_malformed_append_the_same_way_and_saves_nothing(
    store: Store, fields: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        await store.append("t", Append(expected_seq=0, **fields))
    assert await store.get_thread("t") is None
    assert (await store.read("t", from_reading=True)) == (await store.read("unknown"))
    # the store is untouched: the well-formed append at the same head goes through
    await store.append("t", Append([ev(1)], expected_seq=0, record=rec("t", 1), reading=reading(1)))
    assert (await store.read("t", from_reading=True)).reading == reading(1)
