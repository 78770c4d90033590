"""Defects found by fault injection (issue 12), each shown the way it broke.

Rule 9 with several calls in one step; rules 5 and 9 for answers the runtime could not
apply; rule 5 for answers JSON cannot hold exactly.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from handrail import (
    Command,
    HumanInTheLoopMiddleware,
    InMemorySaver,
    ScriptedModel,
    SqliteSaver,
    create_agent,
    interrupt,
    tool,
)
from handrail.checkpoint.base import Append
from handrail.errors import InvalidDecisionError

from _support import config, events_of, resealed, turn

needs_fork = pytest.mark.skipif(sys.platform == "win32", reason="uses fork")


def _die_in_first_charge(tmp_path: Path, mode: str) -> tuple[Any, Path]:
    """Approve two charges; the process running them dies (``os._exit``) inside the first.

    Returns a factory of fresh agents on the same store, and the ledger file where every
    real execution of ``charge`` is written (outside the store, as the world would see it).
    """
    db = tmp_path / "threads.db"
    ledger = tmp_path / "ledger.txt"
    ledger.touch()

    @tool
    def charge(card: str) -> str:
        """Charge a card (not idempotent)."""
        with ledger.open("a") as out:
            out.write(card + "\n")
        if os.environ.get("HR_DIE_IN_CHARGE") == "1":
            os._exit(9)  # no finally, no flush: the process is gone
        return f"charged {card}"

    calls = [
        {"name": "charge", "args": {"card": "A"}, "id": "a"},
        {"name": "charge", "args": {"card": "B"}, "id": "b"},
    ]

    def make(script: list[Any]) -> Any:
        return create_agent(
            ScriptedModel(script),
            [charge],
            middleware=[HumanInTheLoopMiddleware({"charge": True}, interrupt_mode=mode)],  # type: ignore[arg-type]
            checkpointer=SqliteSaver(db),
        )

    paused = make([turn(*calls)]).invoke({"messages": "charge both"}, config())["__interrupt__"]
    if mode == "batched":
        resume: Any = {paused[0].id: {"decisions": [{"type": "approve"}, {"type": "approve"}]}}
    else:
        resume = {p.id: {"type": "approve"} for p in paused}
    pid = os.fork()
    if pid == 0:  # the child: resume, and die inside charge("A")
        os.environ["HR_DIE_IN_CHARGE"] = "1"
        try:
            make([{"content": "never"}]).invoke(Command(resume=resume), config())
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 9
    return make, ledger


@needs_fork
@pytest.mark.parametrize("mode", ["batched", "per_call"])
def test_every_unfinished_call_of_a_step_gets_its_own_outcome_unknown_review(
    tmp_path: Path, mode: str
) -> None:
    """Rule 9: two approved calls, the process dies in the first: two reviews, none re-run."""
    make, ledger = _die_in_first_charge(tmp_path, mode)
    fresh = make([{"content": "done"}])
    reviews = fresh.get_state(config()).interrupts
    assert sorted(r.value["tool_call_id"] for r in reviews) == ["a", "b"]
    assert all(r.value["type"] == "outcome_unknown" for r in reviews)
    assert len({r.id for r in reviews}) == 2
    assert [r.id for r in fresh.get_state(config()).interrupts] == [r.id for r in reviews]  # stable

    again = fresh.invoke(None, config())
    assert ledger.read_text().split() == ["A"], "invoke(None) ran a non-idempotent call again"
    assert sorted(i.value["tool_call_id"] for i in again["__interrupt__"]) == ["a", "b"]


@needs_fork
@pytest.mark.parametrize("mode", ["batched", "per_call"])
def test_answering_each_outcome_unknown_review_runs_only_what_was_approved(tmp_path: Path, mode: str) -> None:
    """Rule 9: respond to "a" (it went through), approve "b" (it never started): B runs once."""
    make, ledger = _die_in_first_charge(tmp_path, mode)
    fresh = make([{"content": "done"}])
    reviews = {r.value["tool_call_id"]: r for r in fresh.get_state(config()).interrupts}
    result = fresh.invoke(
        Command(
            resume={
                reviews["a"].id: {"type": "respond", "message": "receipt 17"},
                reviews["b"].id: {"type": "approve"},
            }
        ),
        config(),
    )
    assert ledger.read_text().split() == ["A", "B"]
    tools = [m for m in result["messages"] if m.type == "tool"]
    assert [(m.tool_call_id, m.content) for m in tools] == [("a", "receipt 17"), ("b", "charged B")]
    assert result["messages"][-1].content == "done"


# Rules 5 and 9: an answer the runtime cannot apply is refused before it is saved -------------
class Crash(BaseException):
    """Stands in for a run that stopped inside a tool without saving its result."""


def _unknown_outcome() -> tuple[Any, list[str]]:
    """A thread whose one approved call began and never finished (its run is gone)."""
    ran: list[str] = []

    @tool
    def refund(order: str) -> str:
        """Refund an order."""
        ran.append(order)
        if len(ran) == 1:
            raise Crash()
        return f"refunded {order}"

    agent = create_agent(
        ScriptedModel([turn({"name": "refund", "args": {"order": "7"}, "id": "r"}), {"content": "done"}]),
        [refund],
        middleware=[HumanInTheLoopMiddleware({"refund": True})],
        checkpointer=InMemorySaver(),
    )
    agent.invoke({"messages": "refund 7"}, config())
    with pytest.raises(Crash):
        agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    return agent, ran


def test_an_empty_respond_to_outcome_unknown_is_a_result_and_the_thread_moves_on() -> None:
    """Rules 5 and 9: ``respond`` with "" used to be saved and then wedge the thread (KeyError)."""
    agent, ran = _unknown_outcome()
    (review,) = agent.get_state(config()).interrupts
    result = agent.invoke(Command(resume={review.id: {"type": "respond", "message": ""}}), config())
    tool_message = result["messages"][2]
    assert (tool_message.tool_call_id, tool_message.content, tool_message.status) == ("r", "", "success")
    assert result["messages"][-1].content == "done"
    assert ran == ["7"]


def test_a_saved_respond_without_its_message_never_wedges_the_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 9: a store may hold ``{"type": "respond"}`` from an older handrail; it still moves."""
    from handrail.runtime import _rules as rules

    agent, _ = _unknown_outcome()
    (review,) = agent.get_state(config()).interrupts
    monkeypatch.setattr(rules, "check_outcome_decision", lambda answer: {"type": "respond"})
    result = agent.invoke(Command(resume={review.id: {"type": "respond", "message": ""}}), config())
    assert result["messages"][2].content == ""
    assert agent.invoke(None, config())["messages"][-1].content == "done"


def _asker() -> tuple[Any, list[Any]]:
    got: list[Any] = []

    @tool
    def ask(question: str) -> str:
        """Ask the user."""
        answer = interrupt({"question": question})
        got.append(answer)
        return str(answer)

    agent = create_agent(
        ScriptedModel([turn({"name": "ask", "args": {"question": "ok?"}, "id": "q"}), {"content": "thanks"}]),
        [ask],
        checkpointer=InMemorySaver(),
    )
    agent.invoke({"messages": "ask me"}, config())
    return agent, got


def _deep(levels: int) -> Any:
    value: Any = "yes"
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    "answer",
    [
        {1: "yes"},
        {"yes"},
        b"yes",
        float("nan"),
        {"amount": float("inf")},
        [float("-inf")],
        2**70,
        _deep(1000),
        {"decisions": _deep(1000)},
    ],
    ids=["int-key", "set", "bytes", "nan", "inf", "minus-inf", "huge-int", "deep", "deep-decisions"],
)
def test_an_answer_json_cannot_hold_exactly_is_refused_with_a_value_error(answer: Any) -> None:
    """Rule 5: a ValueError subclass, the thread unchanged, the same interrupt answerable."""
    agent, got = _asker()
    (pending,) = agent.get_state(config()).interrupts
    before = events_of(agent)
    with pytest.raises(InvalidDecisionError, match="cannot be stored as given") as caught:
        agent.invoke(Command(resume={pending.id: answer}), config())
    assert len(str(caught.value)) < 500
    assert events_of(agent) == before and got == []
    done = agent.invoke(Command(resume={pending.id: "yes"}), config())
    assert got == ["yes"] and done["messages"][-1].content == "thanks"


def test_decisions_nested_a_thousand_deep_are_refused_by_the_review_middleware_too() -> None:
    """Rule 5: no RecursionError from building an error message."""
    agent, _ = _unknown_outcome()
    (review,) = agent.get_state(config()).interrupts
    with pytest.raises(InvalidDecisionError):
        agent.invoke(Command(resume={review.id: {"type": _deep(1000)}}), config())
    with pytest.raises(InvalidDecisionError):
        agent.invoke(Command(resume={review.id: {"type": "reject", "message": _deep(30)}}), config())


def test_what_a_tool_receives_is_what_was_saved() -> None:
    """Defect 5: an answer is applied as it loads back, so the audit shows what was applied."""
    agent, got = _asker()
    (pending,) = agent.get_state(config()).interrupts
    agent.invoke(Command(resume={pending.id: {"pick": ("a", 1.5), "n": 10**18}}), config())
    assert got == [{"pick": ["a", 1.5], "n": 10**18}]
    (answered,) = [e for e in agent.get_audit_trail(config()) if e.event == "answered"]
    assert answered.interrupt_id == pending.id and answered.value == got[0]


# Rule 10: a record that passes its hash but holds nonsense still fails as SerializationError ----
def _reviewed_log() -> tuple[Any, list[Any], Any]:
    agent, _ = _asker()
    (pending,) = agent.get_state(config()).interrupts
    agent.invoke(Command(resume={pending.id: "yes"}), config())
    read = agent.checkpointer.read("t1")
    return agent, list(read.events), read.record


def _stored_again(rows: list[Any], record: Any) -> Any:
    store = InMemorySaver()
    store.append("t1", Append(resealed("t1", rows), expected_seq=0, record=record))
    return create_agent(ScriptedModel([]), [], checkpointer=store)


def test_a_finished_tool_record_without_its_message_type_fails_as_a_serialization_error() -> None:
    """Defect 7: it used to raise AttributeError from get_audit_trail."""
    from dataclasses import replace

    from handrail.checkpoint.integrity import unseal
    from handrail.errors import SerializationError

    _, rows, record = _reviewed_log()
    index = next(i for i, r in enumerate(rows) if r.kind == "tool_finished")
    body = unseal(rows[index].payload)[1]
    assert b'"__hr__":"tool",' in body
    rows[index] = replace(rows[index], payload=body.replace(b'"__hr__":"tool",', b""))
    agent = _stored_again(rows, record)
    for read in (agent.get_audit_trail, agent.get_state, lambda c: list(agent.get_state_history(c))):
        with pytest.raises(SerializationError, match=f"thread 't1', record {rows[index].seq}"):
            read(config())


@pytest.mark.parametrize("when", [float("inf"), 1e300, -1e18, float("nan")])
def test_an_impossible_stored_time_fails_as_a_serialization_error(when: float) -> None:
    """Defect 7: such times used to raise OverflowError, OSError or ValueError."""
    from dataclasses import replace

    from handrail.errors import SerializationError

    _, rows, record = _reviewed_log()
    rows = [replace(r, created_at=when) for r in rows]
    agent = _stored_again(rows, record)
    for read in (agent.get_audit_trail, agent.get_state):
        with pytest.raises(SerializationError, match="thread 't1', record"):
            read(config())


def test_an_impossible_time_of_a_pending_review_fails_as_a_serialization_error() -> None:
    from dataclasses import replace

    from handrail.errors import SerializationError

    agent, _ = _asker()
    read = agent.checkpointer.read("t1")
    (review,) = read.record.pending
    record = replace(read.record, pending=(replace(review, created_at=float("inf")),))
    damaged = _stored_again(list(read.events), record)
    with pytest.raises(SerializationError, match=f"thread 't1', pending interrupt {review.interrupt_id}"):
        damaged.list_interrupts()


def test_an_edited_call_cut_short_is_asked_about_as_it_ran(tmp_path: Path) -> None:
    """Rule 9 with an edit: the process dies inside the edited call (here another tool with
    other arguments); the outcome_unknown review names the call that ran, not the proposal."""
    import json
    import subprocess
    import sys

    script = tmp_path / "run.py"
    db = tmp_path / "threads.db"
    script.write_text(
        "import os, signal, sys\n"
        "from handrail import Command, HumanInTheLoopMiddleware, ScriptedModel, SqliteSaver, create_agent\n"
        "def write_file(path: str) -> str:\n"
        "    '''Write a file.'''\n"
        "    return 'wrote'\n"
        "def shred(path: str) -> str:\n"
        "    '''Shred a file.'''\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return 'never'\n"
        "agent = create_agent(ScriptedModel([{'content': '', 'tool_calls': [{'name': 'write_file', "
        "'args': {'path': 'a'}}]}, {'content': 'done'}]), [write_file, shred], "
        "middleware=[HumanInTheLoopMiddleware({'write_file': True})],\n"
        "    checkpointer=SqliteSaver(sys.argv[1]))\n"
        "config = {'configurable': {'thread_id': 't'}}\n"
        "out = agent.invoke({'messages': ['go']}, config)\n"
        "edit = {'type': 'edit', 'edited_action': {'name': 'shred', 'args': {'path': 'b'}}}\n"
        "agent.invoke(Command(resume={out['__interrupt__'][0].id: {'decisions': [edit]}}), config)\n"
    )
    done = subprocess.run([sys.executable, str(script), str(db)], capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    from handrail import HumanInTheLoopMiddleware, ScriptedModel, SqliteSaver, create_agent

    def write_file(path: str) -> str:
        """Write a file."""
        return "wrote"

    def shred(path: str) -> str:
        """Shred a file."""
        return "shredded"

    agent = create_agent(
        ScriptedModel([{"content": "done"}]),
        [write_file, shred],
        middleware=[HumanInTheLoopMiddleware({"write_file": True})],
        checkpointer=SqliteSaver(db),
    )
    (unknown,) = agent.get_state({"configurable": {"thread_id": "t"}}).interrupts
    assert unknown.value["type"] == "outcome_unknown"
    assert (unknown.value["name"], unknown.value["args"]) == ("shred", {"path": "b"}), json.dumps(
        unknown.value
    )


@needs_fork
def test_a_call_a_grant_let_run_that_dies_mid_tool_is_asked_about_not_run_again(tmp_path: Path) -> None:
    """Rules 9 and 16: a call that ran under a grant, its process killed inside the tool, is an
    ``outcome_unknown`` review afterwards; the grant is not spent again to run it silently."""
    db = tmp_path / "threads.db"
    ledger = tmp_path / "ledger.txt"
    ledger.touch()

    @tool
    def charge(card: str) -> str:
        """Charge a card (not idempotent)."""
        with ledger.open("a") as out:
            out.write(card + "\n")
        if os.environ.get("HR_DIE_IN_CHARGE") == "1":
            os._exit(9)
        return f"charged {card}"

    def make(script: list[Any]) -> Any:
        return create_agent(
            ScriptedModel(script),
            [charge],
            middleware=[HumanInTheLoopMiddleware({"charge": True})],
            checkpointer=SqliteSaver(db),
        )

    first = {"name": "charge", "args": {"card": "A"}, "id": "a"}
    second = {"name": "charge", "args": {"card": "B"}, "id": "b"}
    grant = {"type": "approve", "grant": {"scope": "thread", "uses": 5}}
    make([turn(first)]).invoke({"messages": "charge"}, config())
    make([turn(second), {"content": "ok"}]).invoke(
        Command(resume={"decisions": [grant]}), config(reviewer="bob")
    )
    assert ledger.read_text().split() == ["A", "B"]  # B ran under the grant
    pid = os.fork()
    if pid == 0:  # the child: the next turn's call runs under the grant, and dies inside it
        os.environ["HR_DIE_IN_CHARGE"] = "1"
        try:
            make([turn({"name": "charge", "args": {"card": "C"}, "id": "c"})]).invoke(
                {"messages": "again"}, config()
            )
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 9
    fresh = make([{"content": "done"}])
    again = fresh.invoke(None, config())
    (review,) = again["__interrupt__"]
    assert review.value["type"] == "outcome_unknown" and review.value["tool_call_id"] == "c"
    assert ledger.read_text().split() == ["A", "B", "C"], "the killed call ran again"
    (spent,) = fresh.list_grants()
    assert spent.used == 2  # B and C, once each
