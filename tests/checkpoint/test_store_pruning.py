"""Pruning old history (issue 3) and the audit trail, on every backend.

Pruning keeps a thread's state and its whole audit trail; only old checkpoints go.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _stores import Location, approve, build_agent, config, log_lines

from handrail import Command
from handrail.errors import ConflictError, InvalidInputError


def _busy_thread(agent: Any, thread_id: str, turns: int) -> None:
    """A thread of ``turns`` reviewed turns: each one asks, is answered, runs, finishes."""
    for turn in range(turns):
        result = agent.invoke({"messages": [f"write_file:{thread_id}-{turn}"]}, config(thread_id))
        (pending,) = result["__interrupt__"]
        decision = {"type": "approve"} if turn % 2 == 0 else {"type": "reject", "message": f"not {turn}"}
        agent.invoke(Command(resume={pending.id: {"decisions": [decision]}}), config(thread_id))


def test_pruning_keeps_state_audit_and_the_newest_checkpoints(location: Location, tmp_path: Path) -> None:
    log = tmp_path / "tool.log"
    agent = build_agent(location.saver(), log)
    _busy_thread(agent, "t", 6)
    before_state = agent.get_state(config("t"))
    before_audit = agent.get_audit_trail(config("t"))
    history = list(agent.get_state_history(config("t")))
    events_before = len(location.saver().read("t").events)

    dropped = agent.prune_thread("t", keep_last=5)

    assert dropped > 0
    assert len(location.saver().read("t").events) == events_before - dropped
    assert agent.get_state(config("t")).values == before_state.values
    assert agent.get_state(config("t")).next == before_state.next
    assert agent.get_audit_trail(config("t")) == before_audit  # every request, answer and run
    kept = list(agent.get_state_history(config("t")))
    assert [s.config for s in kept] == [s.config for s in history[:5]]
    assert kept[-1].values == history[4].values
    assert kept[-1].metadata["source"] == "prune"

    # A fresh agent (another process) reads the pruned thread the same way, and it goes on.
    other = build_agent(location.saver(), log)
    assert other.get_state(config("t")).values == before_state.values
    result = other.invoke({"messages": ["write_file:t-more"]}, config("t"))
    other.invoke(approve(result["__interrupt__"][0].id), config("t"))
    assert log_lines(log) == ["t-0", "t-2", "t-4", "t-more"]
    assert agent.prune_thread("t", keep_last=1000) == 0


def test_time_travel_to_a_pruned_checkpoint_is_refused(location: Location, tmp_path: Path) -> None:
    agent = build_agent(location.saver(), tmp_path / "log")
    _busy_thread(agent, "t", 3)
    oldest = list(agent.get_state_history(config("t")))[-1].config
    agent.prune_thread("t", keep_last=2)
    with pytest.raises(InvalidInputError, match="was pruned; the oldest one left is"):
        agent.invoke(None, oldest)
    with pytest.raises(InvalidInputError, match="has no checkpoint"):
        agent.get_state(oldest)
    newest_kept = list(agent.get_state_history(config("t")))[-1].config
    assert agent.get_state(newest_kept).metadata["source"] == "prune"


def test_a_paused_thread_can_be_pruned_and_then_answered(location: Location, tmp_path: Path) -> None:
    log = tmp_path / "log"
    agent = build_agent(location.saver(), log)
    _busy_thread(agent, "t", 2)
    result = agent.invoke({"messages": ["write_file:t-last"]}, config("t"))
    (pending,) = result["__interrupt__"]
    agent.prune_thread("t", keep_last=1)
    assert [i.id for i in agent.get_state(config("t")).interrupts] == [pending.id]
    fresh = build_agent(location.saver(), log)
    fresh.invoke(approve(pending.id), config("t"))
    assert log_lines(log) == ["t-0", "t-last"]
    with pytest.raises(ConflictError, match="already answered"):
        fresh.invoke(approve(pending.id), config("t"))


def test_audit_trail_says_who_decided_what_and_what_ran(location: Location, tmp_path: Path) -> None:
    agent = build_agent(location.saver(), tmp_path / "log")
    cfg = {"configurable": {"thread_id": "a", "reviewer": {"id": "dana", "roles": ["dba"]}}}
    result = agent.invoke({"messages": ["write_file:a.txt"]}, cfg)
    (pending,) = result["__interrupt__"]
    edit = {"type": "edit", "edited_action": {"name": "write_file", "args": {"path": "b.txt"}}}
    agent.invoke(Command(resume={pending.id: {"decisions": [edit]}}), cfg)

    trail = agent.get_audit_trail(cfg)
    events = ["input", "review_requested", "answered", "tool_started", "tool_finished"]
    assert [e.event for e in trail] == events
    sent, asked, answered, started, finished_ = trail
    assert sent.by == {"id": "dana", "roles": ["dba"]} and sent.channel == "python"  # rule 21
    assert asked.interrupt_id == answered.interrupt_id == pending.id
    assert asked.value["action_requests"][0]["args"] == {"path": "a.txt"}  # the original action
    assert answered.reviewer == {"id": "dana", "roles": ["dba"]}
    assert answered.value == {"decisions": [edit]}
    assert started.tool == "write_file" and started.args == {"path": "b.txt"}  # what actually ran
    assert started.proposed is not None and started.proposed["args"] == {"path": "a.txt"}
    assert finished_.result.tool_call_id == started.tool_call_id
    assert "wrote b.txt" in finished_.result.content
    assert [e.seq for e in trail] == sorted(e.seq for e in trail)
    assert trail[0].at <= trail[-1].at


def test_prune_refuses_a_bad_keep_last(location: Location, tmp_path: Path) -> None:
    agent = build_agent(location.saver(), tmp_path / "log")
    for bad in (0, -1, "3", True):
        with pytest.raises(InvalidInputError, match="keep_last must be a positive integer"):
            agent.prune_thread("t", keep_last=bad)  # type: ignore[arg-type]
    assert agent.prune_thread("never-ran") == 0


async def test_async_pruning_and_audit(alocation: Location, tmp_path: Path) -> None:
    agent = build_agent(await alocation.asaver(), tmp_path / "log")
    result = await agent.ainvoke({"messages": ["write_file:x"]}, config("t"))
    await agent.ainvoke(approve(result["__interrupt__"][0].id), config("t"))
    result = await agent.ainvoke({"messages": ["write_file:y"]}, config("t"))
    await agent.ainvoke(approve(result["__interrupt__"][0].id), config("t"))
    trail = await agent.aget_audit_trail(config("t"))
    assert await agent.aprune_thread("t", keep_last=2) > 0
    assert await agent.aget_audit_trail(config("t")) == trail
    assert (await agent.aget_state(config("t"))).values["messages"][-1].content == "done"
