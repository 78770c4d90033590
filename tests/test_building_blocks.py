"""Messages, tools and ScriptedModel: the pieces SPEC §2 names."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from handrail import (
    AIMessage,
    AIMessageChunk,
    HumanMessage,
    RemoveMessage,
    ScriptedModel,
    SystemMessage,
    Tool,
    ToolMessage,
    ToolRuntime,
    tool,
)
from handrail.messages import add_messages, coerce_message
from handrail.models import ScriptExhaustedError, accumulate_chunks, infer_provider, init_chat_model
from handrail.tools import ToolArgumentsError


def test_messages_have_id_type_and_content() -> None:
    for message, kind in (
        (HumanMessage("hi"), "human"),
        (AIMessage("yo"), "ai"),
        (SystemMessage("be nice"), "system"),
        (ToolMessage("ok", tool_call_id="c1"), "tool"),
    ):
        assert message.type == kind
        assert message.id is None and isinstance(message.content, str)
    assert (
        AIMessage("", tool_calls=[{"name": "t", "args": {}, "id": "1"}]).tool_calls[0]["type"] == "tool_call"
    )


def test_bad_messages_are_refused() -> None:
    with pytest.raises(ValueError, match="non-empty tool_call_id"):
        ToolMessage("x", tool_call_id="")
    with pytest.raises(ValueError, match="status must be 'success' or 'error'"):
        ToolMessage("x", tool_call_id="c", status="meh")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="args must be a dict"):
        AIMessage("", tool_calls=[{"name": "t", "args": "x", "id": "1"}])
    with pytest.raises(ValueError, match="unexpected field"):
        coerce_message({"role": "user", "content": "x", "colour": "red"})


def test_coercion_of_roles_and_tool_messages() -> None:
    message = coerce_message({"role": "tool", "content": "42", "tool_call_id": "c9"})
    assert isinstance(message, ToolMessage) and message.tool_call_id == "c9"
    assert isinstance(coerce_message(("assistant", "ok")), AIMessage)
    assert isinstance(coerce_message({"type": "system", "content": "s"}), SystemMessage)


def test_add_messages_appends_replaces_and_removes() -> None:
    first = [HumanMessage("a", id="1"), AIMessage("b", id="2")]
    updated = add_messages(first, [AIMessage("b2", id="2"), HumanMessage("c"), RemoveMessage(id="1")])
    assert [m.content for m in updated] == ["b2", "c"]
    assert updated[1].id  # an id is given when missing
    assert [m.content for m in first] == ["a", "b"]  # the input is untouched


def test_chunks_add_up_to_the_message_including_split_tool_arguments() -> None:
    chunks = [
        AIMessageChunk("Hel", id="m"),
        AIMessageChunk("lo", tool_call_chunks=[{"name": "read", "args": '{"ta', "id": "c", "index": 0}]),
        AIMessageChunk("", tool_call_chunks=[{"name": None, "args": 'ble": "t"}', "id": None, "index": 0}]),
        AIMessageChunk("", tool_call_chunks=[{"name": "bad", "args": "{oops", "id": "d", "index": 1}]),
    ]
    message = accumulate_chunks(chunks)
    assert message.content == "Hello" and message.id == "m"
    assert message.tool_calls == [{"name": "read", "args": {"table": "t"}, "id": "c", "type": "tool_call"}]
    assert message.invalid_tool_calls[0]["id"] == "d"
    assert "not valid JSON" in str(message.invalid_tool_calls[0]["error"])


def test_tool_schema_comes_from_hints_and_docstring() -> None:
    @tool
    def search(query: str, limit: int = 5, runtime: ToolRuntime | None = None) -> str:
        """Search the archive.

        Args:
            query: Words to look for.
            limit: How many hits to return.
        """
        return query

    assert search.name == "search"
    assert search.description == "Search the archive."
    schema = search.json_schema
    assert schema["required"] == ["query"]
    assert schema["properties"]["query"]["description"] == "Words to look for."
    assert schema["properties"]["limit"]["default"] == 5
    assert schema["additionalProperties"] is False


def test_tool_runtime_is_injected_and_hidden() -> None:
    @tool
    def whoami(prefix: str, runtime: ToolRuntime) -> str:
        """Say who runs."""
        return f"{prefix}{runtime.thread_id}:{runtime.tool_call_id}"

    assert "runtime" not in whoami.json_schema["properties"]
    runtime = ToolRuntime(thread_id="t", config={}, tool_call_id="c")
    assert whoami.invoke({"prefix": ">"}, runtime) == ">t:c"


def test_tool_arguments_are_validated_with_every_problem_named() -> None:
    @tool
    def move(x: int, y: int) -> str:
        """Move."""
        return f"{x},{y}"

    with pytest.raises(ToolArgumentsError) as caught:
        move.validate_args({"x": "left", "z": 1})
    text = str(caught.value)
    assert "x: Input should be a valid integer" in text
    assert "y: Field required" in text
    assert "z: Extra inputs are not permitted" in text


@tool
def _plain(name: str, count: int, ratio: float = 0.5, on: bool = False, note: str | None = None) -> str:
    """Every kind of plain argument (the last one is not plain: the pydantic path)."""
    return name


@tool
def _scalars(name: str, count: int, ratio: float = 0.5, on: bool = False) -> str:
    """Plain scalars only."""
    return name


_ARGUMENT = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.binary(max_size=3),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=400, deadline=None)
@given(
    args=st.dictionaries(
        st.sampled_from(["name", "count", "ratio", "on", "tag", "other"]), _ARGUMENT, max_size=6
    )
)
def test_plain_arguments_checked_without_pydantic_get_what_pydantic_gives(args: dict[str, Any]) -> None:
    """A signature of plain scalars takes a shortcut when the arguments are exactly right;
    whatever the arguments, the values (or the errors) are pydantic's."""
    assert _scalars._plain is not None and _plain._plain is None  # str | None is not plain
    try:
        expected: Any = {
            k: getattr(m, k) for m in [_scalars.args_schema.model_validate(args)] for k in m.__dict__
        }
    except ValidationError:
        expected = ToolArgumentsError
    try:
        got: Any = _scalars.validate_args(args)
    except ToolArgumentsError:
        got = ToolArgumentsError
    assert got == expected
    if got is not ToolArgumentsError:
        assert [type(v) for v in got.values()] == [type(v) for v in expected.values()]


def test_tool_options_and_explicit_schema() -> None:
    class Args(BaseModel):
        path: str

    @tool("rm", description="Remove a file.", args_schema=Args, idempotent=True)
    def remove(path: str) -> str:
        return path

    assert (remove.name, remove.description, remove.idempotent) == ("rm", "Remove a file.", True)
    assert remove.json_schema["required"] == ["path"]
    with pytest.raises(ValueError, match="tool name 'bad name' is not valid"):
        Tool(lambda: None, name="bad name")


async def test_async_tools_work_from_sync_and_async_callers() -> None:
    @tool
    async def fetch(url: str) -> str:
        """Fetch."""
        await asyncio.sleep(0)
        return f"got {url}"

    assert fetch.is_async
    assert await fetch.ainvoke({"url": "a"}) == "got a"
    assert await asyncio.to_thread(fetch.invoke, {"url": "b"}) == "got b"


def test_scripted_model_answers_in_order_and_records_calls() -> None:
    model = ScriptedModel(
        [
            {"content": "", "tool_calls": [{"name": "t", "args": {"a": 1}}]},
            lambda messages: {"content": f"seen {len(messages)}"},
        ]
    )
    first = model.invoke([HumanMessage("hi")])
    assert first.tool_calls[0]["id"].startswith("call_")  # generated when missing
    assert model.invoke([HumanMessage("a"), HumanMessage("b")]).content == "seen 2"
    assert [len(c) for c in model.calls] == [1, 2]
    with pytest.raises(
        ScriptExhaustedError, match="ran out of responses: this is call 3 but the script has 2"
    ):
        model.invoke([])


def test_scripted_model_per_conversation_plays_the_script_from_the_start_in_each_conversation() -> None:
    """Issue 25 item 10: one model serving many threads gives each conversation the next
    reply of its own, counted from the model messages it already holds."""
    model = ScriptedModel(
        [{"content": "", "tool_calls": [{"name": "t", "args": {}}]}, {"content": "Done."}],
        per_conversation=True,
    )
    for _ in range(3):  # three conversations, interleaved as a service's threads are
        first = model.invoke([HumanMessage("go")])
        assert first.tool_calls and first.tool_calls[0]["name"] == "t"
    later = [HumanMessage("go"), first, ToolMessage("ok", tool_call_id=first.tool_calls[0]["id"])]
    assert model.invoke(later).content == "Done."
    assert model.remaining == 2
    with pytest.raises(ScriptExhaustedError, match="already holds 2 model replies and the script has 2"):
        model.invoke([*later, AIMessage("Done.")])
    shared = ScriptedModel([{"content": "a"}, {"content": "b"}])
    assert [shared.invoke([HumanMessage("go")]).content for _ in range(2)] == ["a", "b"]


def test_scripted_model_streams_token_by_token() -> None:
    model = ScriptedModel(
        [{"content": "one two three", "tool_calls": [{"name": "t", "args": {"x": 1}, "id": "c"}]}]
    )
    chunks = list(model.stream([HumanMessage("go")]))
    assert [c.content for c in chunks if c.content] == ["one", " two", " three"]
    whole = accumulate_chunks(chunks)
    assert whole.content == "one two three"
    assert whole.tool_calls == [{"name": "t", "args": {"x": 1}, "id": "c", "type": "tool_call"}]


def test_scripted_model_refuses_bad_scripts() -> None:
    with pytest.raises(TypeError, match="list of responses"):
        ScriptedModel("hello")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="response 0 must be"):
        ScriptedModel([42])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="unexpected key"):
        ScriptedModel([{"text": "x"}]).invoke([])


def test_provider_strings() -> None:
    assert infer_provider("gpt-5.4") == "openai"
    assert infer_provider("claude-sonnet-4-5") == "anthropic"
    assert infer_provider("llama3") is None
    model: Any = init_chat_model("scripted", responses=[{"content": "hi"}])
    assert model.invoke([]).content == "hi"
