"""What the stores share to rebuild a thread's derived rows (``BaseCheckpointSaver.repair_thread``).

A store reads the thread's log and its rows in one write transaction, and hands them
here: :func:`plan` decides, from what the log says (:class:`~handrail.checkpoint.base.Derived`)
and what the rows hold (:class:`Found`), which record to write in their place, if any;
:func:`thread_changes` and :func:`review_changes` say what a rewrite changes, column by
column, from *images* of the rows (a dict of column values, as the store keeps them).

The rule: rows that pass every check a reader makes, with a seal, at the log's head
(the same record number and head hash) are kept as they are. Others are written anew
from the log; a thread row that passes its own checks keeps its epoch and its
``updated_at`` (which the log does not hold exactly), a damaged one gets the derived
record's (a new epoch: every process that cached the thread reads it again). A row
that passes its checks but stands *ahead* of the log, or at its head with another head
hash, says the log lost records or was rewritten: rebuilding the row from that log
would hide it, so the repair is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from handrail.checkpoint._derived import thread_from_row, with_pending
from handrail.checkpoint.base import Derived, PendingReview, ThreadRecord
from handrail.errors import SerializationError

__all__ = [
    "ORPHAN",
    "Found",
    "found_rows",
    "index_changes",
    "plan",
    "refused",
    "review_changes",
    "review_image",
    "thread_changes",
    "thread_image",
    "without_log",
]


@dataclass(frozen=True, slots=True)
class Found:
    """A thread's derived rows as a store found them: ``thread``, its row if it passed its
    checks (without its reviews); ``sealed``, whether that row has a seal; ``pending``,
    its reviews if they all passed theirs (None otherwise)."""

    thread: ThreadRecord | None
    sealed: bool
    pending: tuple[PendingReview, ...] | None


def found_rows(row: Sequence[Any] | None, reviews: Sequence[Sequence[Any]]) -> Found:
    """The rows of an SQL store as a repair finds them, each checked as a reader checks it:
    ``row`` is the thread row's columns in the order of ``_records.thread_from_row``,
    ``reviews`` its pending rows in the order of ``_records.with_pending``."""
    if row is None:
        return Found(None, False, None)
    try:
        thread = thread_from_row(row)
    except SerializationError:
        return Found(None, False, None)
    try:
        pending: tuple[PendingReview, ...] | None = with_pending(thread, row[7], reviews).pending
    except SerializationError:
        pending = None
    return Found(thread, row[9] is not None, pending)


def refused(thread_id: str, reason: str) -> SerializationError:
    """The error of a repair that must not rebuild the rows from the log."""
    return SerializationError(f"cannot repair thread {thread_id!r}: {reason}", thread_id=thread_id)


def plan(thread_id: str, derived: Derived, found: Found) -> ThreadRecord | None:
    """The record to write in place of the thread's row and pending rows, or None: keep them."""
    record = replace(derived.record, thread_id=thread_id)
    row = found.thread
    if row is None:
        return record
    if row.head_seq > record.head_seq:
        raise refused(
            thread_id,
            f"its row's head is record {row.head_seq}, but its log ends at record {record.head_seq}: "
            "records were lost from the log's end, and a row rebuilt from it would hide that",
        )
    at_head = row.head_seq == record.head_seq
    if at_head and row.head_hash is not None and row.head_hash != derived.head_hash:
        raise refused(
            thread_id,
            f"its row's head hash is not the hash its log holds after record {record.head_seq}: the "
            "log's last record was rewritten, or the row belongs to another log",
        )
    if at_head and found.sealed and row.head_hash == derived.head_hash and found.pending is not None:
        return None
    if at_head:  # the row itself is sound: its epoch and its time stay
        return replace(record, epoch=row.epoch, updated_at=row.updated_at)
    return record


def without_log(thread_id: str, found: Found) -> bool:
    """Whether a thread row that has no log is to be removed: yes when it fails its
    checks (a row whose thread id was damaged, say: its log is under the right id); no
    for an intact row at record 0 (a thread with no records yet). An intact row past
    record 0 is a thread whose log is gone: refused, the row is all that is left of it."""
    if found.thread is None:
        return True
    if found.thread.head_seq == 0:
        return False
    raise refused(
        thread_id,
        f"its row's head is record {found.thread.head_seq}, but it has no log: its records were lost "
        "(their thread ids damaged, say), and the row is all that is left of it",
    )


ORPHAN = "thread row: it fails its checks and has no log (its thread id was damaged?), removed"
"""The change a repair reports when it removes a row :func:`without_log` condemns."""


def record_image(record: Any, head_hash: Any, seal: Any) -> dict[str, Any]:
    """:func:`thread_image` of the row a :class:`ThreadRecord` makes, with its head hash and seal."""
    return thread_image(
        record.head_seq,
        record.status,
        record.epoch,
        record.created_at,
        record.updated_at,
        dict(record.metadata),
        len(record.pending),
        head_hash,
        seal,
    )


def thread_image(
    head_seq: Any,
    status: Any,
    epoch: Any,
    created_at: Any,
    updated_at: Any,
    metadata: Any,
    pending_count: Any,
    head_hash: Any,
    seal: Any,
) -> dict[str, Any]:
    """A thread row's columns, as :func:`thread_changes` compares them (``metadata``
    decoded by the caller when it can be)."""
    return {
        "head_seq": head_seq,
        "status": status,
        "epoch": epoch,
        "created_at": created_at,
        "updated_at": updated_at,
        "metadata": metadata,
        "pending_count": pending_count,
        "head_hash": head_hash,
        "seal": seal,
    }


def review_image(
    position: Any, kind: Any, tools: Any, created_at: Any, payload: Any, seal: Any
) -> dict[str, Any]:
    """A pending row's columns, as :func:`review_changes` compares them (tools as a list
    when their JSON can be read)."""
    if isinstance(tools, (bytes, str)):
        try:
            tools = orjson.loads(tools)
        except orjson.JSONDecodeError:
            pass
    elif isinstance(tools, tuple):
        tools = list(tools)
    return {
        "position": position,
        "kind": kind,
        "tools": tools,
        "created_at": created_at,
        "payload": payload,
        "seal": seal,
    }


def thread_changes(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    """What writing ``new`` in place of ``old`` changes in the thread row (None: it was missing)."""
    if old is None:
        return ["thread row: missing, written from the log"]
    return _columns("thread row", old, new)


def review_changes(old: Mapping[Any, Mapping[str, Any]], new: Mapping[Any, Mapping[str, Any]]) -> list[str]:
    """What writing the pending rows ``new`` in place of ``old`` changes (both by interrupt id)."""
    lines: list[str] = []
    for interrupt_id, columns in old.items():
        if interrupt_id not in new:
            lines.append(
                f"pending review {_shown(interrupt_id)}: removed (the log has no such review pending)"
            )
        else:
            lines += _columns(f"pending review {_shown(interrupt_id)}", columns, new[interrupt_id])
    lines += [
        f"pending review {_shown(interrupt_id)}: missing, written from the log"
        for interrupt_id in new
        if interrupt_id not in old
    ]
    return lines


def index_changes(table: str, missing: Sequence[Sequence[Any]], extra: Sequence[Sequence[Any]]) -> list[str]:
    """What rebuilding an index table (its rows as tuples) changed."""
    return [f"{table}: row {_row(row)} missing, added" for row in missing] + [
        f"{table}: row {_row(row)} not the reviews', removed" for row in extra
    ]


def _columns(what: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    changed = [name for name in new if name != "seal" and not _same(old.get(name), new[name])]
    if not changed:
        return (
            []
            if _same(old.get("seal"), new.get("seal"))
            else [f"{what}: its seal did not match it, sealed again"]
        )
    parts = ", ".join(f"{name} {_shown(old.get(name))} -> {_shown(new[name])}" for name in changed)
    return [f"{what}: {parts}"]


def _same(a: Any, b: Any) -> bool:
    """Equal values of one type (numbers of either kind compare by value; True is not 1)."""
    a, b = (bytes(v) if isinstance(v, memoryview) else v for v in (a, b))
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    return bool(a == b) and (numbers or type(a) is type(b))


def _shown(value: Any) -> str:
    if isinstance(value, memoryview):
        value = bytes(value)
    if isinstance(value, bytes):
        return value.hex()[:16] + "..." if len(value) == 32 else f"<{len(value)} bytes>"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _row(row: Sequence[Any]) -> str:
    return "(" + ", ".join(_shown(value) for value in row) + ")"
