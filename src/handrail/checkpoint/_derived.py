"""The rows beside a thread's log read back: its thread row and its pending rows, checked.

Every column is checked (type and range), and a row's seal when it has one
(``seals.py``): a damaged row raises :class:`~handrail.errors.SerializationError`
naming the thread and the row (SPEC rule 10). What the SQL savers read, they decode
here; the in-memory saver checks its kept objects in ``_kept``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import orjson

from handrail.checkpoint._records import (
    MAX_NAME,
    MAX_SEQ,
    MAX_TIME,
    STATUSES,
    check_name,
    check_thread_id,
    checked_time,
    column_bytes,
    damaged,
    decode_metadata,
    decode_tools,
    is_int,
    shown_value,
)
from handrail.checkpoint.base import PendingReview, ThreadRecord, ThreadStatus
from handrail.checkpoint.seals import (
    MISMATCH,
    SEAL_SIZE,
    checked_hash,
    review_seal,
    thread_digest,
    thread_seal,
)
from handrail.errors import SerializationError

__all__ = [
    "pending_from_row",
    "record_from_row",
    "thread_from_row",
    "thread_metadata",
    "tool_index_matches",
    "with_pending",
    "without_thread",
]


def pending_from_row(
    thread_id: str,
    interrupt_id: Any,
    kind: Any,
    tools: Any,
    created_at: Any,
    payload: Any,
    *,
    head_hash: bytes | None = None,
    position: Any = None,
    seal: Any = None,
) -> PendingReview:
    """A pending review from its row, with every column checked; with a ``seal``, also
    that seal (``seals.py``, rule 3), chained to ``head_hash``, its thread's (checked)."""
    listed = tools if type(tools) is list else _listed(tools)  # SQLite's JSON text; PostgreSQL's list
    if listed is not None:
        sealed = _sealed_review(
            thread_id, interrupt_id, kind, listed, created_at, payload, head_hash, position, seal
        )
        if sealed is not None:
            return sealed
    if isinstance(payload, memoryview):
        payload = bytes(payload)
    if not isinstance(interrupt_id, str) or not 0 < len(interrupt_id) <= MAX_NAME:
        raise damaged(thread_id, "a pending review", f"its interrupt id is {shown_value(interrupt_id)}")
    what = f"pending review {interrupt_id!r}"
    if not isinstance(payload, bytes):
        raise damaged(thread_id, what, "a column has the wrong type")
    check_name(thread_id, what, "kind", kind)
    review = PendingReview(
        interrupt_id=interrupt_id,
        kind=kind,
        tools=decode_tools(tools, thread_id, interrupt_id),
        created_at=checked_time(thread_id, what, created_at),
        payload=payload,
    )
    stored = checked_hash(thread_id, what, "seal", seal)
    if stored is not None:
        if not is_int(position) or not 0 <= position <= MAX_SEQ:
            raise damaged(thread_id, what, f"its position is {shown_value(position)}")
        expected = review_seal(
            head_hash, thread_id, position, interrupt_id, kind, review.tools, review.created_at, payload
        )
        if stored != expected:
            raise damaged(thread_id, what, MISMATCH)
    return review


def record_from_row(
    thread_id: str,
    head_seq: Any,
    status: Any,
    epoch: Any,
    created_at: Any,
    updated_at: Any,
    metadata: Any,
    pending: Sequence[PendingReview] | None = (),
    *,
    pending_count: Any = None,
    head_hash: Any = None,
    seal: Any = None,
) -> ThreadRecord:
    """A thread record from its row, with every column checked (type and range) and,
    when the row has a ``seal``, that seal (``seals.py``, rule 2).

    ``metadata`` is the column as the store gives it back (the seal covers those bytes).
    ``pending``: the thread's reviews, all of them (the row counts them: ``pending_count``,
    when given, must be their number); None when a reader has only some of them (the
    inbox's page): then the record holds none.
    """
    if (pending is None or pending_count == len(pending)) and _sealed_thread(
        thread_id, head_seq, status, epoch, created_at, updated_at, metadata, pending_count, head_hash, seal
    ):
        found = decode_metadata(metadata, thread_id)
        return ThreadRecord(
            thread_id, head_seq, status, epoch, created_at, updated_at, found, tuple(pending or ()), head_hash
        )
    check_thread_id(thread_id)
    what = "thread record"
    if not is_int(head_seq) or not 0 <= head_seq <= MAX_SEQ:
        raise damaged(thread_id, what, f"head_seq is {shown_value(head_seq)}")
    if status not in STATUSES:  # a string, and one of them
        raise damaged(thread_id, what, f"unknown status {shown_value(status)}")
    if not isinstance(epoch, str) or len(epoch) > MAX_NAME:
        raise damaged(thread_id, what, f"its epoch is {shown_value(epoch)}")
    if pending_count is not None and (not is_int(pending_count) or not 0 <= pending_count <= MAX_SEQ):
        raise damaged(thread_id, what, f"it counts {shown_value(pending_count)} pending reviews")
    if pending is not None and pending_count is not None and pending_count != len(pending):
        # the row counts its reviews: one went missing, or one came from elsewhere
        raise damaged(thread_id, what, f"it counts {pending_count!r} pending reviews, {len(pending)} found")
    checked: ThreadStatus = status
    record = ThreadRecord(
        thread_id=thread_id,
        head_seq=head_seq,
        status=checked,
        epoch=epoch,
        created_at=checked_time(thread_id, what, created_at),
        updated_at=checked_time(thread_id, what, updated_at),
        metadata=decode_metadata(metadata, thread_id),
        pending=tuple(pending or ()),
        head_hash=checked_hash(thread_id, what, "head hash", head_hash),
    )
    stored = checked_hash(thread_id, what, "seal", seal)
    if stored is not None:
        if pending_count is None:
            raise damaged(thread_id, what, "it has a seal, but no count of pending reviews was read")
        digest = thread_digest(
            thread_id,
            head_seq,
            record.head_hash,
            status,
            epoch,
            record.created_at,
            record.updated_at,
            pending_count,
        )
        if stored != thread_seal(digest, column_bytes(metadata)):
            raise damaged(thread_id, what, MISMATCH)
    return record


# The common case first: a row whose seal matches holds what its writer wrote, which
# passed the writer's own checks. Checked in one expression (each column's type and
# range, then the seal) it costs a fraction of the column-by-column checks, which run
# when anything is off, to name what is.
def _sealed_thread(
    thread_id: Any,
    head_seq: Any,
    status: Any,
    epoch: Any,
    created_at: Any,
    updated_at: Any,
    metadata: Any,
    count: Any,
    head_hash: Any,
    seal: Any,
) -> bool:
    return (
        type(seal) is bytes
        and len(seal) == SEAL_SIZE
        and type(thread_id) is str
        and 0 < len(thread_id) <= MAX_NAME
        and type(head_seq) is int
        and 0 <= head_seq <= MAX_SEQ
        and status in STATUSES
        and type(epoch) is str
        and len(epoch) <= MAX_NAME
        and type(created_at) is float
        and 0 <= created_at < MAX_TIME
        and type(updated_at) is float
        and 0 <= updated_at < MAX_TIME
        and type(count) is int
        and 0 <= count <= MAX_SEQ
        and (head_hash is None or (type(head_hash) is bytes and len(head_hash) == SEAL_SIZE))
        and type(metadata) in (bytes, str)
        and thread_seal(
            thread_digest(thread_id, head_seq, head_hash, status, epoch, created_at, updated_at, count),
            column_bytes(metadata),
        )
        == seal
    )


def _sealed_review(
    thread_id: str,
    interrupt_id: Any,
    kind: Any,
    tools: Any,
    created_at: Any,
    payload: Any,
    head_hash: bytes | None,
    position: Any,
    seal: Any,
) -> PendingReview | None:
    if not (
        type(seal) is bytes
        and len(seal) == SEAL_SIZE
        and type(interrupt_id) is str
        and 0 < len(interrupt_id) <= MAX_NAME
        and type(kind) is str
        and 0 < len(kind) <= MAX_NAME
        and type(tools) is list
        and all(type(tool) is str for tool in tools)
        and type(created_at) is float
        and 0 <= created_at < MAX_TIME
        and type(payload) is bytes
        and type(position) is int
        and 0 <= position <= MAX_SEQ
    ):
        return None
    if review_seal(head_hash, thread_id, position, interrupt_id, kind, tools, created_at, payload) != seal:
        return None
    return PendingReview(interrupt_id, kind, tuple(tools), created_at, payload)


def _listed(tools: Any) -> list[Any] | None:
    """A tool list stored as JSON text, decoded (None: it is not one; the checks say why)."""
    try:
        value = orjson.loads(tools)
    except (orjson.JSONDecodeError, TypeError):
        return None
    return value if type(value) is list else None


def without_thread(thread_id: Any, interrupt_id: Any) -> SerializationError:
    """The error for a pending review whose thread has no row (one of the two is damaged)."""
    shown = thread_id if isinstance(thread_id, str) else shown_value(thread_id)
    return damaged(shown, f"pending review {shown_value(interrupt_id)}", "its thread has no row (damaged)")


def thread_from_row(row: Sequence[Any]) -> ThreadRecord:
    """A thread record, without its reviews, from its row's columns in this order:
    thread_id, head_seq, status, epoch, created_at, updated_at, metadata, pending_count,
    head_hash, seal; every column checked, and the seal (:func:`record_from_row`)."""
    thread_id, head_seq, status, epoch, created_at, updated_at, metadata, count, head_hash, seal = row
    return record_from_row(
        thread_id,
        head_seq,
        status,
        epoch,
        created_at,
        updated_at,
        metadata,
        None,
        pending_count=count,
        head_hash=head_hash,
        seal=seal,
    )


def thread_metadata(row: Sequence[Any]) -> tuple[dict[str, Any], bytes | None]:
    """The metadata and head hash of a thread's row (columns as :func:`thread_from_row`
    takes them), the row checked as it checks it: what the inbox shows of a thread."""
    if _sealed_thread(*row):
        return decode_metadata(row[6], row[0]), row[8]
    record = thread_from_row(row)
    return dict(record.metadata), record.head_hash


def with_pending(record: ThreadRecord, count: int, rows: Sequence[Sequence[Any]]) -> ThreadRecord:
    """``record`` (checked, without its reviews) with its reviews, each row checked and
    sealed to the record's head hash. A row is ``(interrupt_id, kind, tools, created_at,
    payload, position, seal)``, in position order; the record counts them (``count``)."""
    thread_id = record.thread_id
    pending = tuple(
        pending_from_row(thread_id, *row[:5], head_hash=record.head_hash, position=row[5], seal=row[6])
        for row in rows
    )
    if count != len(pending):  # the row counts its reviews: one went missing, or came from elsewhere
        raise damaged(
            thread_id, "thread record", f"it counts {count!r} pending reviews, {len(pending)} found"
        )
    return replace(record, pending=pending)


def tool_index_matches(review: PendingReview, tool: str | None, created_at: Any) -> bool:
    """Whether a tool index row that led to ``review`` is its (``seals.py``, rule 4): the
    tool is one the review is about, and its time is the review's."""
    return (tool is None or tool in review.tools) and created_at == review.created_at
