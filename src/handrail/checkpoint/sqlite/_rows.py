"""The rows an SQLite append writes besides the events, sealed, and the rows a saver remembers.

An append writes the thread's row, one row per pending review and one per tool each
review is about; the first two carry a seal chained to the thread's head hash
(``checkpoint/seals.py``). :class:`_Write` is one append, with those rows made before
its transaction when it appends events (the head hash is then its last event's), or in
it when it appends none (the head hash stays the row's). :class:`_Known` remembers
each thread's row as this saver's own last append left it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from handrail.checkpoint._records import encode_tools
from handrail.checkpoint.base import Notice, StoredEvent, ThreadRecord
from handrail.checkpoint.seals import record_digest, review_seals, thread_seal

if TYPE_CHECKING:  # asyncio loads when something runs async, not on `import handrail`
    import asyncio

__all__ = ["ROW_COLUMNS", "STILL_AS_LEFT", "_Known", "_Write", "pending_rows"]

ROW_COLUMNS = "head_seq, epoch, pending_count, status, created_at, updated_at, metadata, head_hash, seal"
"""A thread row's columns as an append reads them (and ``_Known`` keeps them), in order."""


@dataclass(slots=True, eq=False)
class _Write:
    """One append waiting for its group's transaction (see ``_Writes._commit_together``)."""

    thread_id: str
    event_rows: list[tuple[Any, ...]]
    expected_seq: int
    record: ThreadRecord
    metadata: bytes
    claim: str | None
    release: str | None
    durable: bool
    reading: StoredEvent | None = None
    notices: Sequence[Notice] = ()
    queue: bool = False
    grant_rows: list[tuple[Any, ...]] = field(default_factory=list)  # grants it adds (``_grants``)
    turn: threading.Event | None = None  # made only for a caller that waits for a leader
    loop: asyncio.AbstractEventLoop | None = None  # an async caller waits on ``future`` instead
    future: asyncio.Future[None] | None = None
    done: bool = False
    error: BaseException | None = None
    renewed: tuple[str, float] | None = None
    # the rows besides the events, sealed to ``head_hash`` (see ``seal``)
    sealed: bool = False
    head_hash: bytes | None = None
    seal: bytes = b""
    pending_rows: list[tuple[Any, ...]] = field(default_factory=list)
    tool_rows: list[tuple[Any, ...]] = field(default_factory=list)

    def seal_to(self, head_hash: bytes | None) -> None:
        """Make the thread's row seal and its pending rows for the head hash ``head_hash``."""
        if self.sealed and self.head_hash == head_hash:
            return
        record = self.record
        self.head_hash, self.sealed = head_hash, True
        self.seal = thread_seal(record_digest(record, head_hash, self.thread_id), self.metadata)
        self.pending_rows, self.tool_rows = pending_rows(self.thread_id, record, head_hash)


def pending_rows(
    thread_id: str, record: ThreadRecord, head_hash: bytes | None
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The pending rows of ``record`` for ``thread_id`` (sealed to ``head_hash``) and the
    tool index's rows."""
    rows: list[tuple[Any, ...]] = []
    tools: list[tuple[Any, ...]] = []
    seals = review_seals(record, head_hash, thread_id) if record.pending else ()
    for position, (review, seal) in enumerate(zip(record.pending, seals, strict=True)):
        names = encode_tools(review.tools)
        rows.append(
            (
                thread_id,
                review.interrupt_id,
                position,
                review.kind,
                orjson.dumps(names),
                review.created_at,
                review.payload,
                seal,
            )
        )
        tools += [(name, review.created_at, thread_id, review.interrupt_id) for name in dict.fromkeys(names)]
    return rows, tools


STILL_AS_LEFT = (
    " AND head_seq = ? AND epoch = ? AND pending_count = ? AND status = ? AND created_at = ? "
    "AND updated_at = ? AND metadata = ? AND head_hash IS ? AND seal = ?"
)
"""Every column of a remembered row (``_Known``), in its order (:data:`ROW_COLUMNS`)."""


class _Known:
    """Each thread's row as this saver's own last committed append left it.

    An append at that head and epoch takes the row from here instead of reading it
    (one statement less for every append of a run).

    What keeps it safe: the append's ``UPDATE`` carries every remembered column in its
    ``WHERE`` clause (:data:`STILL_AS_LEFT`), inside the append's write transaction. A
    row another writer changed meanwhile - moved on, deleted, deleted and created again,
    even with the same head and epoch - is not touched (rowcount 0); the append then
    reads the row and goes on, or fails, exactly as it would have without it. A failed
    append forgets the thread; nothing is remembered before its commit. Raced by
    ``test_a_row_another_writer_changed_since_is_read_and_the_append_refused`` (each
    change, one at a time) and ``test_savers_racing_on_one_thread_keep_one_log`` (two
    savers and four Python threads on one thread).
    """

    __slots__ = ("rows",)
    LIMIT = 4096  # threads remembered; an older one is just read again

    def __init__(self) -> None:
        self.rows: dict[str, tuple[Any, ...]] = {}

    def row(self, thread_id: str, expected_seq: int, epoch: str) -> tuple[Any, ...] | None:
        """The row (as ``_apply`` selects it) if this saver left it at ``expected_seq``."""
        known = self.rows.get(thread_id)
        return known if known is not None and known[0] == expected_seq and known[1] == epoch else None

    def committed(self, write: _Write) -> None:
        """Remember the row ``write`` left (after its commit)."""
        record, rows = write.record, self.rows
        rows.pop(write.thread_id, None)  # re-insert: the dict's order is the order of use
        rows[write.thread_id] = (
            record.head_seq,
            record.epoch,
            len(record.pending),
            record.status,
            record.created_at,
            record.updated_at,
            write.metadata,
            write.head_hash,
            write.seal,
        )
        if len(rows) > self.LIMIT:
            rows.pop(next(iter(rows)), None)

    def forget(self, thread_id: str) -> None:
        """Read the thread's row at its next append."""
        self.rows.pop(thread_id, None)
