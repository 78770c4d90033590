"""Throughput of many threads under three shapes of run, handrail and LangGraph side by side.

The comparison (``compare_langgraph.py``) measures throughput one way: 50 threads at once
with ``ainvoke`` on the async savers, and the tools as plain sync functions, so each tool
call runs in a worker thread on both sides. This script asks how much of that cost is the
shape of the run rather than the library, by running the same three-turn threads three
ways:

``sync tools, ainvoke``   the comparison's shape (``asyncio.gather`` of 50 threads)
``async tools, ainvoke``  the same tools written ``async def``: no worker thread per call
``sync tools, invoke``    the same 50 threads one after another on the sync savers: no
                          event loop and no thread hop at all

Each measurement runs in a fresh interpreter; the two systems alternate (A B, then B A)
over the rounds. It prints threads per second (median of every timed round) and the
ratio, and writes the raw samples to ``--out``.

Run::

    .venv/bin/python bench/throughput_shapes.py                  # memory, 3 rounds, about 2 minutes
    .venv/bin/python bench/throughput_shapes.py --backends memory sqlite --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare_langgraph import ROOT, ensure_reference, run_task

SHAPES: dict[str, dict[str, str]] = {
    "sync tools, ainvoke": {"tools": "sync", "driver": "gather"},
    "async tools, ainvoke": {"tools": "async", "driver": "gather"},
    "sync tools, invoke": {"tools": "sync", "driver": "sequential"},
}
SYSTEMS = ("handrail", "langgraph")


def rates(result: dict[str, Any]) -> list[float]:
    """Threads per second of each timed round."""
    return [result["concurrency"] / wall for wall in result["walls"]]


def collect(backends: list[str], rounds: int, timed: int, out_dir: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for r in range(rounds):
        print(f"round {r + 1} of {rounds}", flush=True)
        order = SYSTEMS if r % 2 == 0 else SYSTEMS[::-1]
        for backend in backends:
            for shape, params in SHAPES.items():
                for system in order:
                    result = run_task(
                        system,
                        "throughput",
                        backend,
                        {**params, "rounds": timed, "warmup": 1},
                        out_dir,
                        f"{params['tools']}-{params['driver']}-r{r}",
                    )
                    results.setdefault(backend, {}).setdefault(shape, {}).setdefault(system, []).append(
                        rates(result)
                    )
    return results


def report(results: dict[str, Any]) -> str:
    lines = [
        "| backend | shape | handrail threads/s | LangGraph threads/s | handrail speed-up | by round |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for backend, shapes in results.items():
        for shape, by_system in shapes.items():
            ours = statistics.median(x for run in by_system["handrail"] for x in run)
            theirs = statistics.median(x for run in by_system["langgraph"] for x in run)
            rounds = " / ".join(
                f"{statistics.median(a) / statistics.median(b):.1f}x"
                for a, b in zip(by_system["handrail"], by_system["langgraph"], strict=True)
            )
            lines.append(
                f"| {backend} | {shape} | {ours:,.0f} | {theirs:,.1f} | {ours / theirs:.1f}x | {rounds} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backends", nargs="+", choices=["memory", "sqlite", "postgres"], default=["memory"])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of every measurement")
    parser.add_argument("--timed", type=int, default=5, help="timed gathers (of 50 threads) per measurement")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "shapes"), help="raw results")
    args = parser.parse_args(argv)
    ensure_reference()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = collect(args.backends, args.rounds, args.timed, out_dir)
    (out_dir / "shapes.json").write_text(json.dumps(results, indent=1))
    table = report(results)
    (out_dir / "shapes.md").write_text(table + "\n")
    print()
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
