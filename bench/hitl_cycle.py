"""The cost of one review cycle, and handrail's own overhead per step.

Workload (each turn): the model proposes two calls, ``write_file`` with about 200 bytes
of content and ``execute_sql``; both are reviewed (batched); the resume approves them;
the results go back to the model, which proposes the next turn. The model is
``ScriptedModel`` and the store ``InMemorySaver``, so every microsecond measured is the
runtime's own.

* **first pause** - ``invoke(input)`` on a new thread until the interrupt;
* **cycle** - ``invoke(Command(resume=...))`` until the next interrupt (HITL step, two
  tool tasks, the tools step, the model step, the next interrupt);
* **per step** - cycle time divided by the steps a cycle runs.

Cycle cost is measured on threads that already hold 0, 10, 50, 200 and 500 turns; it
should stay flat, because a resume reads only the events it does not have.

Run::

    python bench/hitl_cycle.py            # full run
    python bench/hitl_cycle.py --quick    # fewer samples
    python bench/hitl_cycle.py --async    # drive it with ainvoke
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from handrail import Command, HumanInTheLoopMiddleware, InMemorySaver, ScriptedModel, create_agent, tool

CONTENT = "x" * 200
STEPS_PER_CYCLE = 4  # HumanInTheLoopMiddleware.after_model (answer), tools, model, after_model (pause)


@tool
def write_file(path: str, content: str) -> str:
    """Write text to a file."""
    return f"wrote {len(content)} bytes to {path}"


@tool
def execute_sql(query: str) -> str:
    """Run a SQL statement."""
    return "1 row affected"


def _turn(i: int) -> dict[str, Any]:
    return {
        "content": "",
        "tool_calls": [
            {"name": "write_file", "args": {"path": f"notes/{i}.txt", "content": CONTENT}},
            {"name": "execute_sql", "args": {"query": f"UPDATE jobs SET done = true WHERE id = {i}"}},
        ],
    }


def _agent(turns: int) -> Any:
    return create_agent(
        ScriptedModel([_turn(i) for i in range(turns)]),
        [write_file, execute_sql],
        middleware=[HumanInTheLoopMiddleware({"write_file": True, "execute_sql": True})],
        checkpointer=InMemorySaver(),
    )


APPROVE = {"decisions": [{"type": "approve"}, {"type": "approve"}]}


class Runner:
    """Calls invoke or ainvoke, so both drivers can be measured the same way."""

    def __init__(self, use_async: bool) -> None:
        self.use_async = use_async
        self.loop = asyncio.new_event_loop() if use_async else None

    def __call__(self, agent: Any, value: Any, cfg: dict[str, Any]) -> Any:
        if self.loop is not None:
            return self.loop.run_until_complete(agent.ainvoke(value, cfg))
        return agent.invoke(value, cfg)


def _timed(run: Callable[[], Any]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def first_pause(runner: Runner, samples: int) -> list[float]:
    agent = _agent(samples + 1)
    times = []
    for i in range(samples):
        cfg = {"configurable": {"thread_id": f"first-{i}"}}
        times.append(_timed(lambda cfg=cfg: runner(agent, {"messages": "work through the queue"}, cfg)))
    return times


def cycles_at(runner: Runner, history: int, samples: int) -> list[float]:
    """Grow a thread to ``history`` turns, then time ``samples`` more cycles."""
    agent = _agent(history + samples + 2)
    cfg = {"configurable": {"thread_id": f"long-{history}"}}
    runner(agent, {"messages": "work through the queue"}, cfg)
    for _ in range(history):
        runner(agent, Command(resume=APPROVE), cfg)
    times = []
    for _ in range(samples):
        pending = agent.get_state(cfg).interrupts[0].id
        times.append(_timed(lambda p=pending: runner(agent, Command(resume={p: APPROVE}), cfg)))
    return times


def stored_bytes(agent: Any, thread_id: str) -> int:
    return sum(len(e.payload) for e in agent.checkpointer.read(thread_id).events)


def _row(label: str, times: list[float]) -> tuple[str, str, str, str, str]:
    ordered = sorted(times)
    median = statistics.median(ordered)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return (
        label,
        f"{median * 1e3:.3f}",
        f"{p90 * 1e3:.3f}",
        f"{1 / median:,.0f}",
        f"{median / STEPS_PER_CYCLE * 1e6:.0f}",
    )


def _print_table(rows: list[tuple[str, ...]], headers: tuple[str, ...]) -> None:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    line = "  ".join(
        h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths, strict=True))
    )
    print(line)
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer samples (for a smoke run)")
    parser.add_argument(
        "--async", dest="use_async", action="store_true", help="use ainvoke instead of invoke"
    )
    args = parser.parse_args(argv)
    samples = 30 if args.quick else 200
    lengths = [10, 50, 200] if args.quick else [10, 50, 200, 500]
    runner = Runner(args.use_async)
    gc.collect()

    rows = [_row("first pause (new thread)", first_pause(runner, samples))]
    rows.append(_row("cycle, short thread (1 turn)", cycles_at(runner, 1, samples)))
    for length in lengths:
        rows.append(_row(f"cycle after {length} turns", cycles_at(runner, length, samples)))

    mode = "ainvoke" if args.use_async else "invoke"
    print(f"handrail review cycle, InMemorySaver, ScriptedModel, {mode}, {samples} samples per row")
    print(f"python {sys.version.split()[0]}\n")
    _print_table(rows, ("measure", "median ms", "p90 ms", "per second", "us/step"))

    agent = _agent(60)
    cfg = {"configurable": {"thread_id": "bytes"}}
    runner(agent, {"messages": "go"}, cfg)
    sizes = []
    for _ in range(50):
        runner(agent, Command(resume=APPROVE), cfg)
        sizes.append(stored_bytes(agent, "bytes"))
    per_turn = (sizes[-1] - sizes[9]) / 40
    print(f"\nstored bytes per turn: {per_turn:,.0f} (flat: turn 10 -> 50 adds the same each turn)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
