"""The SQLite file: handrail's schema, its migrations, and what else a file may hold.

Every table and index handrail makes is named ``handrail_*`` (:data:`PREFIX`), so the
file may be an application's own. :func:`prepare` finds handrail's schema in a file
inside the migration's write transaction: its version, or a new version table; a file
of a handrail from before the prefix is renamed in place (:func:`_adopt_plain_names`);
objects under handrail's names that handrail did not make are refused. :func:`apply`
then runs the missing migrations, each a list of statements and an optional Python
step, in version order in that same transaction.

A damaged file ("file is not a database", "database disk image is malformed", a header
SQLite cannot read, a schema version handrail never wrote) raises
:class:`~handrail.errors.SerializationError` naming the file and what to do
(:func:`damaged_file`); the savers turn SQLite's errors into it wherever they meet one
(:func:`is_damage`).
"""

from __future__ import annotations

import sqlite3
import struct
import time
from collections.abc import Sequence

import orjson

from handrail.checkpoint._grant_rows import SQLITE_MIGRATION as GRANTS
from handrail.checkpoint._records import Migration
from handrail.checkpoint.base import StoredEvent
from handrail.checkpoint.integrity import HASH_SIZE, seal_log
from handrail.checkpoint.seals import deletion_seal, head_after, review_seal, thread_digest, thread_seal
from handrail.errors import ConfigurationError, SerializationError

__all__ = [
    "MIGRATIONS",
    "PAGE_SIZE",
    "PREFIX",
    "VERSIONS",
    "apply",
    "damaged_file",
    "is_damage",
    "prepare",
    "schema_at",
]


PAGE_SIZE = 1024
"""The page size of a new database file (SQLite's default is 4096)."""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "event logs, thread rows, the pending-review inbox and run leases",
        (
            """CREATE TABLE handrail_threads (
                thread_id     TEXT PRIMARY KEY,
                head_seq      INTEGER NOT NULL,
                status        TEXT NOT NULL,
                epoch         TEXT NOT NULL,
                created_at    REAL NOT NULL,
                updated_at    REAL NOT NULL,
                metadata      BLOB NOT NULL,
                pending_count INTEGER NOT NULL DEFAULT 0
            )""",
            "CREATE INDEX handrail_threads_by_update ON handrail_threads (updated_at DESC, thread_id)",
            "CREATE INDEX handrail_threads_by_status ON handrail_threads (status, updated_at DESC, "
            "thread_id)",
            """CREATE TABLE handrail_events (
                thread_id  TEXT NOT NULL,
                seq        INTEGER NOT NULL,
                kind       TEXT NOT NULL,
                created_at REAL NOT NULL,
                payload    BLOB NOT NULL,
                PRIMARY KEY (thread_id, seq)
            )""",
            """CREATE TABLE handrail_pending (
                thread_id    TEXT NOT NULL,
                interrupt_id TEXT NOT NULL,
                position     INTEGER NOT NULL,
                kind         TEXT NOT NULL,
                tools        TEXT NOT NULL,
                created_at   REAL NOT NULL,
                payload      BLOB NOT NULL,
                PRIMARY KEY (thread_id, interrupt_id)
            )""",
            "CREATE INDEX handrail_pending_inbox ON handrail_pending (created_at, thread_id, interrupt_id)",
            "CREATE INDEX handrail_pending_by_kind ON handrail_pending (kind, created_at, thread_id, "
            "interrupt_id)",
            """CREATE TABLE handrail_pending_tools (
                tool         TEXT NOT NULL,
                created_at   REAL NOT NULL,
                thread_id    TEXT NOT NULL,
                interrupt_id TEXT NOT NULL,
                PRIMARY KEY (tool, created_at, thread_id, interrupt_id)
            ) WITHOUT ROWID""",
            "CREATE INDEX handrail_pending_tools_by_thread ON handrail_pending_tools (thread_id)",
            """CREATE TABLE handrail_run_owners (
                owner_id   TEXT PRIMARY KEY,
                pid        INTEGER NOT NULL,
                host       TEXT NOT NULL,
                expires_at REAL NOT NULL
            )""",
            """CREATE TABLE handrail_runs (
                thread_id  TEXT NOT NULL,
                run_id     TEXT NOT NULL,
                owner_id   TEXT NOT NULL,
                claimed_at REAL NOT NULL,
                PRIMARY KEY (thread_id, run_id)
            )""",
        ),
    ),
    Migration(
        2,
        "events, pending reviews and runs in clustered tables (WITHOUT ROWID): a commit writes fewer pages",
        (
            """CREATE TABLE handrail_events_v2 (
                thread_id  TEXT NOT NULL,
                seq        INTEGER NOT NULL,
                kind       TEXT NOT NULL,
                created_at REAL NOT NULL,
                payload    BLOB NOT NULL,
                PRIMARY KEY (thread_id, seq)
            ) WITHOUT ROWID""",
            "INSERT INTO handrail_events_v2 SELECT thread_id, seq, kind, created_at, payload FROM "
            "handrail_events",
            "DROP TABLE handrail_events",
            "ALTER TABLE handrail_events_v2 RENAME TO handrail_events",
            """CREATE TABLE handrail_pending_v2 (
                thread_id    TEXT NOT NULL,
                interrupt_id TEXT NOT NULL,
                position     INTEGER NOT NULL,
                kind         TEXT NOT NULL,
                tools        TEXT NOT NULL,
                created_at   REAL NOT NULL,
                payload      BLOB NOT NULL,
                PRIMARY KEY (thread_id, interrupt_id)
            ) WITHOUT ROWID""",
            "INSERT INTO handrail_pending_v2 SELECT thread_id, interrupt_id, position, kind, tools, "
            "created_at, "
            "payload FROM handrail_pending",
            "DROP TABLE handrail_pending",
            "ALTER TABLE handrail_pending_v2 RENAME TO handrail_pending",
            "CREATE INDEX handrail_pending_inbox ON handrail_pending (created_at, thread_id, interrupt_id)",
            "CREATE INDEX handrail_pending_by_kind ON handrail_pending (kind, created_at, thread_id, "
            "interrupt_id)",
            """CREATE TABLE handrail_runs_v2 (
                thread_id  TEXT NOT NULL,
                run_id     TEXT NOT NULL,
                owner_id   TEXT NOT NULL,
                claimed_at REAL NOT NULL,
                PRIMARY KEY (thread_id, run_id)
            ) WITHOUT ROWID""",
            "INSERT INTO handrail_runs_v2 SELECT thread_id, run_id, owner_id, claimed_at FROM handrail_runs",
            "DROP TABLE handrail_runs",
            "ALTER TABLE handrail_runs_v2 RENAME TO handrail_runs",
        ),
    ),
    Migration(
        3,
        "each thread's saved reading (its state at an event), which a new process loads",
        (
            """CREATE TABLE handrail_readings (
                thread_id  TEXT PRIMARY KEY,
                seq        INTEGER NOT NULL,
                created_at REAL NOT NULL,
                payload    BLOB NOT NULL
            )""",
        ),
    ),
    Migration(
        4,
        "every event sealed with its hash in its thread's chain (storage format v3; SPEC rule 18)",
        (),
        run=lambda conn: _seal_every_log(conn),
    ),
    Migration(
        5,
        "the feed of notices (reviews asked and answered, runs ended) and queued runs, for the service",
        (
            # AUTOINCREMENT: a number is never used twice, even after the oldest rows are
            # trimmed, so a reader's last number stays a place in the feed (``_feed``)
            """CREATE TABLE handrail_feed (
                id         INTEGER PRIMARY KEY AUTOINCREMENT,
                thread_id  TEXT NOT NULL,
                seq        INTEGER NOT NULL,
                kind       TEXT NOT NULL,
                created_at REAL NOT NULL,
                data       BLOB NOT NULL
            )""",
            "CREATE INDEX handrail_feed_by_time ON handrail_feed (created_at)",
        ),
    ),
    Migration(
        6,
        "what deleting a thread leaves: who, when, the head of its log, its metadata (SPEC rule 21)",
        (
            # ``deleted_by`` is JSON (``null`` when nobody was named); ``head_hash`` is NULL
            # when the log's last record had no seal. Rows are only added: by ``_deletions``.
            """CREATE TABLE handrail_deletions (
                id         INTEGER PRIMARY KEY AUTOINCREMENT,
                thread_id  TEXT NOT NULL,
                deleted_at REAL NOT NULL,
                deleted_by BLOB NOT NULL,
                head_seq   INTEGER NOT NULL,
                head_hash  TEXT,
                metadata   BLOB NOT NULL
            )""",
            "CREATE INDEX handrail_deletions_by_time ON handrail_deletions (deleted_at, thread_id, id)",
        ),
    ),
    Migration(
        7,
        "thread rows, pending reviews and deletion records sealed, bound to their log's head (SPEC rule 10)",
        (
            "ALTER TABLE handrail_threads ADD COLUMN head_hash BLOB",
            "ALTER TABLE handrail_threads ADD COLUMN seal BLOB",
            "ALTER TABLE handrail_pending ADD COLUMN seal BLOB",
            "ALTER TABLE handrail_deletions ADD COLUMN seal BLOB",
        ),
        run=lambda conn: _seal_every_row(conn),
    ),
    Migration(8, "grants: what each covers, until when and how often, who gave it (SPEC rule 16)", GRANTS),
)


def _seal_every_log(conn: sqlite3.Connection) -> None:
    """Seal the events written before records had a hash, thread by thread, in seq order
    (``checkpoint/integrity.py``, rule 5: each keeps the hash it already has in its chain).
    Saved readings of that time are dropped: a reading is a cache, and an unsealed one is
    not trusted anyway."""
    threads = [row[0] for row in conn.execute("SELECT DISTINCT thread_id FROM handrail_events")]
    for thread_id in threads:
        rows = conn.execute(
            "SELECT seq, kind, created_at, payload FROM handrail_events WHERE thread_id = ? ORDER BY seq",
            (thread_id,),
        ).fetchall()
        events = [
            StoredEvent(seq, kind, created_at, bytes(payload)) for seq, kind, created_at, payload in rows
        ]
        conn.executemany(
            "UPDATE handrail_events SET payload = ? WHERE thread_id = ? AND seq = ?",
            [(event.payload, thread_id, event.seq) for event in seal_log(thread_id, events)],
        )
    conn.execute("DELETE FROM handrail_readings")


def _seal_every_row(conn: sqlite3.Connection) -> None:
    """Seal the rows written before rows had seals (``checkpoint/seals.py``, rule 6), as
    they are: each thread row and its pending rows bound to the hash sealed into the last
    record of its log (none when that record is a snapshot, whose chain value only the
    runtime can read, or has no seal), each deletion record over its columns. A row whose
    columns cannot be sealed (of the wrong type: damaged before) is left unsealed, and
    its readers check it column by column, as before."""
    conn.text_factory = _lenient
    try:
        for thread_id, head_seq, status, epoch, created, updated, metadata, count in conn.execute(
            "SELECT thread_id, head_seq, status, epoch, created_at, updated_at, metadata, pending_count "
            "FROM handrail_threads"
        ).fetchall():
            last = conn.execute(
                f"SELECT kind, substr(payload, 1, {1 + HASH_SIZE}) FROM handrail_events WHERE thread_id = ? "
                "ORDER BY seq DESC LIMIT 1",
                (thread_id,),
            ).fetchone()
            head = None
            if last is not None and last[0] != "snapshot" and isinstance(last[1], bytes):
                head = head_after([StoredEvent(1, "", 0.0, last[1])], None)
            try:
                digest = thread_digest(thread_id, head_seq, head, status, epoch, created, updated, count)
                seal = thread_seal(digest, metadata if isinstance(metadata, bytes) else metadata.encode())
            except (TypeError, AttributeError, OverflowError, struct.error):
                continue
            conn.execute(
                "UPDATE handrail_threads SET head_hash = ?, seal = ? WHERE thread_id = ?",
                (head, seal, thread_id),
            )
            for interrupt_id, position, kind, tools, at, payload in conn.execute(
                "SELECT interrupt_id, position, kind, tools, created_at, payload FROM handrail_pending "
                "WHERE thread_id = ?",
                (thread_id,),
            ).fetchall():
                try:
                    names = orjson.loads(tools)
                    seal = review_seal(head, thread_id, position, interrupt_id, kind, names, at, payload)
                except (TypeError, AttributeError, OverflowError, struct.error, orjson.JSONDecodeError):
                    continue
                conn.execute(
                    "UPDATE handrail_pending SET seal = ? WHERE thread_id = ? AND interrupt_id = ?",
                    (seal, thread_id, interrupt_id),
                )
        for row_id, thread_id, at, by, head_seq, head_hash, metadata in conn.execute(
            "SELECT id, thread_id, deleted_at, deleted_by, head_seq, head_hash, metadata "
            "FROM handrail_deletions"
        ).fetchall():
            try:
                raw = [value if isinstance(value, bytes) else value.encode() for value in (by, metadata)]
                seal = deletion_seal(thread_id, at, head_seq, head_hash, raw[0], raw[1])
            except (TypeError, AttributeError, OverflowError, struct.error):
                continue
            conn.execute("UPDATE handrail_deletions SET seal = ? WHERE id = ?", (seal, row_id))
    finally:
        conn.text_factory = str


def _lenient(raw: bytes) -> str | bytes:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw


# The file: handrail's tables among others, older files, damage ---------------------------
VERSIONS = "handrail_schema_version"
"""The table of applied migrations (``version``, ``description``, ``applied_at``)."""

PREFIX = "handrail_"
"""Every table and index handrail makes starts with this: it adds nothing else to a file."""

SERVICE_PREFIX = "handrail_server_"
"""The review service's own tables (``handrail.server.db``): handrail's, but not the store's
(``handrail tokens create`` may make them in a file before any saver opens it)."""

IMPLAUSIBLE_VERSION = 1000
"""A stored schema version above this was never written by handrail: the file is damaged."""

# Before its names were prefixed, handrail kept these tables under their plain names, and
# its versions in ``schema_version``, whose first row (version 1) has this description.
_LEGACY_TABLES = ("threads", "events", "pending", "pending_tools", "run_owners", "runs", "readings")
_LEGACY_FIRST = "event logs, thread rows, the pending-review inbox and run leases"  # as written then
_LAST_PLAIN = 3  # the last version handrail made under plain names
_VERSION_COLUMNS = ["version", "description", "applied_at"]
_RENAMED = "handrail's tables are named handrail_* now (in handrail_schema_version): use a newer handrail"

_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26


def schema_at(conn: sqlite3.Connection) -> int | None:
    """The version handrail's tables are at, or None if that takes a closer look (``prepare``)."""
    try:
        row = conn.execute(f"SELECT MAX(version) FROM {VERSIONS}").fetchone()
    except sqlite3.OperationalError:  # no such table (or not ours): ``prepare`` tells
        return None
    return row[0] if row and isinstance(row[0], int) else None


def apply(conn: sqlite3.Connection, path: str | None, migrations: Sequence[Migration]) -> None:
    """Run the migrations the file lacks, in version order, in the open write transaction.

    Each migration's statements run first, then its Python step (``Migration.run``),
    given the connection; its version is recorded after both. Anything that fails
    raises, and the caller rolls the whole transaction back.
    """
    current = prepare(conn, path)
    latest = migrations[-1].version
    if current > latest:
        raise ConfigurationError(
            f"the SQLite database {path!r} has schema version {current}, newer than "
            f"this handrail knows ({latest}); upgrade handrail"
        )
    for migration in migrations:
        if migration.version <= current:
            continue
        for statement in migration.statements:
            conn.execute(statement)
        if migration.run is not None:
            migration.run(conn)
        conn.execute(
            f"INSERT INTO {VERSIONS} (version, description, applied_at) VALUES (?, ?, ?)",
            (migration.version, migration.description, time.time()),
        )


def prepare(conn: sqlite3.Connection, path: str | None) -> int:
    """Find handrail's schema in the file, in the open write transaction: its version.

    A file without handrail's tables gets the version table (version 0). A file of a
    handrail from before the prefix has its tables and indexes renamed (see
    ``_adopt_plain_names``). Objects under handrail's names that handrail did not make
    are refused, with nothing changed.
    """
    objects = {
        str(name): str(kind)
        for name, kind in conn.execute(
            "SELECT name, type FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
        )
    }
    if VERSIONS in objects:
        if objects[VERSIONS] != "table" or _columns(conn, VERSIONS) != _VERSION_COLUMNS:
            raise _clash(path, [VERSIONS])
        return _stored_version(conn, path, VERSIONS)
    if _holds_plain_names(conn, objects):
        return _adopt_plain_names(conn, path, objects)
    clashing = sorted(
        name for name in objects if name.startswith(PREFIX) and not name.startswith(SERVICE_PREFIX)
    )
    if clashing:
        raise _clash(path, clashing)
    conn.execute(
        f"CREATE TABLE {VERSIONS} (version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at REAL "
        "NOT NULL)"
    )
    return 0


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [str(row[1]) for row in conn.execute(f'PRAGMA table_info("{table}")')]


def _stored_version(conn: sqlite3.Connection, path: str | None, table: str) -> int:
    """The highest applied version; one handrail never wrote means damage, not a newer handrail."""
    (version,) = conn.execute(f"SELECT MAX(version) FROM {table}").fetchone()
    if version is None:
        return 0
    if not isinstance(version, int) or not 0 < version <= IMPLAUSIBLE_VERSION:
        raise damaged_file(f"its schema version reads {version!r}", path)
    return version


def _holds_plain_names(conn: sqlite3.Connection, objects: dict[str, str]) -> bool:
    """Whether the file holds handrail's tables as a handrail before the prefix made them."""
    if any(objects.get(name) != "table" for name in ("schema_version", "threads", "events")):
        return False
    if _columns(conn, "schema_version") != _VERSION_COLUMNS:
        return False
    row = conn.execute("SELECT description FROM schema_version WHERE version = 1").fetchone()
    return row is not None and row[0] == _LEGACY_FIRST


def _adopt_plain_names(conn: sqlite3.Connection, path: str | None, objects: dict[str, str]) -> int:
    """Rename an older handrail's tables and indexes to ``handrail_*``; returns their version.

    The rows of ``schema_version`` move to ``handrail_schema_version``; ``schema_version``
    keeps one row, a version above any that handrail knew, so that an older handrail
    opening the file refuses it ("newer than this handrail knows") instead of making
    empty tables beside the renamed ones. Nothing else of the file is touched.
    """
    version = _stored_version(conn, path, "schema_version")
    tables = [name for name in _LEGACY_TABLES if objects.get(name) == "table"]
    taken = sorted(PREFIX + name for name in tables if PREFIX + name in objects)
    if taken:
        raise _clash(path, taken)
    for name in tables:
        conn.execute(f'ALTER TABLE "{name}" RENAME TO "{PREFIX}{name}"')
    marks = ", ".join("?" * len(tables))
    indexes = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN "
        f"({marks})",
        [PREFIX + name for name in tables],
    ).fetchall()
    for name, sql in indexes:  # SQLite cannot rename an index: make it again under its new name
        if str(name).startswith(PREFIX) or " ON " not in sql:
            continue
        conn.execute(f'DROP INDEX "{name}"')
        conn.execute(f'CREATE INDEX "{PREFIX}{name}" ON {sql.split(" ON ", 1)[1]}')
    conn.execute(
        f"CREATE TABLE {VERSIONS} (version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at REAL "
        "NOT NULL)"
    )
    conn.execute(f"INSERT INTO {VERSIONS} SELECT version, description, applied_at FROM schema_version")
    conn.execute("DELETE FROM schema_version")
    conn.execute(
        "INSERT INTO schema_version VALUES (?, ?, ?)", (max(version, _LAST_PLAIN) + 1, _RENAMED, time.time())
    )
    return version


def _clash(path: str | None, names: Sequence[str]) -> ConfigurationError:
    shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    return ConfigurationError(
        f"the SQLite file {path!r} holds tables or indexes under handrail's names that handrail did not "
        f"make ({shown}); handrail keeps its data only in objects named handrail_*: rename or drop "
        "these, or give handrail a file of its own"
    )


def is_damage(exc: BaseException | None) -> bool:
    """Whether an error from SQLite says the file is damaged (not locked, full, missing, ...)."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    # a damaged header's schema format reads as one SQLite does not know: damage too
    return code in (_SQLITE_CORRUPT, _SQLITE_NOTADB) or "unsupported file format" in str(exc)


def damaged_file(reason: BaseException | str, path: str | None) -> SerializationError:
    """The error for a damaged file: which file, that it is damaged, and what to do."""
    name = path if path not in (None, ":memory:") else None
    shown = repr(name) if name is not None else "(an open connection)"
    target = name or "FILE"
    return SerializationError(
        f"the SQLite file {shown} is damaged ({reason}); handrail cannot use it. Restore it from a "
        f"backup, or save what is still readable with: sqlite3 {target} .recover | sqlite3 recovered.db"
    )
