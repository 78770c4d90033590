"""What the gate costs (SPEC rules 19-20): the check per call against a warm review cycle.

Workload: ``bench/hitl_cycle.py``'s (two reviewed calls a turn, approved together, on
``InMemorySaver`` with ``ScriptedModel``), so every microsecond is handrail's own. The
gate adds, per cycle, the binding of the answer to its two calls (``answers_from``) and
one ``call_outcome`` per call; this prints those next to the cycle they are part of.

With ``--instructions`` it counts instructions instead of seconds (valgrind's callgrind:
repeatable on a shared, noisy machine): a thread runs 20 and then 120 warm cycles, and
the difference over 100 is the cost of one cycle. ``--against TREE`` counts the same for
another checkout (its ``src`` on the import path), for a before/after table.

Run::

    python bench/gate_cost.py
    python bench/gate_cost.py --instructions --against /tmp/handrail-before
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import timeit
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import instructions_per_cycle  # noqa: E402


def _cycles(count: int) -> None:
    """Run ``count`` warm cycles on a thread of 10 turns (the ``--instructions`` body)."""
    import hitl_cycle

    from handrail import Command

    agent = hitl_cycle._agent(count + 20)
    config = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": "go"}, config)
    for _ in range(10 + count):
        agent.invoke(Command(resume=hitl_cycle.APPROVE), config)


def seconds() -> list[tuple[str, float]]:
    """Median microseconds of the gate's parts and of one warm cycle."""
    import hitl_cycle

    from handrail import Command
    from handrail.review import Answer, answers_from, call_digest, call_outcome

    agent = hitl_cycle._agent(2_000)
    spec = agent._spec
    args = {"path": "notes/1.txt", "content": hitl_cycle.CONTENT}
    call: Any = {"name": "write_file", "args": args, "id": "call_1", "type": "tool_call"}
    answer = Answer(
        "call_1",
        "i",
        "review",
        spec.policies.source,
        call_digest("write_file", args),
        {"type": "approve"},
        None,
        3,
    )
    value = {
        "action_requests": [
            {"name": "write_file", "args": args, "description": "d", "tool_call_id": "call_1"},
            {
                "name": "execute_sql",
                "args": {"query": "UPDATE jobs"},
                "description": "d",
                "tool_call_id": "call_2",
            },
        ]
    }

    def each(run: Any, number: int = 20_000) -> float:
        return min(timeit.repeat(run, number=number, repeat=5)) / number * 1e6

    rows = [
        ("digest of one call", each(lambda: call_digest("write_file", args))),
        (
            "call_outcome, one approved call",
            each(lambda: call_outcome(spec.policies, spec.tools, call, answer=answer, request=lambda: None)),
        ),
        (
            "answers_from, a two-call answer",
            each(
                lambda: answers_from(
                    "i", "interrupt", spec.policies.source, value, hitl_cycle.APPROVE, None, 3
                )
            ),
        ),
    ]
    config = {"configurable": {"thread_id": "cycle"}}
    agent.invoke({"messages": "go"}, config)
    for _ in range(10):
        agent.invoke(Command(resume=hitl_cycle.APPROVE), config)
    cycle = statistics.median(
        timeit.repeat(lambda: agent.invoke(Command(resume=hitl_cycle.APPROVE), config), number=1, repeat=400)
    )
    rows.append(("warm cycle (two reviewed calls)", cycle * 1e6))
    return rows


def instructions(tree: Path) -> float:
    """Instructions one warm cycle costs with ``tree``'s handrail (callgrind, 120 - 20 cycles)."""
    return instructions_per_cycle(__file__, tree)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instructions", action="store_true", help="count instructions with callgrind")
    parser.add_argument("--against", type=Path, help="another checkout to count the same for")
    parser.add_argument("--cycles", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cycles is not None:
        _cycles(args.cycles)
        return 0
    if args.instructions:
        if shutil.which("valgrind") is None:
            print("valgrind is not installed", file=sys.stderr)
            return 1
        here = instructions(HERE.parent)
        print("instructions per warm cycle (InMemorySaver, two reviewed calls)")
        print(f"  this checkout: {here:,.0f}")
        if args.against is not None:
            there = instructions(args.against)
            print(f"  {args.against}: {there:,.0f}")
            print(f"  this / that: {here / there:.3f}")
        return 0
    rows = seconds()
    width = max(len(name) for name, _ in rows)
    print(f"{'part':<{width}}  microseconds")
    for name, micros in rows:
        print(f"{name:<{width}}  {micros:12.2f}")
    parts = {name: micros for name, micros in rows}
    gate = parts["answers_from, a two-call answer"] + 2 * parts["call_outcome, one approved call"]
    print(f"\nthe gate's share of a warm cycle: {gate / parts['warm cycle (two reviewed calls)']:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
