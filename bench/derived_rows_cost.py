"""What checking the rows derived from a thread's log costs (issue 24, SPEC rule 10).

A thread's row and its pending reviews are sealed when an append writes them and
checked when a reader reads them (``checkpoint/seals.py``). This times, on the memory,
SQLite and PostgreSQL savers of the source tree it imports:

* an append at the store (one event, a thread row with one pending review about two
  tools): the seals are computed here, once;
* a page of the inbox (``list_pending``, 50 reviews, from a store of ``--threads``
  paused threads), without a filter and by tool: every row on the page is checked,
  and no log is read;
* ``get_thread`` of a paused thread.

Each figure is the lowest of five medians (noise on a shared machine only adds). Run it on two source trees to compare (the figures are medians, in microseconds)::

    PYTHONPATH=/tmp/before/src .venv/bin/python bench/derived_rows_cost.py   # before
    .venv/bin/python bench/derived_rows_cost.py                              # this tree
    .venv/bin/python bench/derived_rows_cost.py --postgres postgresql://postgres@127.0.0.1/test
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import handrail
from handrail.checkpoint.base import Append, PendingFilter, PendingReview, StoredEvent, ThreadRecord
from handrail.checkpoint.integrity import GENESIS, seal


def _events(thread_id: str, start: int, count: int, prev: bytes) -> tuple[list[StoredEvent], bytes]:
    rows = []
    for seq in range(start, start + count):
        body = b'{"kind": "step", "n": %d, "text": "the quarterly report shows growth"}' % seq
        payload, prev = seal(prev, thread_id, seq, "step", 1.7e9 + seq, body)
        rows.append(StoredEvent(seq, "step", 1.7e9 + seq, payload))
    return rows, prev


def _record(thread_id: str, head: int, epoch: str) -> ThreadRecord:
    review = PendingReview(
        f"i{head}",
        "interrupt",
        ("write_file", "execute_sql"),
        1.7e9 + head,
        b'{"action_requests": [{"name": "write_file", "args": {"path": "a.txt"}}]}',
    )
    return ThreadRecord(
        thread_id, head, "interrupted", epoch, 1.7e9, 1.7e9 + head, {"team": "ops", "n": head % 7}, (review,)
    )


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def _time(fn: Callable[[], Any], rounds: int, repeats: int = 5) -> float:
    """The lowest of ``repeats`` medians of ``rounds`` calls (a machine's noise only adds)."""
    best = []
    for _ in range(repeats):
        samples = []
        for _ in range(rounds):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
        best.append(_median_us(samples))
    return min(best)


def measure(saver: Any, name: str, threads: int, appends: int) -> dict[str, float]:
    """The figures for one saver: append, inbox pages, get_thread (medians, microseconds)."""
    epoch = uuid.uuid4().hex
    durable = {"durable": False}
    for n in range(threads):  # the store the inbox reads: paused threads, two events each
        thread_id = f"{name}-{n:06d}"
        rows, _ = _events(thread_id, 1, 2, GENESIS)
        saver.append(thread_id, Append(rows, expected_seq=0, record=_record(thread_id, 2, epoch), **durable))
    thread_id = f"{name}-appends"
    prev = GENESIS
    samples = []
    for head in range(1, appends + 1):
        rows, prev = _events(thread_id, head, 1, prev)
        record = _record(thread_id, head, epoch)
        start = time.perf_counter()
        saver.append(thread_id, Append(rows, expected_seq=head - 1, record=record, **durable))
        samples.append(time.perf_counter() - start)
    figures = {"append": _median_us(samples[10:])}
    figures["inbox page"] = _time(lambda: saver.list_pending(PendingFilter(limit=50)), 200)
    figures["inbox page by tool"] = _time(
        lambda: saver.list_pending(PendingFilter(tool="execute_sql", limit=50)), 200
    )
    figures["inbox page by metadata"] = _time(
        lambda: saver.list_pending(PendingFilter(metadata={"team": "ops"}, limit=50)), 200
    )
    figures["get_thread"] = _time(lambda: saver.get_thread(f"{name}-000001"), 500)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2000, help="paused threads in each store")
    parser.add_argument("--appends", type=int, default=1000, help="appends timed on one thread")
    parser.add_argument("--postgres", help="a PostgreSQL DSN: time PostgresSaver too (in a new schema)")
    args = parser.parse_args()
    print(f"handrail from {Path(handrail.__file__).parent}")
    results: dict[str, dict[str, float]] = {}
    results["memory"] = measure(handrail.InMemorySaver(), "m", args.threads, args.appends)
    with (
        tempfile.TemporaryDirectory() as tmp,
        handrail.SqliteSaver(Path(tmp) / "bench.db", synchronous="NORMAL") as saver,
    ):
        results["sqlite"] = measure(saver, "s", args.threads, args.appends)
    if args.postgres:
        import psycopg

        from handrail.checkpoint.postgres import PostgresSaver

        schema = f"bench_{uuid.uuid4().hex[:12]}"
        try:
            with PostgresSaver.from_conn_string(args.postgres, schema=schema) as saver:
                saver.setup()
                results["postgres"] = measure(saver, "p", args.threads, args.appends)
        finally:
            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    names = list(next(iter(results.values())))
    print(f"{'median, microseconds':28}" + "".join(f"{store:>12}" for store in results))
    for figure in names:
        print(f"{figure:28}" + "".join(f"{results[store][figure]:12.1f}" for store in results))


if __name__ == "__main__":
    main()
