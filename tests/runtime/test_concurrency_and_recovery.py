"""Rule 8 (one writer per thread) and rule 9 (tool calls whose end was never saved), in memory."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from handrail import Command, InMemorySaver, ScriptedModel, create_agent, tool
from handrail.checkpoint.base import Append
from handrail.errors import ConflictError, InvalidDecisionError

from _support import AgentFactory, Ledger, call, config, events_of, turn


def _race(agent: Any, resume: Any, workers: int = 2) -> list[Any]:
    barrier = threading.Barrier(workers)
    outcomes: list[Any] = [None] * workers

    def worker(i: int) -> None:
        barrier.wait()
        try:
            outcomes[i] = agent.invoke(Command(resume=resume), config())
        except Exception as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return outcomes


@pytest.mark.parametrize("attempt", range(25))
def test_two_threads_resuming_one_interrupt_one_wins_and_the_tool_runs_once(
    attempt: int, spec_tools: list
) -> None:
    """Rule 8: exactly one resume applies, the other gets ConflictError naming thread and interrupt."""
    ran: list[str] = []
    gate = threading.Event()

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        ran.append(to)
        gate.wait(0.01)  # widen the window in which the loser could sneak in
        return "sent"

    script = [turn(call("send_email", to="ceo@example.com")), {"content": "sent it"}, {"content": "again"}]
    agent = create_agent(
        ScriptedModel(script),
        [send_email],
        middleware=[__import__("handrail").HumanInTheLoopMiddleware({"send_email": True})],
        checkpointer=InMemorySaver(),
    )
    (pending,) = agent.invoke({"messages": "email the ceo"}, config())["__interrupt__"]
    outcomes = _race(agent, {pending.id: {"decisions": [{"type": "approve"}]}})

    wins = [o for o in outcomes if isinstance(o, dict)]
    losses = [o for o in outcomes if isinstance(o, Exception)]
    assert len(wins) == 1, outcomes
    assert len(losses) == 1 and isinstance(losses[0], ConflictError), outcomes
    assert "'t1'" in str(losses[0]) and pending.id in str(losses[0])
    assert losses[0].thread_id == "t1"
    assert ran == ["ceo@example.com"]
    final = agent.get_state(config())
    assert [m.type for m in final.values["messages"]] == ["human", "ai", "tool", "ai"]


async def test_async_resumes_racing_one_wins(make_agent: AgentFactory, ledger: Ledger) -> None:
    agent = make_agent([turn(call("write_file", path="a", content="b")), {"content": "ok"}, {"content": "x"}])
    (pending,) = (await agent.ainvoke({"messages": "go"}, config()))["__interrupt__"]
    resume = Command(resume={pending.id: {"decisions": [{"type": "approve"}]}})
    results = await asyncio.gather(
        agent.ainvoke(resume, config()), agent.ainvoke(resume, config()), return_exceptions=True
    )
    assert sum(isinstance(r, dict) for r in results) == 1
    assert sum(isinstance(r, ConflictError) for r in results) == 1
    assert ledger.names() == ["write_file"]


def test_store_refuses_an_append_at_a_stale_head() -> None:
    """The mechanism behind rule 8: appends name the head they expect."""
    from handrail.checkpoint.base import StoredEvent, ThreadRecord

    store = InMemorySaver()
    record = ThreadRecord("t", 1, "idle", "e", 1.0, 1.0)
    store.append("t", Append([StoredEvent(1, "input", 1.0, b"{}")], expected_seq=0, record=record))
    with pytest.raises(ConflictError, match="expected it at event 0, found it at 1"):
        store.append("t", Append([StoredEvent(1, "input", 2.0, b"{}")], expected_seq=0, record=record))
    assert len(store.read("t").events) == 1


class Crash(BaseException):
    """Stands in for the process dying in the middle of a tool."""


def _crashing_agent(*, idempotent: bool, fail_times: int = 1) -> tuple[Any, list[str]]:
    ran: list[str] = []

    @tool(idempotent=idempotent)
    def charge_card(amount: int) -> str:
        """Charge the customer's card."""
        ran.append(f"charge {amount}")
        if len(ran) <= fail_times:
            raise Crash()
        return f"charged {amount}"

    from handrail import HumanInTheLoopMiddleware

    agent = create_agent(
        ScriptedModel([turn(call("charge_card", "c1", amount=42)), {"content": "done"}]),
        [charge_card],
        middleware=[HumanInTheLoopMiddleware({"charge_card": True})],
        checkpointer=InMemorySaver(),
    )
    agent.invoke({"messages": "charge"}, config())
    with pytest.raises(Crash):
        agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    return agent, ran


def test_a_tool_that_began_but_never_finished_comes_back_as_outcome_unknown() -> None:
    """Rule 9: not silently run again; shown as an outcome_unknown interrupt."""
    agent, ran = _crashing_agent(idempotent=False)
    state = agent.get_state(config())
    (pending,) = state.interrupts
    assert pending.value["type"] == "outcome_unknown"
    assert pending.value["tool_call_id"] == "c1"
    assert pending.value["name"] == "charge_card"
    assert pending.value["args"] == {"amount": 42}
    assert "description" in pending.value
    assert agent.get_state(config()).interrupts[0].id == pending.id  # stable across reads

    again = agent.invoke(None, config())
    assert again["__interrupt__"][0].id == pending.id
    assert ran == ["charge 42"]  # invoke(None) did not run it again


@pytest.mark.parametrize(
    ("decision", "expected_runs", "content", "status"),
    [
        ({"type": "approve"}, 2, "charged 42", "success"),
        (
            {"type": "respond", "message": "it went through: receipt 991"},
            1,
            "it went through: receipt 991",
            "success",
        ),
        (
            {"type": "reject", "message": "do not charge twice"},
            1,
            "with reason: do not charge twice",
            "error",
        ),
    ],
)
def test_outcome_unknown_answers(decision: dict, expected_runs: int, content: str, status: str) -> None:
    """Rule 9: approve runs it again, respond supplies the result, reject does not run it."""
    agent, ran = _crashing_agent(idempotent=False)
    (pending,) = agent.get_state(config()).interrupts
    result = agent.invoke(Command(resume={pending.id: decision}), config())
    assert len(ran) == expected_runs
    tool_message = result["messages"][2]
    assert content in tool_message.content
    assert tool_message.status == status
    assert result["messages"][-1].content == "done"


def test_outcome_unknown_refuses_edit() -> None:
    agent, _ = _crashing_agent(idempotent=False)
    before = events_of(agent)
    with pytest.raises(InvalidDecisionError, match="outcome_unknown interrupt is answered by one decision"):
        agent.invoke(Command(resume={"type": "edit"}), config())
    assert events_of(agent) == before


def test_an_idempotent_tool_is_simply_run_again() -> None:
    """Rule 9: a tool marked idempotent runs again on the next invoke."""
    agent, ran = _crashing_agent(idempotent=True)
    assert agent.get_state(config()).interrupts == ()
    result = agent.invoke(None, config())
    assert ran == ["charge 42", "charge 42"]
    assert result["messages"][2].content == "charged 42"


def test_a_tool_still_running_elsewhere_is_not_reported_unknown() -> None:
    """While the run that started a tool is alive, the call is not 'unknown'."""
    started = threading.Event()
    release = threading.Event()

    @tool
    def slow() -> str:
        """Take a while."""
        started.set()
        release.wait(10)
        return "finished"

    agent = create_agent(
        ScriptedModel([turn(call("slow")), {"content": "ok"}]), [slow], checkpointer=InMemorySaver()
    )
    worker = threading.Thread(target=lambda: agent.invoke({"messages": "go"}, config()))
    worker.start()
    assert started.wait(10)
    try:
        assert agent.get_state(config()).interrupts == ()
        with pytest.raises(ConflictError, match="is being run elsewhere"):
            agent.invoke(None, config())
    finally:
        release.set()
        worker.join(10)
    assert agent.get_state(config()).values["messages"][-1].content == "ok"
