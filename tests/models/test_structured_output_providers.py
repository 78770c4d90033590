"""Structured output through the provider adapters, against a local server (real parts, no network).

A bare schema picks the provider strategy for OpenAI models: the request carries
``response_format`` with the schema and the answer's JSON text becomes
``structured_response``. With ``ToolStrategy`` (and with a bare schema for Anthropic
models) the schema is a tool the model must call.
"""

from __future__ import annotations

import json
from typing import Any

from _llm_server import (
    LLMServer,
    anthropic_message,
    json_reply,
    openai_completion,
    openai_tool_call,
    tool_use_block,
)
from pydantic import BaseModel

from handrail import create_agent, init_chat_model
from handrail.structured_output import ToolStrategy


class Weather(BaseModel):
    """The weather in a city."""

    city: str
    celsius: float


def _model(server: LLMServer) -> Any:
    return init_chat_model("openai:gpt-test", base_url=server.url + "/v1", api_key="test", max_retries=0)


def test_bare_schema_uses_openai_json_schema_response_format(server: LLMServer) -> None:
    server.reply(json_reply(openai_completion('{"city": "Oslo", "celsius": 4.5}')))
    agent = create_agent(_model(server), response_format=Weather)
    result = agent.invoke({"messages": ["Weather in Oslo?"]})
    assert result["structured_response"] == Weather(city="Oslo", celsius=4.5)
    body = server.requests[0].json
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["name"] == "Weather"
    assert body["response_format"]["json_schema"]["schema"]["required"] == ["city", "celsius"]


def test_tool_strategy_offers_the_schema_as_a_required_tool(server: LLMServer) -> None:
    arguments = json.dumps({"city": "Oslo", "celsius": 4.5})
    server.reply(json_reply(openai_completion(tool_calls=[openai_tool_call("call_1", "Weather", arguments)])))
    agent = create_agent(_model(server), response_format=ToolStrategy(Weather))
    result = agent.invoke({"messages": ["Weather in Oslo?"]})
    assert result["structured_response"] == Weather(city="Oslo", celsius=4.5)
    body = server.requests[0].json
    assert [t["function"]["name"] for t in body["tools"]] == ["Weather"]
    assert body["tool_choice"] == "required"
    assert "response_format" not in body


def test_bare_schema_with_anthropic_is_a_tool_the_model_must_call(server: LLMServer) -> None:
    server.reply(
        json_reply(
            anthropic_message([tool_use_block("toolu_1", "Weather", {"city": "Oslo", "celsius": 4.5})])
        )
    )
    model = init_chat_model("anthropic:claude-test", base_url=server.url, api_key="test", max_retries=0)
    result = create_agent(model, response_format=Weather).invoke({"messages": ["Weather in Oslo?"]})
    assert result["structured_response"] == Weather(city="Oslo", celsius=4.5)
    assert result["messages"][-1].tool_call_id == "toolu_1"
    body = server.requests[0].json
    assert [t["name"] for t in body["tools"]] == ["Weather"]
    assert body["tool_choice"] == {"type": "any"}
