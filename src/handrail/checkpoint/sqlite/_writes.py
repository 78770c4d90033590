"""The SQLite saver's write path: appends, their group commit, the rows it remembers.

An append is one ``BEGIN IMMEDIATE`` transaction that reads the thread's head and
epoch, refuses a stale ``expected_seq`` (or, past event 0, another epoch: the thread
was deleted and created again) with :class:`~handrail.errors.ConflictError`, and
writes the events, the thread row, its pending reviews, its saved reading, the
append's run ``claim``/``release`` and the grants it adds (``_grants``). Appends made
at the same moment share one transaction (:meth:`_Writes._commit_together`), each
under its own savepoint. The row
this saver's own last commit left is remembered (:class:`_Known`), so the next append
of a run need not read it. Pruning a thread is here too: it is the other write to a
thread's log (deleting one, and the record it leaves, is ``_deletions``).
"""

from __future__ import annotations

import sqlite3
import threading
from typing import TYPE_CHECKING, Any

from handrail.checkpoint._grant_rows import checked_change
from handrail.checkpoint._records import conflict, damaged, encode_metadata, epoch_conflict
from handrail.checkpoint.base import Append, StoredEvent
from handrail.checkpoint.seals import head_after
from handrail.checkpoint.sqlite._connections import fetch_all
from handrail.checkpoint.sqlite._feed import _Feed, write_feed
from handrail.checkpoint.sqlite._grants import write_grants
from handrail.checkpoint.sqlite._rows import ROW_COLUMNS, STILL_AS_LEFT, _Known, _Write
from handrail.checkpoint.sqlite._schema import damaged_file, is_damage

if TYPE_CHECKING:  # asyncio loads when something runs async, not on `import handrail`
    import asyncio


class _Writes(_Feed):
    """``append``/``aappend`` and the group commit behind them; ``prune``."""

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self._group_lock = threading.Lock()
        # Appends waiting for the leader's transaction, and whether one leads. Both change
        # only under ``_group_lock``; an append's caller wakes only once its outcome
        # (``done``, ``error``) is set, and a leader that fails fails every append it
        # holds. Raced by test_appends_made_at_once_share_one_commit_and_fail_alone and
        # test_concurrent_async_appends_share_commits_and_fail_alone.
        self._group: list[_Write] = []
        self._leading = False
        self._known = _Known()  # each thread's row as this saver left it: see _Known

    def append(self, thread_id: str, change: Append) -> None:
        write = self._write_of(thread_id, change)
        released = self._forget_release(write)
        try:
            self._commit_together(write)
        except BaseException:
            self._restore_release(write, released)
            raise
        self._claimed_after(write)

    async def aappend(self, thread_id: str, change: Append) -> None:
        """Queue the append for the group commit and wait for it without a thread of its own.

        One worker thread leads while appends keep coming, so concurrent runs share
        both the transaction (one fsync) and the hop to a thread (see
        :meth:`_commit_together`).
        """
        import asyncio

        write = self._write_of(thread_id, change)
        loop = asyncio.get_running_loop()
        write.loop, write.future = loop, loop.create_future()
        released = self._forget_release(write)
        with self._group_lock:
            self._group.append(write)
            lead = not self._leading
            self._leading = True
        if lead:
            loop.run_in_executor(None, self._lead, True)
        try:
            await write.future
        except BaseException:
            self._restore_release(write, released)
            raise
        self._claimed_after(write)

    def _write_of(self, thread_id: str, change: Append) -> _Write:
        """The append as the group commit holds it: its rows made, before any transaction."""
        record, events = change.record, change.events
        write = _Write(
            thread_id=thread_id,
            event_rows=[(thread_id, e.seq, e.kind, e.created_at, e.payload) for e in events],
            expected_seq=change.expected_seq,
            record=record,
            metadata=encode_metadata(record.metadata, thread_id),
            claim=change.claim,
            release=change.release,
            durable=change.durable,
            reading=change.reading,
            notices=change.notices,
            queue=change.queue,
            grant_rows=checked_change(change.grants),  # refused before anything is written
        )
        if events:  # the head hash is the last event's: seal the rows before the transaction
            write.seal_to(head_after(events, None))
        return write

    def _forget_release(self, write: _Write) -> bool:
        """Stop renewing a run this append releases; whether it was ours to renew."""
        if write.release is None:
            return False
        with self._runs_lock:
            key = (write.thread_id, write.release)
            released = key in self._claimed
            self._claimed.discard(key)
        return released

    def _restore_release(self, write: _Write, released: bool) -> None:
        if write.release is not None and released:
            with self._runs_lock:
                self._claimed.add((write.thread_id, write.release))

    def _claimed_after(self, write: _Write) -> None:
        if write.claim is not None and write.claim != write.release:
            self._claimed_now(write.thread_id, write.claim, write.renewed)
        if write.queue:
            self._signal.notify()

    def _commit_together(self, write: _Write) -> None:
        """Commit ``write``, in one transaction with the appends of other threads waiting.

        SQLite has one writer at a time and a durable commit costs an fsync, so appends
        made at the same moment (the threads of a server, the concurrent runs of an
        event loop) share a transaction: the first caller *leads*, takes every append
        queued meanwhile and commits them together, each under its own savepoint (an
        append that conflicts is rolled back alone and raises in its own caller); then
        it hands the lead to the next caller in the queue. Alone, an append is simply
        its own transaction. :meth:`aappend` queues the same way, without a thread of
        its own: the first one starts a worker thread that leads until the queue is
        empty.
        """
        with self._group_lock:
            self._group.append(write)
            leader = not self._leading
            self._leading = True
            if not leader:
                write.turn = threading.Event()
        if write.turn is not None:
            write.turn.wait()  # done by a leader, or asked to lead
        if not write.done:
            self._lead()
        if write.error is not None:
            raise write.error

    def _lead(self, until_empty: bool = False) -> None:
        """Commit the queued appends, batch after batch, then pass the lead on or end it.

        A sync caller hands the lead to the next sync caller in the queue; appends of
        async callers have no thread waiting, so the leader goes on with them itself
        (``until_empty``: the worker thread :meth:`aappend` started always does).
        """
        while True:
            with self._group_lock:
                batch, self._group = self._group, []
            try:
                self._commit_batch(batch)  # an append's error is kept on it, for its caller
            except BaseException as exc:  # KeyboardInterrupt and the like: fail what waits
                with self._group_lock:
                    waiting, self._group = batch + self._group, []
                    self._leading = False
                    for write in waiting:
                        write.error = write.error or exc
                        write.done = True
                        if write.turn is not None:
                            write.turn.set()
                    _resolve_futures(waiting)
                raise
            with self._group_lock:
                for write in batch:
                    write.done = True
                    if write.turn is not None:
                        write.turn.set()
                _resolve_futures(batch)
                if not self._group:
                    self._leading = False
                    return
                if self._group[0].turn is not None and not until_empty:
                    self._group[0].turn.set()  # the next waiting caller leads
                    return
                # appends of async callers are next: nobody else would commit them

    def _commit_batch(self, batch: list[_Write]) -> None:
        """One transaction for ``batch``; each append's error is left on it (``write.error``)."""
        durable = any(write.durable for write in batch)
        try:
            with self._transaction(write=True, durable=durable) as conn:
                if len(batch) == 1:
                    batch[0].renewed = self._apply(conn, batch[0])
                else:
                    for write in batch:
                        conn.execute("SAVEPOINT handrail_append")
                        try:
                            write.renewed = self._apply(conn, write)
                        except Exception as exc:
                            conn.execute("ROLLBACK TO handrail_append")
                            write.error = damaged_file(exc, self.path) if is_damage(exc) else exc
                        conn.execute("RELEASE handrail_append")
        except Exception as exc:  # the transaction failed: nothing of the batch was saved
            for write in batch:
                if write.error is None:
                    write.error = exc
        for write in batch:
            if write.error is None:
                self._known.committed(write)
            else:
                self._known.forget(write.thread_id)

    def _apply(self, conn: sqlite3.Connection, write: _Write) -> tuple[str, float] | None:
        """One append inside the open write transaction (see :meth:`append`)."""
        thread_id, expected_seq, record = write.thread_id, write.expected_seq, write.record
        row = self._known.row(thread_id, expected_seq, record.epoch) if expected_seq else None
        if row is not None and not write.event_rows:
            write.seal_to(row[7])  # no events: the head hash stays the row's
        if row is None or not self._update_row(conn, write, row, True):
            found = fetch_all(
                conn, f"SELECT {ROW_COLUMNS} FROM handrail_threads WHERE thread_id = ?", (thread_id,)
            )
            row = found[0] if found else None
            if row is not None and (type(row[0]) is not int or not isinstance(row[1], str)):
                raise damaged(thread_id, "thread record", f"head {row[0]!r:.100} or epoch {row[1]!r:.100}")
            head = row[0] if row is not None else 0
            if head != expected_seq:
                raise conflict(thread_id, expected_seq, head)
            if row is not None and expected_seq > 0 and row[1] != record.epoch:
                raise epoch_conflict(thread_id)
            if not write.event_rows:
                previous = row[7] if row is not None else None
                write.seal_to(previous if isinstance(previous, bytes) else None)
            self._update_row(conn, write, row, False)
        try:
            conn.executemany(
                "INSERT INTO handrail_events (thread_id, seq, kind, created_at, payload) VALUES (?, ?, ?, "
                "?, ?)",
                write.event_rows,
            )
        except sqlite3.IntegrityError:
            raise conflict(thread_id, expected_seq, None) from None
        if row is not None and row[2]:
            conn.execute("DELETE FROM handrail_pending WHERE thread_id = ?", (thread_id,))
            conn.execute("DELETE FROM handrail_pending_tools WHERE thread_id = ?", (thread_id,))
        if write.pending_rows:
            conn.executemany(
                "INSERT INTO handrail_pending (thread_id, interrupt_id, position, kind, tools, created_at, "
                "payload, seal) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                write.pending_rows,
            )
            conn.executemany(
                "INSERT OR IGNORE INTO handrail_pending_tools (tool, created_at, thread_id, interrupt_id) "
                "VALUES (?, ?, ?, ?)",
                write.tool_rows,
            )
        renewed = self._claim(conn, thread_id, write.claim) if write.claim is not None else None
        if write.release is not None:
            conn.execute(
                "DELETE FROM handrail_runs WHERE thread_id = ? AND run_id = ?", (thread_id, write.release)
            )
        if write.notices or write.queue:
            write_feed(conn, thread_id, record.head_seq, write.notices, write.queue)
        if write.reading is not None:
            conn.execute(
                "INSERT OR REPLACE INTO handrail_readings (thread_id, seq, created_at, payload) VALUES (?, "
                "?, ?, ?)",
                (thread_id, write.reading.seq, write.reading.created_at, write.reading.payload),
            )
        if write.grant_rows:  # the grants its approval carries (an id taken: ValueError, rolled back)
            write_grants(conn, write.grant_rows)
        return renewed

    @staticmethod
    def _update_row(
        conn: sqlite3.Connection, write: _Write, row: tuple[Any, ...] | None, known: bool
    ) -> bool:
        """Write the thread's row; ``known``: only if it is still at the expected head and epoch.

        Returns whether the row was written (always, unless ``known`` and it moved).
        """
        record, thread_id = write.record, write.thread_id
        # the columns in the order of both statements below, the thread id last
        values = (
            record.head_seq,
            record.status,
            record.epoch,
            record.created_at,
            record.updated_at,
            write.metadata,
            len(record.pending),
            write.head_hash,
            write.seal,
            thread_id,
        )
        if row is None:
            conn.execute(
                "INSERT INTO handrail_threads (head_seq, status, epoch, created_at, updated_at, metadata, "
                "pending_count, head_hash, seal, thread_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                values,
            )
            return True
        # a remembered row is used only while the stored one is still exactly it: the
        # UPDATE matches nothing otherwise (rowcount 0), and the append reads the row
        where, at = (STILL_AS_LEFT, row) if known else ("", ())
        if row[1] == record.epoch and row[3:7] == (
            record.status,
            record.created_at,
            record.updated_at,
            write.metadata,
        ):
            # only the head moved (a step inside a run): leave the indexed columns alone,
            # or SQLite rewrites their index entries (two by-time indexes) all the same
            cursor = conn.execute(
                "UPDATE handrail_threads SET head_seq = ?, pending_count = ?, head_hash = ?, seal = ? "
                "WHERE thread_id = ?" + where,
                (record.head_seq, len(record.pending), write.head_hash, write.seal, thread_id, *at),
            )
        else:
            cursor = conn.execute(
                "UPDATE handrail_threads SET head_seq = ?, status = ?, epoch = ?, created_at = ?, "
                "updated_at = ?, metadata = ?, pending_count = ?, head_hash = ?, seal = ? WHERE thread_id = ?"
                + where,
                values + at,
            )
        return not known or cursor.rowcount == 1

    def prune(
        self, thread_id: str, *, upto_seq: int, snapshot: StoredEvent, keep_kinds: frozenset[str]
    ) -> int:
        if snapshot.seq != upto_seq:
            raise ValueError(f"the snapshot must take the place of event {upto_seq}")
        kinds = sorted(keep_kinds)
        kept = f" AND kind NOT IN ({', '.join('?' * len(kinds))})" if kinds else ""
        with self._transaction(write=True) as conn:
            replaced = conn.execute(
                "UPDATE handrail_events SET kind = ?, created_at = ?, payload = ? WHERE thread_id = ? AND "
                "seq = ?",
                (snapshot.kind, snapshot.created_at, snapshot.payload, thread_id, upto_seq),
            ).rowcount
            if replaced != 1:
                raise ValueError(f"thread {thread_id!r} has no event {upto_seq} to replace with a snapshot")
            dropped: int = conn.execute(
                f"DELETE FROM handrail_events WHERE thread_id = ? AND seq < ?{kept}",
                (thread_id, upto_seq, *kinds),
            ).rowcount
            # a saved reading holds the history before the snapshot: the next run saves another
            conn.execute("DELETE FROM handrail_readings WHERE thread_id = ?", (thread_id,))
        return dropped


def _resolve_futures(batch: list[_Write]) -> None:
    """Wake the async callers of a committed batch: one call into each event loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Write]] = {}
    for write in batch:
        if write.loop is not None:
            by_loop.setdefault(write.loop, []).append(write)
    for loop, writes in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle, writes)
        except RuntimeError:  # the loop was closed: nobody is waiting any more
            pass


def _settle(writes: list[_Write]) -> None:
    for write in writes:
        future = write.future
        if future is None or future.done():
            continue
        if write.error is not None:
            future.set_exception(write.error)
        else:
            future.set_result(None)
