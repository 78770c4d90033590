"""The SQL of the Postgres savers, with no I/O (see ``postgres.py`` for the drivers).

Every operation is a generator that yields batches of :class:`Query` and receives
their :class:`Result` s; ``postgres.py`` performs it with psycopg's sync or async
driver, in one transaction, each batch in one pipeline round trip. So the SQL and the
logic around it are written once for :class:`~handrail.checkpoint.postgres.PostgresSaver`
and :class:`~handrail.checkpoint.postgres.AsyncPostgresSaver`.
"""

from __future__ import annotations

import base64
import re
import time
import zlib
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from handrail.checkpoint._records import (
    Migration,
    conflict,
    damaged,
    decode_metadata,
    encode_metadata,
    encode_tools,
    event_from_row,
    pending_from_row,
    record_from_row,
)
from handrail.checkpoint.base import (
    PendingFilter,
    PendingItem,
    PendingReview,
    StoredEvent,
    ThreadFilter,
    ThreadRead,
    ThreadRecord,
)
from handrail.checkpoint.serde import dumps
from handrail.errors import ConfigurationError

__all__ = ["SNAPSHOT", "Op", "Queries", "Query", "Result"]

T = TypeVar("T")
Row = tuple[Any, ...]

_LOCK_SPACE = 0x68726C00  # "hrl\0": the first key of setup's two-key advisory lock
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")


def _migrations(p: str) -> tuple[Migration, ...]:
    """The schema, version by version; ``p`` is the table prefix (schema and ``handrail_``)."""
    return (
        Migration(
            1,
            "event logs, thread rows, the pending-review inbox and run claims",
            (
                f"""CREATE TABLE {p}threads (
                    thread_id     text COLLATE "C" PRIMARY KEY,
                    head_seq      bigint NOT NULL,
                    status        text NOT NULL,
                    epoch         text NOT NULL,
                    created_at    double precision NOT NULL,
                    updated_at    double precision NOT NULL,
                    metadata      jsonb NOT NULL,
                    pending_count integer NOT NULL DEFAULT 0
                )""",
                f"CREATE INDEX {_bare(p)}threads_by_update ON {p}threads (updated_at DESC, thread_id)",
                f"CREATE INDEX {_bare(p)}threads_by_status ON {p}threads "
                "(status, updated_at DESC, thread_id)",
                f"CREATE INDEX {_bare(p)}threads_by_metadata ON {p}threads "
                "USING gin (metadata jsonb_path_ops)",
                f"""CREATE TABLE {p}events (
                    thread_id  text COLLATE "C" NOT NULL,
                    seq        bigint NOT NULL,
                    kind       text NOT NULL,
                    created_at double precision NOT NULL,
                    payload    bytea NOT NULL,
                    PRIMARY KEY (thread_id, seq)
                )""",
                f"""CREATE TABLE {p}pending (
                    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    thread_id    text COLLATE "C" NOT NULL,
                    interrupt_id text COLLATE "C" NOT NULL,
                    position     integer NOT NULL,
                    kind         text NOT NULL,
                    tools        text[] NOT NULL,
                    created_at   double precision NOT NULL,
                    payload      bytea NOT NULL,
                    UNIQUE (thread_id, interrupt_id)
                )""",
                f"CREATE INDEX {_bare(p)}pending_inbox ON {p}pending (created_at, thread_id, interrupt_id)",
                f"CREATE INDEX {_bare(p)}pending_by_kind ON {p}pending "
                "(kind, created_at, thread_id, interrupt_id)",
                f"""CREATE TABLE {p}pending_tools (
                    tool         text NOT NULL,
                    created_at   double precision NOT NULL,
                    thread_id    text COLLATE "C" NOT NULL,
                    interrupt_id text COLLATE "C" NOT NULL,
                    pending_id   bigint NOT NULL,
                    PRIMARY KEY (tool, created_at, thread_id, interrupt_id)
                )""",
                f"CREATE INDEX {_bare(p)}pending_tools_by_thread ON {p}pending_tools (thread_id)",
                f"""CREATE TABLE {p}runs (
                    thread_id  text COLLATE "C" NOT NULL,
                    run_id     text NOT NULL,
                    owner_key  bigint NOT NULL,
                    claimed_at double precision NOT NULL,
                    PRIMARY KEY (thread_id, run_id)
                )""",
            ),
        ),
    )


def _bare(prefix: str) -> str:
    """Index names live in the table's schema: the prefix without the schema part."""
    return prefix.rsplit(".", 1)[-1]


@dataclass(frozen=True, slots=True)
class Query:
    sql: str
    params: Sequence[Any] = ()
    many: Sequence[Sequence[Any]] | None = None


@dataclass(frozen=True, slots=True)
class Result:
    rows: list[Row]
    rowcount: int


Op = Generator[list[Query], list[Result], T]

SNAPSHOT = Query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")


class Queries:
    """The SQL of every operation, for one schema. Nothing here performs I/O."""

    def __init__(self, schema: str | None) -> None:
        if schema is not None and not _NAME_RE.match(schema):
            raise ConfigurationError(f"schema must be a plain SQL identifier, got {schema!r}")
        self.schema = schema
        self.prefix = p = (f'"{schema}".' if schema else "") + "handrail_"
        self.migrations = _migrations(p)
        self.threads, self.events, self.pending = f"{p}threads", f"{p}events", f"{p}pending"
        self.pending_tools, self.runs, self.versions = f"{p}pending_tools", f"{p}runs", f"{p}schema_version"
        self.lock_key = zlib.crc32((schema or "").encode()) - 2**31
        self.record_select = (
            f"SELECT t.thread_id, t.head_seq, t.status, t.epoch, t.created_at, t.updated_at, "
            f"t.metadata::text, CASE WHEN t.pending_count > 0 THEN (SELECT json_agg(json_build_array("
            f"p.interrupt_id, p.kind, p.tools, p.created_at, encode(p.payload, 'base64')) "
            f"ORDER BY p.position)::text FROM {p}pending AS p WHERE p.thread_id = t.thread_id) END "
            f"FROM {p}threads AS t"
        )

    # Schema --------------------------------------------------------------------------------
    def version(self) -> Op[int]:
        # Read pg_class with the statement's snapshot: to_regclass() may answer from a
        # stale catalog cache, blind to the table another session created meanwhile.
        (result,) = yield [
            Query(
                "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n "
                "ON n.oid = c.relnamespace WHERE c.relname = 'handrail_schema_version' "
                "AND n.nspname = COALESCE(%s, current_schema()))",
                (self.schema,),
            )
        ]
        if not result.rows[0][0]:
            return 0
        (result,) = yield [Query(f"SELECT COALESCE(MAX(version), 0) FROM {self.versions}")]
        return int(result.rows[0][0])

    def setup(self, migrations: Sequence[Migration]) -> Op[int]:
        yield [Query("SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_SPACE, self.lock_key))]
        current = yield from self.version()
        latest = migrations[-1].version
        if current > latest:
            raise ConfigurationError(
                f"the PostgreSQL schema has handrail schema version {current}, newer than this "
                f"handrail knows ({latest}); upgrade handrail"
            )
        if current == 0:
            create = [Query(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')] if self.schema else []
            yield [
                *create,
                Query(
                    f"CREATE TABLE IF NOT EXISTS {self.versions} (version integer PRIMARY KEY, "
                    "description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
                ),
            ]
        for migration in migrations:
            if migration.version > current:
                yield [
                    *(Query(statement) for statement in migration.statements),
                    Query(
                        f"INSERT INTO {self.versions} (version, description) VALUES (%s, %s)",
                        (migration.version, migration.description),
                    ),
                ]
        return latest

    # Writing ---------------------------------------------------------------------------------
    def append(
        self, thread_id: str, events: Sequence[StoredEvent], expected_seq: int, record: ThreadRecord
    ) -> Op[None]:
        row = (
            record.head_seq,
            record.status,
            record.epoch,
            record.created_at,
            record.updated_at,
            encode_metadata(record.metadata, thread_id).decode(),
            len(record.pending),
        )
        batch: list[Query] = []
        if expected_seq == 0:
            batch.append(
                Query(
                    f"INSERT INTO {self.threads} (head_seq, status, epoch, created_at, updated_at, "
                    "metadata, pending_count, thread_id) VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s, %s) "
                    "ON CONFLICT (thread_id) DO NOTHING",
                    (*row, thread_id),
                )
            )
        else:
            batch += [
                Query(
                    f"UPDATE {self.threads} SET head_seq = %s, status = %s, epoch = %s, created_at = %s, "
                    "updated_at = %s, metadata = %s::jsonb, pending_count = %s "
                    "WHERE thread_id = %s AND head_seq = %s",
                    (*row, thread_id, expected_seq),
                ),
                Query(f"DELETE FROM {self.pending} WHERE thread_id = %s", (thread_id,)),
                Query(f"DELETE FROM {self.pending_tools} WHERE thread_id = %s", (thread_id,)),
            ]
        if events:
            batch.append(
                Query(
                    f"INSERT INTO {self.events} (thread_id, seq, kind, created_at, payload) "
                    "VALUES (%s, %s, %s, %s, %s)",
                    many=[(thread_id, e.seq, e.kind, e.created_at, e.payload) for e in events],
                )
            )
        pending = [
            (thread_id, r.interrupt_id, i, r.kind, encode_tools(r.tools), r.created_at, r.payload)
            for i, r in enumerate(record.pending)
        ]
        if pending:
            batch += [
                Query(
                    f"INSERT INTO {self.pending} (thread_id, interrupt_id, position, kind, tools, "
                    "created_at, payload) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    many=pending,
                ),
                Query(
                    f"INSERT INTO {self.pending_tools} "
                    "(tool, created_at, thread_id, interrupt_id, pending_id) "
                    "SELECT DISTINCT t.tool, p.created_at, p.thread_id, p.interrupt_id, p.id "
                    f"FROM {self.pending} AS p, unnest(p.tools) AS t (tool) WHERE p.thread_id = %s",
                    (thread_id,),
                ),
            ]
        results = yield batch
        if results[0].rowcount != 1:
            (found,) = yield [
                Query(f"SELECT head_seq FROM {self.threads} WHERE thread_id = %s", (thread_id,))
            ]
            raise conflict(thread_id, expected_seq, found.rows[0][0] if found.rows else 0)

    def prune(
        self, thread_id: str, upto_seq: int, snapshot: StoredEvent, keep_kinds: frozenset[str]
    ) -> Op[int]:
        replaced, dropped = yield [
            Query(
                f"UPDATE {self.events} SET kind = %s, created_at = %s, payload = %s "
                "WHERE thread_id = %s AND seq = %s",
                (snapshot.kind, snapshot.created_at, snapshot.payload, thread_id, upto_seq),
            ),
            Query(
                f"DELETE FROM {self.events} WHERE thread_id = %s AND seq < %s AND NOT (kind = ANY(%s))",
                (thread_id, upto_seq, sorted(keep_kinds)),
            ),
        ]
        if replaced.rowcount != 1:
            raise ValueError(f"thread {thread_id!r} has no event {upto_seq} to replace with a snapshot")
        return dropped.rowcount

    def delete_thread(self, thread_id: str) -> Op[bool]:
        tables = (self.events, self.pending, self.pending_tools, self.runs)
        results = yield [
            Query(f"DELETE FROM {self.threads} WHERE thread_id = %s", (thread_id,)),
            *(Query(f"DELETE FROM {table} WHERE thread_id = %s", (thread_id,)) for table in tables),
        ]
        return results[0].rowcount > 0

    # Reading ---------------------------------------------------------------------------------
    def read(self, thread_id: str, after_seq: int, upto_seq: int | None) -> Op[ThreadRead]:
        events_sql = (
            f"SELECT seq, kind, created_at, payload FROM {self.events} WHERE thread_id = %s AND seq > %s"
        )
        params: list[Any] = [thread_id, after_seq]
        if upto_seq is not None:
            events_sql += " AND seq <= %s"
            params.append(upto_seq)
        _, records, events = yield [
            SNAPSHOT,
            Query(self.record_select + " WHERE t.thread_id = %s", (thread_id,)),
            Query(events_sql + " ORDER BY seq", params),
        ]
        record = _record(records.rows[0]) if records.rows else None
        return ThreadRead(record=record, events=[event_from_row(thread_id, *row) for row in events.rows])

    def get_thread(self, thread_id: str) -> Op[ThreadRecord | None]:
        (result,) = yield [Query(self.record_select + " WHERE t.thread_id = %s", (thread_id,))]
        return _record(result.rows[0]) if result.rows else None

    def list_threads(self, filter: ThreadFilter) -> Op[list[ThreadRecord]]:
        where: list[str] = []
        params: list[Any] = []
        if filter.status is not None:
            where.append("t.status = %s")
            params.append(filter.status)
        if filter.updated_after is not None:
            where.append("t.updated_at > %s")
            params.append(filter.updated_after)
        if filter.updated_before is not None:
            where.append("t.updated_at < %s")
            params.append(filter.updated_before)
        if filter.metadata:
            where += _metadata_clauses(filter.metadata, params)
        sql = self.record_select + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY t.updated_at DESC, t.thread_id LIMIT %s OFFSET %s"
        params += [max(filter.limit, 0), max(filter.offset, 0)]
        (result,) = yield [Query(sql, params)]
        return [_record(row) for row in result.rows]

    def pending_query(self, filter: PendingFilter, now: float) -> Query:
        """The inbox query: an index range in ``(created_at, thread_id, interrupt_id)`` order."""
        where: list[str] = []
        params: list[Any] = []
        # ``o`` is the table whose index orders the page: the tool index when a tool is named
        if filter.tool is not None:
            o = "o"
            # joined on one column: the planner misjudges a two-column join as one row
            source = f"{self.pending_tools} AS o JOIN {self.pending} AS p ON p.id = o.pending_id"
            where.append("o.tool = %s")
            params.append(filter.tool)
        else:
            o = "p"
            source = f"{self.pending} AS p"
        if filter.kind is not None:
            where.append("p.kind = %s")
            params.append(filter.kind)
        if filter.thread_id is not None:
            where.append(f"{o}.thread_id = %s")
            params.append(filter.thread_id)
        if filter.older_than is not None:
            where.append(f"{o}.created_at <= %s")
            params.append(now - filter.older_than)
        if filter.after is not None:
            where.append(f"({o}.created_at, {o}.thread_id, {o}.interrupt_id) > (%s, %s, %s)")
            params += list(filter.after)
        if filter.metadata:
            where += _metadata_clauses(filter.metadata, params)
        sql = (
            "SELECT p.thread_id, p.interrupt_id, p.kind, p.tools, p.created_at, p.payload, "
            f"t.metadata::text FROM {source} JOIN {self.threads} AS t ON t.thread_id = p.thread_id"
            + (" WHERE " + " AND ".join(where) if where else "")
            + f" ORDER BY {o}.created_at, {o}.thread_id, {o}.interrupt_id LIMIT %s"
        )
        params.append(max(filter.limit, 0))
        return Query(sql, params)

    def list_pending(self, filter: PendingFilter) -> Op[list[PendingItem]]:
        (result,) = yield [self.pending_query(filter, time.time())]
        metadata_of: dict[str, Any] = {}
        items = []
        for *pending, metadata in result.rows:
            thread_id = pending[0]
            if thread_id not in metadata_of:
                metadata_of[thread_id] = decode_metadata(metadata, thread_id)
            items.append(
                PendingItem(
                    thread_id=thread_id, review=pending_from_row(*pending), metadata=metadata_of[thread_id]
                )
            )
        return items

    # Run liveness ------------------------------------------------------------------------
    def _alive(self, run: str = "r") -> str:
        return (
            "EXISTS (SELECT 1 FROM pg_catalog.pg_locks AS l WHERE l.locktype = 'advisory' "
            "AND l.granted AND l.objsubid = 1 AND l.database = (SELECT oid FROM pg_catalog.pg_database "
            "WHERE datname = current_database()) "
            f"AND l.classid::bigint = ({run}.owner_key >> 32) "
            f"AND l.objid::bigint = ({run}.owner_key & 4294967295))"
        )

    def claim_run(self, thread_id: str, run_id: str, owner_key: int) -> Op[None]:
        yield [
            Query(
                f"DELETE FROM {self.runs} AS r WHERE r.thread_id = %s AND NOT {self._alive()}", (thread_id,)
            ),
            Query(
                f"INSERT INTO {self.runs} (thread_id, run_id, owner_key, claimed_at) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (thread_id, run_id) DO UPDATE SET owner_key = excluded.owner_key",
                (thread_id, run_id, owner_key, time.time()),
            ),
        ]

    def reclaim_runs(self, runs: Sequence[tuple[str, str]], owner_key: int) -> Op[None]:
        if runs:
            yield [
                Query(
                    f"INSERT INTO {self.runs} (thread_id, run_id, owner_key, claimed_at) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT (thread_id, run_id) "
                    "DO UPDATE SET owner_key = excluded.owner_key",
                    many=[(thread, run, owner_key, time.time()) for thread, run in runs],
                )
            ]

    def release_run(self, thread_id: str, run_id: str) -> Op[None]:
        yield [Query(f"DELETE FROM {self.runs} WHERE thread_id = %s AND run_id = %s", (thread_id, run_id))]

    def forget_owner(self, owner_key: int) -> Op[None]:
        yield [Query(f"DELETE FROM {self.runs} WHERE owner_key = %s", (owner_key,))]

    def runs_alive(self, thread_id: str) -> Op[set[str]]:
        (result,) = yield [
            Query(
                f"SELECT r.run_id FROM {self.runs} AS r WHERE r.thread_id = %s AND {self._alive()}",
                (thread_id,),
            )
        ]
        return {row[0] for row in result.rows}


def _metadata_clauses(metadata: Any, params: list[Any]) -> list[str]:
    # ``@>`` lets the GIN index narrow the rows; the per-key equality makes the match
    # exact (containment alone would also accept a longer list or a larger object).
    clauses = ["t.metadata @> %s::jsonb"]
    params.append(dumps(dict(metadata), where="the metadata filter").decode())
    for key, value in metadata.items():
        clauses.append("t.metadata -> %s = %s::jsonb")
        params += [str(key), dumps(value, where="the metadata filter").decode()]
    return clauses


def _record(row: Row) -> ThreadRecord:
    thread_id = row[0]
    pending: list[PendingReview] = []
    if row[7] is not None:
        try:
            items = orjson.loads(row[7])
            for interrupt_id, kind, tools, created_at, payload in items:
                pending.append(
                    pending_from_row(
                        thread_id, interrupt_id, kind, tools, created_at, base64.b64decode(payload)
                    )
                )
        except (ValueError, TypeError) as exc:
            raise damaged(thread_id, "thread record", f"its pending reviews cannot be read ({exc})") from None
    _, head_seq, status, epoch, created_at, updated_at, metadata = row[:7]
    return record_from_row(thread_id, head_seq, status, epoch, created_at, updated_at, metadata, pending)
