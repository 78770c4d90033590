"""The SQLite saver's repair: a thread's derived rows rebuilt from its log (``repair_thread``).

One ``BEGIN IMMEDIATE`` transaction reads the log and the thread's rows, asks the
caller's ``derive`` for the record the log stands for, and lets ``_repair.plan``
decide what to keep (see there). Rows written anew are the rows an append writes
(``_rows``); the tool index is then made the pending rows' own, row by row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from handrail.checkpoint._records import (
    decode_metadata,
    encode_metadata,
    event_from_row,
)
from handrail.checkpoint._repair import (
    ORPHAN,
    found_rows,
    index_changes,
    plan,
    record_image,
    review_changes,
    review_image,
    thread_changes,
    thread_image,
    without_log,
)
from handrail.checkpoint.base import Derived, StoredEvent, ThreadRecord
from handrail.checkpoint.sqlite._connections import fetch_all
from handrail.checkpoint.sqlite._rows import _Write, pending_rows
from handrail.checkpoint.sqlite._writes import _Writes
from handrail.errors import SerializationError

_THREAD = (
    "thread_id, head_seq, status, epoch, created_at, updated_at, metadata, pending_count, head_hash, seal"
)
_REVIEWS = "interrupt_id, kind, tools, created_at, payload, position, seal"


class _Repairs(_Writes):
    """``repair_thread``."""

    def repair_thread(
        self, thread_id: str, derive: Callable[[list[StoredEvent]], Derived], *, dry_run: bool = False
    ) -> list[str]:
        self._known.forget(thread_id)
        # a dry run reads, and writes nothing: what a repair would change is known without it
        with self._transaction(write=not dry_run) as conn:
            log = fetch_all(
                conn,
                "SELECT seq, kind, created_at, payload FROM handrail_events WHERE thread_id = ? ORDER BY seq",
                (thread_id,),
            )
            rows = fetch_all(
                conn, f"SELECT {_THREAD} FROM handrail_threads WHERE thread_id = ?", (thread_id,)
            )
            reviews = fetch_all(
                conn,
                f"SELECT {_REVIEWS} FROM handrail_pending WHERE thread_id = ? ORDER BY position",
                (thread_id,),
            )
            found = found_rows(rows[0] if rows else None, reviews)
            if not log:
                if not rows or not without_log(thread_id, found):
                    return []
                for table in ("handrail_threads", "handrail_pending", "handrail_pending_tools"):
                    if not dry_run:
                        conn.execute(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))
                return [ORPHAN]
            derived = derive([event_from_row(thread_id, *row) for row in log])
            record = plan(thread_id, derived, found)
            changes: list[str] = []
            if record is not None:
                changes += _rewrite(conn, thread_id, record, derived.head_hash, rows, reviews, dry_run)
            kept = record
            if kept is None:  # the rows stay: the tool index must be their reviews'
                assert found.thread is not None and found.pending is not None
                kept = replace(found.thread, pending=found.pending)
            changes += _retool(conn, thread_id, kept, dry_run)
        return changes


def _rewrite(
    conn: sqlite3.Connection,
    thread_id: str,
    record: ThreadRecord,
    head_hash: bytes | None,
    rows: Sequence[Sequence[Any]],
    reviews: Sequence[Sequence[Any]],
    dry_run: bool,
) -> list[str]:
    """Write the thread's row and pending rows from ``record`` (unless ``dry_run``); what changed."""
    metadata = encode_metadata(record.metadata, thread_id)
    write = _Write(thread_id, [], record.head_seq, record, metadata, None, None, True)
    write.seal_to(head_hash)
    old = _thread_image(rows[0]) if rows else None
    new = record_image(record, head_hash, write.seal)
    changes = thread_changes(old, new)
    changes += review_changes(
        {row[0]: review_image(row[5], row[1], row[2], row[3], row[4], row[6]) for row in reviews},
        {row[1]: review_image(row[2], row[3], row[4], row[5], row[6], row[7]) for row in write.pending_rows},
    )
    if dry_run:
        return changes
    conn.execute("DELETE FROM handrail_threads WHERE thread_id = ?", (thread_id,))
    conn.execute("DELETE FROM handrail_pending WHERE thread_id = ?", (thread_id,))
    conn.execute(
        "INSERT INTO handrail_threads (thread_id, head_seq, status, epoch, created_at, updated_at, metadata, "
        "pending_count, head_hash, seal) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            thread_id,
            record.head_seq,
            record.status,
            record.epoch,
            record.created_at,
            record.updated_at,
            metadata,
            len(record.pending),
            head_hash,
            write.seal,
        ),
    )
    conn.executemany(
        "INSERT INTO handrail_pending (thread_id, interrupt_id, position, kind, tools, created_at, payload, "
        "seal) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        write.pending_rows,
    )
    return changes


def _retool(conn: sqlite3.Connection, thread_id: str, record: ThreadRecord, dry_run: bool) -> list[str]:
    """Make the thread's rows of the tool index the ones its pending reviews have (unless
    ``dry_run``); what changed."""
    _, wanted = pending_rows(thread_id, record, None)
    found = fetch_all(
        conn,
        "SELECT tool, created_at, thread_id, interrupt_id FROM handrail_pending_tools WHERE thread_id = ?",
        (thread_id,),
    )
    have, want = set(found), set(wanted)
    missing = [row for row in wanted if row not in have]
    extra = [row for row in found if row not in want]
    if (missing or extra) and not dry_run:
        conn.execute("DELETE FROM handrail_pending_tools WHERE thread_id = ?", (thread_id,))
        conn.executemany(
            "INSERT OR IGNORE INTO handrail_pending_tools (tool, created_at, thread_id, interrupt_id) "
            "VALUES (?, ?, ?, ?)",
            wanted,
        )
    return index_changes("tool index", missing, extra)


def _thread_image(row: Sequence[Any]) -> dict[str, Any]:
    _, head_seq, status, epoch, created_at, updated_at, metadata, count, head_hash, seal = row
    try:
        shown: Any = decode_metadata(metadata, row[0])
    except SerializationError:
        shown = metadata
    return thread_image(head_seq, status, epoch, created_at, updated_at, shown, count, head_hash, seal)
