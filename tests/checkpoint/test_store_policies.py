"""Rules 13-15 on every backend: self-approval, counted approvals and expiry.

A tool's ``interrupt_on`` policy may forbid the run's starter to approve its own calls
(``allow_self_approval=False``, rule 13), ask for several different approvers of the same
action (``required_approvals``, rule 14) and let a review lapse (``expires_after`` and
``on_expiry``, rule 15). Each test is judged by the ledger the tools write on every real
execution, and by the audit trail, never by what the API replies alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from _stores import Location
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handrail import Agent, Command, InMemorySaver, ToolMessage
from handrail.errors import AlreadyAnsweredError, ConflictError, NotAllowedError, ReviewExpiredError
from handrail.runtime import answering
from handrail.sweep import sweep

from _support import AgentFactory, Ledger, call, config, events_of, turn

ALL = ["approve", "edit", "reject", "respond"]
ALICE = {"id": "alice", "roles": []}  # starts the runs
BOB = {"id": "bob", "roles": []}
CAROL = {"id": "carol", "roles": []}
DAVE = {"id": "dave", "roles": []}
SQL = {"query": "DELETE FROM orders"}
SAFER = {"query": "DELETE FROM orders WHERE archived"}
APPROVE = {"type": "approve"}
REJECT = {"type": "reject", "message": "not on a Friday"}
RESPOND = {"type": "respond", "message": "use the archive job instead"}
HOUR = 3600.0


def edit(**args: Any) -> dict[str, Any]:
    return {"type": "edit", "edited_action": {"name": "execute_sql", "args": args}}


def batch(*decisions: dict[str, Any]) -> dict[str, Any]:
    return {"decisions": list(decisions)}


def answer(mode: str, decision: dict[str, Any]) -> dict[str, Any]:
    """One call's decision in the form a review of ``mode`` takes."""
    return decision if mode == "per_call" else batch(decision)


def policy(**terms: Any) -> dict[str, Any]:
    """``execute_sql`` gated under ``terms`` (every decision allowed), ``write_file`` gated."""
    return {"execute_sql": {"allowed_decisions": ALL, **terms}, "write_file": True, "read_data": False}


def paused(
    make_agent: AgentFactory,
    location: Location,
    rules: dict[str, Any],
    *,
    thread: str = "t1",
    starter: Any = ALICE,
    mode: str = "batched",
    script: list[Any] | None = None,
) -> tuple[Agent, Any]:
    """An agent paused on one review (by default of ``execute_sql(SQL)``), the run started
    by ``starter``; returns it and the interrupt."""
    script = script or [turn(call("execute_sql", "c1", **SQL))]
    agent = make_agent(
        [*script, *[{"content": "done"}] * 3], policy=rules, mode=mode, checkpointer=location.saver()
    )
    cfg = config(thread, reviewer=starter) if starter is not None else config(thread)
    out = agent.invoke({"messages": ["tidy up"]}, cfg)
    (interrupt,) = out["__interrupt__"]
    return agent, interrupt


def tool_messages(agent: Agent, thread: str = "t1") -> list[ToolMessage]:
    return [m for m in agent.get_state(config(thread)).values["messages"] if isinstance(m, ToolMessage)]


def trail(agent: Agent, thread: str, event: str) -> list[Any]:
    return [e for e in agent.get_audit_trail(config(thread)) if e.event == event]


def pending_ids(agent: Agent, thread: str = "t1") -> list[str]:
    return [i.id for i in agent.get_state(config(thread)).interrupts]


def inbox_item(agent: Agent, interrupt_id: str) -> Any:
    (item,) = [i for i in agent.list_interrupts().items if i.interrupt.id == interrupt_id]
    return item


@pytest.fixture
def later(monkeypatch: pytest.MonkeyPatch) -> Callable[[], float]:
    """Call it to move the expiry clock two hours on; returns that time."""

    def move() -> float:
        at = time.time() + 2 * HOUR
        monkeypatch.setattr(answering, "CLOCK", lambda: at)
        return at

    return move


def together(*actions: Callable[[], Any]) -> list[tuple[Any, BaseException | None]]:
    """Run ``actions`` in threads released at once; each one's (result, exception)."""
    start = threading.Barrier(len(actions))
    outcomes: list[tuple[Any, BaseException | None]] = [(None, None)] * len(actions)

    def go(i: int) -> None:
        start.wait()
        try:
            outcomes[i] = (actions[i](), None)
        except BaseException as exc:  # the test looks at every outcome
            outcomes[i] = (None, exc)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(actions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads), "a racer hung"
    return outcomes


def late(delay: float, action: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``action`` after ``delay`` seconds (to vary who of two racers starts first)."""
    time.sleep(delay)
    return action(*args, **kwargs)


def rounds(location: Location, fast: int, slow: int) -> int:
    return fast if location.backend in ("memory", "sqlite") else slow


# Rule 13: self-approval ----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["batched", "per_call"])
def test_the_starter_may_not_approve_or_edit_its_own_call(
    make_agent: AgentFactory, location: Location, ledger: Ledger, mode: str
) -> None:
    agent, interrupt = paused(make_agent, location, policy(allow_self_approval=False), mode=mode)
    before = events_of(agent)
    for decision in (APPROVE, edit(**SAFER)):
        attempts = (
            partial(agent.decide, "t1", interrupt.id, answer(mode, decision), reviewer=ALICE),
            partial(
                agent.invoke, Command(resume={interrupt.id: answer(mode, decision)}), config(reviewer=ALICE)
            ),
        )
        for attempt in attempts:
            with pytest.raises(NotAllowedError) as refused:
                attempt()
            assert isinstance(refused.value, PermissionError)
            message = str(refused.value)
            assert "'alice' started this run" in message, message
            assert "reject" in message and "respond" in message and "nothing was saved" in message
    assert events_of(agent) == before
    assert pending_ids(agent) == [interrupt.id]
    assert ledger.calls == []
    # another reviewer may approve it: it runs once
    decision = agent.decide("t1", interrupt.id, answer(mode, APPROVE), reviewer=BOB)
    assert decision.answer == answer(mode, APPROVE) and not decision.waiting
    assert ledger.calls == []
    agent.invoke(None, config())
    agent.invoke(None, config())
    assert ledger.calls == [("execute_sql", SQL)]
    (answered,) = trail(agent, "t1", "answered")
    assert answered.reviewer == BOB


@pytest.mark.parametrize("mode", ["batched", "per_call"])
@pytest.mark.parametrize("decision", [REJECT, RESPOND], ids=["reject", "respond"])
def test_the_starter_may_reject_or_respond_to_its_own_call(
    make_agent: AgentFactory, location: Location, ledger: Ledger, mode: str, decision: dict[str, Any]
) -> None:
    agent, interrupt = paused(make_agent, location, policy(allow_self_approval=False), mode=mode)
    agent.decide("t1", interrupt.id, answer(mode, decision), reviewer=ALICE)
    agent.invoke(None, config())
    assert ledger.calls == []
    (result,) = tool_messages(agent)
    assert decision["message"] in str(result.content)
    assert result.status == ("error" if decision["type"] == "reject" else "success")
    (answered,) = trail(agent, "t1", "answered")
    assert answered.reviewer == ALICE


@pytest.mark.parametrize("mode", ["batched", "per_call"])
@pytest.mark.parametrize("starter", [ALICE, None], ids=["named-starter", "unnamed-starter"])
def test_an_answer_naming_nobody_may_not_approve_where_self_approval_is_off(
    make_agent: AgentFactory, location: Location, ledger: Ledger, mode: str, starter: Any
) -> None:
    """Rule 13: an answer that names no reviewer could be the starter's: refused."""
    agent, interrupt = paused(
        make_agent, location, policy(allow_self_approval=False), mode=mode, starter=starter
    )
    before = events_of(agent)
    for decision in (APPROVE, edit(**SAFER)):
        with pytest.raises(NotAllowedError, match="names no reviewer"):
            agent.invoke(Command(resume={interrupt.id: answer(mode, decision)}), config())
    assert events_of(agent) == before
    assert ledger.calls == []
    # a named reviewer who did not start it may
    agent.invoke(Command(resume={interrupt.id: answer(mode, APPROVE)}), config(reviewer=CAROL))
    assert ledger.calls == [("execute_sql", SQL)]


# Rule 14: counted approvals ---------------------------------------------------------------------
def test_an_edit_starts_the_count_again_and_the_edit_runs_once(
    make_agent: AgentFactory, location: Location, ledger: Ledger
) -> None:
    """A approves, B edits, C approves: B's edit has two approvers (B's own and C's)."""
    agent, interrupt = paused(make_agent, location, policy(required_approvals=2))
    first = agent.decide("t1", interrupt.id, batch(APPROVE), reviewer=BOB)
    assert first.waiting and first.answer is None
    (count,) = first.approvals
    assert str(count) == "1 of 2" and count.approved_by == ("bob",) and not count.edited
    assert str(inbox_item(agent, interrupt.id).approvals[0]) == "1 of 2"

    second = agent.decide("t1", interrupt.id, batch(edit(**SAFER)), reviewer=CAROL)
    assert second.waiting
    (count,) = second.approvals
    assert str(count) == "1 of 2" and count.approved_by == ("carol",) and count.edited
    assert dict(count.action) == {"name": "execute_sql", "args": SAFER}
    item = inbox_item(agent, interrupt.id)
    assert item.needs_approvals and [str(a) for a in item.approvals] == ["1 of 2"]
    assert item.approvals[0].edited

    out = agent.invoke(None, config())  # a worker finds nothing decided yet
    assert [i.id for i in out["__interrupt__"]] == [interrupt.id]
    assert ledger.calls == []

    third = agent.decide("t1", interrupt.id, batch(APPROVE), reviewer=DAVE)
    assert not third.waiting and third.answer == batch(edit(**SAFER))
    assert ledger.calls == []
    assert agent.list_interrupts().items == []
    agent.invoke(None, config())
    agent.invoke(None, config())
    assert ledger.calls == [("execute_sql", SAFER)]

    votes = trail(agent, "t1", "approval")
    assert [(v.kind, v.reviewer) for v in votes] == [("1 of 2", BOB), ("1 of 2", CAROL), ("2 of 2", DAVE)]
    (answered,) = trail(agent, "t1", "answered")
    assert answered.kind == "quorum" and answered.interrupt_id == interrupt.id
    (started,) = trail(agent, "t1", "tool_started")
    assert started.args == SAFER


def test_the_same_reviewer_approving_twice_counts_once(
    make_agent: AgentFactory, location: Location, ledger: Ledger
) -> None:
    agent, interrupt = paused(make_agent, location, policy(required_approvals=2))
    agent.decide("t1", interrupt.id, batch(APPROVE), reviewer=BOB)
    out = agent.invoke(Command(resume={interrupt.id: batch(APPROVE)}), config(reviewer=BOB))
    assert [i.id for i in out["__interrupt__"]] == [interrupt.id]
    again = agent.decide("t1", interrupt.id, batch(APPROVE), reviewer=BOB)
    assert again.waiting and [str(a) for a in again.approvals] == ["1 of 2"]
    agent.invoke(None, config())
    assert ledger.calls == []
    assert pending_ids(agent) == [interrupt.id]
    assert [str(a) for a in inbox_item(agent, interrupt.id).approvals] == ["1 of 2"]
    assert not trail(agent, "t1", "answered")
    # a second reviewer through Command(resume=...): the one-call form records and runs
    agent.invoke(Command(resume={interrupt.id: batch(APPROVE)}), config(reviewer=CAROL))
    assert ledger.calls == [("execute_sql", SQL)]
    agent.invoke(None, config())
    assert ledger.calls == [("execute_sql", SQL)]


def test_one_reject_ends_a_review_that_counts_approvals(
    make_agent: AgentFactory, location: Location, ledger: Ledger
) -> None:
    agent, interrupt = paused(make_agent, location, policy(required_approvals=2))
    agent.decide("t1", interrupt.id, batch(APPROVE), reviewer=BOB)
    rejected = agent.decide("t1", interrupt.id, batch(REJECT), reviewer=CAROL)
    assert not rejected.waiting and rejected.answer == batch(REJECT)
    with pytest.raises(AlreadyAnsweredError):
        agent.decide("t1", interrupt.id, batch(APPROVE), reviewer=DAVE)
    agent.invoke(None, config())
    assert ledger.calls == []
    (result,) = tool_messages(agent)
    assert result.status == "error" and REJECT["message"] in str(result.content)
    assert "expired" not in str(result.content)
    (answered,) = trail(agent, "t1", "answered")
    assert answered.reviewer == CAROL


def test_the_starters_approval_does_not_count_where_self_approval_is_off(
    make_agent: AgentFactory, location: Location, ledger: Ledger
) -> None:
    agent, interrupt = paused(make_agent, location, policy(required_approvals=2, allow_self_approval=False))
    agent.decide("t1", interrupt.id, batch(APPROVE), reviewer=BOB)
    before = events_of(agent)
    for decision in (APPROVE, edit(**SAFER)):
        with pytest.raises(NotAllowedError, match="'alice' started this run"):
            agent.decide("t1", interrupt.id, batch(decision), reviewer=ALICE)
    assert events_of(agent) == before
    assert [str(a) for a in inbox_item(agent, interrupt.id).approvals] == ["1 of 2"]
    agent.invoke(None, config())
    assert ledger.calls == []
    done = agent.decide("t1", interrupt.id, batch(APPROVE), reviewer=CAROL)
    assert done.answer == batch(APPROVE)
    agent.invoke(None, config())
    assert ledger.calls == [("execute_sql", SQL)]
    assert [v.reviewer for v in trail(agent, "t1", "approval")] == [BOB, CAROL]


def test_the_starter_may_still_end_a_counted_review_with_a_reject(
    make_agent: AgentFactory, location: Location, ledger: Ledger
) -> None:
    agent, interrupt = paused(make_agent, location, policy(required_approvals=2, allow_self_approval=False))
    agent.decide("t1", interrupt.id, batch(APPROVE), reviewer=BOB)
    agent.decide("t1", interrupt.id, batch(REJECT), reviewer=ALICE)
    agent.invoke(None, config())
    assert ledger.calls == []
    (result,) = tool_messages(agent)
    assert result.status == "error" and REJECT["message"] in str(result.content)


def test_a_batch_where_one_call_needs_two_approvals_runs_nothing_until_the_last(
    make_agent: AgentFactory, location: Location, ledger: Ledger
) -> None:
    script = [
        turn(call("write_file", "w1", path="notes.txt", content="hi"), call("execute_sql", "c1", **SQL))
    ]
    agent, interrupt = paused(make_agent, location, policy(required_approvals=2), script=script)
    first = agent.decide("t1", interrupt.id, batch(APPROVE, APPROVE), reviewer=BOB)
    assert first.waiting and [str(a) for a in first.approvals] == ["1 of 1", "1 of 2"]
    assert first.approvals[0].decision is not None and first.approvals[1].decision is None
    assert [str(a) for a in inbox_item(agent, interrupt.id).approvals] == ["1 of 1", "1 of 2"]
    agent.invoke(None, config())
    assert ledger.calls == []  # not even the call that needs one approval

    last = agent.decide("t1", interrupt.id, batch(APPROVE, APPROVE), reviewer=CAROL)
    assert last.answer == batch(APPROVE, APPROVE)
    assert ledger.calls == []
    agent.invoke(None, config())
    agent.invoke(None, config())
    assert ledger.calls == [("write_file", {"path": "notes.txt", "content": "hi"}), ("execute_sql", SQL)]
    kinds = [v.kind for v in trail(agent, "t1", "approval")]
    assert len(kinds) == 2 and "execute_sql 1 of 2" in kinds[0] and "execute_sql 2 of 2" in kinds[1]
    assert [e.kind for e in trail(agent, "t1", "answered")] == ["quorum"]


@pytest.mark.parametrize("asked, redeployed", [(2, 1), (1, 2)])
def test_a_review_keeps_the_terms_it_was_asked_under(
    make_agent: AgentFactory, location: Location, ledger: Ledger, asked: int, redeployed: int
) -> None:
    """A redeploy with another ``required_approvals`` does not change a pending review."""
    _, interrupt = paused(make_agent, location, policy(required_approvals=asked))
    agent = make_agent(
        [{"content": "done"}], policy=policy(required_approvals=redeployed), checkpointer=location.saver()
    )
    first = agent.decide("t1", interrupt.id, batch(APPROVE), reviewer=BOB)
    agent.invoke(None, config())
    if asked == 1:
        assert not first.waiting and ledger.calls == [("execute_sql", SQL)]
        return
    assert first.waiting and [str(a) for a in first.approvals] == ["1 of 2"]
    assert ledger.calls == []
    assert pending_ids(agent) == [interrupt.id]
    agent.decide("t1", interrupt.id, batch(APPROVE), reviewer=CAROL)
    agent.invoke(None, config())
    assert ledger.calls == [("execute_sql", SQL)]


# Rule 15: expiry ----------------------------------------------------------------------------------
@pytest.mark.parametrize("on_expiry", ["reject", "approve"])
@pytest.mark.parametrize("via", ["invoke", "expire", "sweep"])
def test_an_expired_review_resolves_once_by_its_policy(
    make_agent: AgentFactory,
    location: Location,
    ledger: Ledger,
    later: Callable[[], float],
    on_expiry: str,
    via: str,
) -> None:
    expires_after: Any = timedelta(minutes=1) if via == "sweep" else 60
    agent, interrupt = paused(make_agent, location, policy(expires_after=expires_after, on_expiry=on_expiry))
    item = inbox_item(agent, interrupt.id)
    assert item.expires_at is not None and item.expires_at - item.created_at == timedelta(seconds=60)
    # not yet: nothing resolves
    assert agent.expire("t1") == []
    assert sweep({"sql": agent}) == []
    assert agent.invoke(None, config())["__interrupt__"][0].id == interrupt.id
    assert trail(agent, "t1", "answered") == []

    at = later()
    if via == "expire":
        assert agent.expire("t1", now=at) == [interrupt.id]
        assert ledger.calls == [] and pending_ids(agent) == []
    elif via == "sweep":
        (expired,) = sweep({"sql": agent}, now=at)
        assert (expired.thread_id, expired.interrupt_id) == ("t1", interrupt.id)
        assert expired.expired_at == item.expires_at
        assert ledger.calls == [] and pending_ids(agent) == []
    out = agent.invoke(None, config())
    assert "__interrupt__" not in out
    agent.invoke(None, config())
    assert agent.expire("t1", now=at) == [] and sweep({"sql": agent}, now=at) == []

    (result,) = tool_messages(agent)
    if on_expiry == "approve":
        assert ledger.calls == [("execute_sql", SQL)]
        assert result.status == "success"
    else:
        assert ledger.calls == []
        text = str(result.content)
        assert result.status == "error" and "expired" in text and "No person rejected it" in text
        assert "not executed" in text
    (answered,) = trail(agent, "t1", "answered")
    assert (answered.kind, answered.channel, answered.reviewer) == ("expired", "expiry", None)
    assert answered.interrupt_id == interrupt.id
    assert agent.list_interrupts().items == []


def test_an_expired_review_cannot_be_answered(
    make_agent: AgentFactory, location: Location, ledger: Ledger, later: Callable[[], float]
) -> None:
    agent, interrupt = paused(make_agent, location, policy(expires_after=60, on_expiry="approve"))
    expires_at = inbox_item(agent, interrupt.id).expires_at
    at = later()
    before = events_of(agent)
    attempts = (
        partial(agent.decide, "t1", interrupt.id, batch(APPROVE), reviewer=BOB),
        partial(agent.decide, "t1", interrupt.id, batch(REJECT), reviewer=BOB),
        partial(agent.invoke, Command(resume={interrupt.id: batch(REJECT)}), config(reviewer=BOB)),
    )
    for attempt in attempts:
        with pytest.raises(ReviewExpiredError) as refused:
            attempt()
        assert isinstance(refused.value, ConflictError)
        assert refused.value.expired_at == expires_at
        assert "expired" in str(refused.value) and "nothing was saved" in str(refused.value)
    assert events_of(agent) == before
    assert ledger.calls == []
    # once the expiry resolved it, an answer is still refused as expired
    assert agent.expire("t1", now=at) == [interrupt.id]
    with pytest.raises(ReviewExpiredError):
        agent.decide("t1", interrupt.id, batch(REJECT), reviewer=BOB)
    agent.invoke(None, config())
    assert ledger.calls == [("execute_sql", SQL)]  # by on_expiry, not by the refused reject


def test_an_expiry_decides_what_the_votes_have_not(
    make_agent: AgentFactory, location: Location, ledger: Ledger, later: Callable[[], float]
) -> None:
    agent, interrupt = paused(make_agent, location, policy(required_approvals=2, expires_after=60))
    agent.decide("t1", interrupt.id, batch(APPROVE), reviewer=BOB)
    at = later()
    with pytest.raises(ReviewExpiredError):
        agent.decide("t1", interrupt.id, batch(APPROVE), reviewer=CAROL)
    assert agent.expire("t1", now=at) == [interrupt.id]
    agent.invoke(None, config())
    assert ledger.calls == []
    (result,) = tool_messages(agent)
    assert result.status == "error" and "expired" in str(result.content)
    assert [e.kind for e in trail(agent, "t1", "answered")] == ["expired"]


@pytest.mark.parametrize("on_expiry", ["reject", "approve"])
def test_a_decision_racing_the_expiry_ends_with_exactly_one_applied(
    make_agent: AgentFactory, location: Location, ledger: Ledger, on_expiry: str
) -> None:
    """Rule 15 and rule 8: a reviewer's approval (the clock says it has not expired) and an
    expiry (judged two hours on), at once, from two agents on their own savers."""
    rules = policy(expires_after=HOUR, on_expiry=on_expiry)
    deciding, expiring = location.saver(), location.saver()
    n = rounds(location, 20, 6) if on_expiry == "reject" else rounds(location, 10, 3)
    winners: list[str] = []
    for i in range(n):
        thread, query = f"race{i}", {"query": f"DELETE FROM t{i}"}
        reviewer = make_agent(
            [turn(call("execute_sql", f"c{i}", **query)), {"content": "done"}],
            policy=rules,
            checkpointer=deciding,
        )
        interrupt = reviewer.invoke({"messages": ["go"]}, config(thread))["__interrupt__"][0]
        sweeper = make_agent([], policy=rules, checkpointer=expiring)
        first, second = ((0.0, 0.0), (0.003, 0.0), (0.0, 0.003))[i % 3]  # vary who starts first
        (decided, refused), (expired, failed) = together(
            partial(late, first, reviewer.decide, thread, interrupt.id, batch(APPROVE), reviewer=BOB),
            partial(late, second, sweeper.expire, thread, now=time.time() + 2 * HOUR),
        )
        assert failed is None, (i, failed)
        answered = trail(reviewer, thread, "answered")
        assert len(answered) == 1, (i, answered, refused, expired)
        decision_won = answered[0].channel == "python"
        winners.append("decision" if decision_won else "expiry")
        if decision_won:
            assert refused is None and decided.answer == batch(APPROVE), (i, refused)
            assert answered[0].reviewer == BOB
            assert expired == []  # the expiry resolved nothing, and says so
        else:
            assert isinstance(refused, ReviewExpiredError), (i, refused)
            assert answered[0].kind == "expired" and expired == [interrupt.id]
        reviewer.invoke(None, config(thread))
        reviewer.invoke(None, config(thread))
        ran = ledger.calls.count(("execute_sql", query))
        assert ran == (1 if decision_won or on_expiry == "approve" else 0), (i, winners[-1], ran)
    assert len(ledger.calls) <= n


def test_two_sweeps_at_once_resolve_each_review_exactly_once(
    make_agent: AgentFactory, location: Location, ledger: Ledger
) -> None:
    rules = policy(expires_after=60, on_expiry="approve")
    per_round, n = 4, rounds(location, 4, 2)
    for r in range(n):
        threads = [f"s{r}-{k}" for k in range(per_round)]
        script = [turn(call("execute_sql", f"c{k}", query=t)) for k, t in enumerate(threads)]
        owner = make_agent(
            [*script, *[{"content": "done"}] * per_round], policy=rules, checkpointer=location.saver()
        )
        asked = {t: owner.invoke({"messages": ["go"]}, config(t))["__interrupt__"][0].id for t in threads}
        sweepers = [make_agent([], policy=rules, checkpointer=location.saver()) for _ in range(2)]
        at = time.time() + 2 * HOUR
        outcomes = together(*(partial(sweep, {"sql": s}, now=at) for s in sweepers))
        assert [exc for _, exc in outcomes] == [None, None]
        resolved = [(e.thread_id, e.interrupt_id) for result, _ in outcomes for e in result]
        # every review is reported once, by the sweep that resolved it
        assert sorted(resolved) == sorted(asked.items()), (r, outcomes)
        for thread in threads:
            assert [e.kind for e in trail(owner, thread, "answered")] == ["expired"]
            owner.invoke(None, config(thread))
        assert sweep({"sql": sweepers[0]}, now=at) == []
    ran = [args["query"] for _, args in ledger.calls]
    assert sorted(ran) == sorted(f"s{r}-{k}" for r in range(n) for k in range(per_round))


# Who reports what ---------------------------------------------------------------------------------
@pytest.mark.parametrize("voter", ["another-process", "after-a-refusal"])
def test_a_vote_keeps_the_reviews_terms_in_the_inbox(
    make_agent: AgentFactory, location: Location, ledger: Ledger, voter: str
) -> None:
    """A vote saved by an agent that read the thread from the store (another agent on its own
    saver, as another process; or this one after a refusal dropped its reading) rewrites the
    thread's inbox row: the review still shows when it expires and how far it has come, and
    a sweep still finds it."""
    rules = policy(required_approvals=2, expires_after=60, allow_self_approval=False)
    owner, interrupt = paused(make_agent, location, rules)
    expires_at = inbox_item(owner, interrupt.id).expires_at
    assert expires_at is not None
    if voter == "another-process":
        other = make_agent([], policy=rules, checkpointer=location.saver())
        other.decide("t1", interrupt.id, batch(APPROVE), reviewer=BOB)
    else:
        with pytest.raises(NotAllowedError):
            owner.decide("t1", interrupt.id, batch(APPROVE), reviewer=ALICE)
        owner.decide("t1", interrupt.id, batch(APPROVE), reviewer=BOB)
    item = inbox_item(owner, interrupt.id)
    assert item.expires_at == expires_at
    assert [str(a) for a in item.approvals] == ["1 of 2"]
    (expired,) = sweep({"sql": owner}, now=time.time() + 2 * HOUR)
    assert expired.interrupt_id == interrupt.id
    owner.invoke(None, config())
    assert ledger.calls == []


@pytest.mark.parametrize("via", ["expire", "sweep"])
def test_expire_reports_only_what_its_expiry_resolved(
    make_agent: AgentFactory, location: Location, monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    """A reviewer's decision lands just after the expirer read the thread: the expiry then
    resolves nothing (the decision is applied, rule 8), and must not say it did."""
    rules = policy(expires_after=HOUR)
    owner, interrupt = paused(make_agent, location, rules)
    expirer = make_agent([], policy=rules, checkpointer=location.saver())
    run = expirer._run

    def decided_meanwhile(*args: Any) -> Any:  # after the sweep listed the review as lapsed
        owner.decide("t1", interrupt.id, batch(APPROVE), reviewer=BOB)
        return run(*args)  # the run of the expiry, driven sync or async

    monkeypatch.setattr(expirer, "_run", decided_meanwhile)
    at = time.time() + 2 * HOUR
    reported = expirer.expire("t1", now=at) if via == "expire" else sweep({"sql": expirer}, now=at)
    (answered,) = trail(owner, "t1", "answered")
    assert answered.reviewer == BOB and answered.channel == "python"  # the decision applied
    assert reported == []


# Rule 14 against a model of it ----------------------------------------------------------------------
VOTERS = ("r1", "r2", "r3")
EDITS = ({"query": "X"}, {"query": "Y"})
VOTE = st.tuples(st.sampled_from(VOTERS), st.sampled_from(["approve", "edit0", "edit1", "reject"]))


def expected(required: int, votes: list[tuple[str, str]]) -> tuple[Any, int]:
    """What rule 14 decides after ``votes``: the action that runs (None: none), or
    ``"reject"``, and after how many votes the review was decided (0: it was not)."""
    action, approvers = SQL, set()
    for n, (who, kind) in enumerate(votes, 1):
        if kind == "reject":
            return "reject", n
        if kind == "approve":
            approvers.add(who)
        else:
            edited = EDITS[int(kind[-1])]
            if edited == action:
                approvers.add(who)
            else:
                action, approvers = edited, {who}
        if len(approvers) >= required:
            return action, n
    return None, 0


def vote_answer(kind: str) -> dict[str, Any]:
    if kind == "reject":
        return batch({"type": "reject"})
    if kind == "approve":
        return batch(APPROVE)
    return batch(edit(**EDITS[int(kind[-1])]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(required=st.integers(1, 3), votes=st.lists(VOTE, max_size=6))
def test_votes_run_the_call_at_most_once_and_only_with_enough_approvers(
    make_agent: AgentFactory, ledger: Ledger, required: int, votes: list[tuple[str, str]]
) -> None:
    ledger.calls.clear()
    agent = make_agent(
        [turn(call("execute_sql", "c1", **SQL)), {"content": "done"}],
        policy=policy(required_approvals=required),
        checkpointer=InMemorySaver(),
    )
    interrupt = agent.invoke({"messages": ["go"]}, config())["__interrupt__"][0]
    outcome, decided_at = expected(required, votes)
    for n, (who, kind) in enumerate(votes, 1):
        if decided_at and n > decided_at:
            with pytest.raises(AlreadyAnsweredError):
                agent.decide("t1", interrupt.id, vote_answer(kind), reviewer=who)
            continue
        decision = agent.decide("t1", interrupt.id, vote_answer(kind), reviewer=who)
        assert decision.waiting == (n != decided_at), (n, decision)
        agent.invoke(None, config())
        assert ledger.calls == [] or n >= decided_at > 0
    agent.invoke(None, config())
    agent.invoke(None, config())
    if outcome is None:
        assert ledger.calls == [] and pending_ids(agent) == [interrupt.id]
    elif outcome == "reject":
        assert ledger.calls == [] and pending_ids(agent) == []
        (result,) = tool_messages(agent)
        assert result.status == "error" and "expired" not in str(result.content)
    else:
        assert ledger.calls == [("execute_sql", outcome)]


def test_a_pruned_thread_keeps_its_votes_its_terms_and_its_starter(
    make_agent: AgentFactory, location: Location, ledger: Ledger
) -> None:
    """Pruning leaves a snapshot in place of old checkpoints: a review that counts approvals
    keeps its first vote and its terms through it, and the starter still may not approve."""
    rules = policy(required_approvals=2, allow_self_approval=False, expires_after=HOUR)
    script = [turn(call("read_data", f"r{i}", table="t")) for i in range(30)]
    agent, interrupt = paused(
        make_agent, location, rules, script=[*script, turn(call("execute_sql", "c1", **SQL))]
    )
    agent.decide("t1", interrupt.id, batch(APPROVE), reviewer=BOB)
    assert agent.prune_thread("t1", keep_last=2) > 0
    fresh = make_agent([{"content": "done"}], policy=rules, checkpointer=location.saver())
    with pytest.raises(NotAllowedError, match="started this run"):
        fresh.decide("t1", interrupt.id, batch(APPROVE), reviewer=ALICE)
    (item,) = fresh.list_interrupts().items
    assert [str(a) for a in item.approvals] == ["1 of 2"] and item.expires_at is not None
    fresh.decide("t1", interrupt.id, batch(APPROVE), reviewer=CAROL)
    fresh.invoke(None, config())
    assert ledger.calls.count(("execute_sql", SQL)) == 1
