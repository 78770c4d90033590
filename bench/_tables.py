"""The tables ``compare_langgraph.py`` prints and writes to ``tables.md``, with the
issues' goals they are read against (``met`` / ``**not met**`` in each table).

``tables(summary, backends)`` renders a summary made by ``compare_langgraph.summarise``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SYSTEMS = ("handrail", "langgraph")
LABEL = {"handrail": "handrail", "langgraph": "LangGraph"}
IMPORTS = {"handrail": "handrail", "langgraph": "langchain.agents"}
# Goals of the issue: handrail's cycle and throughput vs LangGraph's, on the same backend
SPEED_GOAL = {"memory": 20.0, "sqlite": 8.0, "postgres": 6.0}
# Issue 16: a cold resume (a new agent object, and a new process), LangGraph / handrail at
# least this, by thread length (turns) and backend; other lengths are reported without a goal
COLD_GOAL = {
    10: {"memory": 15.0, "sqlite": 10.0, "postgres": 8.0},
    500: {"memory": 25.0, "sqlite": 25.0, "postgres": 15.0},
}
# Issue 16: `import langchain.agents` / `import handrail`, each in a fresh interpreter
IMPORT_GOAL = 15.0
# Issue 16: RSS growth per paused thread, KiB, handrail on the memory backend at most this
RSS_GOAL_KIB = 4.0


def _ms(seconds: float) -> str:
    if seconds != seconds:  # nan
        return "-"
    value = seconds * 1e3
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"


def tables(summary: dict[str, Any], backends: Sequence[str]) -> str:
    out: list[str] = []
    if summary.get("load"):
        spans = ", ".join(
            f"round {r['round']}: {r['start'][0]:.2f} -> {r.get('end', r['start'])[0]:.2f}"
            for r in summary["load"]
        )
        out.append(f"Load average (1 min) at each round's start and end: {spans}.\n")
    cyc = summary["cycle"]
    rows = []
    for backend in backends:
        h, lg = cyc.get(f"handrail/{backend}"), cyc.get(f"langgraph/{backend}")
        if not h or not lg:
            continue
        speedup = lg["median"] / h["median"]
        for system, s in (("handrail", h), ("langgraph", lg)):
            rows.append(
                [
                    backend,
                    LABEL[system],
                    _ms(s["median"]),
                    _ms(s["p90"]),
                    f"{1 / s['median']:,.0f}",
                    _ms(s["first_pause_median"]),
                    str(s["samples"]),
                    f"{speedup:.1f}x, goal {SPEED_GOAL[backend]:.0f}x: {_met(speedup >= SPEED_GOAL[backend])}"
                    if system == "handrail"
                    else "",
                ]
            )
    out.append("### Review cycle on a short thread (resume -> next interrupt)\n")
    out.append(
        _table(
            [
                "backend",
                "system",
                "median ms",
                "p90 ms",
                "cycles/s",
                "first pause ms",
                "samples",
                "handrail speed-up",
            ],
            rows,
        )
    )

    thr = summary["throughput"]
    rows = []
    for backend in backends:
        h, lg = thr.get(f"handrail/{backend}"), thr.get(f"langgraph/{backend}")
        if not h or not lg:
            continue
        speedup = h["median"] / lg["median"]
        for system, s in (("handrail", h), ("langgraph", lg)):
            rows.append(
                [
                    backend,
                    LABEL[system],
                    f"{s['median']:.1f}",
                    f"{s['min']:.1f} - {s['max']:.1f}",
                    str(s["samples"]),
                    f"{speedup:.1f}x, goal {SPEED_GOAL[backend]:.0f}x: {_met(speedup >= SPEED_GOAL[backend])}"
                    if system == "handrail"
                    else "",
                ]
            )
    if rows:
        any_row = next(iter(thr.values()))
        out.append(
            f"\n### Throughput: {any_row['concurrency']} concurrent {any_row['turns']}-turn threads, "
            "async savers, `asyncio.gather`\n"
        )
        out.append(
            _table(["backend", "system", "threads/s (median)", "range", "samples", "handrail speed-up"], rows)
        )

    gro = summary["growth"]
    rows = []
    for backend in backends:
        for system in SYSTEMS:
            g = gro.get(f"{system}/{backend}")
            if not g or not g["points"]:
                continue
            first, last = g["points"][0], g["points"][-1]
            flat = last["warm_median"] / first["warm_median"]
            cells = [backend, LABEL[system]]
            cells += [_ms(p["warm_median"]) for p in g["points"]]
            cells += [f"{flat:.1f}x" + (f" ({_met(flat <= 2)})" if system == "handrail" else "")]
            cells += [" / ".join(_ms(p["cold_median"]) for p in g["points"])]
            rows.append(cells)
    if rows:
        lengths = [p["turns"] for p in next(iter(gro.values()))["points"]]
        out.append("\n### Cycle cost as the thread grows (median ms of the cycles just after N turns)\n")
        out.append(
            _table(
                [
                    "backend",
                    "system",
                    *[f"{n} turns" for n in lengths],
                    f"{lengths[-1]} / {lengths[0]}",
                    "resumed by a new agent (cold), ms at " + "/".join(map(str, lengths)),
                ],
                rows,
            )
        )

        rows = []
        for backend in backends:
            for system in SYSTEMS:
                g = gro.get(f"{system}/{backend}")
                if not g:
                    continue
                for p in g["points"]:
                    ratio = p["payload_bytes"] / p["messages_bytes"]
                    disk = p.get("file_bytes", p.get("relation_bytes"))
                    rows.append(
                        [
                            backend,
                            LABEL[system],
                            str(p["turns"]),
                            _bytes(p["messages_bytes"]),
                            _bytes(p["payload_bytes"]),
                            f"{ratio:.1f}x" + (f" ({_met(ratio <= 2)})" if system == "handrail" else ""),
                            _bytes(disk) if disk is not None else "-",
                        ]
                    )
        out.append("\n### Bytes stored for one thread\n")
        out.append(
            "Payload: what the saver's records hold (handrail: event and pending-review payloads; "
            "LangGraph: checkpoints, metadata, channel blobs, writes). On disk: the SQLite file after a "
            "WAL checkpoint; for Postgres `pg_total_relation_size` of the saver's tables (heap, TOAST, "
            "indexes). Messages: the thread's messages as compact JSON, for reference.\n"
        )
        out.append(
            _table(
                ["backend", "system", "turns", "messages", "payload", "payload / messages", "on disk"], rows
            )
        )

    com = summary["commits"]
    raw = summary["raw"]
    rows = []
    for backend in backends:
        for system in SYSTEMS:
            c = com.get(f"{system}/{backend}")
            s = cyc.get(f"{system}/{backend}")
            if not c:
                continue
            floor = raw.get(backend, {}).get("median") if backend != "memory" else None
            calls = ", ".join(
                f"{k.split(':', 1)[1]} {v:.2f}"
                for k, v in c["calls_per_cycle"].items()
                if k.startswith("write:")
            )
            rows.append(
                [
                    backend,
                    LABEL[system],
                    f"{c['writes_per_cycle']:.2f}",
                    f"{c.get('durable_writes_per_cycle', c['writes_per_cycle']):.2f}",
                    calls,
                    f"{c['wal_syncs_per_cycle']:.2f}" if c["wal_syncs_per_cycle"] is not None else "-",
                    _ms(s["median"]) if s else "-",
                    _ms(floor) if floor else "-",
                    f"{s['median'] / floor:.1f}x" if s and floor else "-",
                ]
            )
    if rows:
        out.append("\n### Commits per cycle against the two-commit floor\n")
        out.append(
            f"Two raw commits of a tiny INSERT, back to back: SQLite (WAL, synchronous=FULL) "
            f"{_ms(raw['sqlite']['median'])} ms median (p90 {_ms(raw['sqlite']['p90'])}), Postgres "
            f"(synchronous_commit={raw['postgres_synchronous_commit']}) {_ms(raw['postgres']['median'])} ms "
            f"median (p90 {_ms(raw['postgres']['p90'])}).\n"
        )
        out.append(
            _table(
                [
                    "backend",
                    "system",
                    "saver writes / cycle",
                    "durable (fsync) / cycle",
                    "by call",
                    "WAL fsyncs / cycle",
                    "cycle median ms",
                    "two commits ms",
                    "cycle / two commits",
                ],
                rows,
            )
        )

    mem = summary["memory"]
    rows = []
    for key, m in sorted(mem.items()):
        system, backend = key.split("/")
        per_thread = m["rss_delta_kb"] / m["threads"] if "rss_delta_kb" in m else None
        goal = ""
        if system == "handrail" and backend == "memory" and per_thread is not None:
            goal = f"<= {RSS_GOAL_KIB:.0f} KiB: {_met(per_thread <= RSS_GOAL_KIB)}"
        rows.append(
            [
                backend,
                LABEL[system],
                str(m["threads"]),
                _bytes(m.get("rss_delta_kb", 0) * 1024),
                _bytes(m.get("rss_peak_delta_kb", 0) * 1024),
                _bytes(m.get("traced_peak")),
                _bytes(int(m.get("traced_current", 0) / m["threads"])) if "traced_current" in m else "-",
                f"{per_thread:.1f} KiB" if per_thread is not None else "-",
                goal,
            ]
        )
    if rows:
        out.append("\n### Memory of paused threads (each paused at its first review)\n")
        out.append(
            _table(
                [
                    "backend",
                    "system",
                    "threads",
                    "RSS growth",
                    "RSS peak growth",
                    "tracemalloc peak",
                    "per thread (traced)",
                    "RSS growth per thread",
                    "goal (handrail, memory)",
                ],
                rows,
            )
        )
    out += cold_tables(summary, backends)
    return "\n".join(out) + "\n"


def cold_tables(summary: dict[str, Any], backends: Sequence[str]) -> list[str]:
    """Issue 16's measures: the cold resume, the full cycle of a fresh thread, the import."""
    out: list[str] = []

    def cold_rows(section: dict[str, Any], field: str, extra: Any = None) -> list[list[str]]:
        rows = []
        for backend in backends:
            h, lg = section.get(f"handrail/{backend}"), section.get(f"langgraph/{backend}")
            if not h or not lg:
                continue
            theirs = {p["turns"]: p for p in lg["points"]}
            for p in h["points"]:
                q = theirs.get(p["turns"])
                if not q:
                    continue
                ratio = q[field] / p[field]
                goal = COLD_GOAL.get(p["turns"], {}).get(backend)
                cells = [backend, str(p["turns"]), _ms(q[field]), _ms(p[field]), f"{ratio:.1f}x"]
                cells.append(f"{goal:.0f}x: {_met(ratio >= goal)}" if goal else "-")
                cells += extra(q, p) if extra else []
                rows.append(cells)
        return rows

    heads = ["backend", "turns", "LangGraph ms", "handrail ms", "LangGraph / handrail", "goal"]
    # the growth task's cycles by a new agent object, at each length
    rows = cold_rows(
        summary.get("growth", {}), "cold_median", lambda q, p: [f"{q['cold_samples']} / {p['cold_samples']}"]
    )
    if rows:
        out.append("\n### Cold resume by a new agent object (median ms of a resume -> next interrupt)\n")
        out.append(
            "The growth task's cycles at N turns and the next two, each by a new agent object built on the open "
            "store just before it, in the process that grew the thread (its imports and connection warm).\n"
        )
        out.append(_table([*heads, "samples (LangGraph / handrail)"], rows))

    rows = cold_rows(
        summary.get("coldproc", {}),
        "median",
        lambda q, p: [
            f"{_ms(q['p90'])} / {_ms(p['p90'])}",
            f"{_ms(q['open_build_median'])} / {_ms(p['open_build_median'])}",
            f"{q['samples']} / {p['samples']}",
        ],
    )
    if rows:
        out.append(
            "\n### Cold resume by a new process (median ms of the resume call in a fresh interpreter)\n"
        )
        out.append(
            "Each sample a new interpreter, on a thread it has never loaded: it imports the library, opens the "
            "store and builds the agent (open + build, timed apart), then answers the pending review once "
            "(the time in the table); bytecode cached for both libraries.\n"
        )
        out.append(
            _table(
                [
                    *heads,
                    "p90 ms (LangGraph / handrail)",
                    "open + build ms (LangGraph / handrail)",
                    "samples (LangGraph / handrail)",
                ],
                rows,
            )
        )

    full = summary.get("full_cycle", {})
    rows = []
    for backend in backends:
        h, lg = full.get(f"handrail/{backend}"), full.get(f"langgraph/{backend}")
        if not h or not lg:
            continue
        ratio = lg["median"] / h["median"]
        goal = SPEED_GOAL[backend]
        rows.append(
            [
                backend,
                _ms(lg["median"]),
                _ms(h["median"]),
                f"{ratio:.1f}x",
                f"{goal:.0f}x: {_met(ratio >= goal)}",
                f"{_ms(lg['p90'])} / {_ms(h['p90'])}",
                f"{lg['samples']} / {h['samples']}",
            ]
        )
    if rows:
        out.append("\n### Full cycle of a fresh thread (start -> first interrupt, then the first resume)\n")
        out.append(
            _table(
                [
                    "backend",
                    "LangGraph ms",
                    "handrail ms",
                    "LangGraph / handrail",
                    "goal",
                    "p90 ms (LangGraph / handrail)",
                    "samples (LangGraph / handrail)",
                ],
                rows,
            )
        )

    imp = summary.get("imports")
    if imp:
        h, lg = imp["handrail"], imp["langgraph"]
        ratio = lg["median"] / h["median"]
        out.append("\n### Import time in a fresh process (`time.perf_counter()` around the import)\n")
        out.append(
            "Each sample a new interpreter, the two alternating"
            + (", bytecode cached for both (`PYTHONPYCACHEPREFIX`)" if imp.get("cached_bytecode") else "")
            + ".\n"
        )
        out.append(
            _table(
                [
                    f"LangGraph ms (`import {IMPORTS['langgraph']}`)",
                    f"handrail ms (`import {IMPORTS['handrail']}`)",
                    "LangGraph / handrail",
                    "goal",
                    "p90 ms (LangGraph / handrail)",
                    "samples (LangGraph / handrail)",
                ],
                [
                    [
                        _ms(lg["median"]),
                        _ms(h["median"]),
                        f"{ratio:.1f}x",
                        f"{IMPORT_GOAL:.0f}x: {_met(ratio >= IMPORT_GOAL)}",
                        f"{_ms(lg['p90'])} / {_ms(h['p90'])}",
                        f"{lg['samples']} / {h['samples']}",
                    ]
                ],
            )
        )
        for system in SYSTEMS:
            loaded = imp["loaded"].get(system, [])
            out.append(
                f"\nLoaded by `import {IMPORTS[system]}` (of {', '.join(imp['checked'])}): "
                + (", ".join(f"`{m}`" for m in loaded) if loaded else "none")
            )
    return out
