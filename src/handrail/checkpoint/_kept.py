"""The memory store's rows, sealed: how a kept record is checked, and rebuilt.

The in-memory saver keeps each thread's record and each deletion record as Python
objects. *Damage* there is a kept object changed after it was written: a field of a
thread record or of one of its pending reviews set to another value (``object.__setattr__``
on the frozen objects), another record put in the place of the one appended, the
metadata dict changed in place; the same for a deletion record. Each is sealed when it
is written, as the SQL stores seal their rows (``seals.py``), and :func:`check` or
:func:`check_deletion` refuses it when a reader returns it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

from handrail.checkpoint._records import damaged, encode_by, encode_metadata
from handrail.checkpoint._repair import Found, record_image, review_changes, review_image, thread_changes
from handrail.checkpoint.base import DeletionRecord, Derived, PendingReview, ThreadRecord
from handrail.checkpoint.integrity import HASH_SIZE
from handrail.checkpoint.seals import MISMATCH, deletion_seal, record_digest, review_seals, thread_seal
from handrail.errors import SerializationError

__all__ = ["Seal", "check", "check_deletion", "found", "kept_record", "rebuilt", "seal_deletion", "seal_of"]


@dataclass(frozen=True, slots=True, init=False)
class Seal:
    """A kept record's seals: its row's, and each pending review's, in order.

    Kept as one string of digests (the row's, then the reviews'), which a paused thread
    holds in a third of the memory of a tuple of them; a reader slices them out.
    """

    digests: bytes

    def __init__(self, thread: bytes, reviews: tuple[bytes, ...]) -> None:
        if len(thread) != HASH_SIZE or any(len(review) != HASH_SIZE for review in reviews):
            raise ValueError("a seal is a SHA-256 digest")
        object.__setattr__(self, "digests", thread + b"".join(reviews) if reviews else thread)

    @property
    def thread(self) -> bytes:
        """The thread row's seal."""
        return self.digests[:HASH_SIZE]

    @property
    def reviews(self) -> tuple[bytes, ...]:
        """The pending reviews' seals, in order."""
        digests = self.digests
        return tuple(digests[at : at + HASH_SIZE] for at in range(HASH_SIZE, len(digests), HASH_SIZE))

    @property
    def count(self) -> int:
        """How many pending reviews were sealed."""
        return len(self.digests) // HASH_SIZE - 1


def kept_record(record: ThreadRecord, head_hash: bytes | None) -> ThreadRecord:
    """The record as the store keeps it: with its head hash, and its own copies of the
    containers a caller could change after the append (metadata as a dict, pending and
    tool names as tuples, payloads as bytes), as a durable store reads them back."""
    pending = tuple(
        review
        if type(review.tools) is tuple and type(review.payload) is bytes
        else replace(review, tools=tuple(review.tools), payload=bytes(review.payload))
        for review in record.pending
    )
    return replace(record, metadata=dict(record.metadata), pending=pending, head_hash=head_hash)


def seal_of(record: ThreadRecord, metadata: bytes) -> Seal:
    """The seals of a record as it is kept (``metadata``: its metadata, encoded)."""
    return Seal(
        thread_seal(record_digest(record, record.head_hash), metadata),
        review_seals(record, record.head_hash),
    )


# what a field set to a value of another type raises when it is sealed again
_CHANGED_TYPES = (SerializationError, TypeError, ValueError, AttributeError, OverflowError, struct.error)


def _current(record: ThreadRecord) -> Seal | None:
    """The seals of the record as it is now (None: a field cannot even be sealed, or holds
    a container of another type, which a seal over its items cannot tell: ``''`` for ``()``)."""
    if not _well_typed(record):
        return None
    try:
        return seal_of(record, encode_metadata(record.metadata, record.thread_id))
    except _CHANGED_TYPES:
        return None


def _well_typed(record: ThreadRecord) -> bool:
    return (
        isinstance(record.metadata, dict)
        and isinstance(record.pending, tuple)
        and all(
            isinstance(review, PendingReview)
            and isinstance(review.tools, tuple)
            and all(isinstance(tool, str) for tool in review.tools)
            and isinstance(review.payload, bytes)
            for review in record.pending
        )
    )


def check(thread_id: str, record: ThreadRecord, seal: Seal) -> None:
    """Refuse a kept record that is not as it was appended (see the module's documentation)."""
    now = _current(record)
    if now is None:
        raise damaged(thread_id, "thread record", "a field cannot be read (it was changed)")
    for review, actual, expected in zip(record.pending, now.reviews, seal.reviews, strict=False):
        if actual != expected:
            raise damaged(thread_id, f"pending review {review.interrupt_id!r}", MISMATCH)
    if now.count != seal.count:
        reason = f"it holds {now.count} pending reviews, {seal.count} were written"
        raise damaged(thread_id, "thread record", reason)
    if now.thread != seal.thread:
        raise damaged(thread_id, "thread record", MISMATCH)


def found(record: ThreadRecord | None, seal: Seal | None) -> Found:
    """A kept record as a repair sees it (``_repair.Found``)."""
    now = _current(record) if record is not None else None
    if record is None or seal is None or now is None or now.thread != seal.thread:
        return Found(None, False, None)
    return Found(record, True, record.pending if now.reviews == seal.reviews else None)


def rebuilt(
    thread_id: str, record: ThreadRecord | None, seal: Seal | None, new: ThreadRecord, derived: Derived
) -> tuple[ThreadRecord, Seal, list[str]]:
    """The record to keep in place of ``record`` (``new``, from ``_repair.plan``), its seal,
    and what changed."""
    kept = kept_record(replace(new, thread_id=thread_id), derived.head_hash)
    sealed = seal_of(kept, encode_metadata(kept.metadata, thread_id))
    changes = thread_changes(_image(record, seal) if record is not None else None, _image(kept, sealed))
    old = {} if record is None else _reviews(record, seal)
    return kept, sealed, changes + review_changes(old, _reviews(kept, sealed))


def _image(record: ThreadRecord, seal: Seal | None) -> dict[str, object]:
    return record_image(record, record.head_hash, seal.thread if seal is not None else None)


def _reviews(record: ThreadRecord, seal: Seal | None) -> dict[object, dict[str, object]]:
    seals = seal.reviews if seal is not None else ()
    return {
        review.interrupt_id: review_image(
            position,
            review.kind,
            review.tools,
            review.created_at,
            review.payload,
            seals[position] if position < len(seals) else None,
        )
        for position, review in enumerate(record.pending)
    }


def seal_deletion(deletion: DeletionRecord) -> bytes:
    """A kept deletion record's seal."""
    thread_id = deletion.thread_id
    return deletion_seal(
        thread_id,
        deletion.deleted_at,
        deletion.head_seq,
        deletion.head_hash,
        encode_by(deletion.by, thread_id),
        encode_metadata(deletion.metadata, thread_id),
    )


def check_deletion(number: int, deletion: DeletionRecord, seal: bytes) -> None:
    """Refuse a kept deletion record (the ``number``-th made) that is not as it was made."""
    what = f"deletion record {number}"
    thread_id = deletion.thread_id if isinstance(deletion.thread_id, str) else repr(deletion.thread_id)
    try:
        same = isinstance(deletion.metadata, dict) and seal_deletion(deletion) == seal
    except _CHANGED_TYPES:
        same = False
    if not same:
        raise damaged(thread_id, what, MISMATCH)
