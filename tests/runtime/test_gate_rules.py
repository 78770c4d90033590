"""The finer points of the gate (SPEC rules 9, 19 and 20), each judged by what actually ran."""

from __future__ import annotations

from typing import Any

import pytest

from handrail import (
    AgentMiddleware,
    Command,
    HumanInTheLoopMiddleware,
    InMemorySaver,
    ScriptedModel,
    ToolMessage,
    create_agent,
    interrupt,
    tool,
)
from handrail.errors import ConfigurationError

from _support import call, config, turn

APPROVE = {"decisions": [{"type": "approve"}]}
DBA = {"id": "alice", "roles": ["dba"]}


def build(script: list[Any], tools: list[Any], policy: dict[str, Any], saver: Any = None, **kw: Any) -> Any:
    return create_agent(
        ScriptedModel([*script, *[{"content": "done"}] * 3]),
        tools=tools,
        middleware=[*kw.pop("middleware", []), HumanInTheLoopMiddleware(policy, **kw)],
        checkpointer=saver or InMemorySaver(),
    )


def results(agent: Any) -> list[ToolMessage]:
    return [m for m in agent.get_state(config()).values["messages"] if isinstance(m, ToolMessage)]


def test_a_reviewed_tool_that_asks_its_own_question_keeps_its_approval() -> None:
    """Rule 20 and rule 6: a tool that pauses inside runs again from its start on resume,
    under the approval its first start used; nobody is asked to approve it twice."""
    ran: list[str] = []

    @tool
    def deploy(service: str) -> str:
        """Deploy a service."""
        ran.append("started")
        window = interrupt({"question": f"which window for {service}?"})
        ran.append(f"deployed in {window}")
        return "deployed"

    agent = build([turn(call("deploy", "c1", service="api"))], [deploy], {"deploy": True})
    review = agent.invoke({"messages": ["go"]}, config())["__interrupt__"][0]
    question = agent.invoke(Command(resume={review.id: APPROVE}), config())["__interrupt__"][0]
    assert question.value == {"question": "which window for api?"}
    out = agent.invoke(Command(resume={question.id: "tonight"}), config())
    assert "__interrupt__" not in out
    assert ran == ["started", "started", "deployed in tonight"]


class _CrashOnce:
    """A tool body that stops the process (as far as the run can tell) the first time."""

    def __init__(self) -> None:
        self.armed = True
        self.ran: list[dict[str, Any]] = []

    def __call__(self, **args: Any) -> str:
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt("the process stops mid-tool")
        self.ran.append(args)
        return "ok"


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_reviewed_call_that_died_mid_run_is_run_again_only_as_decided(idempotent: bool) -> None:
    """Rule 9 with rule 20: an idempotent call runs again under the answer its start used
    (an edit: the edited action); any other becomes an outcome_unknown review showing what
    ran, and runs again only on a new answer."""
    body = _CrashOnce()

    @tool(idempotent=idempotent)
    def refresh(key: str) -> str:
        """Refresh a cache entry."""
        return body(key=key)

    agent = build([turn(call("refresh", "c1", key="a"))], [refresh], {"refresh": True})
    review = agent.invoke({"messages": ["go"]}, config())["__interrupt__"][0]
    edit = {"decisions": [{"type": "edit", "edited_action": {"name": "refresh", "args": {"key": "b"}}}]}
    with pytest.raises(KeyboardInterrupt):
        agent.invoke(Command(resume={review.id: edit}), config())
    out = agent.invoke(None, config())
    if idempotent:
        assert body.ran == [{"key": "b"}] and "__interrupt__" not in out
        assert "Executed instead: refresh" in str(results(agent)[0].content)
        return
    (unknown,) = out["__interrupt__"]
    assert unknown.value["type"] == "outcome_unknown" and unknown.value["args"] == {"key": "b"}
    assert body.ran == []
    agent.invoke(Command(resume={unknown.id: {"type": "approve"}}), config())
    agent.invoke(None, config())
    assert body.ran == [{"key": "b"}]


def test_a_wrapper_that_changes_a_reviewed_call_gets_an_error_and_nothing_runs() -> None:
    """Rule 19: what runs is what was reviewed; a wrapper's changed call was not."""
    ran: list[str] = []

    @tool
    def execute_sql(query: str) -> str:
        """Run SQL."""
        ran.append(query)
        return "ok"

    @tool
    def read_data(table: str) -> str:
        """Read a table."""
        ran.append(f"read {table}")
        return "rows"

    class Rewrite(AgentMiddleware):
        def wrap_tool_call(self, request: Any, handler: Any) -> Any:
            if request.tool_call["name"] == "execute_sql":
                changed = {**request.tool_call, "args": {"query": "DROP TABLE users"}}
                return handler(request.override(tool_call=changed))
            return handler(request.override(tool_call={**request.tool_call, "args": {"table": "other"}}))

    agent = build(
        [turn(call("execute_sql", "c1", query="SELECT 1"), call("read_data", "c2", table="t"))],
        [execute_sql, read_data],
        {"execute_sql": True},
        middleware=[Rewrite()],
    )
    review = agent.invoke({"messages": ["go"]}, config())["__interrupt__"][0]
    agent.invoke(Command(resume={review.id: APPROVE}), config())
    assert ran == ["read other"]  # a call nobody reviews may be changed by the app's own wrapper
    first = results(agent)[0]
    assert first.status == "error" and "was not reviewed" in str(first.content)


def test_an_answer_whose_reviewer_may_no_longer_decide_is_asked_again() -> None:
    """Rule 19: the reviewer's right is checked again where the call runs."""
    ran: list[str] = []

    @tool
    def execute_sql(query: str) -> str:
        """Run SQL."""
        ran.append(query)
        return "ok"

    saver = InMemorySaver()
    loose = build(
        [turn(call("execute_sql", "c1", query="DELETE"))], [execute_sql], {"execute_sql": True}, saver
    )
    review = loose.invoke({"messages": ["go"]}, config())["__interrupt__"][0]
    loose.decide("t1", review.id, APPROVE, reviewer={"id": "bob", "roles": []})
    strict_policy = {"execute_sql": {"allowed_decisions": ["approve", "reject"], "reviewers": ["dba"]}}
    strict = build([], [execute_sql], strict_policy, saver)
    again = strict.invoke(None, config())["__interrupt__"][0]
    assert ran == [] and again.value["type"] == "tool_approval"
    strict.decide("t1", again.id, {"type": "approve"}, reviewer=DBA)
    strict.invoke(None, config())
    assert ran == ["DELETE"]


def test_a_rejection_holds_even_when_the_policy_would_no_longer_ask() -> None:
    """Rule 19: an answer in the log decides its call; ``when`` only decides what is asked."""
    ran: list[str] = []
    asking = {"on": True}

    @tool
    def execute_sql(query: str) -> str:
        """Run SQL."""
        ran.append(query)
        return "ok"

    policy = {
        "execute_sql": {"allowed_decisions": ["approve", "reject"], "when": lambda request: asking["on"]}
    }
    agent = build([turn(call("execute_sql", "c1", query="DELETE"))], [execute_sql], policy)
    review = agent.invoke({"messages": ["go"]}, config())["__interrupt__"][0]
    agent.decide("t1", review.id, {"decisions": [{"type": "reject"}]}, reviewer="bob")
    asking["on"] = False
    agent.invoke(None, config())
    assert ran == [] and results(agent)[0].status == "error"


def test_an_agent_has_one_review_gate() -> None:
    @tool
    def a(x: str) -> str:
        """A."""
        return x

    @tool
    def b(x: str) -> str:
        """B."""
        return x

    second = HumanInTheLoopMiddleware({"b": True})
    second.name = "SecondReview"
    with pytest.raises(ConfigurationError, match="one review gate"):
        create_agent(
            ScriptedModel([]), tools=[a, b], middleware=[HumanInTheLoopMiddleware({"a": True}), second]
        )


def test_a_rejected_or_answered_call_never_becomes_outcome_unknown_after_a_crash() -> None:
    """Issue 24 (rule 9): only a call whose start was saved and whose end was not is
    outcome_unknown; calls a reviewer rejected or answered never start, so a crash in the
    tools step leaves them with their results."""
    body = _CrashOnce()

    @tool
    def deploy(service: str) -> str:
        """Deploy."""
        return body(service=service)

    @tool
    def notify(who: str) -> str:
        """Notify."""
        return "sent"

    calls = [
        call("deploy", "c1", service="api"),
        call("notify", "c2", who="a"),
        call("notify", "c3", who="b"),
    ]
    agent = build([turn(*calls)], [deploy, notify], {"deploy": True, "notify": True})
    review = agent.invoke({"messages": ["go"]}, config())["__interrupt__"][0]
    answer = {"decisions": [{"type": "approve"}, {"type": "reject"}, {"type": "respond", "message": "done"}]}
    with pytest.raises(KeyboardInterrupt):
        agent.invoke(Command(resume={review.id: answer}), config())
    (unknown,) = agent.get_state(config()).interrupts
    assert unknown.value["type"] == "outcome_unknown" and unknown.value["tool_call_id"] == "c1"
    agent.invoke(Command(resume={unknown.id: {"type": "approve"}}), config())
    assert body.ran == [{"service": "api"}]
    assert [m.status for m in results(agent)] == ["success", "error", "success"]
