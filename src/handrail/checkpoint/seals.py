"""Seals over the rows a store derives from a thread's log: damage there fails loudly too.

A store keeps, beside each thread's log, rows that the runtime derives from it: the
*thread row* (head, status, epoch, times, metadata, pending count), one row per
*pending review* (the inbox), and index rows of those reviews (their tools; in
PostgreSQL also their thread's metadata entries). A deletion leaves a *deletion
record*. Readers show these rows without reading the log (the inbox pages through
them), so the hash chain over the log (``integrity.py``) cannot vouch for them. These
rules do (SPEC rule 10).

Rules
-----
Rule 1 - The *head hash* of a thread is the value its chain holds after its head: the
    hash the next record will be chained to. After an append it is the hash sealed into
    the append's last record (:func:`head_after`); an append without records keeps the
    one before. Pruning leaves it as it is (the snapshot's anchors keep it:
    ``integrity.py``, rule 3). A log whose records have no seal has none (None).
Rule 2 - A thread row is sealed with SHA-256 over its head hash and its columns (as a
    JSON array: :func:`thread_digest`), then over its metadata *as the store gives it back*
    (:func:`thread_seal`): SQLite's stored bytes, PostgreSQL's ``jsonb`` as text (the
    server normalises JSON, so it finishes the seal itself, in SQL), the memory store's
    encoding. So a row is bound to the log state it was derived from: a row left from
    another head, or a head that is not the log's, is found by any reader of the log.
Rule 3 - A pending row is sealed with SHA-256 over the head hash of its thread when it
    was written, its columns (a JSON array, tool names as a list) and its payload
    (:func:`review_seal`): every append rewrites a thread's pending rows, so they always
    share its head hash.
Rule 4 - Index rows hold nothing of their own: every column is the pending row's or
    the thread row's, so a reader that uses one checks it against the sealed rows it
    leads to (the tool is one of the review's, the time and the ids are the review's).
Rule 5 - A deletion record is sealed over every column (:func:`deletion_seal`; in a
    form PostgreSQL computes in SQL, as its deletion is one statement).
Rule 6 - Rows written before these seals have none (NULL): they load after the usual
    checks of each column, unsealed, as records without a seal do in ``integrity.py``
    (rule 5 there). The stores' migrations seal the rows they find (see each store);
    every append seals the rows it writes.
Rule 7 - A seal that does not match, a seal or head hash of the wrong type or length:
    :class:`~handrail.errors.SerializationError` naming the thread and the row. A seal
    cannot tell which column changed; the checks of each column still do when they can.

The seals are not keys: they find damage, not a writer who recomputes them (the head
hash kept elsewhere does that for a log: ``integrity.py``, rule 6).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import Any

import orjson

from handrail.checkpoint.base import StoredEvent, ThreadRecord
from handrail.checkpoint.integrity import HASH_SIZE, unseal
from handrail.errors import SerializationError

__all__ = [
    "DELETION_PREFIX",
    "MISMATCH",
    "NONE",
    "SEAL_SIZE",
    "checked_hash",
    "deletion_seal",
    "head_after",
    "record_digest",
    "review_seal",
    "review_seals",
    "row_damaged",
    "thread_digest",
    "thread_seal",
]

SEAL_SIZE = 32
"""The bytes of a row's seal (SHA-256)."""

_THREAD = b"handrail thread row 1\x00"
_REVIEW = b"handrail pending review 1\x00"
DELETION_PREFIX = b"handrail deletion record 1\x00"
"""What a deletion record's seal starts with (PostgreSQL computes the seal in SQL)."""
NONE = b"\xff\xff\xff\xff"
"""A NULL where a length would be (no value has this length)."""
_NO_HEAD = b"\x00"  # before a head hash: none (or b"\x01" and the 32 bytes)
_INT = struct.Struct(">q")
_FLOAT = struct.Struct(">d")


def head_after(events: Sequence[StoredEvent], before: bytes | None) -> bytes | None:
    """The thread's head hash once ``events`` are appended (rule 1)."""
    if not events:
        return before
    stored, _ = unseal(events[-1].payload[: 1 + HASH_SIZE])
    return stored if stored is not None and len(stored) == HASH_SIZE else None


def _text(value: str) -> bytes:
    raw = value.encode("utf-8", "surrogatepass")
    return len(raw).to_bytes(4, "big") + raw


def _blob(value: bytes | None) -> bytes:
    return NONE if value is None else len(value).to_bytes(4, "big") + value


def _head(head_hash: bytes | None) -> bytes:
    return _NO_HEAD if head_hash is None else b"\x01" + head_hash


def _columns(values: list[Any]) -> bytes:
    """Column values, unambiguously: a JSON array (orjson; a float as the shortest text
    that reads back as it), or for a string JSON cannot hold (a lone surrogate) its repr."""
    try:
        return orjson.dumps(values)
    except orjson.JSONEncodeError:
        return repr(values).encode("utf-8", "surrogatepass")


def thread_digest(
    thread_id: str,
    head_seq: int,
    head_hash: bytes | None,
    status: str,
    epoch: str,
    created_at: float,
    updated_at: float,
    pending_count: int,
) -> bytes:
    """The first part of a thread row's seal: every column but the metadata (rule 2)."""
    columns = _columns(
        [thread_id, head_seq, status, epoch, float(created_at), float(updated_at), pending_count]
    )
    return hashlib.sha256(_THREAD + _head(head_hash) + columns).digest()


def thread_seal(digest: bytes, metadata: bytes) -> bytes:
    """A thread row's seal: its :func:`thread_digest`, then its metadata as stored (rule 2).

    PostgreSQL computes the same in SQL: ``sha256(digest || convert_to(metadata::text, 'UTF8'))``.
    """
    return hashlib.sha256(digest + metadata).digest()


def review_seal(
    head_hash: bytes | None,
    thread_id: str,
    position: int,
    interrupt_id: str,
    kind: str,
    tools: Sequence[str],
    created_at: float,
    payload: bytes,
) -> bytes:
    """A pending row's seal, chained to its thread's head hash (rule 3)."""
    columns = _columns([thread_id, position, interrupt_id, kind, tools, float(created_at)])
    return hashlib.sha256(
        b"".join((_REVIEW, _head(head_hash), len(columns).to_bytes(4, "big"), columns, payload))
    ).digest()


def deletion_seal(
    thread_id: str,
    deleted_at: float,
    head_seq: int,
    head_hash: str | None,
    by: bytes,
    metadata: bytes,
) -> bytes:
    """A deletion record's seal (rule 5): ``by`` and ``metadata`` as the store gives them back.

    PostgreSQL computes it in SQL (``postgres/_deletions.py``); the two must agree.
    """
    return hashlib.sha256(
        b"".join(
            (
                DELETION_PREFIX,
                _text(thread_id),
                _FLOAT.pack(deleted_at),
                _INT.pack(head_seq),
                NONE if head_hash is None else _text(head_hash),
                _blob(by),
                _blob(metadata),
            )
        )
    ).digest()


def review_seals(
    record: ThreadRecord, head_hash: bytes | None, thread_id: str | None = None
) -> tuple[bytes, ...]:
    """The seals of a thread record's pending rows, in their order (rule 3), as a store
    keeps them for ``thread_id`` (by default the record's own)."""
    thread_id = record.thread_id if thread_id is None else thread_id
    return tuple(
        review_seal(
            head_hash,
            thread_id,
            position,
            review.interrupt_id,
            review.kind,
            review.tools,
            review.created_at,
            review.payload,
        )
        for position, review in enumerate(record.pending)
    )


def record_digest(record: ThreadRecord, head_hash: bytes | None, thread_id: str | None = None) -> bytes:
    """:func:`thread_digest` of the row a store writes for ``record`` at ``head_hash``, under
    ``thread_id`` (by default the record's own)."""
    return thread_digest(
        record.thread_id if thread_id is None else thread_id,
        record.head_seq,
        head_hash,
        record.status,
        record.epoch,
        record.created_at,
        record.updated_at,
        len(record.pending),
    )


def row_damaged(thread_id: str, what: str, reason: str) -> SerializationError:
    """The error for a derived row that does not match its seal, or cannot be checked."""
    return SerializationError(f"cannot load thread {thread_id!r}, {what}: {reason}", thread_id=thread_id)


MISMATCH = (
    "it does not match its seal: a column was changed (damaged, or written by something "
    "other than handrail); `handrail audit verify --repair` rebuilds it from the log"
)
"""Why a row whose seal does not match is refused."""


def checked_hash(thread_id: str, what: str, column: str, value: Any) -> bytes | None:
    """A seal or head hash read back: None (unsealed), or exactly 32 bytes; else damage."""
    if isinstance(value, memoryview):
        value = bytes(value)
    if value is None or (isinstance(value, bytes) and len(value) == SEAL_SIZE):
        return value
    shown = repr(value[:40]) if isinstance(value, (bytes, str)) else type(value).__name__
    raise row_damaged(thread_id, what, f"its {column} is {shown}, not {SEAL_SIZE} bytes")
