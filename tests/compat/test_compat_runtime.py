"""LangChain's runtime and context docs, ported: Runtime, ToolRuntime, context=, store=.

Each test is one example of the LangChain v1 docs (runtime, context engineering, tools),
written for handrail with only the imports changed; a scripted model replaces the network.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from handrail import (
    AgentMiddleware,
    AIMessage,
    InMemorySaver,
    Runtime,
    ScriptedModel,
    ToolRuntime,
    create_agent,
    tool,
)


@dataclass
class Context:
    user_name: str


def test_runtime_is_constructible_bare_and_with_keywords_and_generic() -> None:
    bare: Runtime[Context] = Runtime()
    assert bare.context is None and bare.store is None
    bare.stream_writer({"ignored": True})  # a writer that discards
    rich = Runtime(context=Context("Ada"), store={"k": "v"}, stream_writer=print)
    assert rich.context.user_name == "Ada" and rich.store == {"k": "v"}
    tool_runtime = ToolRuntime[Context, dict[str, Any]](
        context=Context("Ada"), state={"messages": []}, config={}, tool_call_id="c1"
    )
    assert (tool_runtime.tool_call_id, tool_runtime.state, tool_runtime.config) == (
        "c1",
        {"messages": []},
        {},
    )


def test_middleware_hook_is_unit_testable_with_a_bare_runtime() -> None:
    class MessageLimit(AgentMiddleware):
        def __init__(self, max_messages: int = 2) -> None:
            self.max_messages = max_messages

        def after_model(self, state: dict[str, Any], runtime: Runtime) -> dict[str, Any] | None:
            if len(state["messages"]) >= self.max_messages:
                return {"messages": [AIMessage("Conversation limit reached.")], "jump_to": "end"}
            return None

    limit = MessageLimit()
    assert limit.after_model({"messages": ["a"]}, Runtime()) is None
    update = limit.after_model({"messages": ["a", "b"]}, Runtime())
    assert update is not None and update["jump_to"] == "end"


def test_context_reaches_hooks_and_tools_as_runtime_context() -> None:
    seen: list[str] = []

    class Personalise(AgentMiddleware):
        def before_model(self, state: dict[str, Any], runtime: Runtime[Context]) -> None:
            seen.append(f"hook:{runtime.context.user_name}")

    @tool
    def get_user_location(runtime: ToolRuntime[Context]) -> str:
        """Retrieve user information based on the user name."""
        seen.append(f"tool:{runtime.context.user_name}")
        return "Florida" if runtime.context.user_name == "Ada" else "SF"

    model = ScriptedModel(
        [{"content": "", "tool_calls": [{"name": "get_user_location", "args": {}}]}, {"content": "Florida!"}]
    )
    agent = create_agent(model, tools=[get_user_location], middleware=[Personalise()], context_schema=Context)
    result = agent.invoke({"messages": [{"role": "user", "content": "where am I?"}]}, context=Context("Ada"))
    assert result["messages"][2].content == "Florida"
    assert seen == ["hook:Ada", "tool:Ada", "hook:Ada"]
    # the runtime parameter is injected: the model never sees it
    assert "runtime" not in get_user_location.json_schema.get("properties", {})


def test_context_in_async_and_stream_runs() -> None:
    seen: list[Any] = []

    @tool
    def whoami(runtime: ToolRuntime) -> str:
        """Say who is asking."""
        seen.append(runtime.context)
        return str(runtime.context)

    def agent() -> Any:
        model = ScriptedModel(
            [{"content": "", "tool_calls": [{"name": "whoami", "args": {}}]}, {"content": "done"}]
        )
        return create_agent(model, tools=[whoami])

    asyncio.run(agent().ainvoke({"messages": ["hi"]}, context={"user": "a"}))
    list(agent().stream({"messages": ["hi"]}, context={"user": "b"}, stream_mode="updates"))
    assert seen == [{"user": "a"}, {"user": "b"}]


def test_store_reaches_tools_as_runtime_store() -> None:
    memory = {("users",): {"user_123": {"name": "John Smith"}}}

    @tool
    def get_user_info(user_id: str, runtime: ToolRuntime) -> str:
        """Look up user info."""
        return str(runtime.store[("users",)].get(user_id))

    model = ScriptedModel(
        [
            {"content": "", "tool_calls": [{"name": "get_user_info", "args": {"user_id": "user_123"}}]},
            {"content": "ok"},
        ]
    )
    agent = create_agent(model, tools=[get_user_info], store=memory)
    result = agent.invoke({"messages": ["look up user_123"]})
    assert result["messages"][2].content == "{'name': 'John Smith'}"


def test_tool_runtime_carries_state_config_and_call_id() -> None:
    seen: dict[str, Any] = {}

    @tool
    def inspect_run(runtime: ToolRuntime) -> str:
        """Look at the run."""
        seen["call"] = runtime.tool_call_id
        seen["thread"] = runtime.config["configurable"]["thread_id"]
        seen["messages"] = len(runtime.state["messages"])
        return "ok"

    model = ScriptedModel(
        [
            {"content": "", "tool_calls": [{"name": "inspect_run", "args": {}, "id": "call_1"}]},
            {"content": "done"},
        ]
    )
    agent = create_agent(model, tools=[inspect_run], checkpointer=InMemorySaver())
    agent.invoke({"messages": ["go"]}, {"configurable": {"thread_id": "t1"}})
    assert seen == {"call": "call_1", "thread": "t1", "messages": 2}


def test_dict_context_becomes_the_context_schema() -> None:
    seen: list[Any] = []

    class Peek(AgentMiddleware):
        def before_model(self, state: dict[str, Any], runtime: Runtime[Context]) -> None:
            seen.append(runtime.context)

    agent = create_agent(ScriptedModel([{"content": "ok"}]), middleware=[Peek()], context_schema=Context)
    agent.invoke({"messages": ["hi"]}, context={"user_name": "Ada"})
    assert seen == [Context("Ada")]


def test_create_agent_state_schema_adds_state_keys() -> None:
    from handrail import AgentState

    class CustomState(AgentState):
        user_preferences: dict[str, str]

    class Remember(AgentMiddleware):
        def before_model(self, state: dict[str, Any], runtime: Runtime) -> dict[str, Any]:
            return {"user_preferences": {"style": "technical"}}

    agent = create_agent(
        ScriptedModel([{"content": "ok"}]), middleware=[Remember()], state_schema=CustomState
    )
    result = agent.invoke({"messages": ["hi"], "user_preferences": {"style": "casual"}})
    assert result["user_preferences"] == {"style": "technical"}


def test_langgraph_store_example_with_in_memory_store() -> None:
    """LangChain's runtime docs: a tool reads long-term memory from runtime.store."""
    from handrail.store import InMemoryStore

    store = InMemoryStore()
    store.put(("users",), "John Smith", {"preferences": "Be brief and polite."})
    store.put(("users", "archived"), "Old", {"preferences": "none"})

    @tool
    def fetch_user_email_preferences(runtime: ToolRuntime[Context]) -> str:
        """Fetch the user's email preferences from the store."""
        preferences = "The user prefers you to write a brief and polite email."
        if runtime.store and (memory := runtime.store.get(("users",), runtime.context.user_name)):
            preferences = memory.value["preferences"]
        return preferences

    model = ScriptedModel(
        [
            {"content": "", "tool_calls": [{"name": "fetch_user_email_preferences", "args": {}}]},
            {"content": "ok"},
        ]
    )
    agent = create_agent(model, tools=[fetch_user_email_preferences], context_schema=Context, store=store)
    result = agent.invoke({"messages": ["draft an email"]}, context=Context(user_name="John Smith"))
    assert result["messages"][2].content == "Be brief and polite."
    assert [item.key for item in store.search(("users",))] == ["Old", "John Smith"]
    assert store.search(("users",), filter={"preferences": "none"})[0].namespace == ("users", "archived")
    assert store.list_namespaces(max_depth=1) == [("users",)]
    store.delete(("users",), "John Smith")
    assert store.get(("users",), "John Smith") is None
    assert asyncio.run(store.aget(("users", "archived"), "Old")) is not None


def test_tool_runtime_takes_one_or_two_type_arguments_at_run_time() -> None:
    """``ToolRuntime[Ctx]`` leaves the state's type to its default, as in LangChain."""
    import typing

    assert typing.get_args(ToolRuntime[Context]) == (Context, typing.Any)
    assert typing.get_args(ToolRuntime[Context, dict]) == (Context, dict)
    assert typing.get_origin(ToolRuntime[Context]) is ToolRuntime
