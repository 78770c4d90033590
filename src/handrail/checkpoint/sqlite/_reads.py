"""The SQLite saver's reads: a thread's log and record, the thread list, the inbox.

Every read is one transaction (a consistent instant, never waiting for the writer in
WAL mode), and every value read back is checked before it becomes a record
(``_records``: a damaged one raises :class:`~handrail.errors.SerializationError`
naming the thread and the record). The inbox is one index range in
``(created_at, thread_id, interrupt_id)`` order, through the tool index when a tool
is named.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from handrail.checkpoint._derived import (
    pending_from_row,
    thread_from_row,
    thread_metadata,
    tool_index_matches,
    with_pending,
    without_thread,
)
from handrail.checkpoint._records import damaged, encode_owners, event_from_row
from handrail.checkpoint.base import (
    PendingFilter,
    PendingItem,
    ThreadFilter,
    ThreadRead,
    ThreadRecord,
)
from handrail.checkpoint.serde import dumps
from handrail.checkpoint.sqlite._connections import _Connections, fetch_all

_RECORD_COLUMNS = (
    "thread_id, head_seq, status, epoch, created_at, updated_at, metadata, pending_count, head_hash, seal"
)
_PENDING_COLUMNS = "p.thread_id, p.interrupt_id, p.kind, p.tools, p.created_at, p.payload, p.position, p.seal"
# the thread's row beside each review of the inbox: checked, for the metadata it shows
_THREAD_COLUMNS = (
    "t.thread_id, t.head_seq, t.status, t.epoch, t.created_at, t.updated_at, t.metadata, t.pending_count, "
    "t.head_hash, t.seal"
)


class _Reads(_Connections):
    """``read``, ``get_thread``, ``list_threads`` and ``list_pending``."""

    def read(
        self, thread_id: str, *, after_seq: int = 0, upto_seq: int | None = None, from_reading: bool = False
    ) -> ThreadRead:
        sql = "SELECT seq, kind, created_at, payload FROM handrail_events WHERE thread_id = ?"
        reading = None
        with self._transaction(write=False) as conn:
            if from_reading and not after_seq and upto_seq is None:
                found = fetch_all(
                    conn,
                    "SELECT seq, created_at, payload FROM handrail_readings WHERE thread_id = ?",
                    (thread_id,),
                )
                if found:
                    reading = event_from_row(thread_id, found[0][0], "reading", found[0][1], found[0][2])
                    after_seq = reading.seq
            params: list[Any] = [thread_id]
            if after_seq:  # from the start, every row: a damaged number below 1 is read and refused
                sql += " AND seq > ?"
                params.append(after_seq)
            if upto_seq is not None:
                sql += " AND seq <= ?"
                params.append(upto_seq)
            records = self._records(conn, "WHERE thread_id = ?", [thread_id])
            rows = fetch_all(conn, sql + " ORDER BY seq", params)
        events = [event_from_row(thread_id, *row) for row in rows]
        record = records[0] if records else None
        if record is None and (events or reading is not None):  # an append writes both, a delete neither
            raise damaged(thread_id, "thread record", "it is missing, yet the thread has records")
        if reading is not None and record is not None and reading.seq > record.head_seq:
            raise damaged(thread_id, "saved reading", f"it is of event {reading.seq}, past the head")
        return ThreadRead(record=record, events=events, reading=reading)

    def get_thread(self, thread_id: str) -> ThreadRecord | None:
        with self._transaction(write=False) as conn:
            records = self._records(conn, "WHERE thread_id = ?", [thread_id])
            # no row: a thread that does not exist has no log either (else the row was damaged)
            logged = not records and fetch_all(
                conn, "SELECT 1 FROM handrail_events WHERE thread_id = ? LIMIT 1", (thread_id,)
            )
        if logged:
            raise damaged(thread_id, "thread record", "it is missing, yet the thread has records")
        return records[0] if records else None

    def list_threads(self, filter: ThreadFilter) -> list[ThreadRecord]:
        where: list[str] = []
        params: list[Any] = []
        if filter.status is not None:
            where.append("status = ?")
            params.append(filter.status)
        if filter.updated_after is not None:
            where.append("updated_at > ?")
            params.append(filter.updated_after)
        if filter.updated_before is not None:
            where.append("updated_at < ?")
            params.append(filter.updated_before)
        if filter.metadata:
            where.append("handrail_metadata_matches(CAST(thread_id AS BLOB), metadata, ?)")
            params.append(dumps(dict(filter.metadata), where="the metadata filter"))
        if filter.owners is not None:
            where.append("handrail_owners_match(CAST(thread_id AS BLOB), metadata, ?)")
            params.append(encode_owners(filter.owners))
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        clause += " ORDER BY updated_at DESC, thread_id LIMIT ? OFFSET ?"
        params += [max(filter.limit, 0), max(filter.offset, 0)]
        with self._transaction(write=False) as conn:
            return self._records(conn, clause, params)

    def list_pending(self, filter: PendingFilter) -> list[PendingItem]:
        """The inbox's page; each review on it checked (its seal, chained to its thread's
        row, which is checked too), and the tool index row that led to it, if one did."""
        sql, params = self._pending_query(filter, time.time())
        with self._transaction(write=False) as conn:
            rows = fetch_all(conn, sql, params)
        threads: dict[Any, tuple[dict[str, Any], bytes | None]] = {}
        items = []
        for row in rows:
            pending, thread = row[:8], row[8:18]
            thread_id = thread[0]
            if thread_id is None:
                raise without_thread(pending[0], pending[1])
            known = threads.get(thread_id)
            if known is None:
                known = threads[thread_id] = thread_metadata(thread)
            metadata, head_hash = known
            review = pending_from_row(
                thread_id, *pending[1:6], head_hash=head_hash, position=pending[6], seal=pending[7]
            )
            if filter.tool is not None and not tool_index_matches(review, filter.tool, row[18]):
                raise damaged(
                    thread_id,
                    f"pending review {review.interrupt_id!r}",
                    "the row of the tool index that led to it is not its own (damaged)",
                )
            items.append(PendingItem(thread_id=thread_id, review=review, metadata=metadata))
        return items

    def _pending_query(self, filter: PendingFilter, now: float) -> tuple[str, list[Any]]:
        """The inbox query: an index range in ``(created_at, thread_id, interrupt_id)`` order.

        Newest first walks the same index backwards: the key comparison and every column
        of the ORDER BY flip together.
        """
        newest = filter.order == "newest"
        past, direction = ("<", " DESC") if newest else (">", "")
        where: list[str] = []
        params: list[Any] = []
        # ``o`` is the table whose index orders the page: the tool index when a tool is named
        if filter.tool is not None:
            o = "o"
            source = (
                "handrail_pending_tools AS o JOIN handrail_pending AS p "
                "ON p.thread_id = o.thread_id AND p.interrupt_id = o.interrupt_id"
            )
            where.append("o.tool = ?")
            params.append(filter.tool)
        else:
            o = "p"
            source = "handrail_pending AS p"
        if filter.kind is not None:
            where.append("p.kind = ?")
            params.append(filter.kind)
        if filter.thread_id is not None:
            where.append(f"{o}.thread_id = ?")
            params.append(filter.thread_id)
        if filter.older_than is not None:
            where.append(f"{o}.created_at <= ?")
            params.append(now - filter.older_than)
        if filter.after is not None:
            where.append(f"({o}.created_at, {o}.thread_id, {o}.interrupt_id) {past} (?, ?, ?)")
            params += list(filter.after)
        if filter.metadata:
            where.append(
                "(t.thread_id IS NULL OR handrail_metadata_matches(CAST(t.thread_id AS BLOB), t.metadata, ?))"
            )
            params.append(dumps(dict(filter.metadata), where="the metadata filter"))
        if filter.owners is not None:  # on the thread's row, as the metadata filter: the walk keeps its index
            where.append(
                "(t.thread_id IS NULL OR handrail_owners_match(CAST(t.thread_id AS BLOB), t.metadata, ?))"
            )
            params.append(encode_owners(filter.owners))
        indexed = ", o.created_at" if filter.tool is not None else ""
        sql = (
            f"SELECT {_PENDING_COLUMNS}, {_THREAD_COLUMNS}{indexed} FROM {source} "
            # a review whose thread has no row (damage) comes too, to be refused
            "LEFT JOIN handrail_threads AS t ON t.thread_id = p.thread_id"
            + ((" WHERE " + " AND ".join(where)) if where else "")
            + f" ORDER BY {o}.created_at{direction}, {o}.thread_id{direction}, "
            + f"{o}.interrupt_id{direction} LIMIT ?"
        )
        params.append(max(filter.limit, 0))
        return sql, params

    def _records(self, conn: sqlite3.Connection, clause: str, params: Sequence[Any]) -> list[ThreadRecord]:
        rows = fetch_all(conn, f"SELECT {_RECORD_COLUMNS} FROM handrail_threads {clause}", params)
        with_pending = [row[0] for row in rows if row[7]]
        pending: dict[Any, list[Sequence[Any]]] = {}
        for start in range(0, len(with_pending), 500):
            chunk = with_pending[start : start + 500]
            marks = ", ".join("?" * len(chunk))
            for row in fetch_all(
                conn,
                f"SELECT {_PENDING_COLUMNS} FROM handrail_pending AS p WHERE p.thread_id IN ({marks}) "
                "ORDER BY p.thread_id, p.position",
                chunk,
            ):
                pending.setdefault(row[0], []).append(row[1:])
        return [_record(row, pending.get(row[0], ())) for row in rows]


def _record(row: Sequence[Any], pending: Sequence[Sequence[Any]]) -> ThreadRecord:
    """A thread's record from its row and its pending rows, each checked (``_records``)."""
    return with_pending(thread_from_row(row), row[7], pending)
