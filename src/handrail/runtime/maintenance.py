"""Looking after a thread's log: the audit trail, and pruning old checkpoints.

The audit trail is the log itself (DESIGN: never a second bookkeeping that can
disagree): every review request, every answer with who gave it and when, every tool
call that started - with the arguments that actually ran - and its result. A deleted
thread has no log left; the record its deletion left in the store (who, when, the head
hash of the log) is its entry in the audit across threads.

Pruning keeps a thread's current state and its whole audit trail and drops the old
checkpoints: the events that only served time travel are deleted, and the oldest
checkpoint kept becomes a ``snapshot`` event holding the state at that point.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import replace
from typing import Any

from handrail.checkpoint.base import DeletionRecord, ThreadFilter, ThreadRead
from handrail.checkpoint.integrity import GENESIS, head_mismatch, is_sealed
from handrail.errors import InvalidInputError, SerializationError, short_repr, stored_time
from handrail.runtime._audit import TrailReader
from handrail.runtime._fold_codec import to_snapshot
from handrail.runtime.effects import Effect, Env, StoreCall
from handrail.runtime.events import AUDIT_KINDS, CHECKPOINT_KINDS, Event, encode_event
from handrail.runtime.reading import anchors_of, checked_log, checked_read, fold_events, start_of
from handrail.types import AuditEntry, AuditVerification

__all__ = ["audit_across", "audit_trail", "deletion_entry", "prune", "verification_of", "verify_audit"]

Gen = Generator[Effect, Any, Any]


def prune(env: Env, keep_last: int) -> Gen:
    """Keep the newest ``keep_last`` checkpoints; return how many events were dropped."""
    if not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 1:
        raise InvalidInputError(f"keep_last must be a positive integer, got {keep_last!r}")
    read = yield StoreCall("read", (env.thread_id,), {})
    events, walked = checked_read(env.thread_id, read)
    start, rest = start_of(env.spec, env.thread_id, events)
    checkpoints = ([start.base_seq] if start.base_seq else []) + [
        e.seq for e in rest if e.kind in CHECKPOINT_KINDS
    ]
    if len(checkpoints) <= keep_last:
        return 0
    cut = checkpoints[-keep_last]
    # A kept branch must still find the checkpoint it went back to.
    for event in reversed(events):
        if event.kind == "branch" and event.seq > cut and event.data["from_seq"] < cut:
            cut = event.data["from_seq"]
    if cut <= start.base_seq:
        return 0
    past = fold_events(env.spec, env.thread_id, [e for e in events if e.seq <= cut])
    at_cut = next(e for e in events if e.seq == cut)
    kept = [e.seq for e in events if e.seq > cut or (e.seq < cut and e.kind in AUDIT_KINDS)]
    anchors, before = _anchors_after_pruning(
        [e.seq for e in events],
        kept,
        cut,
        walked.hashes,
        anchors_of(env.thread_id, next((e for e in reversed(events) if e.kind == "snapshot"), None)),
    )
    data = {"state": to_snapshot(past), "anchors": {str(seq): h.hex() for seq, h in anchors.items()}}
    snapshot = Event("snapshot", data, seq=cut, created_at=at_cut.created_at)
    stored, _ = encode_event(snapshot, env.thread_id, before)
    dropped: int = yield StoreCall(
        "prune", (env.thread_id,), {"upto_seq": cut, "snapshot": stored, "keep_kinds": AUDIT_KINDS}
    )
    env.spec.cache.drop(env.thread_id)
    return dropped


def _anchors_after_pruning(
    present: list[int], kept: list[int], cut: int, hashes: dict[int, bytes], old: dict[int, bytes]
) -> tuple[dict[int, bytes], bytes]:
    """The anchors a prune's snapshot keeps, and the hash the snapshot itself chains to.

    Each row kept whose predecessor changes (dropped, or replaced by the snapshot) keeps
    the hash it was chained to (``checkpoint/integrity.py``, rule 3), as does the row
    after the snapshot, even one appended after this read.
    """
    chained: dict[int, bytes] = {}  # the hash each row was chained to
    prev = GENESIS
    for seq in present:
        chained[seq] = old.get(seq, prev)
        prev = hashes[seq]
    anchors: dict[int, bytes] = {cut + 1: old.get(cut + 1, hashes[cut])}
    before = GENESIS  # what the snapshot chains to: the row kept before it
    last: int | None = None
    for seq in sorted({*kept, cut}):
        if seq == cut:
            before = hashes[last] if last is not None else GENESIS
        elif seq not in anchors:
            now = GENESIS if last is None else (None if last == cut else hashes[last])
            if now != chained[seq]:
                anchors[seq] = chained[seq]
        last = seq
    return anchors, before


def audit_trail(env: Env) -> Gen:
    """The thread's review requests, answers and tool runs, oldest first."""
    read = yield StoreCall("read", (env.thread_id,), {})
    events, _ = checked_read(env.thread_id, read)
    try:
        reader = TrailReader(env.thread_id, events)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise _damaged(env.thread_id, None, exc) from None
    entries: list[AuditEntry] = []
    for event in events:
        if event.kind in AUDIT_KINDS:
            try:
                entries.extend(reader.entries(event))
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                raise _damaged(env.thread_id, event, exc) from None
    return entries


def audit_across(
    env: Env, threads: ThreadFilter, since: float | None, until: float | None, limit: int
) -> Gen:
    """The audit trails of the threads ``threads`` names, merged oldest first.

    Each thread updated since ``since`` is read whole (its log is its trail); the
    entries between ``since`` and ``until`` are kept, at most ``limit`` of them, the
    oldest. Pages of threads come newest update first: a thread updated while the pages
    are read moves to a page already read, and is read again rather than missed. The
    records of threads deleted between ``since`` and ``until`` (whose metadata passes the
    same filters) come in among them, one ``thread_deleted`` entry each.
    """
    seen: set[str] = set()
    entries: list[AuditEntry] = []
    page = replace(threads, updated_after=since, updated_before=None, limit=200, offset=0)
    while True:
        records = yield StoreCall("list_threads", (page,), {})
        for record in records:
            if record.thread_id in seen:
                continue
            seen.add(record.thread_id)
            trail = yield from audit_trail(Env(env.spec, env.store, record.thread_id))
            entries += [
                entry
                for entry in trail
                if (since is None or entry.at.timestamp() >= since)
                and (until is None or entry.at.timestamp() <= until)
            ]
        if len(records) < page.limit:
            break
        page = replace(page, offset=page.offset + page.limit)
    # at most ``limit`` deletions can be among the ``limit`` oldest entries: the oldest ones
    deletions = yield StoreCall(
        "list_deletions",
        (),
        {
            "since": since,
            "until": until,
            "owners": threads.owners,
            "metadata": threads.metadata,
            "limit": limit,
        },
    )
    entries += [deletion_entry(record) for record in deletions]
    entries.sort(key=lambda entry: (entry.at, entry.thread_id, entry.seq))
    return entries[:limit]


def deletion_entry(record: DeletionRecord) -> AuditEntry:
    """The audit entry of a thread's deletion: who, when, and the head of the deleted log."""
    return AuditEntry(
        thread_id=record.thread_id,
        seq=record.head_seq,
        at=stored_time(record.deleted_at, record.thread_id, "deletion record"),
        event="thread_deleted",
        by=record.by,
        value={"head_seq": record.head_seq, "head_hash": record.head_hash, "metadata": dict(record.metadata)},
    )


def _damaged(thread_id: str, event: Event | None, exc: Exception) -> SerializationError:
    where = f"record {event.seq}: damaged {event.kind} event" if event is not None else "damaged log"
    return SerializationError(
        f"cannot load thread {thread_id!r}, {where} ({type(exc).__name__}: {short_repr(str(exc), 200)})",
        thread_id=thread_id,
        seq=event.seq if event is not None else None,
    )


def verify_audit(env: Env, expect_head: str | None = None) -> Gen:
    """Check the thread's whole log against its hash chain (SPEC rule 18) and, given
    ``expect_head`` (a head hash as ``read_head`` gives it), that the log ends there."""
    try:
        read = yield StoreCall("read", (env.thread_id,), {})
    except SerializationError as exc:  # the store itself found a damaged row
        report = _broken(env.thread_id, exc, records=0, head=0, unsealed=0)
        return replace(report, expected_head=expect_head)
    return verification_of(env.thread_id, read, expect_head=expect_head)


def _broken(
    thread_id: str, exc: SerializationError, *, records: int, head: int, unsealed: int
) -> AuditVerification:
    reason = str(exc).split(": ", 1)[1] if ": " in str(exc) else str(exc)
    return AuditVerification(
        thread_id, False, records, head, exc.seq if exc.seq is not None else 0, reason, unsealed
    )


def verification_of(thread_id: str, read: ThreadRead, *, expect_head: str | None = None) -> AuditVerification:
    """What checking a log read whole finds: its first record that does not match, if any,
    and, given ``expect_head``, whether the log still ends at that head hash.

    A thread the store does not have is not ``ok``: there is nothing to vouch for.
    """
    head = read.record.head_seq if read.record is not None else 0
    unsealed = sum(1 for row in read.events if not is_sealed(row.payload))
    found = AuditVerification(thread_id, True, len(read.events), head, unsealed=unsealed)
    if read.record is None and not read.events:
        reason = "the store has no such thread"
        if expect_head is not None:
            reason += f" (it was expected to end at head {expect_head})"
        return AuditVerification(thread_id, False, 0, 0, reason=reason, expected_head=expect_head)
    try:
        _, walked = checked_log(thread_id, read.events)
    except SerializationError as exc:
        report = _broken(thread_id, exc, records=len(read.events), head=head, unsealed=unsealed)
        return replace(report, expected_head=expect_head)
    last = read.events[-1].seq if read.events else 0
    head_hash = walked.hashes[last].hex() if read.events else None
    if last != head:
        reason = f"the thread's head is record {head}, but its log ends at record {last}"
        return AuditVerification(
            thread_id, False, len(read.events), head, min(last, head) + 1, reason, unsealed, None, expect_head
        )
    row_hash = read.record.head_hash if read.record is not None else None
    if read.events and row_hash is not None and row_hash != walked.next_prev:
        reason = (
            f"the thread's row holds head hash {row_hash.hex()}, but its log holds "
            f"{walked.next_prev.hex()} after record {last}: the row was written for another log"
        )
        return AuditVerification(
            thread_id, False, len(read.events), head, last, reason, unsealed, None, expect_head
        )
    found = replace(found, head_hash=head_hash, expected_head=expect_head)
    if expect_head is not None:
        mismatch = head_mismatch(expect_head, walked.hashes)
        if mismatch is not None:
            return replace(found, ok=False, first_bad=mismatch.seq, reason=mismatch.reason)
    return found
