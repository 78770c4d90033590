"""SPEC §6 and rule 7: what a cycle writes, how often it commits, and that nothing is lost."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from handrail import AgentMiddleware, Command, InMemorySaver, ScriptedModel, create_agent
from handrail.checkpoint.base import StoredEvent, ThreadRecord
from handrail.checkpoint.serde import dumps

from _support import AgentFactory, Ledger, call, config, turn


class CountingSaver(InMemorySaver):
    """Counts appends (each one is a commit in a durable store)."""

    def __init__(self) -> None:
        super().__init__()
        self.appends: list[list[str]] = []

    def append(
        self, thread_id: str, events: Sequence[StoredEvent], *, expected_seq: int, record: ThreadRecord
    ) -> None:
        self.appends.append([e.kind for e in events])
        super().append(thread_id, events, expected_seq=expected_seq, record=record)


def test_a_review_cycle_commits_once_per_effect_boundary(make_agent: AgentFactory, ledger: Ledger) -> None:
    """Rule 7 with few commits: saved before each tool runs, before the model is called, at the pause."""
    saver = CountingSaver()
    script = [
        turn(call("write_file", path=f"{i}", content="x"), call("execute_sql", query="q")) for i in range(3)
    ]
    agent = make_agent([*script, {"content": "done"}], checkpointer=saver)
    agent.invoke({"messages": "go"}, config())
    saver.appends.clear()
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}] * 2}), config())
    assert saver.appends == [
        ["resume", "step", "tool_started"],  # the answer and the decision step, before the tool acts
        ["tool_finished", "tool_started"],
        ["tool_finished", "step"],  # results saved before the model sees them
        ["step", "interrupt"],  # the model's answer and the next question
    ]


def test_a_failing_hook_keeps_the_steps_before_it(spec_tools: list, ledger: Ledger) -> None:
    """Buffered steps are written even when the run stops on an error."""

    class Fragile(AgentMiddleware):
        def after_agent(self, state: dict[str, Any], runtime: Any) -> None:
            raise RuntimeError("audit service down")

    agent = create_agent(
        ScriptedModel([turn(call("read_data", table="t")), {"content": "answer"}]),
        spec_tools,
        middleware=[Fragile()],
        checkpointer=InMemorySaver(),
    )
    with pytest.raises(RuntimeError, match="audit service down"):
        agent.invoke({"messages": "go"}, config())
    state = agent.get_state(config())
    assert state.values["messages"][-1].content == "answer"
    assert state.next == ("Fragile.after_agent",)
    assert ledger.names() == ["read_data"]


def test_each_turn_stores_about_what_it_adds(make_agent: AgentFactory) -> None:
    """SPEC §6: bytes grow linearly, within twice the size of the messages themselves."""
    text = "the quarterly report shows revenue growth across all regions while costs stayed flat " * 3
    script = [turn(call("write_file", path=f"notes/{i}.txt", content=text[:200])) for i in range(60)]
    agent = make_agent([*script, {"content": "done"}])
    agent.invoke({"messages": "go"}, config())
    for _ in range(60):
        agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    stored = sum(len(e.payload) for e in agent.checkpointer.read("t1").events)  # type: ignore[union-attr]
    messages = len(dumps(agent.get_state(config()).values["messages"]))
    assert stored < 2 * messages, (stored, messages)
