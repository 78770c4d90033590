"""What a store keeps and gives back: the records of the store protocol.

Per thread, a store keeps a log of :class:`StoredEvent` (serialised events, numbered 1,
2, 3, ...) and one small :class:`ThreadRecord` (head, status, epoch, times, metadata,
the :class:`PendingReview` list), written in the same transaction as the events
(:class:`ThreadRead` is both, read at one instant); an append hands them over as one
:class:`Append`. Across threads it gives the inbox's
:class:`PendingItem` and the feed's :class:`FeedEntry` (each written as a
:class:`Notice` with an append); a deletion leaves a :class:`DeletionRecord`. A repair
derives the rows from the log (:class:`Derived`). The protocol that takes and gives them
is :class:`~handrail.checkpoint.base.BaseCheckpointSaver`, which re-exports them all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, get_args

from handrail.checkpoint.filters import ThreadStatus
from handrail.checkpoint.grants import GrantChange

__all__ = [
    "NOTICE_KINDS",
    "QUEUED_RUN",
    "STATUSES",
    "Append",
    "DeletionRecord",
    "Derived",
    "FeedEntry",
    "Notice",
    "PendingItem",
    "PendingReview",
    "StoredEvent",
    "ThreadRead",
    "ThreadRecord",
]


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One serialised event: its number, kind, time (epoch seconds) and JSON payload."""

    seq: int
    kind: str
    created_at: float
    payload: bytes


@dataclass(frozen=True, slots=True)
class PendingReview:
    """A pending interrupt as the inbox sees it, without reading the thread's log."""

    interrupt_id: str
    kind: str
    tools: tuple[str, ...]
    created_at: float
    payload: bytes


@dataclass(frozen=True, slots=True)
class ThreadRecord:
    """The small per-thread row written with every append.

    ``epoch`` is chosen when the thread is created; a thread deleted and created again
    gets a new one, so cached readings of the old thread are never mistaken for it.
    ``head_hash`` is set by the store on the records it reads back: the value the
    thread's hash chain held after its head when the row was written (``seals.py``,
    rule 1; None for a row written before rows were sealed, or a log without seals).
    A reader of the log checks it against the log. An append ignores it: the store
    takes the head hash from the events it appends. It takes no part in comparisons.
    """

    thread_id: str
    head_seq: int
    status: ThreadStatus
    epoch: str
    created_at: float
    updated_at: float
    metadata: Mapping[str, Any] = field(default_factory=dict)
    pending: tuple[PendingReview, ...] = ()
    head_hash: bytes | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class ThreadRead:
    """What a store's ``read`` returns: the record and the events asked for.

    With ``read(..., from_reading=True)``, ``reading`` is the thread's saved reading (an
    opaque payload of the state at event ``reading.seq``) when it has one, and
    ``events`` are only those after it.
    """

    record: ThreadRecord | None
    events: list[StoredEvent]
    reading: StoredEvent | None = None  # with ``from_reading``: the saved reading the events follow


STATUSES: frozenset[str] = frozenset(get_args(ThreadStatus))
"""The statuses a thread record may have."""


NOTICE_KINDS = frozenset(
    {"review.requested", "review.approved", "review.decided", "review.expired", "run.finished"}
)
"""The kinds of the feed's notices; a stored notice of any other kind is damage."""


@dataclass(frozen=True, slots=True)
class Notice:
    """A row for the store's feed, written with an append: what readers are told.

    ``kind`` is one of :data:`NOTICE_KINDS`;
    ``data`` is its JSON (handrail's serialisation), packed as event payloads are
    (compressed when large: ``runtime.events.decode_notice`` reads it), kept by the store
    as it is.
    """

    kind: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Append:
    """One append to a thread: what a store's ``append(thread_id, change)`` saves, atomically.

    Built once per append by the runtime's write path, so it only checks what no store
    could accept anyway (``ValueError`` on construction, the same for every store): the
    events numbered on from ``expected_seq`` without gaps, ``record.head_seq`` the last
    of them, ``record.status`` one of :data:`STATUSES`, and ``reading`` (if any) of the
    new head. Whether the thread is still at ``expected_seq`` is the store's to check.

    ``events``
        The events to add, numbered ``expected_seq + 1 ...`` (none: only replace the record).
    ``expected_seq``
        The head the writer read. If the thread's head is not ``expected_seq``, or (for
        ``expected_seq > 0``) its stored epoch is not ``record.epoch``, another writer got
        there first: the store raises :class:`~handrail.errors.ConflictError` and saves
        nothing (SPEC rule 8).
    ``record``
        The thread record, in place of the thread's previous one.
    ``claim``, ``release``
        A run id to mark alive or finished, as ``claim_run``/``release_run`` do, in the
        same transaction: a run's liveness costs no commit of its own. Any claim of a
        run on the thread takes it off the queue.
    ``durable``
        False: the append must still be committed - visible to every reader and kept if
        the *process* dies - but the store need not wait for it to reach the disk (no
        fsync); the next durable append makes it durable too, since a store's log is
        written in order. A store without such a mode ignores it. The runtime asks for a
        durable append before a tool may act and at the end of a run (``runtime/commit.py``).
    ``reading``
        The whole state at the new head (an opaque payload, ``reading.seq`` = the new
        head): kept in place of the thread's previous saved reading, in the same
        transaction.
    ``notices``
        Rows of the store's feed (``read_feed``), written in the same transaction.
    ``queue``
        Leave the thread queued for ``claim_queued``: an answer was recorded and nobody
        runs it yet.
    ``grants``
        Grants born with these events (``checkpoint/grants.py``), added in the same
        transaction.
    """

    events: Sequence[StoredEvent]
    expected_seq: int
    record: ThreadRecord
    claim: str | None = None
    release: str | None = None
    durable: bool = True
    reading: StoredEvent | None = None
    notices: Sequence[Notice] = ()
    queue: bool = False
    grants: GrantChange | None = None

    def __post_init__(self) -> None:
        expected, record = self.expected_seq, self.record
        for offset, event in enumerate(self.events, start=1):
            if event.seq != expected + offset:
                raise ValueError(
                    f"events must be numbered from {expected + 1} without gaps, "
                    f"got {event.seq} at position {offset}"
                )
        if record.head_seq != expected + len(self.events):
            raise ValueError("the thread record's head_seq must be the last event's seq")
        if record.status not in STATUSES:
            raise ValueError(f"thread status must be one of {sorted(STATUSES)}, got {record.status!r}")
        reading = self.reading
        if reading is not None and reading.seq != record.head_seq:
            raise ValueError(
                f"a saved reading must be of the new head (event {record.head_seq}), "
                f"got one of event {reading.seq}"
            )


@dataclass(frozen=True, slots=True)
class FeedEntry:
    """A notice as the feed gives it back: where it is in the feed, and for which event.

    ``cursor`` is its place: a decimal number, rising in commit order and never given
    twice (:func:`~handrail.checkpoint.base.feed_position`); ``read_feed(after=cursor)`` continues after it.
    ``seq`` is the thread's head after the append that wrote the notice.
    """

    cursor: str
    thread_id: str
    seq: int
    kind: str
    created_at: float
    data: bytes


@dataclass(frozen=True, slots=True)
class DeletionRecord:
    """What deleting a thread leaves behind (SPEC rule 21): the only trace of its log.

    ``deleted_at`` is when (the saver's clock, epoch seconds to the microsecond, the
    precision of the audit's times); ``by`` who deleted it, a JSON value such as
    ``{"id": "ann", "roles": [...]}`` (None when nobody was named); ``head_seq`` the
    number of the log's last record (0 for an empty log) and ``head_hash`` the hash
    sealed into it (64 hex digits, as :attr:`~handrail.types.AuditVerification.head_hash`
    gives it; None when that record carries no seal, or the log was empty); ``metadata``
    the thread's, as it was. A thread deleted, made again and deleted again leaves one
    record each time.
    """

    thread_id: str
    deleted_at: float
    by: Any
    head_seq: int
    head_hash: str | None
    metadata: Mapping[str, Any] = field(default_factory=dict)


class Derived(NamedTuple):
    """What a thread's log says its derived rows must be (a store's ``repair_thread``).

    ``record`` is the thread row the runtime would write at the log's head (a new epoch,
    and the last record's time as ``updated_at``: a store keeps its row's own when that
    row is intact); ``head_hash`` the value the chain holds after the head
    (``seals.py``, rule 1).
    """

    record: ThreadRecord
    head_hash: bytes | None


QUEUED_RUN = "queued"
"""The run id of a thread's queued row: no run of its own is ever named so (theirs start ``run-``)."""


@dataclass(frozen=True, slots=True)
class PendingItem:
    """One entry of the inbox: a pending review and the thread it belongs to."""

    thread_id: str
    review: PendingReview
    metadata: Mapping[str, Any]
