"""Rule 8 on every backend: two Python threads of one process, sharing one saver, race to
resume one thread, many times: exactly one wins, the loser gets ConflictError, and the
winner's run completes (defect 2 of issue 12: the winner used to be told ConflictError
and left the thread half-way, with nothing pending)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from _stores import Location, config

from handrail import Command, HumanInTheLoopMiddleware, ScriptedModel, create_agent, tool
from handrail.errors import ConflictError

ROUNDS = 15


def _agent(saver: Any, ledger: list[str]) -> Any:
    @tool
    def charge(card: str) -> str:
        """Charge a card (not safe to repeat)."""
        ledger.append(card)
        return f"charged {card}"

    def next_turn(messages: list[Any]) -> dict[str, Any]:
        if messages[-1].type == "tool":
            return {"content": "done"}
        return {
            "content": "",
            "tool_calls": [
                {"name": "charge", "args": {"card": "A"}, "id": "a"},
                {"name": "charge", "args": {"card": "B"}, "id": "b"},
            ],
        }

    return create_agent(
        ScriptedModel([next_turn] * 100),
        [charge],
        middleware=[HumanInTheLoopMiddleware({"charge": True})],
        checkpointer=saver,
    )


def _race(agents: tuple[Any, Any], thread_id: str, resume: Any) -> list[Any]:
    barrier = threading.Barrier(2)
    outcomes: list[Any] = [None, None]

    def race(i: int, agent: Any) -> None:
        barrier.wait()
        try:
            outcomes[i] = agent.invoke(resume, config(thread_id))
        except Exception as exc:
            outcomes[i] = exc

    workers = [threading.Thread(target=race, args=(i, agent)) for i, agent in enumerate(agents)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    return outcomes


@pytest.mark.parametrize("agents", ["one agent", "two agents"])
def test_two_python_threads_racing_one_resume_end_with_one_complete_winner(
    location: Location, tmp_path: Path, agents: str
) -> None:
    saver = location.shared_saver()
    ledger: list[str] = []
    first = _agent(saver, ledger)
    second = first if agents == "one agent" else _agent(saver, ledger)
    for round_ in range(ROUNDS):
        thread_id = f"race-{round_}"
        (pending,) = first.invoke({"messages": "charge both"}, config(thread_id))["__interrupt__"]
        resume = Command(resume={pending.id: {"decisions": [{"type": "approve"}, {"type": "approve"}]}})
        outcomes = _race((first, second), thread_id, resume)
        wins = [o for o in outcomes if isinstance(o, dict)]
        losses = [o for o in outcomes if isinstance(o, Exception)]
        assert len(wins) == 1 and len(losses) == 1, outcomes
        assert isinstance(losses[0], ConflictError), losses
        assert wins[0]["messages"][-1].content == "done" and "__interrupt__" not in wins[0]
        state = first.get_state(config(thread_id))
        assert state.next == () and state.interrupts == ()
        assert [m.type for m in state.values["messages"]] == ["human", "ai", "tool", "tool", "ai"]
    assert sorted(ledger) == sorted(["A", "B"] * ROUNDS)  # each approved call ran exactly once
