"""The LangChain adapter, against duck-typed fakes shaped like LangChain's classes.

LangChain is not installed (and must not become a dependency); the fakes below have the
method names and shapes of ``BaseChatModel`` (``bind_tools``, ``invoke``, ``stream``,
``ainvoke``, ``astream``), ``AIMessage`` / ``AIMessageChunk`` and ``BaseTool``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from _agent_flow import FINAL_TEXT, check_outcome, make_tools, reviewed_agent, run_async, run_sync
from pydantic import BaseModel

from handrail import AIMessage, HumanMessage, SystemMessage, ToolMessage
from handrail.errors import ConfigurationError
from handrail.models import accumulate_chunks
from handrail.models.langchain import (
    LangChainChatModel,
    LangChainTool,
    from_langchain_model,
    from_langchain_tool,
    from_langchain_tools,
    to_langchain_messages,
)
from handrail.tools import ToolArgumentsError


# Fakes shaped like langchain_core ----------------------------------------------------------------
@dataclass
class FakeAIMessage:
    content: Any = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    invalid_tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage_metadata: dict[str, Any] | None = None
    response_metadata: dict[str, Any] = field(default_factory=dict)
    additional_kwargs: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass
class FakeAIMessageChunk(FakeAIMessage):
    tool_call_chunks: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class FakeToolMessage:
    content: Any
    tool_call_id: str


@dataclass
class Call:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    tool_choice: Any
    kwargs: dict[str, Any]


Answer = FakeAIMessage | list[FakeAIMessageChunk]


class FakeChatModel:
    """Answers from a script; records what it was given, as a LangChain model would see it."""

    model_name = "fake-lc-model"

    def __init__(self, answers: list[Answer]) -> None:
        self.answers = list(answers)
        self.calls: list[Call] = []

    def bind_tools(self, tools: list[dict[str, Any]], *, tool_choice: Any = None, **kwargs: Any) -> Bound:
        return Bound(self, tools, tool_choice)

    def _take(self, messages: list[dict[str, Any]], bound: Bound | None, kwargs: dict[str, Any]) -> Answer:
        for message in messages:
            json.dumps(message)  # what LangChain gets must be plain data
        self.calls.append(
            Call(messages, bound.tools if bound else None, bound.tool_choice if bound else None, kwargs)
        )
        return self.answers.pop(0)

    def _invoke(self, messages: Any, bound: Bound | None, kwargs: dict[str, Any]) -> FakeAIMessage:
        answer = self._take(messages, bound, kwargs)
        assert isinstance(answer, FakeAIMessage), "this answer was scripted as a stream"
        return answer

    def _stream(self, messages: Any, bound: Bound | None, kwargs: dict[str, Any]) -> list[FakeAIMessageChunk]:
        answer = self._take(messages, bound, kwargs)
        assert isinstance(answer, list), "this answer was scripted as a whole message"
        return answer

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> FakeAIMessage:
        return self._invoke(input, None, kwargs)

    def stream(self, input: Any, config: Any = None, **kwargs: Any) -> Iterator[FakeAIMessageChunk]:
        yield from self._stream(input, None, kwargs)

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> FakeAIMessage:
        return self._invoke(input, None, kwargs)

    async def astream(
        self, input: Any, config: Any = None, **kwargs: Any
    ) -> AsyncIterator[FakeAIMessageChunk]:
        for chunk in self._stream(input, None, kwargs):
            yield chunk


@dataclass
class Bound:
    """What ``bind_tools`` returns: a runnable with the tools attached."""

    model: FakeChatModel
    tools: list[dict[str, Any]]
    tool_choice: Any

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> FakeAIMessage:
        return self.model._invoke(input, self, kwargs)

    def stream(self, input: Any, config: Any = None, **kwargs: Any) -> Iterator[FakeAIMessageChunk]:
        yield from self.model._stream(input, self, kwargs)

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> FakeAIMessage:
        return self.model._invoke(input, self, kwargs)

    async def astream(
        self, input: Any, config: Any = None, **kwargs: Any
    ) -> AsyncIterator[FakeAIMessageChunk]:
        for chunk in self.model._stream(input, self, kwargs):
            yield chunk


class TableArgs(BaseModel):
    table: str
    limit: int = 10


class FakeStructuredTool:
    """Shaped like a LangChain ``StructuredTool`` with a pydantic ``args_schema``."""

    name = "read_table"
    description = "Read rows from a table."
    args_schema = TableArgs

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def invoke(self, input: dict[str, Any], config: Any = None, **kwargs: Any) -> str:
        args = TableArgs.model_validate(input)  # LangChain validates its input again
        self.calls.append(("invoke", input))
        return f"{args.limit} rows from {args.table}"

    async def ainvoke(self, input: dict[str, Any], config: Any = None, **kwargs: Any) -> str:
        args = TableArgs.model_validate(input)
        self.calls.append(("ainvoke", input))
        return f"{args.limit} rows from {args.table}"


class FakeDictSchemaTool:
    """A tool whose schema is a JSON-schema dict (as MCP tools have); sync only; returns a
    ToolMessage-like object."""

    name = "search"
    description = "Search the web."
    args_schema = {
        "title": "search",
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"],
        "additionalProperties": False,
    }

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def invoke(self, input: dict[str, Any], config: Any = None, **kwargs: Any) -> FakeToolMessage:
        self.calls.append(input)
        return FakeToolMessage(content=f"results for {input['query']}", tool_call_id="ignored")


# The model adapter ------------------------------------------------------------------------------
WRITE_SPEC = {
    "name": "write_file",
    "description": "Write text to a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}


def test_langchain_is_not_imported() -> None:
    assert "langchain_core" not in sys.modules and "langchain" not in sys.modules


def test_messages_go_as_langchain_role_dicts() -> None:
    fake = FakeChatModel([FakeAIMessage("ok")])
    history = [
        SystemMessage("Be brief.", id="s1"),
        HumanMessage("Write", id="h1"),
        AIMessage(
            "Writing.",
            id="a1",
            tool_calls=[{"name": "write_file", "args": {"path": "a"}, "id": "c1"}],
            invalid_tool_calls=[
                {
                    "name": "write_file",
                    "args": "{oops",
                    "id": "c2",
                    "error": "bad JSON",
                    "type": "invalid_tool_call",
                }
            ],
        ),
        ToolMessage("wrote a", tool_call_id="c1", name="write_file", id="t1"),
        ToolMessage("could not read it", tool_call_id="c2", status="error", id="t2"),
    ]

    answer = from_langchain_model(fake).invoke(history, tools=[WRITE_SPEC], tool_choice="any", temperature=0)

    (call,) = fake.calls
    assert call.messages == [
        {"role": "system", "content": "Be brief.", "id": "s1"},
        {"role": "user", "content": "Write", "id": "h1"},
        {
            "role": "assistant",
            "content": "Writing.",
            "tool_calls": [
                {"name": "write_file", "args": {"path": "a"}, "id": "c1", "type": "tool_call"},
                {"name": "write_file", "args": {}, "id": "c2", "type": "tool_call"},
            ],
            "id": "a1",
        },
        {
            "role": "tool",
            "content": "wrote a",
            "tool_call_id": "c1",
            "status": "success",
            "name": "write_file",
            "id": "t1",
        },
        {"role": "tool", "content": "could not read it", "tool_call_id": "c2", "status": "error", "id": "t2"},
    ]
    assert call.tools == [
        {
            "type": "function",
            "function": {
                "name": "write_file",
                "description": "Write text to a file.",
                "parameters": WRITE_SPEC["parameters"],
            },
        }
    ]
    assert call.tool_choice == "any"
    assert call.kwargs == {"temperature": 0}
    assert answer.content == "ok"


def test_answers_come_back_as_handrail_messages() -> None:
    fake = FakeChatModel(
        [
            FakeAIMessage(
                "Calling.",
                tool_calls=[{"name": "read_table", "args": {"table": "t"}, "id": "c1", "type": "tool_call"}],
                invalid_tool_calls=[
                    {"name": "x", "args": "{", "id": "c2", "error": "bad", "type": "invalid_tool_call"}
                ],
                usage_metadata={"input_tokens": 5, "output_tokens": 2, "total_tokens": 7},
                response_metadata={"model_name": "gpt-x", "finish_reason": "tool_calls", "raw": object()},
                additional_kwargs={"refusal": None, "parsed": object()},
                id="lc-run-1",
            )
        ]
    )
    answer = from_langchain_model(fake).invoke([HumanMessage("hi")])

    assert answer.tool_calls == [
        {"name": "read_table", "args": {"table": "t"}, "id": "c1", "type": "tool_call"}
    ]
    assert answer.invalid_tool_calls[0]["id"] == "c2"
    assert answer.usage_metadata == {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7}
    # only what can be stored survives
    assert answer.response_metadata == {
        "model_provider": "langchain",
        "model_name": "gpt-x",
        "finish_reason": "tool_calls",
    }
    assert answer.additional_kwargs == {"refusal": None}
    assert answer.id and answer.id.startswith("run-")


def test_stream_converts_chunks() -> None:
    chunks = [
        FakeAIMessageChunk("Let me "),
        FakeAIMessageChunk([{"type": "text", "text": "check.", "index": 0}]),  # Anthropic-style blocks
        FakeAIMessageChunk(
            "", tool_call_chunks=[{"name": "read_table", "args": '{"tab', "id": "c1", "index": 0}]
        ),
        FakeAIMessageChunk(
            "", tool_call_chunks=[{"name": None, "args": 'le": "t"}', "id": None, "index": 0}]
        ),
        FakeAIMessageChunk(
            "",
            usage_metadata={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
            response_metadata={"finish_reason": "tool_calls"},
        ),
    ]
    fake = FakeChatModel([chunks])
    out = list(from_langchain_model(fake).stream([HumanMessage("hi")], tools=[WRITE_SPEC]))

    assert [c.content for c in out[:2]] == ["Let me ", "check."]
    assert len({c.id for c in out}) == 1
    message = accumulate_chunks(out)
    assert message.content == "Let me check."
    assert message.tool_calls == [
        {"name": "read_table", "args": {"table": "t"}, "id": "c1", "type": "tool_call"}
    ]
    assert message.usage_metadata == {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}
    assert message.response_metadata["finish_reason"] == "tool_calls"


def test_stream_of_whole_tool_calls() -> None:
    chunk = FakeAIMessageChunk("", tool_calls=[{"name": "read_table", "args": {"table": "t"}, "id": "c1"}])
    message = accumulate_chunks(
        list(from_langchain_model(FakeChatModel([[chunk]])).stream([HumanMessage("x")]))
    )
    assert message.tool_calls == [
        {"name": "read_table", "args": {"table": "t"}, "id": "c1", "type": "tool_call"}
    ]


async def test_async_invoke_and_stream() -> None:
    fake = FakeChatModel([FakeAIMessage("async"), [FakeAIMessageChunk("as"), FakeAIMessageChunk("tream")]])
    model = from_langchain_model(fake)
    assert (await model.ainvoke([HumanMessage("hi")])).content == "async"
    chunks = [c async for c in model.astream([HumanMessage("hi")])]
    assert accumulate_chunks(chunks).content == "astream"


class SyncOnlyModel:
    """A LangChain-like model with invoke alone: no bind_tools, no stream, no async."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> FakeAIMessage:
        self.seen.append(input)
        return FakeAIMessage("plain")


async def test_a_model_with_invoke_only_still_streams_and_runs_async() -> None:
    model = from_langchain_model(SyncOnlyModel())
    assert model.model_name == "SyncOnlyModel"
    assert accumulate_chunks(list(model.stream([HumanMessage("x")]))).content == "plain"
    assert (await model.ainvoke([HumanMessage("x")])).content == "plain"
    assert accumulate_chunks([c async for c in model.astream([HumanMessage("x")])]).content == "plain"


def test_tools_need_bind_tools() -> None:
    with pytest.raises(ConfigurationError, match="bind_tools"):
        from_langchain_model(SyncOnlyModel()).invoke([HumanMessage("x")], tools=[WRITE_SPEC])


def test_wrapping_checks_the_object() -> None:
    with pytest.raises(TypeError, match="not a LangChain chat model"):
        from_langchain_model(object())
    model = from_langchain_model(FakeChatModel([]))
    assert isinstance(model, LangChainChatModel) and from_langchain_model(model) is model
    assert model.model_name == "fake-lc-model" and model.provider == "langchain"


def test_to_langchain_messages_of_a_bare_conversation() -> None:
    assert to_langchain_messages([HumanMessage("hi")]) == [{"role": "user", "content": "hi"}]


# The tool adapter --------------------------------------------------------------------------------
def test_pydantic_schema_tool() -> None:
    lc_tool = FakeStructuredTool()
    wrapped = from_langchain_tool(lc_tool, idempotent=True)

    assert isinstance(wrapped, LangChainTool)
    assert (wrapped.name, wrapped.description, wrapped.idempotent) == (
        "read_table",
        "Read rows from a table.",
        True,
    )
    assert wrapped.spec()["parameters"]["required"] == ["table"]
    assert set(wrapped.json_schema["properties"]) == {"table", "limit"}
    assert wrapped.invoke({"table": "users"}) == "10 rows from users"
    assert lc_tool.calls == [("invoke", {"table": "users"})]  # only what was given; the tool fills defaults
    with pytest.raises(ToolArgumentsError, match="table"):
        wrapped.invoke({"limit": 3})


async def test_tool_uses_ainvoke_in_async_runs() -> None:
    lc_tool = FakeStructuredTool()
    assert await from_langchain_tool(lc_tool).ainvoke({"table": "t", "limit": 2}) == "2 rows from t"
    assert lc_tool.calls == [("ainvoke", {"table": "t", "limit": 2})]


async def test_dict_schema_tool() -> None:
    lc_tool = FakeDictSchemaTool()
    wrapped = from_langchain_tool(lc_tool)

    assert wrapped.json_schema == {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"],
        "additionalProperties": False,
    }
    assert wrapped.invoke({"query": "handrail"}) == "results for handrail"  # a ToolMessage's content
    assert await wrapped.ainvoke({"query": "async"}) == "results for async"  # sync tool, worker thread
    with pytest.raises(ToolArgumentsError) as caught:
        wrapped.invoke({"limit": 1, "other": True})
    assert "query: Field required" in str(caught.value) and "other: Extra inputs" in str(caught.value)
    assert lc_tool.calls == [{"query": "handrail"}, {"query": "async"}]


def test_tool_call_schema_is_preferred() -> None:
    class Visible(BaseModel):
        query: str

    class WithInjected(FakeStructuredTool):
        name = "lookup"
        tool_call_schema = Visible

    assert set(from_langchain_tool(WithInjected()).json_schema["properties"]) == {"query"}


def test_tool_wrapping_checks_the_object() -> None:
    with pytest.raises(TypeError, match="not a LangChain tool"):
        from_langchain_tool(object())
    assert [t.name for t in from_langchain_tools([FakeStructuredTool(), FakeDictSchemaTool()])] == [
        "read_table",
        "search",
    ]


# A reviewed run through both adapters ----------------------------------------------------------
class FakeReadData:
    """A LangChain-shaped ``read_data`` tool recording into the flow's ledger."""

    name = "read_data"
    description = "Read rows from a table."

    class args_schema(BaseModel):
        table: str

    def __init__(self, ran: list[tuple[str, dict[str, Any]]]) -> None:
        self.ran = ran

    def invoke(self, input: dict[str, Any], config: Any = None, **kwargs: Any) -> str:
        self.ran.append(("read_data", dict(input)))
        return f"3 rows from {input['table']}"


PROPOSAL_CALLS = [
    {"name": "write_file", "args": {"path": "a.txt", "content": "hi"}, "id": "c1", "type": "tool_call"},
    {"name": "read_data", "args": {"table": "users"}, "id": "c2", "type": "tool_call"},
]


def scripted_answers(streamed: bool) -> list[Answer]:
    if not streamed:
        return [FakeAIMessage("I will write and read.", tool_calls=PROPOSAL_CALLS), FakeAIMessage(FINAL_TEXT)]
    pieces = [
        {"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i}
        for i, c in enumerate(PROPOSAL_CALLS)
    ]
    return [
        [
            FakeAIMessageChunk("I will "),
            FakeAIMessageChunk("write and read."),
            FakeAIMessageChunk("", tool_call_chunks=pieces),
        ],
        [FakeAIMessageChunk(FINAL_TEXT)],
    ]


def agent_over_fakes(streamed: bool) -> tuple[Any, FakeChatModel, list[tuple[str, dict[str, Any]]]]:
    ran: list[tuple[str, dict[str, Any]]] = []
    write_file = make_tools(ran)[0]
    fake = FakeChatModel(scripted_answers(streamed))
    agent = reviewed_agent(from_langchain_model(fake), [write_file, from_langchain_tool(FakeReadData(ran))])
    return agent, fake, ran


def check_fake_saw_the_review(fake: FakeChatModel) -> None:
    first, second = fake.calls
    assert [t["function"]["name"] for t in first.tools or []] == ["write_file", "read_data"]
    assert [m["role"] for m in second.messages] == ["system", "user", "assistant", "tool", "tool"]
    assert second.messages[2]["tool_calls"][0]["args"] == {"path": "a.txt", "content": "hi"}
    assert "b.txt" in second.messages[3]["content"] and second.messages[3]["status"] == "success"
    assert second.messages[4]["content"] == "3 rows from users"


@pytest.mark.parametrize("how", ["invoke", "stream"])
def test_reviewed_run_through_the_adapters(how: str) -> None:
    agent, fake, ran = agent_over_fakes(how == "stream")
    outcome = run_sync(agent, how)
    check_outcome(outcome, ran)
    check_fake_saw_the_review(fake)


@pytest.mark.parametrize("how", ["ainvoke", "astream"])
async def test_reviewed_run_through_the_adapters_async(how: str) -> None:
    agent, fake, ran = agent_over_fakes(how == "astream")
    outcome = await run_async(agent, how)
    check_outcome(outcome, ran)
    check_fake_saw_the_review(fake)


def test_create_agent_accepts_langchain_objects_directly() -> None:
    """Users bring what they have: no explicit wrapping needed."""
    ran: list[tuple[str, dict[str, Any]]] = []
    write_file = make_tools(ran)[0]
    fake = FakeChatModel(scripted_answers(False))
    agent = reviewed_agent(fake, [write_file, FakeReadData(ran)])
    assert agent.model.provider == from_langchain_model(fake).provider
    outcome = run_sync(agent, "invoke")
    check_outcome(outcome, ran)
