"""The review service side by side: handrail serve (SQLite, Postgres), its library, LangGraph's server.

The same client code (the real ``langgraph-sdk``, its ``http`` client for handrail's own
paths) and the same scripted agent (every turn one reviewed ``execute_sql`` call:
``_service_agent.py`` for handrail, ``langgraph_server/agent.py`` - LangChain's
``create_agent`` with ``HumanInTheLoopMiddleware`` - for LangGraph) against three real
servers on 127.0.0.1, all running at once, measured in rounds that alternate the order:

* ``handrail serve`` on SQLite and on PostgreSQL (this venv);
* LangGraph's own API server, ``langgraph dev --no-reload`` from ``langgraph-cli[inmem]``
  in ``bench/.venv-langgraph-server`` (``bash bench/setup_langgraph_server.sh``), as a new
  user starts it (its in-memory runtime; no analytics, no version check, no tracing);
* handrail's library cycle on each store, in this process.

Measured (p50 / p99 of the samples of every round; rates: the median round):

* **review cycle** - ``runs.wait(thread, "bench", command={"resume": {id: approve}})``
  until the next interrupt, on threads of at most ``--per-thread`` cycles; the library's
  ``agent.invoke(Command(resume=...))`` on the same store beside it, and the difference;
* **answer round trip** - handrail: ``POST /handrail/threads/T/interrupts/I/answer``,
  which returns once the answer is recorded in the store (202; the run goes on in the
  service). LangGraph has no such call: its nearest is ``runs.create(thread, "bench",
  command={"resume": ...})``, which returns once the run is accepted into its in-memory
  queue. handrail's ``runs.create`` with the same resume is timed too (it returns once
  the run is started, before the answer is checked or recorded). Each answer is made on
  a quiet server: the run it started is joined, untimed, before the next;
* **answers/s, 50 reviewers** - 50 client threads, one SDK client each, answering
  paused threads at once (the same calls), and each request's latency meanwhile;
* **inbox page over N paused threads** - handrail: ``GET /handrail/inbox?limit=50``
  (without and with each item's last 3 messages) and the reviewers' web page ``GET
  /inbox`` (50 rows, signed in: its ``Server-Timing`` and the whole request); both:
  ``threads.search(status="interrupted", limit=50)``.

Paused threads: handrail's are paused for real by the library on the served store (a
first pause costs about a millisecond). LangGraph's dev server starts about one queued
run a second, so its paused threads are copies of one really paused thread, written
into its saved state while it is stopped (``langgraph_server/copy_paused.py``); it loads
them when it starts again.

Run::

    bash bench/setup_langgraph_server.sh                 # once: bench/.venv-langgraph-server
    .venv/bin/python bench/service.py --quick            # a few minutes, 2,000 inbox threads
    .venv/bin/python bench/service.py                    # the full run, 100,000 threads, ~20 minutes
    .venv/bin/python bench/service.py --systems sqlite postgres --measures cycle answer
    .venv/bin/python bench/service.py --profile /tmp/prof --systems sqlite --measures cycle

``--profile DIR`` records each handrail server with py-spy during each measure
(collapsed stacks, ``DIR/<store>-<measure>.txt``). Raw samples go to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _service_calls import (  # noqa: E402
    answer_call,
    api_cycles,
    crowd,
    inbox_page,
    join_all,
    library_cycles,
    pages,
    quiet_answers,
    runs_done_rate,
    search_page,
    web_inbox_page,
)
from _service_servers import (  # noqa: E402
    LANGGRAPH_VENV,
    MEASURES,
    STORES,
    SYSTEMS,
    HandrailServer,
    LangGraphServer,
    LoadWatch,
    Profiler,
    Target,
    pct,
)
from langgraph_sdk.errors import NotFoundError  # noqa: E402

FULL = {
    "rounds": 3,
    "cycles": 100,
    "langgraph_cycles": 15,
    "per_thread": 10,
    "answers": 100,
    "langgraph_answers": 20,
    "reviewers": 50,
    "crowd_each": 10,
    "drain_window": 20,
    "inbox_threads": 100_000,
    "inbox_pages": 30,
}
QUICK = {
    **FULL,
    "rounds": 1,
    "cycles": 30,
    "langgraph_cycles": 4,
    "per_thread": 5,
    "answers": 30,
    "langgraph_answers": 5,
    "crowd_each": 2,
    "drain_window": 5,
    "inbox_threads": 2_000,
    "inbox_pages": 10,
}


@dataclass
class Results:
    samples: dict[str, list[float]] = field(default_factory=dict)
    rates: dict[str, list[float]] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)

    def add(self, key: str, values: list[float]) -> None:
        self.samples.setdefault(key, []).extend(values)

    def rate(self, key: str, value: float) -> None:
        self.rates.setdefault(key, []).append(value)


def rotations(systems: list[str], rounds: int) -> Iterator[tuple[int, list[str]]]:
    for r in range(rounds):
        k = r % len(systems)
        yield r, systems[k:] + systems[:k]


def run(
    config: dict[str, Any], systems: list[str], measures: list[str], profiler: Profiler, scratch: Path
) -> Results:
    results = Results()
    handrail = {kind: HandrailServer(kind, scratch) for kind in STORES if kind in systems}
    langgraph = LangGraphServer(scratch) if "langgraph" in systems else None
    rounds = config["rounds"]
    try:
        for server in handrail.values():
            server.start()
        print(f"handrail serve: {', '.join(f'{k} {s.url}' for k, s in handrail.items())}", flush=True)
        # Every answer's paused thread, made before any timing.
        per_round = config["answers"]
        crowd_size = config["reviewers"] * config["crowd_each"]
        targets: dict[str, dict[str, list[Target]]] = {}
        for kind, server in handrail.items():
            targets[kind] = {}
            if "answer" in measures:
                targets[kind]["answer"] = server.pause(per_round * rounds, "answer")
                targets[kind]["create"] = server.pause(per_round * rounds, "create")
            if "crowd" in measures:
                targets[kind]["crowd"] = server.pause(crowd_size * rounds, "crowd")
        if langgraph is not None:
            langgraph.fresh()
            langgraph.start()
            lg_answers = config["langgraph_answers"] * rounds if "answer" in measures else 0
            lg_crowd = crowd_size * rounds if "crowd" in measures else 0
            if lg_answers + lg_crowd:
                copies = langgraph.paused_copies(lg_answers + lg_crowd)
                targets["langgraph"] = {"answer": copies[:lg_answers], "crowd": copies[lg_answers:]}
            print(f"langgraph dev: {langgraph.url}", flush=True)
        servers: dict[str, Any] = {**handrail, **({"langgraph": langgraph} if langgraph else {})}
        clients = {name: server.client() for name, server in servers.items()}

        def profiled(system: str, measure: str) -> Any:
            if system == "langgraph":
                return nullcontext()
            process = handrail[system].process
            assert process is not None
            return profiler.record(process.pid, f"{system}-{measure}")

        if "cycle" in measures:
            print("review cycles", flush=True)
            for name, client in clients.items():  # warm up
                api_cycles(client, 2 if name == "langgraph" else 10, config["per_thread"])
            for server in handrail.values():
                library_cycles(server.agent(), 10, config["per_thread"])
            with profiled_all(profiled, handrail, "cycle"):
                for r, order in rotations(list(servers), rounds):
                    for name in order:
                        n = config["langgraph_cycles"] if name == "langgraph" else config["cycles"]
                        results.add(f"cycle/{name}", api_cycles(clients[name], n, config["per_thread"]))
                        if name in handrail:
                            results.add(
                                f"library/{name}",
                                library_cycles(handrail[name].agent(), n, config["per_thread"]),
                            )
                    print(f"  round {r + 1}: load {os.getloadavg()[0]:.1f}", flush=True)

        if "answer" in measures:
            print("answers, one at a time", flush=True)
            with profiled_all(profiled, handrail, "answer"):
                for r, order in rotations(list(servers), rounds):
                    for name in order:
                        if name == "langgraph":
                            n = config["langgraph_answers"]
                            batch = targets[name]["answer"][r * n : (r + 1) * n]
                            results.add(
                                "answer/langgraph",
                                quiet_answers(clients[name], answer_call(name, "create"), batch),
                            )
                            continue
                        for way in ("answer", "create"):
                            batch = targets[name][way][r * per_round : (r + 1) * per_round]
                            results.add(
                                f"{way}/{name}", quiet_answers(clients[name], answer_call(name, way), batch)
                            )
                    print(f"  round {r + 1}: load {os.getloadavg()[0]:.1f}", flush=True)

        if "crowd" in measures:
            print(f"answers, {config['reviewers']} reviewers at once", flush=True)
            with profiled_all(profiled, handrail, "crowd"):
                for r, order in rotations(list(servers), rounds):
                    for name in order:
                        batch = targets[name]["crowd"][r * crowd_size : (r + 1) * crowd_size]
                        way = "create" if name == "langgraph" else "answer"
                        out = crowd(servers[name].client, answer_call(name, way), batch, config["reviewers"])
                        results.rate(f"crowd/{name}", out["rate"])
                        results.add(f"crowd-latency/{name}", out["latencies"])
                        if name != "langgraph":
                            join_all(servers[name].client, out["runs"])
                            done = len(out["runs"]) / (time.perf_counter() - out["start"])
                        else:
                            done = runs_done_rate(clients[name], out, config["drain_window"])
                            with suppress(NotFoundError):  # "No runs found to cancel"
                                clients[name].runs.cancel_many(status="pending")  # the backlog, untimed
                        results.rate(f"crowd-done/{name}", done)
                    print(f"  round {r + 1}: load {os.getloadavg()[0]:.1f}", flush=True)

        if "inbox" in measures:
            n = config["inbox_threads"]
            print(f"inbox over {n:,} paused threads: building", flush=True)
            for kind, server in handrail.items():
                started = time.perf_counter()
                server.pause(n, "inbox")
                results.notes[f"build/{kind}"] = time.perf_counter() - started
                print(f"  {kind}: {results.notes[f'build/{kind}']:.0f} s", flush=True)
            if langgraph is not None:
                started = time.perf_counter()
                langgraph.stop()
                langgraph.fresh()
                langgraph.start()
                langgraph.paused_copies(n)
                clients["langgraph"] = langgraph.client()
                results.notes["build/langgraph"] = time.perf_counter() - started
                print(
                    f"  langgraph: {results.notes['build/langgraph']:.0f} s (copies, and a restart)",
                    flush=True,
                )
            count = config["inbox_pages"]
            with profiled_all(profiled, handrail, "inbox"):
                for r, order in rotations(list(servers), rounds):
                    for name in order:
                        client = clients[name]
                        found = search_page(client)
                        assert len(found) == 50 and all(t["status"] == "interrupted" for t in found), name
                        results.add(f"search/{name}", pages(partial(search_page, client), count))
                        if name == "langgraph":
                            continue
                        for messages in (0, 3):
                            assert len(inbox_page(client, messages)["items"]) == 50
                            results.add(
                                f"inbox{messages}/{name}", pages(partial(inbox_page, client, messages), count)
                            )
                        made, whole = web_inbox_page(handrail[name], count)
                        results.add(f"web/{name}", made)
                        results.add(f"web-whole/{name}", whole)
                    print(f"  round {r + 1}: load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        if langgraph is not None:
            langgraph.stop()
        for server in handrail.values():
            server.stop()
    return results


@contextmanager
def profiled_all(
    profiled: Callable[[str, str], Any], handrail: dict[str, HandrailServer], measure: str
) -> Iterator[None]:
    """Record every handrail server through a whole measure (all its rounds)."""
    contexts = [profiled(kind, measure) for kind in handrail]
    for context in contexts:
        context.__enter__()
    try:
        yield
    finally:
        for context in reversed(contexts):
            context.__exit__(None, None, None)


# The table ------------------------------------------------------------------------------------
def table(results: Results, config: dict[str, Any], systems: list[str], load: list[float]) -> str:
    s, r = results.samples, results.rates
    columns = [
        c
        for c in ("sqlite", "library-sqlite", "postgres", "library-postgres", "langgraph")
        if c.split("-")[-1] in systems
    ]
    heads = {
        "sqlite": "handrail SQLite",
        "library-sqlite": "library SQLite",
        "postgres": "handrail Postgres",
        "library-postgres": "library Postgres",
        "langgraph": "LangGraph server",
    }

    def cell(key: str) -> str:
        values = s.get(key)
        return f"{pct(values, 0.5):.2f} / {pct(values, 0.99):.2f} ({len(values)})" if values else ""

    def ratio(lg_key: str, key: str) -> str:
        if not s.get(lg_key) or not s.get(key):
            return ""
        times = pct(s[lg_key], 0.5) / pct(s[key], 0.5)
        return f"{times:.0f}x" if times >= 10 else f"{times:.1f}x"

    n = config["inbox_threads"]
    rows: list[list[str]] = []
    spec = [
        ("review cycle: runs.wait with a resume, to the next interrupt", "cycle", "cycle", "library"),
        (
            "answer round trip: POST .../answer, recorded (LangGraph: runs.create, accepted)",
            "answer",
            "answer",
            None,
        ),
        ("runs.create with the resume, accepted", "create", "answer", None),
        (f"request latency, {config['reviewers']} reviewers at once", "crowd-latency", "crowd-latency", None),
        (f"inbox page of 50 over {n:,} paused threads (GET /handrail/inbox)", "inbox0", "search", None),
        ("  the same with each item's last 3 messages", "inbox3", "search", None),
        ("  the reviewers' web page GET /inbox, 50 rows (server-side, Server-Timing)", "web", "search", None),
        ("  the same, the whole request", "web-whole", "search", None),
        (f"threads.search(status='interrupted', limit=50) over {n:,}", "search", "search", None),
    ]
    for label, key, lg_key, library in spec:
        if not any(s.get(f"{key}/{c}") for c in ("sqlite", "postgres")) and not s.get(f"{lg_key}/langgraph"):
            continue
        row = [label]
        for c in columns:
            if c.startswith("library-"):
                row.append(cell(f"{library}/{c.split('-')[1]}") if library else "")
            elif c == "langgraph":
                row.append(cell(f"{lg_key}/langgraph"))
            else:
                row.append(cell(f"{key}/{c}"))
        row.append(ratio(f"{lg_key}/langgraph", f"{key}/sqlite"))
        row.append(ratio(f"{lg_key}/langgraph", f"{key}/postgres"))
        rows.append(row)
        if key == "cycle":
            diff = ["  API minus library, p50 (goal: at most 1 ms)"]
            for c in columns:
                kind = c if c in STORES else None
                if kind and s.get(f"cycle/{kind}") and s.get(f"library/{kind}"):
                    diff.append(f"{pct(s[f'cycle/{kind}'], 0.5) - pct(s[f'library/{kind}'], 0.5):.2f}")
                else:
                    diff.append("")
            rows.append([*diff, "", ""])
    for key, label in (
        ("crowd", f"answers per second, {config['reviewers']} reviewers at once (median round)"),
        ("crowd-done", "  answered and run to the next pause, per second"),
    ):
        if not any(r.get(f"{key}/{c}") for c in systems):
            continue
        row = [label]
        for c in columns:
            values = r.get(f"{key}/{c}")
            row.append(
                f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"
                if values and c in SYSTEMS
                else ""
            )
        for kind in STORES:
            ours, theirs = r.get(f"{key}/{kind}"), r.get(f"{key}/langgraph")
            row.append(
                f"{statistics.median(ours) / statistics.median(theirs):.1f}x" if ours and theirs else ""
            )
        rows.append(row)
    head = ["measure (ms: p50 / p99 (samples))", *(heads[c] for c in columns), "LG / SQLite", "LG / Postgres"]
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in rows]
    lines.append("")
    lines.append(
        "Ratios: LangGraph's p50 over handrail's (for answers/s: handrail's rate over LangGraph's); above 1, handrail is ahead."
    )
    builds = ", ".join(
        f"{k.split('/')[1]} {v:.0f} s" for k, v in results.notes.items() if k.startswith("build/")
    )
    if builds:
        lines.append(f"Building the paused threads for the inbox: {builds}.")
    if load:
        lines.append(
            f"Load average (1 min) during the run: median {statistics.median(load):.1f}, max {max(load):.1f} (2 cores)."
        )
    lines.append(f"{config['rounds']} round(s), systems alternating; python {sys.version.split()[0]}.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (2,000 inbox threads, 1 round)")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--measures", nargs="+", choices=MEASURES, default=list(MEASURES))
    for name in FULL:
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=None)
    parser.add_argument(
        "--profile", type=Path, help="record each handrail server with py-spy, per measure, here"
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "service.json")
    args = parser.parse_args()
    config = dict(QUICK if args.quick else FULL)
    for name in FULL:
        if getattr(args, name) is not None:
            config[name] = getattr(args, name)
    if "langgraph" in args.systems and not (LANGGRAPH_VENV / "bin" / "langgraph").exists():
        print(f"creating {LANGGRAPH_VENV} ...", flush=True)
        subprocess.run(["bash", str(HERE / "setup_langgraph_server.sh")], check=True)
    profiler = Profiler(args.profile)
    scratch = Path(tempfile.mkdtemp(prefix="bench-service-", dir=os.environ.get("BENCH_SCRATCH")))
    try:
        with LoadWatch() as load:
            results = run(config, args.systems, args.measures, profiler, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    text = table(results, config, args.systems, load.samples)
    print()
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "config": config,
                "samples": results.samples,
                "rates": results.rates,
                "notes": results.notes,
                "load": load.samples,
                "table": text,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
