"""Helpers both benchmark sides share: databases, memory readings, JSON out (stdlib only).

psycopg is imported only by the functions that need it; both venvs have it.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

ADMIN_DSN = os.environ.get("BENCH_PG_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5432/test")
_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


def dsn_for(database: str) -> str:
    """The DSN of ``database`` on the same server as :data:`ADMIN_DSN`."""
    base, _, _ = ADMIN_DSN.rpartition("/")
    return f"{base}/{database}"


def recreate_database(name: str) -> str:
    """Drop and create an empty database; return its DSN."""
    import psycopg

    if not _NAME.match(name):
        raise ValueError(f"not a plain database name: {name!r}")
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return dsn_for(name)


def drop_database(name: str) -> None:
    import psycopg

    if not _NAME.match(name):
        raise ValueError(f"not a plain database name: {name!r}")
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def relation_bytes(dsn: str, tables: list[str]) -> int:
    """``pg_total_relation_size`` (heap, TOAST and indexes) of ``tables``, added up."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        total = 0
        for table in tables:
            row = conn.execute("SELECT pg_total_relation_size(to_regclass(%s))", (table,)).fetchone()
            total += int(row[0] or 0) if row else 0
        return total


def wal_syncs() -> int:
    """The server's WAL fsync count (``pg_stat_wal.wal_sync``; cluster-wide)."""
    import psycopg

    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        row = conn.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()
        return int(row[0]) if row else 0


def settle_stats() -> None:
    """Give closed backends time to report their statistics (they do so within a second)."""
    time.sleep(1.2)


def sqlite_file_bytes(path: str) -> tuple[int, int]:
    """The database file's size once its WAL is checkpointed, and what stays in the WAL."""
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    wal = path + "-wal"
    return os.path.getsize(path), os.path.getsize(wal) if os.path.exists(wal) else 0


def scratch_dir() -> str:
    """A fresh directory on the same disk as the work tree (not a tmpfs)."""
    root = Path(os.environ.get("BENCH_SCRATCH", tempfile.gettempdir()))
    root.mkdir(parents=True, exist_ok=True)
    return tempfile.mkdtemp(prefix="handrail-bench-", dir=root)


def proc_status_kb(field: str) -> int:
    """A ``/proc/self/status`` memory field (VmRSS, VmHWM) in KiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def reset_peak_rss() -> None:
    """Reset VmHWM to the current RSS (Linux 4.0+), so the peak covers what follows."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def write_json(path: str, value: Any) -> None:
    Path(path).write_text(json.dumps(value, indent=1))


def instructions_per_cycle(script: str, tree: Path, *flags: str) -> float:
    """Instructions one warm cycle costs with ``tree``'s handrail: ``script --cycles N
    *flags`` run under valgrind's callgrind for 20 and for 120 cycles, the difference over
    100 (repeatable on a shared, noisy machine, unlike seconds)."""
    import subprocess
    import sys

    counts = []
    for count in (20, 120):
        with tempfile.TemporaryDirectory() as scratch:
            done = subprocess.run(
                [
                    *("valgrind", "--tool=callgrind", f"--callgrind-out-file={scratch}/out"),
                    *(sys.executable, script, "--cycles", str(count), *flags),
                ],
                env={**os.environ, "PYTHONPATH": str(tree / "src"), "PYTHONHASHSEED": "0"},
                capture_output=True,
                text=True,
                check=True,
            )
        found = re.search(r"Collected : (\d+)", done.stderr)
        assert found is not None, done.stderr[-2000:]
        counts.append(int(found.group(1)))
    return (counts[1] - counts[0]) / 100
