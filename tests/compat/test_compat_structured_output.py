"""LangChain's structured-output docs, ported: response_format with the tool and provider strategies.

A scripted model replaces the network. The behaviour checked is the one the docs show:
``result["structured_response"]`` holds the parsed schema; with the tool strategy the
model's call is answered by a ToolMessage and never reviewed (SPEC rule 1: only calls
that reach the tools step are gated).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

import pytest
from _compat_support import RecordingModel
from pydantic import BaseModel, Field

from handrail import HumanInTheLoopMiddleware, InMemorySaver, ToolMessage, create_agent, tool
from handrail.structured_output import (
    ProviderStrategy,
    StructuredOutputValidationError,
    ToolStrategy,
)


class ContactInfo(BaseModel):
    """Contact information for a person."""

    name: str = Field(description="The name of the person")
    email: str = Field(description="The email address of the person")
    phone: str = Field(description="The phone number of the person")


JOHN = {"name": "John Doe", "email": "john@example.com", "phone": "(555) 123-4567"}
ASK = {
    "messages": [
        {"role": "user", "content": "Extract contact info from: John Doe, john@example.com, (555) 123-4567"}
    ]
}


def test_tool_strategy_fills_structured_response_and_answers_the_call() -> None:
    model = RecordingModel(
        [{"content": "", "tool_calls": [{"name": "ContactInfo", "args": JOHN, "id": "c1"}]}]
    )
    agent = create_agent(model, tools=[], response_format=ToolStrategy(ContactInfo))
    result = agent.invoke(ASK)
    assert result["structured_response"] == ContactInfo(**JOHN)
    answer = result["messages"][-1]
    assert isinstance(answer, ToolMessage) and answer.tool_call_id == "c1"
    assert answer.content.startswith("Returning structured response: name='John Doe'")
    # the schema was offered to the model as a tool, and the model was made to use a tool
    assert [t["name"] for t in model.tool_specs[0]] == ["ContactInfo"]
    assert model.tool_choices[0] == "any"


def test_bare_schema_uses_the_tool_strategy_for_non_openai_models() -> None:
    model = RecordingModel([{"content": "", "tool_calls": [{"name": "ContactInfo", "args": JOHN}]}])
    result = create_agent(model, response_format=ContactInfo).invoke(ASK)
    assert result["structured_response"].email == "john@example.com"


def test_tool_message_content_and_typeddict_and_dataclass_schemas() -> None:
    class Weather(TypedDict):
        temperature: float
        condition: str

    @dataclass
    class Point:
        x: int
        y: int

    model = RecordingModel(
        [
            {
                "content": "",
                "tool_calls": [{"name": "Weather", "args": {"temperature": 21.5, "condition": "sunny"}}],
            }
        ]
    )
    result = create_agent(
        model, response_format=ToolStrategy(Weather, tool_message_content="Weather recorded.")
    ).invoke(ASK)
    assert result["structured_response"] == {"temperature": 21.5, "condition": "sunny"}
    assert result["messages"][-1].content == "Weather recorded."
    model = RecordingModel([{"content": "", "tool_calls": [{"name": "Point", "args": {"x": 1, "y": 2}}]}])
    assert create_agent(model, response_format=Point).invoke(ASK)["structured_response"] == Point(1, 2)


def test_union_schema_offers_one_tool_per_member() -> None:
    class Refund(BaseModel):
        amount: float

    class Escalate(BaseModel):
        reason: str

    model = RecordingModel(
        [{"content": "", "tool_calls": [{"name": "Escalate", "args": {"reason": "angry"}}]}]
    )
    result = create_agent(model, response_format=ToolStrategy(Refund | Escalate)).invoke(ASK)
    assert result["structured_response"] == Escalate(reason="angry")
    assert [t["name"] for t in model.tool_specs[0]] == ["Refund", "Escalate"]


def test_malformed_answer_goes_back_to_the_model_with_an_error() -> None:
    model = RecordingModel(
        [
            {"content": "", "tool_calls": [{"name": "ContactInfo", "args": {"name": "John"}, "id": "bad"}]},
            {"content": "", "tool_calls": [{"name": "ContactInfo", "args": JOHN, "id": "good"}]},
        ]
    )
    result = create_agent(model, response_format=ToolStrategy(ContactInfo)).invoke(ASK)
    assert result["structured_response"] == ContactInfo(**JOHN)
    error = next(m for m in result["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "bad")
    assert error.content.startswith("Error: Failed to parse structured output for tool 'ContactInfo'")
    assert error.content.endswith("\n Please fix your mistakes.")
    assert len(model.calls) == 2


def test_handle_errors_false_raises() -> None:
    model = RecordingModel(
        [{"content": "", "tool_calls": [{"name": "ContactInfo", "args": {"name": "John"}}]}]
    )
    agent = create_agent(model, response_format=ToolStrategy(ContactInfo, handle_errors=False))
    with pytest.raises(StructuredOutputValidationError, match="ContactInfo"):
        agent.invoke(ASK)


def test_custom_error_message() -> None:
    model = RecordingModel(
        [
            {"content": "", "tool_calls": [{"name": "ContactInfo", "args": {}, "id": "bad"}]},
            {"content": "", "tool_calls": [{"name": "ContactInfo", "args": JOHN}]},
        ]
    )
    agent = create_agent(
        model, response_format=ToolStrategy(ContactInfo, handle_errors="Please send all fields.")
    )
    result = agent.invoke(ASK)
    assert result["messages"][2].content == "Please send all fields."


def test_provider_strategy_parses_the_final_text() -> None:
    model = RecordingModel(
        [{"content": '{"name": "John Doe", "email": "john@example.com", "phone": "(555) 123-4567"}'}]
    )
    agent = create_agent(model, response_format=ProviderStrategy(ContactInfo))
    result = agent.invoke(ASK)
    assert result["structured_response"] == ContactInfo(**JOHN)
    assert model.settings[0]["response_format"]["json_schema"]["name"] == "ContactInfo"


def test_structured_output_call_is_never_gated_by_review() -> None:
    """SPEC rule 1: review gates the calls that reach the tools step; the answer does not."""

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        return "sent"

    model = RecordingModel(
        [
            {"content": "", "tool_calls": [{"name": "send_email", "args": {"to": "a@b.c"}}]},
            {"content": "", "tool_calls": [{"name": "ContactInfo", "args": JOHN}]},
        ]
    )
    agent = create_agent(
        model,
        tools=[send_email],
        response_format=ToolStrategy(ContactInfo),
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"send_email": True})],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "so"}}
    paused = agent.invoke(ASK, config)
    assert [r["name"] for r in paused["__interrupt__"][0].value["action_requests"]] == ["send_email"]
    from handrail import Command

    done = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    assert "__interrupt__" not in done
    assert done["structured_response"] == ContactInfo(**JOHN)


def test_structured_response_is_saved_and_read_back_as_its_schema(tmp_path: Any) -> None:
    """SPEC rule 10: saved as JSON under the schema's name, rebuilt with that schema on reading."""
    from handrail import SqliteSaver

    path = str(tmp_path / "so.db")
    model = RecordingModel([{"content": "", "tool_calls": [{"name": "ContactInfo", "args": JOHN}]}])
    config: Any = {"configurable": {"thread_id": "saved"}}
    create_agent(model, response_format=ContactInfo, checkpointer=SqliteSaver(path)).invoke(ASK, config)
    reader = create_agent(RecordingModel([]), response_format=ContactInfo, checkpointer=SqliteSaver(path))
    assert reader.get_state(config).values["structured_response"] == ContactInfo(**JOHN)


def test_structured_output_in_async_and_streamed_runs() -> None:
    import asyncio

    def agent() -> Any:
        model = RecordingModel([{"content": "", "tool_calls": [{"name": "ContactInfo", "args": JOHN}]}])
        return create_agent(model, response_format=ToolStrategy(ContactInfo))

    assert asyncio.run(agent().ainvoke(ASK))["structured_response"] == ContactInfo(**JOHN)
    updates = list(agent().stream(ASK, stream_mode="updates"))
    assert updates[0]["model"]["structured_response"] == ContactInfo(**JOHN)
