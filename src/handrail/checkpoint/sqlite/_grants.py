"""The SQLite saver's grants (SPEC rule 16): added by appends, spent, listed, revoked.

The grants an approval carries (``append(..., grants=GrantChange(new=...))``) are
inserted in the append's own write transaction, after its events (:func:`write_grants`):
an id taken already is a ``ValueError``, and the append is rolled back (in a group
commit, its savepoint). :meth:`_Grants.spend_grants` takes one use of each grant in one
write transaction: an ``UPDATE`` per use that matches only a grant in force at ``at``
(not revoked, not lapsed, a use left); one that matches nothing raises
:class:`~handrail.errors.GrantSpentError` and the transaction is rolled back, so nothing
is spent. ``BEGIN IMMEDIATE`` makes writers take turns: two spends racing for a grant's
last use, from two threads or two processes, cannot both see it left; the second one's
``UPDATE`` matches nothing.

A grant outlives the thread it was given on: deleting a thread leaves its grants.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from handrail.checkpoint._grant_rows import (
    COLUMNS,
    checked_spend,
    filter_sql,
    grant_from_row,
    in_force_sql,
    revoked_by,
    revoked_time,
    spent_error,
)
from handrail.checkpoint.grants import GrantFilter, GrantRecord, spend_refusal
from handrail.checkpoint.sqlite._connections import _Connections, fetch_all

__all__ = ["_Grants", "write_grants"]

_INSERT = f"INSERT INTO handrail_grants ({COLUMNS}) VALUES ({', '.join('?' * 16)})"
_SPEND = f"UPDATE handrail_grants SET used = used + 1 WHERE grant_id = ? AND {in_force_sql('?')}"
_SELECT = f"SELECT {COLUMNS} FROM handrail_grants"


def write_grants(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    """An append's new grants (their rows: ``_grant_rows.checked_change``), in its open
    write transaction; an id taken already raises ValueError (the caller rolls back)."""
    for row in rows:
        try:
            conn.execute(_INSERT, row)
        except sqlite3.IntegrityError:
            raise ValueError(f"grant {row[0]} exists already") from None


class _Grants(_Connections):
    """``list_grants``, ``spend_grants`` and ``revoke_grant`` (appends add grants: ``_writes``)."""

    def list_grants(self, filter: GrantFilter) -> list[GrantRecord]:
        clause, params = filter_sql(filter, "?")
        with self._transaction(write=False) as conn:
            rows = fetch_all(conn, _SELECT + clause, params)
        return [grant_from_row(row) for row in rows]

    def spend_grants(self, grant_ids: Sequence[str], *, thread_id: str, at: float) -> None:
        ids = checked_spend(grant_ids, at)
        if not ids:
            return
        with self._transaction(write=True) as conn:
            for grant_id in ids:
                if conn.execute(_SPEND, (grant_id, at)).rowcount != 1:
                    found = _read(conn, grant_id)
                    # writers take turns: what stopped the UPDATE is what the row says
                    raise spent_error(thread_id, grant_id, spend_refusal(found, at))

    def revoke_grant(self, grant_id: str, *, by: Any = None, at: float | None = None) -> GrantRecord | None:
        who, when = revoked_by(grant_id, by), revoked_time(at)  # refused before anything changes
        with self._transaction(write=True) as conn:
            conn.execute(
                "UPDATE handrail_grants SET revoked_at = ?, revoked_by = ? WHERE grant_id = ? "
                "AND revoked_at IS NULL",
                (when, who, grant_id),
            )
            return _read(conn, grant_id)


def _read(conn: sqlite3.Connection, grant_id: str) -> GrantRecord | None:
    rows = fetch_all(conn, f"{_SELECT} WHERE grant_id = ?", (grant_id,))
    return grant_from_row(rows[0]) if rows else None
