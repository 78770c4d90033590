"""handrail and LangGraph side by side, on the same scripted review workload.

Each turn the model proposes two tool calls (``write_file`` with about 200 bytes of
text, ``execute_sql``); both are reviewed in one batched interrupt; the resume answers
with a rotating mix of approve, edit and reject; the results go back to the model.
``_script.py`` holds the script; ``_tasks.py`` the measurements, run by
``_workload_handrail.py`` in handrail's venv and by ``_workload_langgraph.py`` in the
reference venv (LangChain 1.5.2 / LangGraph 1.2.24, see ``setup_reference.sh``). Each
task runs in a fresh interpreter; the two systems alternate task by task (A B, then
B A) so that a slow moment of the machine hits both.

Measured per backend (memory, SQLite, Postgres): the review cycle on short threads,
and a fresh thread's full cycle (first pause plus first resume); the cycle as a thread
grows to 10/50/200/500 turns, warm and resumed by a new agent object; at those lengths
the resume by a new process (SQLite, Postgres) and the bytes stored; the throughput of
50 concurrent three-turn threads on the async savers; the memory of 1,000 paused
threads; saver writes per cycle against the floor of two durable commits
(``_rawcommit.py``). Once a round, without a backend: the time of ``import handrail``
and of ``import langchain.agents`` in fresh interpreters (``_importtime.py``).

Run::

    bash bench/setup_reference.sh                     # once (the runner does it if missing)
    .venv/bin/python bench/compare_langgraph.py         # full run, about 15 minutes
    .venv/bin/python bench/compare_langgraph.py --quick # a few minutes
    .venv/bin/python bench/compare_langgraph.py --backends memory sqlite --no-plots
    .venv/bin/python bench/compare_langgraph.py --report bench/results/latest   # tables again

Results (raw JSON per task, ``summary.json`` and ``tables.md``) go to
``bench/results/latest``; plots to ``docs/img``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _tables import IMPORTS, LABEL, SYSTEMS, tables

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
HANDRAIL_PY = Path(os.environ.get("HANDRAIL_PYTHON", ROOT / ".venv" / "bin" / "python"))
REFERENCE_PY = Path(os.environ.get("REFERENCE_PYTHON", BENCH / ".venv-reference" / "bin" / "python"))
BACKENDS = ("memory", "sqlite", "postgres")

QUICK = {
    "rounds": 1,
    "cycle": {"threads": 15, "cycles": 5, "warmup": 3},
    "lengths": [10, 50, 200],
    "growth_runs": {"handrail": 1, "langgraph": 1},
    "coldproc": {"samples": 3},
    "imports": {"samples": 5},
    "throughput": {"rounds": 2, "warmup": 1},
    "memory_threads": 1000,
    "raw_samples": 100,
}
FULL = {
    "rounds": 3,
    "cycle": {"threads": 40, "cycles": 5, "warmup": 5},
    "lengths": [10, 50, 200, 500],
    "growth_runs": {"handrail": 2, "langgraph": 1},
    "coldproc": {"samples": 5},
    "imports": {"samples": 10},
    "throughput": {"rounds": 5, "warmup": 1},
    "memory_threads": 1000,
    "raw_samples": 300,
}


# Running the tasks -------------------------------------------------------------------------
def ensure_reference() -> None:
    if not REFERENCE_PY.exists():
        print(f"creating the reference venv ({REFERENCE_PY.parent.parent}) ...", flush=True)
        subprocess.run(["bash", str(BENCH / "setup_reference.sh")], check=True)


def run_task(
    system: str, task: str, backend: str, params: dict[str, Any], out_dir: Path, tag: str
) -> dict[str, Any]:
    python = HANDRAIL_PY if system == "handrail" else REFERENCE_PY
    module = BENCH / f"_workload_{system}.py"
    out = out_dir / f"{task}-{backend}-{system}-{tag}.json"
    command = [
        str(python),
        str(module),
        task,
        "--backend",
        backend,
        "--params",
        json.dumps(params),
        "--out",
        str(out),
    ]
    started = time.perf_counter()
    print(f"  {task:<10} {backend:<8} {LABEL[system]:<9} {tag:<4} ...", end="", flush=True)
    subprocess.run(command, check=True, cwd=ROOT)
    print(f" {time.perf_counter() - started:6.1f} s", flush=True)
    return json.loads(out.read_text())


def run_raw(samples: int, out_dir: Path, tag: str) -> dict[str, Any]:
    out = out_dir / f"rawcommit-{tag}.json"
    print(f"  {'rawcommit':<10} {'sqlite+pg':<8} {'-':<9} {tag:<4} ...", end="", flush=True)
    started = time.perf_counter()
    subprocess.run(
        [str(HANDRAIL_PY), str(BENCH / "_rawcommit.py"), "--samples", str(samples), "--out", str(out)],
        check=True,
        cwd=ROOT,
    )
    print(f" {time.perf_counter() - started:6.1f} s", flush=True)
    return json.loads(out.read_text())


def run_imports(samples: int, round_no: int, pycache: Path, out_dir: Path) -> dict[str, Any]:
    """``samples`` fresh interpreters per system, alternating, each timing its library's import.

    Bytecode cached for both (``PYTHONPYCACHEPREFIX``, filled by one untimed import each
    first): an installed package has its bytecode, while an editable one in an
    environment with ``PYTHONDONTWRITEBYTECODE`` would compile its source every time.
    """
    out = out_dir / f"imports-r{round_no}.json"
    print(f"  {'imports':<10} {'-':<8} {'both':<9} r{round_no:<3} ...", end="", flush=True)
    started = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    result: dict[str, Any] = {"samples": {s: [] for s in SYSTEMS}, "loaded": {}, "cached_bytecode": True}

    def one(system: str) -> dict[str, Any]:
        python = HANDRAIL_PY if system == "handrail" else REFERENCE_PY
        command = [str(python), str(BENCH / "_importtime.py"), IMPORTS[system]]
        done = subprocess.run(
            command,
            check=True,
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**env, "PYTHONPYCACHEPREFIX": str(pycache / system)},
        )
        return json.loads(done.stdout.strip().splitlines()[-1])

    for system in SYSTEMS:
        one(system)  # untimed: writes the bytecode
    for i in range(samples):
        for system in SYSTEMS if (round_no + i) % 2 == 0 else SYSTEMS[::-1]:
            row = one(system)
            result["samples"][system].append(row["seconds"])
            result["loaded"][system] = row["loaded"]
            result["checked"] = row["checked"]
    out.write_text(json.dumps(result, indent=1))
    print(f" {time.perf_counter() - started:6.1f} s", flush=True)
    return result


def collect(config: dict[str, Any], backends: Sequence[str], out_dir: Path) -> dict[str, Any]:
    """Run every task, alternating the systems; return the raw results."""
    results: dict[str, Any] = {
        "cycle": [],
        "growth": [],
        "coldproc": [],
        "throughput": [],
        "memory": [],
        "commits": [],
        "raw": [],
        "imports": [],
        "load": [],
    }
    pycache = Path(tempfile.mkdtemp(prefix="handrail-bench-pycache-"))
    try:
        for round_no in range(config["rounds"]):
            load = os.getloadavg()
            results["load"].append({"round": round_no + 1, "start": load})
            print(
                f"round {round_no + 1} of {config['rounds']} (load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f})",
                flush=True,
            )
            results["raw"].append(run_raw(config["raw_samples"], out_dir, f"r{round_no}"))
            samples = config.get("imports", {}).get("samples", 0)
            if samples:
                results["imports"].append(run_imports(samples, round_no, pycache, out_dir))
            _one_round(config, backends, out_dir, round_no, results)
            results["load"][-1]["end"] = os.getloadavg()
    finally:
        shutil.rmtree(pycache, ignore_errors=True)
    return results


def _one_round(
    config: dict[str, Any], backends: Sequence[str], out_dir: Path, round_no: int, results: dict[str, Any]
) -> None:
    """One round of every task, the systems alternating task by task (A B, then B A)."""
    for b, backend in enumerate(backends):
        order = SYSTEMS if (round_no + b) % 2 == 0 else SYSTEMS[::-1]
        # coldproc: the memory store dies with its process, so no new process can resume it
        tasks = ("cycle", "throughput", "growth") + (("coldproc",) if backend != "memory" else ())
        for task in tasks:
            for system in order:
                if task == "cycle":
                    runs = [config["cycle"]]
                elif task == "throughput":
                    runs = [config["throughput"]]
                elif task == "coldproc":
                    runs = [{"lengths": config["lengths"], **config.get("coldproc", {})}]
                else:
                    runs = [{"lengths": config["lengths"]}] * config["growth_runs"][system]
                for i, params in enumerate(runs):
                    tag = f"r{round_no}" + (f"-{i}" if len(runs) > 1 else "")
                    results[task].append(run_task(system, task, backend, params, out_dir, tag))
        if round_no == 0:
            for system in order:
                results["commits"].append(run_task(system, "commits", backend, {}, out_dir, "r0"))
    if round_no == 0:
        for system in SYSTEMS:
            for backend in [b for b in ("memory", "sqlite") if b in backends]:
                for traced in (False, True):
                    params = {"threads": config["memory_threads"], "traced": traced}
                    tag = "traced" if traced else "rss"
                    results["memory"].append(run_task(system, "memory", backend, params, out_dir, tag))


# Statistics ----------------------------------------------------------------------------------
def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def p90(values: Sequence[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]


def _of(rows: list[dict[str, Any]], system: str, backend: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["system"] == system and r["backend"] == backend]


def summarise(raw: dict[str, Any], backends: Sequence[str], lengths: Sequence[int]) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "cycle": {},
        "full_cycle": {},
        "growth": {},
        "coldproc": {},
        "throughput": {},
        "commits": {},
        "memory": {},
    }
    for backend in backends:
        for system in SYSTEMS:
            key = f"{system}/{backend}"
            cycles = [t for r in _of(raw["cycle"], system, backend) for t in r["cycle"]]
            firsts = [t for r in _of(raw["cycle"], system, backend) for t in r["first_pause"]]
            fulls = [t for r in _of(raw["cycle"], system, backend) for t in r.get("full_cycle", [])]
            if cycles:
                summary["cycle"][key] = {
                    "median": median(cycles),
                    "p90": p90(cycles),
                    "samples": len(cycles),
                    "first_pause_median": median(firsts),
                }
            if fulls:
                summary["full_cycle"][key] = {
                    "median": median(fulls),
                    "p90": p90(fulls),
                    "samples": len(fulls),
                }
            walls = [w for r in _of(raw["throughput"], system, backend) for w in r["walls"]]
            if walls:
                runs = _of(raw["throughput"], system, backend)
                concurrency = runs[0]["concurrency"]
                rates = [concurrency / w for w in walls]
                summary["throughput"][key] = {
                    "median": median(rates),
                    "min": min(rates),
                    "max": max(rates),
                    "samples": len(rates),
                    "concurrency": concurrency,
                    "turns": runs[0]["turns"],
                }
            growth = _of(raw["growth"], system, backend)
            if growth:
                summary["growth"][key] = _growth(growth, lengths)
            coldproc = _of(raw.get("coldproc", []), system, backend)
            if coldproc:
                summary["coldproc"][key] = _coldproc(coldproc, lengths)
            commits = _of(raw["commits"], system, backend)
            if commits:
                c = commits[0]
                summary["commits"][key] = {
                    "calls_per_cycle": {k: v / c["cycles"] for k, v in sorted(c["calls"].items())},
                    "writes_per_cycle": sum(v for k, v in c["calls"].items() if k.startswith("write:"))
                    / c["cycles"],
                    "durable_writes_per_cycle": sum(
                        v for k, v in c["calls"].items() if k.startswith("write:") and "no fsync" not in k
                    )
                    / c["cycles"],
                    "wal_syncs_per_cycle": c["wal_syncs"] / c["cycles"] if "wal_syncs" in c else None,
                }
    for row in raw["memory"]:
        entry = summary["memory"].setdefault(f"{row['system']}/{row['backend']}", {"threads": row["threads"]})
        if row["traced"]:
            entry["traced_peak"] = row["traced_peak"]
            entry["traced_current"] = row["traced_current"]
        else:
            entry["rss_delta_kb"] = row["rss_after_kb"] - row["rss_base_kb"]
            entry["rss_peak_delta_kb"] = row["rss_peak_kb"] - row["rss_base_kb"]
            entry["seconds"] = row["seconds"]
    sqlite = [t for r in raw["raw"] for t in r["sqlite"]]
    postgres = [t for r in raw["raw"] for t in r["postgres"]]
    summary["raw"] = {
        "sqlite": {"median": median(sqlite), "p90": p90(sqlite), "samples": len(sqlite)},
        "postgres": {"median": median(postgres), "p90": p90(postgres), "samples": len(postgres)},
        "postgres_synchronous_commit": raw["raw"][0]["postgres_synchronous_commit"] if raw["raw"] else None,
    }
    imports = raw.get("imports", [])
    if imports:
        summary["imports"] = {k: imports[-1][k] for k in ("loaded", "checked", "cached_bytecode")}
        for system in SYSTEMS:
            seconds = [t for r in imports for t in r["samples"][system]]
            summary["imports"][system] = {
                "median": median(seconds),
                "p90": p90(seconds),
                "samples": len(seconds),
            }
    versions: dict[str, str] = {}
    for name, rows in raw.items():
        for row in rows if name != "load" else ():
            versions.update(row.get("versions", {}))
    summary["versions"] = versions
    summary["machine"] = machine()
    # the 1-minute load average at each round's start and end (the machine may be shared)
    summary["load"] = raw.get("load", [])
    return summary


def _growth(runs: list[dict[str, Any]], lengths: Sequence[int]) -> dict[str, Any]:
    out: dict[str, Any] = {"points": [], "curve": []}
    cold = runs[0]["params"].get("cold", 3)
    extra = runs[0]["params"].get("extra", 8)
    for n in lengths:
        warm = [
            c[1] for r in runs for c in r["cycles"] if n + cold <= c[0] < n + cold + extra and c[2] == "warm"
        ]
        colds = [c[1] for r in runs for c in r["cycles"] if n <= c[0] < n + cold and c[2] == "cold"]
        stored = [s for r in runs for s in r["storage"] if s["turns"] == n]
        if not warm:
            continue
        point: dict[str, Any] = {
            "turns": n,
            "warm_median": median(warm),
            "warm_p90": p90(warm),
            "warm_samples": len(warm),
            "cold_median": median(colds),
            "cold_samples": len(colds),
        }
        for field in (
            "payload_bytes",
            "messages_bytes",
            "file_bytes",
            "wal_bytes",
            "relation_bytes",
            "messages",
        ):
            values = [s[field] for s in stored if field in s]
            if values:
                point[field] = int(median(values))
        out["points"].append(point)
    # the whole curve: the median of each cycle's time over the runs, warm cycles only
    by_turn: dict[int, list[float]] = {}
    for r in runs:
        for turn, seconds, kind in r["cycles"]:
            if kind == "warm":
                by_turn.setdefault(turn, []).append(seconds)
    out["curve"] = [[turn, median(v)] for turn, v in sorted(by_turn.items())]
    return out


def _coldproc(runs: list[dict[str, Any]], lengths: Sequence[int]) -> dict[str, Any]:
    points = []
    for n in lengths:
        rows = [s for r in runs for s in r["samples"] if s["turns"] == n]
        if not rows:
            continue
        resumes = [s["resume"] for s in rows]
        points.append(
            {
                "turns": n,
                "median": median(resumes),
                "p90": p90(resumes),
                "open_build_median": median([s["open_build"] for s in rows]),
                "wall_median": median([s["wall"] for s in rows]),
                "samples": len(rows),
            }
        )
    return {"points": points}


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    except OSError:
        pass
    try:
        out = subprocess.run(
            ["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-Atc", "SHOW server_version"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        info["postgres"] = out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    import sqlite3

    info["sqlite"] = sqlite3.sqlite_version
    return info


# Plots ---------------------------------------------------------------------------------------
def plot(summary_path: Path, img_dir: Path) -> None:
    ensure_reference()
    subprocess.run(
        [str(REFERENCE_PY), str(BENCH / "_plots.py"), str(summary_path), str(img_dir)], check=True, cwd=ROOT
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="one round, fewer samples, up to 200 turns")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--out", default=str(BENCH / "results" / "latest"), help="where the JSON results go")
    parser.add_argument("--img", default=str(ROOT / "docs" / "img"), help="where the plots go")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--report", metavar="DIR", help="only summarise the raw results already in DIR")
    args = parser.parse_args(argv)
    config = QUICK if args.quick else FULL

    if args.report:
        out_dir = Path(args.report)
        raw = json.loads((out_dir / "raw.json").read_text())
        config = raw.pop("_config")
        backends = raw.pop("_backends")
    else:
        ensure_reference()
        out_dir = Path(args.out)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        out_dir.mkdir(parents=True)
        backends = args.backends
        started = time.perf_counter()
        raw = collect(config, backends, out_dir)
        print(f"collected in {time.perf_counter() - started:.0f} s")
        (out_dir / "raw.json").write_text(json.dumps({**raw, "_config": config, "_backends": backends}))

    summary = summarise(raw, backends, config["lengths"])
    summary["config"] = config
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    text = tables(summary, backends)
    (out_dir / "tables.md").write_text(text)
    print()
    print(text)
    print("machine:", json.dumps(summary["machine"]))
    print("versions:", json.dumps(summary["versions"]))
    if not args.no_plots:
        plot(out_dir / "summary.json", Path(args.img))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
