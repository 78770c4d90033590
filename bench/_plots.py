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


def main(argv: list[str]) -> int:
    summary = json.loads(Path(argv[0]).read_text())
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    cycle_plot(summary, out)
    storage_plot(summary, out)
    print(f"plots written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
