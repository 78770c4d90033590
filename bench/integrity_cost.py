"""What the hash chain over each thread's log costs (issue 12, SPEC rule 18).

Measures, on the memory and SQLite savers, the code this script imports:

* a warm review cycle (the agent has the thread cached): answer, run the tool, pause again;
* a cold load of a long thread by a new agent object (``get_state``: the saved reading and
  the events after it, checked from the chain's value it holds);
* a cold read of the whole log (``get_audit_trail``: every record read, and checked).

``--before PATH`` runs the same measurements, in alternating rounds, against another
source tree (``PATH/src``, e.g. a worktree of the commit before the chain) and prints both
side by side::

    git worktree add /tmp/before b622bb3
    python bench/integrity_cost.py --before /tmp/before --turns 500
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _agent(saver: Any) -> Any:
    from handrail import HumanInTheLoopMiddleware, ScriptedModel, create_agent, tool

    @tool
    def write_note(path: str, text: str) -> str:
        """Write a note."""
        return f"wrote {len(text)} characters to {path}"

    def next_turn(messages: list[Any]) -> dict[str, Any]:
        turn = sum(1 for m in messages if m.type == "ai")
        text = f"turn {turn}: the quarterly report shows revenue growth across all regions"
        return {
            "content": "",
            "tool_calls": [{"name": "write_note", "args": {"path": f"n{turn}", "text": text}}],
        }

    return create_agent(
        ScriptedModel([next_turn] * 100_000),
        [write_note],
        middleware=[HumanInTheLoopMiddleware({"write_note": True})],
        checkpointer=saver,
    )


def _cycle(agent: Any, config: Any) -> None:
    from handrail import Command

    state = agent.get_state(config) if not hasattr(agent, "_last") else None
    pending = agent._last if state is None else state.interrupts[0]
    result = agent.invoke(Command(resume={pending.id: {"decisions": [{"type": "approve"}]}}), config)
    agent._last = result["__interrupt__"][0]


def measure(backend: str, turns: int, cycles: int) -> dict[str, float]:
    """One round: build a thread of ``turns`` reviewed turns, then time the three things."""
    from handrail import InMemorySaver, SqliteSaver

    with tempfile.TemporaryDirectory() as folder:
        saver = InMemorySaver() if backend == "memory" else SqliteSaver(Path(folder) / "t.db")
        config = {"configurable": {"thread_id": "long"}}
        agent = _agent(saver)
        agent._last = agent.invoke({"messages": "take notes"}, config)["__interrupt__"][0]
        for _ in range(turns):
            _cycle(agent, config)
        began = time.perf_counter()
        for _ in range(cycles):
            _cycle(agent, config)
        warm = (time.perf_counter() - began) / cycles * 1000
        cold_state, cold_log = [], []
        for _ in range(5):
            fresh = _agent(saver)
            began = time.perf_counter()
            fresh.get_state(config)
            cold_state.append((time.perf_counter() - began) * 1000)
            fresh = _agent(saver)
            began = time.perf_counter()
            fresh.get_audit_trail(config)
            cold_log.append((time.perf_counter() - began) * 1000)
        if backend != "memory":
            saver.close()
    return {
        "warm cycle": warm,
        "cold get_state": statistics.median(cold_state),
        "cold whole log": statistics.median(cold_log),
    }


def _child(args: argparse.Namespace) -> None:
    print(json.dumps(measure(args.backend, args.turns, args.cycles)))


def _run(src: str | None, backend: str, turns: int, cycles: int) -> dict[str, float]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(Path(src) / "src")
    argv = [sys.executable, __file__, "--child", "--backend", backend, "--turns", str(turns)]
    done = subprocess.run(
        [*argv, "--cycles", str(cycles)], capture_output=True, text=True, env=env, check=True
    )
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", help="a source tree to compare with (its src/ is imported)")
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", choices=["memory", "sqlite"], default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    sides = {"before": args.before, "after": None} if args.before else {"this tree": None}
    backends = [args.backend] if args.backend else ["memory", "sqlite"]
    print(
        f"{args.turns}-turn thread, {args.cycles} warm cycles, median of {args.rounds} alternating rounds (ms)"
    )
    print(f"| backend | measure | {' | '.join(sides)} |" + (" after/before |" if args.before else ""))
    print("|---|---|" + "---:|" * (len(sides) + (1 if args.before else 0)))
    for backend in backends:
        found: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
        for _ in range(args.rounds):
            for side, src in sides.items():
                found[side].append(_run(src, backend, args.turns, args.cycles))
        for measure_name in ("warm cycle", "cold get_state", "cold whole log"):
            values = [statistics.median(r[measure_name] for r in found[side]) for side in sides]
            ratio = f" {values[1] / values[0]:.2f}x |" if args.before else ""
            shown = " | ".join(f"{v:.2f}" for v in values)
            print(f"| {backend} | {measure_name} | {shown} |{ratio}")


if __name__ == "__main__":
    main()
