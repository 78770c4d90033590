"""One PostgreSQL review cycle, one cold load and one worker's claim, taken apart.

Counts what the Postgres saver sends: round trips (one batch of the saver's driver is one
round trip, several statements in a pipeline), statements, and time spent waiting in
psycopg and the server (the driver's calls), against the whole call's wall time and the
process's CPU time. Bytes sent and received are read from libpq's trace of one
connection (a saver made on that one connection). The workload is the comparison's
(``_workload_handrail.py``) on a fresh database.

* **warm cycle** - ``invoke(Command(resume=...))`` until the next interrupt, same agent;
* **first pause** - ``invoke(input)`` on a new thread;
* **cold resume** - a resume by a new agent object, at 10 and 500 turns;
* **answer recorded** - ``adecide`` by another agent object (the thread is queued);
* **worker** - ``Worker.run_thread``: claim, load, run the calls, to the next pause.

Run::

    .venv/bin/python bench/pg_round_trips.py
    .venv/bin/python bench/pg_round_trips.py --cycles 20
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common
import _script
import psycopg
from _workload_handrail import Handrail

from handrail import AsyncPostgresSaver, PostgresSaver
from handrail.checkpoint.postgres import _drivers as drivers
from handrail.worker import Worker

_LOG: list[tuple[str, ...]] = []
_WAIT = [0.0]


def _words(sql: str) -> str:
    return " ".join(sql.split()[:3])[:40]


def _count() -> None:
    """Wrap both drivers' ``execute``: one call is one round trip."""
    sync_execute, async_execute = drivers.SyncDriver.execute, drivers.AsyncDriver.execute

    def sync(self: Any, conn: Any, batch: Any) -> Any:
        start = time.perf_counter()
        try:
            return sync_execute(self, conn, batch)
        finally:
            _WAIT[0] += time.perf_counter() - start
            _LOG.append(tuple(_words(q.sql) for q in batch))

    async def aio(self: Any, conn: Any, batch: Any) -> Any:
        start = time.perf_counter()
        try:
            return await async_execute(self, conn, batch)
        finally:
            _WAIT[0] += time.perf_counter() - start
            _LOG.append(tuple(_words(q.sql) for q in batch))

    drivers.SyncDriver.execute = sync  # type: ignore[method-assign]
    drivers.AsyncDriver.execute = aio  # type: ignore[method-assign]


class Window:
    """What the saver sent while the block ran."""

    def __enter__(self) -> Window:
        _LOG.clear()
        _WAIT[0] = 0.0
        self.cpu, self.start = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *_: object) -> None:
        self.wall = time.perf_counter() - self.start
        self.cpu = time.process_time() - self.cpu
        self.log, self.wait = list(_LOG), _WAIT[0]


def report(name: str, windows: list[Window]) -> None:
    n = len(windows)
    trips = sum(len(w.log) for w in windows) / n
    statements = sum(sum(len(b) for b in w.log) for w in windows) / n

    def ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1e3:.2f}"

    print(
        f"## {name}: {trips:.2f} round trips, {statements:.2f} statements; median wall "
        f"{ms([w.wall for w in windows])} ms, in psycopg and the server {ms([w.wait for w in windows])} ms, "
        f"CPU {ms([w.cpu for w in windows])} ms"
    )
    for batch, k in Counter(b for w in windows for b in w.log).most_common():
        print(f"   {k / n:5.2f} x {' | '.join(batch)}")


def traced_bytes(conn: psycopg.Connection[Any], call: Callable[[], Any], path: str) -> tuple[int, int]:
    """Bytes sent and received on ``conn`` while ``call`` ran (libpq's trace)."""
    with open(path, "w") as trace:
        conn.pgconn.trace(trace.fileno())
        try:
            call()
        finally:
            conn.pgconn.untrace()
    sent = received = 0
    with open(path) as trace:
        for line in trace:
            parts = line.rstrip("\n").split("\t")
            for i, part in enumerate(parts[:-1]):
                if part in ("F", "B") and parts[i + 1].isdigit():
                    if part == "F":
                        sent += int(parts[i + 1])
                    else:
                        received += int(parts[i + 1])
                    break
    return sent, received


def sync_part(system: Handrail, dsn: str, cycles: int) -> None:
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        agent = system.agent(saver, None)
        warm = []
        for i in range(cycles // 5 + 2):
            interrupt_id = system.start(agent, f"w-{i}")
            for turn in range(5):
                with Window() as window:
                    interrupt_id = system.resume(agent, f"w-{i}", interrupt_id, turn)  # type: ignore[arg-type]
                if i >= 2:
                    warm.append(window)
        report("warm cycle", warm)
        with Window() as window:
            system.start(agent, "fresh")
        report("first pause, new thread", [window])
        for turns in (10, 500):
            thread = f"long-{turns}"
            interrupt_id = system.start(agent, thread)
            for turn in range(turns):
                interrupt_id = system.resume(agent, thread, interrupt_id, turn)  # type: ignore[arg-type]
            cold = []
            for turn in range(turns, turns + 5):
                fresh = system.agent(saver, None)
                with Window() as window:
                    interrupt_id = system.resume(fresh, thread, interrupt_id, turn)  # type: ignore[arg-type]
                cold.append(window)
            report(f"cold resume (new agent), {turns} turns", cold)


def bytes_part(system: Handrail, dsn: str, trace: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        saver = PostgresSaver(conn)
        saver.setup()
        agent = system.agent(saver, None)
        state = {"interrupt": system.start(agent, "b"), "turn": 0}

        def cycle() -> None:
            state["interrupt"] = system.resume(agent, "b", state["interrupt"], state["turn"])  # type: ignore[arg-type]
            state["turn"] += 1  # type: ignore[operator]

        for _ in range(3):
            cycle()
        print("## bytes (sent, received), warm cycle:", [traced_bytes(conn, cycle, trace) for _ in range(4)])
        for turns in (10, 500):

            def cold(thread: str = f"long-{turns}") -> None:
                system.agent(saver, None).get_state({"configurable": {"thread_id": thread}})

            found = [traced_bytes(conn, cold, trace) for _ in range(2)]
            print(f"## bytes (sent, received), cold load (get_state by a new agent), {turns} turns:", found)


def worker_part(system: Handrail, dsn: str, threads: int) -> None:
    async def main() -> None:
        async with AsyncPostgresSaver.from_conn_string(dsn) as saver:
            agent = system.agent(saver, None)
            asked = {}
            for i in range(threads):
                result = await agent.ainvoke(
                    {"messages": [{"role": "user", "content": _script.USER_PROMPT}]},
                    {"configurable": {"thread_id": f"q-{i}"}},
                )
                asked[f"q-{i}"] = result["__interrupt__"][0].id
            decided, ran = [], []
            for thread, interrupt_id in asked.items():
                with Window() as window:
                    await system.agent(saver, None).adecide(
                        thread, interrupt_id, _script.decisions_for(0), reviewer="alice"
                    )
                decided.append(window)
                worker = Worker({"agent": system.agent(saver, None)})
                with Window() as window:
                    await worker.run_thread(thread)
                ran.append(window)
            report("answer recorded (adecide: the thread is queued)", decided[2:])
            report("worker: claim, load, run the calls, to the next pause", ran[2:])

    asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cycles", type=int, default=20, help="warm cycles measured")
    parser.add_argument(
        "--threads", type=int, default=10, help="threads a worker runs (the first two warm up)"
    )
    args = parser.parse_args(argv)
    _count()
    system = Handrail()
    dsn = _common.recreate_database("hr_round_trips")
    try:
        sync_part(system, dsn, args.cycles)
        bytes_part(system, dsn, str(Path(tempfile.gettempdir()) / "hr_round_trips.trace"))
        worker_part(system, dsn, args.threads)
    finally:
        _common.drop_database("hr_round_trips")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
