"""LangChain's messages and streaming docs, ported: message helpers and ``messages`` stream metadata."""

from __future__ import annotations

from typing import Any

from handrail import AIMessage, HumanMessage, InMemorySaver, ScriptedModel, ToolMessage, create_agent, tool


def test_text_content_blocks_and_usage_metadata() -> None:
    message = AIMessage(
        [
            {"type": "thinking", "thinking": "hmm"},
            {"type": "text", "text": "Paris."},
            {"type": "custom", "x": 1},
        ],
        tool_calls=[{"name": "lookup", "args": {"q": "x"}, "id": "c1"}],
        usage_metadata={"input_tokens": 10, "output_tokens": 3, "total_tokens": 13},
    )
    assert message.text == "Paris."
    assert message.content_blocks == [
        {"type": "reasoning", "reasoning": "hmm"},
        {"type": "text", "text": "Paris."},
        {"type": "non_standard", "value": {"type": "custom", "x": 1}},
        {"type": "tool_call", "id": "c1", "name": "lookup", "args": {"q": "x"}},
    ]
    assert message.usage_metadata == {"input_tokens": 10, "output_tokens": 3, "total_tokens": 13}
    assert HumanMessage("hi").content_blocks == [{"type": "text", "text": "hi"}]
    assert HumanMessage("").content_blocks == []


def test_pretty_print_lays_messages_out_as_langchain_does(capsys: Any) -> None:
    AIMessage(
        "Let me check the weather.",
        tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "1"}],
    ).pretty_print()
    HumanMessage("What is the capital of France?", name="ada").pretty_print()
    ToolMessage("Sunny", tool_call_id="1", name="get_weather").pretty_print()
    assert capsys.readouterr().out.splitlines() == [
        "================================== Ai Message ==================================",
        "",
        "Let me check the weather.",
        "Tool Calls:",
        "  get_weather (1)",
        " Call ID: 1",
        "  Args:",
        "    city: Paris",
        "================================ Human Message =================================",
        "Name: ada",
        "",
        "What is the capital of France?",
        "================================= Tool Message =================================",
        "Name: get_weather",
        "",
        "Sunny",
    ]


@tool
def get_weather(city: str) -> str:
    """Get weather for a given city."""
    return f"It's always sunny in {city}!"


def test_stream_messages_metadata_carries_langgraph_keys_and_handrails() -> None:
    model = ScriptedModel(
        [
            {"content": "", "tool_calls": [{"name": "get_weather", "args": {"city": "SF"}}]},
            {"content": "Sunny in SF."},
        ]
    )
    agent = create_agent(model, tools=[get_weather], checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "meta"}}
    nodes: list[str] = []
    steps: list[int] = []
    text = ""
    for token, metadata in agent.stream({"messages": ["weather in SF?"]}, config, stream_mode="messages"):
        assert metadata["thread_id"] == "meta" and metadata["step"] == "model"
        assert metadata["langgraph_triggers"] == ("branch:to:model",)
        assert metadata["ls_model_type"] == "chat"
        nodes.append(metadata["langgraph_node"])
        steps.append(metadata["langgraph_step"])
        if metadata["langgraph_node"] == "model":
            text += token.text
    assert set(nodes) == {"model"}
    assert steps == sorted(steps) and steps[0] < steps[-1]  # later model calls have later steps
    assert text == "Sunny in SF."


def test_stream_updates_shape_as_in_the_docs() -> None:
    model = ScriptedModel(
        [
            {"content": "", "tool_calls": [{"name": "get_weather", "args": {"city": "SF"}}]},
            {"content": "Sunny."},
        ]
    )
    agent = create_agent(model, tools=[get_weather])
    chunks = list(
        agent.stream({"messages": [{"role": "user", "content": "weather in SF?"}]}, stream_mode="updates")
    )
    assert [next(iter(chunk)) for chunk in chunks] == ["model", "tools", "model"]
    assert chunks[1]["tools"]["messages"][-1].content == "It's always sunny in SF!"
