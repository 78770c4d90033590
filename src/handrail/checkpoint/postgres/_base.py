"""What every part of the Postgres backend shares: operations, tables, liveness checks.

An *operation* (:data:`Op`) is a generator that yields batches of :class:`Query` and
receives their :class:`Result` s; it performs no I/O. The drivers
(:mod:`handrail.checkpoint.postgres._drivers`) run it, sync or async, each batch in one
round trip, so every exchange with the server is written once for both savers.
:class:`Tables` holds the names and shared SQL of one schema; the concept modules
(``schema``, ``write``, ``read``, ``liveness``) add its operations, and
:class:`~handrail.checkpoint.postgres._queries.Queries` is all of them together.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from handrail.errors import ConfigurationError

__all__ = [
    "BEGIN",
    "COMMIT",
    "CONFLICT_STATE",
    "INDEXED_BYTES",
    "LOST_LOCK_STATE",
    "Op",
    "Query",
    "Result",
    "Tables",
]

T = TypeVar("T")
Row = tuple[Any, ...]

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")

CONFLICT_STATE = "HR409"
"""The SQLSTATE ``handrail_conflict()`` raises: an append's expected head or epoch is stale."""

LOST_LOCK_STATE = "HR410"
"""The SQLSTATE of a claim made while no session holds the saver's liveness lock."""

INDEXED_BYTES = 200
"""The longest metadata key, and string value, ``pending_metadata`` indexes (UTF-8 bytes).

Short enough that an index entry (key, value and page key) stays far below B-tree's
limit of about 2.7 kB, whatever the thread's id; changing it needs a migration.
"""


@dataclass(frozen=True, slots=True)
class Query:
    sql: str
    params: Sequence[Any] | Mapping[str, Any] | None = ()  # None: ``%`` is literal (migrations)


@dataclass(frozen=True, slots=True)
class Result:
    rows: list[Row]
    rowcount: int


Op = Generator[list[Query], list[Result], T]

BEGIN = Query("BEGIN")
COMMIT = Query("COMMIT")


class Tables:
    """The tables of one schema, and the SQL the operations share. Nothing here performs I/O."""

    def __init__(self, schema: str | None, *, probe_locks: bool = False) -> None:
        """``probe_locks``: the liveness locks are held by other sessions than the ones
        that run these statements (a saver on a pool, whose lock has a session of its
        own), so a lock is checked by trying it (:func:`_probe`) instead of reading
        ``pg_locks`` (:func:`_alive`), which copies the server's whole lock table."""
        if schema is not None and not _NAME_RE.match(schema):
            raise ConfigurationError(f"schema must be a plain SQL identifier, got {schema!r}")
        self.schema = schema
        self.prefix = p = (f'"{schema}".' if schema else "") + "handrail_"
        self.threads, self.events, self.pending = f"{p}threads", f"{p}events", f"{p}pending"
        self.pending_tools, self.runs, self.versions = f"{p}pending_tools", f"{p}runs", f"{p}schema_version"
        self.pending_metadata, self.readings = f"{p}pending_metadata", f"{p}readings"
        self.feed, self.deletions = f"{p}feed", f"{p}deletions"
        self.lock_key = zlib.crc32((schema or "").encode()) - 2**31
        # the feed's sealer lock (``_feed.py``): one 64-bit key per schema, apart from liveness keys
        self._feed_key = 2**62 + 1 + zlib.crc32(b"handrail feed " + (schema or "").encode())
        check = _probe if probe_locks else _alive

        def alive(key: str) -> str:  # a run row without an owner (a queued thread's) is not alive
            return f"({key} IS NOT NULL AND {check(key)})"

        # a thread row's columns (``read._record`` reads them), with its pending rows as JSON
        self.record_columns = (
            "t.thread_id, t.head_seq, t.status, t.epoch, t.created_at, t.updated_at, "
            "t.metadata::text, CASE WHEN t.pending_count > 0 THEN (SELECT json_agg(json_build_array("
            "p.interrupt_id, p.kind, p.tools, p.created_at, encode(p.payload, 'base64'), p.position, "
            f"encode(p.seal, 'base64')) ORDER BY p.position)::text FROM {p}pending AS p "
            "WHERE p.thread_id = t.thread_id) END, t.pending_count, t.head_hash, t.seal"
        )
        self.record_select = f"SELECT {self.record_columns} FROM {p}threads AS t"
        self._alive = alive
        self._append_sql: dict[tuple[Any, ...], str] = {}
        # true, or (calling handrail_fail) an error: a claim must not outlive its lock
        self._lock_held = (
            f"(SELECT CASE WHEN {alive('%(owner)s::bigint')} THEN true "
            f"ELSE {p}fail('{LOST_LOCK_STATE}', 'handrail: the liveness lock of this saver is not held') END)"
        )
        self._claim_sql = (  # forget the thread's dead runs, claim this one, while our lock is held
            f"WITH dead AS (DELETE FROM {self.runs} AS r WHERE r.thread_id = %(thread)s "
            f"AND r.run_id <> %(claim)s AND NOT {alive('r.owner_key')}) "
            f"INSERT INTO {self.runs} (thread_id, run_id, owner_key, claimed_at) "
            f"SELECT %(thread)s, %(claim)s, %(owner)s, %(now)s WHERE {self._lock_held} "
            "ON CONFLICT (thread_id, run_id) DO UPDATE SET owner_key = excluded.owner_key"
        )
        self._release_sql = f"DELETE FROM {self.runs} WHERE thread_id = %s AND run_id = %s"

    @property
    def migrations(self) -> tuple[Any, ...]:
        """The schema, version by version (see :mod:`handrail.checkpoint.postgres._schema`)."""
        from handrail.checkpoint.postgres._schema import migrations

        return migrations(self.prefix)


def _bare(prefix: str) -> str:
    """Index names live in the table's schema: the prefix without the schema part."""
    return prefix.rsplit(".", 1)[-1]


def _probe(key: str) -> str:
    """Whether another session holds the advisory lock on ``key``: try to share it.

    The try fails at once against an owner's exclusive lock; if it succeeds, the shared
    lock lasts until the statement's commit, and nobody holds the key as an owner. Only
    right where the checking session cannot be the owner itself (its own lock would not
    stop it).
    """
    return f"NOT pg_catalog.pg_try_advisory_xact_lock_shared({key})"


def _alive(key: str) -> str:
    """Whether some session holds the advisory lock on ``key`` (an SQL expression)."""
    return (
        "EXISTS (SELECT 1 FROM pg_catalog.pg_locks AS l WHERE l.locktype = 'advisory' "
        "AND l.granted AND l.objsubid = 1 AND l.database = (SELECT oid FROM pg_catalog.pg_database "
        "WHERE datname = current_database()) "
        f"AND l.classid::bigint = ({key} >> 32) "
        f"AND l.objid::bigint = ({key} & 4294967295))"
    )
