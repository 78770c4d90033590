"""Rules 19-20 under random use: a gated call runs only on a matching, authorized answer, once.

A Hypothesis state machine drives one thread with random input, state updates (any keys,
any messages, any tool calls, claimed as any step), forks from random checkpoints and
answers by random reviewers with random roles and edits, in both review modes. The tools
write a ledger of every real execution, and the invariant reads only that ledger and the
answers the agent accepted:

* every execution of a gated tool is authorized by an accepted answer to that call id,
  whose reviewer may decide the tool that ran, and which approved exactly what ran (the
  call as the reviewer saw it, or the action an edit named);
* no accepted answer authorizes more than one execution (so no replay, fork or retry
  runs a call twice on one answer).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from handrail import (
    AIMessage,
    Command,
    HumanInTheLoopMiddleware,
    InMemorySaver,
    ScriptedModel,
    ToolMessage,
    ToolRuntime,
    create_agent,
    tool,
)
from handrail.errors import HandrailError

GATED = {"write_file", "execute_sql"}
POLICY: dict[str, Any] = {
    "write_file": True,
    "execute_sql": {"allowed_decisions": ["approve", "edit", "reject"], "reviewers": ["dba"]},
    "read_data": False,
}
REVIEWERS = [
    {"id": "alice", "roles": ["dba"]},
    {"id": "bob", "roles": []},
    {"id": "carol", "roles": ["ops"]},
    "dave",
    None,
]
TOOL_NAMES = ["write_file", "execute_sql", "read_data", "no_such_tool"]
CONFIG = {"configurable": {"thread_id": "t"}}

texts = st.sampled_from(["a", "b", "DROP TABLE users", ""])
tool_args = st.fixed_dictionaries(
    {}, optional={"path": texts, "content": texts, "query": texts, "table": texts}
)


def args_for(name: str, draw: Any) -> dict[str, Any]:
    if name == "write_file":
        return {"path": draw(texts), "content": draw(texts)}
    if name == "execute_sql":
        return {"query": draw(texts)}
    if name == "read_data":
        return {"table": draw(texts)}
    return dict(draw(tool_args))


def may_decide(reviewer: Any, name: str) -> bool:
    if name != "execute_sql":
        return True
    return isinstance(reviewer, dict) and "dba" in reviewer["roles"]


class GateMachine(RuleBasedStateMachine):
    mode = "batched"

    def __init__(self) -> None:
        super().__init__()
        self.ran: list[tuple[str, str, dict[str, Any]]] = []  # (call id, tool, args)
        self.turns: list[dict[str, Any]] = []
        self.ids = itertools.count()
        ran = self.ran

        def record(name: str, args: dict[str, Any], runtime: ToolRuntime) -> str:
            ran.append((str(runtime.tool_call_id), name, args))
            return "ok"

        @tool
        def write_file(path: str, content: str, runtime: ToolRuntime) -> str:
            """Write."""
            return record("write_file", {"path": path, "content": content}, runtime)

        @tool
        def execute_sql(query: str, runtime: ToolRuntime) -> str:
            """SQL."""
            return record("execute_sql", {"query": query}, runtime)

        @tool
        def read_data(table: str, runtime: ToolRuntime) -> str:
            """Read."""
            return record("read_data", {"table": table}, runtime)

        def model(messages: list[Any]) -> dict[str, Any]:
            return self.turns.pop(0) if self.turns else {"content": "done"}

        self.agent = create_agent(
            ScriptedModel([model] * 10_000),
            tools=[write_file, execute_sql, read_data],
            middleware=[HumanInTheLoopMiddleware(POLICY, interrupt_mode=self.mode)],  # type: ignore[arg-type]
            checkpointer=InMemorySaver(),
        )
        # every accepted answer: (call id, what it lets run or None, reviewer)
        self.answers: list[tuple[str, tuple[str, dict[str, Any]] | None, Any]] = []

    # Actions ---------------------------------------------------------------------------
    def new_calls(self, draw: Any) -> list[dict[str, Any]]:
        calls = []
        for _ in range(draw(st.integers(1, 3))):
            name = draw(st.sampled_from(TOOL_NAMES))
            calls.append({"name": name, "args": args_for(name, draw), "id": f"c{next(self.ids)}"})
        return calls

    def attempt(self, action: Any) -> Any:
        try:
            return action()
        except (HandrailError, ValueError, PermissionError):
            return None  # refused: the invariant still holds on what ran

    @rule(data=st.data())
    def send_input(self, data: st.DataObject) -> None:
        self.turns = [{"content": "", "tool_calls": self.new_calls(data.draw)}]
        self.attempt(lambda: self.agent.invoke({"messages": ["go"]}, CONFIG))

    @rule()
    def continue_run(self) -> None:
        self.attempt(lambda: self.agent.invoke(None, CONFIG))

    @rule(data=st.data())
    def answer(self, data: st.DataObject) -> None:
        pending = self.agent.get_state(CONFIG).interrupts
        if not pending:
            return
        interrupt = data.draw(st.sampled_from(pending))
        value = interrupt.value
        asked = value.get("action_requests", [value])
        reviewer = data.draw(st.sampled_from(REVIEWERS))
        decisions = []
        for _ in asked:
            kind = data.draw(st.sampled_from(["approve", "reject", "respond", "edit"]))
            if kind == "edit":
                name = data.draw(st.sampled_from(TOOL_NAMES))
                decisions.append(
                    {"type": "edit", "edited_action": {"name": name, "args": args_for(name, data.draw)}}
                )
            elif kind == "respond":
                decisions.append({"type": "respond", "message": "done by hand"})
            else:
                decisions.append({"type": kind})
        answer = {"decisions": decisions} if "action_requests" in value else decisions[0]
        how = data.draw(st.sampled_from(["decide", "resume"]))
        if how == "decide":
            done = self.attempt(
                lambda: self.agent.decide("t", interrupt.id, answer, reviewer=reviewer or "x")
            )
            reviewer = reviewer or "x"
        else:
            config = {"configurable": {"thread_id": "t", "reviewer": reviewer}}
            done = self.attempt(
                lambda: self.agent.invoke(Command(resume={interrupt.id: answer}), config) or True
            )
        if done is None:
            return
        for request, decision in zip(asked, decisions, strict=True):
            seen = (request["name"], request["args"])
            lets = {"approve": seen, "edit": None}.get(decision["type"], ())
            if decision["type"] == "edit":
                action = decision["edited_action"]
                lets = (action["name"], action["args"])
            self.answers.append((request["tool_call_id"], lets or None, reviewer))

    @rule(data=st.data())
    def update(self, data: st.DataObject) -> None:
        state = self.agent.get_state(CONFIG)
        messages = state.values.get("messages", [])
        last_ai = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        kind = data.draw(st.sampled_from(["replace_ai", "tool_message", "private", "new_ai"]))
        values: dict[str, Any]
        if kind == "replace_ai" and last_ai is not None:
            calls = self.new_calls(data.draw)
            if data.draw(st.booleans()) and last_ai.tool_calls:  # keep an id a review may have answered
                calls[0]["id"] = last_ai.tool_calls[0]["id"]
            values = {"messages": [AIMessage("", id=last_ai.id, tool_calls=calls)]}
        elif kind == "tool_message" and last_ai is not None and last_ai.tool_calls:
            call = data.draw(st.sampled_from(last_ai.tool_calls))
            values = {"messages": [ToolMessage("faked", tool_call_id=call["id"], name=call["name"])]}
        elif kind == "private":
            values = {"_hitl_decisions": {"by_call": {}}}
        else:
            values = {"messages": [AIMessage("", tool_calls=self.new_calls(data.draw))]}
        as_node = data.draw(st.sampled_from([None, "model", "HumanInTheLoopMiddleware.after_model", "tools"]))
        how = data.draw(st.sampled_from(["update_state", "command"]))
        if how == "update_state":
            self.attempt(lambda: self.agent.update_state(CONFIG, values, as_node=as_node))
        else:
            self.attempt(lambda: self.agent.invoke(Command(update=values), CONFIG))

    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        history = self.attempt(lambda: list(self.agent.get_state_history(CONFIG)))
        if not history:
            return
        snapshot = data.draw(st.sampled_from(history))
        config = {"configurable": {"thread_id": "t", **snapshot.config["configurable"]}}
        self.attempt(lambda: self.agent.invoke(None, config))

    # The promise ------------------------------------------------------------------------
    @invariant()
    def gated_calls_run_only_on_their_own_answers_once(self) -> None:
        budget: dict[tuple[str, str, str], int] = {}
        for call_id, lets, reviewer in self.answers:
            if lets is not None and may_decide(reviewer, lets[0]):
                key = (call_id, lets[0], repr(sorted(lets[1].items())))
                budget[key] = budget.get(key, 0) + 1
        for call_id, name, args in self.ran:
            if name not in GATED:
                continue
            key = (call_id, name, repr(sorted(args.items())))
            assert budget.get(key, 0) > 0, f"{name}{args} ran as {call_id} without an answer that allows it"
            budget[key] -= 1


class PerCallGateMachine(GateMachine):
    mode = "per_call"


SETTINGS = settings(
    max_examples=60, stateful_step_count=25, deadline=None, suppress_health_check=list(HealthCheck)
)


@pytest.mark.parametrize("machine", [GateMachine, PerCallGateMachine], ids=["batched", "per_call"])
def test_gated_calls_run_only_on_a_matching_authorized_answer_and_once(machine: type[GateMachine]) -> None:
    """Rules 19 and 20, judged by the ledger the tools write."""
    machine.TestCase.settings = SETTINGS
    machine.TestCase().runTest()
