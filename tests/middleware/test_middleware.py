"""Writing middleware: the six hooks, their order, async twins and state_schema (SPEC §2)."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest

from handrail import (
    AgentMiddleware,
    AIMessage,
    Command,
    InMemorySaver,
    ModelResponse,
    ScriptedModel,
    ToolMessage,
    create_agent,
)

from _support import AgentFactory, Ledger, call, config, turn


class Recorder(AgentMiddleware):
    """Logs every hook into a shared list."""

    def __init__(self, label: str, log: list[str]) -> None:
        self.name = label
        self.log = log

    def before_agent(self, state: dict[str, Any], runtime: Any) -> None:
        self.log.append(f"{self.name}.before_agent")

    def before_model(self, state: dict[str, Any], runtime: Any) -> None:
        self.log.append(f"{self.name}.before_model")

    def after_model(self, state: dict[str, Any], runtime: Any) -> None:
        self.log.append(f"{self.name}.after_model")

    def after_agent(self, state: dict[str, Any], runtime: Any) -> None:
        self.log.append(f"{self.name}.after_agent")

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        self.log.append(f"{self.name}.wrap_model_call>")
        response = handler(request)
        self.log.append(f"{self.name}.wrap_model_call<")
        return response

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        self.log.append(f"{self.name}.wrap_tool_call>")
        result = handler(request)
        self.log.append(f"{self.name}.wrap_tool_call<")
        return result


def _run_with(middleware: list[AgentMiddleware], spec_tools: list, script: list | None = None) -> Any:
    agent = create_agent(
        ScriptedModel(script or [turn(call("read_data", table="t")), {"content": "done"}]),
        spec_tools,
        middleware=middleware,
        checkpointer=InMemorySaver(),
    )
    return agent, agent.invoke({"messages": "go"}, config())


EXPECTED_ORDER = [
    "A.before_agent",
    "B.before_agent",
    "A.before_model",
    "B.before_model",
    "A.wrap_model_call>",
    "B.wrap_model_call>",
    "B.wrap_model_call<",
    "A.wrap_model_call<",
    "B.after_model",
    "A.after_model",
    "A.wrap_tool_call>",
    "B.wrap_tool_call>",
    "B.wrap_tool_call<",
    "A.wrap_tool_call<",
    "A.before_model",
    "B.before_model",
    "A.wrap_model_call>",
    "B.wrap_model_call>",
    "B.wrap_model_call<",
    "A.wrap_model_call<",
    "B.after_model",
    "A.after_model",
    "B.after_agent",
    "A.after_agent",
]


def test_hooks_run_in_the_documented_order(spec_tools: list) -> None:
    """before_* in list order, after_* in reverse, wrap_* with the first middleware outermost."""
    log: list[str] = []
    _run_with([Recorder("A", log), Recorder("B", log)], spec_tools)
    assert log == EXPECTED_ORDER


class AsyncRecorder(AgentMiddleware):
    """Only async twins."""

    def __init__(self, label: str, log: list[str]) -> None:
        self.name = label
        self.log = log

    async def abefore_agent(self, state: dict[str, Any], runtime: Any) -> None:
        self.log.append(f"{self.name}.before_agent")

    async def abefore_model(self, state: dict[str, Any], runtime: Any) -> None:
        self.log.append(f"{self.name}.before_model")

    async def aafter_model(self, state: dict[str, Any], runtime: Any) -> None:
        self.log.append(f"{self.name}.after_model")

    async def aafter_agent(self, state: dict[str, Any], runtime: Any) -> None:
        self.log.append(f"{self.name}.after_agent")

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        self.log.append(f"{self.name}.wrap_model_call>")
        response = await handler(request)
        self.log.append(f"{self.name}.wrap_model_call<")
        return response

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        self.log.append(f"{self.name}.wrap_tool_call>")
        result = await handler(request)
        self.log.append(f"{self.name}.wrap_tool_call<")
        return result


async def test_async_twins_run_in_async_runs_in_the_same_order(spec_tools: list) -> None:
    log: list[str] = []
    agent = create_agent(
        ScriptedModel([turn(call("read_data", table="t")), {"content": "done"}]),
        spec_tools,
        middleware=[AsyncRecorder("A", log), Recorder("B", log)],
        checkpointer=InMemorySaver(),
    )
    await agent.ainvoke({"messages": "go"}, config())
    assert log == EXPECTED_ORDER


def test_async_only_middleware_also_works_in_sync_runs(spec_tools: list) -> None:
    log: list[str] = []
    _run_with([Recorder("A", log), AsyncRecorder("B", log)], spec_tools)
    assert log == EXPECTED_ORDER


def test_name_defaults_to_the_class_name_and_a_subclass_may_set_its_own() -> None:
    class Plain(AgentMiddleware):
        pass

    class Named(AgentMiddleware):
        name = "audit"

    assert Plain().name == "Plain"
    assert Named().name == "audit"


class CounterState(TypedDict):
    model_calls: int
    seen_tools: Annotated[list[str], operator.add]
    _scratch: str


class Counter(AgentMiddleware):
    state_schema = CounterState

    def before_model(self, state: dict[str, Any], runtime: Any) -> dict[str, Any]:
        return {"model_calls": state.get("model_calls", 0) + 1, "_scratch": "private"}

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        return handler(request)

    def after_model(self, state: dict[str, Any], runtime: Any) -> dict[str, Any] | None:
        message = state["messages"][-1]
        if message.tool_calls:
            return {"seen_tools": [tc["name"] for tc in message.tool_calls]}
        return None


def test_state_schema_adds_keys_with_reducers_and_private_keys(spec_tools: list) -> None:
    agent, result = _run_with(
        [Counter()],
        spec_tools,
        [turn(call("read_data", table="a")), turn(call("read_data", table="b")), {"content": "done"}],
    )
    assert result["model_calls"] == 3
    assert result["seen_tools"] == ["read_data", "read_data"]  # Annotated reducer: lists add up
    assert "_scratch" not in result
    assert "_scratch" not in agent.get_state(config()).values


def test_state_schema_keys_are_accepted_as_input(spec_tools: list) -> None:
    agent = create_agent(
        ScriptedModel([{"content": "x"}]), spec_tools, middleware=[Counter()], checkpointer=InMemorySaver()
    )
    result = agent.invoke({"messages": "go", "model_calls": 10}, config())
    assert result["model_calls"] == 11


def test_unknown_keys_returned_by_a_hook_are_refused(spec_tools: list) -> None:
    class Sloppy(AgentMiddleware):
        def before_model(self, state: dict[str, Any], runtime: Any) -> dict[str, Any]:
            return {"undeclared": 1}

    agent = create_agent(
        ScriptedModel([{"content": "x"}]), spec_tools, middleware=[Sloppy()], checkpointer=InMemorySaver()
    )
    with pytest.raises(
        ValueError, match=r"step 'Sloppy.before_model' returned unknown state key\(s\) \['undeclared'\]"
    ):
        agent.invoke({"messages": "go"}, config())


def test_wrap_model_call_can_change_the_request_and_the_response(spec_tools: list) -> None:
    class Brief(AgentMiddleware):
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            response = handler(request.override(system_prompt="Be brief."))
            message = response.message
            return AIMessage(message.content.upper(), id=message.id)

    model = ScriptedModel([{"content": "hello there"}])
    agent = create_agent(
        model, spec_tools, middleware=[Brief()], system_prompt="Be verbose.", checkpointer=InMemorySaver()
    )
    result = agent.invoke({"messages": "hi"}, config())
    assert result["messages"][-1].content == "HELLO THERE"
    assert model.calls[0][0].type == "system" and model.calls[0][0].content == "Be brief."


def test_wrap_model_call_may_return_a_model_response(spec_tools: list) -> None:
    class Canned(AgentMiddleware):
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            return ModelResponse(result=[AIMessage("from cache")])

    model = ScriptedModel([])
    agent = create_agent(model, spec_tools, middleware=[Canned()], checkpointer=InMemorySaver())
    assert agent.invoke({"messages": "hi"}, config())["messages"][-1].content == "from cache"
    assert model.calls == []


def test_wrap_tool_call_can_short_circuit_and_retry(spec_tools: list, ledger: Ledger) -> None:
    class Cache(AgentMiddleware):
        def wrap_tool_call(self, request: Any, handler: Any) -> Any:
            if request.tool_call["args"].get("table") == "cached":
                return ToolMessage("from cache", tool_call_id=request.tool_call["id"])
            return handler(request)

    _run_with(
        [Cache()],
        spec_tools,
        [turn(call("read_data", table="cached"), call("read_data", table="live")), {"content": "ok"}],
    )
    assert ledger.calls == [("read_data", {"table": "live", "limit": 10})]


def test_a_wrap_hook_returning_the_wrong_type_is_an_error(spec_tools: list) -> None:
    class Broken(AgentMiddleware):
        def wrap_tool_call(self, request: Any, handler: Any) -> Any:
            return "not a message"

    with pytest.raises(TypeError, match="wrap_tool_call must return a ToolMessage, got str"):
        _run_with([Broken()], spec_tools)


def test_jump_to_end_skips_the_rest_of_the_loop(spec_tools: list, ledger: Ledger) -> None:
    class Stop(AgentMiddleware):
        def after_model(self, state: dict[str, Any], runtime: Any) -> dict[str, Any]:
            return {"jump_to": "end"}

    agent, result = _run_with([Stop()], spec_tools)
    assert ledger.calls == []
    assert result["messages"][-1].type == "ai"
    assert agent.get_state(config()).next == ()


def test_bad_jump_target_is_refused(spec_tools: list) -> None:
    class Lost(AgentMiddleware):
        def before_model(self, state: dict[str, Any], runtime: Any) -> dict[str, Any]:
            return {"jump_to": "moon"}

    with pytest.raises(ValueError, match="jump_to='moon'; expected one of"):
        _run_with([Lost()], spec_tools)


def test_runtime_carries_thread_context_and_reviewer(spec_tools: list) -> None:
    seen: list[Any] = []

    class Peek(AgentMiddleware):
        def before_agent(self, state: dict[str, Any], runtime: Any) -> None:
            seen.append((runtime.thread_id, runtime.context, runtime.step))

    agent = create_agent(
        ScriptedModel([{"content": "x"}]), spec_tools, middleware=[Peek()], checkpointer=InMemorySaver()
    )
    agent.invoke({"messages": "go"}, {"configurable": {"thread_id": "ctx"}, "context": {"user": "ada"}})
    assert seen == [("ctx", {"user": "ada"}, "Peek.before_agent")]


def test_middleware_tools_join_the_agent(spec_tools: list, make_agent: AgentFactory) -> None:
    from handrail import tool

    @tool
    def extra() -> str:
        """An extra tool."""
        return "extra!"

    class WithTool(AgentMiddleware):
        tools = [extra]

    agent = create_agent(
        ScriptedModel([turn(call("extra")), {"content": "ok"}]),
        spec_tools,
        middleware=[WithTool()],
        checkpointer=InMemorySaver(),
    )
    assert "extra" in agent.tools
    assert agent.invoke({"messages": "go"}, config())["messages"][2].content == "extra!"


def test_hitl_decision_applies_inside_other_wrappers(
    spec_tools: list, ledger: Ledger, make_agent: AgentFactory
) -> None:
    """HITL placed after another wrapper: the outer wrapper sees the request, HITL applies the edit."""
    log: list[str] = []
    agent = make_agent(
        [turn(call("write_file", path="a", content="b")), {"content": "ok"}], middleware=[Recorder("R", log)]
    )
    agent.invoke({"messages": "go"}, config())
    edit = {"type": "edit", "edited_action": {"name": "write_file", "args": {"path": "z", "content": "q"}}}
    agent.invoke(Command(resume={"decisions": [edit]}), config())
    assert ledger.calls == [("write_file", {"path": "z", "content": "q"})]
    assert "R.wrap_tool_call>" in log


def test_an_answer_saved_for_a_review_applies_even_if_the_policy_changed_since(
    make_agent: AgentFactory, ledger: Ledger
) -> None:
    """Rule 5: an answer is checked against the review it answers, once, before it is saved.

    When the step runs again on resume it uses that checked answer: an agent whose policy
    no longer allows editing (a redeploy between the pause and the answer) still applies
    the edit the reviewer was offered and chose.
    """
    saver = InMemorySaver()
    script = [turn(call("write_file", path="a.txt", content="draft")), {"content": "done"}]
    before = make_agent(script, policy={"write_file": True}, checkpointer=saver)
    before.invoke({"messages": "go"}, config())
    edit = {
        "type": "edit",
        "edited_action": {"name": "write_file", "args": {"path": "b.txt", "content": "x"}},
    }
    after = make_agent(  # another process: its model picks up where the first one stopped
        script[1:], policy={"write_file": {"allowed_decisions": ["approve", "reject"]}}, checkpointer=saver
    )
    result = after.invoke(Command(resume={"decisions": [edit]}), config())
    assert result["messages"][-1].content == "done"
    assert ledger.calls == [("write_file", {"path": "b.txt", "content": "x"})]
