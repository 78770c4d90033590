"""SPEC §1 as written, and rules 1, 2 and 4: the review lifecycle and what each decision does."""

from __future__ import annotations

import json

import pytest

from handrail import (
    AIMessage,
    Command,
    GraphOutput,
    HumanInTheLoopMiddleware,
    InMemorySaver,
    Interrupt,
    ScriptedModel,
    ToolMessage,
    create_agent,
)

from _support import AgentFactory, Ledger, call, config, turn

DELETE = "DELETE FROM records WHERE created_at < NOW() - INTERVAL '30 days';"


def test_spec_section_1_runs_as_written(spec_tools: list, ledger: Ledger) -> None:
    """SPEC §1: the documented shape works with ScriptedModel in place of OpenAI."""
    model = ScriptedModel([turn(call("execute_sql", query=DELETE)), {"content": "Old records deleted."}])
    agent = create_agent(
        model=model,
        tools=spec_tools,
        middleware=[
            HumanInTheLoopMiddleware(
                interrupt_on={
                    "write_file": True,
                    "execute_sql": {
                        "allowed_decisions": ["approve", "reject"],
                        "description": "SQL execution needs DBA approval",
                    },
                    "read_data": False,
                },
                description_prefix="Tool execution pending approval",
            )
        ],
        checkpointer=InMemorySaver(),
    )
    cfg = {"configurable": {"thread_id": "some_id"}}
    result = agent.invoke({"messages": [{"role": "user", "content": "Delete old records"}]}, cfg)

    (pending,) = result["__interrupt__"]
    assert isinstance(pending, Interrupt)
    assert pending.value["action_requests"] == [
        {
            "name": "execute_sql",
            "args": {"query": DELETE},
            "description": "SQL execution needs DBA approval",
            "tool_call_id": result["messages"][-1].tool_calls[0]["id"],
        }
    ]
    (review,) = pending.value["review_configs"]
    assert review["action_name"] == "execute_sql"
    assert review["allowed_decisions"] == ["approve", "reject"]
    assert review["args_schema"]["required"] == ["query"]
    assert ledger.calls == []  # nothing ran while waiting

    final = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), cfg)
    assert ledger.calls == [("execute_sql", {"query": DELETE})]
    assert final["messages"][-1].content == "Old records deleted."
    assert "__interrupt__" not in final


def test_lifecycle_pauses_after_model_before_any_tool_and_calls_model_again(
    make_agent: AgentFactory, ledger: Ledger
) -> None:
    """Rule 1: model answers -> pause with a HITLRequest -> decisions -> tools -> model again."""
    agent = make_agent([turn(call("write_file", path="a.txt", content="hi")), {"content": "done"}])
    paused = agent.invoke({"messages": "write a file"}, config())
    assert [m.type for m in paused["messages"]] == ["human", "ai"]
    state = agent.get_state(config())
    assert state.next == ("HumanInTheLoopMiddleware.after_model",)
    assert len(state.interrupts) == 1
    assert set(state.interrupts[0].value) == {"action_requests", "review_configs"}

    done = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    assert [m.type for m in done["messages"]] == ["human", "ai", "tool", "ai"]
    assert ledger.names() == ["write_file"]
    assert agent.get_state(config()).next == ()


def test_default_description_names_tool_and_args_as_json(make_agent: AgentFactory) -> None:
    """SPEC §3: the default description is prefix, tool name and args as JSON."""
    agent = make_agent(
        [turn(call("write_file", path="a.txt", content="hi"))], description_prefix="Check this"
    )
    (pending,) = agent.invoke({"messages": "go"}, config())["__interrupt__"]
    description = pending.value["action_requests"][0]["description"]
    head, args = description.split("\nArgs: ")
    assert head == "Check this\n\nTool: write_file"
    assert json.loads(args) == {"path": "a.txt", "content": "hi"}


def test_callable_description_gets_call_state_and_runtime(make_agent: AgentFactory) -> None:
    seen = []

    def describe(tool_call, state, runtime):  # type: ignore[no-untyped-def]
        seen.append((tool_call["name"], len(state["messages"]), runtime.thread_id))
        return f"about to write {tool_call['args']['path']}"

    agent = make_agent(
        [turn(call("write_file", path="x", content="y"))],
        policy={"write_file": {"allowed_decisions": ["approve"], "description": describe}},
    )
    (pending,) = agent.invoke({"messages": "go"}, config())["__interrupt__"]
    assert pending.value["action_requests"][0]["description"] == "about to write x"
    assert seen == [("write_file", 2, "t1")]


def test_batched_mode_one_interrupt_covers_gated_calls_in_call_order(
    make_agent: AgentFactory, ledger: Ledger
) -> None:
    """Rule 2: one interrupt per turn, gated calls in AIMessage order; ungated calls wait."""
    agent = make_agent(
        [
            turn(
                call("read_data", table="t"),
                call("write_file", path="a", content="1"),
                call("execute_sql", query="SELECT 1"),
                call("write_file", path="b", content="2"),
            ),
            {"content": "ok"},
        ]
    )
    result = agent.invoke({"messages": "go"}, config())
    (pending,) = result["__interrupt__"]
    names = [a["name"] for a in pending.value["action_requests"]]
    assert names == ["write_file", "execute_sql", "write_file"]
    assert [a["args"].get("path") for a in pending.value["action_requests"]] == ["a", None, "b"]
    assert [r["action_name"] for r in pending.value["review_configs"]] == names
    assert ledger.calls == []  # read_data is not gated but waits for the review

    agent.invoke(Command(resume={"decisions": [{"type": "approve"}] * 3}), config())
    assert ledger.names() == ["read_data", "write_file", "execute_sql", "write_file"]


def test_ungated_calls_alone_run_without_pause(make_agent: AgentFactory, ledger: Ledger) -> None:
    agent = make_agent([turn(call("read_data", table="users")), {"content": "3 users"}])
    result = agent.invoke({"messages": "count users"}, config())
    assert "__interrupt__" not in result
    assert ledger.names() == ["read_data"]
    assert result["messages"][-1].content == "3 users"


def test_several_decisions_at_once_apply_in_order(make_agent: AgentFactory, ledger: Ledger) -> None:
    """The seed's 'multiple decisions' example: approve, edit, reject in one resume."""
    agent = make_agent(
        [
            turn(
                call("write_file", "c1", path="a.txt", content="one"),
                call("write_file", "c2", path="b.txt", content="two"),
                call("execute_sql", "c3", query="DROP TABLE users"),
            ),
            {"content": "finished"},
        ]
    )
    agent.invoke({"messages": "go"}, config())
    result = agent.invoke(
        Command(
            resume={
                "decisions": [
                    {"type": "approve"},
                    {
                        "type": "edit",
                        "edited_action": {"name": "write_file", "args": {"path": "c.txt", "content": "2"}},
                    },
                    {"type": "reject", "message": "This action is not allowed"},
                ]
            }
        ),
        config(),
    )
    assert ledger.calls == [
        ("write_file", {"path": "a.txt", "content": "one"}),
        ("write_file", {"path": "c.txt", "content": "2"}),
    ]
    tools = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert [t.tool_call_id for t in tools] == ["c1", "c2", "c3"]
    assert (
        tools[2].content
        == "User rejected the tool call for `execute_sql` with reason: This action is not allowed"
    )


def test_approve_runs_call_as_proposed(make_agent: AgentFactory, ledger: Ledger) -> None:
    """Rule 4, approve."""
    agent = make_agent([turn(call("write_file", "c1", path="a", content="x")), {"content": "ok"}])
    agent.invoke({"messages": "go"}, config())
    result = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    assert ledger.calls == [("write_file", {"path": "a", "content": "x"})]
    tool_message = result["messages"][2]
    assert tool_message.content == "wrote 1 bytes to a"
    assert tool_message.status == "success"
    assert tool_message.name == "write_file"


def test_edit_runs_edited_action_keeps_original_call_and_notes_the_edit(
    make_agent: AgentFactory, ledger: Ledger
) -> None:
    """Rule 4, edit: the edited action runs; the AIMessage keeps the model's call."""
    agent = make_agent([turn(call("write_file", "c1", path="draft.txt", content="x")), {"content": "ok"}])
    agent.invoke({"messages": "go"}, config())
    edited = {"name": "write_file", "args": {"path": "final.txt", "content": "better"}}
    result = agent.invoke(
        Command(resume={"decisions": [{"type": "edit", "edited_action": edited}]}), config()
    )

    assert ledger.calls == [("write_file", {"path": "final.txt", "content": "better"})]
    ai = result["messages"][1]
    assert isinstance(ai, AIMessage)
    assert ai.tool_calls[0]["args"] == {"path": "draft.txt", "content": "x"}
    tool_message = result["messages"][2]
    assert tool_message.tool_call_id == "c1"
    assert tool_message.content.startswith("Note: a human reviewer replaced this tool call before it ran.")
    assert (
        ' Executed instead: write_file with arguments {"path": "final.txt", "content": "better"}.'
        in tool_message.content
    )
    assert tool_message.content.endswith("\n\nTool response:\nwrote 6 bytes to final.txt")


def test_edit_notice_can_be_customised_or_disabled(make_agent: AgentFactory) -> None:
    edited = {"type": "edit", "edited_action": {"name": "write_file", "args": {"path": "p", "content": "c"}}}
    for notice, expected_start in (("[EDITED]", "[EDITED] Executed instead:"), (None, "wrote 1 bytes")):
        agent = make_agent(
            [turn(call("write_file", path="q", content="d")), {"content": "ok"}], edit_notice=notice
        )
        agent.invoke({"messages": "go"}, config())
        result = agent.invoke(Command(resume={"decisions": [edited]}), config())
        assert result["messages"][2].content.startswith(expected_start)


def test_edit_into_another_ungated_tool_runs_that_tool(make_agent: AgentFactory, ledger: Ledger) -> None:
    """An edit may change the tool when the target's policy allows approve (ungated does)."""
    agent = make_agent([turn(call("write_file", "c1", path="a", content="x")), {"content": "ok"}])
    agent.invoke({"messages": "go"}, config())
    edit = {"type": "edit", "editedAction": {"name": "read_data", "args": {"table": "logs"}}}
    result = agent.invoke(Command(resume={"decisions": [edit]}), config())
    assert ledger.calls == [("read_data", {"table": "logs", "limit": 10})]
    assert result["messages"][2].name == "read_data"
    assert result["messages"][2].tool_call_id == "c1"


def test_reject_with_message_does_not_run_and_explains(make_agent: AgentFactory, ledger: Ledger) -> None:
    """Rule 4, reject with a reason."""
    agent = make_agent([turn(call("execute_sql", "c1", query="DELETE")), {"content": "ok"}])
    agent.invoke({"messages": "go"}, config())
    result = agent.invoke(
        Command(resume={"decisions": [{"type": "reject", "message": "No, archive them instead"}]}), config()
    )
    assert ledger.calls == []
    tool_message = result["messages"][2]
    assert tool_message.status == "error"
    assert (
        tool_message.content
        == "User rejected the tool call for `execute_sql` with reason: No, archive them instead"
    )


def test_reject_without_message_uses_the_default_text(make_agent: AgentFactory, ledger: Ledger) -> None:
    """Rule 4, reject with no reason."""
    agent = make_agent([turn(call("execute_sql", "c9", query="DELETE")), {"content": "ok"}])
    agent.invoke({"messages": "go"}, config())
    result = agent.invoke(Command(resume={"decisions": [{"type": "reject"}]}), config())
    assert ledger.calls == []
    assert result["messages"][2].content == (
        "User rejected the tool call for `execute_sql` with id c9. The tool was not executed. "
        "Do not retry this tool call unless the user explicitly requests it."
    )
    assert result["messages"][2].status == "error"


def test_respond_makes_the_message_the_tool_result(make_agent: AgentFactory, ledger: Ledger) -> None:
    """Rule 4, respond: the tool does not run; the message is the result, status success."""
    agent = make_agent([turn(call("write_file", "c1", path="a", content="b")), {"content": "ok"}])
    agent.invoke({"messages": "go"}, config())
    result = agent.invoke(Command(resume={"decisions": [{"type": "respond", "message": "Blue."}]}), config())
    assert ledger.calls == []
    assert result["messages"][2].content == "Blue."
    assert result["messages"][2].status == "success"


def test_every_tool_call_gets_exactly_one_tool_message_in_call_order(
    make_agent: AgentFactory, ledger: Ledger
) -> None:
    """Rule 4: one ToolMessage per call, in call order, whatever was decided."""
    agent = make_agent(
        [
            turn(
                call("execute_sql", "a", query="1"),
                call("read_data", "b", table="t"),
                call("write_file", "c", path="p", content="q"),
                call("write_file", "d", path="p", content="q"),
            ),
            {"content": "ok"},
        ]
    )
    agent.invoke({"messages": "go"}, config())
    decisions = [
        {"type": "reject"},
        {"type": "respond", "message": "skip"},
        {"type": "approve"},
    ]
    result = agent.invoke(Command(resume={"decisions": decisions}), config())
    tools = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert [t.tool_call_id for t in tools] == ["a", "b", "c", "d"]
    assert [t.status for t in tools] == ["error", "success", "success", "success"]
    assert tools[2].content == "skip"


def test_model_sees_the_tool_results_on_the_next_call(make_agent: AgentFactory) -> None:
    model_inputs = []

    def final(messages):  # type: ignore[no-untyped-def]
        model_inputs.append([m.type for m in messages])
        return {"content": "seen"}

    agent = make_agent([turn(call("execute_sql", query="x")), final])
    agent.invoke({"messages": "go"}, config())
    agent.invoke(Command(resume={"decisions": [{"type": "reject"}]}), config())
    assert model_inputs == [["human", "ai", "tool"]]


def test_version_v2_returns_graph_output(make_agent: AgentFactory) -> None:
    agent = make_agent([turn(call("write_file", path="a", content="b")), {"content": "fin"}])
    out = agent.invoke({"messages": "go"}, config(), version="v2")
    assert isinstance(out, GraphOutput)
    assert len(out.interrupts) == 1 and isinstance(out.interrupts[0], Interrupt)
    assert "__interrupt__" not in out.value
    done = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config(), version="v2")
    assert done.interrupts == ()
    assert done.value["messages"][-1].content == "fin"


def test_bad_version_is_refused(make_agent: AgentFactory) -> None:
    agent = make_agent([{"content": "x"}])
    with pytest.raises(ValueError, match="version must be 'v1' or 'v2'"):
        agent.invoke({"messages": "go"}, config(), version="v3")  # type: ignore[arg-type]


async def test_ainvoke_runs_the_same_lifecycle(make_agent: AgentFactory, ledger: Ledger) -> None:
    agent = make_agent(
        [turn(call("write_file", path="a", content="b"), call("read_data", table="t")), {"content": "ok"}]
    )
    paused = await agent.ainvoke({"messages": "go"}, config())
    assert len(paused["__interrupt__"]) == 1
    done = await agent.ainvoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    assert sorted(ledger.names()) == ["read_data", "write_file"]
    assert [m.type for m in done["messages"]] == ["human", "ai", "tool", "tool", "ai"]


async def test_async_tools_run_in_sync_and_async_runs(make_agent: AgentFactory) -> None:
    from handrail import tool

    seen = []

    @tool
    async def fetch(url: str) -> str:
        """Fetch a page."""
        seen.append(url)
        return "<html>"

    for runner in ("sync", "async"):
        agent = make_agent(
            [turn(call("fetch", url=runner)), {"content": "ok"}],
            policy={"fetch": True},
            tools=[fetch],
        )
        cfg = config(runner)
        if runner == "sync":
            agent.invoke({"messages": "go"}, cfg)
            result = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), cfg)
        else:
            await agent.ainvoke({"messages": "go"}, cfg)
            result = await agent.ainvoke(Command(resume={"decisions": [{"type": "approve"}]}), cfg)
        assert result["messages"][2].content == "<html>"
    assert seen == ["sync", "async"]


def test_next_turn_reviews_again_even_when_tool_call_ids_repeat(
    make_agent: AgentFactory, ledger: Ledger
) -> None:
    """Decisions of one turn never apply to the next, even if the model reuses call ids."""
    agent = make_agent(
        [
            turn(call("write_file", "same", path="1", content="a")),
            turn(call("write_file", "same", path="2", content="b")),
            {"content": "ok"},
        ]
    )
    agent.invoke({"messages": "go"}, config())
    second = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    assert ledger.names() == ["write_file"]
    assert second["__interrupt__"][0].value["action_requests"][0]["args"]["path"] == "2"
    agent.invoke(Command(resume={"decisions": [{"type": "reject"}]}), config())
    assert ledger.names() == ["write_file"]


def test_tool_errors_and_unknown_tools_become_error_results(make_agent: AgentFactory) -> None:
    from handrail import tool

    @tool
    def explode(reason: str) -> str:
        """Always fails."""
        raise RuntimeError(reason)

    agent = make_agent(
        [
            turn(call("explode", reason="disk full"), call("no_such_tool", x=1), call("explode", wrong=1)),
            {"content": "ok"},
        ],
        policy=False,
        tools=[explode],
    )
    result = agent.invoke({"messages": "go"}, config("errors"))
    first, second, third = result["messages"][2:5]
    assert first.status == "error" and first.content == "Error: RuntimeError: disk full"
    assert second.status == "error" and "'no_such_tool' is not a valid tool" in second.content
    assert third.status == "error" and "reason: Field required" in third.content
    assert result["messages"][-1].content == "ok"


def test_malformed_tool_call_from_model_becomes_correctable_error(make_agent: AgentFactory) -> None:
    bad = AIMessage(
        "",
        invalid_tool_calls=[{"name": "write_file", "args": "{not json", "id": "bad1", "error": "not JSON"}],
    )
    agent = make_agent([bad, {"content": "retrying"}], policy=False)
    result = agent.invoke({"messages": "go"}, config())
    tool_message = result["messages"][2]
    assert tool_message.tool_call_id == "bad1"
    assert tool_message.status == "error"
    assert "could not be read" in tool_message.content
