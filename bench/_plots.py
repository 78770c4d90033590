"""Plots for compare_langgraph.py (needs matplotlib: runs in the reference venv).

bench/.venv-reference/bin/python bench/_plots.py bench/results/latest/summary.json docs/img
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import matplotlib.ticker

COLOURS = {"memory": "#1b9e77", "sqlite": "#d95f02", "postgres": "#7570b3"}
STYLE = {"handrail": "-", "langgraph": "--"}
LABEL = {"handrail": "handrail", "langgraph": "LangGraph"}


def _smooth(curve: list[list[float]], window: int = 9) -> tuple[list[float], list[float]]:
    """A running median, so one slow cycle does not draw a spike."""
    xs, ys = [], []
    for i in range(len(curve)):
        chunk = sorted(v for _, v in curve[max(0, i - window // 2) : i + window // 2 + 1])
        xs.append(curve[i][0])
        ys.append(chunk[len(chunk) // 2] * 1e3)
    return xs, ys


def cycle_plot(summary: dict[str, Any], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 6.2), dpi=120)
    for key, growth in summary["growth"].items():
        system, backend = key.split("/")
        xs, ys = _smooth(growth["curve"])
        ax.plot(
            xs, ys, STYLE[system], color=COLOURS[backend], label=f"{LABEL[system]}, {backend}", linewidth=1.6
        )
        if system == "handrail":
            points = [p for p in growth["points"] if p["cold_samples"]]
            ax.plot(
                [p["turns"] for p in points],
                [p["cold_median"] * 1e3 for p in points],
                ":",
                marker="x",
                color=COLOURS[backend],
                label=f"handrail, {backend}, resumed by a new agent",
                linewidth=1,
            )
    ax.set_yscale("log")
    ax.set_xlabel("turns already in the thread")
    ax.set_ylabel("one review cycle, ms (log scale)")
    ax.set_title("Cost of a review cycle as the thread grows")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.13))
    fig.tight_layout()
    fig.savefig(out / "cycle_vs_turns.png")
    plt.close(fig)


MARKERS = {"memory": "o", "sqlite": "s", "postgres": "^"}


def storage_plot(summary: dict[str, Any], out: Path) -> None:
    """Two panels: the payload the saver holds, and what the backend takes on disk."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 5), dpi=120, sharey=True)
    messages = None
    for key, growth in summary["growth"].items():
        system, backend = key.split("/")
        points = growth["points"]
        turns = [p["turns"] for p in points]
        style = {"color": COLOURS[backend], "marker": MARKERS[backend], "linewidth": 1.4, "markersize": 5}
        label = f"{LABEL[system]}, {backend}"
        left.plot(turns, [p["payload_bytes"] / 1e6 for p in points], STYLE[system], label=label, **style)
        disk = [p.get("file_bytes", p.get("relation_bytes", p["payload_bytes"])) / 1e6 for p in points]
        right.plot(turns, disk, STYLE[system], label=label, **style)
        messages = messages or points
    for ax in (left, right):
        if messages:
            ax.plot(
                [p["turns"] for p in messages],
                [p["messages_bytes"] / 1e6 for p in messages],
                ":",
                color="black",
                label="the thread's messages as JSON",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("turns in the thread (log scale)")
        ax.grid(True, which="both", alpha=0.3)
    left.set_ylabel("MB for one thread (log scale)")
    left.set_title("Payload the saver stores\n(the same on every backend, so the lines overlap)", fontsize=10)
    right.set_title(
        "On disk: SQLite file, Postgres tables with TOAST and indexes\n(memory: the payload)", fontsize=10
    )
    left.legend(fontsize=7)
    fig.suptitle("Bytes stored as the thread grows (a slope of 1 is linear, 2 is quadratic)")
    fig.tight_layout()
    fig.savefig(out / "storage_vs_turns.png")
    plt.close(fig)


SYSTEM_COLOURS = {"handrail": "#1f77b4", "langgraph": "#d62728"}
# how the resume was made: (label, line style, marker)
KINDS = {
    "warm": ("warm", "-", "o"),
    "agent": ("cold: a new agent object", "--", "x"),
    "process": ("cold: a new process", ":", "s"),
}


def cold_plot(summary: dict[str, Any], out: Path) -> None:
    """One panel a backend: warm and cold resumes against the turns in the thread."""
    backends = [b for b in COLOURS if any(k.endswith("/" + b) for k in summary["growth"])]
    if not backends:
        return
    fig, axes = plt.subplots(1, len(backends), figsize=(4.2 * len(backends) + 1, 4.8), dpi=120, sharey=True)
    axes = axes if len(backends) > 1 else [axes]
    legend: dict[str, Any] = {}
    for ax, backend in zip(axes, backends, strict=True):
        turns: set[int] = set()
        for system in LABEL:
            key = f"{system}/{backend}"
            growth = summary["growth"].get(key, {"points": []})["points"]
            process = summary.get("coldproc", {}).get(key, {"points": []})["points"]
            series = {
                "warm": [(p["turns"], p["warm_median"]) for p in growth],
                "agent": [(p["turns"], p["cold_median"]) for p in growth if p.get("cold_samples")],
                "process": [(p["turns"], p["median"]) for p in process],
            }
            for kind, points in series.items():
                if not points:
                    continue
                turns.update(t for t, _ in points)
                label, style, marker = KINDS[kind]
                (line,) = ax.plot(
                    [t for t, _ in points],
                    [v * 1e3 for _, v in points],
                    style,
                    marker=marker,
                    color=SYSTEM_COLOURS[system],
                    label=f"{LABEL[system]}, {label}",
                    linewidth=1.4,
                    markersize=5,
                )
                legend.setdefault(line.get_label(), line)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(sorted(turns), [str(t) for t in sorted(turns)])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_title(
            backend + ("" if backend != "memory" else " (no new process: the store dies with it)"), fontsize=9
        )
        ax.set_xlabel("turns in the thread (log scale)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("one resume -> next interrupt, ms (log scale)")
    fig.legend(list(legend.values()), list(legend), fontsize=8, ncol=3, loc="lower center")
    fig.suptitle("Resume by a warm agent, a new agent object and a new process")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(out / "cold_resume.png")
    plt.close(fig)


def main(argv: list[str]) -> int:
    summary = json.loads(Path(argv[0]).read_text())
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    cycle_plot(summary, out)
    storage_plot(summary, out)
    cold_plot(summary, out)
    print(f"plots written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
