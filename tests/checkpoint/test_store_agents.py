"""End to end on every backend: pause, resume in another agent, state, history, the inbox."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _stores import Location, approve, build_agent, config, finished, log_lines, start

from handrail import Command
from handrail.errors import ConflictError, InvalidDecisionError


def test_pause_then_resume_elsewhere_runs_the_tool_once(location: Location, tmp_path: Path) -> None:
    log = tmp_path / "tool.log"
    first = build_agent(location.saver(), log)
    interrupt_id = start(first, "t1")
    paused = first.get_state(config("t1"))
    assert [i.id for i in paused.interrupts] == [interrupt_id]
    (request,) = paused.interrupts[0].value["action_requests"]
    assert request["name"] == "write_file" and request["args"] == {"path": "t1"}
    assert log_lines(log) == []

    # Another agent with its own saver (another process, as far as it can tell) resumes.
    second = build_agent(location.saver(), log)
    assert [i.id for i in second.get_state(config("t1")).interrupts] == [interrupt_id]
    result = second.invoke(approve(interrupt_id), config("t1"))
    assert finished(result)
    assert log_lines(log) == ["t1"]

    # Both agents read the same finished thread; resuming again is refused.
    for agent in (first, second):
        state = agent.get_state(config("t1"))
        assert state.interrupts == () and state.next == ()
        assert finished(state.values)
    with pytest.raises(ConflictError, match="already answered"):
        first.invoke(approve(interrupt_id), config("t1"))
    assert log_lines(log) == ["t1"]


def test_history_newest_first_and_time_travel(location: Location, tmp_path: Path) -> None:
    agent = build_agent(location.saver(), tmp_path / "tool.log")
    interrupt_id = start(agent, "t1")
    agent.invoke(approve(interrupt_id), config("t1"))
    history = list(agent.get_state_history(config("t1")))
    ids = [h.config["configurable"]["checkpoint_id"] for h in history]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == len(ids)
    assert finished(history[0].values)
    assert history[-1].metadata["source"] == "input"
    parents = [h.parent_config["configurable"]["checkpoint_id"] for h in history if h.parent_config]
    assert parents == ids[1:]
    # a past checkpoint reads the same from a fresh agent on another saver
    past = history[-2]
    again = build_agent(location.saver(), tmp_path / "tool.log").get_state(past.config)
    assert again.values == past.values and again.next == past.next


def test_a_refused_resume_leaves_the_stored_thread_unchanged(location: Location, tmp_path: Path) -> None:
    saver = location.saver()
    agent = build_agent(saver, tmp_path / "tool.log")
    interrupt_id = start(agent, "t1")
    before = saver.read("t1")
    with pytest.raises(InvalidDecisionError):
        agent.invoke(Command(resume={interrupt_id: {"decisions": [{"type": "bogus"}]}}), config("t1"))
    assert saver.read("t1") == before
    agent.invoke(approve(interrupt_id), config("t1"))  # the same interrupt can still be answered
    assert finished(agent.get_state(config("t1")).values)


def test_the_inbox_across_threads(location: Location, tmp_path: Path) -> None:
    agent = build_agent(location.saver(), tmp_path / "tool.log")
    expected = []
    for n in range(5):
        thread = f"t{n}"
        tool_name = "touch_file" if n % 2 else "write_file"
        result = agent.invoke(
            {"messages": [f"{tool_name}:{thread}"]},
            {"configurable": {"thread_id": thread}, "metadata": {"team": "odd" if n % 2 else "even"}},
        )
        expected.append((thread, result["__interrupt__"][0].id))

    seen: list[tuple[str, str]] = []
    cursor = None
    while True:
        page = agent.list_interrupts(limit=2, cursor=cursor)
        seen += [(item.thread_id, item.interrupt.id) for item in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == expected  # oldest first

    odd = agent.list_interrupts(metadata={"team": "odd"})
    assert [item.thread_id for item in odd.items] == ["t1", "t3"]
    assert [item.thread_id for item in agent.list_interrupts(tool="write_file").items] == ["t0", "t2", "t4"]
    item = agent.list_interrupts(thread_id="t2").items[0]
    assert item.interrupt.value["action_requests"][0]["args"] == {"path": "t2"}

    agent.invoke(approve(expected[0][1]), config("t0"))
    assert [i.thread_id for i in agent.list_interrupts().items] == ["t1", "t2", "t3", "t4"]
    assert agent.delete_thread("t1") is True
    assert [i.thread_id for i in agent.list_interrupts().items] == ["t2", "t3", "t4"]
    statuses = {r.thread_id: r.status for r in agent.list_threads()}
    assert statuses == {"t0": "idle", "t2": "interrupted", "t3": "interrupted", "t4": "interrupted"}


async def test_async_pause_resume_state_history_and_inbox(alocation: Location, tmp_path: Path) -> None:
    log = tmp_path / "tool.log"
    first = build_agent(await alocation.asaver(), log)
    second = build_agent(await alocation.asaver(), log)
    result: Any = await first.ainvoke({"messages": ["write_file:t1"]}, config("t1"))
    (interrupt,) = result["__interrupt__"]
    state = await second.aget_state(config("t1"))
    assert [i.id for i in state.interrupts] == [interrupt.id]
    page = await second.alist_interrupts()
    assert [(i.thread_id, i.interrupt.id) for i in page.items] == [("t1", interrupt.id)]

    result = await second.ainvoke(approve(interrupt.id), config("t1"))
    assert finished(result)
    assert log_lines(log) == ["t1"]
    state = await first.aget_state(config("t1"))
    assert finished(state.values) and state.interrupts == ()
    history = [h async for h in first.aget_state_history(config("t1"))]
    assert history[0].config == state.config
    assert (await second.alist_interrupts()).items == []
    assert await second.adelete_thread("t1") is True
    assert (await first.aget_state(config("t1"))).values.get("messages", []) == []
