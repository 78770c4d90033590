"""The SQL of the Postgres savers, with no I/O (see ``postgres.py`` for the drivers).

Every operation is a generator that yields batches of :class:`Query` and receives
their :class:`Result` s; ``postgres.py`` sends each batch in one round trip (several
statements in one pipeline, with one sync). So the SQL and the logic around it are
written once for :class:`~handrail.checkpoint.postgres.PostgresSaver` and
:class:`~handrail.checkpoint.postgres.AsyncPostgresSaver`.

Every operation but :meth:`Queries.setup` is **one statement**: one round trip, one
transaction, nothing to roll back. Decisions that would otherwise need a result in
Python first are made by the server: an append whose expected head (or epoch) is stale
calls ``handrail_conflict()``, which raises SQLSTATE :data:`CONFLICT_STATE`, and a
claim made while the saver's liveness lock is gone calls ``handrail_fail()``
(:data:`LOST_LOCK_STATE`); either way the statement saves nothing. Only setup looks at
results inside its transaction, so its batches bring their own ``BEGIN``/``COMMIT``.
"""

from __future__ import annotations

import base64
import itertools
import math
import re
import secrets
import struct
import time
import zlib
from collections.abc import Callable, Generator, Mapping, Sequence
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
    epoch_conflict,
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
from handrail.errors import ConfigurationError, ConflictError

__all__ = [
    "BEGIN",
    "COMMIT",
    "CONFLICT_STATE",
    "LOST_LOCK_STATE",
    "Op",
    "PostgresMigration",
    "Queries",
    "Query",
    "Result",
    "page_key",
]

T = TypeVar("T")
Row = tuple[Any, ...]

_LOCK_SPACE = 0x68726C00  # "hrl\0": the first key of setup's two-key advisory lock
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

# Which top-level metadata entries get a ``pending_metadata`` row: a key and a scalar
# value, strings and keys up to INDEXED_BYTES. ``_indexed`` is the same rule in Python,
# for the filter side; both sides must agree, or a metadata filter would miss rows.
_INDEXED_SQL = (
    f"octet_length(convert_to(e.key, 'UTF8')) <= {INDEXED_BYTES} AND "
    "(jsonb_typeof(e.value) IN ('number', 'boolean', 'null') OR (jsonb_typeof(e.value) = 'string' "
    f"AND octet_length(convert_to(e.value #>> '{{}}', 'UTF8')) <= {INDEXED_BYTES}))"
)


# The bits of a float (-0.0 made 0.0) as a signed 64-bit integer, for page_key().
_BITS = "('x' || encode(float8send(p_at + 0.0), 'hex'))::bit(64)::bigint"


# An append lists up to _LISTED_EVENTS events, and _LISTED_REVIEWS pending reviews, in
# VALUES, one parameter per field: psycopg dumps a scalar in C but an array through its
# Python list dumper (several times slower), and the server reads VALUES rows without
# unpacking arrays. Longer batches (rare) come in arrays, so that appends have few shapes
# of SQL (each one is prepared and planned apart, on each connection). psycopg parses a
# statement once, and caches it, only if it has at most _CACHED_PARAMS parameters (and
# fewer than 4096 bytes): parsing it on every call costs more than dumping the arrays.
# Listed events always fit (9 parameters, 4 for a claim and release, 4 per event); the
# reviews are listed only if they fit too.
_LISTED_EVENTS = 8
_LISTED_REVIEWS = 4
_CACHED_PARAMS = 50
_IN_ARRAYS = -1  # an append's shape: its events (or reviews) in arrays, however many
_EVENT_KEYS = tuple((f"e{n}s", f"e{n}k", f"e{n}t", f"e{n}p") for n in range(_LISTED_EVENTS))
_REVIEW_FIELDS = 6  # interrupt id, kind, tools, created_at, payload, page key
_REVIEW_KEYS = tuple(tuple(f"r{n}{field}" for field in "iklapg") for n in range(_LISTED_REVIEWS))


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
        Migration(
            2,
            "appends in one round trip, the inbox's metadata index, page keys",
            (
                # Called by an append whose expected head or epoch is stale: raise, so the
                # transaction (sent with its COMMIT in one pipeline) saves nothing.
                f"""CREATE OR REPLACE FUNCTION {p}conflict(p_thread text, p_expected bigint, p_epoch text)
                RETURNS boolean LANGUAGE plpgsql VOLATILE AS $conflict$
                DECLARE
                    found_head bigint;
                    found_epoch text;
                BEGIN
                    SELECT t.head_seq, t.epoch INTO found_head, found_epoch
                    FROM {p}threads AS t WHERE t.thread_id = p_thread;
                    RAISE EXCEPTION USING
                        ERRCODE = '{CONFLICT_STATE}',
                        MESSAGE = 'handrail: thread ' || quote_literal(p_thread) || ' moved on',
                        DETAIL = json_build_array(found_head, found_epoch, p_expected, p_epoch)::text;
                END
                $conflict$""",
                # Called by a claim when no session holds the saver's liveness lock: the
                # claim would be dead on arrival, so nothing commits and the saver locks again.
                f"""CREATE OR REPLACE FUNCTION {p}fail(p_state text, p_message text)
                RETURNS boolean LANGUAGE plpgsql VOLATILE AS $fail$
                BEGIN
                    RAISE EXCEPTION USING ERRCODE = p_state, MESSAGE = p_message;
                END
                $fail$""",
                # The inbox order as one sortable value: (created_at, thread_id, interrupt_id)
                # as bytes that compare the same way (the float's bits made order-preserving,
                # then the ids in UTF-8, split by a NUL, which text cannot hold). The saver
                # computes the same bytes in Python (page_key below); this is for SQL.
                f"""CREATE OR REPLACE FUNCTION {p}page_key(
                    p_at double precision, p_thread text, p_interrupt text
                ) RETURNS bytea LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $page_key$
                    SELECT int8send(
                        CASE WHEN {_BITS} >= 0 THEN {_BITS} # (-9223372036854775808) ELSE ~{_BITS} END
                    ) || convert_to(p_thread, 'UTF8') || '\\x00'::bytea || convert_to(p_interrupt, 'UTF8')
                $page_key$""",
                # The tool index joins on that key, so that the planner can combine it with
                # the metadata index below in page order (a merge join on one column).
                f"ALTER TABLE {p}pending_tools ADD COLUMN page_key bytea",
                f"UPDATE {p}pending_tools SET page_key = {p}page_key(created_at, thread_id, interrupt_id)",
                f"ALTER TABLE {p}pending_tools ALTER COLUMN page_key SET NOT NULL",
                f"ALTER TABLE {p}pending_tools DROP CONSTRAINT {_bare(p)}pending_tools_pkey",
                f"ALTER TABLE {p}pending_tools ADD CONSTRAINT {_bare(p)}pending_tools_pkey "
                "PRIMARY KEY (tool, page_key)",
                # One row per pending review and indexed metadata entry of its thread (see
                # _INDEXED_SQL), so that a metadata filter walks an index in page order.
                f"""CREATE TABLE {p}pending_metadata (
                    key        text COLLATE "C" NOT NULL,
                    value      jsonb NOT NULL,
                    page_key   bytea NOT NULL,
                    thread_id  text COLLATE "C" NOT NULL,
                    pending_id bigint NOT NULL,
                    PRIMARY KEY (key, value, page_key)
                )""",
                f"CREATE INDEX {_bare(p)}pending_metadata_by_thread ON {p}pending_metadata (thread_id)",
                f"INSERT INTO {p}pending_metadata (key, value, page_key, thread_id, pending_id) "
                f"SELECT e.key, e.value, {p}page_key(p.created_at, p.thread_id, p.interrupt_id), "
                f"p.thread_id, p.id FROM {p}pending AS p JOIN {p}threads AS t ON t.thread_id = p.thread_id, "
                f"jsonb_each(t.metadata) AS e WHERE {_INDEXED_SQL}",
            ),
        ),
        Migration(
            3,
            "each thread's saved reading (its state at an event), which a new process loads",
            (
                f"""CREATE TABLE {p}readings (
                    thread_id  text COLLATE "C" PRIMARY KEY,
                    seq        bigint NOT NULL,
                    created_at double precision NOT NULL,
                    payload    bytea NOT NULL
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
    params: Sequence[Any] | Mapping[str, Any] | None = ()  # None: ``%`` is literal (migrations)


@dataclass(frozen=True, slots=True)
class Result:
    rows: list[Row]
    rowcount: int


Op = Generator[list[Query], list[Result], T]


@dataclass(frozen=True, slots=True)
class PostgresMigration(Migration):
    """A migration with a step in Python, run after its SQL, in the migration's transaction.

    ``step(prefix)`` returns an operation: a generator that yields batches of
    :class:`Query` (``prefix`` names the tables: ``f"{prefix}events"``) and receives
    their :class:`Result` s, as every operation here does, so that both savers run it
    (each batch in one round trip). It runs once, in version order with the SQL
    migrations, inside the transaction of :meth:`Queries.setup`: if it raises, nothing
    of the setup is saved and the schema keeps its version.

    Example (rewrite every payload)::

        def step(prefix: str) -> Op[None]:
            (rows,) = yield [Query(f"SELECT thread_id, seq, payload FROM {prefix}events")]
            for thread_id, seq, payload in rows.rows:
                yield [Query(f"UPDATE {prefix}events SET payload = %s WHERE thread_id = %s AND seq = %s",
                             (rewrite(payload), thread_id, seq))]

        PostgresMigration(4, "rewrite payloads", (), step)
    """

    step: Callable[[str], Op[None]] | None = None


BEGIN = Query("BEGIN")
COMMIT = Query("COMMIT")


class Queries:
    """The SQL of every operation, for one schema. Nothing here performs I/O."""

    def __init__(self, schema: str | None, *, probe_locks: bool = False) -> None:
        """``probe_locks``: the liveness locks are held by other sessions than the ones
        that run these statements (a saver on a pool, whose lock has a session of its
        own), so a lock is checked by trying it (:func:`_probe`) instead of reading
        ``pg_locks`` (:func:`_alive`), which copies the server's whole lock table."""
        if schema is not None and not _NAME_RE.match(schema):
            raise ConfigurationError(f"schema must be a plain SQL identifier, got {schema!r}")
        self.schema = schema
        self.prefix = p = (f'"{schema}".' if schema else "") + "handrail_"
        self.migrations = _migrations(p)
        self.threads, self.events, self.pending = f"{p}threads", f"{p}events", f"{p}pending"
        self.pending_tools, self.runs, self.versions = f"{p}pending_tools", f"{p}runs", f"{p}schema_version"
        self.pending_metadata, self.readings = f"{p}pending_metadata", f"{p}readings"
        self.lock_key = zlib.crc32((schema or "").encode()) - 2**31
        alive = _probe if probe_locks else _alive
        self.record_columns = (
            "t.thread_id, t.head_seq, t.status, t.epoch, t.created_at, t.updated_at, "
            "t.metadata::text, CASE WHEN t.pending_count > 0 THEN (SELECT json_agg(json_build_array("
            "p.interrupt_id, p.kind, p.tools, p.created_at, encode(p.payload, 'base64')) "
            f"ORDER BY p.position)::text FROM {p}pending AS p WHERE p.thread_id = t.thread_id) END"
        )
        self.record_select = f"SELECT {self.record_columns} FROM {p}threads AS t"
        self._alive = alive
        self._append_sql: dict[tuple[bool, int, int, int, bool, bool, int, bool], str] = {}
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
        """Migrate in one transaction, under a transaction-scoped advisory lock."""
        yield [BEGIN, Query("SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_SPACE, self.lock_key))]
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
                statements = [Query(statement, None) for statement in migration.statements]
                if isinstance(migration, PostgresMigration) and migration.step is not None:
                    if statements:
                        yield statements
                    yield from migration.step(self.prefix)  # in the same transaction, after its SQL
                    statements = []
                yield [
                    *statements,
                    Query(
                        f"INSERT INTO {self.versions} (version, description) VALUES (%s, %s)",
                        (migration.version, migration.description),
                    ),
                ]
        yield [COMMIT]
        return latest

    # Writing ---------------------------------------------------------------------------------
    def append(
        self,
        thread_id: str,
        events: Sequence[StoredEvent],
        expected_seq: int,
        record: ThreadRecord,
        *,
        claim: tuple[str, int] | None = None,
        release: str | None = None,
        durable: bool = True,
        reading: StoredEvent | None = None,
        clear: int = 2,
    ) -> Op[None]:
        """One statement: move the head (or conflict), then write everything else.

        ``claim`` is ``(run_id, owner_key)``: the run is claimed, then ``release`` released.
        ``reading`` takes the place of the thread's saved reading. ``clear`` is what the
        thread may hold at ``expected_seq``: 2, pending reviews with their tool and
        metadata rows; 1, reviews and tool rows but no metadata rows (its metadata was
        empty); 0, no review. The saver knows it from its own last append (if another
        writer moved the thread since, the head check fails), so the statement leaves
        out the deletes that would find nothing.
        ``durable=False``: the statement sets ``synchronous_commit`` off for its own
        transaction, so its commit does not wait for the WAL flush (the server keeps it
        if our process dies; WAL order makes the next durable commit flush it too).
        """
        params: dict[str, Any] = {
            "thread": thread_id,
            "expected": expected_seq,
            "epoch": record.epoch,
            "head": record.head_seq,
            "status": record.status,
            "created": record.created_at,
            "updated": record.updated_at,
            "metadata": encode_metadata(record.metadata, thread_id).decode(),
            "count": len(record.pending),
        }
        claiming = 0  # 1: claim a run, 2: claim and release the same run
        if claim is not None:
            params.update(claim=claim[0], owner=claim[1], now=time.time())
            claiming = 2 if claim[0] == release else 1
        if release is not None:
            params["release"] = release
        if reading is not None:
            params.update(reading_seq=reading.seq, reading_at=reading.created_at, reading=reading.payload)
        listed_events = len(events) if len(events) <= _LISTED_EVENTS else _IN_ARRAYS
        if listed_events != _IN_ARRAYS:
            for (seq, kind, at, payload), event in zip(_EVENT_KEYS, events, strict=False):
                params[seq] = event.seq
                params[kind] = event.kind
                params[at] = event.created_at
                params[payload] = event.payload
        else:
            params.update(
                seqs=[e.seq for e in events],
                kinds=[e.kind for e in events],
                times=[e.created_at for e in events],
                payloads=[e.payload for e in events],
            )
        reviews = record.pending
        listed_reviews = len(reviews)  # or in arrays, past psycopg's cache (see _CACHED_PARAMS)
        if len(reviews) > _LISTED_REVIEWS or len(params) + _REVIEW_FIELDS * len(reviews) > _CACHED_PARAMS:
            listed_reviews = _IN_ARRAYS
            params.update(
                ids=[r.interrupt_id for r in reviews],
                review_kinds=[r.kind for r in reviews],
                tools=[orjson.dumps(encode_tools(r.tools)).decode() for r in reviews],
                review_times=[r.created_at for r in reviews],
                review_payloads=[r.payload for r in reviews],
                review_keys=[page_key(r.created_at, thread_id, r.interrupt_id) for r in reviews],
            )
        else:
            for (interrupt, kind, tools, at, payload, key), review in zip(
                _REVIEW_KEYS, reviews, strict=False
            ):
                params[interrupt] = review.interrupt_id
                params[kind] = review.kind
                params[tools] = orjson.dumps(encode_tools(review.tools)).decode()
                params[at] = review.created_at
                params[payload] = review.payload
                params[key] = page_key(review.created_at, thread_id, review.interrupt_id)
        shape = (
            expected_seq == 0,
            listed_events,
            listed_reviews,
            claiming + 3 * (release is not None),
            durable,
            reading is not None,
            2 if expected_seq == 0 else clear,
            bool(record.metadata),
        )
        sql = self._append_sql.get(shape)
        if sql is None:
            sql = self._append_sql[shape] = self._build_append(
                new=expected_seq == 0,
                events=listed_events,
                pending=listed_reviews,
                claim=claiming,
                release=release is not None,
                durable=durable,
                reading=reading is not None,
                clear=2 if expected_seq == 0 else clear,
                tag=bool(record.metadata),
            )
        yield [Query(sql, params)]

    def _build_append(
        self,
        *,
        new: bool,
        events: int,
        pending: int,
        claim: int,
        release: bool,
        durable: bool = True,
        reading: bool = False,
        clear: int = 2,
        tag: bool = True,
    ) -> str:
        """The SQL of an append: data-modifying CTEs, each done only if the head moved.

        One statement is one transaction and one round trip, with no BEGIN or COMMIT:
        if the head did not move, the main query calls ``handrail_conflict()``, which
        raises, and the statement saves nothing. Old pending rows are deleted before
        the new ones are inserted (a CTE that reads another waits for it to finish).
        ``events`` and ``pending`` are how many rows are listed in VALUES (0: none), or
        ``_IN_ARRAYS``: any number, in array parameters.
        """
        p = self.prefix
        row = (
            "head_seq = %(head)s, status = %(status)s, created_at = %(created)s, updated_at = %(updated)s, "
            "metadata = %(metadata)s::jsonb, pending_count = %(count)s"
        )
        returned = "metadata" if pending and tag else "1"  # tagged reads it; others look for a row
        if new:  # a new thread, or one still at event 0
            moved = (
                f"INSERT INTO {self.threads} AS t (thread_id, epoch, head_seq, status, created_at, "
                "updated_at, metadata, pending_count) VALUES (%(thread)s, %(epoch)s, %(head)s, %(status)s, "
                "%(created)s, %(updated)s, %(metadata)s::jsonb, %(count)s) ON CONFLICT (thread_id) DO UPDATE "
                f"SET epoch = excluded.epoch, {row} WHERE t.head_seq = 0 RETURNING {returned}"
            )
        else:
            moved = (
                f"UPDATE {self.threads} SET {row} WHERE thread_id = %(thread)s AND head_seq = %(expected)s "
                f"AND epoch = %(epoch)s RETURNING {returned}"
            )
        go = "EXISTS (SELECT FROM moved)"
        # A review's tool and metadata rows come and go with its pending row, so a thread
        # that had no pending row has none of those either: most appends (no review was
        # pending) skip two index scans, which would find only the dead entries of past
        # reviews (until a vacuum).
        had = "EXISTS (SELECT FROM cleared)"
        ctes = [f"moved AS ({moved})"]
        deletes: dict[str, str] = {}
        if clear:
            deletes["cleared"] = (
                f"DELETE FROM {self.pending} WHERE thread_id = %(thread)s AND {go} RETURNING 1"
            )
            deletes["cleared_tools"] = (
                f"DELETE FROM {self.pending_tools} WHERE thread_id = %(thread)s AND {had} RETURNING 1"
            )
        if clear == 2:
            deletes["cleared_metadata"] = (
                f"DELETE FROM {self.pending_metadata} WHERE thread_id = %(thread)s AND {had} RETURNING 1"
            )
        ctes += [f"{name} AS ({sql})" for name, sql in deletes.items()]

        # a CTE that reads another waits for it to finish: the new rows go in after the deletes
        def after(cte: str) -> str:
            return f"(SELECT count(*) FROM {cte}) >= 0 AND " if cte in deletes else ""

        if events:
            if events == _IN_ARRAYS:
                source = (
                    "unnest(%(seqs)s::bigint[], %(kinds)s::text[], %(times)s::double precision[], "
                    "%(payloads)b::bytea[])"
                )
            else:
                source = _values(
                    [
                        (f"%({seq})s", f"%({kind})s", f"%({at})s", f"%({payload})b")
                        for seq, kind, at, payload in _EVENT_KEYS[:events]
                    ],
                    ("bigint", "text", "double precision", "bytea"),
                )
            ctes.append(
                f"logged AS (INSERT INTO {self.events} (thread_id, seq, kind, created_at, payload) "
                f"SELECT %(thread)s, e.* FROM {source} AS e WHERE {go})"
            )
        if pending:
            if pending == _IN_ARRAYS:
                reviews = (
                    "unnest(%(ids)s::text[], %(review_kinds)s::text[], %(tools)s::jsonb[], "
                    "%(review_times)s::double precision[], %(review_payloads)b::bytea[]) WITH ORDINALITY"
                )
                keys = "unnest(%(ids)s::text[], %(review_keys)b::bytea[])"
            else:
                listed = _REVIEW_KEYS[:pending]
                reviews = _values(  # and each one's position, counted from 1 as ORDINALITY does
                    [
                        (
                            f"%({interrupt})s",
                            f"%({kind})s",
                            f"%({tools})s",
                            f"%({at})s",
                            f"%({payload})b",
                            str(n),
                        )
                        for n, (interrupt, kind, tools, at, payload, _) in enumerate(listed, start=1)
                    ],
                    ("text", "text", "jsonb", "double precision", "bytea", "bigint"),
                )
                keys = _values(
                    [(f"%({fields[0]})s", f"%({fields[5]})b") for fields in listed], ("text", "bytea")
                )
            ctes += [
                f"added AS (INSERT INTO {self.pending} (thread_id, interrupt_id, position, kind, tools, "
                "created_at, payload) SELECT %(thread)s, r.interrupt_id, r.n - 1, r.kind, "
                "ARRAY(SELECT jsonb_array_elements_text(r.tools)), r.created_at, r.payload "
                f"FROM {reviews} AS r (interrupt_id, kind, tools, created_at, payload, n) "
                f"WHERE {after('cleared')}{go} "
                "RETURNING id, interrupt_id, tools, created_at)",
                # each added review with its page key (read twice, so computed once)
                "keyed AS (SELECT a.*, k.page_key FROM added AS a "
                f"JOIN {keys} AS k (interrupt_id, page_key) ON k.interrupt_id = a.interrupt_id)",
                f"tooled AS (INSERT INTO {self.pending_tools} "
                "(tool, created_at, thread_id, interrupt_id, pending_id, page_key) "
                "SELECT DISTINCT t.tool, a.created_at, %(thread)s, a.interrupt_id, a.id, a.page_key "
                "FROM keyed AS a CROSS JOIN unnest(a.tools) AS t (tool) "
                f"WHERE {after('cleared_tools')}TRUE)",
            ]
            if tag:  # the thread has metadata: its indexed entries go with each review
                ctes.append(
                    f"tagged AS (INSERT INTO {self.pending_metadata} "
                    "(key, value, page_key, thread_id, pending_id) "
                    "SELECT e.key, e.value, a.page_key, %(thread)s, a.id "
                    "FROM keyed AS a CROSS JOIN moved AS m "
                    f"CROSS JOIN jsonb_each(m.metadata) AS e WHERE {after('cleared_metadata')}{_INDEXED_SQL})"
                )
        if claim:
            keep = "ARRAY[%(claim)s, %(release)s]" if release else "ARRAY[%(claim)s]"
            ctes.append(
                f"dead AS (DELETE FROM {self.runs} AS r WHERE r.thread_id = %(thread)s "
                f"AND r.run_id <> ALL ({keep}::text[]) AND NOT {self._alive('r.owner_key')} AND {go})"
            )
        if claim == 1:
            ctes.append(
                f"claimed AS (INSERT INTO {self.runs} (thread_id, run_id, owner_key, claimed_at) "
                f"SELECT %(thread)s, %(claim)s, %(owner)s, %(now)s WHERE {go} AND {self._lock_held} "
                "ON CONFLICT (thread_id, run_id) DO UPDATE SET owner_key = excluded.owner_key)"
            )
        if release:
            ctes.append(
                f"released AS (DELETE FROM {self.runs} WHERE thread_id = %(thread)s "
                f"AND run_id = %(release)s AND {go})"
            )
        if reading:
            ctes.append(
                f"kept AS (INSERT INTO {self.readings} (thread_id, seq, created_at, payload) "
                f"SELECT %(thread)s, %(reading_seq)s, %(reading_at)s, %(reading)b WHERE {go} "
                "ON CONFLICT (thread_id) DO UPDATE SET seq = excluded.seq, created_at = excluded.created_at, "
                "payload = excluded.payload)"
            )
        conflict = f"{p}conflict(%(thread)s, %(expected)s, %(epoch)s)"
        if durable:
            return "WITH " + ", ".join(ctes) + f" SELECT {conflict} WHERE NOT {go}"
        # evaluated in every case: the setting lasts until this statement's commit
        relax = "set_config('synchronous_commit', 'off', true) IS NOT NULL"
        return "WITH " + ", ".join(ctes) + f" SELECT CASE WHEN {go} THEN {relax} ELSE {conflict} END"

    def prune(
        self, thread_id: str, upto_seq: int, snapshot: StoredEvent, keep_kinds: frozenset[str]
    ) -> Op[int]:
        # one statement: nothing is dropped unless the snapshot took its place
        (result,) = yield [
            Query(
                f"WITH replaced AS (UPDATE {self.events} SET kind = %s, created_at = %s, payload = %s "
                "WHERE thread_id = %s AND seq = %s RETURNING 1), "
                f"dropped AS (DELETE FROM {self.events} WHERE thread_id = %s AND seq < %s "
                "AND NOT (kind = ANY(%s)) AND EXISTS (SELECT FROM replaced) RETURNING 1), "
                # a saved reading holds the history before the snapshot: the next run saves another
                f"forgot AS (DELETE FROM {self.readings} WHERE thread_id = %s "
                "AND EXISTS (SELECT FROM replaced)) "
                "SELECT (SELECT count(*) FROM replaced), (SELECT count(*) FROM dropped)",
                (
                    snapshot.kind,
                    snapshot.created_at,
                    snapshot.payload,
                    thread_id,
                    upto_seq,
                    thread_id,
                    upto_seq,
                    sorted(keep_kinds),
                    thread_id,
                ),
            )
        ]
        replaced, dropped = result.rows[0]
        if replaced != 1:
            raise ValueError(f"thread {thread_id!r} has no event {upto_seq} to replace with a snapshot")
        return int(dropped)

    def delete_thread(self, thread_id: str) -> Op[bool]:
        tables = (
            self.events,
            self.pending,
            self.pending_tools,
            self.pending_metadata,
            self.runs,
            self.readings,
        )
        deletes = ", ".join(
            f"d{n} AS (DELETE FROM {table} WHERE thread_id = %s)" for n, table in enumerate(tables)
        )
        (result,) = yield [
            Query(
                f"WITH {deletes} DELETE FROM {self.threads} WHERE thread_id = %s",
                (thread_id,) * (len(tables) + 1),
            )
        ]
        return result.rowcount > 0

    def conflict_error(self, detail: str | None, thread_id: str, expected_seq: int) -> ConflictError:
        """The ConflictError for what ``handrail_conflict()`` found (its DETAIL)."""
        try:
            head, epoch, _, wanted = orjson.loads(detail or "")
        except (ValueError, TypeError):
            return conflict(thread_id, expected_seq, None)
        if head is None:
            head = 0
        if head != expected_seq:
            return conflict(thread_id, expected_seq, head)
        if expected_seq > 0 and epoch != wanted:
            return epoch_conflict(thread_id)
        return conflict(thread_id, expected_seq, None)  # it moved and came back meanwhile

    # Reading ---------------------------------------------------------------------------------
    def read(
        self, thread_id: str, after_seq: int, upto_seq: int | None, from_reading: bool = False
    ) -> Op[ThreadRead]:
        # one statement, so one snapshot: the record, the saved reading and the events of one instant
        upto = " AND e.seq <= %(upto)s" if upto_seq is not None else ""
        after = "%(after)s"
        saved = ""
        if from_reading and not after_seq and upto_seq is None:
            after = f"COALESCE((SELECT r.seq FROM {self.readings} AS r WHERE r.thread_id = %(thread)s), 0)"
            saved = (
                "UNION ALL SELECT 2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, r.seq, 'reading', "
                f"r.created_at, r.payload FROM {self.readings} AS r WHERE r.thread_id = %(thread)s "
            )
        sql = (
            f"SELECT 0, {self.record_columns}, NULL::bigint, NULL::text, NULL::double precision, "
            f"NULL::bytea FROM {self.threads} AS t WHERE t.thread_id = %(thread)s {saved}UNION ALL "
            "(SELECT 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, e.seq, e.kind, e.created_at, "
            f"e.payload FROM {self.events} AS e WHERE e.thread_id = %(thread)s AND e.seq > {after}{upto} "
            "ORDER BY e.seq)"
        )
        (result,) = yield [Query(sql, {"thread": thread_id, "after": after_seq, "upto": upto_seq})]
        record = reading = None
        events = []
        for row in result.rows:
            if row[0] == 0:
                record = _record(row[1:9])
            elif row[0] == 2:
                reading = event_from_row(thread_id, *row[9:])
            else:
                events.append(event_from_row(thread_id, *row[9:]))
        if any(a.seq >= b.seq for a, b in itertools.pairwise(events)):
            events.sort(key=lambda event: event.seq)  # the rows came in another order
        return ThreadRead(record=record, events=events, reading=reading)

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
        """The inbox query: an index range in ``(created_at, thread_id, interrupt_id)`` order.

        Without a tool or metadata filter it walks ``pending`` in that order. Otherwise
        each filter that an index answers joins in on the *page key* (the same order as
        one column): ``pending_tools`` for the tool, one ``pending_metadata`` alias per
        indexed metadata entry; the planner walks the most selective one in page order
        and merges or looks up the others, and stops after a page. Metadata entries no
        index holds (lists, objects, long strings) are compared on the thread's row.
        """
        where: list[str] = []
        params: list[Any] = []  # the WHERE clause's
        join_params: list[Any] = []  # the FROM clause's, which come first
        indexes: list[tuple[str, str, str, list[Any]]] = []  # alias, table, condition, its params
        if filter.tool is not None:
            indexes.append(("o", self.pending_tools, "o.tool = %s", [filter.tool]))
        indexed = _indexed_entries(filter.metadata)
        for key, value in indexed:
            m = f"m{len(indexes)}"
            condition = f"{m}.key = %s AND {m}.value = %s::jsonb"
            indexes.append((m, self.pending_metadata, condition, [key, value]))
        if indexes:
            first, table, condition, values = indexes[0]
            parts = [f"{table} AS {first}"]
            where.append(condition)
            params += values
            for alias, table, condition, values in indexes[1:]:
                parts.append(
                    f"JOIN {table} AS {alias} ON {alias}.page_key = {first}.page_key AND {condition}"
                )
                join_params += values
            # joined to pending on one column: the planner misjudges a two-column join as one row
            source = " ".join(parts) + f" JOIN {self.pending} AS p ON p.id = {first}.pending_id"
            order = f"{first}.page_key"
            for alias, *_ in indexes:  # the bounds on every index, for whichever the planner walks
                if filter.thread_id is not None:
                    where.append(f"{alias}.thread_id = %s")
                    params.append(filter.thread_id)
                if filter.older_than is not None:  # created_at <= x: below the next float's keys
                    where.append(f"{alias}.page_key < %s")
                    params.append(page_key(math.nextafter(now - filter.older_than, math.inf), "", "")[:8])
                if filter.after is not None:
                    where.append(f"{alias}.page_key > %s")
                    params.append(page_key(*filter.after))
        else:
            source = f"{self.pending} AS p"
            order = "p.created_at, p.thread_id, p.interrupt_id"
            if filter.thread_id is not None:
                where.append("p.thread_id = %s")
                params.append(filter.thread_id)
            if filter.older_than is not None:
                where.append("p.created_at <= %s")
                params.append(now - filter.older_than)
            if filter.after is not None:
                where.append("(p.created_at, p.thread_id, p.interrupt_id) > (%s, %s, %s)")
                params += list(filter.after)
        if filter.kind is not None:
            where.append("p.kind = %s")
            params.append(filter.kind)
        unindexed = {k: v for k, v in (filter.metadata or {}).items() if str(k) not in dict(indexed)}
        if unindexed:
            where += _metadata_clauses(unindexed, params)
        sql = (
            "SELECT p.thread_id, p.interrupt_id, p.kind, p.tools, p.created_at, p.payload, "
            f"t.metadata::text FROM {source} JOIN {self.threads} AS t ON t.thread_id = p.thread_id"
            + (" WHERE " + " AND ".join(where) if where else "")
            + f" ORDER BY {order} LIMIT %s"
        )
        params.append(max(filter.limit, 0))
        return Query(sql, join_params + params)

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
    def take_lock(self, prefer: int | None, *, hold: bool = False) -> Op[int]:
        """Take a liveness lock on a free key (``prefer`` first, then random ones); the key.

        ``hold=False``: a session lock, on the saver's only connection. ``hold=True``, on
        the saver's liveness connection: the lock belongs to a transaction this operation
        leaves open for the life of the connection. A pooler in transaction mode (PgBouncer)
        keeps a server connection with its client while the client's transaction is open
        and closes it when the client goes mid-transaction, so the lock lives exactly as
        long as the client's connection, through a pooler or not (a session lock would stay
        on the pooler's server connection, with other clients). The transaction reads
        nothing, so it holds back no vacuum; the server's idle-in-transaction timeout is
        turned off for it, and its TCP keepalives set (see :data:`_KEEPALIVES`).
        """
        if hold:
            yield [BEGIN, Query("SET LOCAL idle_in_transaction_session_timeout = 0"), Query(_KEEPALIVES)]
        take = "SELECT pg_try_advisory_xact_lock(%s)" if hold else "SELECT pg_try_advisory_lock(%s)"
        key = prefer if prefer is not None else new_key()
        while True:
            (result,) = yield [Query(take, (key,))]
            if result.rows[0][0]:
                return key
            key = new_key()

    def claim_run(self, thread_id: str, run_id: str, owner_key: int) -> Op[None]:
        yield [
            Query(
                self._claim_sql,
                {"thread": thread_id, "claim": run_id, "owner": owner_key, "now": time.time()},
            )
        ]

    def reclaim_runs(self, runs: Sequence[tuple[str, str]], owner_key: int) -> Op[None]:
        if runs:
            yield [
                Query(
                    f"INSERT INTO {self.runs} (thread_id, run_id, owner_key, claimed_at) "
                    "SELECT *, %s, %s FROM unnest(%s::text[], %s::text[]) "
                    "ON CONFLICT (thread_id, run_id) DO UPDATE SET owner_key = excluded.owner_key",
                    (owner_key, time.time(), [thread for thread, _ in runs], [run for _, run in runs]),
                )
            ]

    def release_run(self, thread_id: str, run_id: str) -> Op[None]:
        yield [Query(self._release_sql, (thread_id, run_id))]

    def forget_owner(self, owner_key: int) -> Op[None]:
        yield [Query(f"DELETE FROM {self.runs} WHERE owner_key = %s", (owner_key,))]

    def runs_alive(self, thread_id: str) -> Op[set[str]]:
        (result,) = yield [
            Query(
                f"SELECT r.run_id FROM {self.runs} AS r "
                f"WHERE r.thread_id = %s AND {self._alive('r.owner_key')}",
                (thread_id,),
            )
        ]
        return {row[0] for row in result.rows}


# The server probes a silent client after 15 s, every 5 s, 3 times: a liveness session
# whose host vanished (power, network) is ended, and its lock freed, within ~30 s. Set for
# the liveness transaction (``is_local``): behind a pooler, the server connection is not ours.
_KEEPALIVES = (
    "SELECT set_config('tcp_keepalives_idle', '15', true), "
    "set_config('tcp_keepalives_interval', '5', true), set_config('tcp_keepalives_count', '3', true)"
)


def new_key() -> int:
    """A random liveness key: positive, 62 bits."""
    return secrets.randbits(62) + 1


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


def _values(rows: Sequence[Sequence[str]], types: Sequence[str]) -> str:
    """A VALUES list of SQL expressions (parameters), the first row's cast to ``types``.

    The other rows need no casts: a VALUES list gives a column the first row's type.
    """
    first, *rest = rows
    listed = [", ".join(f"{field}::{kind}" for field, kind in zip(first, types, strict=True))]
    listed += [", ".join(row) for row in rest]
    return "(VALUES (" + "), (".join(listed) + "))"


def page_key(created_at: float, thread_id: str, interrupt_id: str) -> bytes:
    """The page key of a pending review, as ``handrail_page_key()`` computes it in SQL.

    Byte order is the inbox's ``(created_at, thread_id, interrupt_id)`` order: the
    float's bits (``-0.0`` made ``0.0``) turned order-preserving (the sign bit flipped
    for a positive number, every bit for a negative one), then the ids in UTF-8 (whose
    byte order is code point order), split by a NUL, which text cannot hold.
    """
    (bits,) = _INT64.unpack(_FLOAT64.pack(created_at + 0.0))
    return _INT64.pack(bits ^ -(2**63) if bits >= 0 else ~bits) + (
        thread_id.encode() + b"\x00" + interrupt_id.encode()
    )


_FLOAT64 = struct.Struct(">d")
_INT64 = struct.Struct(">q")


def _indexed_entries(metadata: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The entries of a metadata filter that ``pending_metadata`` indexes, as (key, JSON)."""
    entries = []
    for key, value in (metadata or {}).items():
        text = dumps(value, where="the metadata filter").decode()
        if _indexed(str(key), orjson.loads(text)):
            entries.append((str(key), text))
    return entries


def _indexed(key: str, value: Any) -> bool:
    """The rule of ``_INDEXED_SQL``, in Python (on the JSON value)."""
    try:
        if len(key.encode()) > INDEXED_BYTES:
            return False
        if value is None or isinstance(value, (bool, int, float)):
            return True
        return isinstance(value, str) and len(value.encode()) <= INDEXED_BYTES
    except UnicodeEncodeError:  # a lone surrogate: never stored, so never indexed
        return False


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
