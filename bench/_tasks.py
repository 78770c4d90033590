"""The measurements, written once and run by both workload modules.

``_workload_handrail.py`` and ``_workload_langgraph.py`` each define a *system*: an
object that opens a store, builds the agent, starts a thread, answers a review and
reads back sizes, in its own library's API. Every task here drives a system the same
way, so both sides run the same loops, with the same warm-up and the same clock.

Each task runs in its own interpreter (``compare_langgraph.py`` starts it) and writes
one JSON document: raw samples in seconds and bytes; the runner does the statistics.

Tasks
-----
``cycle``       first pause and review cycles (resume -> next interrupt) on short threads
``growth``      every cycle of one thread grown to N turns, and what it stores at each N
``throughput``  ``asyncio.gather`` of many three-turn threads on the async savers (or, with
                ``driver="sequential"``, the same threads one after another with ``invoke``;
                with ``tools="async"``, the tools written ``async def``)
``coldproc``    resumes of one grown thread, each by a new interpreter that opens the store
                and builds the agent (the hidden ``_resume_once`` command; SQLite, Postgres)
``memory``      process memory of many paused threads (RSS, or tracemalloc)
``commits``     the saver writes a cycle makes (and, on Postgres, the server's WAL fsyncs)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import shutil
import subprocess
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common
import _script

BACKENDS = ("memory", "sqlite", "postgres")


class System(Protocol):
    """What a workload module provides (see _workload_handrail.py for a documented one)."""

    name: str
    relations: list[str]

    def versions(self) -> dict[str, str]: ...
    def store(self, backend: str, location: str | None) -> contextlib.AbstractContextManager[Any]: ...
    def astore(self, backend: str, location: str | None) -> contextlib.AbstractAsyncContextManager[Any]: ...
    def agent(self, saver: Any, turns: int | None, async_tools: bool = False) -> Any: ...
    def start(self, agent: Any, thread_id: str) -> str: ...
    def resume(self, agent: Any, thread_id: str, interrupt_id: str, turn: int) -> str | None: ...
    async def astart(self, agent: Any, thread_id: str) -> str: ...
    async def aresume(self, agent: Any, thread_id: str, interrupt_id: str, turn: int) -> str | None: ...
    def payload_bytes(self, saver: Any, backend: str, location: str | None, thread_id: str) -> int: ...
    def messages(self, agent: Any, thread_id: str) -> list[Any]: ...
    def count_calls(self, saver: Any) -> Counter[str]: ...


# Where a store lives ---------------------------------------------------------------------
@contextlib.contextmanager
def fresh_location(system: System, backend: str) -> Iterator[str | None]:
    """An empty place for a store: nothing (memory), a new file, or a new database."""
    if backend == "memory":
        yield None
    elif backend == "sqlite":
        folder = _common.scratch_dir()
        try:
            yield str(Path(folder) / "threads.db")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    elif backend == "postgres":
        name = f"bench_{system.name}"
        dsn = _common.recreate_database(name)
        try:
            yield dsn
        finally:
            _common.drop_database(name)
    else:
        raise ValueError(f"unknown backend {backend!r}")


def _timed(call: Any, *args: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    value = call(*args)
    return value, time.perf_counter() - start


# Tasks -------------------------------------------------------------------------------------
def task_cycle(system: System, backend: str, threads: int = 40, cycles: int = 5, warmup: int = 5) -> dict:
    """``threads`` short threads: time the first pause, then ``cycles`` review cycles each.

    ``full_cycle``: a fresh thread's first pause plus its first cycle, one sample a thread.
    """
    first: list[float] = []
    full: list[float] = []
    times: list[float] = []
    with fresh_location(system, backend) as location, system.store(backend, location) as saver:
        agent = system.agent(saver, None)
        gc.collect()
        for i in range(warmup + threads):
            thread_id = f"short-{i}"
            interrupt_id, seconds = _timed(system.start, agent, thread_id)
            samples = []
            for turn in range(cycles):
                interrupt_id, elapsed = _timed(system.resume, agent, thread_id, interrupt_id, turn)
                samples.append(elapsed)
            if i >= warmup:
                first.append(seconds)
                if samples:
                    full.append(seconds + samples[0])
                times += samples
    return {"first_pause": first, "cycle": times, "full_cycle": full}


def task_growth(
    system: System, backend: str, lengths: tuple[int, ...] = (10, 50, 200, 500), cold: int = 3, extra: int = 8
) -> dict:
    """Grow one thread, timing every cycle; at each length, measure storage and cold resumes.

    At each length N (N review cycles answered), before cycle N: the bytes stored, then
    ``cold`` cycles each driven by a new agent object (nothing cached in the process, as
    when another process answers), then warm cycles on as usual. ``cycles`` lists
    ``[k, seconds, "warm"|"cold"]``: cycle k answers turn k, on a thread of k turns.
    """
    cycles: list[list[Any]] = []
    storage: list[dict[str, Any]] = []
    last = max(lengths) + cold + extra
    thread_id = "grown"
    with fresh_location(system, backend) as location, system.store(backend, location) as saver:
        agent = system.agent(saver, None)
        interrupt_id = system.start(agent, thread_id)
        gc.collect()
        for turn in range(last):
            if turn in lengths:
                storage.append(_storage(system, saver, agent, backend, location, thread_id, turn))
            kind = "cold" if any(n <= turn < n + cold for n in lengths) else "warm"
            runner = system.agent(saver, None) if kind == "cold" else agent
            interrupt_id, elapsed = _timed(system.resume, runner, thread_id, interrupt_id, turn)
            assert interrupt_id is not None
            cycles.append([turn, elapsed, kind])
    return {"cycles": cycles, "storage": storage}


def task_coldproc(
    system: System,
    backend: str,
    lengths: tuple[int, ...] = (10, 50, 200, 500),
    samples: int = 5,
    cached_bytecode: bool = True,
) -> dict:
    """Resume one grown thread by a new process: ``samples`` fresh interpreters at each length.

    The parent grows the thread to N turns (untimed; as in ``growth``, resume k answers
    turn k) and closes its store. Each sample then starts a new interpreter on this
    workload module's hidden ``_resume_once`` command: it imports the library, opens the
    store and builds the agent (timed together: ``open_build``), answers the pending
    review once (timed alone: ``resume``) and writes back the next interrupt id. The
    thread grows by one turn a sample, so the samples at N answer turns N to
    N + samples - 1. ``wall``: the child process from its start to its exit, seen by the
    parent.

    ``cached_bytecode``: the children run with ``PYTHONPYCACHEPREFIX`` in a scratch
    folder (and without ``PYTHONDONTWRITEBYTECODE``), filled by one untimed child that
    answers another thread first, so neither library compiles its source in a timed
    child (an installed package has its bytecode; an editable one in an environment
    that writes none compiles it at every start).
    """
    if backend == "memory":
        raise ValueError("coldproc needs a store that outlives its process: sqlite or postgres")
    main_file = str(Path(sys.modules["__main__"].__file__ or sys.argv[0]).resolve())
    rows: list[dict[str, Any]] = []
    thread_id = "grown"
    turn = 0
    scratch = _common.scratch_dir()
    env = dict(os.environ)
    if cached_bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(Path(scratch) / "pycache")

    def child(location: str, thread: str, interrupt_id: str, answer: int) -> dict[str, Any]:
        out = Path(scratch) / "resume.json"
        command = [sys.executable, main_file, RESUME_ONCE, "--backend", backend, "--location", location]
        command += ["--thread", thread, "--interrupt", interrupt_id, "--turn", str(answer), "--out", str(out)]
        start = time.perf_counter()
        subprocess.run(command, check=True, env=env)
        wall = time.perf_counter() - start
        result = json.loads(out.read_text())
        out.unlink()
        return {**result, "wall": wall}

    try:
        with fresh_location(system, backend) as location:
            assert location is not None
            with system.store(backend, location) as saver:
                agent = system.agent(saver, None)
                interrupt_id: str | None = system.start(agent, thread_id)
                warm_id = system.start(agent, "warm-up")
            child(location, "warm-up", warm_id, 0)  # untimed: fills the bytecode cache
            for n in sorted(lengths):
                with system.store(backend, location) as saver:
                    agent = system.agent(saver, None)
                    while turn < n:
                        assert interrupt_id is not None
                        interrupt_id = system.resume(agent, thread_id, interrupt_id, turn)
                        turn += 1
                for _ in range(samples):
                    assert interrupt_id is not None
                    result = child(location, thread_id, interrupt_id, turn)
                    rows.append(
                        {
                            "turns": n,
                            "turn": turn,
                            "resume": result["resume"],
                            "open_build": result["open_build"],
                            "wall": result["wall"],
                        }
                    )
                    interrupt_id = result["next_interrupt"]
                    turn += 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"samples": rows, "cached_bytecode": cached_bytecode}


RESUME_ONCE = "_resume_once"


def resume_once(system: System, argv: list[str]) -> int:
    """The child of ``coldproc``: open the store, build the agent, answer one review."""
    parser = argparse.ArgumentParser(prog=RESUME_ONCE)
    parser.add_argument("--backend", choices=BACKENDS, required=True)
    parser.add_argument("--location", required=True)
    parser.add_argument("--thread", required=True)
    parser.add_argument("--interrupt", required=True)
    parser.add_argument("--turn", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    with system.store(args.backend, args.location) as saver:
        agent = system.agent(saver, None)
        built = time.perf_counter()
        next_id, elapsed = _timed(system.resume, agent, args.thread, args.interrupt, args.turn)
    assert next_id is not None
    result = {"open_build": built - start, "resume": elapsed, "next_interrupt": next_id}
    _common.write_json(args.out, result)
    return 0


def _storage(
    system: System, saver: Any, agent: Any, backend: str, location: str | None, thread_id: str, turns: int
) -> dict[str, Any]:
    messages = system.messages(agent, thread_id)
    row: dict[str, Any] = {
        "turns": turns,
        "messages": len(messages),
        "messages_bytes": _script.neutral_size([_script.neutral_message(m) for m in messages]),
        "payload_bytes": system.payload_bytes(saver, backend, location, thread_id),
    }
    if backend == "sqlite":
        assert location is not None
        row["file_bytes"], row["wal_bytes"] = _common.sqlite_file_bytes(location)
    elif backend == "postgres":
        assert location is not None
        row["relation_bytes"] = _common.relation_bytes(location, system.relations)
    return row


def task_throughput(
    system: System,
    backend: str,
    concurrency: int = 50,
    turns: int = 3,
    rounds: int = 5,
    warmup: int = 1,
    tools: str = "sync",
    driver: str = "gather",
) -> dict:
    """``concurrency`` threads at once, each: first pause, ``turns`` reviews, final answer.

    ``tools``: ``"sync"`` (plain functions, as the comparison uses: under ``ainvoke``
    each call runs in a worker thread) or ``"async"`` (``async def``: no thread hop).
    ``driver``: ``"gather"`` (``ainvoke``, all threads at once on the async savers) or
    ``"sequential"`` (``invoke`` on the sync savers, one thread after another: no event
    loop, no hop; sync tools only).
    """
    if tools not in ("sync", "async") or driver not in ("gather", "sequential"):
        raise ValueError(
            f"tools must be sync or async and driver gather or sequential, got {tools}, {driver}"
        )
    if driver == "sequential" and tools == "async":
        raise ValueError("the sequential driver runs invoke: it takes sync tools")

    def one(agent: Any, thread_id: str) -> None:
        interrupt_id: str | None = system.start(agent, thread_id)
        for turn in range(turns):
            assert interrupt_id is not None
            interrupt_id = system.resume(agent, thread_id, interrupt_id, turn)
        assert interrupt_id is None, "the thread should have finished"

    def sequential() -> list[float]:
        walls: list[float] = []
        with system.store(backend, location) as saver:
            agent = system.agent(saver, turns)
            for r in range(warmup + rounds):
                gc.collect()
                start = time.perf_counter()
                for i in range(concurrency):
                    one(agent, f"round{r}-{i}")
                if r >= warmup:
                    walls.append(time.perf_counter() - start)
        return walls

    async def gathered() -> list[float]:
        walls: list[float] = []
        async with system.astore(backend, location) as saver:
            agent = system.agent(saver, turns, async_tools=tools == "async")

            async def aone(thread_id: str) -> None:
                interrupt_id: str | None = await system.astart(agent, thread_id)
                for turn in range(turns):
                    assert interrupt_id is not None
                    interrupt_id = await system.aresume(agent, thread_id, interrupt_id, turn)
                assert interrupt_id is None, "the thread should have finished"

            for r in range(warmup + rounds):
                gc.collect()
                start = time.perf_counter()
                await asyncio.gather(*(aone(f"round{r}-{i}") for i in range(concurrency)))
                if r >= warmup:
                    walls.append(time.perf_counter() - start)
        return walls

    with fresh_location(system, backend) as location:
        walls = sequential() if driver == "sequential" else asyncio.run(gathered())
    return {"walls": walls, "concurrency": concurrency, "turns": turns, "tools": tools, "driver": driver}


def task_memory(system: System, backend: str = "memory", threads: int = 1000, traced: bool = False) -> dict:
    """Process memory of ``threads`` threads paused at their first review."""
    with fresh_location(system, backend) as location, system.store(backend, location) as saver:
        agent = system.agent(saver, None)
        for i in range(5):  # load everything lazily imported before the baseline
            interrupt_id = system.start(agent, f"warm-{i}")
            system.resume(agent, f"warm-{i}", interrupt_id, 0)
        gc.collect()
        if traced:
            tracemalloc.start()
        base_rss = _common.proc_status_kb("VmRSS")
        _common.reset_peak_rss()
        start = time.perf_counter()
        for i in range(threads):
            system.start(agent, f"paused-{i}")
        elapsed = time.perf_counter() - start
        gc.collect()
        result = {
            "threads": threads,
            "traced": traced,
            "seconds": elapsed,
            "rss_base_kb": base_rss,
            "rss_after_kb": _common.proc_status_kb("VmRSS"),
            "rss_peak_kb": _common.proc_status_kb("VmHWM"),
        }
        if traced:
            current, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            result["traced_current"] = current
            result["traced_peak"] = peak
        return result


def task_commits(system: System, backend: str, threads: int = 10, cycles: int = 4) -> dict:
    """Saver calls per review cycle; on Postgres also the server's WAL fsyncs per cycle.

    Phase one pauses ``threads`` threads and closes the store; phase two opens it again
    and answers ``cycles`` reviews on each, counting. WAL fsyncs are read from
    ``pg_stat_wal`` once the connections are closed (so every backend has reported), and
    cover the whole server: run it when nothing else writes.
    """
    with fresh_location(system, backend) as location:
        with system.store(backend, location) as saver:
            agent = system.agent(saver, None)
            pending = {f"c-{i}": system.start(agent, f"c-{i}") for i in range(threads)}
            if backend == "memory":  # the memory store dies with its saver: keep going here
                counter = system.count_calls(saver)
                _answer(system, agent, pending, cycles)
                return {"calls": dict(counter), "cycles": threads * cycles}
        wal_before = _settled_wal() if backend == "postgres" else None
        with system.store(backend, location) as saver:
            counter = system.count_calls(saver)
            agent = system.agent(saver, None)
            _answer(system, agent, pending, cycles)
        result: dict[str, Any] = {"calls": dict(counter), "cycles": threads * cycles}
        if wal_before is not None:
            result["wal_syncs"] = _settled_wal() - wal_before
        return result


def _answer(system: System, agent: Any, pending: dict[str, str], cycles: int) -> None:
    for turn in range(cycles):
        for thread_id, interrupt_id in list(pending.items()):
            pending[thread_id] = system.resume(agent, thread_id, interrupt_id, turn)  # type: ignore[assignment]


def _settled_wal() -> int:
    _common.settle_stats()
    return _common.wal_syncs()


TASKS = {
    "cycle": task_cycle,
    "growth": task_growth,
    "coldproc": task_coldproc,
    "throughput": task_throughput,
    "memory": task_memory,
    "commits": task_commits,
}


# Command line ------------------------------------------------------------------------------
def main(system: System, argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [RESUME_ONCE]:
        return resume_once(system, argv[1:])
    parser = argparse.ArgumentParser(description=f"benchmark tasks for {system.name}")
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("--backend", choices=BACKENDS, default="memory")
    parser.add_argument("--params", default="{}", help="JSON object of task arguments")
    parser.add_argument("--out", required=True, help="where to write the JSON result")
    args = parser.parse_args(argv)
    params = json.loads(args.params)
    if "lengths" in params:
        params["lengths"] = tuple(params["lengths"])
    started = time.perf_counter()
    result = TASKS[args.task](system, args.backend, **params)
    result.update(
        system=system.name,
        task=args.task,
        backend=args.backend,
        params=params,
        versions=system.versions(),
        python=sys.version.split()[0],
        task_seconds=time.perf_counter() - started,
    )
    _common.write_json(args.out, result)
    return 0


@contextlib.asynccontextmanager
async def just(value: Any) -> AsyncIterator[Any]:
    """An async context manager that yields ``value`` (for stores with nothing to open)."""
    yield value
