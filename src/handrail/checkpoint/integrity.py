"""The hash chain over a thread's log: damage and tampering fail loudly (SPEC rules 10, 18).

Rules
-----
Rule 1 - Every stored event is *sealed*: its payload is ``0x06``, then a 32-byte hash,
    then the body (the event's JSON, compressed or not, see ``runtime/events.py``).
Rule 2 - The hash of event ``n`` is SHA-256 over the hash its chain holds before it,
    the thread id, ``n``, the event's time, its kind and its body (:func:`link`). The
    hash before the first event is 32 zero bytes (:data:`GENESIS`). So a change to any
    field of a record, a record copied from another row or another thread, and a record
    removed, repeated or moved all break the chain at the first record that differs.
Rule 3 - The hash before event ``n`` is the hash of the row stored before it, unless
    the thread's latest ``snapshot`` names another in its ``anchors``: pruning removes
    rows, and the snapshot it leaves keeps, for each row whose predecessor it removed,
    the hash that row was chained to. A pruned thread stays verifiable from the anchors
    its snapshot keeps; the rows pruning dropped are gone, and so is their proof.
Rule 4 - A thread's saved reading (a cache of its state) is sealed on its own, from
    :data:`GENESIS`, and holds the chain's value at its event: the events after it are
    checked from there.
Rule 5 - Rows written before this format have no seal (they start with any other byte).
    They are chained as if sealed (their hash is computed, not checked), so the first
    sealed row after them checks them too; a stores' migration seals them in place. An
    unsealed row *after* a sealed one is damage. A saved reading without a seal is not
    trusted: the thread is read from its log.
Rule 6 - A chain vouches for every record before its last one, not for where it ends:
    records cut from its end (with the thread's head moved back to match) leave a shorter
    chain that is just as whole. The hash of the last record, the *head hash*, vouches
    for the whole log; kept where the database's writers cannot change it, it finds a
    cut end, and any log rewritten with hashes computed anew (:func:`head_mismatch`).
Every check that fails raises :class:`~handrail.errors.SerializationError` naming the
thread and the record, and nothing else.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from handrail.checkpoint.base import StoredEvent
from handrail.errors import InvalidInputError, SerializationError

__all__ = [
    "GENESIS",
    "HASH_SIZE",
    "SEAL",
    "Break",
    "ChainWalk",
    "head_mismatch",
    "is_sealed",
    "link",
    "read_head",
    "seal",
    "seal_log",
    "sealed_hash",
    "unseal",
    "walk",
]

SEAL = b"\x06"
HASH_SIZE = 32
GENESIS = bytes(HASH_SIZE)
_HEADER = len(SEAL) + HASH_SIZE
_NUMBERS = struct.Struct(">qd")


def link(prev: bytes, thread_id: str, seq: int, kind: str, created_at: float, body: bytes) -> bytes:
    """The hash of one record, chained to ``prev`` (rule 2)."""
    thread = thread_id.encode()
    name = kind.encode()
    return hashlib.sha256(
        b"".join(
            (
                prev,
                len(thread).to_bytes(4, "big"),
                thread,
                _NUMBERS.pack(seq, created_at),
                len(name).to_bytes(4, "big"),
                name,
                body,
            )
        )
    ).digest()


def seal(
    prev: bytes, thread_id: str, seq: int, kind: str, created_at: float, body: bytes
) -> tuple[bytes, bytes]:
    """The stored payload of a record (rule 1) and its hash."""
    digest = link(prev, thread_id, seq, kind, created_at, body)
    return SEAL + digest + body, digest


def is_sealed(payload: bytes) -> bool:
    """Whether a stored payload carries a hash (rule 1)."""
    return payload[:1] == SEAL


def unseal(payload: bytes) -> tuple[bytes | None, bytes]:
    """A stored payload's hash (None for a row written before the seal) and body."""
    if payload[:1] != SEAL:
        return None, payload
    return payload[1:_HEADER], payload[_HEADER:]


def sealed_hash(payload: bytes) -> str | None:
    """The hash a stored payload carries (rule 1), in hex as reports print it; None when
    it has none. Only the first 33 bytes are read: a store may pass just those."""
    stored, _ = unseal(payload[:_HEADER])
    return stored.hex() if stored is not None and len(stored) == HASH_SIZE else None


class Break(NamedTuple):
    """The first record that does not match the chain, and how."""

    seq: int
    reason: str

    def error(self, thread_id: str) -> SerializationError:
        return SerializationError(
            f"cannot load thread {thread_id!r}, record {self.seq}: {self.reason}",
            thread_id=thread_id,
            seq=self.seq,
        )


class ChainWalk(NamedTuple):
    """What :func:`walk` found: the first break (if any), the hash before the record
    after the last one, and each record's hash."""

    broken: Break | None
    next_prev: bytes
    hashes: dict[int, bytes]
    sealed: bool


_CHANGED = (
    "it does not match its hash: the record was changed, or copied from another row, or a "
    "record before it was removed, repeated or moved"
)


def walk(
    thread_id: str,
    events: Iterable[StoredEvent],
    *,
    prev: bytes = GENESIS,
    anchors: Mapping[int, bytes] | None = None,
    sealed: bool = False,
) -> ChainWalk:
    """Check ``events`` (in stored order) against their hashes, starting from ``prev``.

    ``anchors`` are the hashes a pruned thread's snapshot keeps (rule 3); ``sealed``
    says a sealed row came before these (rule 5).
    """
    hashes: dict[int, bytes] = {}
    last_seq: int | None = None
    for event in events:
        if anchors and event.seq in anchors:
            prev = anchors[event.seq]
        if last_seq is not None and event.seq <= last_seq:
            return ChainWalk(Break(event.seq, f"it comes after record {last_seq}"), prev, hashes, sealed)
        stored, body = unseal(event.payload)
        try:
            digest = link(prev, thread_id, event.seq, event.kind, event.created_at, body)
        except (struct.error, UnicodeEncodeError, OverflowError, TypeError) as exc:
            return ChainWalk(Break(event.seq, f"a column cannot be hashed ({exc})"), prev, hashes, sealed)
        if stored is None:
            if sealed:
                reason = "it has no hash, though the records before it have (damaged or written over)"
                return ChainWalk(Break(event.seq, reason), prev, hashes, sealed)
        elif stored != digest:
            return ChainWalk(Break(event.seq, _CHANGED), prev, hashes, sealed)
        else:
            sealed = True
        hashes[event.seq] = digest
        prev = digest
        last_seq = event.seq
    if anchors and last_seq is not None and last_seq + 1 in anchors:
        prev = anchors[last_seq + 1]
    return ChainWalk(None, prev, hashes, sealed)


def seal_log(thread_id: str, events: Iterable[StoredEvent]) -> list[StoredEvent]:
    """The rows of a log written before the seal, sealed in place (for a store's migration).

    Each unsealed row gets the hash it already has in the chain (rule 5), so the rows
    after it, sealed or not, keep theirs. Rows already sealed are left out of the result.
    """
    out: list[StoredEvent] = []
    prev = GENESIS
    for event in events:
        stored, body = unseal(event.payload)
        digest = link(prev, thread_id, event.seq, event.kind, event.created_at, body)
        if stored is None:
            out.append(StoredEvent(event.seq, event.kind, event.created_at, SEAL + digest + body))
        prev = digest if stored is None else stored
    return out


def read_head(value: object) -> str:
    """A head hash as a person gives it (64 hex digits, any case, spaces around ignored),
    in the lower-case form reports print; raises :class:`~handrail.errors.InvalidInputError`
    (a ``ValueError``) for anything else."""
    text = value.strip().lower() if isinstance(value, str) else ""
    if len(text) != 2 * HASH_SIZE or any(c not in "0123456789abcdef" for c in text):
        raise InvalidInputError(
            f"an expected head must be the {2 * HASH_SIZE} hexadecimal digits of a head hash, as "
            f"a verification reports it (head_hash), got {value!r}"
        )
    return text


def head_mismatch(expected: str, hashes: Mapping[int, bytes]) -> Break | None:
    """Whether a whole chain (each record's hash, by number) ends at the head ``expected``
    (rule 6); if not, the first record past the common part and what differs.

    ``expected`` is a head hash as :func:`read_head` gives it. A log that goes on past the
    expected head is told apart from one that does not hold it at all (cut at its end,
    or rewritten).
    """
    if not hashes:
        return Break(1, f"the log has no records, but it was expected to end at head {expected}")
    last = max(hashes)
    head = hashes[last].hex()
    if head == expected:
        return None
    at = next((seq for seq, digest in hashes.items() if digest.hex() == expected), None)
    if at is not None:
        after = sum(1 for seq in hashes if seq > at)
        return Break(
            at + 1,
            f"the log goes on past the expected head: record {at} ends the log as expected, and "
            f"{after} record{'s' if after != 1 else ''} follow it, up to record {last}. If they were "
            f"added since the expected head was kept, keep the new head {head}",
        )
    return Break(
        last + 1,
        f"the log does not end at the expected head {expected}: it ends at record {last}, whose "
        f"hash is {head}, and none of its records has the expected hash. Records were cut from "
        "its end, or records were changed and the hashes computed again",
    )
