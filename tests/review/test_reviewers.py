"""Reviewer identities and roles in the library (SPEC §5.1, rules 11 and 12).

``agent.decide`` records an answer without running it; ``invoke(None, config)`` runs
it. A policy's ``reviewers`` roles are checked by one function for every channel.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handrail import Command
from handrail.errors import (
    AlreadyAnsweredError,
    ConfigurationError,
    ConflictError,
    InvalidDecisionError,
    NotAllowedError,
)

from _support import AgentFactory, Ledger, call, config, events_of, turn

POLICY: dict[str, Any] = {
    "execute_sql": {"allowed_decisions": ["approve", "reject"], "reviewers": ["dba"]},
    "write_file": True,
    "read_data": False,
}
ALICE = {"id": "alice", "roles": ["dba"]}
BOB = {"id": "bob", "roles": ["ops"]}
APPROVE = {"decisions": [{"type": "approve"}]}


def paused_on_sql(make_agent: AgentFactory, thread: str = "t1", **kw: Any) -> tuple[Any, str]:
    agent = make_agent(
        [turn(call("execute_sql", query="DELETE FROM t")), {"content": "done"}], policy=POLICY, **kw
    )
    out = agent.invoke({"messages": ["clean up"]}, config(thread))
    return agent, out["__interrupt__"][0].id


def test_decide_records_the_answer_and_runs_nothing_until_invoke(
    make_agent: AgentFactory, ledger: Ledger
) -> None:
    """§5.1: decide records; invoke(None, config) runs what it allows."""
    agent, interrupt_id = paused_on_sql(make_agent)
    decision = agent.decide("t1", interrupt_id, APPROVE, reviewer=ALICE)
    assert decision.answer == APPROVE and decision.reviewer == ALICE and decision.channel == "python"
    assert ledger.calls == []
    assert agent.get_state(config()).interrupts == ()
    assert agent.list_interrupts().items == []
    result = agent.invoke(None, config())
    assert ledger.names() == ["execute_sql"]
    assert result["messages"][-1].content == "done"


def test_every_answer_records_who_when_and_the_channel(make_agent: AgentFactory) -> None:
    """Rule 11: the audit trail names the reviewer, the time and the channel."""
    agent, interrupt_id = paused_on_sql(make_agent)
    agent.decide("t1", interrupt_id, APPROVE, reviewer=ALICE, channel="http")
    (answered,) = [e for e in agent.get_audit_trail(config()) if e.event == "answered"]
    assert answered.reviewer == ALICE and answered.channel == "http" and answered.at.tzinfo is not None
    agent2, id2 = paused_on_sql(make_agent, "t2")
    agent2.invoke(Command(resume={id2: APPROVE}), config("t2", reviewer=ALICE))
    (answered,) = [e for e in agent2.get_audit_trail(config("t2")) if e.event == "answered"]
    assert answered.reviewer == ALICE and answered.channel == "python"


@pytest.mark.parametrize("who", [BOB, "carol", None])
def test_a_reviewer_without_the_role_is_refused_and_nothing_is_saved(
    make_agent: AgentFactory, ledger: Ledger, who: Any
) -> None:
    """Rule 12: PermissionError subclass, the thread unchanged, the review still answerable."""
    agent, interrupt_id = paused_on_sql(make_agent)
    before = events_of(agent)
    with pytest.raises(NotAllowedError) as caught:
        if who is None:
            agent.invoke(Command(resume={interrupt_id: APPROVE}), config())
        else:
            agent.decide("t1", interrupt_id, APPROVE, reviewer=who)
    assert isinstance(caught.value, PermissionError)
    assert "dba" in str(caught.value) and caught.value.interrupt_id == interrupt_id
    assert events_of(agent) == before and ledger.calls == []
    agent.invoke(Command(resume={interrupt_id: APPROVE}), config(reviewer=ALICE))
    assert ledger.names() == ["execute_sql"]


def test_the_role_check_comes_before_validation(make_agent: AgentFactory) -> None:
    """Rule 12 before rule 5: a refused reviewer learns nothing about the answer's shape."""
    agent, interrupt_id = paused_on_sql(make_agent)
    with pytest.raises(NotAllowedError):
        agent.decide("t1", interrupt_id, {"decisions": []}, reviewer=BOB)
    with pytest.raises(InvalidDecisionError):
        agent.decide("t1", interrupt_id, {"decisions": []}, reviewer=ALICE)


def test_a_policy_without_reviewers_lets_any_reviewer_answer(
    make_agent: AgentFactory, ledger: Ledger
) -> None:
    agent = make_agent([turn(call("write_file", path="a", content="b")), {"content": "ok"}], policy=POLICY)
    out = agent.invoke({"messages": ["go"]}, config())
    agent.decide("t1", out["__interrupt__"][0].id, APPROVE, reviewer="anyone")
    agent.invoke(None, config())
    assert ledger.names() == ["write_file"]


def test_a_batch_needs_the_roles_of_every_tool_it_asks_about(make_agent: AgentFactory) -> None:
    """Rule 12: one answer decides every call of a batch, so it needs every call's roles."""
    policy = {**POLICY, "write_file": {"allowed_decisions": ["approve"], "reviewers": ["ops"]}}
    agent = make_agent(
        [turn(call("execute_sql", query="q"), call("write_file", path="a", content="b"))], policy=policy
    )
    interrupt_id = agent.invoke({"messages": ["go"]}, config())["__interrupt__"][0].id
    both = {"decisions": [{"type": "approve"}, {"type": "approve"}]}
    with pytest.raises(NotAllowedError, match="write_file"):
        agent.decide("t1", interrupt_id, both, reviewer=ALICE)
    assert [i.thread_id for i in agent.list_interrupts(reviewer=ALICE).items] == []
    agent.decide("t1", interrupt_id, both, reviewer={"id": "dana", "roles": ["dba", "ops"]})


def test_a_second_answer_names_who_answered_first_and_when(make_agent: AgentFactory, ledger: Ledger) -> None:
    """Rule 8 with rule 11: the loser hears who won, when, and through which channel."""
    agent, interrupt_id = paused_on_sql(make_agent)
    agent.decide("t1", interrupt_id, APPROVE, reviewer=ALICE, channel="http")
    before = events_of(agent)
    with pytest.raises(AlreadyAnsweredError) as caught:
        agent.decide("t1", interrupt_id, {"decisions": [{"type": "reject"}]}, reviewer=ALICE)
    assert isinstance(caught.value, ConflictError)
    assert caught.value.answered_by == "alice" and caught.value.channel == "http"
    assert "'alice'" in str(caught.value) and caught.value.answered_at.isoformat() in str(caught.value)
    assert events_of(agent) == before
    agent.invoke(None, config())
    assert ledger.names() == ["execute_sql"]


def test_the_inbox_shows_each_reviewer_only_what_they_may_decide(make_agent: AgentFactory) -> None:
    """Rule 12: list_interrupts(reviewer=...) filters by role, and pages without skipping."""
    agent = make_agent([], policy=POLICY)
    store = agent.checkpointer
    for i in range(7):
        tool_call = (
            call("execute_sql", query=f"q{i}") if i % 2 else call("write_file", path=f"p{i}", content="c")
        )
        thread_agent = make_agent([turn(tool_call)], policy=POLICY, checkpointer=store)
        thread_agent.invoke({"messages": ["go"]}, config(f"t{i}"))
    everyone = [item.thread_id for item in agent.list_interrupts(limit=100).items]
    assert len(everyone) == 7
    assert [i.thread_id for i in agent.list_interrupts(reviewer=ALICE, limit=100).items] == everyone
    for_bob = [i.thread_id for i in agent.list_interrupts(reviewer=BOB, limit=100).items]
    assert for_bob == [t for t in everyone if int(t[1:]) % 2 == 0]
    paged: list[str] = []
    cursor = None
    while True:
        page = agent.list_interrupts(reviewer=BOB, limit=2, cursor=cursor)
        paged += [i.thread_id for i in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert paged == for_bob


async def test_adecide_and_the_async_inbox_check_the_same_roles(
    make_agent: AgentFactory, ledger: Ledger
) -> None:
    agent, interrupt_id = paused_on_sql(make_agent)
    assert (await agent.alist_interrupts(reviewer=BOB)).items == []
    assert len((await agent.alist_interrupts(reviewer=ALICE)).items) == 1
    with pytest.raises(NotAllowedError):
        await agent.adecide("t1", interrupt_id, APPROVE, reviewer=BOB)
    await agent.adecide("t1", interrupt_id, APPROVE, reviewer=ALICE)
    with pytest.raises(AlreadyAnsweredError):
        await agent.adecide("t1", interrupt_id, APPROVE, reviewer=ALICE)
    await agent.ainvoke(None, config())
    assert ledger.names() == ["execute_sql"]


@pytest.mark.parametrize(
    "key, value",
    [
        ("required_approvals", 0),
        ("required_approvals", True),
        ("required_approvals", 2.0),
        ("required_approvals", 101),
        ("expires_after", 0),
        ("expires_after", -5),
        ("expires_after", float("nan")),
        ("expires_after", "1h"),
        ("expires_after", 10**9),
        ("allow_self_approval", "no"),
        ("grantable", 0),
    ],
)
def test_a_malformed_rule_13_to_16_key_is_refused_naming_it(
    make_agent: AgentFactory, key: str, value: Any
) -> None:
    """§5.1: a value the policy cannot read is an error naming the key, never a default."""
    with pytest.raises(ConfigurationError, match=key):
        make_agent([], policy={"execute_sql": {"allowed_decisions": ["approve"], key: value}})


def test_on_expiry_needs_an_expiry_and_a_known_value(make_agent: AgentFactory) -> None:
    base = {"allowed_decisions": ["approve"]}
    with pytest.raises(ConfigurationError, match="on_expiry needs expires_after"):
        make_agent([], policy={"execute_sql": {**base, "on_expiry": "approve"}})
    with pytest.raises(ConfigurationError, match="on_expiry must be 'reject' or 'approve'"):
        make_agent([], policy={"execute_sql": {**base, "expires_after": 60, "on_expiry": "ignore"}})


def test_counting_approvals_needs_a_decision_that_approves(make_agent: AgentFactory) -> None:
    with pytest.raises(ConfigurationError, match="allow neither 'approve' nor 'edit'"):
        make_agent([], policy={"execute_sql": {"allowed_decisions": ["reject"], "required_approvals": 2}})


@pytest.mark.parametrize("bad", [[], "dba", [""], [1], {"dba": True}])
def test_a_malformed_reviewers_list_is_refused(make_agent: AgentFactory, bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="reviewers"):
        make_agent([], policy={"execute_sql": {"allowed_decisions": ["approve"], "reviewers": bad}})


def test_decide_needs_a_reviewer(make_agent: AgentFactory) -> None:
    agent, interrupt_id = paused_on_sql(make_agent)
    with pytest.raises(ConfigurationError, match="reviewer"):
        agent.decide("t1", interrupt_id, APPROVE, reviewer=None)


@settings(max_examples=60, deadline=None)
@given(
    required=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True),
    held=st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=4, unique=True),
    shape=st.sampled_from(["batched", "tool_approval", "outcome_unknown"]),
)
def test_the_one_authorization_function_allows_exactly_a_shared_role(
    required: list[str], held: list[str], shape: str
) -> None:
    """Rule 12: whatever the interrupt's shape, a reviewer may decide iff they hold a listed role."""
    from handrail import HumanInTheLoopMiddleware, InMemorySaver, ScriptedModel, create_agent

    def execute_sql(query: str) -> str:
        """Run SQL."""
        return "ok"

    agent = create_agent(
        ScriptedModel([]),
        tools=[execute_sql],
        middleware=[
            HumanInTheLoopMiddleware(
                {"execute_sql": {"allowed_decisions": ["approve"], "reviewers": required}}
            )
        ],
        checkpointer=InMemorySaver(),
    )
    value: dict[str, Any]
    if shape == "batched":
        value = {"action_requests": [{"name": "execute_sql", "args": {}}], "review_configs": []}
    else:
        value = {"type": shape, "name": "execute_sql", "args": {}}
    reason = agent.refusal(value, {"id": "x", "roles": held})
    assert (reason is None) == bool(set(required) & set(held))
    assert agent.refusal({"question": "custom"}, None) is None


def test_config_user_names_the_run_starter_and_may_not_contradict_reviewer(make_agent: AgentFactory) -> None:
    """Rule 13: ``user`` is another name for the caller's identity; naming two is refused."""
    agent = make_agent([turn(call("execute_sql", query="x")), {"content": "done"}], policy=POLICY)
    with pytest.raises(ConfigurationError, match="both a 'reviewer' and a 'user'"):
        agent.invoke({"messages": ["go"]}, config(reviewer=ALICE, user=BOB))
    agent.invoke({"messages": ["go"]}, config(user=ALICE))
    (started,) = [e for e in agent.get_audit_trail(config()) if e.event == "input"]
    assert started.by == ALICE
