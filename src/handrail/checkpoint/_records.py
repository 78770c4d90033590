"""What the SQL savers (SQLite, PostgreSQL) share: checks, row decoding, migrations.

Nothing here talks to a database. Rows come in as plain values; every value read back
is checked, and a damaged one raises :class:`~handrail.errors.SerializationError`
naming the thread and the record (SPEC rule 10).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from handrail.checkpoint.base import (
    ClaimFilter,
    DeletionRecord,
    StoredEvent,
    metadata_matches,
)
from handrail.checkpoint.seals import MISMATCH, checked_hash, deletion_seal
from handrail.checkpoint.serde import compact, dumps, loads
from handrail.checkpoint.stored import STATUSES
from handrail.errors import ConflictError, SerializationError

__all__ = [
    "MAX_NAME",
    "MAX_SEQ",
    "MAX_TIME",
    "STATUSES",
    "Migration",
    "check_name",
    "check_thread_id",
    "checked_time",
    "column_bytes",
    "conflict",
    "damaged",
    "decode_metadata",
    "decode_tools",
    "deletion_from_row",
    "deletion_passes",
    "deletion_time",
    "encode_by",
    "encode_metadata",
    "encode_owners",
    "encode_tools",
    "epoch_conflict",
    "event_from_row",
    "host_identity",
    "is_int",
    "metadata_filter_matches",
    "owners_filter_matches",
    "pid_exists",
    "shown_value",
]


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


def decode_metadata(raw: Any, thread_id: str, what: str = "thread record") -> dict[str, Any]:
    """Load stored thread metadata; anything but a JSON object is damage (of ``what``)."""
    value = _decode_json(raw, thread_id, what, "metadata")
    if not isinstance(value, dict):
        raise damaged(thread_id, what, f"metadata is a {type(value).__name__}, not an object")
    return value


def _decode_json(raw: Any, thread_id: str, what: str, column: str) -> Any:
    if isinstance(raw, memoryview):
        raw = bytes(raw)
    if not isinstance(raw, (bytes, str)):
        raise damaged(thread_id, what, f"{column} is a {type(raw).__name__}, not JSON")
    try:
        return loads(raw, thread_id=thread_id)
    except SerializationError as exc:
        raise damaged(thread_id, what, f"{column}: {_reason(exc)}") from None


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
    if not is_int(seq) or not 0 < seq <= MAX_SEQ:
        raise damaged(
            thread_id, f"record {shown_value(seq)}", "the event number is not a positive 64-bit integer"
        )
    what = f"record {seq}"
    if not isinstance(payload, bytes):
        raise damaged(thread_id, what, "the event row has a column of the wrong type", seq=seq)
    check_name(thread_id, what, "kind", kind, seq=seq)
    return StoredEvent(
        seq=seq, kind=kind, created_at=checked_time(thread_id, what, created_at, seq=seq), payload=payload
    )


def column_bytes(value: Any) -> bytes:
    """A column's bytes as the store gave them (text in UTF-8)."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return value if isinstance(value, bytes) else b""


# Deletion records (SPEC rule 21) -----------------------------------------------------------
def deletion_time() -> float:
    """When a deletion happens: the saver's clock, to the microsecond.

    The audit shows a time as a datetime, which holds microseconds, and filters its
    entries by that datetime's timestamp; a time already rounded so comes back from it
    as the same float, so a store's ``since``/``until`` on this value agrees with the
    audit's own window to the last bit.
    """
    return round(time.time(), 6)


def encode_by(by: Any, thread_id: str) -> bytes:
    """Who deleted a thread, as stored: JSON with named types (``null`` for nobody)."""
    return dumps(by, where=f"who deleted thread {thread_id!r} (by)")


def deletion_from_row(
    row_id: Any,
    thread_id: Any,
    deleted_at: Any,
    by: Any,
    head_seq: Any,
    head_hash: Any,
    metadata: Any,
    seal: Any = None,
) -> DeletionRecord:
    """A deletion record from its row (``row_id`` names it), every column checked, and
    its seal when it has one (``seals.py``, rule 5; ``by`` and ``metadata`` as stored)."""
    what = f"deletion record {shown_value(row_id)}"
    if not isinstance(thread_id, str) or not 0 < len(thread_id) <= MAX_NAME:
        shown = shown_value(thread_id)
        raise SerializationError(
            f"cannot load thread {shown}, {what}: the thread id is not a string of 1 to {MAX_NAME} "
            "characters",
            thread_id=shown,
        )
    if not is_int(head_seq) or not 0 <= head_seq <= MAX_SEQ:
        raise damaged(thread_id, what, f"head_seq is {shown_value(head_seq)}")
    if head_hash is not None and not (
        isinstance(head_hash, str)
        and len(head_hash) == 64
        and all(c in "0123456789abcdef" for c in head_hash)
    ):
        raise damaged(thread_id, what, f"its head hash is {shown_value(head_hash)}, not 64 hex digits")
    record = DeletionRecord(
        thread_id=thread_id,
        deleted_at=checked_time(thread_id, what, deleted_at),
        by=_decode_json(by, thread_id, what, "by"),
        head_seq=head_seq,
        head_hash=head_hash,
        metadata=decode_metadata(metadata, thread_id, what),
    )
    stored = checked_hash(thread_id, what, "seal", seal)
    if stored is not None and stored != deletion_seal(
        thread_id, record.deleted_at, head_seq, head_hash, column_bytes(by), column_bytes(metadata)
    ):
        raise damaged(thread_id, what, MISMATCH)
    return record


def deletion_passes(
    record: DeletionRecord,
    since: float | None,
    until: float | None,
    owners: ClaimFilter | None,
    metadata: Mapping[str, Any] | None,
) -> bool:
    """Whether ``list_deletions`` lists a record: its time in ``[since, until]``, the deleted
    thread's metadata passing ``owners`` and holding ``metadata``."""
    return (
        (since is None or record.deleted_at >= since)
        and (until is None or record.deleted_at <= until)
        and (owners is None or owners.matches(record.metadata))
        and metadata_matches(metadata, record.metadata)
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
        shown = shown_value(thread_id)
        raise SerializationError(
            f"cannot load thread {shown}, thread record: the thread id is not a string of 1 to "
            f"{MAX_NAME} characters",
            thread_id=shown,
        )


def checked_time(thread_id: str, what: str, value: Any, seq: int | None = None) -> float:
    """A stored time as a float, or damage: finite, ``0 <= t < MAX_TIME`` (datetime can show it)."""
    if not _is_number(value) or not 0 <= value < MAX_TIME:  # NaN fails both comparisons
        raise damaged(thread_id, what, f"a time is {shown_value(value)}, not seconds since 1970", seq=seq)
    return float(value)


def check_name(thread_id: str, what: str, column: str, value: Any, seq: int | None = None) -> None:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME:
        raise damaged(thread_id, what, f"its {column} is {shown_value(value)}, not a name", seq=seq)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def shown_value(value: Any) -> str:
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
