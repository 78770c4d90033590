"""The MCP gateway's cost: a ``tools/call`` through ``handrail mcp`` against the same call made directly.

The issue's goals: an ungated ``tools/call`` through the gateway, against the same call
made directly to the upstream, adds at most 1 ms (p50) over stdio and 2 ms over
streamable HTTP; a gated call's added cost, apart from the reviewer's wait, is under
5 ms on PostgreSQL.

One client process (this one, the ``mcp`` SDK's ``Client``) and real processes: the
upstream is ``bench/_mcp_upstream.py`` (two tools that return their argument and write
nothing: ``echo``, left ungated by the policy, and ``stamp``, gated), served over stdio
or over streamable HTTP (uvicorn); the gateway is ``handrail mcp`` as a user starts it.
Each group of measures runs its processes at once and alternates them round by round
(the order rotates each round), each taking ``--calls`` calls a round after a warm-up;
the groups run one after another:

* **ungated, stdio** - a client launching the upstream itself against a client
  launching ``handrail mcp --upstream bench="python _mcp_upstream.py" --db ... --policy
  ...`` (which launches its own copy of the upstream); ``echo`` on both;
* **ungated, HTTP** - the upstream over HTTP, called directly and through ``handrail mcp
  --http --upstream bench=http://...``;
* **gated** (stdio and HTTP; PostgreSQL and SQLite) - a client calls ``stamp``; a
  reviewer subscribed to the gateway's live inbox (``GET /handrail/events``, the
  reviewer side of the same process: ``--review-port`` on stdio) approves it as soon as
  it is told of it. The added cost apart from the reviewer's wait is the client's whole
  call minus the time from the review being asked to its answer being recorded, taken
  from the thread's audit trail (``GET /handrail/threads/T/audit``: the ``at`` of
  ``review_requested`` and ``answered``, stamped by the gateway as it writes them). The
  direct column is ``stamp`` called directly over the same transport.

Run::

    .venv/bin/python bench/mcp.py                      # about 2 minutes
    .venv/bin/python bench/mcp.py --rounds 3 --calls 50 --groups stdio http
    .venv/bin/python bench/mcp.py --profile /tmp/prof  # py-spy on each gateway, per group

PostgreSQL at ``HANDRAIL_TEST_POSTGRES_DSN`` (default
``postgresql://postgres@127.0.0.1:5432/test``): each gateway gets a schema of its own,
dropped at the end. Raw samples go to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# This file has the SDK's package name: its folder goes last on the path, so that
# ``import mcp`` finds the SDK and ``import _mcp_procs`` still finds the helpers.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE] + [str(HERE)]

from _mcp_procs import (  # noqa: E402
    HANDRAIL,
    PYTHON,
    UPSTREAM,
    Processes,
    Reviewer,
    Stores,
    end_children,
    gateway_pids,
    http_client,
    make_token,
    policy,
    review_url,
    stdio_client,
    upstream_command,
)

GROUPS = ("stdio", "http", "gated-stdio", "gated-http")
# (label, direct samples, gateway samples, goal in ms: None for none, negative for a diagnostic).
# A gated row's "through gateway" is the whole call minus the reviewer's wait.
ROWS = [
    ("ungated, stdio", "stdio/direct", "stdio/gateway", 1.0),
    ("ungated, HTTP", "http/direct", "http/gateway", 2.0),
    ("gated, stdio, PostgreSQL", "gated-stdio/direct", "gated-stdio/postgres", 5.0),
    ("gated, stdio, SQLite", "gated-stdio/direct", "gated-stdio/sqlite", None),
    ("gated, HTTP, PostgreSQL", "gated-http/direct", "gated-http/postgres", 5.0),
    ("gated, HTTP, SQLite", "gated-http/direct", "gated-http/sqlite", None),
]


# Statistics ----------------------------------------------------------------------------------
def pct(samples: list[float], q: float) -> float:
    """The nearest-rank percentile ``q`` of ``samples`` (seconds), in ms."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


@dataclass
class Results:
    samples: dict[str, list[float]] = field(default_factory=dict)  # seconds, per system
    gated: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # per gated call
    load: dict[str, float] = field(default_factory=dict)  # 1-min load average as each group starts

    def add(self, key: str, values: list[float]) -> None:
        self.samples.setdefault(key, []).extend(values)


class LoadWatch:
    """The machine's 1-minute load average, every 5 s, while the benchmark runs."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(5)

    def __enter__(self) -> LoadWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# What each system does -------------------------------------------------------------------------
@dataclass
class System:
    key: str  # "<group>/<name>"
    client: Any
    tool: str
    reviewer: Reviewer | None = None


async def plain_calls(system: System, n: int, tag: str) -> list[float]:
    """``n`` calls one after another; each call's seconds."""
    times = []
    for i in range(n):
        text = f"{tag} {i}"
        start = time.perf_counter()
        result = await system.client.call_tool(system.tool, {"text": text})
        times.append(time.perf_counter() - start)
        if result.is_error or result.content[0].text != text:
            raise SystemExit(f"{system.key}: unexpected result {result}")
    return times


async def gated_calls(system: System, n: int, tag: str) -> list[dict[str, Any]]:
    """``n`` gated calls, each approved by the reviewer: its text, its seconds, and when
    it began and ended by the wall clock (to place the audit trail's times in it)."""
    done = []
    for i in range(n):
        text = f"{tag} {i}"
        began = time.time()
        start = time.perf_counter()
        result = await system.client.call_tool(system.tool, {"text": text})
        total = time.perf_counter() - start
        done.append({"text": text, "total": total, "began": began, "ended": time.time()})
        if result.is_error or result.content[0].text != text:
            raise SystemExit(f"{system.key}: unexpected result {result}")
    return done


# A gated call's stretches: (name, from, to), the ends being the client's ("began", "ended")
# or the audit trail's events. "review_requested" to "answered" is the reviewer's wait.
PHASES = [
    ("client to input", "began", "input"),
    ("input to review_requested", "input", "review_requested"),
    ("answered to tool_started", "answered", "tool_started"),
    ("tool_started to tool_finished", "tool_started", "tool_finished"),
    ("tool_finished to the client's reply", "tool_finished", "ended"),
]


async def measure(
    group: str, systems: list[System], config: dict[str, Any], results: Results, profile: Path | None
) -> None:
    """Warm up, then ``rounds`` rounds over ``systems`` in a rotating order."""
    gated = group.startswith("gated")
    n = config["gated_calls"] if gated else config["calls"]
    warm = config["gated_warmup"] if gated else config["warmup"]
    for system in systems:
        if system.reviewer is not None:
            await gated_calls(system, warm, f"warm-{system.key}")
        else:
            await plain_calls(system, warm, f"warm-{system.key}")
    calls: dict[str, list[dict[str, Any]]] = {}
    results.load[group] = os.getloadavg()[0]
    with profiled(profile, group):
        for r in range(config["rounds"]):
            k = r % len(systems)
            for system in systems[k:] + systems[:k]:
                tag = f"{system.key} r{r}"
                if system.reviewer is not None:
                    calls.setdefault(system.key, []).extend(await gated_calls(system, n, tag))
                else:
                    results.add(system.key, await plain_calls(system, n, tag))
            print(f"  round {r + 1}: load {os.getloadavg()[0]:.2f}", flush=True)
    for system in systems:  # the audit trails, after the timing
        if system.reviewer is None:
            continue
        for call in calls[system.key]:
            thread, told, answered = system.reviewer.answers[call["text"]]
            at = await system.reviewer.trail(thread)
            call |= {f"at_{event}": when for event, when in at.items()}
            call |= {"at_began": call["began"], "at_ended": call["ended"]}
            call["window"] = at["answered"] - at["review_requested"]
            call["reviewer"] = answered - told
            results.gated.setdefault(system.key, []).append(call)
        results.add(system.key, [c["total"] - c["window"] for c in results.gated[system.key]])


@contextmanager
def profiled(folder: Path | None, group: str) -> Iterator[None]:
    """py-spy on every gateway running now, for the rounds of one group (``--profile``):
    every thread, sampled without pausing the process, as raw collapsed stacks
    (``bench/profile_summary.py`` reads them)."""
    if folder is None:
        yield
        return
    venv_spy = Path(PYTHON).with_name("py-spy")
    spy = str(venv_spy) if venv_spy.exists() else shutil.which("py-spy")
    if spy is None:
        raise SystemExit("--profile needs py-spy (.venv/bin/pip install py-spy)")
    folder.mkdir(parents=True, exist_ok=True)
    recorders = []
    for n, (command, pid) in enumerate(gateway_pids().items()):
        out = folder / f"{group}-{n}.txt"
        (folder / f"{group}-{n}.cmd").write_text(command)
        flags = ["--threads", "--nonblocking", "-r", "500", "-f", "raw", "-o", str(out)]
        recorders.append(
            subprocess.Popen(
                [spy, "record", "--pid", str(pid), *flags],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
    time.sleep(1.0 if recorders else 0)  # attached
    try:
        yield
    finally:
        for recorder in recorders:
            recorder.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        for recorder in recorders:
            recorder.wait(30)


# The groups, their processes ---------------------------------------------------------------------
@asynccontextmanager
async def group_systems(
    group: str, folder: Path, procs: Processes, stores: Stores
) -> AsyncIterator[list[System]]:
    policy_file = policy(folder)
    stack = AsyncExitStack()
    systems: list[System] = []

    async def reviewer(url: str, flags: list[str], name: str) -> Reviewer:
        found = Reviewer(url, make_token(flags, f"reviewer-{name}", "review"))
        stack.push_async_callback(found.close)
        await found.start()
        return found

    async with stack:
        if group in ("stdio", "gated-stdio"):
            tool = "echo" if group == "stdio" else "stamp"
            direct = await stack.enter_async_context(
                stdio_client(PYTHON, [str(UPSTREAM)], folder / f"{group}-direct.err")
            )
            systems.append(System(f"{group}/direct", direct, tool))
            for store in ("sqlite",) if group == "stdio" else ("postgres", "sqlite"):
                name = f"{group}-{store}"
                flags = stores.flags(store, name)
                args = ["mcp", "--upstream", f"bench={upstream_command()}", *flags]
                args += ["--policy", str(policy_file)]
                errlog = folder / f"{name}.err"
                if group == "gated-stdio":
                    args += ["--review-port", "0"]
                client = await stack.enter_async_context(stdio_client(HANDRAIL, args, errlog))
                key = f"{group}/gateway" if group == "stdio" else f"{group}/{store}"
                system = System(key, client, tool)
                if group == "gated-stdio":
                    system.reviewer = await reviewer(review_url(errlog), flags, name)
                systems.append(system)
        else:
            tool = "echo" if group == "http" else "stamp"
            upstream = procs.upstream_http()
            direct = await stack.enter_async_context(http_client(upstream, None))
            systems.append(System(f"{group}/direct", direct, tool))
            variants = (
                [("gateway", "sqlite")]
                if group == "http"
                else [("postgres", "postgres"), ("sqlite", "sqlite")]
            )
            for name, store in variants:
                flags = stores.flags(store, f"{group}-{name}")
                url = procs.gateway_http(f"{group}-{name}", upstream, flags, policy_file)
                token = make_token(flags, f"client-{name}", "run")
                client = await stack.enter_async_context(http_client(url + "/mcp", token))
                system = System(f"{group}/{name}", client, tool)
                if group == "gated-http":
                    system.reviewer = await reviewer(url, flags, name)
                systems.append(system)
        yield systems


async def run(config: dict[str, Any], groups: list[str], folder: Path, profile: Path | None) -> Results:
    results = Results()
    procs = Processes(folder)
    stores = Stores(folder)
    try:
        for group in groups:
            print(f"{group}: starting", flush=True)
            async with group_systems(group, folder, procs, stores) as systems:
                print(f"{group}: {', '.join(s.key.split('/')[1] for s in systems)}", flush=True)
                await measure(group, systems, config, results, profile)
            procs.stop()
    finally:
        procs.stop()
        stores.drop()
    return results


# The table -----------------------------------------------------------------------------------------
def table(results: Results, config: dict[str, Any], load: list[float]) -> str:
    s = results.samples

    def cell(key: str) -> str:
        values = s[key]
        return f"{pct(values, 0.5):.2f} / {pct(values, 0.9):.2f} / {pct(values, 0.99):.2f}"

    lines = [
        "| measure | direct p50 / p90 / p99 ms | through gateway p50 / p90 / p99 ms | added p50 (p90) ms | goal | met? |",
        "|---|---:|---:|---:|---|---|",
    ]
    for label, direct, gateway, goal in ROWS:
        if not s.get(direct) or not s.get(gateway):
            continue
        added = pct(s[gateway], 0.5) - pct(s[direct], 0.5)
        added90 = pct(s[gateway], 0.9) - pct(s[direct], 0.9)
        if goal is None:
            aim, met = "-", "-"
        elif goal < 0:
            aim, met = f"({-goal:g} ms)", "(met)" if added < -goal else "(not met)"
        else:
            aim, met = f"< {goal:g} ms", "met" if added < goal else "**not met**"
        lines.append(
            f"| {label} | {cell(direct)} | {cell(gateway)} | {added:.2f} ({added90:.2f}) | {aim} | {met} |"
        )
    lines.append("")
    counts = ", ".join(f"{key} {len(values)}" for key, values in s.items())
    lines.append(f"Samples: {counts}; {config['rounds']} rounds, systems alternating, order rotating.")
    lines.append(
        "Gated rows: the client's whole call minus the reviewer's wait, the time from review_requested "
        "to answered in the thread's audit trail (stamped by the gateway as it wrote them); direct: "
        "the same tool called directly over the same transport. Added: the difference of the p50s "
        "(of the p90s). (met) / (not met) on a diagnostic row: what the goal would say."
    )
    for key, calls in results.gated.items():
        windows = [c["window"] for c in calls]
        mine = [c["reviewer"] for c in calls]
        totals = [c["total"] for c in calls]
        lines.append(
            f"{key}: whole call p50 {pct(totals, 0.5):.1f} ms; reviewer's wait (audit: review_requested "
            f"to answered) p50 {pct(windows, 0.5):.1f} ms; the reviewer's own (told to POST returned) "
            f"p50 {pct(mine, 0.5):.1f} ms."
        )
    if results.gated:
        lines += ["", phase_table(results.gated)]
    starts = ", ".join(f"{group} {value:.2f}" for group, value in results.load.items())
    if load:
        lines.append(
            f"Load average (1 min): median {statistics.median(load):.2f}, max {max(load):.2f} (2 cores); "
            f"as each group's rounds began: {starts}."
        )
    lines.append(f"python {sys.version.split()[0]}.")
    return "\n".join(lines)


def phase_table(gated: dict[str, list[dict[str, Any]]]) -> str:
    """Where a gated call's time went, apart from the reviewer's wait: p50 of each stretch
    (the client's clock and the audit trail's, both the machine's wall clock)."""
    heads = [name for name, _, _ in PHASES]
    lines = [
        "| gated call, p50 ms | " + " | ".join(heads) + " | reviewer's wait |",
        "|---|" + "---:|" * (len(heads) + 1),
    ]
    for key, calls in gated.items():
        cells = []
        for _, a, b in PHASES:
            spans = [c[f"at_{b}"] - c[f"at_{a}"] for c in calls if f"at_{a}" in c and f"at_{b}" in c]
            cells.append(f"{pct(spans, 0.5):.2f}" if spans else "-")
        cells.append(f"{pct([c['window'] for c in calls], 0.5):.1f}")
        lines.append(f"| {key.split('/', 1)[1]} ({key.split('/')[0]}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds, systems alternating (default 5)")
    parser.add_argument(
        "--calls", type=int, default=100, help="ungated calls per system a round (default 100)"
    )
    parser.add_argument(
        "--gated-calls", type=int, default=10, help="gated calls per system a round (default 10)"
    )
    parser.add_argument(
        "--warmup", type=int, default=30, help="ungated warm-up calls per system (default 30)"
    )
    parser.add_argument(
        "--gated-warmup", type=int, default=3, help="gated warm-up calls per system (default 3)"
    )
    parser.add_argument("--groups", nargs="+", choices=GROUPS, default=list(GROUPS))
    parser.add_argument("--profile", type=Path, help="record each gateway with py-spy, per group, here")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "mcp.json")
    args = parser.parse_args()
    config = {k: getattr(args, k) for k in ("rounds", "calls", "gated_calls", "warmup", "gated_warmup")}

    # Ctrl-C cancels the run (asyncio.run's own handling), so every client closes and every
    # process stops before the schemas are dropped; SIGTERM does the same, as a SIGINT.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda signum, frame: os.kill(os.getpid(), signal.SIGINT))
    folder = Path(tempfile.mkdtemp(prefix="bench-mcp-", dir=os.environ.get("BENCH_SCRATCH")))
    try:
        with LoadWatch() as load:
            results = asyncio.run(run(config, args.groups, folder, args.profile))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        end_children()
        shutil.rmtree(folder, ignore_errors=True)
    text = table(results, config, load.samples)
    print()
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "config": config,
                "samples": results.samples,
                "gated": results.gated,
                "load": load.samples,
                "table": text,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
