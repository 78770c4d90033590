"""Rule 16 on every backend: an approval that carries a grant lets later calls run unpaused.

Each test drives real agents on one store and judges by the ledger the tools write on
every real execution and by the audit trail: which calls ran, which paused, and who the
audit says let them run.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from _stores import Location
from hypothesis import given, settings
from hypothesis import strategies as st

from handrail import Agent, Command
from handrail.errors import InvalidDecisionError
from handrail.review.grants import MAX_GRANT_TTL, MAX_GRANT_USES, check_grant
from handrail.runtime import answering

from _support import AgentFactory, Ledger, call, config, turn

BOB = {"id": "bob", "roles": ["dba"]}
ALICE = {"id": "alice", "roles": ["dba"]}
OPS = {"id": "olga", "roles": ["ops"]}
HOUR = 3600.0


def rules(**terms: Any) -> dict[str, Any]:
    return {"execute_sql": {"allowed_decisions": ["approve", "edit", "reject", "respond"], **terms}}


def sql_turns(*queries: str) -> list[Any]:
    return [turn(call("execute_sql", f"c{i}", query=q)) for i, q in enumerate(queries)]


def grant_answer(mode: str, **grant: Any) -> dict[str, Any]:
    decision = {"type": "approve", "grant": grant}
    return decision if mode == "per_call" else {"decisions": [decision]}


def start(agent: Agent, thread: str = "t1", starter: Any = ALICE) -> list[Any]:
    out = agent.invoke({"messages": ["go"]}, config(thread, reviewer=starter))
    return list(out.get("__interrupt__", []))


def approve_with_grant(agent: Agent, thread: str, mode: str, giver: Any = BOB, **grant: Any) -> list[Any]:
    out = agent.invoke(Command(resume=grant_answer(mode, **grant)), config(thread, reviewer=giver))
    return list(out.get("__interrupt__", []))


def asked_queries(interrupts: list[Any]) -> list[str]:
    value = interrupts[0].value if interrupts else {}
    requests = value.get("action_requests", [value])
    return [r["args"]["query"] for r in requests]


@pytest.mark.parametrize("mode", ["batched", "per_call"])
def test_a_thread_grant_covers_later_calls_until_its_uses_are_spent(
    make_agent: AgentFactory, location: Location, ledger: Ledger, mode: str
) -> None:
    """Rule 16: two later calls run without a pause; the third asks again. The audit names
    the grant and its giver for each call it let run."""
    agent = make_agent(
        [*sql_turns("Q0", "Q1", "Q2", "Q3"), {"content": "done"}],
        policy=rules(),
        mode=mode,
        checkpointer=location.saver(),
    )
    start(agent)
    asked = approve_with_grant(agent, "t1", mode, scope="thread", uses=2)
    assert [args["query"] for _, args in ledger.calls] == ["Q0", "Q1", "Q2"]
    assert asked_queries(asked) == ["Q3"]
    (grant,) = agent.list_grants(active=False)
    assert (grant.used, grant.uses_left, grant.given_by) == (2, 0, BOB)
    assert agent.list_grants() == []  # spent: no longer in force
    started = [e for e in agent.get_audit_trail(config()) if e.event == "tool_started"]
    assert [(e.channel, e.value.get("grant_id")) for e in started] == [
        (None, None),
        ("grant", grant.grant_id),
        ("grant", grant.grant_id),
    ]
    assert started[1].reviewer == BOB


def test_a_grant_lapses_by_time(
    make_agent: AgentFactory, location: Location, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent(
        [*sql_turns("Q0", "Q1"), {"content": "done"}, *sql_turns("Q2"), {"content": "done"}],
        policy=rules(),
        checkpointer=location.saver(),
    )
    start(agent)
    approve_with_grant(agent, "t1", "batched", scope="thread", ttl=HOUR)
    assert [args["query"] for _, args in ledger.calls] == ["Q0", "Q1"]
    monkeypatch.setattr(answering, "CLOCK", lambda: time.time() + HOUR + 1)
    asked = start(agent)
    assert asked_queries(asked) == ["Q2"] and len(ledger.calls) == 2


def test_an_agent_grant_covers_other_threads_and_a_thread_grant_does_not(
    make_agent: AgentFactory, location: Location, ledger: Ledger
) -> None:
    saver = location.saver()
    for scope, expected in (("thread", ["Q0"]), ("agent", ["Q0", "Q0"])):
        ledger.calls.clear()
        agent = make_agent([*sql_turns("Q0"), {"content": "done"}] * 2, policy=rules(), checkpointer=saver)
        first, second = f"{scope}-a", f"{scope}-b"
        start(agent, first)
        approve_with_grant(agent, first, "batched", scope=scope, uses=5)
        asked = start(agent, second)
        assert [args["query"] for _, args in ledger.calls] == expected
        assert bool(asked) == (scope == "thread")


def test_an_exact_grant_covers_only_the_approved_arguments(
    make_agent: AgentFactory, location: Location, ledger: Ledger
) -> None:
    agent = make_agent(
        [*sql_turns("VACUUM", "VACUUM", "DROP TABLE users"), {"content": "done"}],
        policy=rules(),
        checkpointer=location.saver(),
    )
    start(agent)
    asked = approve_with_grant(agent, "t1", "batched", scope="thread", args="exact", uses=10)
    assert [args["query"] for _, args in ledger.calls] == ["VACUUM", "VACUUM"]
    assert asked_queries(asked) == ["DROP TABLE users"]


def test_a_grant_revoked_between_two_calls_covers_no_later_call(
    make_agent: AgentFactory, location: Location, ledger: Ledger
) -> None:
    saver = location.saver()
    agent = make_agent([*sql_turns("Q0"), {"content": "done"}] * 3, policy=rules(), checkpointer=saver)
    start(agent, "a")
    approve_with_grant(agent, "a", "batched", scope="agent", ttl=HOUR)
    assert start(agent, "b") == []  # covered
    (grant,) = agent.list_grants()
    revoked = agent.revoke_grant(grant.grant_id, by=ALICE)
    assert revoked.revoked_by == ALICE and revoked.revoked_at is not None
    assert agent.revoke_grant(grant.grant_id, by=BOB).revoked_by == ALICE  # twice: unchanged
    assert asked_queries(start(agent, "c")) == ["Q0"]
    assert len(ledger.calls) == 2 and agent.list_grants() == []


def test_two_calls_racing_for_a_grants_last_use_one_runs_and_one_pauses(
    make_agent: AgentFactory, location: Location, ledger: Ledger
) -> None:
    """Rule 16: exactly one of two calls on two threads takes the last use; the other asks."""
    saver = location.saver()
    rounds = 3 if location.backend != "memory" and location.backend != "sqlite" else 6
    for r in range(rounds):
        ledger.calls.clear()
        agent = make_agent([*sql_turns("Q0"), {"content": "done"}] * 3, policy=rules(), checkpointer=saver)
        start(agent, f"g{r}")
        approve_with_grant(agent, f"g{r}", "batched", scope="agent", uses=1)  # Q0 runs on the answer itself
        racers = [make_agent([*sql_turns("Q0"), {"content": "done"}], policy=rules(), checkpointer=saver)]
        racers.append(make_agent([*sql_turns("Q0"), {"content": "done"}], policy=rules(), checkpointer=saver))
        asked = _race(racers, [f"r{r}-0", f"r{r}-1"])
        assert sorted(bool(a) for a in asked) == [False, True], (r, asked)
        assert len(ledger.calls) == 2  # the grant's own approval, and the one race it won


def _race(agents: list[Agent], threads: list[str]) -> list[Any]:
    """Start each agent on its thread at once; what each was asked."""
    barrier = threading.Barrier(len(agents))
    asked: list[Any] = [None] * len(agents)

    def run(i: int) -> None:
        barrier.wait()
        asked[i] = start(agents[i], threads[i])

    workers = [threading.Thread(target=run, args=(i,)) for i in range(len(agents))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return asked


def test_a_grant_never_covers_more_than_its_giver_may_decide_now(
    make_agent: AgentFactory, location: Location, ledger: Ledger
) -> None:
    """Rule 16: a grant of a giver whose roles no longer decide the tool covers nothing; nor
    where the policy now forbids grants, or asks for several approvals."""
    saver = location.saver()
    first = make_agent(
        [*sql_turns("Q0"), {"content": "done"}], policy=rules(reviewers=["dba"]), checkpointer=saver
    )
    start(first, "a")
    approve_with_grant(first, "a", "batched", scope="agent", ttl=HOUR)
    for later in (rules(reviewers=["ops"]), rules(grantable=False), rules(required_approvals=2)):
        agent = make_agent([*sql_turns("Q1"), {"content": "done"}], policy=later, checkpointer=saver)
        assert asked_queries(start(agent, f"b{len(ledger.calls)}-{id(later)}", starter=OPS)) == ["Q1"]
    assert [args["query"] for _, args in ledger.calls] == ["Q0"]


def test_a_grant_does_not_let_its_giver_approve_their_own_run_where_self_approval_is_off(
    make_agent: AgentFactory, location: Location, ledger: Ledger
) -> None:
    saver = location.saver()

    def agent() -> Agent:
        script = [*sql_turns("Q0"), {"content": "done"}]
        return make_agent(script, policy=rules(allow_self_approval=False), checkpointer=saver)

    first = agent()
    start(first, "a", starter=ALICE)
    approve_with_grant(first, "a", "batched", scope="agent", ttl=HOUR)  # bob gives it
    assert asked_queries(start(agent(), "b", starter=BOB)) == ["Q0"]  # bob's own run: asks
    assert start(agent(), "c", starter=ALICE) == []  # alice's run: covered
    assert len(ledger.calls) == 2


@pytest.mark.parametrize(
    "decision",
    [
        {"type": "reject", "grant": {"scope": "thread", "uses": 1}},
        {"type": "respond", "message": "no", "grant": {"scope": "thread", "uses": 1}},
        {
            "type": "edit",
            "edited_action": {"name": "execute_sql", "args": {"query": "x"}},
            "grant": {"scope": "thread", "uses": 1},
        },
    ],
)
def test_only_an_approval_carries_a_grant(
    make_agent: AgentFactory, location: Location, decision: Any
) -> None:
    agent = make_agent([*sql_turns("Q0"), {"content": "done"}], policy=rules(), checkpointer=location.saver())
    start(agent)
    with pytest.raises(InvalidDecisionError, match="unexpected key"):
        agent.invoke(Command(resume={"decisions": [decision]}), config(reviewer=BOB))
    assert agent.list_grants(active=False) == []


@pytest.mark.parametrize(
    ("terms", "said"),
    [
        ({"grantable": False}, "not grantable"),
        ({"required_approvals": 2}, "several approvals cannot grant"),
    ],
)
def test_a_review_that_may_not_grant_refuses_an_approval_that_carries_one(
    make_agent: AgentFactory, location: Location, terms: dict[str, Any], said: str
) -> None:
    agent = make_agent(
        [*sql_turns("Q0"), {"content": "done"}], policy=rules(**terms), checkpointer=location.saver()
    )
    start(agent)
    with pytest.raises(InvalidDecisionError, match=said):
        approve_with_grant(agent, "t1", "batched", scope="thread", uses=1)
    assert agent.list_grants(active=False) == []


def test_an_unnamed_approval_cannot_grant(make_agent: AgentFactory, location: Location) -> None:
    agent = make_agent([*sql_turns("Q0"), {"content": "done"}], policy=rules(), checkpointer=location.saver())
    start(agent)
    with pytest.raises(InvalidDecisionError, match="named giver"):
        agent.invoke(Command(resume=grant_answer("batched", scope="thread", uses=1)), config())


def test_an_expiry_never_grants(
    make_agent: AgentFactory, location: Location, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent(
        [*sql_turns("Q0"), {"content": "done"}],
        policy=rules(expires_after=60, on_expiry="approve"),
        checkpointer=location.saver(),
    )
    start(agent)
    monkeypatch.setattr(answering, "CLOCK", lambda: time.time() + 120)
    agent.invoke(None, config())
    assert agent.list_grants(active=False) == []


# Hypothesis: a grant spec never yields more than it declares ------------------------------------------
SPEC_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, MAX_GRANT_USES + 5),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["thread", "agent", "exact", "all", "*", "global"]),
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["scope", "args", "ttl", "uses", "tools", "forever"]), SPEC_VALUES))
def test_a_random_grant_spec_is_refused_or_no_broader_than_declared(raw: dict[str, Any]) -> None:
    try:
        grant = check_grant(raw, "decision 1 of 1")
    except InvalidDecisionError:
        return
    assert set(raw) <= {"scope", "args", "ttl", "uses"}
    assert grant["scope"] == raw.get("scope", "thread") and grant["scope"] in ("thread", "agent")
    assert grant["args"] == raw.get("args") and grant["args"] in (None, "exact")
    assert grant["ttl"] is not None or grant["uses"] is not None  # it ends
    if grant["ttl"] is not None:
        assert grant["ttl"] == raw["ttl"] and 0 < grant["ttl"] <= MAX_GRANT_TTL
    if grant["uses"] is not None:
        assert grant["uses"] == raw["uses"] and 1 <= grant["uses"] <= MAX_GRANT_USES


@pytest.mark.parametrize("terms", [{"grantable": False}, {"required_approvals": 2}])
def test_a_call_no_grant_could_cover_pauses_without_reading_grants(
    make_agent: AgentFactory, location: Location, terms: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pause of a tool that cannot be granted (or counts approvals) costs no read of the grants."""
    saver = location.saver()
    reads: list[Any] = []
    original = type(saver).list_grants

    def counted(self: Any, filter: Any) -> Any:
        reads.append(filter)
        return original(self, filter)

    monkeypatch.setattr(type(saver), "list_grants", counted)
    for mode in ("batched", "per_call"):
        agent = make_agent(
            [*sql_turns("Q0"), {"content": "done"}], policy=rules(**terms), mode=mode, checkpointer=saver
        )
        assert asked_queries(start(agent, f"t-{mode}")) == ["Q0"]
    assert reads == []
