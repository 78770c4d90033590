"""Where handrail deliberately differs from LangChain, shown (docs/langchain-differences.md).

Each test runs what a LangChain user would write and shows handrail's answer: a resume
is checked before it is saved (SPEC rule 5), a second answer to the same review is a
ConflictError (rule 8), a tool call without an id gets one.
"""

from __future__ import annotations

from typing import Any

import pytest

from handrail import Command, HumanInTheLoopMiddleware, InMemorySaver, ScriptedModel, create_agent, tool
from handrail.errors import ConfigurationError, ConflictError, InvalidDecisionError


@tool
def send_email(to: str) -> str:
    """Send an email."""
    return f"sent to {to}"


def _agent() -> Any:
    return create_agent(
        ScriptedModel(
            [
                {"content": "", "tool_calls": [{"name": "send_email", "args": {"to": "a@x.org"}}]},
                {"content": "ok"},
            ]
        ),
        tools=[send_email],
        middleware=[
            HumanInTheLoopMiddleware(
                interrupt_on={"send_email": {"allowed_decisions": ["approve", "reject"]}}
            )
        ],
        checkpointer=InMemorySaver(),
    )


def test_rule_5_a_bad_resume_is_refused_before_anything_is_saved() -> None:
    agent = _agent()
    config: Any = {"configurable": {"thread_id": "r5"}}
    agent.invoke({"messages": ["mail"]}, config)
    before = agent.get_state(config)
    with pytest.raises(InvalidDecisionError, match="edit"):  # LangChain: ValueError inside the run
        agent.invoke(
            Command(
                resume={"decisions": [{"type": "edit", "edited_action": {"name": "send_email", "args": {}}}]}
            ),
            config,
        )
    after = agent.get_state(config)
    assert after.config == before.config and after.interrupts == before.interrupts
    assert (
        agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)["messages"][-1].content
        == "ok"
    )


def test_rule_8_a_second_answer_to_the_same_review_is_a_conflict() -> None:
    agent = _agent()
    config: Any = {"configurable": {"thread_id": "r8"}}
    (pending,) = agent.invoke({"messages": ["mail"]}, config)["__interrupt__"]
    answer = Command(resume={pending.id: {"decisions": [{"type": "approve"}]}})
    agent.invoke(answer, config)
    with pytest.raises(ConflictError, match="already answered") as caught:
        agent.invoke(answer, config)
    assert caught.value.thread_id == "r8"


def test_a_tool_call_without_an_id_gets_one() -> None:
    agent = _agent()
    config: Any = {"configurable": {"thread_id": "ids"}}
    paused = agent.invoke({"messages": ["mail"]}, config)
    call_id = paused["messages"][1].tool_calls[0]["id"]
    assert call_id.startswith("call_")
    assert paused["__interrupt__"][0].value["action_requests"][0]["tool_call_id"] == call_id


def test_interrupt_on_naming_a_missing_tool_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="sned_email"):
        create_agent(
            ScriptedModel([]), tools=[send_email], middleware=[HumanInTheLoopMiddleware({"sned_email": True})]
        )
