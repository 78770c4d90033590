"""The SQLite saver's feed of notices and its queue of runs (the review service's).

The feed is ``handrail_feed``: one row per notice, written in the append's own
transaction, numbered by an ``AUTOINCREMENT`` key. SQLite has one writer at a time and
a row's number is taken inside its writer's transaction, so numbers are in commit order
and are never reused (trimming old rows leaves the counter where it was): a reader that
goes on from the last number it saw misses nothing and sees nothing twice.

The queue is rows of ``handrail_runs`` with the run id ``queued`` and no owner: a thread
with answers that nobody runs yet. Such a row, like the row of a run whose owner died,
is *not alive* (``_runs``), so any claim on the thread - an append of a run that acts,
or :meth:`_Feed.claim_queued` - drops it. ``claim_queued`` runs in one ``BEGIN
IMMEDIATE`` transaction: it holds the write lock while it picks a thread with a queued
or dead row and no live one, drops those rows and claims its run, so two callers (two
processes on one file) never take the same thread.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from handrail.checkpoint._records import MAX_NAME, MAX_TIME, decode_metadata
from handrail.checkpoint._signal import QueueSignal
from handrail.checkpoint.base import NOTICE_KINDS, QUEUED_RUN, ClaimFilter, FeedEntry, Notice, feed_position
from handrail.checkpoint.sqlite._connections import fetch_all
from handrail.checkpoint.sqlite._runs import _Runs, check_run_row
from handrail.errors import SerializationError

_QUEUE_SQL = (
    "INSERT OR IGNORE INTO handrail_runs (thread_id, run_id, owner_id, claimed_at) VALUES (?, ?, '', ?)"
)
_NOTICE_SQL = "INSERT INTO handrail_feed (thread_id, seq, kind, created_at, data) VALUES (?, ?, ?, ?, ?)"
# Threads with a row that is not a live claim: queued ('' owner) or of a dead owner.
_CANDIDATES_SQL = (
    "SELECT r.thread_id, r.run_id, o.pid, o.host, o.expires_at, t.metadata FROM handrail_runs AS r "
    "JOIN handrail_threads AS t ON t.thread_id = r.thread_id "
    "LEFT JOIN handrail_run_owners AS o ON o.owner_id = r.owner_id ORDER BY r.claimed_at, r.thread_id"
)


def write_feed(
    conn: sqlite3.Connection, thread_id: str, head: int, notices: Sequence[Notice], queue: bool
) -> None:
    """An append's notices and queued row, in its open write transaction."""
    now = time.time()
    if queue:
        conn.execute(_QUEUE_SQL, (thread_id, QUEUED_RUN, now))
    if notices:
        conn.executemany(_NOTICE_SQL, [(thread_id, head, n.kind, now, n.data) for n in notices])


class _Feed(_Runs):
    """``read_feed``, ``feed_end``, ``trim_feed``, ``claim_queued`` and ``wait_queued``.

    Other processes on the file cannot wake this one: ``wait_queued`` wakes for the
    threads this saver queued, and workers poll for the rest.
    """

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self._signal = QueueSignal()

    def wait_queued(self, timeout: float) -> None:
        self._signal.wait(timeout)

    async def await_queued(self, timeout: float) -> None:
        await self._signal.await_(timeout)

    def read_feed(self, after: str | None = None, *, limit: int = 500) -> list[FeedEntry]:
        start = feed_position(after)
        with self._transaction(write=False) as conn:
            rows = fetch_all(
                conn,
                "SELECT id, thread_id, seq, kind, created_at, data FROM handrail_feed WHERE id > ? "
                "ORDER BY id LIMIT ?",
                (start, max(int(limit), 0)),
            )
        return [_entry(row) for row in rows]

    def feed_end(self) -> str | None:
        with self._transaction(write=False) as conn:
            (row,) = fetch_all(conn, "SELECT MAX(id) FROM handrail_feed")
        return None if row[0] is None else str(row[0])

    def trim_feed(self, before: float) -> int:
        with self._transaction(write=True) as conn:
            return int(conn.execute("DELETE FROM handrail_feed WHERE created_at < ?", (before,)).rowcount)

    def claim_queued(
        self, run_id: str, *, filter: ClaimFilter | None = None, thread_id: str | None = None
    ) -> str | None:
        if run_id == QUEUED_RUN:
            raise ValueError(f"{QUEUED_RUN!r} names a thread's queued row, not a run")
        now = time.time()
        chosen: str | None = None
        with self._transaction(write=True) as conn:
            rows = fetch_all(conn, _CANDIDATES_SQL)
            for row in rows:
                check_run_row(*row[:5])
            busy = {row[0] for row in rows if row[1] != QUEUED_RUN and self._owner_alive(now, *row[2:5])}
            for thread, _run, *_owner, metadata in rows:
                if thread in busy or (thread_id is not None and thread != thread_id):
                    continue
                if filter is not None and not filter.matches(decode_metadata(metadata, thread)):
                    continue
                chosen = thread
                break
            if chosen is None:
                return None
            # every row left on the thread is queued or dead: the claim takes their place
            conn.execute("DELETE FROM handrail_runs WHERE thread_id = ?", (chosen,))
            renewed = self._claim(conn, chosen, run_id)
        self._claimed_now(chosen, run_id, renewed)
        return chosen


def _entry(row: Sequence[Any]) -> FeedEntry:
    """A feed row, checked: anything out of range is damage (SPEC rule 10)."""
    number, thread_id, seq, kind, created_at, data = row
    if not isinstance(thread_id, str) or not 0 < len(thread_id) <= MAX_NAME:
        raise SerializationError(f"the feed's notice {number} names no thread ({thread_id!r:.100})")
    if (
        type(seq) is not int
        or seq < 0
        or kind not in NOTICE_KINDS
        or type(created_at) not in (int, float)
        or not 0 <= created_at < MAX_TIME
        or not isinstance(data, bytes)
    ):
        raise SerializationError(
            f"the feed's notice {number} of thread {thread_id!r} is damaged (its seq, kind, time or data "
            "is out of range)",
            thread_id=thread_id,
        )
    return FeedEntry(str(number), thread_id, seq, kind, float(created_at), data)
