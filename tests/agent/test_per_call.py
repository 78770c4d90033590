"""Rule 3: per-call mode - one interrupt per gated call, answered one by one."""

from __future__ import annotations

import pytest

from handrail import Command, ToolMessage
from handrail.errors import InvalidDecisionError

from _support import AgentFactory, Ledger, call, config, turn


def _three_calls() -> list:
    return [
        turn(
            call("write_file", "w", path="a", content="x"),
            call("read_data", "r", table="t"),
            call("execute_sql", "s", query="DELETE"),
        ),
        {"content": "done"},
    ]


def test_each_gated_call_gets_its_own_interrupt_and_ungated_calls_run_at_once(
    make_agent: AgentFactory, ledger: Ledger
) -> None:
    agent = make_agent(_three_calls(), mode="per_call")
    result = agent.invoke({"messages": "go"}, config())
    interrupts = result["__interrupt__"]
    assert len(interrupts) == 2
    assert len({i.id for i in interrupts}) == 2
    first, second = (i.value for i in interrupts)
    assert first == {
        "type": "tool_approval",
        "tool_call_id": "w",
        "name": "write_file",
        "args": {"path": "a", "content": "x"},
        "description": first["description"],
        "allowed_decisions": ["approve", "edit", "reject", "respond"],
    }
    assert second["tool_call_id"] == "s"
    assert second["allowed_decisions"] == ["approve", "reject"]
    assert second["description"] == "SQL execution needs DBA approval"
    assert ledger.names() == ["read_data"]  # the ungated call ran at once


def test_answering_some_runs_them_and_leaves_the_rest_pending(
    make_agent: AgentFactory, ledger: Ledger
) -> None:
    agent = make_agent(_three_calls(), mode="per_call")
    interrupts = agent.invoke({"messages": "go"}, config())["__interrupt__"]
    by_call = {i.value["tool_call_id"]: i for i in interrupts}

    partial = agent.invoke(Command(resume={by_call["w"].id: {"type": "approve"}}), config())
    assert [i.id for i in partial["__interrupt__"]] == [by_call["s"].id]  # same id, still pending
    assert ledger.names() == ["read_data", "write_file"]
    assert agent.get_state(config()).next == ("tools",)

    done = agent.invoke(Command(resume={by_call["s"].id: {"type": "reject", "message": "no"}}), config())
    assert "__interrupt__" not in done
    assert ledger.names() == ["read_data", "write_file"]
    tools = [m for m in done["messages"] if isinstance(m, ToolMessage)]
    assert [t.tool_call_id for t in tools] == ["w", "r", "s"]  # call order, not completion order
    assert tools[2].status == "error"


def test_all_answers_at_once_in_one_map(make_agent: AgentFactory, ledger: Ledger) -> None:
    agent = make_agent(_three_calls(), mode="per_call")
    interrupts = agent.invoke({"messages": "go"}, config())["__interrupt__"]
    answers = {
        interrupts[0].id: {
            "type": "edit",
            "edited_action": {"name": "write_file", "args": {"path": "b", "content": "y"}},
        },
        interrupts[1].id: {"type": "approve"},
    }
    done = agent.invoke(Command(resume=answers), config())
    assert ledger.calls == [
        ("read_data", {"table": "t", "limit": 10}),
        ("write_file", {"path": "b", "content": "y"}),
        ("execute_sql", {"query": "DELETE"}),
    ]
    assert done["messages"][-1].content == "done"


def test_a_per_call_decision_must_be_allowed_for_its_tool(make_agent: AgentFactory, ledger: Ledger) -> None:
    agent = make_agent(_three_calls(), mode="per_call")
    interrupts = agent.invoke({"messages": "go"}, config())["__interrupt__"]
    sql = next(i for i in interrupts if i.value["name"] == "execute_sql")
    with pytest.raises(InvalidDecisionError, match=r"is 'respond', but tool 'execute_sql' allows only"):
        agent.invoke(Command(resume={sql.id: {"type": "respond", "message": "x"}}), config())
    assert len(agent.get_state(config()).interrupts) == 2


def test_a_bare_resume_is_ambiguous_with_several_pending(make_agent: AgentFactory) -> None:
    agent = make_agent(_three_calls(), mode="per_call")
    agent.invoke({"messages": "go"}, config())
    with pytest.raises(InvalidDecisionError, match="2 pending interrupts"):
        agent.invoke(Command(resume={"type": "approve"}), config())


def test_per_call_decision_also_accepts_a_one_item_decisions_list(
    make_agent: AgentFactory, ledger: Ledger
) -> None:
    agent = make_agent(
        [turn(call("write_file", "w", path="a", content="x")), {"content": "ok"}], mode="per_call"
    )
    agent.invoke({"messages": "go"}, config())
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    assert ledger.names() == ["write_file"]


async def test_per_call_mode_async(make_agent: AgentFactory, ledger: Ledger) -> None:
    agent = make_agent(_three_calls(), mode="per_call")
    interrupts = (await agent.ainvoke({"messages": "go"}, config()))["__interrupt__"]
    answers = {i.id: {"type": "approve"} for i in interrupts}
    done = await agent.ainvoke(Command(resume=answers), config())
    assert sorted(ledger.names()) == ["execute_sql", "read_data", "write_file"]
    assert done["messages"][-1].content == "done"


def test_when_predicate_gates_only_matching_calls(make_agent: AgentFactory, ledger: Ledger) -> None:
    """SPEC §3 `when`: the call is reviewed only when the predicate is true."""
    seen = []

    def risky(request):  # type: ignore[no-untyped-def]
        seen.append((request.tool_call["name"], len(request.state["messages"])))
        return "DELETE" in request.tool_call["args"]["query"].upper()

    policy = {"execute_sql": {"allowed_decisions": ["approve", "reject"], "when": risky}}
    for mode in ("batched", "per_call"):
        ledger.calls.clear()
        agent = make_agent(
            [
                turn(
                    call("execute_sql", "q1", query="select 1"),
                    call("execute_sql", "q2", query="delete from t"),
                ),
                {"content": "ok"},
            ],
            policy=policy,
            mode=mode,
        )
        result = agent.invoke({"messages": "go"}, config(mode))
        (pending,) = result["__interrupt__"]
        if mode == "batched":
            assert [a["tool_call_id"] for a in pending.value["action_requests"]] == ["q2"]
            assert ledger.names() == []
        else:
            assert pending.value["tool_call_id"] == "q2"
            assert ledger.calls == [("execute_sql", {"query": "select 1"})]
    assert ("execute_sql", 2) in seen
