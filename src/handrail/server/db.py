"""The service's own tables, beside the agent's store (SQLite file or PostgreSQL database).

The store's tables belong to the checkpointer; the service keeps what only it needs -
credentials, browser sessions and one-time sign-in links - in tables of its own, named
``handrail_server_*``, through its own connection. Threads are the store's alone
(``_service.py``, rule S1): the table of threads created and not run that older
versions kept, ``handrail_server_threads``, is moved into the store at start-up and
dropped (:meth:`ServerDB.old_thread_rows`). SQL is written once with ``?``
placeholders; for PostgreSQL they become ``%s``.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["ServerDB", "Transaction"]

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS handrail_server_keys (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS handrail_server_tokens (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        roles TEXT NOT NULL,
        digest TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        revoked_at DOUBLE PRECISION
    )""",
    """CREATE TABLE IF NOT EXISTS handrail_server_sessions (
        digest TEXT PRIMARY KEY,
        token_id TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS handrail_server_links (
        digest TEXT PRIMARY KEY,
        token_id TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL,
        used_at DOUBLE PRECISION
    )""",
]


# Columns added after the first release of a table: (table, column, type).
_ADDED_COLUMNS = [
    ("handrail_server_tokens", "scopes", "TEXT"),  # JSON list; NULL: made before scopes
    ("handrail_server_tokens", "migrated_at", "DOUBLE PRECISION"),  # when scopes were first given
]


class Transaction:
    """The statements of one :meth:`ServerDB.transaction`."""

    def __init__(self, conn: Any, convert: Callable[[str], str]) -> None:
        self._conn = conn
        self._convert = convert

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; the number of rows it changed."""
        return int(self._conn.execute(self._convert(sql), tuple(params)).rowcount or 0)

    def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """Run one statement for each of ``rows`` (on PostgreSQL in one round trip: psycopg
        pipelines it); the number of rows they changed together."""
        if not rows:
            return 0
        cursor = self._conn.cursor()
        cursor.executemany(self._convert(sql), [tuple(row) for row in rows])
        return int(cursor.rowcount or 0)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement that returns rows (a ``SELECT``, or ``... RETURNING``); its rows."""
        return [tuple(row) for row in self._conn.execute(self._convert(sql), tuple(params)).fetchall()]


class ServerDB:
    """One connection to the service's tables, safe to share between threads.

    Example::

        db = ServerDB.open(db_path="handrail.db")        # or ServerDB.open(postgres=dsn)
        db.query("SELECT name FROM handrail_server_tokens")
    """

    def __init__(self, conn: Any, *, postgres: bool) -> None:
        self._conn = conn
        self._postgres = postgres
        self._lock = threading.Lock()
        self._opened: dict[str, Any] | None = None  # how :meth:`open` reached it (for :meth:`another`)
        serial = "BIGSERIAL" if postgres else "INTEGER"  # an INTEGER PRIMARY KEY is SQLite's rowid
        for statement in _SCHEMA:
            self.execute(statement.replace("{serial}", serial))
        for table, column, kind in _ADDED_COLUMNS:
            self._add_column(table, column, kind)
        self._migrate_scopes()

    def _add_column(self, table: str, column: str, kind: str) -> None:
        if self._postgres:
            self.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {kind}")
            return
        if column in {str(row[1]) for row in self.query(f"PRAGMA table_info({table})")}:
            return
        try:
            self.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        except sqlite3.OperationalError as exc:  # another process added it a moment ago
            if "duplicate column" not in str(exc):
                raise

    def _migrate_scopes(self) -> None:
        """Give tokens made before scopes existed the scopes they were used for (SPEC §5.3)."""
        from handrail.server.tokens import MIGRATED_SCOPES

        self.execute(
            "UPDATE handrail_server_tokens SET scopes = ?, migrated_at = ? WHERE scopes IS NULL",
            ('["' + '", "'.join(MIGRATED_SCOPES) + '"]', time.time()),
        )

    @classmethod
    def open(
        cls,
        *,
        db_path: str | Path | None = None,
        postgres: str | None = None,
        schema: str | None = None,
        relaxed: bool = False,
    ) -> ServerDB:
        """Open the SQLite file ``db_path`` or the PostgreSQL database ``postgres`` (a DSN).

        ``schema``: the PostgreSQL schema for the tables (created if missing), as the
        store's own ``schema`` option. ``relaxed``: a commit returns before it reaches the
        disk (SQLite ``synchronous = NORMAL``, PostgreSQL ``synchronous_commit = off``): a
        crash of the machine may lose the last commits, never the database. Only for
        writes that can be made again (the deliverer's: ``handrail.notify.outbox``).
        """
        if postgres is not None:
            import psycopg
            from psycopg import sql

            conn: Any = psycopg.connect(postgres, autocommit=True)
            if schema is not None:
                conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
                conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            if relaxed:
                conn.execute("SET synchronous_commit = off")
            found = cls(conn, postgres=True)
        elif db_path is None:
            raise ValueError("ServerDB.open needs db_path or postgres")
        else:
            conn = sqlite3.connect(str(db_path), check_same_thread=False, isolation_level=None, timeout=30)
            if relaxed:
                conn.execute("PRAGMA synchronous = NORMAL")
            found = cls(conn, postgres=False)
        found._opened = {"db_path": db_path, "postgres": postgres, "schema": schema}
        return found

    def another(self, *, relaxed: bool = False) -> ServerDB:
        """A second connection to the same database (this one when it was not made by
        :meth:`open`); ``relaxed`` as :meth:`open` takes it."""
        if self._opened is None:
            return self
        return ServerDB.open(**self._opened, relaxed=relaxed)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; return the number of rows it changed."""
        with self._lock:
            cursor = self._conn.execute(self._sql(sql), tuple(params))
            return int(cursor.rowcount or 0)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one query; return its rows."""
        with self._lock:
            cursor = self._conn.execute(self._sql(sql), tuple(params))
            return [tuple(row) for row in cursor.fetchall()]

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """One transaction on this connection (others wait): all of what runs in it, or, on
        an error, none of it.

        Example::

            with db.transaction() as tx:
                tx.execute("UPDATE handrail_server_keys SET value = ? WHERE name = ?", ("v", "k"))
        """
        with self._lock:
            if self._postgres:
                with self._conn.transaction():
                    yield Transaction(self._conn, self._sql)
                return
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield Transaction(self._conn, self._sql)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def batch(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[int]:
        """Run ``statements`` (SQL and parameters) in one transaction: all of them or, on
        an error, none; the rows each changed."""
        with self.transaction() as tx:
            return [tx.execute(q, p) for q, p in statements]

    def old_thread_rows(self) -> list[tuple[Any, ...]] | None:
        """The rows of ``handrail_server_threads`` (thread id, assistant, metadata JSON,
        creation time), the threads an older version kept here; None when the table is gone."""
        if self._postgres:
            (found,) = self.query("SELECT to_regclass('handrail_server_threads') IS NOT NULL")
        else:
            (found,) = self.query(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'handrail_server_threads'"
            )
        if not found[0]:
            return None
        return self.query("SELECT thread_id, assistant_id, metadata, created_at FROM handrail_server_threads")

    def drop_old_threads(self) -> None:
        """Drop ``handrail_server_threads`` once its rows are in the store."""
        self.execute("DROP TABLE IF EXISTS handrail_server_threads")

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._conn.close()

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self._postgres else sql
