"""LangChain's tools docs, ported: return_direct, args_schema, content_and_artifact, ToolRuntime."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from handrail import ScriptedModel, ToolMessage, ToolRuntime, create_agent, tool


class WeatherInput(BaseModel):
    """Input for weather queries."""

    location: str = Field(description="City name or coordinates")
    units: Literal["celsius", "fahrenheit"] = Field(
        default="celsius", description="Temperature unit preference"
    )


@tool(args_schema=WeatherInput)
def get_weather(location: str, units: str = "celsius") -> str:
    """Get current weather."""
    return f"22 degrees {units[0].upper()} in {location}"


def test_args_schema_describes_and_checks_the_arguments() -> None:
    schema = get_weather.json_schema
    assert schema["properties"]["location"]["description"] == "City name or coordinates"
    model = ScriptedModel(
        [
            {"content": "", "tool_calls": [{"name": "get_weather", "args": {"location": "Paris"}}]},
            {
                "content": "",
                "tool_calls": [{"name": "get_weather", "args": {"location": "Oslo", "units": "kelvin"}}],
            },
            {"content": "ok"},
        ]
    )
    result = create_agent(model, tools=[get_weather]).invoke({"messages": ["weather?"]})
    assert result["messages"][2].content == "22 degrees C in Paris"
    assert result["messages"][4].status == "error" and "units" in result["messages"][4].content


def test_return_direct_ends_the_run_with_the_tool_result() -> None:
    @tool(return_direct=True)
    def lookup_order(order_id: str) -> str:
        """Look up an order."""
        return f"Order {order_id}: shipped"

    model = ScriptedModel(
        [{"content": "", "tool_calls": [{"name": "lookup_order", "args": {"order_id": "42"}}]}]
    )
    result = create_agent(model, tools=[lookup_order]).invoke({"messages": ["where is 42?"]})
    assert result["messages"][-1].content == "Order 42: shipped"
    assert len(model.calls) == 1  # the model was not asked again
    assert (
        "tools -.-> __end__;"
        in create_agent(ScriptedModel([]), tools=[lookup_order]).get_graph().draw_mermaid()
    )


def test_return_direct_only_when_every_call_of_the_turn_is_direct() -> None:
    @tool(return_direct=True)
    def direct(x: int) -> str:
        """Direct."""
        return "direct"

    @tool
    def normal(x: int) -> str:
        """Normal."""
        return "normal"

    model = ScriptedModel(
        [
            {
                "content": "",
                "tool_calls": [{"name": "direct", "args": {"x": 1}}, {"name": "normal", "args": {"x": 2}}],
            },
            {"content": "both done"},
        ]
    )
    result = create_agent(model, tools=[direct, normal]).invoke({"messages": ["go"]})
    assert result["messages"][-1].content == "both done"


def test_content_and_artifact_keeps_the_artifact_on_the_message() -> None:
    @tool(response_format="content_and_artifact")
    def retrieve_context(query: str) -> tuple[str, list[dict[str, Any]]]:
        """Retrieve information to help answer a query."""
        docs = [{"source": "a.md", "text": "Handrail pauses runs."}]
        return "Source: a.md\nContent: Handrail pauses runs.", docs

    model = ScriptedModel(
        [
            {"content": "", "tool_calls": [{"name": "retrieve_context", "args": {"query": "pauses"}}]},
            {"content": "ok"},
        ]
    )
    result = create_agent(model, tools=[retrieve_context]).invoke({"messages": ["what pauses?"]})
    message = result["messages"][2]
    assert isinstance(message, ToolMessage)
    assert message.content == "Source: a.md\nContent: Handrail pauses runs."
    assert message.artifact == [{"source": "a.md", "text": "Handrail pauses runs."}]
    # the model saw the content only
    assert model.calls[1][-1].content == message.content


def test_content_and_artifact_tool_that_returns_a_bare_value_gets_an_error() -> None:
    @tool(response_format="content_and_artifact")
    def broken(query: str) -> str:
        """Broken."""
        return "no artifact"

    model = ScriptedModel(
        [{"content": "", "tool_calls": [{"name": "broken", "args": {"query": "q"}}]}, {"content": "ok"}]
    )
    message = create_agent(model, tools=[broken]).invoke({"messages": ["go"]})["messages"][2]
    assert message.status == "error" and "(content, artifact) tuple" in message.content


def test_tool_runtime_is_injected_and_hidden_from_the_schema() -> None:
    @tool
    def get_user_name(runtime: ToolRuntime) -> str:
        """Get the user's name."""
        return str(runtime.context["user_name"])

    assert get_user_name.json_schema.get("properties", {}) == {}
    model = ScriptedModel(
        [{"content": "", "tool_calls": [{"name": "get_user_name", "args": {}}]}, {"content": "ok"}]
    )
    result = create_agent(model, tools=[get_user_name]).invoke(
        {"messages": ["who?"]}, context={"user_name": "Ada"}
    )
    assert result["messages"][2].content == "Ada"
