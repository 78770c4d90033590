"""interrupt() in your own tools and hooks; rule 6 (only the paused step runs again); rule 7."""

from __future__ import annotations

from typing import Any

import pytest

from handrail import (
    AgentMiddleware,
    Command,
    InMemorySaver,
    ScriptedModel,
    create_agent,
    interrupt,
    tool,
)
from handrail.errors import ConfigurationError, InvalidDecisionError

from _support import AgentFactory, Ledger, call, config, events_of, turn


def test_ask_user_tool_is_answered_by_a_bare_resume() -> None:
    asked = []

    @tool
    def ask_user(question: str) -> str:
        """Ask the user a question and return the answer."""
        asked.append(question)
        return interrupt({"question": question})

    model = ScriptedModel(
        [turn(call("ask_user", "q1", question="Favourite colour?")), {"content": "Blue it is."}]
    )
    agent = create_agent(model, [ask_user], checkpointer=InMemorySaver())
    paused = agent.invoke({"messages": "pick a colour"}, config())
    (pending,) = paused["__interrupt__"]
    assert pending.value == {"question": "Favourite colour?"}

    done = agent.invoke(Command(resume="Blue."), config())
    assert done["messages"][2].content == "Blue."
    assert done["messages"][2].tool_call_id == "q1"
    assert done["messages"][-1].content == "Blue it is."
    # rule 6: the tool body before interrupt() ran again on resume; the model did not
    assert asked == ["Favourite colour?", "Favourite colour?"]
    assert len(model.calls) == 2


def test_interrupt_in_a_tool_needs_a_checkpointer() -> None:
    """Rule 7: pausing without a checkpointer is an error that says so."""

    @tool
    def ask_user(question: str) -> str:
        """Ask."""
        return interrupt(question)

    agent = create_agent(ScriptedModel([turn(call("ask_user", question="?"))]), [ask_user])
    with pytest.raises(ConfigurationError, match=r"agent has no checkpointer.*checkpointer=InMemorySaver"):
        agent.invoke({"messages": "go"})


def test_hitl_pause_without_checkpointer_says_so(make_agent: AgentFactory, ledger: Ledger) -> None:
    agent = make_agent([turn(call("write_file", path="a", content="b"))], checkpointer=None)
    with pytest.raises(ConfigurationError, match="cannot pause for review: the agent has no checkpointer"):
        agent.invoke({"messages": "go"})
    assert ledger.calls == []


def test_agent_without_checkpointer_runs_when_nothing_pauses(make_agent: AgentFactory) -> None:
    agent = make_agent([turn(call("read_data", table="t")), {"content": "fine"}], checkpointer=None)
    assert agent.invoke({"messages": "go"})["messages"][-1].content == "fine"


def test_checkpointer_without_thread_id_is_refused(make_agent: AgentFactory) -> None:
    """Rule 7: with a checkpointer, every call must name its thread."""
    agent = make_agent([{"content": "x"}])
    with pytest.raises(ConfigurationError, match="thread_id"):
        agent.invoke({"messages": "go"})
    with pytest.raises(ConfigurationError, match="thread_id"):
        agent.invoke({"messages": "go"}, {"configurable": {}})


def test_interrupt_outside_a_run_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="inside a tool or middleware hook"):
        interrupt("x")


class ApprovalGate(AgentMiddleware):
    """A custom policy: the person must confirm before every model call after the first."""

    def __init__(self) -> None:
        self.before_calls: list[int] = []

    def before_model(self, state: dict[str, Any], runtime: Any) -> dict[str, Any] | None:
        self.before_calls.append(len(state["messages"]))
        if len(state["messages"]) < 3:
            return None
        answer = interrupt({"confirm": "continue?", "messages": len(state["messages"])})
        if answer != "yes":
            return {"jump_to": "end"}
        return None


def test_interrupt_inside_a_middleware_hook(ledger: Ledger, spec_tools: list) -> None:
    gate = ApprovalGate()
    model = ScriptedModel([turn(call("read_data", table="t")), {"content": "summary"}])
    agent = create_agent(model, spec_tools, middleware=[gate], checkpointer=InMemorySaver())
    paused = agent.invoke({"messages": "go"}, config())
    assert paused["__interrupt__"][0].value == {"confirm": "continue?", "messages": 3}
    assert agent.get_state(config()).next == ("ApprovalGate.before_model",)
    done = agent.invoke(Command(resume="yes"), config())
    assert done["messages"][-1].content == "summary"
    # rule 6: the hook ran again from its start on resume; the model was called twice in all
    assert gate.before_calls == [1, 3, 3]
    assert len(model.calls) == 2


def test_hook_answer_can_end_the_run(ledger: Ledger, spec_tools: list) -> None:
    gate = ApprovalGate()
    model = ScriptedModel([turn(call("read_data", table="t")), {"content": "never"}])
    agent = create_agent(model, spec_tools, middleware=[gate], checkpointer=InMemorySaver())
    agent.invoke({"messages": "go"}, config())
    done = agent.invoke(Command(resume="no"), config())
    assert done["messages"][-1].type == "tool"
    assert len(model.calls) == 1


def test_several_interrupts_in_one_task_are_answered_in_order() -> None:
    seen = []

    @tool
    def survey() -> str:
        """Ask two questions."""
        name = interrupt("name?")
        colour = interrupt("colour?")
        seen.append((name, colour))
        return f"{name} likes {colour}"

    agent = create_agent(
        ScriptedModel([turn(call("survey")), {"content": "ok"}]), [survey], checkpointer=InMemorySaver()
    )
    first = agent.invoke({"messages": "go"}, config())
    assert first["__interrupt__"][0].value == "name?"
    second = agent.invoke(Command(resume="Ada"), config())
    assert second["__interrupt__"][0].value == "colour?"
    assert second["__interrupt__"][0].id != first["__interrupt__"][0].id
    done = agent.invoke(Command(resume="green"), config())
    assert done["messages"][2].content == "Ada likes green"
    assert seen == [("Ada", "green")]


def test_resume_never_calls_the_model_again_for_the_turn_under_review(
    make_agent: AgentFactory, ledger: Ledger
) -> None:
    """Rule 6: the model step that produced the calls under review already ended."""
    agent = make_agent(
        [turn(call("write_file", path="a", content="b"), call("read_data", table="t")), {"content": "ok"}]
    )
    agent.invoke({"messages": "go"}, config())
    model = agent.model
    assert len(model.calls) == 1  # type: ignore[attr-defined]
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    assert len(model.calls) == 2  # type: ignore[attr-defined]
    assert ledger.names() == ["write_file", "read_data"]


def test_finished_tool_calls_never_run_again_on_a_later_resume(
    make_agent: AgentFactory, ledger: Ledger
) -> None:
    """Rule 6 in per-call mode: a call that finished is skipped when the step re-runs."""
    agent = make_agent(
        [
            turn(
                call("read_data", "r", table="t"),
                call("write_file", "w1", path="a", content="x"),
                call("write_file", "w2", path="b", content="y"),
            ),
            {"content": "ok"},
        ],
        mode="per_call",
    )
    interrupts = agent.invoke({"messages": "go"}, config())["__interrupt__"]
    agent.invoke(Command(resume={interrupts[0].id: {"type": "approve"}}), config())
    agent.invoke(Command(resume={interrupts[1].id: {"type": "approve"}}), config())
    assert ledger.names() == ["read_data", "write_file", "write_file"]


def test_invoke_none_on_a_paused_thread_returns_the_same_interrupts(make_agent: AgentFactory) -> None:
    agent = make_agent([turn(call("write_file", path="a", content="b"))])
    first = agent.invoke({"messages": "go"}, config())
    before = events_of(agent)
    again = agent.invoke(None, config())
    assert again["__interrupt__"] == first["__interrupt__"]
    assert events_of(agent) == before


def test_custom_middleware_can_validate_answers_before_they_are_saved(spec_tools: list) -> None:
    class Confirm(AgentMiddleware):
        def after_model(self, state: dict[str, Any], runtime: Any) -> None:
            interrupt({"confirm": "type yes or no"})

        def validate_resume(self, value: Any, resume: Any, context: Any) -> Any:
            if resume not in ("yes", "no"):
                raise ValueError(f"answer 'yes' or 'no', not {resume!r}")
            return resume

    agent = create_agent(
        ScriptedModel([{"content": "hi"}]), spec_tools, middleware=[Confirm()], checkpointer=InMemorySaver()
    )
    agent.invoke({"messages": "go"}, config())
    before = events_of(agent)
    with pytest.raises(InvalidDecisionError, match="answer 'yes' or 'no', not 'maybe'"):
        agent.invoke(Command(resume="maybe"), config())
    assert events_of(agent) == before
    assert agent.invoke(Command(resume="yes"), config())["messages"][-1].content == "hi"
