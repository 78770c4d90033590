"""Rule 5: a resume is validated completely before anything is saved or run."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handrail import Command, ToolMessage
from handrail.errors import ConflictError, HandrailError, InvalidDecisionError

from _support import AgentFactory, Ledger, call, config, events_of, turn

THREE = [
    turn(
        call("write_file", "c1", path="a", content="x"),
        call("write_file", "c2", path="b", content="y"),
        call("execute_sql", "c3", query="DELETE FROM t"),
    ),
    {"content": "done"},
]


def _paused(make_agent: AgentFactory, **kwargs: Any) -> Any:
    agent = make_agent(THREE, **kwargs)
    agent.invoke({"messages": "go"}, config())
    return agent


APPROVE = {"type": "approve"}


@pytest.mark.parametrize(
    ("resume", "message"),
    [
        (["approve"], r"must be \{'decisions': \[\.\.\.\]\}"),
        ({"decision": []}, r"must be \{'decisions': \[\.\.\.\]\}"),
        ({"decisions": "approve"}, "'decisions' must be a list"),
        ({"decisions": [APPROVE] * 3, "extra": 1}, "unexpected key"),
        (
            {"decisions": [APPROVE, APPROVE]},
            r"expected 3 decisions \(one per action request, in order\), got 2",
        ),
        ({"decisions": [APPROVE] * 4}, "expected 3 decisions"),
        ({"decisions": [APPROVE, APPROVE, "approve"]}, "decision 3 of 3 must be a dict"),
        ({"decisions": [APPROVE, {"type": "aprove"}, APPROVE]}, "decision 2 of 3 has unknown type 'aprove'"),
        ({"decisions": [APPROVE, {}, APPROVE]}, "decision 2 of 3 has unknown type None"),
        (
            {
                "decisions": [
                    APPROVE,
                    APPROVE,
                    {"type": "edit", "edited_action": {"name": "execute_sql", "args": {}}},
                ]
            },
            r"decision 3 of 3 is 'edit', but tool 'execute_sql' allows only \['approve', 'reject'\]",
        ),
        (
            {"decisions": [APPROVE, APPROVE, {"type": "respond", "message": "x"}]},
            "decision 3 of 3 is 'respond', but tool 'execute_sql' allows only",
        ),
        (
            {
                "decisions": [
                    {"type": "edit", "edited_action": {"name": "nope", "args": {}}},
                    APPROVE,
                    APPROVE,
                ]
            },
            "decision 1 of 3 edits the call into 'nope', which is not one of the agent's tools",
        ),
        (
            {
                "decisions": [
                    {"type": "edit", "edited_action": {"name": "write_file", "args": {"path": 1}}},
                    APPROVE,
                    APPROVE,
                ]
            },
            r"decision 1 of 3 \(edit\): arguments for 'write_file' do not match its schema: "
            r"path: .*content: Field required",
        ),
        (
            {
                "decisions": [
                    {
                        "type": "edit",
                        "edited_action": {
                            "name": "write_file",
                            "args": {"path": "a", "content": "b", "mode": "w"},
                        },
                    },
                    APPROVE,
                    APPROVE,
                ]
            },
            "mode: Extra inputs are not permitted",
        ),
        (
            {"decisions": [{"type": "edit"}, APPROVE, APPROVE]},
            r"decision 1 of 3 \(edit\) needs 'edited_action'",
        ),
        (
            {"decisions": [{"type": "edit", "edited_action": {"name": "write_file"}}, APPROVE, APPROVE]},
            "needs a string 'name' and a dict 'args'",
        ),
        (
            {"decisions": [{"type": "respond"}, APPROVE, APPROVE]},
            r"decision 1 of 3 \(respond\) needs a 'message'",
        ),
        ({"decisions": [{"type": "respond", "message": 3}, APPROVE, APPROVE]}, "'message' must be a string"),
        (
            {"decisions": [{"type": "approve", "message": "hi"}, APPROVE, APPROVE]},
            r"\(approve\) has unexpected key",
        ),
        (
            {"decisions": [APPROVE, APPROVE, {"type": "reject", "message": ["no"]}]},
            "'message' must be a string",
        ),
    ],
)
def test_bad_decisions_are_refused_and_the_thread_is_unchanged(
    make_agent: AgentFactory, ledger: Ledger, resume: Any, message: str
) -> None:
    """Rule 5: each bad payload names what was wrong; nothing is saved; the interrupt stays answerable."""
    agent = _paused(make_agent)
    before = events_of(agent)
    pending = agent.get_state(config()).interrupts
    with pytest.raises(InvalidDecisionError, match=message) as caught:
        agent.invoke(Command(resume=resume), config())
    assert isinstance(caught.value, ValueError)
    assert events_of(agent) == before
    assert agent.get_state(config()).interrupts == pending
    assert ledger.calls == []
    done = agent.invoke(Command(resume={"decisions": [APPROVE, APPROVE, {"type": "reject"}]}), config())
    assert done["messages"][-1].content == "done"
    assert ledger.names() == ["write_file", "write_file"]


def test_edit_into_a_tool_whose_policy_forbids_approve_is_refused(make_agent: AgentFactory) -> None:
    """Rule 5: an edit may not smuggle a call past another tool's stricter policy."""
    policy = {"write_file": True, "execute_sql": {"allowed_decisions": ["reject"]}}
    agent = make_agent([turn(call("write_file", path="a", content="b"))], policy=policy)
    agent.invoke({"messages": "go"}, config())
    before = events_of(agent)
    edit = {"type": "edit", "edited_action": {"name": "execute_sql", "args": {"query": "DROP TABLE x"}}}
    with pytest.raises(
        InvalidDecisionError,
        match=r"decision 1 of 1 turns 'write_file' into 'execute_sql', whose policy does not allow 'approve' "
        r"\(allowed: \['reject'\]\)",
    ):
        agent.invoke(Command(resume={"decisions": [edit]}), config())
    assert events_of(agent) == before


def test_the_issue_example_error_text(make_agent: AgentFactory) -> None:
    agent = _paused(make_agent)
    edit = {"type": "edit", "edited_action": {"name": "execute_sql", "args": {"query": "SELECT 1"}}}
    with pytest.raises(InvalidDecisionError) as caught:
        agent.invoke(Command(resume={"decisions": [APPROVE, APPROVE, edit]}), config())
    assert str(caught.value) == (
        "Decision type 'edit' is not allowed for tool 'execute_sql': "  # LangChain's words first
        "decision 3 of 3 is 'edit', but tool 'execute_sql' allows only ['approve', 'reject']"
    )
    assert (
        type(caught.value).__module__ + "." + type(caught.value).__name__
        == "handrail.errors.InvalidDecisionError"
    )
    assert caught.value.decision_index == 2  # so a reviewing tool can point at the faulty one
    assert caught.value.interrupt_id == agent.get_state(config()).interrupts[0].id


def test_unknown_interrupt_id_is_refused(make_agent: AgentFactory) -> None:
    agent = _paused(make_agent)
    before = events_of(agent)
    with pytest.raises(InvalidDecisionError, match=r"has no pending interrupt 0{32}; pending: "):
        agent.invoke(Command(resume={"0" * 32: {"decisions": [APPROVE] * 3}}), config())
    assert events_of(agent) == before


def test_resume_when_nothing_is_pending_is_refused(make_agent: AgentFactory) -> None:
    agent = make_agent([{"content": "hello"}])
    agent.invoke({"messages": "hi"}, config())
    before = events_of(agent)
    with pytest.raises(InvalidDecisionError, match="has no pending interrupt, so there is nothing to resume"):
        agent.invoke(Command(resume={"decisions": [APPROVE]}), config())
    assert events_of(agent) == before


def test_resume_of_a_thread_that_does_not_exist_is_refused(make_agent: AgentFactory) -> None:
    agent = make_agent([])
    with pytest.raises(InvalidDecisionError, match="nothing to resume"):
        agent.invoke(Command(resume="x"), config("never-ran"))
    assert agent.checkpointer.get_thread("never-ran") is None  # type: ignore[union-attr]


def test_answering_an_already_answered_interrupt_is_a_conflict(make_agent: AgentFactory) -> None:
    agent = _paused(make_agent)
    (pending,) = agent.get_state(config()).interrupts
    decisions = {"decisions": [APPROVE, APPROVE, APPROVE]}
    agent.invoke(Command(resume={pending.id: decisions}), config())
    before = events_of(agent)
    with pytest.raises(ConflictError, match=f"interrupt {pending.id} was already answered"):
        agent.invoke(Command(resume={pending.id: decisions}), config())
    assert events_of(agent) == before


def test_map_form_answers_exactly_the_named_interrupt(make_agent: AgentFactory, ledger: Ledger) -> None:
    agent = _paused(make_agent)
    (pending,) = agent.get_state(config()).interrupts
    agent.invoke(
        Command(resume={pending.id: {"decisions": [APPROVE, {"type": "reject"}, APPROVE]}}), config()
    )
    assert ledger.calls == [
        ("write_file", {"path": "a", "content": "x"}),
        ("execute_sql", {"query": "DELETE FROM t"}),
    ]


def test_new_input_while_a_review_is_pending_is_refused(make_agent: AgentFactory) -> None:
    from handrail.errors import PendingInterruptError

    agent = _paused(make_agent)
    before = events_of(agent)
    with pytest.raises(PendingInterruptError, match="is waiting for review"):
        agent.invoke({"messages": "something else"}, config())
    assert events_of(agent) == before


# Hypothesis: random decisions never corrupt a thread --------------------------------------------

names = st.sampled_from(["write_file", "execute_sql", "read_data", "nope", ""])
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5))
args = st.dictionaries(
    st.sampled_from(["path", "content", "query", "table", "limit", "x"]), scalars, max_size=4
)
edited = st.fixed_dictionaries({"name": names, "args": args}) | scalars
decision = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["approve", "reject", "respond", "edit", "bogus", None])}),
    st.fixed_dictionaries({"type": st.just("edit"), "edited_action": edited}),
    st.fixed_dictionaries({"type": st.just("edit"), "editedAction": edited}),
    st.fixed_dictionaries({"type": st.sampled_from(["reject", "respond"]), "message": scalars}),
    scalars,
)
payload = st.one_of(
    st.fixed_dictionaries({"decisions": st.lists(decision, min_size=0, max_size=4)}),
    st.dictionaries(st.text(max_size=4), scalars, max_size=2),
    scalars,
    st.lists(decision, max_size=3),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(resume=payload)
def test_random_decisions_are_applied_or_refused_with_the_thread_unchanged(
    make_agent: AgentFactory, ledger: Ledger, resume: Any
) -> None:
    ledger.calls.clear()
    agent = _paused(make_agent)
    before = events_of(agent)
    try:
        result = agent.invoke(Command(resume=resume), config())
    except HandrailError as exc:
        assert isinstance(exc, ValueError), exc
        assert events_of(agent) == before
        assert ledger.calls == []
        return
    # Applied: every call has exactly one result, in call order, and only approved or edited calls ran.
    tools = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert [t.tool_call_id for t in tools] == ["c1", "c2", "c3"]
    decisions = resume["decisions"]
    ran = [d for d in decisions if d["type"] in ("approve", "edit")]
    assert len(ledger.calls) == len(ran)
    for d, message in zip(decisions, tools, strict=True):
        if d["type"] == "reject":
            assert message.status == "error" and message.content.startswith("User rejected the tool call")
        if d["type"] == "respond":
            assert message.content == d["message"]
