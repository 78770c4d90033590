"""Profile handrail on the comparison workload: where a review cycle's time goes.

Runs the same script as ``compare_langgraph.py`` (``_workload_handrail.py``) under
cProfile and prints the functions that take the most time, plus a count of the
saver's calls per cycle.

Run::

    .venv/bin/python bench/profile_handrail.py --backend sqlite            # warm cycles
    .venv/bin/python bench/profile_handrail.py --backend memory --cold 500 # resume by a new agent
    .venv/bin/python bench/profile_handrail.py --backend postgres --async  # 50 threads at once
    .venv/bin/python bench/profile_handrail.py --backend sqlite --dump /tmp/cycle.prof
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _tasks
from _workload_handrail import Handrail


def warm_cycles(
    system: Handrail, backend: str, location: str | None, cycles: int, profiler: cProfile.Profile
) -> int:
    with system.store(backend, location) as saver:
        agent = system.agent(saver, None)
        counter = None
        done = 0
        for i in range(cycles // 5 + 2):
            interrupt_id = system.start(agent, f"p-{i}")
            if i == 2:  # two threads of warm-up first
                counter = system.count_calls(saver)
                profiler.enable()
            for turn in range(5):
                interrupt_id = system.resume(agent, f"p-{i}", interrupt_id, turn)  # type: ignore[arg-type]
                done += i >= 2
        profiler.disable()
        print("saver calls per cycle:", {k: round(v / done, 2) for k, v in sorted((counter or {}).items())})
        return done


def cold_cycles(
    system: Handrail, backend: str, location: str | None, turns: int, profiler: cProfile.Profile
) -> int:
    with system.store(backend, location) as saver:
        agent = system.agent(saver, None)
        interrupt_id = system.start(agent, "long")
        for turn in range(turns):
            interrupt_id = system.resume(agent, "long", interrupt_id, turn)  # type: ignore[arg-type]
        samples = 10
        for turn in range(turns, turns + samples):
            fresh = system.agent(saver, None)
            profiler.enable()
            interrupt_id = system.resume(fresh, "long", interrupt_id, turn)  # type: ignore[arg-type]
            profiler.disable()
        return samples


def concurrent(
    system: Handrail, backend: str, location: str | None, rounds: int, profiler: cProfile.Profile
) -> int:
    async def main() -> int:
        async with system.astore(backend, location) as saver:
            agent = system.agent(saver, 3)

            async def one(thread_id: str) -> None:
                interrupt_id = await system.astart(agent, thread_id)
                for turn in range(3):
                    interrupt_id = await system.aresume(agent, thread_id, interrupt_id, turn)  # type: ignore[arg-type]

            await asyncio.gather(*(one(f"warm-{i}") for i in range(50)))
            profiler.enable()
            for r in range(rounds):
                await asyncio.gather(*(one(f"r{r}-{i}") for i in range(50)))
            profiler.disable()
        return rounds * 50 * 3

    return asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=_tasks.BACKENDS, default="memory")
    parser.add_argument("--cycles", type=int, default=200, help="warm cycles to profile")
    parser.add_argument(
        "--cold", type=int, metavar="TURNS", help="profile cold resumes of a TURNS-turn thread"
    )
    parser.add_argument(
        "--async", dest="use_async", action="store_true", help="profile 50 concurrent threads"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of 50 threads with --async")
    parser.add_argument("--sort", default="tottime", help="pstats sort key (tottime, cumulative)")
    parser.add_argument("--top", type=int, default=35)
    parser.add_argument("--dump", help="also write the raw profile here (for snakeviz, pyprof2calltree)")
    args = parser.parse_args(argv)
    system = Handrail()
    profiler = cProfile.Profile()
    with _tasks.fresh_location(system, args.backend) as location:
        start = time.perf_counter()
        if args.use_async:
            cycles = concurrent(system, args.backend, location, args.rounds, profiler)
        elif args.cold is not None:
            cycles = cold_cycles(system, args.backend, location, args.cold, profiler)
        else:
            cycles = warm_cycles(system, args.backend, location, args.cycles, profiler)
        wall = time.perf_counter() - start
    stats = pstats.Stats(profiler)
    print(f"{cycles} cycles profiled ({wall:.1f} s wall, including setup)")
    total = sum(row[2] for row in stats.stats.values())  # type: ignore[attr-defined]
    print(f"profiled time per cycle: {total / cycles * 1e3:.3f} ms (cProfile inflates pure-Python code)")
    if args.dump:
        stats.dump_stats(args.dump)
    stats.sort_stats(args.sort).print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
