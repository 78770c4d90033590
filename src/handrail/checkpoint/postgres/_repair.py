"""Postgres repair: a thread's derived rows rebuilt from its log (``repair_thread``).

One transaction: it locks the thread's row (``FOR UPDATE``: an append waits behind it),
reads the log and the rows, asks the caller's ``derive`` for the record the log stands
for, and lets ``_repair.plan`` decide what to keep. Rows written anew are sealed as an
append seals them (``_write.py``; the thread row's seal finished in SQL). The index rows
(``pending_tools``, ``pending_metadata``) are then compared, in SQL, with the ones the
pending rows and the thread's metadata call for, and rebuilt if any differs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from handrail.checkpoint._records import decode_metadata, encode_metadata, encode_tools, event_from_row
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
from handrail.checkpoint.postgres._base import BEGIN, COMMIT, Op, Query, Tables
from handrail.checkpoint.postgres._schema import INDEXED_SQL
from handrail.checkpoint.seals import record_digest, review_seals
from handrail.errors import SerializationError

__all__ = ["RepairSQL"]

ROLLBACK = Query("ROLLBACK")

_ROW = (
    "thread_id, head_seq, status, epoch, created_at, updated_at, metadata::text, pending_count, head_hash, "
    "seal"
)
_REVIEWS = "interrupt_id, kind, tools, created_at, payload, position, seal"


class RepairSQL(Tables):
    """Rebuilding a thread's derived rows."""

    def repair_thread(
        self, thread_id: str, derive: Callable[[list[StoredEvent]], Derived], dry_run: bool = False
    ) -> Op[list[str]]:
        """The repair (see the module's documentation); a dry run makes it and rolls it back."""
        t = {"thread": thread_id}
        end = ROLLBACK if dry_run else COMMIT
        lock = "" if dry_run else " FOR UPDATE"
        _, _, log, rows, reviews = yield [
            BEGIN,
            Query(f"SELECT 1 FROM {self.threads} WHERE thread_id = %(thread)s{lock}", t),
            Query(
                f"SELECT seq, kind, created_at, payload FROM {self.events} WHERE thread_id = %(thread)s "
                "ORDER BY seq",
                t,
            ),
            Query(f"SELECT {_ROW} FROM {self.threads} WHERE thread_id = %(thread)s", t),
            Query(f"SELECT {_REVIEWS} FROM {self.pending} WHERE thread_id = %(thread)s ORDER BY position", t),
        ]
        found = found_rows(rows.rows[0] if rows.rows else None, reviews.rows)
        if not log.rows:
            if not rows.rows or not without_log(thread_id, found):
                yield [end]
                return []
            tables = (self.pending_metadata, self.pending_tools, self.pending, self.threads)
            yield [*(Query(f"DELETE FROM {table} WHERE thread_id = %(thread)s", t) for table in tables), end]
            return [ORPHAN]
        derived = derive([event_from_row(thread_id, *row) for row in log.rows])
        record = plan(thread_id, derived, found)
        changes: list[str] = []
        if record is not None:
            changes += yield from self._rewrite(thread_id, record, derived.head_hash, rows.rows, reviews.rows)
        changes += yield from self._reindex(t, rewritten=record is not None)
        yield [end]
        return changes

    def _rewrite(
        self,
        thread_id: str,
        record: ThreadRecord,
        head_hash: bytes | None,
        rows: Sequence[Sequence[Any]],
        reviews: Sequence[Sequence[Any]],
    ) -> Op[list[str]]:
        """Write the thread's row and pending rows from ``record``; what changed."""
        t = {"thread": thread_id}
        metadata = encode_metadata(record.metadata, thread_id).decode()
        row = {
            "thread": thread_id,
            "head": record.head_seq,
            "status": record.status,
            "epoch": record.epoch,
            "created": record.created_at,
            "updated": record.updated_at,
            "metadata": metadata,
            "count": len(record.pending),
            "head_hash": head_hash,
            "digest": record_digest(record, head_hash, thread_id),
        }
        columns = "head_seq, status, epoch, created_at, updated_at, metadata, pending_count, head_hash, seal"
        excluded = ", ".join(f"excluded.{column}" for column in columns.split(", "))
        written = yield [
            # the index rows stay until ``_reindex`` has compared them with the new rows
            Query(f"DELETE FROM {self.pending} WHERE thread_id = %(thread)s", t),
            Query(
                f"INSERT INTO {self.threads} (thread_id, {columns}) VALUES (%(thread)s, %(head)s, "
                "%(status)s, %(epoch)s, %(created)s, %(updated)s, %(metadata)s::jsonb, %(count)s, "
                "%(head_hash)s, sha256(%(digest)s || convert_to(%(metadata)s::jsonb::text, 'UTF8'))) "
                f"ON CONFLICT (thread_id) DO UPDATE SET ({columns}) = ROW({excluded}) RETURNING seal",
                row,
            ),
            *(
                Query(
                    f"INSERT INTO {self.pending} (thread_id, interrupt_id, position, kind, tools, "
                    "created_at, payload, seal) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                    (
                        thread_id,
                        review.interrupt_id,
                        position,
                        review.kind,
                        encode_tools(review.tools),
                        review.created_at,
                        review.payload,
                        seal,
                    ),
                )
                for position, (review, seal) in enumerate(
                    zip(record.pending, review_seals(record, head_hash, thread_id), strict=True)
                )
            ),
        ]
        seal = bytes(written[1].rows[0][0])
        old = _thread_image(rows[0]) if rows else None
        new = record_image(record, head_hash, seal)
        sealed = review_seals(record, head_hash, thread_id)
        return thread_changes(old, new) + review_changes(
            {
                row[0]: review_image(row[5], row[1], row[2], row[3], _bytes(row[4]), _bytes(row[6]))
                for row in reviews
            },
            {
                review.interrupt_id: review_image(
                    position, review.kind, review.tools, review.created_at, review.payload, sealed[position]
                )
                for position, review in enumerate(record.pending)
            },
        )

    def _reindex(self, t: dict[str, Any], *, rewritten: bool) -> Op[list[str]]:
        """Make the thread's index rows the ones its pending rows call for; what changed.

        When the pending rows were just written anew, their ids are new: the comparison
        leaves the ids out, and the index rows are rebuilt whatever it finds.
        """
        tools, entries = self._index_sql(not rewritten)
        found_ids = "pending_id" if not rewritten else "NULL::bigint"
        found_tools = (
            f"SELECT tool, created_at, thread_id, interrupt_id, {found_ids}, page_key "
            f"FROM {self.pending_tools} WHERE thread_id = %(thread)s"
        )
        found_entries = (
            f"SELECT key, value::text, page_key, thread_id, {found_ids} FROM {self.pending_metadata} "
            "WHERE thread_id = %(thread)s"
        )
        pairs = (
            (tools, found_tools),
            (found_tools, tools),
            (entries, found_entries),
            (found_entries, entries),
        )
        diffs = yield [Query(f"({want}) EXCEPT ALL ({have})", t) for want, have in pairs]
        missing_tools, extra_tools, missing_entries, extra_entries = (d.rows for d in diffs)
        changes = index_changes("tool index", missing_tools, extra_tools)
        changes += index_changes("metadata index", missing_entries, extra_entries)
        if changes or rewritten:
            tools, entries = self._index_sql(True, as_text=False)
            yield [
                Query(f"DELETE FROM {self.pending_tools} WHERE thread_id = %(thread)s", t),
                Query(f"DELETE FROM {self.pending_metadata} WHERE thread_id = %(thread)s", t),
                Query(
                    f"INSERT INTO {self.pending_tools} (tool, created_at, thread_id, interrupt_id, "
                    f"pending_id, page_key) {tools} ON CONFLICT (tool, page_key) DO UPDATE SET "
                    "created_at = excluded.created_at, thread_id = excluded.thread_id, "
                    "interrupt_id = excluded.interrupt_id, pending_id = excluded.pending_id",
                    t,
                ),
                Query(
                    f"INSERT INTO {self.pending_metadata} (key, value, page_key, thread_id, pending_id) "
                    f"{entries} ON CONFLICT (key, value, page_key) DO UPDATE SET "
                    "thread_id = excluded.thread_id, pending_id = excluded.pending_id",
                    t,
                ),
            ]
        return changes

    def _index_sql(self, ids: bool, *, as_text: bool = True) -> tuple[str, str]:
        """The index rows the thread's pending rows call for: its tool rows and its metadata
        rows (as ``pending_tools`` and ``pending_metadata`` hold them; without the pending
        rows' ids unless ``ids``, the metadata value as text if ``as_text``)."""
        pending_id = "p.id" if ids else "NULL::bigint"
        key = f"{self.prefix}page_key(p.created_at, p.thread_id, p.interrupt_id)"
        tools = (
            f"SELECT DISTINCT x.tool, p.created_at, p.thread_id, p.interrupt_id, {pending_id}, {key} "
            f"FROM {self.pending} AS p CROSS JOIN unnest(p.tools) AS x (tool) WHERE p.thread_id = %(thread)s"
        )
        value = "e.value::text" if as_text else "e.value"
        entries = (
            f"SELECT e.key, {value}, {key}, p.thread_id, {pending_id} FROM {self.pending} AS p "
            f"JOIN {self.threads} AS t ON t.thread_id = p.thread_id CROSS JOIN jsonb_each(t.metadata) AS e "
            f"WHERE p.thread_id = %(thread)s AND {INDEXED_SQL}"
        )
        return tools, entries


def _bytes(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview) else value


def _thread_image(row: Sequence[Any]) -> dict[str, Any]:
    _, head_seq, status, epoch, created_at, updated_at, metadata, count, head_hash, seal = row
    try:
        shown: Any = decode_metadata(metadata, row[0])
    except SerializationError:
        shown = metadata
    return thread_image(
        head_seq, status, epoch, created_at, updated_at, shown, count, _bytes(head_hash), _bytes(seal)
    )
