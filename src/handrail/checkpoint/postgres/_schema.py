"""The Postgres schema: its migrations, and setup, which applies them in one transaction.

Tables (prefixed ``handrail_``, in the saver's ``schema`` or the connection's search
path): ``events`` (primary key ``(thread_id, seq)``), ``threads`` (one row per
thread), ``pending`` (one row per pending review, indexed in the inbox's ``(created_at,
thread_id, interrupt_id)`` keyset order), ``pending_tools`` and ``pending_metadata``
(the inbox's tool and metadata filters, keyed by filter value and *page key*),
``readings`` (each thread's saved reading), ``runs`` (claimed runs, and queued
threads), ``feed`` (the notices the review service reads: ``_feed.py``), ``deletions``
(what deleting a thread leaves: ``_deletions.py``), ``grants`` (SPEC rule 16, version 8:
``grants.py``) and ``schema_version``. Thread rows, pending rows and deletion records
carry seals (``checkpoint/seals.py``, version 7); the functions ``handrail_conflict``,
``handrail_fail`` and ``handrail_page_key``. Key columns use the
``"C"`` collation so that the inbox orders exactly as the in-memory store does.

:meth:`SchemaSQL.setup` creates or migrates the schema in one transaction under
``pg_advisory_xact_lock``, so any number of processes may call it at once. A migration
may have a step in Python (:class:`PostgresMigration`), run in that transaction too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from handrail.checkpoint._records import Migration
from handrail.checkpoint.base import StoredEvent
from handrail.checkpoint.integrity import HASH_SIZE, seal_log
from handrail.checkpoint.postgres._base import (
    BEGIN,
    COMMIT,
    CONFLICT_STATE,
    INDEXED_BYTES,
    Op,
    Query,
    Result,
    Tables,
    _bare,
)
from handrail.checkpoint.postgres._deletions import deletion_seal_sql, deletions_migration
from handrail.checkpoint.postgres._feed import feed_migration
from handrail.checkpoint.postgres._grants import grants_migration
from handrail.checkpoint.seals import head_after, review_seal, thread_digest
from handrail.errors import ConfigurationError

__all__ = ["Op", "PostgresMigration", "Query", "Result", "SchemaSQL", "migrations"]

_LOCK_SPACE = 0x68726C00  # "hrl\0": the first key of setup's two-key advisory lock

# Which top-level metadata entries get a ``pending_metadata`` row: a key and a scalar
# value, strings and keys up to INDEXED_BYTES. ``read._indexed`` is the same rule in
# Python, for the filter side; both sides must agree, or a metadata filter would miss rows.
INDEXED_SQL = (
    f"octet_length(convert_to(e.key, 'UTF8')) <= {INDEXED_BYTES} AND "
    "(jsonb_typeof(e.value) IN ('number', 'boolean', 'null') OR (jsonb_typeof(e.value) = 'string' "
    f"AND octet_length(convert_to(e.value #>> '{{}}', 'UTF8')) <= {INDEXED_BYTES}))"
)

# The bits of a float (-0.0 made 0.0) as a signed 64-bit integer, for page_key().
_BITS = "('x' || encode(float8send(p_at + 0.0), 'hex'))::bit(64)::bigint"


def migrations(p: str) -> tuple[Migration, ...]:
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
                # INDEXED_SQL), so that a metadata filter walks an index in page order.
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
                f"jsonb_each(t.metadata) AS e WHERE {INDEXED_SQL}",
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
        PostgresMigration(
            4,
            "every event sealed with its hash in its thread's chain (storage format v3; SPEC rule 18)",
            (),
            step=_seal_every_log,
        ),
        Migration(
            5,
            "the feed of notices (reviews asked and answered, runs ended) and queued runs, for the service",
            feed_migration(p),
        ),
        Migration(
            6,
            "what deleting a thread leaves: who, when, the head of its log, its metadata (SPEC rule 21)",
            deletions_migration(p),
        ),
        PostgresMigration(
            7,
            "thread rows, pending reviews and deletion records sealed, bound to their log's head "
            "(SPEC rule 10)",
            (
                f"ALTER TABLE {p}threads ADD COLUMN head_hash bytea, ADD COLUMN seal bytea",
                f"ALTER TABLE {p}pending ADD COLUMN seal bytea",
                f"ALTER TABLE {p}deletions ADD COLUMN seal bytea",
                f"UPDATE {p}deletions SET seal = "
                + deletion_seal_sql(
                    "thread_id", "deleted_at", "head_seq", "head_hash", "deleted_by", "metadata"
                ),
            ),
            step=_seal_every_row,
        ),
        Migration(
            8,
            "grants: what each covers, until when and how often, who gave it (SPEC rule 16)",
            grants_migration(p),
        ),
    )


def _seal_every_log(prefix: str) -> Op[None]:
    """Seal the events written before records had a hash, thread by thread, in seq order
    (``checkpoint/integrity.py``, rule 5: each keeps the hash it already has in its chain).
    Saved readings of that time are dropped: a reading is a cache, and an unsealed one is
    not trusted anyway."""
    (threads,) = yield [Query(f"SELECT DISTINCT thread_id FROM {prefix}events")]
    for (thread_id,) in threads.rows:
        (rows,) = yield [
            Query(
                f"SELECT seq, kind, created_at, payload FROM {prefix}events "
                "WHERE thread_id = %s ORDER BY seq",
                (thread_id,),
            )
        ]
        events = [StoredEvent(seq, kind, at, bytes(payload)) for seq, kind, at, payload in rows.rows]
        updates = [
            Query(
                f"UPDATE {prefix}events SET payload = %s WHERE thread_id = %s AND seq = %s",
                (event.payload, thread_id, event.seq),
            )
            for event in seal_log(thread_id, events)
        ]
        if updates:
            yield updates
    yield [Query(f"DELETE FROM {prefix}readings")]


_BATCH = 500  # rows sealed per round trip


def _seal_every_row(prefix: str) -> Op[None]:
    """Seal the thread and pending rows written before rows had seals (``seals.py``, rule
    6), as they are: bound to the hash sealed into the last record of the thread's log
    (none when that record is a snapshot, whose chain value only the runtime can read, or
    has no seal). The thread row's seal is finished in SQL, over its metadata as text."""
    header = 1 + HASH_SIZE
    last = (
        f"(SELECT {{}} FROM {prefix}events AS e WHERE e.thread_id = t.thread_id ORDER BY e.seq DESC LIMIT 1)"
    )
    (threads,) = yield [
        Query(
            "SELECT t.thread_id, t.head_seq, t.status, t.epoch, t.created_at, t.updated_at, t.pending_count, "
            f"{last.format('e.kind')}, {last.format(f'substring(e.payload FROM 1 FOR {header})')} "
            f"FROM {prefix}threads AS t"
        )
    ]
    heads: dict[str, bytes | None] = {}
    updates = []
    for thread_id, head_seq, status, epoch, created, updated, count, kind, start in threads.rows:
        head = heads[thread_id] = (
            head_after([StoredEvent(1, "", 0.0, bytes(start))], None)
            if start is not None and kind != "snapshot"
            else None
        )
        digest = thread_digest(thread_id, head_seq, head, status, epoch, created, updated, count)
        updates.append(
            Query(
                f"UPDATE {prefix}threads SET head_hash = %s, seal = sha256(%s || convert_to(metadata::text, "
                "'UTF8')) WHERE thread_id = %s",
                (head, digest, thread_id),
            )
        )
    (reviews,) = yield [
        Query(
            "SELECT id, thread_id, position, interrupt_id, kind, tools, created_at, payload "
            f"FROM {prefix}pending"
        )
    ]
    for row_id, thread_id, position, interrupt_id, kind, tools, at, payload in reviews.rows:
        head = heads.get(thread_id)
        seal = review_seal(head, thread_id, position, interrupt_id, kind, tools, at, bytes(payload))
        updates.append(Query(f"UPDATE {prefix}pending SET seal = %s WHERE id = %s", (seal, row_id)))
    for start in range(0, len(updates), _BATCH):
        yield updates[start : start + _BATCH]


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

    def __post_init__(self) -> None:
        if self.run is not None:  # SQLite's form of a Python step, given a connection: not run here
            raise ConfigurationError(
                f"migration {self.version}: a Postgres migration's Python step is step=, an operation "
                "(see PostgresMigration), not run="
            )


class SchemaSQL(Tables):
    """Reading the schema's version, and setup."""

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
