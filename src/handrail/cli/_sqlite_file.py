"""Checking the SQLite file ``handrail demo --db`` names before the store opens it, and explaining damage.

A new user's most likely mistakes with ``--db`` are a path in a folder that does not
exist, another application's database, a file that is not SQLite at all, and a file
that was damaged (a disk error, a copy taken mid-write). Each gets one line that names
the file, says which it is and what to do; a damaged file is told apart from a foreign
one by its SQLite header, by SQLite's own ``quick_check`` and by handrail's migration
record (``schema_version`` holds versions 1..N; a gap means the record itself is damaged).

Private to :mod:`handrail.cli`.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

__all__ = ["SQLITE_HEADER", "damaged_advice", "is_damage", "sqlite_file_problem"]

SQLITE_HEADER = b"SQLite format 3\x00"
_HANDRAIL_TABLES = frozenset({"handrail_schema_version", "handrail_threads", "handrail_events"})
_OLDER_HANDRAIL_TABLES = frozenset({"schema_version", "threads", "events"})  # renamed when opened
_DAMAGE_CODES = frozenset({"SQLITE_CORRUPT", "SQLITE_NOTADB"})


def damaged_advice(path: Path | str, detail: str) -> str:
    """One line saying ``path`` is a damaged SQLite file, why SQLite says so, and what to do."""
    shown = str(path)
    return (
        f"{shown!r} is a damaged SQLite database ({detail}). Restore it from a backup, or recover "
        f"what is left into a new file: sqlite3 {shown} .recover | sqlite3 recovered.db"
    )


def is_damage(exc: BaseException) -> bool:
    """Whether an sqlite3 error says the file is damaged (not locked, missing or read-only)."""
    if not isinstance(exc, sqlite3.DatabaseError) or isinstance(exc, sqlite3.OperationalError):
        return False
    name = getattr(exc, "sqlite_errorname", "")
    return name in _DAMAGE_CODES or "malformed" in str(exc) or "not a database" in str(exc)


def sqlite_file_problem(path: Path) -> str | None:
    """What is wrong with the existing file ``path`` as a handrail store, in one line; None if nothing.

    An empty SQLite file is fine (handrail creates its tables).
    """
    try:
        with path.open("rb") as file:
            header = file.read(len(SQLITE_HEADER))
    except OSError as exc:
        return f"cannot read {str(path)!r}: {exc.strerror or exc}"
    if header and header != SQLITE_HEADER:
        return (
            f"{str(path)!r} is not a handrail database: it is not an SQLite file "
            "(or its first bytes are damaged; then restore it from a backup)"
        )
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True)
    except sqlite3.Error as exc:
        return f"cannot open {str(path)!r}: {exc}"
    try:
        tables = {str(row[0]) for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        ours = tables >= _HANDRAIL_TABLES
        if tables and not (ours or tables >= _OLDER_HANDRAIL_TABLES):
            shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
            return f"{str(path)!r} is not a handrail database (it holds other tables: {shown})"
        verdict = [str(row[0]) for row in conn.execute("PRAGMA quick_check")]
        if verdict != ["ok"]:
            return damaged_advice(path, f"quick_check: {verdict[0]}")
        if tables:
            table = "handrail_schema_version" if ours else "schema_version"
            versions = sorted(int(row[0]) for row in conn.execute(f"SELECT version FROM {table}"))
            if versions != list(range(1, len(versions) + 1)):
                return damaged_advice(path, f"its record of schema versions is garbled: {versions[:6]}")
    except sqlite3.OperationalError as exc:
        return f"cannot read {str(path)!r}: {exc}"
    except (sqlite3.DatabaseError, ValueError, TypeError) as exc:
        return damaged_advice(path, str(exc).strip() or type(exc).__name__)
    finally:
        conn.close()
    return None
