"""Grants as rows (SPEC rule 16), for both SQL savers: the columns, checks, decoding, SQL.

A grant is one row of ``handrail_grants`` holding every field of
:class:`~handrail.checkpoint.grants.GrantRecord`; ``args``, ``given_by`` and
``revoked_by`` are JSON written with the project's serialisation (``serde.dumps``:
``null`` for nobody). Nothing here talks to a database: :func:`grant_values` checks a
new record and makes its row before any transaction (a bad one raises ``ValueError``,
an unstorable value :class:`~handrail.errors.SerializationError`), and
:func:`grant_from_row` checks every column read back (a damaged one raises
:class:`~handrail.errors.SerializationError` naming the grant, SPEC rule 10).
:func:`in_force_sql` and :func:`filter_sql` are the conditions of ``grant_matches`` in
SQL. Both savers use it: ``sqlite/_grants.py`` and ``postgres/_grants.py``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from handrail.checkpoint._records import (
    MAX_NAME,
    MAX_SEQ,
    MAX_TIME,
    checked_time,
    damaged,
    is_int,
    shown_value,
)
from handrail.checkpoint.grants import GrantChange, GrantFilter, GrantRecord, check_record
from handrail.checkpoint.serde import dumps, loads
from handrail.errors import GrantSpentError, SerializationError

__all__ = [
    "COLUMNS",
    "SQLITE_MIGRATION",
    "checked_change",
    "checked_spend",
    "filter_sql",
    "grant_from_row",
    "grant_values",
    "in_force_sql",
    "revoked_by",
    "revoked_time",
    "spent_error",
]

COLUMNS = (
    "grant_id, agent, tool, scope, thread_id, args_digest, args, expires_at, uses, used, given_by, "
    "given_at, interrupt_id, tool_call_id, revoked_at, revoked_by"
)
"""A grant row's columns, in the order of :class:`GrantRecord`'s fields (and of
:func:`grant_values`, :func:`grant_from_row`)."""

SQLITE_MIGRATION = (
    # IF NOT EXISTS: a file rolled back to an older version by hand keeps its grants
    """CREATE TABLE IF NOT EXISTS handrail_grants (
        grant_id     TEXT PRIMARY KEY,
        agent        TEXT NOT NULL,
        tool         TEXT NOT NULL,
        scope        TEXT NOT NULL,
        thread_id    TEXT NOT NULL,
        args_digest  TEXT,
        args         BLOB NOT NULL,
        expires_at   REAL,
        uses         INTEGER,
        used         INTEGER NOT NULL,
        given_by     BLOB NOT NULL,
        given_at     REAL NOT NULL,
        interrupt_id TEXT NOT NULL,
        tool_call_id TEXT NOT NULL,
        revoked_at   REAL,
        revoked_by   BLOB NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS handrail_grants_by_time ON handrail_grants (given_at DESC, grant_id DESC)",
    "CREATE INDEX IF NOT EXISTS handrail_grants_by_agent ON handrail_grants "
    "(agent, tool, given_at DESC, grant_id DESC)",
    "CREATE INDEX IF NOT EXISTS handrail_grants_by_thread ON handrail_grants "
    "(thread_id, given_at DESC, grant_id DESC)",
)
"""SQLite's schema version 8: the table of grants, listed newest first by agent and tool,
by thread, or all."""

_TEXT_FIELDS = ("grant_id", "agent", "tool", "thread_id", "interrupt_id", "tool_call_id")
_IDS = ("grant_id", "thread_id")  # names, never empty (the others may be, as in memory)


def checked_change(change: GrantChange | None) -> list[tuple[Any, ...]]:
    """The rows of ``change.new``, every record checked (before any transaction)."""
    return [] if change is None else [grant_values(record) for record in change.new]


def checked_spend(grant_ids: Sequence[str], at: float) -> list[str]:
    """The ids of a ``spend_grants`` and its time, checked: ValueError for what no spend could be."""
    if not _number(at):
        raise ValueError(f"a spend's time (at) must be a finite number, got {at!r}")
    if isinstance(grant_ids, str):
        raise ValueError("grant_ids must be a sequence of grant ids, not one string")
    ids = list(grant_ids)
    for grant_id in ids:
        if not isinstance(grant_id, str):
            raise ValueError(f"a grant id to spend must be a string, got {grant_id!r}")
    return ids


def grant_values(record: GrantRecord) -> tuple[Any, ...]:
    """A new grant's row (in :data:`COLUMNS` order): ValueError for a record no grant could
    be (``check_record``, and values a row cannot hold), SerializationError for ``args``
    or ``given_by`` that cannot be stored."""
    name = record.grant_id
    if record.uses is not None and (not is_int(record.uses) or record.uses > MAX_SEQ):
        raise ValueError(f"grant {name}: uses must be a whole number of at most {MAX_SEQ}")
    if not is_int(record.used) or record.used > MAX_SEQ:
        raise ValueError(f"grant {name}: used must be a whole number")
    if not _number(record.expires_at, allow_none=True):
        raise ValueError(f"grant {name}: expires_at must be a finite number")
    check_record(record)
    for field in _TEXT_FIELDS:
        value = getattr(record, field)
        if not isinstance(value, str) or len(value) > MAX_NAME or (field in _IDS and not value):
            kind = "a non-empty string" if field in _IDS else "a string"
            raise ValueError(f"grant {name}: {field} must be {kind} of at most {MAX_NAME} characters")
    if record.args_digest is not None and not isinstance(record.args_digest, str):
        raise ValueError(f"grant {name}: args_digest must be a string or None")
    for field in ("given_at", "revoked_at"):
        value = getattr(record, field)
        if not (value is None and field == "revoked_at") and not (_number(value) and 0 <= value < MAX_TIME):
            raise ValueError(f"grant {name}: {field} must be a time in seconds since 1970")
    return (
        name,
        record.agent,
        record.tool,
        record.scope,
        record.thread_id,
        record.args_digest,
        dumps(record.args, where=lambda: f"the arguments of grant {name!r}"),
        record.expires_at,
        record.uses,
        record.used,
        dumps(record.given_by, where=lambda: f"who gave grant {name!r} (given_by)"),
        record.given_at,
        record.interrupt_id,
        record.tool_call_id,
        record.revoked_at,
        dumps(record.revoked_by, where=lambda: f"who revoked grant {name!r} (revoked_by)"),
    )


def revoked_by(grant_id: str, by: Any) -> bytes:
    """Who revokes a grant, as stored (JSON; ``null`` for nobody)."""
    return dumps(by, where=lambda: f"who revoked grant {grant_id!r} (by)")


def revoked_time(at: float | None) -> float:
    """When a revocation happens: ``at``, or now."""
    if at is None:
        return time.time()
    if not _number(at) or not 0 <= at < MAX_TIME:
        raise ValueError(f"a revocation's time (at) must be seconds since 1970, got {at!r}")
    return float(at)


def spent_error(thread_id: str, grant_id: str, reason: str | None) -> GrantSpentError:
    """The refusal of a spend that takes a use ``grant_id`` has not (as ``grants.spent``)."""
    return GrantSpentError(
        f"thread {thread_id!r}: {reason or 'no such grant'} ({grant_id}); nothing was spent",
        thread_id=thread_id,
        grant_id=grant_id,
    )


def in_force_sql(at: str) -> str:
    """The condition of a grant row in force at ``at`` (an SQL parameter): ``spend_refusal``'s."""
    return (
        f"revoked_at IS NULL AND (expires_at IS NULL OR {at} < expires_at) AND (uses IS NULL OR used < uses)"
    )


def filter_sql(filter: GrantFilter, mark: str) -> tuple[str, list[Any]]:
    """The query of ``list_grants`` (``mark`` is the driver's parameter: ``?`` or ``%s``):
    ``grant_matches`` in SQL, newest first (``given_at``, then ``grant_id``), one page."""
    where: list[str] = []
    params: list[Any] = []
    for column in ("agent", "tool", "thread_id"):
        value = getattr(filter, column)
        if value is not None:
            where.append(f"{column} = {mark}")
            params.append(value)
    if filter.covering is not None:
        where.append(f"(scope = 'agent' OR thread_id = {mark})")
        params.append(filter.covering)
    if filter.active_at is not None:
        where.append(in_force_sql(mark))
        params.append(filter.active_at)
    clause = (" WHERE " + " AND ".join(where)) if where else ""
    params += [max(filter.limit, 0), max(filter.offset, 0)]
    return f"{clause} ORDER BY given_at DESC, grant_id DESC LIMIT {mark} OFFSET {mark}", params


def grant_from_row(row: Sequence[Any]) -> GrantRecord:
    """A grant from its row (:data:`COLUMNS`), every column checked (type and range):
    damage raises SerializationError naming the grant (and the thread it was given on)."""
    (
        grant_id,
        agent,
        tool,
        scope,
        thread_id,
        args_digest,
        args,
        expires_at,
        uses,
        used,
        given_by,
        given_at,
        interrupt_id,
        tool_call_id,
        revoked_at,
        revoked,
    ) = row
    if not isinstance(grant_id, str) or not 0 < len(grant_id) <= MAX_NAME:
        raise SerializationError(f"cannot load grant {shown_value(grant_id)}: its id is not a name")
    what = f"grant {grant_id!r}"
    if not isinstance(thread_id, str) or not 0 < len(thread_id) <= MAX_NAME:
        raise SerializationError(
            f"cannot load {what}: the id of the thread it was given on is {shown_value(thread_id)}"
        )

    def bad(reason: str) -> SerializationError:
        return damaged(thread_id, what, reason)

    for column, value in (
        ("agent", agent),
        ("tool", tool),
        ("interrupt_id", interrupt_id),
        ("tool_call_id", tool_call_id),
    ):
        if not isinstance(value, str) or len(value) > MAX_NAME:
            raise bad(f"its {column} is {shown_value(value)}, not a name")
    if scope not in ("thread", "agent"):
        raise bad(f"its scope is {shown_value(scope)}, not 'thread' or 'agent'")
    if args_digest is not None and not isinstance(args_digest, str):
        raise bad(f"its args_digest is {shown_value(args_digest)}")
    if expires_at is not None and not _number(expires_at):
        raise bad(f"its expiry is {shown_value(expires_at)}, not a time")
    if uses is not None and (not is_int(uses) or not 0 < uses <= MAX_SEQ):
        raise bad(f"its number of uses is {shown_value(uses)}")
    if not is_int(used) or not 0 <= used <= MAX_SEQ:
        raise bad(f"its count of uses taken is {shown_value(used)}")
    if expires_at is None and uses is None:
        raise bad("it has neither an expiry nor a number of uses")
    return GrantRecord(
        grant_id=grant_id,
        agent=agent,
        tool=tool,
        scope=scope,
        thread_id=thread_id,
        args_digest=args_digest,
        args=_json(args, thread_id, what, "args"),
        expires_at=None if expires_at is None else float(expires_at),
        uses=uses,
        used=used,
        given_by=_json(given_by, thread_id, what, "given_by"),
        given_at=checked_time(thread_id, what, given_at),
        interrupt_id=interrupt_id,
        tool_call_id=tool_call_id,
        revoked_at=None if revoked_at is None else checked_time(thread_id, what, revoked_at),
        revoked_by=_json(revoked, thread_id, what, "revoked_by"),
    )


def _json(raw: Any, thread_id: str, what: str, column: str) -> Any:
    if isinstance(raw, memoryview):
        raw = bytes(raw)
    if not isinstance(raw, (bytes, str)):
        raise damaged(thread_id, what, f"its {column} is a {type(raw).__name__}, not JSON")
    try:
        return loads(raw, thread_id=thread_id, record=what)
    except SerializationError as exc:
        reason = str(exc).split(": ", 1)[-1]
        raise damaged(thread_id, what, f"its {column}: {reason}") from None


def _number(value: Any, *, allow_none: bool = False) -> bool:
    if value is None:
        return allow_none
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
