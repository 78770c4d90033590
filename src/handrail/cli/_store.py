"""The store a command names with ``--db`` or ``--postgres`` (and ``--schema``): checked,
opened, and named again in the commands a message suggests.

:func:`open_store` opens it for ``handrail demo`` and ``handrail audit verify``: a
SQLite path is checked first (``_sqlite_file.py``: a missing folder, another
application's database, a damaged file each get one line), a PostgreSQL server is probed
before its pool opens. :func:`store_flags` and :func:`program` write the flags and the
command back, so a printed command works from any folder.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from handrail.checkpoint.base import BaseCheckpointSaver
from handrail.cli._errors import StoreError, UsageError, one_line
from handrail.cli._sqlite_file import damaged_advice, is_damage, sqlite_file_problem

__all__ = ["DEFAULT_DB", "open_async_store", "open_store", "program", "server_db", "store_flags"]

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")

DEFAULT_DB = Path("handrail.db")
"""Where ``handrail demo`` keeps its threads without ``--db`` or ``--postgres`` (relative to the cwd)."""


@contextmanager
def open_store(
    args: argparse.Namespace, *, existing: bool, tables_must_exist: bool = False
) -> Iterator[tuple[BaseCheckpointSaver, str]]:
    """The saver ``--db``/``--postgres`` (and ``--schema``, where the command has it) name,
    and how to name it in messages; closed afterwards.

    With ``existing`` (``--resume``, ``--list``, ``audit verify``) a missing SQLite file is
    an error rather than a new, empty store. With ``tables_must_exist`` (``audit verify``)
    a PostgreSQL database or schema without handrail's tables is an error too, rather than
    a store created empty.
    """
    schema: str | None = getattr(args, "schema", None)
    if args.postgres is not None:
        with _open_postgres(args.postgres, schema, tables_must_exist=tables_must_exist) as opened:
            yield opened
        return
    if schema is not None:
        raise UsageError("--schema names a PostgreSQL schema: use it with --postgres DSN")
    path: Path = args.db if args.db is not None else DEFAULT_DB
    _check_sqlite_file(
        path,
        existing=existing,
        flags=store_flags(args),
        given=args.db is not None,
        reading=tables_must_exist,
    )
    from handrail.checkpoint.sqlite import SqliteSaver

    try:
        with SqliteSaver(path) as saver:
            yield saver, str(path)
    except sqlite3.DatabaseError as exc:
        if not is_damage(exc):
            raise
        raise StoreError(damaged_advice(path, one_line(exc))) from None


def _check_sqlite_file(
    path: Path, *, existing: bool, flags: str, given: bool = True, reading: bool = False
) -> None:
    """Refuse a SQLite path that cannot be the store meant. ``given``: the path came from
    ``--db`` (not the default); ``reading``: a command that reads a store (``audit verify``),
    not the demo."""
    if path.is_dir():
        raise UsageError(f"--db {str(path)!r} is a directory; give the path of a file")
    if not path.parent.is_dir():
        raise UsageError(
            f"--db {str(path)!r}: the folder {str(path.parent)!r} does not exist; "
            "create it first, or give a path in a folder that exists"
        )
    if not path.exists():
        if existing and reading:
            where = f"{os.path.abspath(path)!r}" + (
                "" if given else " (the default, as no --db or --postgres was given)"
            )
            raise StoreError(
                f"no handrail store at {where}: name the store to read with --db FILE or --postgres DSN"
            )
        if existing:
            raise StoreError(
                f"no handrail database at {str(path)!r}: start a demo first with "
                f"'{program()} demo{flags}', or pass the --db it used"
            )
        return
    problem = sqlite_file_problem(path)
    if problem is not None:
        raise StoreError(problem)


@contextmanager
def _open_postgres(
    dsn: str, schema: str | None = None, *, tables_must_exist: bool = False
) -> Iterator[tuple[BaseCheckpointSaver, str]]:
    try:
        import psycopg

        from handrail.checkpoint.postgres import PostgresSaver
    except ImportError:
        raise StoreError("--postgres needs psycopg 3: pip install 'handrail[postgres]'") from None
    if schema is not None and not _SCHEMA_NAME.fullmatch(schema):
        raise UsageError(
            f"--schema {schema!r} is not a plain SQL identifier (letters, digits, _ and $, "
            "not starting with a digit)"
        )
    where = f"PostgreSQL ({_safe_dsn(dsn)})"
    try:
        # A quick probe: the pool would retry an unreachable server for its whole timeout.
        with psycopg.connect(dsn, connect_timeout=10, autocommit=True) as conn:
            row = conn.execute("SELECT current_database(), current_schema()").fetchone()
            database, current = (str(row[0]), row[1]) if row is not None else ("?", None)
            shown = schema if schema is not None else current or "(none on the search_path)"
            where = f"{where}, database {database!r}, schema {shown!r}"
            if tables_must_exist and not _has_store(conn, schema):
                raise StoreError(
                    f"{where} holds no handrail store (it has no handrail_threads table), so there is "
                    "nothing to read: check --postgres and --schema"
                )
    except psycopg.Error as exc:
        raise StoreError(f"cannot connect to {where}: {one_line(exc)}") from None
    try:
        with PostgresSaver.from_conn_string(dsn, schema=schema, pool_size=4) as saver:
            saver.setup()
            yield saver, where
    except psycopg.Error as exc:
        raise StoreError(f"{where}: {one_line(exc)}") from None


def _has_store(conn: Any, schema: str | None) -> bool:
    """Whether the schema (the connection's own without one) holds handrail's tables."""
    # The schema is a plain identifier (checked by the caller), so it can be quoted as is.
    table = f'"{schema}".handrail_threads' if schema is not None else "handrail_threads"
    found = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
    return bool(found and found[0])


def server_db(args: argparse.Namespace) -> Any:
    """The service's tables (tokens, sessions, notifications) in the store the flags name."""
    from handrail.server.db import ServerDB

    if args.postgres is not None:
        return ServerDB.open(postgres=args.postgres, schema=args.schema)
    return ServerDB.open(db_path=args.db or DEFAULT_DB)


def open_async_store(args: argparse.Namespace) -> tuple[Any, str]:
    """The async saver the flags name, and how to name it in messages: for the commands that
    host agents or deliver notifications (serve, worker, sweep, webhooks, deliver, mcp)."""
    if args.postgres is not None:
        from handrail.checkpoint.postgres import AsyncPostgresSaver

        saver = AsyncPostgresSaver.from_conn_string(args.postgres, schema=args.schema)
        return saver, "PostgreSQL"
    from handrail.checkpoint.sqlite import AsyncSqliteSaver

    path = args.db or DEFAULT_DB
    return AsyncSqliteSaver(path), str(path)


def store_flags(args: argparse.Namespace) -> str:
    """``--postgres`` as given, or ``--db`` with the SQLite file's absolute path, for a command to print."""
    if args.postgres is not None:
        return " " + shlex.join(["--postgres", args.postgres])
    # Absolute, so the printed command works from any folder.
    return " " + shlex.join(["--db", os.path.abspath(args.db if args.db is not None else DEFAULT_DB)])


def program() -> str:
    """How the person ran this command: ``handrail`` when it is on the PATH, else its absolute path."""
    invoked = sys.argv[0] if sys.argv else ""
    if Path(invoked).name == "__main__.py":  # python -m handrail
        return f"{shlex.quote(sys.executable)} -m handrail"
    if Path(invoked).name != "handrail":
        return "handrail"
    found = shutil.which("handrail")
    try:
        if found is not None and os.path.samefile(found, invoked):
            return "handrail"
    except OSError:
        pass
    return shlex.quote(os.path.abspath(invoked))


def _safe_dsn(dsn: str) -> str:
    """The DSN without its password, for messages."""
    dsn = re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)('[^']*'|[^\s&]+)", r"\1***", dsn, flags=re.IGNORECASE)
