"""``Agent.withdraw``: whoever asked takes a pending review back (``runtime.answering``
``Withdrawal``); every call is rejected, recorded, and never run, whatever the policy
allows reviewers; and the worker and sweeper options that keep a host to its own threads."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from handrail import HumanInTheLoopMiddleware, InMemorySaver, ScriptedModel, create_agent, tool
from handrail.checkpoint.sqlite import SqliteSaver
from handrail.errors import InvalidInputError
from handrail.worker import Worker

RAN: list[str] = []


@tool
def send_email(to: str) -> str:
    """Send an email."""
    RAN.append(to)
    return f"sent to {to}"


def _agent(saver: Any, name: str | None = "mailer") -> Any:
    calls = [{"name": "send_email", "args": {"to": "a@example.com"}, "id": "c1"}]
    policy = {"send_email": {"allowed_decisions": ["approve"], "reviewers": ["ops"]}}
    return create_agent(
        ScriptedModel([{"content": "", "tool_calls": calls}, {"content": "done"}]),
        [send_email],
        middleware=[HumanInTheLoopMiddleware(policy)],
        checkpointer=saver,
        name=name,
    )


@pytest.fixture(params=["memory", "sqlite"])
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return InMemorySaver() if request.param == "memory" else SqliteSaver(tmp_path / "t.db")


def test_a_withdrawn_review_rejects_every_call_even_where_reviewers_may_only_approve(saver: Any) -> None:
    RAN.clear()
    agent = _agent(saver)
    config: Any = {"configurable": {"thread_id": "w1"}}
    asked = agent.invoke({"messages": ["mail a"]}, config)["__interrupt__"][0]
    assert agent.withdraw("w1", reason="the client cancelled", by={"id": "client-7"}, channel="mcp") == [
        asked.id
    ]
    assert agent.withdraw("w1", reason="again") == []  # nothing left to withdraw
    result = agent.invoke(None, config)
    tool_message = result["messages"][2]
    assert tool_message.status == "error" and "was withdrawn" in tool_message.content
    assert "the client cancelled" in tool_message.content and RAN == []
    answered = [e for e in agent.get_audit_trail(config) if e.event == "answered"]
    assert [(e.kind, e.channel, e.reviewer) for e in answered] == [("withdrawn", "mcp", {"id": "client-7"})]


def test_withdraw_names_the_reviews_to_take_back_and_refuses_a_reason_left_out(saver: Any) -> None:
    agent = _agent(saver)
    config: Any = {"configurable": {"thread_id": "w2"}}
    agent.invoke({"messages": ["mail a"]}, config)
    assert agent.withdraw("w2", reason="not this one", interrupt_ids=["someone-else"]) == []
    with pytest.raises(InvalidInputError, match="reason"):
        agent.withdraw("w2", reason="  ")
    with pytest.raises(InvalidInputError, match="interrupt_ids"):
        agent.withdraw("w2", reason="x", interrupt_ids="abc")  # type: ignore[arg-type]
    assert agent.get_state(config).interrupts  # still pending


def test_a_review_already_answered_is_not_withdrawn(saver: Any) -> None:
    RAN.clear()
    agent = _agent(saver)
    config: Any = {"configurable": {"thread_id": "w3"}}
    asked = agent.invoke({"messages": ["mail a"]}, config)["__interrupt__"][0]
    agent.decide(
        "w3", asked.id, {"decisions": [{"type": "approve"}]}, reviewer={"id": "ann", "roles": ["ops"]}
    )
    assert agent.withdraw("w3", reason="too late") == []
    agent.invoke(None, config)
    assert RAN == ["a@example.com"]


def test_awithdraw_is_the_same_in_async_code(saver: Any) -> None:
    agent = _agent(saver)
    config: Any = {"configurable": {"thread_id": "w4"}}

    async def main() -> list[str]:
        await agent.ainvoke({"messages": ["mail a"]}, config)
        return await agent.awithdraw("w4", reason="gone")

    assert len(asyncio.run(main())) == 1


def test_a_worker_told_to_leave_unbound_threads_alone_does_not_take_them(tmp_path: Path) -> None:
    saver = SqliteSaver(tmp_path / "t.db")
    unnamed, named = _agent(saver, name=None), _agent(saver, name="gateway")
    config: Any = {"configurable": {"thread_id": "loose"}}
    asked = unnamed.invoke({"messages": ["mail a"]}, config)["__interrupt__"][0]
    unnamed.decide(
        "loose", asked.id, {"decisions": [{"type": "approve"}]}, reviewer={"id": "a", "roles": ["ops"]}
    )
    ran: list[str] = []

    async def main() -> None:
        worker = Worker({"gateway": named}, poll=0.05, unbound=False, on_finished=ran.append)
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(0.4)
        await worker.stop()
        await task

    asyncio.run(main())
    assert ran == [] and unnamed.get_state(config).next  # still queued for its own worker
