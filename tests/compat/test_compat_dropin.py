"""The rest of drop-in (issue 25 item 12), as LangChain's own tests would run it.

Each test states what LangChain 1.5 / LangGraph 1.2 do (read from their behaviour) and
checks that handrail does the same.
"""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from handrail import (
    HumanInTheLoopMiddleware,
    InMemorySaver,
    ScriptedModel,
    ToolMessage,
    ToolRuntime,
    create_agent,
    tool,
)
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


# (a) a per-call interrupt's response_schema ----------------------------------------------
def _per_call(tools: list[Any], calls: list[dict[str, Any]], policy: Any) -> tuple[Any, dict[str, Any]]:
    agent = create_agent(
        ScriptedModel([{"content": "", "tool_calls": calls}, {"content": "done"}]),
        tools=tools,
        middleware=[HumanInTheLoopMiddleware(policy, interrupt_mode="per_call")],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "t"}}
    return agent, agent.invoke({"messages": ["go"]}, config)


def test_a_per_call_interrupt_carries_the_schema_of_its_answers_as_langchain_fills_it() -> None:
    """LangChain 1.5's per-call mode: a ``oneOf`` of the allowed decisions told apart by
    ``type``, the edit's name pinned to the tool and its args the tool's schema."""
    policy = {"add": {"allowed_decisions": ["approve", "edit", "reject"]}}
    agent, paused = _per_call([add], [{"name": "add", "args": {"a": 1, "b": 2}, "id": "c1"}], policy)
    (interrupt,) = paused["__interrupt__"]
    schema = interrupt.response_schema
    assert schema["discriminator"] == {
        "mapping": {
            "approve": "#/$defs/ApproveDecision",
            "edit": "#/$defs/EditDecision",
            "reject": "#/$defs/RejectDecision",
        },
        "propertyName": "type",
    }
    assert schema["oneOf"] == [{"$ref": ref} for ref in schema["discriminator"]["mapping"].values()]
    defs = schema["$defs"]
    assert defs["EditedAction"]["properties"]["name"]["const"] == "add"
    assert defs["EditedAction"]["properties"]["args"] == {"$ref": "#/$defs/add"}
    assert defs["add"]["properties"]["b"]["type"] == "number" and defs["add"]["required"] == ["a", "b"]
    assert defs["RejectDecision"]["required"] == ["type"] and "RespondDecision" not in defs
    # the same on every read
    (again,) = agent.get_state({"configurable": {"thread_id": "t"}}).interrupts
    assert again.response_schema == schema


def test_a_one_decision_review_gets_that_decisions_plain_schema_and_batched_gets_none() -> None:
    _, paused = _per_call(
        [add],
        [{"name": "add", "args": {"a": 1, "b": 2}, "id": "c1"}],
        {"add": {"allowed_decisions": ["approve"]}},
    )
    schema = paused["__interrupt__"][0].response_schema
    assert schema["properties"]["type"]["const"] == "approve" and "oneOf" not in schema
    batched = create_agent(
        ScriptedModel(
            [{"content": "", "tool_calls": [{"name": "add", "args": {"a": 1, "b": 2}, "id": "c1"}]}]
        ),
        tools=[add],
        middleware=[HumanInTheLoopMiddleware({"add": True})],
        checkpointer=InMemorySaver(),
    ).invoke({"messages": ["go"]}, {"configurable": {"thread_id": "t"}})
    assert batched["__interrupt__"][0].response_schema is None  # as LangChain's batched mode


# (b) decision errors begin with LangChain's words -----------------------------------------
@pytest.mark.parametrize(
    ("answer", "langchain_words"),
    [
        (
            {"decisions": [{"type": "respond", "message": "x"}]},
            "Decision type 'respond' is not allowed for tool 'add'",
        ),
        (
            {"decisions": [{"type": "approve"}, {"type": "approve"}]},
            "Number of human decisions (2) does not match number of hanging tool calls (1)",
        ),
        (
            {"decisions": [{"type": "edit", "edited_action": {"name": "nope", "args": {}}}]},
            "Reviewer edited tool call to 'nope', which is not an available tool",
        ),
    ],
)
def test_decision_errors_begin_with_langchains_words(answer: Any, langchain_words: str) -> None:
    from handrail import Command
    from handrail.errors import InvalidDecisionError

    agent = create_agent(
        ScriptedModel(
            [{"content": "", "tool_calls": [{"name": "add", "args": {"a": 1, "b": 2}, "id": "c1"}]}]
        ),
        tools=[add],
        middleware=[HumanInTheLoopMiddleware({"add": {"allowed_decisions": ["approve", "edit", "reject"]}})],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "t"}}
    (paused,) = agent.invoke({"messages": ["go"]}, config)["__interrupt__"]
    with pytest.raises(InvalidDecisionError) as caught:
        agent.invoke(Command(resume={paused.id: answer}), config)
    assert str(caught.value).startswith(langchain_words), str(caught.value)


# (e) ToolRuntime.tools, and (f) finished siblings at a pause inside the tools step ----------
@tool
def look(q: str, runtime: ToolRuntime) -> str:
    """Look something up."""
    return "looked " + ",".join(t.name for t in runtime.tools)


def test_tool_runtime_has_the_agents_tools_and_a_pause_keeps_the_finished_siblings_results() -> None:
    """LangGraph 1.2 with LangChain 1.5 per-call mode: ``look`` (not gated) runs while
    ``pay`` waits; the returned state and ``get_state().values`` hold look's ToolMessage,
    which names ``runtime.tools``."""
    calls = [
        {"name": "look", "args": {"q": "x"}, "id": "c0"},
        {"name": "add", "args": {"a": 1, "b": 2}, "id": "c1"},
    ]
    agent, paused = _per_call([look, add], calls, {"add": True})
    kinds = [(type(m).__name__, m.content) for m in paused["messages"]]
    assert kinds[2:] == [("ToolMessage", "looked look,add")] and len(kinds) == 3
    values = agent.get_state({"configurable": {"thread_id": "t"}}).values
    assert [type(m).__name__ for m in values["messages"]] == ["HumanMessage", "AIMessage", "ToolMessage"]
    # and after the answer each call has exactly one result, in call order
    from handrail import Command

    done = agent.invoke(
        Command(resume={paused["__interrupt__"][0].id: {"type": "approve"}}),
        {"configurable": {"thread_id": "t"}},
    )
    results = [m.tool_call_id for m in done["messages"] if isinstance(m, ToolMessage)]
    assert results == ["c0", "c1"]
