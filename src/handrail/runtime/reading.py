"""Reading a thread: loading its log into a fold, snapshots and history.

A thread is read once per run: only the events after a recent reading kept in the
agent's cache, or else the thread's *saved reading* (the state a run's last append
keeps every ``READING_EVERY`` events) and the events after it, or, for a thread without
one, the whole log. SPEC §6: the cost of a resume does not grow with the
number of past checkpoints, in this process or in a new one.

Whichever way a thread is read to its end, its row's head must be where the log ends
(SPEC rule 10): the same record number, and the same head hash (``checkpoint/seals.py``,
rule 1) when the row has one. A log whose last records were lost (their number or thread
damaged) is refused, not loaded as it was a few records earlier (:func:`check_head`).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

from handrail.checkpoint.base import StoredEvent, ThreadRead, ThreadRecord
from handrail.checkpoint.integrity import GENESIS, ChainWalk, walk
from handrail.errors import InvalidInputError, SerializationError, stored_time
from handrail.review.response_schema import response_schema
from handrail.runtime import _rules as rules
from handrail.runtime._checkpoint_ids import checkpoint_id_of, seq_of_checkpoint
from handrail.runtime._fold import ThreadFold
from handrail.runtime._fold_codec import from_snapshot, restore_reading
from handrail.runtime._recovery import unfinished_tool_interrupts
from handrail.runtime.effects import Effect, Env, StoreCall
from handrail.runtime.events import CHECKPOINT_KINDS, Event, decode_event
from handrail.runtime.spec import AgentSpec
from handrail.types import Interrupt, RunnableConfig, StateSnapshot

__all__ = [
    "anchors_of",
    "check_head",
    "checked_log",
    "checked_read",
    "fold_events",
    "history",
    "interrupts_of",
    "load",
    "snapshot",
]

Gen = Generator[Effect, Any, Any]


def load(
    env: Env, upto_seq: int | None = None, *, trust_cache: bool = False
) -> Generator[Effect, Any, ThreadFold]:
    """Read the thread once: only the new events when a recent reading is cached.

    With ``trust_cache`` a cached reading is used without asking the store at all; the
    run's first append then checks it (its expected head and epoch), and the caller
    runs again from a fresh reading if that fails (``Env.optimistic``).
    """
    spec, thread_id = env.spec, env.thread_id
    cached = spec.cache.get(thread_id) if upto_seq is None else None
    if cached is not None and trust_cache:
        env.optimistic = True
        return cached.copy()
    if cached is not None:
        read = yield StoreCall("read", (thread_id,), {"after_seq": cached.head_seq})
        if (
            read.record is not None
            and read.record.epoch == cached.epoch
            and read.record.head_seq == cached.head_seq + len(read.events)
            and _simply_follow(read.events)
        ):
            fold = cached.copy()
            _follow_chain(fold, read.events)  # checked before anything is decoded
            for stored in read.events:
                fold.apply(decode_event(stored, thread_id))
            if read.record.head_hash is None or read.record.head_hash == fold.chain:
                return fold
            # the row is not at the head this reading reached: read the whole log, which says why
    read = None
    if upto_seq is None:
        # A new process: start from the thread's saved reading, if it has one, and fold
        # only the events after it (SPEC §6: not every past checkpoint again). A claimed
        # run takes the read its claim made, if the store made one, as a cached reading:
        # its first append checks it, and it runs again from a fresh read if refused.
        claimed = env.claimed and hasattr(env.store, "claimed_read")
        read = (yield StoreCall("claimed_read", (thread_id, env.run_id))) if claimed else None
        if read is not None:
            env.optimistic = True
        else:
            read = yield StoreCall("read", (thread_id,), {"from_reading": True})
        if read.reading is not None:
            saved = restore_reading(spec, thread_id, read.reading) if _simply_follow(read.events) else None
            if saved is not None:
                fold = saved
                _follow_chain(fold, read.events)  # checked before anything is decoded
                for stored in read.events:
                    fold.apply(decode_event(stored, thread_id))
                check_head(thread_id, read.record, fold.head_seq, fold.chain)
                fold.epoch = read.record.epoch if read.record is not None else ""
                return fold
            read = None  # a branch or a snapshot after it, or a reading without a seal: the log
    if read is None:
        read = yield StoreCall("read", (thread_id,), {"upto_seq": upto_seq})
    # read to its end, the log must end where the thread's row says; read up to a record, it is cut there
    events, walked = (
        checked_read(thread_id, read) if upto_seq is None else checked_log(thread_id, read.events)
    )
    fold = fold_events(spec, thread_id, events)
    fold.chain, fold.chain_sealed = walked.next_prev, walked.sealed
    fold.epoch = read.record.epoch if read.record is not None else ""
    return fold


def checked_log(thread_id: str, stored: list[StoredEvent]) -> tuple[list[Event], ChainWalk]:
    """A log read from its start, checked against its hash chain, then decoded (SPEC rules
    10 and 18): any damaged, copied, removed or moved record raises SerializationError
    naming the first record that does not match."""
    snapshot_at = next((i for i in range(len(stored) - 1, -1, -1) if stored[i].kind == "snapshot"), None)
    snapshot = decode_event(stored[snapshot_at], thread_id) if snapshot_at is not None else None
    walked = walk(thread_id, stored, anchors=anchors_of(thread_id, snapshot))
    if walked.broken is not None:
        raise walked.broken.error(thread_id)
    events = [
        snapshot if snapshot is not None and i == snapshot_at else decode_event(row, thread_id)
        for i, row in enumerate(stored)
    ]
    return events, walked


def checked_read(thread_id: str, read: ThreadRead) -> tuple[list[Event], ChainWalk]:
    """A thread read whole (its record and its log): the log checked as :func:`checked_log`
    checks it, and the record's head against where the log ends (:func:`check_head`)."""
    events, walked = checked_log(thread_id, read.events)
    last = read.events[-1].seq if read.events else 0
    check_head(thread_id, read.record, last, walked.next_prev if read.events else None)
    return events, walked


def check_head(thread_id: str, record: ThreadRecord | None, last: int, chain: bytes | None) -> None:
    """Refuse a thread whose row does not end where its log, read to its end, ends.

    ``last`` is the number of the log's last record (0: none), ``chain`` the value the
    chain holds after it (None: not known). The row's head must be ``last`` and, when
    the row has a head hash, ``chain`` (``checkpoint/seals.py``, rule 1).
    """
    if record is None:
        if last:
            raise SerializationError(
                f"cannot load thread {thread_id!r}, thread record: it is missing, yet the thread has "
                f"records (up to record {last})",
                thread_id=thread_id,
                seq=last,
            )
        return
    if record.head_seq != last:
        cause = (
            "records were lost from the log's end (a damaged number or thread id), or the row was damaged"
            if record.head_seq > last
            else "the log goes on past the row's head (a damaged number), or the row was damaged"
        )
        raise SerializationError(
            f"cannot load thread {thread_id!r}, thread record: its head is record {record.head_seq}, "
            f"but its log ends at record {last}: {cause}",
            thread_id=thread_id,
            seq=min(record.head_seq, last) + 1,
        )
    if record.head_hash is not None and chain is not None and record.head_hash != chain:
        raise SerializationError(
            f"cannot load thread {thread_id!r}, thread record: its head hash is not the hash its log "
            f"holds after record {last}: the row was written for another log (restored from elsewhere, "
            "or the log's last record was rewritten)",
            thread_id=thread_id,
            seq=last,
        )


def anchors_of(thread_id: str, snapshot: Event | None) -> dict[int, bytes]:
    """The hashes a pruned thread's snapshot keeps for rows whose predecessor pruning
    removed (``checkpoint/integrity.py``, rule 3)."""
    raw = snapshot.data.get("anchors") if snapshot is not None else None
    if not raw:
        return {}
    try:
        anchors = {int(seq): bytes.fromhex(digest) for seq, digest in raw.items()}
    except (AttributeError, TypeError, ValueError):
        anchors = {}
    if not anchors or any(len(digest) != len(GENESIS) for digest in anchors.values()):
        assert snapshot is not None
        raise SerializationError(
            f"cannot load thread {thread_id!r}, record {snapshot.seq}: damaged snapshot (its anchors)",
            thread_id=thread_id,
            seq=snapshot.seq,
        )
    return anchors


def _follow_chain(fold: ThreadFold, stored: list[StoredEvent]) -> None:
    """Check the records read after an earlier reading of the thread against the chain."""
    if not stored:
        return
    walked = walk(fold.thread_id, stored, prev=fold.chain, sealed=fold.chain_sealed)
    if walked.broken is not None:
        raise walked.broken.error(fold.thread_id)
    fold.chain, fold.chain_sealed = walked.next_prev, walked.sealed


def _simply_follow(events: list[StoredEvent]) -> bool:
    """Whether events can be applied to an earlier reading one by one (no ``branch`` or
    ``snapshot``, which are read against the older log)."""
    return all(e.kind not in ("branch", "snapshot") for e in events)


def fold_events(spec: AgentSpec, thread_id: str, events: list[Event]) -> ThreadFold:
    """Fold a whole log (``branch`` events refold the prefix they go back to)."""
    fold, rest = start_of(spec, thread_id, events)
    for event in rest:
        advance(spec, fold, events, event)
    return fold


def start_of(spec: AgentSpec, thread_id: str, events: list[Event]) -> tuple[ThreadFold, list[Event]]:
    """Where a reading starts: the last snapshot (if pruning left one) and the events after it."""
    last = max((i for i, e in enumerate(events) if e.kind == "snapshot"), default=None)
    if last is None:
        return ThreadFold(thread_id, spec.reducers), events
    return from_snapshot(thread_id, spec.reducers, events[last]), events[last + 1 :]


def advance(spec: AgentSpec, fold: ThreadFold, events: list[Event], event: Event) -> None:
    """Apply one event; a ``branch`` refolds the log up to the checkpoint it goes back to."""
    if event.kind != "branch":
        fold.apply(event)
        return
    target = event.data["from_seq"]
    if not isinstance(target, int) or not fold.base_seq <= target < event.seq or target == 0:
        raise SerializationError(
            f"cannot load thread {fold.thread_id!r}, record {event.seq}: branch back to {target!r}, "
            f"which is not a readable checkpoint",
            thread_id=fold.thread_id,
            seq=event.seq,
        )
    fold.adopt(fold_events(spec, fold.thread_id, [e for e in events if e.seq <= target]), event)


def interrupts_of(pending: Mapping[str, Any], spec: AgentSpec | None = None) -> tuple[Interrupt, ...]:
    """The public Interrupt objects for pending interrupt records, in the order raised; a
    per-call review's carries the schema of its answers (given the agent's ``spec``)."""
    tools = spec.tools if spec is not None else {}
    return tuple(
        Interrupt(value=r.value, id=r.id, response_schema=response_schema(r.value, tools))
        for r in pending.values()
    )


def snapshot(env: Env, checkpoint_id: str | None = None) -> Gen:
    """The thread's StateSnapshot now, or at ``checkpoint_id``."""
    if checkpoint_id is not None:
        found = []
        if seq_of_checkpoint(checkpoint_id) is not None:
            found = yield from history(env, checkpoint_id=checkpoint_id)
        if not found:
            raise InvalidInputError(f"thread {env.thread_id!r} has no checkpoint {checkpoint_id!r}")
        return found[0]
    fold = yield from load(env)
    pending = dict(fold.pending)
    if fold.started:
        alive = yield StoreCall("runs_alive", (env.thread_id,))
        recovered, _ = unfinished_tool_interrupts(env.spec, fold, alive, None)
        for event in recovered:
            event.created_at = fold.updated_at
            pending[event.data["id"]] = rules.record_of(event)
    env.spec.cache.put(fold)
    return _snapshot_of(env, fold, pending, fold.checkpoint_seq, fold.parent_checkpoint_seq)


def history(
    env: Env,
    *,
    checkpoint_id: str | None = None,
    before: str | None = None,
    limit: int | None = None,
) -> Gen:
    """Snapshots at every checkpoint, newest first (or only ``checkpoint_id``)."""
    read = yield StoreCall("read", (env.thread_id,), {})
    events, _ = checked_read(env.thread_id, read)
    wanted = seq_of_checkpoint(checkpoint_id) if checkpoint_id is not None else None
    before_seq = seq_of_checkpoint(before) if before is not None else None
    found: list[StateSnapshot] = []
    fold, rest = start_of(env.spec, env.thread_id, events)

    def capture() -> None:
        current = fold.checkpoint_seq
        if not current:
            return
        if (wanted is None or current == wanted) and (before_seq is None or current < before_seq):
            found.append(_snapshot_of(env, fold, dict(fold.pending), current, fold.parent_checkpoint_seq))

    for event in rest:
        if event.kind in CHECKPOINT_KINDS:
            capture()
        advance(env.spec, fold, events, event)
    capture()
    found.reverse()
    return found[:limit] if limit is not None else found


_SOURCES = {"input": "input", "step": "loop", "update": "update", "branch": "fork", "snapshot": "prune"}


def _snapshot_of(
    env: Env, fold: ThreadFold, pending: Mapping[str, Any], seq: int, parent: int | None
) -> StateSnapshot:
    thread_id = env.thread_id
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    if seq:
        config["configurable"]["checkpoint_id"] = checkpoint_id_of(seq)
    parent_config: RunnableConfig | None = (
        {"configurable": {"thread_id": thread_id, "checkpoint_id": checkpoint_id_of(parent)}}
        if parent
        else None
    )
    source = _SOURCES.get(fold.checkpoint_kind, "")
    metadata: dict[str, Any] = {
        "source": source,
        "step": fold.checkpoint_count - 1,
        "thread_id": thread_id,
        **({"writes": fold.checkpoint_writes} if fold.checkpoint_writes is not None else {}),
    }
    if fold.metadata:
        metadata["thread_metadata"] = dict(fold.metadata)
    return StateSnapshot(
        values=fold.public_values(),
        next=fold.next,
        config=config,
        metadata=metadata,
        created_at=stored_time(fold.checkpoint_at, thread_id, f"record {seq}", seq).isoformat()
        if seq
        else None,
        parent_config=parent_config,
        interrupts=interrupts_of(pending, env.spec),
    )
