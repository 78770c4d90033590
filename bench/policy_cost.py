"""What review policies cost (SPEC rules 13-15): instructions per warm review cycle.

Workload: ``bench/hitl_cycle.py``'s (two reviewed calls a turn, approved together, on
``InMemorySaver`` with ``ScriptedModel``), so every instruction is handrail's own. Shapes:

``plain``   ``interrupt_on={"write_file": True, "execute_sql": True}``: what every
            reviewed call pays for the policy code being there (compare with
            ``--against`` a checkout from before it);
``terms``   both tools with ``allow_self_approval=False`` and ``expires_after=3600``:
            each review saves its terms, each answer is checked against the run's
            starter and the expiry, each call's approval again where it runs;
``quorum``  both tools with ``required_approvals=2``: two reviewers' votes
            (``Agent.decide`` twice) and then ``invoke(None)``; a cycle of another
            shape (three calls instead of one), shown for what a counted review costs.

Instructions are counted with valgrind's callgrind (repeatable on a shared, noisy machine):
a thread runs 20 and then 120 warm cycles, and the difference over 100 is one cycle.

Run::

    python bench/policy_cost.py                                  # this checkout, every shape
    python bench/policy_cost.py --against /tmp/handrail-before   # and plain on another
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import instructions_per_cycle  # noqa: E402

SHAPES = ("plain", "terms", "quorum")
ALICE = {"id": "alice", "roles": []}
BOB = {"id": "bob", "roles": []}
CAROL = {"id": "carol", "roles": []}


def _agent(shape: str, turns: int) -> Any:
    import hitl_cycle

    from handrail import HumanInTheLoopMiddleware, InMemorySaver, ScriptedModel, create_agent

    policy: Any = True
    if shape == "terms":
        policy = {
            "allowed_decisions": ["approve", "reject"],
            "allow_self_approval": False,
            "expires_after": 3600,
        }
    elif shape == "quorum":
        policy = {"allowed_decisions": ["approve", "reject"], "required_approvals": 2}
    return create_agent(
        ScriptedModel([hitl_cycle._turn(i) for i in range(turns)]),
        [hitl_cycle.write_file, hitl_cycle.execute_sql],
        middleware=[HumanInTheLoopMiddleware({"write_file": policy, "execute_sql": policy})],
        checkpointer=InMemorySaver(),
    )


def _cycles(shape: str, count: int) -> None:
    """Run ``count`` warm cycles of ``shape`` on a thread of 10 turns (the counted body)."""
    import hitl_cycle

    from handrail import Command

    agent = _agent(shape, count + 20)
    start = {"configurable": {"thread_id": "t", "reviewer": ALICE}}
    agent.invoke({"messages": "go"}, start)
    answer = {"configurable": {"thread_id": "t", "reviewer": BOB}}
    for _ in range(10 + count):
        if shape == "quorum":
            (pending,) = agent.get_state(answer).interrupts
            agent.decide("t", pending.id, hitl_cycle.APPROVE, reviewer=BOB)
            agent.decide("t", pending.id, hitl_cycle.APPROVE, reviewer=CAROL)
            agent.invoke(None, answer)
        else:
            agent.invoke(Command(resume=hitl_cycle.APPROVE), answer)


def instructions(tree: Path, shape: str) -> float:
    """Instructions one warm cycle of ``shape`` costs with ``tree``'s handrail."""
    return instructions_per_cycle(__file__, tree, "--shape", shape)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, help="another checkout to count the plain shape for")
    parser.add_argument("--shape", choices=SHAPES, default="plain", help=argparse.SUPPRESS)
    parser.add_argument("--cycles", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cycles is not None:
        _cycles(args.shape, args.cycles)
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed", file=sys.stderr)
        return 1
    rows = [(f"{shape}, this checkout", instructions(HERE.parent, shape)) for shape in SHAPES]
    if args.against is not None:
        rows.insert(0, (f"plain, {args.against}", instructions(args.against, "plain")))
    width = max(len(name) for name, _ in rows)
    print("instructions per warm cycle (InMemorySaver, two reviewed calls a turn)")
    base = dict(rows)[f"plain, {args.against}"] if args.against is not None else rows[0][1]
    for name, count in rows:
        print(f"  {name:<{width}}  {count:12,.0f}  {count / base:6.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
