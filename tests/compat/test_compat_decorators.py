"""LangChain's custom-middleware docs, ported: the decorator forms of middleware.

``@before_agent``, ``@before_model``, ``@after_model``, ``@after_agent``,
``@wrap_model_call``, ``@wrap_tool_call`` and ``@dynamic_prompt``, with their
``can_jump_to`` / ``state_schema`` / ``name`` / ``tools`` options, sync and async.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypedDict

import pytest

from handrail import AIMessage, ScriptedModel, SystemMessage, ToolMessage, create_agent, tool
from handrail.errors import ConfigurationError
from handrail.middleware import (
    AgentMiddleware,
    ModelRequest,
    after_agent,
    after_model,
    before_agent,
    before_model,
    dynamic_prompt,
    hook_config,
    wrap_model_call,
    wrap_tool_call,
)


@tool
def get_weather(city: str) -> str:
    """Get the weather for a city."""
    return f"Sunny in {city}"


WEATHER_TURN = {"content": "", "tool_calls": [{"name": "get_weather", "args": {"city": "Paris"}}]}


def test_node_decorators_run_in_order_and_are_named_after_the_function() -> None:
    trace: list[str] = []

    @before_agent
    def load_profile(state: Any, runtime: Any) -> None:
        trace.append("before_agent")

    @before_model
    def log_before_model(state: Any, runtime: Any) -> None:
        trace.append(f"before_model:{len(state['messages'])}")

    @after_model
    def log_after_model(state: Any, runtime: Any) -> None:
        trace.append("after_model")

    @after_agent
    def wrap_up(state: Any, runtime: Any) -> None:
        trace.append("after_agent")

    assert isinstance(log_before_model, AgentMiddleware) and log_before_model.name == "log_before_model"
    agent = create_agent(
        ScriptedModel([WEATHER_TURN, {"content": "Sunny."}]),
        tools=[get_weather],
        middleware=[load_profile, log_before_model, log_after_model, wrap_up],
    )
    updates = [next(iter(u)) for u in agent.stream({"messages": ["weather?"]}, stream_mode="updates")]
    assert trace == [
        "before_agent",
        "before_model:1",
        "after_model",
        "before_model:3",
        "after_model",
        "after_agent",
    ]
    assert updates[:3] == ["load_profile.before_agent", "log_before_model.before_model", "model"]


def test_before_model_can_jump_to_end() -> None:
    @before_model(can_jump_to=["end"])
    def check_message_limit(state: Any, runtime: Any) -> dict[str, Any] | None:
        if len(state["messages"]) >= 3:
            return {"messages": [AIMessage("Conversation limit reached.")], "jump_to": "end"}
        return None

    agent = create_agent(
        ScriptedModel([WEATHER_TURN, {"content": "never"}]),
        tools=[get_weather],
        middleware=[check_message_limit],
    )
    result = agent.invoke({"messages": ["weather?"]})
    assert result["messages"][-1].content == "Conversation limit reached."
    assert "check_message_limit_before_model -.-> __end__;" in agent.get_graph().draw_mermaid()


def test_state_schema_and_name_options() -> None:
    class CallCount(TypedDict):
        model_call_count: int

    @after_model(state_schema=CallCount, name="Counter")
    def count(state: Any, runtime: Any) -> dict[str, Any]:
        return {"model_call_count": state.get("model_call_count", 0) + 1}

    agent = create_agent(
        ScriptedModel([WEATHER_TURN, {"content": "ok"}]), tools=[get_weather], middleware=[count]
    )
    assert count.name == "Counter"
    assert agent.invoke({"messages": ["hi"]})["model_call_count"] == 2


def test_wrap_model_call_retries_and_wrap_tool_call_handles_errors() -> None:
    attempts: list[int] = []

    @wrap_model_call
    def retry_model(request: ModelRequest, handler: Any) -> Any:
        for attempt in range(3):
            try:
                attempts.append(attempt)
                return handler(request)
            except RuntimeError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    @tool
    def flaky(x: int) -> str:
        """Fail."""
        raise RuntimeError("boom")

    @wrap_tool_call
    def handle_tool_errors(request: Any, handler: Any) -> ToolMessage:
        result = handler(request)
        if result.status == "error":
            return ToolMessage(
                f"Tool error: please check your input. ({result.content})",
                tool_call_id=request.tool_call["id"],
                name=request.tool_call["name"],
                status="error",
            )
        return result

    failures = iter([RuntimeError("down")])

    def first_fails(messages: Any) -> Any:
        error = next(failures, None)
        if error is not None:
            raise error
        return {"content": "", "tool_calls": [{"name": "flaky", "args": {"x": 1}}]}

    agent = create_agent(
        ScriptedModel([first_fails, first_fails, {"content": "done"}]),
        tools=[flaky],
        middleware=[retry_model, handle_tool_errors],
    )
    result = agent.invoke({"messages": ["go"]})
    assert attempts == [0, 1, 0]
    assert result["messages"][2].content.startswith("Tool error: please check your input.")


def test_dynamic_prompt_sets_the_system_prompt_from_context() -> None:
    @dynamic_prompt
    def user_role_prompt(request: ModelRequest) -> str:
        role = (request.runtime.context or {}).get("user_role", "user")
        base = "You are a helpful assistant."
        return base + (" Provide detailed technical responses." if role == "expert" else "")

    @dynamic_prompt
    async def as_message(request: ModelRequest) -> SystemMessage:
        return SystemMessage(request.system_prompt + " Async.")

    model = ScriptedModel([{"content": "ok"}])
    agent = create_agent(model, system_prompt="ignored", middleware=[user_role_prompt, as_message])
    agent.invoke({"messages": ["hi"]}, context={"user_role": "expert"})
    assert model.calls[0][0].content == (
        "You are a helpful assistant. Provide detailed technical responses. Async."
    )


def test_async_decorated_hooks_run_in_sync_and_async_runs() -> None:
    seen: list[str] = []

    @before_model
    async def async_before(state: Any, runtime: Any) -> None:
        seen.append("before")

    @wrap_tool_call
    async def async_wrap(request: Any, handler: Any) -> ToolMessage:
        seen.append("wrap")
        result: ToolMessage = await handler(request)
        return result

    def agent() -> Any:
        return create_agent(
            ScriptedModel([WEATHER_TURN, {"content": "ok"}]),
            tools=[get_weather],
            middleware=[async_before, async_wrap],
        )

    agent().invoke({"messages": ["hi"]})
    asyncio.run(agent().ainvoke({"messages": ["hi"]}))
    assert seen == ["before", "wrap", "before"] * 2


def test_decorator_tools_option_adds_tools() -> None:
    @before_model(tools=[get_weather])
    def with_tools(state: Any, runtime: Any) -> None:
        return None

    agent = create_agent(ScriptedModel([WEATHER_TURN, {"content": "ok"}]), middleware=[with_tools])
    assert agent.invoke({"messages": ["hi"]})["messages"][2].content == "Sunny in Paris"


def test_hook_config_on_a_class_method_and_bad_targets() -> None:
    class Guard(AgentMiddleware):
        @hook_config(can_jump_to=["end"])
        def before_model(self, state: Any, runtime: Any) -> None:
            return None

    agent = create_agent(ScriptedModel([]), middleware=[Guard()])
    assert "Guard_before_model -.-> __end__;" in agent.get_graph().draw_mermaid()
    with pytest.raises(ConfigurationError, match="can_jump_to"):
        before_model(can_jump_to=["nowhere"])(lambda state, runtime: None)


def test_wrap_model_call_is_unit_testable_with_a_bare_request() -> None:
    @wrap_model_call
    def add_context(request: ModelRequest, handler: Any) -> Any:
        return handler(request.override(system_message=SystemMessage("Be brief.")))

    seen: list[Any] = []

    def handler(request: ModelRequest) -> AIMessage:
        seen.append(request.system_prompt)
        return AIMessage("ok")

    request = ModelRequest(model=ScriptedModel([]), messages=[])
    assert add_context.wrap_model_call(request, handler).content == "ok"
    assert seen == ["Be brief."] and request.system_message is None


def test_dynamic_model_and_tool_selection_from_the_context_engineering_docs() -> None:
    """LangChain's context-engineering docs: wrap_model_call picks the model and the tools."""
    from _compat_support import RecordingModel

    basic = RecordingModel([{"content": "basic answer"}])
    advanced = RecordingModel([{"content": "advanced answer"}])

    @tool
    def public_search(query: str) -> str:
        """Search public data."""
        return "public"

    @tool
    def admin_delete(record: str) -> str:
        """Delete a record."""
        return "deleted"

    @wrap_model_call
    def select_model_and_tools(request: ModelRequest, handler: Any) -> Any:
        long_conversation = len(request.state["messages"]) > 2
        is_admin = (request.runtime.context or {}).get("role") == "admin"
        tools = [t for t in request.tools if is_admin or not t.name.startswith("admin_")]
        return handler(request.override(model=advanced if long_conversation else basic, tools=tools))

    agent = create_agent(basic, tools=[public_search, admin_delete], middleware=[select_model_and_tools])
    short = agent.invoke({"messages": ["hi"]}, context={"role": "user"})
    long = agent.invoke({"messages": ["a", "b", "c"]}, context={"role": "admin"})
    assert short["messages"][-1].content == "basic answer"
    assert long["messages"][-1].content == "advanced answer"
    assert [t["name"] for t in basic.tool_specs[0]] == ["public_search"]
    assert [t["name"] for t in advanced.tool_specs[0]] == ["public_search", "admin_delete"]


def test_calls_a_hook_answered_itself_send_the_model_round_again() -> None:
    """As in LangChain: when after_model answers every tool call, the model reads the answers."""

    @after_model
    def answer_for_the_tool(state: Any, runtime: Any) -> dict[str, Any] | None:
        last = state["messages"][-1]
        if not isinstance(last, AIMessage) or not last.tool_calls:
            return None
        return {
            "messages": [
                ToolMessage("cached: sunny", tool_call_id=c["id"], name=c["name"]) for c in last.tool_calls
            ]
        }

    model = ScriptedModel([WEATHER_TURN, {"content": "It is sunny."}])
    result = create_agent(model, tools=[get_weather], middleware=[answer_for_the_tool]).invoke(
        {"messages": ["weather?"]}
    )
    assert [m.content for m in result["messages"][2:]] == ["cached: sunny", "It is sunny."]
    assert len(model.calls) == 2
