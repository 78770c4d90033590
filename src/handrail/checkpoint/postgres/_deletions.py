"""Postgres deletions: a thread goes, and a record of it stays (SPEC rule 21).

Deleting a thread is one transaction, sent in one round trip (a pipeline). Its first
statement locks the thread's row (``FOR UPDATE``): an append, which moves that row,
waits behind it, and one that moved it first has committed by the time the lock is
granted. The second statement, whose snapshot is taken under that lock, reads the start
of the log's last record - its seal (``checkpoint/integrity.py``, rule 1) - deletes the
thread's rows from every table and inserts a row of ``deletions`` (who, when, that
record's number and hash, the thread's metadata). So the record exists exactly when the
thread is gone, and names the last record the deletion removed.
:meth:`DeletionSQL.list_deletions` reads them back in ``(deleted_at, thread_id, id)``
order, filtered as threads are (``_read.py``: metadata compared as JSON, owners on the
row), each one checked (``_records.deletion_from_row``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from handrail.checkpoint._records import deletion_from_row, deletion_time, encode_by
from handrail.checkpoint.base import ClaimFilter, DeletionRecord
from handrail.checkpoint.integrity import HASH_SIZE, SEAL
from handrail.checkpoint.postgres._base import BEGIN, COMMIT, Op, Query, Tables, _bare
from handrail.checkpoint.postgres._read import _metadata_clauses, _owners_clause
from handrail.checkpoint.seals import DELETION_PREFIX, NONE
from handrail.errors import SerializationError

__all__ = ["DeletionSQL", "deletion_seal_sql", "deletions_migration"]


def deletions_migration(p: str) -> tuple[str, ...]:
    """Migration 6's statements: the table of deletion records, in time order."""
    return (
        # ``deleted_by`` is JSON (``null`` when nobody was named); ``head_hash`` is NULL when
        # the log's last record had no seal. Rows are only ever added.
        f"""CREATE TABLE {p}deletions (
            id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            thread_id  text COLLATE "C" NOT NULL,
            deleted_at double precision NOT NULL,
            deleted_by jsonb NOT NULL,
            head_seq   bigint NOT NULL,
            head_hash  text,
            metadata   jsonb NOT NULL
        )""",
        f"CREATE INDEX {_bare(p)}deletions_by_time ON {p}deletions (deleted_at, thread_id, id)",
    )


def deletion_seal_sql(thread: str, at: str, head_seq: str, head_hash: str, by: str, metadata: str) -> str:
    """A deletion record's seal in SQL, as ``seals.deletion_seal`` computes it in Python:
    each argument is the SQL of a column's value (``by`` and ``metadata`` jsonb, read back
    as text; ``head_hash`` text or NULL)."""

    def text(value: str) -> str:
        return f"int4send(octet_length(convert_to({value}, 'UTF8'))) || convert_to({value}, 'UTF8')"

    return (
        f"sha256('\\x{DELETION_PREFIX.hex()}'::bytea || {text(thread)} || float8send(({at})::float8) "
        f"|| int8send(({head_seq})::bigint) || CASE WHEN ({head_hash}) IS NULL THEN '\\x{NONE.hex()}'::bytea "
        f"ELSE {text(head_hash)} END || {text(f'({by})::text')} || {text(f'({metadata})::text')})"
    )


class DeletionSQL(Tables):
    """Deleting a thread, and listing what deletions left."""

    def delete_thread(self, thread_id: str, by: Any) -> Op[bool]:
        who = encode_by(by, thread_id).decode()
        if "\\u0000" in who:  # JSON's escape of NUL, which PostgreSQL's jsonb cannot hold
            raise SerializationError(
                f"cannot store who deleted thread {thread_id!r} (by) in PostgreSQL: it holds a NUL character",
                thread_id=thread_id,
            )
        params = {"thread": thread_id, "at": deletion_time(), "by": who}
        _, found, _, _ = yield [
            BEGIN,
            Query(f"SELECT 1 FROM {self.threads} WHERE thread_id = %(thread)s FOR UPDATE", params),
            Query(self._delete_sql, params),
            COMMIT,
        ]
        return bool(found.rows)

    @functools.cached_property
    def _delete_sql(self) -> str:
        """Delete every row of the thread and record it, in one statement (see the module's
        documentation): the hash is the one sealed into the log's last record, by the rule
        of ``integrity.sealed_hash`` (a seal byte, then 32 bytes of hash)."""
        tables = (
            self.events,
            self.pending,
            self.pending_tools,
            self.pending_metadata,
            self.runs,
            self.readings,
        )
        deletes = ", ".join(
            f"d{n} AS (DELETE FROM {table} WHERE thread_id = %(thread)s)" for n, table in enumerate(tables)
        )
        header = len(SEAL) + HASH_SIZE
        sealed = (
            f"CASE WHEN length(l.head) = {header} AND substring(l.head FROM 1 FOR 1) = "
            f"'\\x{SEAL.hex()}'::bytea THEN encode(substring(l.head FROM 2), 'hex') END"
        )
        seal = deletion_seal_sql(
            "%(thread)s", "%(at)s", "COALESCE(l.seq, 0)", sealed, "%(by)s::jsonb", "g.metadata"
        )
        return (
            f"WITH last AS (SELECT seq, substring(payload FROM 1 FOR {header}) AS head FROM {self.events} "
            "WHERE thread_id = %(thread)s ORDER BY seq DESC LIMIT 1), "
            f"{deletes}, gone AS (DELETE FROM {self.threads} WHERE thread_id = %(thread)s "
            f"RETURNING metadata) INSERT INTO {self.deletions} (thread_id, deleted_at, deleted_by, head_seq, "
            f"head_hash, metadata, seal) SELECT %(thread)s, %(at)s, %(by)s::jsonb, COALESCE(l.seq, 0), "
            f"{sealed}, g.metadata, {seal} "
            "FROM gone AS g LEFT JOIN last AS l ON true"
        )

    def list_deletions(
        self,
        since: float | None,
        until: float | None,
        owners: ClaimFilter | None,
        metadata: Mapping[str, Any] | None,
        limit: int,
    ) -> Op[list[DeletionRecord]]:
        where: list[str] = []
        params: list[Any] = []
        if since is not None:
            where.append("t.deleted_at >= %s")
            params.append(since)
        if until is not None:
            where.append("t.deleted_at <= %s")
            params.append(until)
        if metadata:
            where += _metadata_clauses(metadata, params)
        if owners is not None:
            where.append(_owners_clause(owners, params))
        sql = (
            "SELECT t.id, t.thread_id, t.deleted_at, t.deleted_by::text, t.head_seq, t.head_hash, "
            f"t.metadata::text, t.seal FROM {self.deletions} AS t"
            + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY t.deleted_at, t.thread_id, t.id LIMIT %s"
        )
        params.append(max(int(limit), 0))
        (result,) = yield [Query(sql, params)]
        return [deletion_from_row(*row) for row in result.rows]
