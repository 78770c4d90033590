"""How long from an event's commit to its delivery, under 50 reviews a second (issue 27).

Three processes, as in production: ``handrail serve`` (its deliverer inside, the default
``--deliver-concurrency 16``) on SQLite or PostgreSQL; a webhook receiver
(``bench/_receiver.py``) that answers 204 at once and notes when each delivery arrived;
and this script, which asks for ``--rate`` reviews a second for ``--seconds`` seconds
(each a new thread: ``POST /runs/wait`` pauses on one reviewed call) and answers each one
as soon as it is asked (``POST .../answer``). The webhook takes ``review.requested`` and
``review.decided``; the delay of a delivery is its arrival at the receiver minus its
event's commit time (the payload's ``timestamp``, taken where the store writes it).

Run::

    python bench/notify_delay.py                      # SQLite and PostgreSQL, 50/s for 20 s
    python bench/notify_delay.py --stores postgres --rate 100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
DSN = os.environ.get("HANDRAIL_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
HANDRAIL = [sys.executable, "-m", "handrail"]


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def _started(args: list[str], ready: str, **options: Any) -> tuple[subprocess.Popen[str], re.Match[str]]:
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **options)
    assert process.stdout is not None
    for line in process.stdout:
        found = re.search(ready, line)
        if found:
            return process, found
    raise RuntimeError(f"{args[:4]} stopped before it was ready")


def _store_flags(store: str, folder: Path) -> list[str]:
    if store == "sqlite":
        return ["--db", str(folder / "bench.db")]
    schema = f"bench_notify_{os.getpid()}"
    return ["--postgres", DSN, "--schema", schema]


def _drop(store: str) -> None:
    if store != "postgres":
        return
    import psycopg

    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "bench_notify_{os.getpid()}" CASCADE')


async def _load(url: str, token: str, rate: float, seconds: float) -> tuple[int, float]:
    """Ask ``rate`` reviews a second, each on a new thread, and answer each at once;
    (reviews, the rate reached)."""
    headers = {"x-api-key": token}
    body = {"assistant_id": "bench", "input": {"messages": [{"role": "user", "content": "go"}]}}
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60, limits=limits) as client:

        async def one() -> None:
            thread = (await client.post("/threads", json={})).json()["thread_id"]
            paused = (await client.post(f"/threads/{thread}/runs/wait", json=body)).json()
            (review,) = paused["__interrupt__"]
            answered = await client.post(
                f"/handrail/threads/{thread}/interrupts/{review['id']}/answer",
                json={"answer": {"decisions": [{"type": "approve"}]}},
            )
            answered.raise_for_status()

        tasks: list[asyncio.Task[None]] = []
        start = time.monotonic()
        count = int(rate * seconds)
        for n in range(count):
            delay = start + n / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
        return count, count / (time.monotonic() - start)


def measure(store: str, rate: float, seconds: float, *, hooked: bool = True) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        flags = _store_flags(store, folder)
        out = folder / "arrivals.jsonl"
        receiver, found = _started(
            [sys.executable, str(HERE / "_receiver.py"), str(out)], r"listening on (\d+)"
        )
        hook = f"http://127.0.0.1:{found.group(1)}/hook"
        serve = None
        try:
            serve, served = _started(
                [*HANDRAIL, "serve", "_service_agent:agent", *flags, "--port", "0", "--sweep-every", "0"],
                r"on (http://127\.0\.0\.1:\d+)",
                cwd=HERE,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            assert serve.stdout is not None
            import threading

            threading.Thread(target=serve.stdout.read, daemon=True).start()
            url = served.group(1)
            made = subprocess.run(
                [
                    *HANDRAIL,
                    "tokens",
                    "create",
                    "--name",
                    "bench",
                    "--scope",
                    "run",
                    "--scope",
                    "review",
                    *flags,
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            token = made.stdout.strip().splitlines()[-1]
            if hooked:
                subprocess.run(
                    [
                        *HANDRAIL,
                        "webhooks",
                        "add",
                        hook,
                        "--events",
                        "review.requested,review.decided",
                        *flags,
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                )
            load = os.getloadavg()[0]
            count, reached = asyncio.run(_load(url, token, rate, seconds))
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                lines = out.read_text().splitlines() if out.exists() else []
                if len(lines) >= 2 * count or not hooked:
                    break
                time.sleep(0.2)
        finally:
            if serve is not None:
                serve.terminate()
                serve.wait(30)
            receiver.terminate()
            receiver.wait(30)
            _drop(store)
        rows = [json.loads(line) for line in lines]
    delays = {kind: [r["arrived"] - r["committed"] for r in rows if r["type"] == kind] for kind in _KINDS}
    every = [d for found in delays.values() for d in found]
    return {
        "store": store,
        "reviews": count,
        "rate": reached,
        "delivered": len(rows),
        "unique": len({r["id"] for r in rows}),
        "load": load,
        "delays": delays,
        "every": every,
    }


_KINDS = ("review.requested", "review.decided")


def table(results: list[dict[str, Any]]) -> str:
    head = "| store | reviews/s reached | deliveries | event | p50 ms | p99 ms | max ms | load avg |"
    lines = [head, "|---|---:|---:|---|---:|---:|---:|---:|"]
    for r in results:
        for kind in (*_KINDS, "both"):
            found = r["every"] if kind == "both" else r["delays"][kind]
            if not found:
                continue
            lines.append(
                f"| {r['store']} | {r['rate']:.1f} | {r['delivered']} ({r['unique']} ids) | {kind} | "
                f"{_pct(found, 0.5):.0f} | {_pct(found, 0.99):.0f} | {max(found) * 1000:.0f} | {r['load']:.2f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", nargs="+", default=["sqlite", "postgres"], choices=["sqlite", "postgres"])
    parser.add_argument("--rate", type=float, default=50.0, help="reviews a second (default 50)")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long (default 20)")
    parser.add_argument(
        "--baseline", action="store_true", help="also the rate reached with no endpoint (what delivery costs)"
    )
    args = parser.parse_args()
    results = [measure(store, args.rate, args.seconds) for store in args.stores]
    print(table(results))
    if args.baseline:
        for store in args.stores:
            found = measure(store, args.rate, args.seconds, hooked=False)
            print(
                f"{store}, no endpoint: {found['rate']:.1f} reviews/s reached (load avg {found['load']:.2f})"
            )


if __name__ == "__main__":
    main()
