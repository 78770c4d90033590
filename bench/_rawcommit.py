"""The floor under a review cycle: two durable commits of a tiny INSERT on the same database.

A review cycle must make at least two durable commits: one before the approved tools
run (the decision, so a crash cannot lose it or run a tool twice) and one at the next
pause (the tool results, the model's answer and the new review). This measures two
such commits back to back, with the savers' connection settings:

* SQLite: a file on the same disk, WAL, ``synchronous=FULL`` (handrail's and
  LangGraph's default), each commit a ``BEGIN IMMEDIATE; INSERT; COMMIT``;
* Postgres: the server's default ``synchronous_commit``, an autocommit connection,
  each commit one ``INSERT`` (its own transaction).

Run::

    .venv/bin/python bench/_rawcommit.py --out /tmp/raw.json
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

PAYLOAD = "x" * 64


def sqlite_pairs(samples: int, warmup: int) -> list[float]:
    folder = _common.scratch_dir()
    try:
        path = str(Path(folder) / "raw.db")
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        times = []
        for i in range(warmup + samples):
            start = time.perf_counter()
            for _ in range(2):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO t (v) VALUES (?)", (PAYLOAD,))
                conn.execute("COMMIT")
            if i >= warmup:
                times.append(time.perf_counter() - start)
        conn.close()
        return times
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def postgres_pairs(samples: int, warmup: int) -> tuple[list[float], str]:
    import psycopg

    name = "bench_rawcommit"
    dsn = _common.recreate_database(name)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            setting = conn.execute("SHOW synchronous_commit").fetchone()[0]
            conn.execute(
                "CREATE TABLE t (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text NOT NULL)"
            )
            times = []
            for i in range(warmup + samples):
                start = time.perf_counter()
                for _ in range(2):
                    conn.execute("INSERT INTO t (v) VALUES (%s)", (PAYLOAD,))
                if i >= warmup:
                    times.append(time.perf_counter() - start)
        return times, setting
    finally:
        _common.drop_database(name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    pg, setting = postgres_pairs(args.samples, args.warmup)
    _common.write_json(
        args.out,
        {
            "task": "rawcommit",
            "sqlite": sqlite_pairs(args.samples, args.warmup),
            "postgres": pg,
            "postgres_synchronous_commit": setting,
            "sqlite_version": sqlite3.sqlite_version,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
