"""The SQLite saver's deletions: a thread goes, and a record of it stays (SPEC rule 21).

Deleting a thread is one ``BEGIN IMMEDIATE`` transaction: it reads the thread's row and
the start of its log's last record (the seal: ``checkpoint/integrity.py``, rule 1),
writes a row of ``handrail_deletions`` (who, when, that record's number and hash, the
thread's metadata) and deletes the thread's rows from every other table. So the record
exists exactly when the thread is gone. :meth:`_Deletions.list_deletions` reads the
records back in ``(deleted_at, thread_id, id)`` order, each one checked
(``_records.deletion_from_row``: a damaged one raises
:class:`~handrail.errors.SerializationError` naming it); the metadata and owners filters
run in Python, on the checked record, with the rules of the in-memory store.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

from handrail.checkpoint._records import (
    MAX_SEQ,
    damaged,
    decode_metadata,
    deletion_from_row,
    deletion_passes,
    deletion_time,
    encode_by,
)
from handrail.checkpoint.base import ClaimFilter, DeletionRecord
from handrail.checkpoint.integrity import HASH_SIZE, SEAL, sealed_hash
from handrail.checkpoint.seals import deletion_seal
from handrail.checkpoint.sqlite._connections import _text_or_bytes, fetch_all
from handrail.checkpoint.sqlite._writes import _Writes

_THREAD_TABLES = (
    "handrail_threads",
    "handrail_events",
    "handrail_pending",
    "handrail_pending_tools",
    "handrail_runs",
    "handrail_readings",
)
_COLUMNS = "id, thread_id, deleted_at, deleted_by, head_seq, head_hash, metadata, seal"


class _Deletions(_Writes):
    """``delete_thread`` and ``list_deletions``."""

    def delete_thread(self, thread_id: str, *, by: Any = None) -> bool:
        who = encode_by(by, thread_id)  # before anything: a ``by`` that cannot be stored deletes nothing
        self._known.forget(thread_id)
        with self._transaction(write=True) as conn:
            found = fetch_all(conn, "SELECT metadata FROM handrail_threads WHERE thread_id = ?", (thread_id,))
            if found:
                self._record_deletion(conn, thread_id, who, found[0][0])
            for table in _THREAD_TABLES:
                conn.execute(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))
        return bool(found)

    @staticmethod
    def _record_deletion(conn: sqlite3.Connection, thread_id: str, who: bytes, metadata: Any) -> None:
        decode_metadata(metadata, thread_id)  # a damaged row is refused, not copied into the record
        last = fetch_all(
            conn,
            f"SELECT seq, substr(payload, 1, {len(SEAL) + HASH_SIZE}) FROM handrail_events "
            "WHERE thread_id = ? ORDER BY seq DESC LIMIT 1",
            (thread_id,),
        )
        head_seq, head_hash = 0, None
        if last:
            head_seq, start = last[0]
            if type(head_seq) is not int or not 0 < head_seq <= MAX_SEQ:
                raise damaged(
                    thread_id, "its last record", "the event number is not a positive 64-bit integer"
                )
            head_hash = sealed_hash(start.encode() if isinstance(start, str) else bytes(start or b""))
        at = deletion_time()
        raw = metadata.encode() if isinstance(metadata, str) else bytes(metadata)
        seal = deletion_seal(thread_id, at, head_seq, head_hash, who, raw)
        conn.execute(
            "INSERT INTO handrail_deletions (thread_id, deleted_at, deleted_by, head_seq, head_hash, "
            "metadata, seal) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (thread_id, at, who, head_seq, head_hash, metadata, seal),
        )

    def list_deletions(
        self,
        *,
        since: float | None = None,
        until: float | None = None,
        owners: ClaimFilter | None = None,
        metadata: Mapping[str, Any] | None = None,
        limit: int = 1000,
    ) -> list[DeletionRecord]:
        where: list[str] = []
        params: list[Any] = []
        if since is not None:
            where.append("deleted_at >= ?")
            params.append(since)
        if until is not None:
            where.append("deleted_at <= ?")
            params.append(until)
        sql = f"SELECT {_COLUMNS} FROM handrail_deletions"
        sql += (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY deleted_at, thread_id, id"
        found: list[DeletionRecord] = []
        if limit <= 0:
            return found
        with self._transaction(write=False) as conn:
            # a text column that is not UTF-8 (damage) comes as its bytes, for the check to name it
            conn.text_factory = _text_or_bytes
            cursor = conn.execute(sql, params)
            try:
                for row in cursor:  # in order, until a page of records passes the filters
                    record = deletion_from_row(*row)
                    if deletion_passes(record, None, None, owners, metadata):
                        found.append(record)
                        if len(found) == limit:
                            break
            finally:
                cursor.close()
                conn.text_factory = str
        return found
