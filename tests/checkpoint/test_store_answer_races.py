"""Answers at the same moment (rule 8, issue 24), on every backend, many times over.

Answers to *different* reviews of one thread never conflict: each is recorded (a loser
of the append race reads the thread again and appends after the winner) and each call
runs once. Answers to the *same* review: exactly one is recorded, and every other is an
AlreadyAnsweredError that names who answered and when.
"""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import pytest
from _stores import Location

from handrail import Command
from handrail.errors import AlreadyAnsweredError

from _support import AgentFactory, Ledger, call, config, turn

ROUNDS = 12


def _together(*actions: Any) -> list[BaseException | None]:
    """Run ``actions`` in threads released at once; what each raised (None: nothing)."""
    start = threading.Barrier(len(actions))
    outcomes: list[BaseException | None] = [None] * len(actions)

    def go(i: int) -> None:
        start.wait()
        try:
            actions[i]()
        except BaseException as exc:  # a test collects every outcome
            outcomes[i] = exc

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(actions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return outcomes


def _two_reviews(make_agent: AgentFactory, location: Location, thread: str) -> tuple[list[Any], list[str]]:
    """Two agents on their own savers (as two processes), and a thread paused on two
    per-call reviews."""
    script = [
        turn(
            call("write_file", f"{thread}-w", path=thread, content="x"),
            call("execute_sql", f"{thread}-q", query=thread),
        )
    ]
    agents = [
        make_agent([*script, {"content": "done"}], mode="per_call", checkpointer=location.saver())
        for _ in range(2)
    ]
    out = agents[0].invoke({"messages": ["go"]}, config(thread))
    return agents, [i.id for i in out["__interrupt__"]]


def test_answers_to_two_reviews_of_one_thread_at_once_are_both_recorded(
    make_agent: AgentFactory, location: Location, ledger: Ledger
) -> None:
    for n in range(ROUNDS):
        thread = f"t{n}"
        agents, (first, second) = _two_reviews(make_agent, location, thread)
        outcomes = _together(
            partial(agents[0].decide, thread, first, {"type": "approve"}, reviewer="ann"),
            partial(agents[1].decide, thread, second, {"type": "approve"}, reviewer="bob"),
        )
        assert outcomes == [None, None], (n, outcomes)
        agents[0].invoke(None, config(thread))
        answered = {
            e.interrupt_id: e.reviewer
            for e in agents[0].get_audit_trail(config(thread))
            if e.event == "answered"
        }
        assert answered == {first: "ann", second: "bob"}
    assert sorted(ledger.names()) == sorted(["execute_sql", "write_file"] * ROUNDS)


def test_resumes_of_two_reviews_of_one_thread_at_once_both_run(
    make_agent: AgentFactory, location: Location, ledger: Ledger
) -> None:
    """The same through ``Command(resume=...)``: each answer's run runs its call, once."""
    for n in range(ROUNDS):
        thread = f"r{n}"
        agents, (first, second) = _two_reviews(make_agent, location, thread)
        outcomes = _together(
            partial(agents[0].invoke, Command(resume={first: {"type": "approve"}}), config(thread)),
            partial(agents[1].invoke, Command(resume={second: {"type": "approve"}}), config(thread)),
        )
        # a run that found the other run executing its tool is refused and saves nothing
        # (rule 8: a run is a writer; an answer alone is not, see the test above); sent again
        # once that run is done, it runs its call
        for outcome, interrupt_id in zip(outcomes, (first, second), strict=True):
            assert outcome is None or "being run elsewhere" in str(outcome), outcome
            if outcome is not None:
                agents[0].invoke(Command(resume={interrupt_id: {"type": "approve"}}), config(thread))
        agents[0].invoke(None, config(thread))
    assert sorted(ledger.names()) == sorted(["execute_sql", "write_file"] * ROUNDS)


@pytest.mark.parametrize("racers", [2, 4])
def test_answers_to_one_review_at_once_one_wins_and_the_others_are_told_who(
    make_agent: AgentFactory, location: Location, ledger: Ledger, racers: int
) -> None:
    for n in range(ROUNDS // 2):
        thread = f"s{racers}-{n}"
        agents, (first, _) = _two_reviews(make_agent, location, thread)
        more = [make_agent([], mode="per_call", checkpointer=location.saver()) for _ in range(racers - 2)]
        everyone = agents + more
        outcomes = _together(
            *(
                partial(a.decide, thread, first, {"type": "approve"}, reviewer=f"r{i}")
                for i, a in enumerate(everyone)
            )
        )
        won = [i for i, o in enumerate(outcomes) if o is None]
        assert len(won) == 1, outcomes
        for outcome in outcomes:
            if outcome is not None:
                assert isinstance(outcome, AlreadyAnsweredError), outcome
                assert outcome.answered_by == f"r{won[0]}" and outcome.answered_at is not None
