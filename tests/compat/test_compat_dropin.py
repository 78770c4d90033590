"""The rest of drop-in (issue 25 item 12), as LangChain's own tests would run it.

Each test states what LangChain 1.5 / LangGraph 1.2 do (read from their behaviour) and
checks that handrail does the same.
"""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from handrail import HumanInTheLoopMiddleware, InMemorySaver, ScriptedModel, ToolMessage, create_agent, tool
from handrail.tools import Tool


@tool
def add(a: int, b: float) -> str:
    """Add two numbers."""
    return repr((a, b))


def _run(tools: list[Any], args: dict[str, Any]) -> ToolMessage:
    model = ScriptedModel(
        [
            {"content": "", "tool_calls": [{"name": tools[0].name, "args": args, "id": "c1"}]},
            {"content": "ok"},
        ]
    )
    result = create_agent(model, tools=tools, checkpointer=InMemorySaver()).invoke(
        {"messages": ["go"]}, {"configurable": {"thread_id": "t"}}
    )
    (message,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    return message


# (c) a model's argument the tool does not declare ------------------------------------------
def test_a_models_undeclared_argument_is_dropped_and_the_tool_runs_as_in_langchain() -> None:
    """LangChain's schema made from a signature ignores what it does not declare:
    ``add.invoke({"a": 1, "b": "12", "zzz": 3})`` is ``"(1, 12.0)"``."""
    message = _run([add], {"a": 1, "b": "12", "zzz": 3})
    assert (message.status, message.content) == ("success", "(1, 12.0)")
    assert add.invoke({"a": 1, "b": "12", "zzz": 3}) == "(1, 12.0)"


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    a: int
    b: float


def test_a_schema_that_forbids_extras_still_refuses_them() -> None:
    """The tool's own schema decides: ``extra="forbid"`` refuses, and the model is told."""
    strict = Tool(lambda a, b: repr((a, b)), name="add_strict", description="Add.", args_schema=_Strict)
    message = _run([strict], {"a": 1, "b": 2, "zzz": 3})
    assert message.status == "error" and "zzz" in str(message.content)


def test_the_audit_shows_the_call_as_it_ran_without_the_dropped_argument() -> None:
    model = ScriptedModel(
        [
            {"content": "", "tool_calls": [{"name": "add", "args": {"a": 1, "b": 2, "zzz": 3}, "id": "c1"}]},
            {"content": "ok"},
        ]
    )
    agent = create_agent(
        model,
        tools=[add],
        middleware=[HumanInTheLoopMiddleware({"add": False})],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": ["go"]}, config)
    (started,) = [e for e in agent.get_audit_trail(config) if e.event == "tool_started"]
    assert started.args == {"a": 1, "b": 2.0}
    assert started.proposed is not None and started.proposed["args"] == {"a": 1, "b": 2, "zzz": 3}


@pytest.mark.parametrize("mode", ["batched", "per_call"])
def test_a_reviewer_edit_with_an_undeclared_argument_stays_refused(mode: str) -> None:
    from handrail import Command
    from handrail.errors import InvalidDecisionError

    model = ScriptedModel(
        [{"content": "", "tool_calls": [{"name": "add", "args": {"a": 1, "b": 2}, "id": "c1"}]}]
    )
    agent = create_agent(
        model,
        tools=[add],
        middleware=[HumanInTheLoopMiddleware({"add": True}, interrupt_mode=mode)],  # type: ignore[arg-type]
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "t"}}
    (paused,) = agent.invoke({"messages": ["go"]}, config)["__interrupt__"]
    edit = {"type": "edit", "edited_action": {"name": "add", "args": {"a": 1, "b": 2, "zzz": 3}}}
    answer = {"decisions": [edit]} if mode == "batched" else edit
    with pytest.raises(InvalidDecisionError, match="zzz"):
        agent.invoke(Command(resume={paused.id: answer}), config)
