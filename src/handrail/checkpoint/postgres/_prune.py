"""Postgres pruning: a thread's old history dropped, a snapshot in its place (one statement).

Pruning touches only the log (and the saved reading, which holds the history before the
snapshot): the thread row and its pending rows stay as they are, so pruning never
conflicts with a run appending at the head, and the row's head hash stays the chain's
value after the head (the snapshot's anchors keep it: ``checkpoint/integrity.py``).
"""

from __future__ import annotations

from handrail.checkpoint.base import StoredEvent
from handrail.checkpoint.postgres._base import Op, Query, Tables

__all__ = ["PruneSQL"]


class PruneSQL(Tables):
    """Pruning a thread's log."""

    def prune(
        self, thread_id: str, upto_seq: int, snapshot: StoredEvent, keep_kinds: frozenset[str]
    ) -> Op[int]:
        # one statement: nothing is dropped unless the snapshot took its place
        (result,) = yield [
            Query(
                f"WITH replaced AS (UPDATE {self.events} SET kind = %s, created_at = %s, payload = %s "
                "WHERE thread_id = %s AND seq = %s RETURNING 1), "
                f"dropped AS (DELETE FROM {self.events} WHERE thread_id = %s AND seq < %s "
                "AND NOT (kind = ANY(%s)) AND EXISTS (SELECT FROM replaced) RETURNING 1), "
                # a saved reading holds the history before the snapshot: the next run saves another
                f"forgot AS (DELETE FROM {self.readings} WHERE thread_id = %s "
                "AND EXISTS (SELECT FROM replaced)) "
                "SELECT (SELECT count(*) FROM replaced), (SELECT count(*) FROM dropped)",
                (
                    snapshot.kind,
                    snapshot.created_at,
                    snapshot.payload,
                    thread_id,
                    upto_seq,
                    thread_id,
                    upto_seq,
                    sorted(keep_kinds),
                    thread_id,
                ),
            )
        ]
        replaced, dropped = result.rows[0]
        if replaced != 1:
            raise ValueError(f"thread {thread_id!r} has no event {upto_seq} to replace with a snapshot")
        return int(dropped)
