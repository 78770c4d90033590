"""The reviewers' inbox over 100,000 paused threads in PostgreSQL.

``agent.list_interrupts(...)`` reads the ``pending``, ``pending_tools`` and
``pending_metadata`` tables (one row per pending review, one per tool it is about, one
per metadata entry of its thread), never the event logs. This fills a database with
paused threads and times the inbox with its filters.

Filling: a few *template* threads run for real (every combination of four review
shapes, seven teams and two priorities, so each template's events and record agree
with its metadata). Each of the N threads copies one template's stored events and
thread record, with a new thread id, a new epoch and a creation time spread over the
last 30 days, and goes in through ``PostgresSaver.append``: the real schema, the real
indexes, one transaction per thread. The loading connections use
``synchronous_commit=off`` (faster, and it changes nothing that is stored); the
timed connections use the server's defaults. ``VACUUM ANALYZE`` runs after the load,
as autovacuum would (it also sets the visibility map, so index-only scans skip the heap).

Timed: ``list_interrupts`` with no filter, by tool, by age (``older_than``), by
metadata, combined, a rare filter, and paging through the inbox with the cursor;
each call decodes its page (50 reviews). ``EXPLAIN (ANALYZE, BUFFERS)`` plans of the
main queries are printed and saved.

Run::

    .venv/bin/python bench/inbox_postgres.py                 # 100,000 threads (a few minutes to fill)
    .venv/bin/python bench/inbox_postgres.py --reuse         # keep an already filled database
    .venv/bin/python bench/inbox_postgres.py --threads 20000 --out /tmp/inbox.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common
import _script
import psycopg
from _workload_handrail import BenchModel, execute_sql, write_file
from psycopg_pool import ConnectionPool

from handrail import HumanInTheLoopMiddleware, PostgresSaver, ScriptedModel, create_agent, tool
from handrail.checkpoint.base import Append, PendingFilter, StoredEvent

DATABASE = "bench_inbox"
TEAMS = ("billing", "search", "payments", "identity", "mobile", "data-platform", "support-tools")
PRIORITIES = ("normal", "high")
DAY = 86400.0


@tool
def send_email(to: str, subject: str, body: str) -> str:
    """Send an email to a customer."""
    return f"sent to {to}"


@tool
def refund_payment(payment_id: str, amount_cents: int) -> str:
    """Refund a payment, in full or in part."""
    return f"refunded {amount_cents} on {payment_id}"


TOOLS = [write_file, execute_sql, send_email, refund_payment]
POLICY = {"write_file": True, "execute_sql": True, "send_email": True, "refund_payment": True}


def _shapes() -> list[tuple[str, Any]]:
    """The first model answer of each kind of template thread (what gets reviewed)."""
    email = {
        "content": "I'll tell the customer the export is fixed.",
        "tool_calls": [
            {
                "name": "send_email",
                "args": {
                    "to": "ops@example.com",
                    "subject": "Nightly export fixed",
                    "body": "The nightly export failed twice after the schema change; it is fixed and rerun.",
                },
                "id": "call_email",
            }
        ],
    }
    refund = {
        "content": "The invoice was charged twice; refunding the duplicate and logging it.",
        "tool_calls": [
            {
                "name": "refund_payment",
                "args": {"payment_id": "pay_8812", "amount_cents": 4900},
                "id": "call_refund",
            },
            {
                "name": "execute_sql",
                "args": {"query": "UPDATE invoices SET refunded = true WHERE id = 8812"},
                "id": "call_sql",
            },
        ],
    }
    return [
        ("write_file+execute_sql", None),  # the comparison workload's first turn
        ("execute_sql", {"content": "", "tool_calls": [_script.turn_answer(1)["tool_calls"][1]]}),
        ("send_email", email),
        ("refund_payment+execute_sql", refund),
    ]


def make_templates(saver: PostgresSaver) -> list[tuple[list[StoredEvent], Any]]:
    templates = []
    for shape, answer in _shapes():
        model = (
            BenchModel(None) if answer is None else ScriptedModel([answer] * (len(TEAMS) * len(PRIORITIES)))
        )
        agent = create_agent(model, TOOLS, middleware=[HumanInTheLoopMiddleware(POLICY)], checkpointer=saver)
        for team in TEAMS:
            for priority in PRIORITIES:
                thread_id = f"template-{shape}-{team}-{priority}"
                config = {
                    "configurable": {"thread_id": thread_id},
                    "metadata": {"team": team, "priority": priority},
                }
                result = agent.invoke(
                    {"messages": [{"role": "user", "content": _script.USER_PROMPT}]}, config
                )
                assert result["__interrupt__"], thread_id
                read = saver.read(thread_id)
                templates.append((read.events, read.record))
                saver.delete_thread(thread_id)
    return templates


def fill(dsn: str, threads: int, workers: int = 4) -> dict[str, Any]:
    pool: ConnectionPool[Any] = ConnectionPool(
        dsn,
        min_size=workers,
        max_size=workers,
        kwargs={"autocommit": True, "options": "-c synchronous_commit=off"},
        open=True,
    )
    saver = PostgresSaver(pool)
    saver.setup()
    templates = make_templates(saver)
    now = time.time()

    def one(i: int) -> None:
        events, record = templates[(i * 7919) % len(templates)]
        created = now - (i * 2654435761 % 1_000_000) / 1_000_000 * 30 * DAY  # spread over 30 days
        thread_id = f"thread-{i:06d}"
        spacing = [created + 0.001 * k for k in range(len(events))]
        copied = [dataclasses.replace(e, created_at=spacing[k]) for k, e in enumerate(events)]
        pending = tuple(dataclasses.replace(p, created_at=spacing[-1]) for p in record.pending)
        saver.append(
            thread_id,
            Append(
                copied,
                expected_seq=0,
                record=dataclasses.replace(
                    record,
                    thread_id=thread_id,
                    epoch=uuid.uuid4().hex,
                    created_at=spacing[0],
                    updated_at=spacing[-1],
                    pending=pending,
                ),
            ),
        )

    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as executor:
        for done, _ in enumerate(executor.map(one, range(threads), chunksize=256), start=1):
            if done % 20000 == 0:
                print(f"  {done:,} threads ({done / (time.perf_counter() - start):,.0f}/s)", flush=True)
    seconds = time.perf_counter() - start
    pool.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return {
        "threads": threads,
        "templates": len(templates),
        "seconds": seconds,
        "per_second": threads / seconds,
    }


def counts(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        out = {}
        for table in ("threads", "events", "pending", "pending_tools", "pending_metadata"):
            exists = conn.execute("SELECT to_regclass(%s)", (f"handrail_{table}",)).fetchone()
            if exists is None or exists[0] is None:  # a table of a newer schema
                continue
            row = conn.execute(f"SELECT count(*) FROM handrail_{table}").fetchone()
            out[table] = int(row[0]) if row else 0
            row = conn.execute("SELECT pg_total_relation_size(%s)", (f"handrail_{table}",)).fetchone()
            out[f"{table}_bytes"] = int(row[0]) if row else 0
        return out


def timed(call: Callable[[], Any], samples: int, warmup: int = 3) -> dict[str, Any]:
    for _ in range(warmup):
        call()
    times = []
    result = None
    for _ in range(samples):
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
    ordered = sorted(times)
    return {
        "median_ms": statistics.median(ordered) * 1e3,
        "p90_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))] * 1e3,
        "items": len(result.items) if result is not None else 0,
        "samples": samples,
    }


CASES: list[tuple[str, dict[str, Any]]] = [
    ("first page, no filter", {}),
    ('tool="execute_sql" (3 of 4 shapes)', {"tool": "execute_sql"}),
    ('tool="send_email" (1 of 4 shapes)', {"tool": "send_email"}),
    ("older_than=7 days", {"older_than": timedelta(days=7)}),
    ('metadata={"team": "payments"}', {"metadata": {"team": "payments"}}),
    (
        'tool="refund_payment", metadata={"team": "billing", "priority": "high"}, older_than=1 day',
        {
            "tool": "refund_payment",
            "metadata": {"team": "billing", "priority": "high"},
            "older_than": timedelta(days=1),
        },
    ),
    ('rare: metadata={"team": "nobody"} (matches nothing)', {"metadata": {"team": "nobody"}}),
    ('kind="outcome_unknown" (matches nothing)', {"kind": "outcome_unknown"}),
]

EXPLAINED: list[tuple[str, PendingFilter]] = [
    ("no filter", PendingFilter(limit=50)),
    ('tool="send_email"', PendingFilter(tool="send_email", limit=50)),
    ('metadata={"team": "payments"}', PendingFilter(metadata={"team": "payments"}, limit=50)),
    (
        'tool="refund_payment", metadata team billing + priority high, older_than 1 day',
        PendingFilter(
            tool="refund_payment", metadata={"team": "billing", "priority": "high"}, older_than=DAY, limit=50
        ),
    ),
    ('metadata={"team": "nobody"} (no match)', PendingFilter(metadata={"team": "nobody"}, limit=50)),
]


def measure(dsn: str, samples: int, threads: int) -> dict[str, Any]:
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        agent = create_agent(
            BenchModel(None), TOOLS, middleware=[HumanInTheLoopMiddleware(POLICY)], checkpointer=saver
        )
        results: dict[str, Any] = {"cases": []}
        one_thread = ("one thread (thread_id=...)", {"thread_id": f"thread-{threads // 2:06d}"})
        for label, kwargs in [*CASES, one_thread]:
            row = timed(lambda kwargs=kwargs: agent.list_interrupts(**kwargs), samples)
            row["case"] = label
            results["cases"].append(row)
            print(
                f"  {label:<95} {row['median_ms']:8.2f} ms  (p90 {row['p90_ms']:.2f}, {row['items']} items)"
            )

        # paging: walk 40 pages of 50 with the cursor, timing each page
        for label, kwargs in (
            ("no filter", {}),
            ('tool="execute_sql"', {"tool": "execute_sql"}),
            ('metadata={"team": "payments"}', {"metadata": {"team": "payments"}}),
        ):
            pages = []
            cursor = None
            for _ in range(40):
                start = time.perf_counter()
                page = agent.list_interrupts(limit=50, cursor=cursor, **kwargs)
                pages.append(time.perf_counter() - start)
                cursor = page.next_cursor
                assert cursor is not None
            ordered = sorted(pages)
            row = {
                "case": f"paging, {label}: 40 pages of 50 with the cursor",
                "median_ms": statistics.median(ordered) * 1e3,
                "p90_ms": ordered[int(len(ordered) * 0.9)] * 1e3,
                "last_page_ms": pages[-1] * 1e3,
                "items": 50,
                "samples": len(pages),
            }
            results["cases"].append(row)
            print(
                f"  {row['case']:<95} {row['median_ms']:8.2f} ms per page (last page {row['last_page_ms']:.2f})"
            )

        queries = saver._queries  # the SQL list_pending runs, to EXPLAIN it
        plans = []
        with psycopg.connect(dsn, autocommit=True) as conn:
            for label, pending_filter in EXPLAINED:
                query = queries.pending_query(pending_filter, time.time())
                rows = conn.execute(
                    "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + query.sql, query.params
                ).fetchall()
                plans.append({"case": label, "sql": query.sql, "plan": "\n".join(r[0] for r in rows)})
        results["plans"] = plans
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument(
        "--reuse", action="store_true", help="keep the database if it already holds --threads threads"
    )
    parser.add_argument("--keep", action="store_true", help="do not drop the database at the end")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "inbox.json"))
    args = parser.parse_args(argv)
    dsn = _common.dsn_for(DATABASE)
    filled: dict[str, Any] | None = None
    existing = None
    if args.reuse:
        try:
            existing = counts(dsn)
        except psycopg.Error:
            existing = None
    if existing is None or existing["threads"] < args.threads:
        _common.recreate_database(DATABASE)
        print(f"filling {args.threads:,} paused threads ...", flush=True)
        filled = fill(dsn, args.threads)
        print(f"  filled in {filled['seconds']:.0f} s ({filled['per_second']:,.0f} threads/s)")
    sizes = counts(dsn)
    print("rows and sizes:", json.dumps(sizes))
    print("list_interrupts (limit 50):")
    results = measure(dsn, args.samples, sizes["threads"])
    results.update(filled=filled, sizes=sizes)
    with psycopg.connect(dsn, autocommit=True) as conn:
        results["postgres"] = conn.execute("SHOW server_version").fetchone()[0]
    for plan in results["plans"]:
        print(f"\nEXPLAIN ANALYZE, {plan['case']}:\n{plan['plan']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    _common.write_json(args.out, results)
    if not args.keep:
        _common.drop_database(DATABASE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
