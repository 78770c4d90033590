"""What the SQL savers (SQLite, PostgreSQL) share: checks, row decoding, migrations.

Nothing here talks to a database. Rows come in as plain values; every value read back
is checked, and a damaged one raises :class:`~handrail.errors.SerializationError`
naming the thread and the record (SPEC rule 10).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from handrail.checkpoint.base import (
    ClaimFilter,
    PendingReview,
    StoredEvent,
    ThreadRecord,
    ThreadStatus,
    metadata_matches,
)
from handrail.checkpoint.serde import compact, dumps, loads
from handrail.errors import ConflictError, SerializationError

__all__ = [
    "MAX_NAME",
    "MAX_SEQ",
    "MAX_TIME",
    "STATUSES",
    "Migration",
    "check_append",
    "check_thread_id",
    "checked_time",
    "conflict",
    "damaged",
    "decode_metadata",
    "decode_tools",
    "encode_metadata",
    "encode_owners",
    "encode_tools",
    "epoch_conflict",
    "event_from_row",
    "host_identity",
    "metadata_filter_matches",
    "owners_filter_matches",
    "pending_from_row",
    "pid_exists",
    "record_from_row",
]

STATUSES: frozenset[str] = frozenset({"idle", "running", "interrupted"})

# The ranges a value read back must lie in (SPEC rule 10): outside them it is damage.
MAX_SEQ = 2**63 - 1
"""An event number is a positive 64-bit integer."""
MAX_TIME = 253402300800.0
"""A stored time (epoch seconds) is finite and ``0 <= t < MAX_TIME`` (the year 10000)."""
MAX_NAME = 65536
"""An id (thread, interrupt, epoch, run) or a kind is a string of at most this many characters."""


@dataclass(frozen=True, slots=True)
class Migration:
    """One step of a saver's schema: applied once, in version order, in one transaction.

    ``statements`` run first, then ``run`` (if given): a Python step called with the
    migration's open connection (SQLite) or cursor, inside the same transaction, so it
    is rolled back with the migration if anything fails.
    """

    version: int
    description: str
    statements: tuple[str, ...]
    run: Callable[[Any], None] | None = None


def check_append(
    thread_id: str, events: Sequence[StoredEvent], expected_seq: int, record: ThreadRecord
) -> None:
    """Refuse a malformed append before touching the database (same rules as memory)."""
    for offset, event in enumerate(events, start=1):
        if event.seq != expected_seq + offset:
            raise ValueError(
                f"events must be numbered from {expected_seq + 1} without gaps, "
                f"got {event.seq} at position {offset}"
            )
    if record.head_seq != expected_seq + len(events):
        raise ValueError("the thread record's head_seq must be the last event's seq")
    if record.status not in STATUSES:
        raise ValueError(f"thread status must be one of {sorted(STATUSES)}, got {record.status!r}")


def check_reading(reading: StoredEvent | None, record: ThreadRecord) -> None:
    """Refuse a saved reading that is not of the new head."""
    if reading is not None and reading.seq != record.head_seq:
        raise ValueError(
            f"a saved reading must be of the new head (event {record.head_seq}), "
            f"got one of event {reading.seq}"
        )


def conflict(thread_id: str, expected_seq: int, head: int | None) -> ConflictError:
    """The error for a stale ``expected_seq`` (SPEC rule 8)."""
    found = "another writer's append" if head is None else f"event {head}"
    return ConflictError(
        f"thread {thread_id!r} moved on: expected it at event {expected_seq}, found it at {found}",
        thread_id=thread_id,
    )


def epoch_conflict(thread_id: str) -> ConflictError:
    """The error for an append to a thread deleted and created again since it was read."""
    return ConflictError(
        f"thread {thread_id!r} was deleted and started again since it was read", thread_id=thread_id
    )


def damaged(thread_id: str, what: str, reason: str, seq: int | None = None) -> SerializationError:
    """A SerializationError naming the thread and the damaged record."""
    return SerializationError(
        f"cannot load thread {thread_id!r}, {what}: {reason}", thread_id=thread_id, seq=seq
    )


# Values ---------------------------------------------------------------------------------
_NO_METADATA = b"{}"


def encode_metadata(metadata: Mapping[str, Any], thread_id: str) -> bytes:
    """The thread metadata as stored: JSON with named types, like every other record.

    In bytes of its own size: a saver may remember them for many threads.
    """
    if not metadata:
        return _NO_METADATA
    return compact(dumps(dict(metadata), where=f"the metadata of thread {thread_id!r}"))


def decode_metadata(raw: Any, thread_id: str) -> dict[str, Any]:
    """Load stored thread metadata; anything but a JSON object is damage."""
    if isinstance(raw, memoryview):
        raw = bytes(raw)
    if not isinstance(raw, (bytes, str)):
        raise damaged(thread_id, "thread record", f"metadata is a {type(raw).__name__}, not JSON")
    try:
        value = loads(raw, thread_id=thread_id)
    except SerializationError as exc:
        raise damaged(thread_id, "thread record", f"metadata: {_reason(exc)}") from None
    if not isinstance(value, dict):
        raise damaged(thread_id, "thread record", f"metadata is a {type(value).__name__}, not an object")
    return value


def encode_tools(tools: Sequence[str]) -> list[str]:
    """The tool names a pending review is about, as given (a name may repeat)."""
    return [str(tool) for tool in tools]


def decode_tools(raw: Any, thread_id: str, interrupt_id: str) -> tuple[str, ...]:
    """Tool names stored as a JSON array (SQLite) or a text array (PostgreSQL)."""
    value = raw
    if isinstance(raw, (bytes, str)):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            value = None
    if not isinstance(value, list) or not all(isinstance(tool, str) for tool in value):
        raise damaged(thread_id, f"pending review {interrupt_id!r}", "its tool list is not a list of names")
    return tuple(value)


def event_from_row(thread_id: str, seq: Any, kind: Any, created_at: Any, payload: Any) -> StoredEvent:
    """A stored event from its row, with every column checked (type and range)."""
    if isinstance(payload, memoryview):
        payload = bytes(payload)
    elif isinstance(payload, str):
        payload = payload.encode()
    if not _is_int(seq) or not 0 < seq <= MAX_SEQ:
        raise damaged(thread_id, f"record {_shown(seq)}", "the event number is not a positive 64-bit integer")
    what = f"record {seq}"
    if not isinstance(payload, bytes):
        raise damaged(thread_id, what, "the event row has a column of the wrong type", seq=seq)
    _check_name(thread_id, what, "kind", kind, seq=seq)
    return StoredEvent(
        seq=seq, kind=kind, created_at=checked_time(thread_id, what, created_at, seq=seq), payload=payload
    )


def pending_from_row(
    thread_id: str, interrupt_id: Any, kind: Any, tools: Any, created_at: Any, payload: Any
) -> PendingReview:
    """A pending review from its row, with every column checked."""
    if isinstance(payload, memoryview):
        payload = bytes(payload)
    if not isinstance(interrupt_id, str) or not 0 < len(interrupt_id) <= MAX_NAME:
        raise damaged(thread_id, "a pending review", f"its interrupt id is {_shown(interrupt_id)}")
    what = f"pending review {interrupt_id!r}"
    if not isinstance(payload, bytes):
        raise damaged(thread_id, what, "a column has the wrong type")
    _check_name(thread_id, what, "kind", kind)
    return PendingReview(
        interrupt_id=interrupt_id,
        kind=kind,
        tools=decode_tools(tools, thread_id, interrupt_id),
        created_at=checked_time(thread_id, what, created_at),
        payload=payload,
    )


def record_from_row(
    thread_id: str,
    head_seq: Any,
    status: Any,
    epoch: Any,
    created_at: Any,
    updated_at: Any,
    metadata: Any,
    pending: Sequence[PendingReview] = (),
) -> ThreadRecord:
    """A thread record from its row, with every column checked (type and range)."""
    check_thread_id(thread_id)
    if not _is_int(head_seq) or not 0 <= head_seq <= MAX_SEQ:
        raise damaged(thread_id, "thread record", f"head_seq is {_shown(head_seq)}")
    if status not in STATUSES:  # a string, and one of them
        raise damaged(thread_id, "thread record", f"unknown status {_shown(status)}")
    if not isinstance(epoch, str) or len(epoch) > MAX_NAME:
        raise damaged(thread_id, "thread record", f"its epoch is {_shown(epoch)}")
    checked: ThreadStatus = status
    return ThreadRecord(
        thread_id=thread_id,
        head_seq=head_seq,
        status=checked,
        epoch=epoch,
        created_at=checked_time(thread_id, "thread record", created_at),
        updated_at=checked_time(thread_id, "thread record", updated_at),
        metadata=decode_metadata(metadata, thread_id),
        pending=tuple(pending),
    )


def metadata_filter_matches(thread_id: Any, stored: Any, wanted: bytes) -> bool:
    """Whether stored metadata holds ``wanted`` (serialised): the InMemorySaver's rule exactly."""
    return metadata_matches(_decoded_filter(wanted), decode_metadata(stored, thread_id))


def encode_owners(owners: ClaimFilter) -> bytes:
    """An owners filter as an SQL parameter (``owners_filter_matches`` reads it back)."""
    return orjson.dumps([owners.key, list(owners.values), owners.or_missing])


def owners_filter_matches(thread_id: Any, stored: Any, wanted: bytes) -> bool:
    """Whether a thread with stored metadata passes an owners filter (``ClaimFilter.matches``)."""
    return _decoded_owners(wanted).matches(decode_metadata(stored, thread_id))


@functools.lru_cache(maxsize=64)
def _decoded_owners(wanted: bytes) -> ClaimFilter:
    key, values, or_missing = orjson.loads(wanted)
    return ClaimFilter(str(key), tuple(str(v) for v in values), bool(or_missing))


@functools.lru_cache(maxsize=64)
def _decoded_filter(wanted: bytes) -> Mapping[str, Any]:
    value = loads(wanted)
    if not isinstance(value, dict):
        raise ValueError("a metadata filter must be an object")
    return value


def check_thread_id(thread_id: Any) -> None:
    """A thread id read back from a row: a non-empty string of a sane length."""
    if not isinstance(thread_id, str) or not 0 < len(thread_id) <= MAX_NAME:
        shown = _shown(thread_id)
        raise SerializationError(
            f"cannot load thread {shown}, thread record: the thread id is not a string of 1 to "
            f"{MAX_NAME} characters",
            thread_id=shown,
        )


def checked_time(thread_id: str, what: str, value: Any, seq: int | None = None) -> float:
    """A stored time as a float, or damage: finite, ``0 <= t < MAX_TIME`` (datetime can show it)."""
    if not _is_number(value) or not 0 <= value < MAX_TIME:  # NaN fails both comparisons
        raise damaged(thread_id, what, f"a time is {_shown(value)}, not seconds since 1970", seq=seq)
    return float(value)


def _check_name(thread_id: str, what: str, column: str, value: Any, seq: int | None = None) -> None:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME:
        raise damaged(thread_id, what, f"its {column} is {_shown(value)}, not a name", seq=seq)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shown(value: Any) -> str:
    """A damaged value for a message: its repr, cut short (a damaged column may be huge)."""
    text = (
        repr(value) if not isinstance(value, (bytes, str)) or len(value) <= 80 else repr(value[:80]) + "..."
    )
    return text if len(text) <= 100 else text[:100] + "..."


def _reason(exc: SerializationError) -> str:
    text = str(exc)
    return text.split(": ", 1)[1] if ": " in text else text


# Liveness on one host -----------------------------------------------------------------
@functools.cache
def host_identity() -> str:
    """Names the pid space this process lives in: host, boot and (Linux) pid namespace.

    Two processes with the same identity can check each other's pids; processes on
    different hosts (or in different containers) cannot, and fall back to leases.
    """
    import socket  # (here: a process that never claims a run need not load it)

    parts = [socket.gethostname()]
    for path in ("/proc/sys/kernel/random/boot_id",):
        try:
            with open(path) as handle:
                parts.append(handle.read().strip())
        except OSError:
            pass
    try:
        parts.append(os.readlink("/proc/self/ns/pid"))
    except OSError:
        pass
    return "|".join(parts)


def pid_exists(pid: int) -> bool:
    """Whether a process with this pid exists (True when it cannot be known)."""
    if sys.platform == "win32" or pid <= 0:
        return True  # os.kill(pid, 0) would terminate the process on Windows
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by another user
    return True
