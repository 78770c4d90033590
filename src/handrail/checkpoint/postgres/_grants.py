"""Postgres grants (SPEC rule 16): added by appends, spent, listed, revoked.

The table ``grants`` (schema version 8) holds one row per grant, every field of
:class:`~handrail.checkpoint.grants.GrantRecord`; ``args``, ``given_by`` and
``revoked_by`` are JSON text written with the project's serialisation (text, not
``jsonb``: a tool's arguments may hold a NUL character, which ``jsonb`` cannot). The rows'
checks and decoding are the SQLite saver's (``sqlite/_grant_rows.py``).

**Adding.** An append that carries grants (``append(..., grants=GrantChange(new=...))``)
is one transaction, sent in one round trip: ``BEGIN``, the append's statement, one
``INSERT`` per new grant, ``COMMIT``. An id taken already makes its ``INSERT`` call
``handrail_fail`` (SQLSTATE ``HR411``): the append is rolled back and raises
``ValueError``.

**Spending** is race-safe under READ COMMITTED: each use is one ``UPDATE ... SET used =
used + 1 WHERE`` *the grant is in force at ``at``* ``RETURNING``, and one that updates no
row calls ``handrail_fail`` (``HR411``), which rolls back its transaction. Two spends
racing for a grant's last use: the second one's ``UPDATE`` waits for the first to commit,
then checks its ``WHERE`` again on the row as the first left it, finds no use left and
updates nothing, so exactly one gets the use. A spend of one grant is one statement (its
own transaction, without ``BEGIN``); a spend of several is ``BEGIN``, a lock of their
rows in id order (so that two spends of overlapping grants cannot deadlock), an
``UPDATE`` per use, ``COMMIT``, in one round trip. No session state, and no statement
prepared but by psycopg's own ``prepare_threshold``, as every other operation: so it
works through PgBouncer in transaction mode. On a refusal the saver reads the grant (a
second round trip, on that path only) to say why: revoked, lapsed or no use left.

Deleting a thread leaves its grants (``_deletions.py`` does not touch this table).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import psycopg

from handrail.checkpoint._grant_rows import (
    COLUMNS,
    filter_sql,
    grant_from_row,
    in_force_sql,
    spent_error,
)
from handrail.checkpoint.grants import GrantFilter, GrantRecord, spend_refusal
from handrail.checkpoint.postgres._base import BEGIN, COMMIT, Op, Query, Tables, _bare
from handrail.checkpoint.postgres._liveness import Flow

__all__ = ["GRANT_STATE", "GrantSQL", "grant_error", "grants_migration", "spend_flow"]

GRANT_STATE = "HR411"
"""The SQLSTATE of a grant statement that refuses: an id taken already, a use not there."""

_TAKEN = "handrail: grant {} exists already"
_NOT_SPENT = "handrail: grant {} has no use to give (use {} of the spend)"


def grants_migration(p: str) -> tuple[str, ...]:
    """Migration 8's statements: the table of grants and its indexes (newest first: by
    agent and tool, the gate's question; by the thread given on; all)."""
    return (
        # IF NOT EXISTS: a schema rolled back to an older version by hand keeps its grants
        f"""CREATE TABLE IF NOT EXISTS {p}grants (
            grant_id     text COLLATE "C" PRIMARY KEY,
            agent        text COLLATE "C" NOT NULL,
            tool         text COLLATE "C" NOT NULL,
            scope        text NOT NULL,
            thread_id    text COLLATE "C" NOT NULL,
            args_digest  text,
            args         text NOT NULL,
            expires_at   double precision,
            uses         bigint,
            used         bigint NOT NULL,
            given_by     text NOT NULL,
            given_at     double precision NOT NULL,
            interrupt_id text NOT NULL,
            tool_call_id text NOT NULL,
            revoked_at   double precision,
            revoked_by   text NOT NULL
        )""",
        f"CREATE INDEX IF NOT EXISTS {_bare(p)}grants_by_time ON {p}grants (given_at DESC, grant_id DESC)",
        f"CREATE INDEX IF NOT EXISTS {_bare(p)}grants_by_agent ON {p}grants "
        "(agent, tool, given_at DESC, grant_id DESC)",
        f"CREATE INDEX IF NOT EXISTS {_bare(p)}grants_by_thread ON {p}grants "
        "(thread_id, given_at DESC, grant_id DESC)",
    )


def _text(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A grant's row for the server: its JSON columns (bytes from ``serde.dumps``) as text."""
    return tuple(value.decode() if isinstance(value, bytes) else value for value in row)


class GrantSQL(Tables):
    """Adding (inside an append's transaction), spending, listing and revoking grants."""

    @property
    def _grants(self) -> str:
        return f"{self.prefix}grants"

    def grant_inserts(self, rows: Sequence[tuple[Any, ...]]) -> list[Query]:
        """The statements that add the rows of new grants (``checked_change``), for an
        append's transaction: each refuses (``HR411``) an id taken already."""
        sql = (
            f"WITH added AS (INSERT INTO {self._grants} ({COLUMNS}) VALUES ({', '.join(['%s'] * 16)}) "
            "ON CONFLICT (grant_id) DO NOTHING RETURNING 1) "
            f"SELECT CASE WHEN EXISTS (SELECT FROM added) THEN true "
            f"ELSE {self.prefix}fail('{GRANT_STATE}', %s) END"
        )
        return [Query(sql, (*_text(row), _TAKEN.format(row[0]))) for row in rows]

    def spend_grants(self, grant_ids: Sequence[str], at: float) -> Op[None]:
        """One use of each grant, all or none (see the module's documentation)."""
        spend = (
            f"WITH spent AS (UPDATE {self._grants} SET used = used + 1 WHERE grant_id = %s "
            f"AND {in_force_sql('%s')} RETURNING 1) SELECT CASE WHEN EXISTS (SELECT FROM spent) "
            f"THEN true ELSE {self.prefix}fail('{GRANT_STATE}', %s) END"
        )
        uses = [
            Query(spend, (grant_id, at, _NOT_SPENT.format(grant_id, n)))
            for n, grant_id in enumerate(grant_ids)
        ]
        if len(uses) == 1:
            yield uses
            return
        lock = Query(
            f"SELECT 1 FROM {self._grants} WHERE grant_id = ANY(%s::text[]) ORDER BY grant_id FOR UPDATE",
            (sorted(set(grant_ids)),),
        )
        yield [BEGIN, lock, *uses, COMMIT]

    def get_grant(self, grant_id: str) -> Op[GrantRecord | None]:
        (found,) = yield [Query(f"SELECT {COLUMNS} FROM {self._grants} WHERE grant_id = %s", (grant_id,))]
        return grant_from_row(found.rows[0]) if found.rows else None

    def list_grants(self, filter: GrantFilter) -> Op[list[GrantRecord]]:
        clause, params = filter_sql(filter, "%s")
        (found,) = yield [Query(f"SELECT {COLUMNS} FROM {self._grants}{clause}", params)]
        return [grant_from_row(row) for row in found.rows]

    def revoke_grant(self, grant_id: str, by: str, at: float) -> Op[GrantRecord | None]:
        """Revoke once: a grant revoked already (or none) is read as it is, by a second
        statement, whose snapshot sees a revocation that another session committed while
        the first statement waited for it."""
        (revoked,) = yield [
            Query(
                f"UPDATE {self._grants} SET revoked_at = %s, revoked_by = %s WHERE grant_id = %s "
                f"AND revoked_at IS NULL RETURNING {COLUMNS}",
                (at, by, grant_id),
            )
        ]
        if revoked.rows:
            return grant_from_row(revoked.rows[0])
        found: GrantRecord | None = yield from self.get_grant(grant_id)
        return found


def grant_error(exc: psycopg.Error) -> ValueError | None:
    """The ValueError for an append whose new grant's id was taken (``HR411``), or None."""
    message = exc.diag.message_primary or ""
    if exc.sqlstate == GRANT_STATE and message.endswith(" exists already"):
        return ValueError(message.removeprefix("handrail: "))
    return None


def spend_flow(queries: GrantSQL, grant_ids: list[str], thread_id: str, at: float) -> Flow[None]:
    """``spend_grants`` as both savers perform it: a refusal says which grant, and why."""
    try:
        yield queries.spend_grants(grant_ids, at)
    except psycopg.Error as exc:
        message = exc.diag.message_primary if exc.sqlstate == GRANT_STATE else None
        n = next((n for n, g in enumerate(grant_ids) if message == _NOT_SPENT.format(g, n)), None)
        if n is None:
            raise
        refused = grant_ids[n]
        found = yield queries.get_grant(refused)  # as it is, nothing of this spend taken
        if found is not None:  # the uses of it this spend took before the refused one
            found = replace(found, used=found.used + grant_ids[:n].count(refused))
        raise spent_error(thread_id, refused, spend_refusal(found, at) or "its last use was taken") from None
