"""LangChain's human-in-the-loop docs, ported: configure, approve, edit, reject, several
decisions, and streaming with a pause (SPEC rules 1, 2 and 4).

The interrupt value and the messages are the ones the docs show; where handrail's
differ (the description's ``Args:`` line is JSON, each action request names its
``tool_call_id``), the test shows it and docs/langchain-differences.md lists it.
"""

from __future__ import annotations

from typing import Any

from handrail import Command, HumanInTheLoopMiddleware, InMemorySaver, ScriptedModel, create_agent, tool


@tool
def write_file(path: str, content: str) -> str:
    """Write a file."""
    return f"wrote {path}"


@tool
def execute_sql(query: str) -> str:
    """Run SQL."""
    return "3 rows"


@tool
def read_data(table: str) -> str:
    """Read data."""
    return "rows"


def _agent(*turns: dict[str, Any]) -> Any:
    return create_agent(
        ScriptedModel([*turns, {"content": "All done."}]),
        tools=[write_file, execute_sql, read_data],
        middleware=[
            HumanInTheLoopMiddleware(
                interrupt_on={
                    "write_file": True,
                    "execute_sql": {"allowed_decisions": ["approve", "reject"]},
                    "read_data": False,
                },
                description_prefix="Tool execution pending approval",
            )
        ],
        checkpointer=InMemorySaver(),
    )


def _turn(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "content": "",
        "tool_calls": [{"name": n, "args": a, "id": f"call_{i}"} for i, (n, a) in enumerate(calls)],
    }


CONFIG: Any = {"configurable": {"thread_id": "some_id"}}


def test_pause_shows_the_action_requests_and_review_configs_then_approve_runs() -> None:
    agent = _agent(
        _turn(
            ("execute_sql", {"query": "DELETE FROM records WHERE created_at < NOW() - INTERVAL '30 days';"})
        )
    )
    result = agent.invoke(
        {"messages": [{"role": "user", "content": "Delete old records from the database"}]}, CONFIG
    )
    (pause,) = result["__interrupt__"]
    (request,) = pause.value["action_requests"]
    assert (request["name"], request["args"]) == (
        "execute_sql",
        {"query": "DELETE FROM records WHERE created_at < NOW() - INTERVAL '30 days';"},
    )
    assert request["description"].startswith("Tool execution pending approval\n\nTool: execute_sql\nArgs: ")
    assert request["tool_call_id"] == "call_0"  # handrail's addition
    assert pause.value["review_configs"] == [
        {
            "action_name": "execute_sql",
            "allowed_decisions": ["approve", "reject"],
            "args_schema": execute_sql.json_schema,
        }
    ]
    done = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config=CONFIG)
    assert [m.content for m in done["messages"][2:]] == ["3 rows", "All done."]


def test_edit_runs_the_edited_action() -> None:
    agent = _agent(_turn(("write_file", {"path": "a.txt", "content": "x"})))
    agent.invoke({"messages": ["write it"]}, CONFIG)
    edit = {
        "type": "edit",
        "edited_action": {"name": "write_file", "args": {"path": "b.txt", "content": "x"}},
    }
    done = agent.invoke(Command(resume={"decisions": [edit]}), config=CONFIG)
    assert done["messages"][1].tool_calls[0]["args"]["path"] == "a.txt"  # the model's call is kept
    assert done["messages"][2].content.endswith("Tool response:\nwrote b.txt")


def test_reject_with_a_message_and_several_decisions_in_order() -> None:
    agent = _agent(
        _turn(
            ("write_file", {"path": "a.txt", "content": "x"}),
            ("execute_sql", {"query": "DROP TABLE t"}),
            ("read_data", {"table": "t"}),
        )
    )
    result = agent.invoke({"messages": ["do it all"]}, CONFIG)
    assert [r["name"] for r in result["__interrupt__"][0].value["action_requests"]] == [
        "write_file",
        "execute_sql",
    ]
    decisions = [
        {"type": "approve"},
        {"type": "reject", "message": "No, this is wrong because it drops data."},
    ]
    done = agent.invoke(Command(resume={"decisions": decisions}), config=CONFIG)
    results = done["messages"][2:5]
    assert [m.tool_call_id for m in results] == ["call_0", "call_1", "call_2"]  # call order (rule 4)
    assert results[1].status == "error"
    assert results[1].content == (
        "User rejected the tool call for `execute_sql` with reason: No, this is wrong because it drops data."
    )


def test_streaming_with_a_pause_then_resuming_by_stream() -> None:
    agent = _agent(_turn(("write_file", {"path": "a.txt", "content": "x"})))
    seen: list[str] = []
    for mode, chunk in agent.stream(
        {"messages": ["write it"]}, config=CONFIG, stream_mode=["updates", "messages"]
    ):
        if mode == "messages":
            _token, metadata = chunk
            seen.append(f"token@{metadata['langgraph_node']}")
        elif mode == "updates" and "__interrupt__" in chunk:
            seen.append("interrupt:" + chunk["__interrupt__"][0].value["action_requests"][0]["name"])
    assert seen[-1] == "interrupt:write_file"
    tokens = []
    for mode, chunk in agent.stream(
        Command(resume={"decisions": [{"type": "approve"}]}),
        config=CONFIG,
        stream_mode=["updates", "messages"],
    ):
        if mode == "messages":
            tokens.append(chunk[0].text)
    assert "".join(tokens) == "All done."
