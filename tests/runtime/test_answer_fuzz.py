"""Rule 5 under random answers, for every kind of interrupt (batched, per-call, custom,
``outcome_unknown``): an answer is either applied and stored exactly as applied, or
refused with a ValueError subclass, the thread unchanged and still answerable."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handrail import (
    Command,
    HumanInTheLoopMiddleware,
    InMemorySaver,
    ScriptedModel,
    create_agent,
    interrupt,
    tool,
)

from _support import config, events_of, turn


class Crash(BaseException):
    """A run that stops inside a tool without saving its result."""


def _paused(kind: str) -> tuple[Any, list[Any]]:
    """A thread paused on one interrupt of ``kind``; the list gets what tools received."""
    got: list[Any] = []
    store = InMemorySaver()

    @tool
    def send(to: str, amount: int = 1) -> str:
        """Send money."""
        got.append(("send", to, amount))
        if kind == "outcome_unknown" and len(got) == 1:
            raise Crash()
        return f"sent {amount} to {to}"

    @tool
    def ask(question: str) -> str:
        """Ask the user."""
        answer = interrupt({"question": question})
        got.append(("ask", answer))
        return "ok"

    calls = (
        [{"name": "ask", "args": {"question": "?"}, "id": "q"}]
        if kind == "custom"
        else [
            {"name": "send", "args": {"to": "ann", "amount": 5}, "id": "s1"},
            {"name": "send", "args": {"to": "bob"}, "id": "s2"},
        ]
        if kind != "outcome_unknown"
        else [{"name": "send", "args": {"to": "ann"}, "id": "s1"}]
    )
    mode = "per_call" if kind == "per_call" else "batched"
    agent = create_agent(
        ScriptedModel([turn(*calls), {"content": "done"}, {"content": "again"}]),
        [send, ask],
        middleware=[HumanInTheLoopMiddleware({"send": True, "ask": False}, interrupt_mode=mode)],  # type: ignore[arg-type]
        checkpointer=store,
    )
    agent.invoke({"messages": "go"}, config())
    if kind == "outcome_unknown":
        with pytest.raises(Crash):
            agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    return agent, got


def _valid(kind: str) -> Any:
    if kind == "batched":
        return {"decisions": [{"type": "approve"}, {"type": "reject"}]}
    if kind == "custom":
        return "yes"
    return {"type": "approve"}


def _deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = {"k": value}
    return value


json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.binary(max_size=4)
)
values = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.frozensets(st.integers(), max_size=2)
        | st.dictionaries(st.text(max_size=6) | st.integers(0, 3), inner, max_size=3)
    ),
    max_leaves=10,
)
decision = st.fixed_dictionaries(
    {"type": st.sampled_from(["approve", "edit", "reject", "respond", "bogus"]) | values},
    optional={
        "message": st.text(max_size=20) | values,
        "edited_action": st.fixed_dictionaries(
            {
                "name": st.sampled_from(["send", "ask", "nope"]),
                "args": values | st.just({"to": "cy", "amount": 3}),
            }
        )
        | values,
        "extra": values,
    },
)
answers = (
    values
    | decision
    | st.fixed_dictionaries({"decisions": st.lists(decision, max_size=3) | values})
    | st.just(_deep(300))
    | st.just({"decisions": [{"type": "reject", "message": _deep(300)}]})
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["batched", "per_call", "custom", "outcome_unknown"]), answer=answers)
def test_a_random_answer_is_applied_as_stored_or_refused_with_nothing_changed(kind: str, answer: Any) -> None:
    agent, got = _paused(kind)
    pending = agent.get_state(config()).interrupts[0]
    before = events_of(agent)
    ran_before = list(got)
    try:
        result = agent.invoke(Command(resume={pending.id: answer}), config())
    except ValueError as exc:
        assert len(str(exc)) < 2000
        assert events_of(agent) == before and got == ran_before
        assert agent.get_state(config()).interrupts[0].id == pending.id
        agent.invoke(Command(resume={pending.id: _valid(kind)}), config())  # still answerable
        return
    # applied: what a fresh process reads from the store is what this one applied
    fresh = create_agent(ScriptedModel([]), [], checkpointer=agent.checkpointer)
    assert fresh.get_state(config()).values == agent.get_state(config()).values
    assert fresh.get_state(config()).values["messages"] == result["messages"]
    (answered,) = [e for e in fresh.get_audit_trail(config()) if e.event == "answered"][-1:]
    if kind == "custom":
        assert ("ask", answered.value) in got  # the tool received exactly the stored answer
    assert fresh.verify_audit(config()).ok
