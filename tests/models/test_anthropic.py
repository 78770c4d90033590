"""The Anthropic adapter: the real ``anthropic`` SDK against a local Messages API server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from _agent_flow import (
    FINAL_TEXT,
    SYSTEM_PROMPT,
    USER_TEXT,
    check_outcome,
    make_tools,
    reviewed_agent,
    run_async,
    run_sync,
)
from _llm_server import (
    LLMServer,
    anthropic_error,
    anthropic_message,
    anthropic_sse,
    anthropic_stream,
    json_reply,
    raw_reply,
    sse_reply,
    text_block,
    tool_use_block,
)

from handrail import (
    AIMessage,
    Command,
    HumanInTheLoopMiddleware,
    HumanMessage,
    InMemorySaver,
    SystemMessage,
    ToolMessage,
    create_agent,
)
from handrail.errors import ConfigurationError
from handrail.models import accumulate_chunks, init_chat_model
from handrail.models.anthropic import DEFAULT_MAX_TOKENS, AnthropicChatModel
from handrail.models.errors import (
    MissingAPIKeyError,
    ModelAuthenticationError,
    ModelContextLengthError,
    ModelRateLimitError,
    ModelResponseError,
    ModelServerError,
)

WRITE_SPEC = {
    "name": "write_file",
    "description": "Write text to a file.",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    },
}


def model_for(server: LLMServer, **options: Any) -> AnthropicChatModel:
    options.setdefault("api_key", "test")
    model = init_chat_model("anthropic:claude-test", base_url=server.url, **options)
    assert isinstance(model, AnthropicChatModel)
    return model


# Requests --------------------------------------------------------------------------------------
def test_system_prompt_tool_use_and_grouped_tool_results(server: LLMServer) -> None:
    server.reply(json_reply(anthropic_message([text_block("Done.")])))
    history = [
        SystemMessage("Be brief."),
        HumanMessage("Write two files"),
        AIMessage(
            "Writing both.",
            tool_calls=[
                {"name": "write_file", "args": {"path": "a", "content": "x"}, "id": "toolu_1"},
                {"name": "write_file", "args": {"path": "b", "content": "y"}, "id": "toolu_2"},
            ],
        ),
        ToolMessage("wrote a", tool_call_id="toolu_1", name="write_file"),
        ToolMessage("User rejected the tool call", tool_call_id="toolu_2", status="error"),
        HumanMessage("Now stop."),
    ]

    answer = model_for(server).invoke(history, tools=[WRITE_SPEC], top_p=0.9)

    (request,) = server.requests
    assert request.path == "/v1/messages"
    assert "test" in (request.headers.get("x-api-key", "") + request.headers.get("authorization", ""))
    body = request.json
    assert body["model"] == "claude-test"
    assert body["system"] == "Be brief."
    assert body["max_tokens"] == DEFAULT_MAX_TOKENS
    assert body["top_p"] == 0.9
    assert body["messages"] == [
        {"role": "user", "content": "Write two files"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Writing both."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "write_file",
                    "input": {"path": "a", "content": "x"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "write_file",
                    "input": {"path": "b", "content": "y"},
                },
            ],
        },
        {
            # consecutive results travel in one user turn, followed by the new user text
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "wrote a"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "User rejected the tool call",
                    "is_error": True,
                },
                {"type": "text", "text": "Now stop."},
            ],
        },
    ]
    assert body["tools"] == [
        {
            "name": "write_file",
            "description": "Write text to a file.",
            "input_schema": WRITE_SPEC["parameters"],
        }
    ]
    assert "tool_choice" not in body
    assert answer.content == "Done."


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"type": "auto"}),
        ("any", {"type": "any"}),
        ("required", {"type": "any"}),
        ("none", {"type": "none"}),
        ("write_file", {"type": "tool", "name": "write_file"}),
    ],
)
def test_tool_choice(server: LLMServer, choice: str, expected: dict[str, Any]) -> None:
    server.reply(json_reply(anthropic_message([text_block("ok")])))
    model_for(server).invoke([HumanMessage("hi")], tools=[WRITE_SPEC], tool_choice=choice)
    assert server.requests[0].json["tool_choice"] == expected


def test_parallel_tool_calls_false_disables_parallel_tool_use(server: LLMServer) -> None:
    server.reply(json_reply(anthropic_message([text_block("ok")])))
    model_for(server, parallel_tool_calls=False).invoke([HumanMessage("hi")], tools=[WRITE_SPEC])
    assert server.requests[0].json["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}


def test_options_and_settings(server: LLMServer) -> None:
    server.reply(json_reply(anthropic_message([text_block("ok")])))
    model = model_for(server, max_tokens=256, temperature=0.1, top_k=5)
    model.invoke([SystemMessage("one"), SystemMessage("two"), HumanMessage("hi")], max_tokens=64)
    body = server.requests[0].json
    assert body["max_tokens"] == 64  # per-call settings win
    assert body["temperature"] == 0.1 and body["top_k"] == 5
    assert body["system"] == "one\n\ntwo"


def test_answer_with_parallel_tool_use(server: LLMServer) -> None:
    reply = anthropic_message(
        [
            text_block("I'll do both."),
            tool_use_block("toolu_1", "write_file", {"path": "a", "content": "1"}),
            tool_use_block("toolu_2", "read_data", {"table": "users"}),
        ],
        usage=(100, 40),
    )
    reply["usage"]["cache_read_input_tokens"] = 60
    server.reply(json_reply(reply))

    answer = model_for(server).invoke([HumanMessage("go")], tools=[WRITE_SPEC])

    assert answer.content == "I'll do both."
    assert answer.tool_calls == [
        {"name": "write_file", "args": {"path": "a", "content": "1"}, "id": "toolu_1", "type": "tool_call"},
        {"name": "read_data", "args": {"table": "users"}, "id": "toolu_2", "type": "tool_call"},
    ]
    assert answer.usage_metadata == {
        "input_tokens": 160,
        "output_tokens": 40,
        "total_tokens": 200,
        "input_token_details": {"cache_read": 60, "cache_creation": 0},
    }
    assert answer.response_metadata["model_name"] == "claude-test"
    assert answer.response_metadata["finish_reason"] == "tool_use"
    assert answer.response_metadata["id"] == reply["id"]
    assert answer.id and answer.id.startswith("run-")


def test_thinking_blocks_are_kept_and_sent_back(server: LLMServer) -> None:
    thinking = {"type": "thinking", "thinking": "The user wants a file.", "signature": "sig-1"}
    server.reply(
        json_reply(anthropic_message([thinking, tool_use_block("toolu_1", "write_file", {"path": "a"})])),
        json_reply(anthropic_message([text_block("done")])),
    )
    model = model_for(server)
    first = model.invoke([HumanMessage("go")])
    assert first.content == [thinking]
    model.invoke([HumanMessage("go"), first, ToolMessage("ok", tool_call_id="toolu_1")])
    assistant = server.bodies()[1]["messages"][1]
    assert assistant["content"] == [
        thinking,
        {"type": "tool_use", "id": "toolu_1", "name": "write_file", "input": {"path": "a"}},
    ]


# Streaming -------------------------------------------------------------------------------------
def test_stream_yields_text_and_input_json_deltas(server: LLMServer) -> None:
    server.reply(
        anthropic_stream(
            "Doing both now",
            [
                ("toolu_1", "write_file", '{"path": "a.txt", "content": "hi"}'),
                ("toolu_2", "read_data", '{"table": "users"}'),
            ],
            pieces=4,
            usage=(30, 12),
        )
    )
    chunks = list(model_for(server).stream([HumanMessage("go")], tools=[WRITE_SPEC]))

    assert server.requests[0].json["stream"] is True
    assert [c.content for c in chunks if c.content] == ["Doing", " both", " now"]
    pieces = [p for c in chunks for p in c.tool_call_chunks]
    assert len(pieces) == 2 + 2 * 4
    assert [p["name"] for p in pieces if p["name"]] == ["write_file", "read_data"]
    assert len({c.id for c in chunks}) == 1

    message = accumulate_chunks(chunks)
    assert message.content == "Doing both now"
    assert message.tool_calls == [
        {
            "name": "write_file",
            "args": {"path": "a.txt", "content": "hi"},
            "id": "toolu_1",
            "type": "tool_call",
        },
        {"name": "read_data", "args": {"table": "users"}, "id": "toolu_2", "type": "tool_call"},
    ]
    assert message.usage_metadata == {"input_tokens": 30, "output_tokens": 12, "total_tokens": 42}
    assert message.response_metadata["finish_reason"] == "tool_use"


def test_stream_tool_without_arguments_and_truncated_json(server: LLMServer) -> None:
    server.reply(
        anthropic_stream(
            "",
            [("toolu_1", "ping", ""), ("toolu_2", "write_file", '{"path": "a", "cont')],
            stop_reason="max_tokens",
        )
    )
    message = accumulate_chunks(list(model_for(server).stream([HumanMessage("go")])))
    assert message.tool_calls == [{"name": "ping", "args": {}, "id": "toolu_1", "type": "tool_call"}]
    (bad,) = message.invalid_tool_calls
    assert bad["id"] == "toolu_2" and "not valid JSON" in (bad["error"] or "")
    assert message.response_metadata["finish_reason"] == "max_tokens"


def test_streamed_thinking_arrives_as_one_block(server: LLMServer) -> None:
    events = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_t",
                "type": "message",
                "role": "assistant",
                "model": "claude-test",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 5, "output_tokens": 1},
            },
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "Let me "},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "think."},
        },
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": " there"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]
    server.reply(sse_reply(anthropic_sse(events)), json_reply(anthropic_message([text_block("ok")])))
    model = model_for(server)
    message = accumulate_chunks(list(model.stream([HumanMessage("hi")])))

    assert message.text == "Hi there"
    assert message.content[0] == {"type": "thinking", "thinking": "Let me think.", "signature": "sig"}
    model.invoke([HumanMessage("hi"), message, HumanMessage("more")])
    assert server.bodies()[1]["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "Let me think.", "signature": "sig"},
        {"type": "text", "text": "Hi there"},  # streamed fragments merged back into one block
    ]


async def test_async_invoke_and_stream(server: LLMServer) -> None:
    server.reply(
        json_reply(anthropic_message([tool_use_block("toolu_9", "read_data", {"table": "x"})])),
        anthropic_stream("async text", [("toolu_8", "read_data", '{"table": "y"}')]),
    )
    model = model_for(server)
    answer = await model.ainvoke([HumanMessage("hi")], tools=[WRITE_SPEC])
    chunks = [chunk async for chunk in model.astream([HumanMessage("hi")], tools=[WRITE_SPEC])]
    await model.aclose()

    assert answer.tool_calls[0]["args"] == {"table": "x"}
    streamed = accumulate_chunks(chunks)
    assert streamed.content == "async text" and streamed.tool_calls[0]["id"] == "toolu_8"


def test_one_model_serves_several_event_loops(server: LLMServer) -> None:
    model = model_for(server)

    async def ask() -> str:
        try:
            return (await model.ainvoke([HumanMessage("hi")])).text
        finally:
            await model.aclose()

    for n in range(3):
        server.reply(json_reply(anthropic_message([text_block(f"answer {n}")])))
        assert asyncio.run(ask()) == f"answer {n}"
    assert len(server.requests) == 3


# Errors ----------------------------------------------------------------------------------------
def test_missing_key_names_the_environment_variable() -> None:
    model = init_chat_model("claude-sonnet-4-5")  # building it needs no key
    assert isinstance(model, AnthropicChatModel)
    with pytest.raises(MissingAPIKeyError) as caught:
        model.invoke([HumanMessage("hi")])
    assert "ANTHROPIC_API_KEY" in str(caught.value) and "api_key=" in str(caught.value)
    assert isinstance(caught.value, ConfigurationError)


def test_key_comes_from_the_environment(server: LLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "from-env")
    server.reply(json_reply(anthropic_message([text_block("ok")])))
    init_chat_model("anthropic:claude-test", base_url=server.url).invoke([HumanMessage("hi")])
    headers = server.requests[0].headers
    assert "from-env" in headers.get("x-api-key", "") + headers.get("authorization", "")


def test_401_says_the_key_was_rejected(server: LLMServer) -> None:
    server.reply(anthropic_error(401, "invalid x-api-key", "authentication_error"))
    with pytest.raises(ModelAuthenticationError) as caught:
        model_for(server).invoke([HumanMessage("hi")])
    assert caught.value.status_code == 401
    assert "rejected the API key" in str(caught.value) and "ANTHROPIC_API_KEY" in str(caught.value)


@pytest.mark.parametrize(("status", "kind"), [(429, "rate_limit_error"), (529, "overloaded_error")])
def test_429_and_overloaded_are_retried_by_the_sdk(server: LLMServer, status: int, kind: str) -> None:
    server.reply(
        anthropic_error(status, "busy", kind), json_reply(anthropic_message([text_block("finally")]))
    )
    assert model_for(server, max_retries=1).invoke([HumanMessage("hi")]).content == "finally"
    assert len(server.requests) == 2


def test_rate_limit_after_the_retries(server: LLMServer) -> None:
    server.reply(*[anthropic_error(429, "Number of requests exceeded", "rate_limit_error")] * 2)
    with pytest.raises(ModelRateLimitError) as caught:
        model_for(server, max_retries=1).invoke([HumanMessage("hi")])
    assert "1 automatic retries" in str(caught.value)


def test_overloaded_after_the_retries_is_a_server_error(server: LLMServer) -> None:
    server.reply(*[anthropic_error(529, "Overloaded", "overloaded_error")] * 2)
    with pytest.raises(ModelServerError) as caught:
        model_for(server, max_retries=1).invoke([HumanMessage("hi")])
    assert caught.value.status_code == 529 and "Overloaded" in str(caught.value)


def test_prompt_too_long(server: LLMServer) -> None:
    server.reply(anthropic_error(400, "prompt is too long: 210000 tokens > 200000 maximum"))
    with pytest.raises(ModelContextLengthError) as caught:
        model_for(server).invoke([HumanMessage("hi")])
    assert "too long for 'claude-test'" in str(caught.value) and "210000" in str(caught.value)


def test_a_stream_without_message_start_is_a_response_error(server: LLMServer) -> None:
    server.reply(json_reply(anthropic_message([text_block("not a stream")])))
    with pytest.raises(ModelResponseError, match="message_start"):
        list(model_for(server).stream([HumanMessage("hi")]))


def test_error_event_inside_a_stream(server: LLMServer) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    server.reply(sse_reply([f"event: error\ndata: {json.dumps(error)}\n\n".encode()]))
    with pytest.raises(ModelServerError) as caught:
        list(model_for(server).stream([HumanMessage("hi")]))
    assert "error event in the stream" in str(caught.value) and "Overloaded" in str(caught.value)


@pytest.mark.parametrize(
    "reply",
    [raw_reply(b'{"content": ['), json_reply({"unexpected": True})],
    ids=["truncated-json", "wrong-shape"],
)
def test_malformed_bodies_are_response_errors(server: LLMServer, reply: Any) -> None:
    server.reply(reply)
    with pytest.raises(ModelResponseError):
        model_for(server).invoke([HumanMessage("hi")])


def test_malformed_stream_event_is_a_response_error(server: LLMServer) -> None:
    server.reply(sse_reply([b"event: message_start\ndata: {broken\n\n"]))
    with pytest.raises(ModelResponseError):
        list(model_for(server).stream([HumanMessage("hi")]))


# Through create_agent ----------------------------------------------------------------------------
def test_provider_strings_route_to_this_adapter() -> None:
    model = init_chat_model("anthropic:claude-sonnet-4-5", max_tokens=1024, timeout=20, max_retries=4)
    assert isinstance(model, AnthropicChatModel)
    assert (model.max_tokens, model.timeout, model.max_retries) == (1024, 20, 4)
    assert isinstance(create_agent("claude-sonnet-4-5", tools=[]).model, AnthropicChatModel)


CALLS = [
    ("toolu_1", "write_file", '{"path": "a.txt", "content": "hi"}'),
    ("toolu_2", "read_data", '{"table": "users"}'),
]


def reviewed_flow_replies(streamed: bool) -> list[Any]:
    if streamed:
        return [anthropic_stream("I will write and read.", CALLS), anthropic_stream(FINAL_TEXT)]
    blocks = [text_block("I will write and read.")]
    blocks += [tool_use_block(i, n, json.loads(a)) for i, n, a in CALLS]
    return [json_reply(anthropic_message(blocks)), json_reply(anthropic_message([text_block(FINAL_TEXT)]))]


def check_server_saw_the_review(server: LLMServer, streamed: bool) -> None:
    first, second = server.bodies()
    for body in (first, second):
        assert body["system"] == SYSTEM_PROMPT
        assert [t["name"] for t in body["tools"]] == ["write_file", "read_data"]
        assert body.get("stream", False) is streamed
    assert first["messages"] == [{"role": "user", "content": USER_TEXT}]
    user, assistant, results = second["messages"]
    assert user == {"role": "user", "content": USER_TEXT}
    assert assistant["role"] == "assistant"
    assert [b.get("input") for b in assistant["content"] if b["type"] == "tool_use"] == [
        {"path": "a.txt", "content": "hi"},
        {"table": "users"},
    ]
    assert results["role"] == "user"
    write_result, read_result = results["content"]
    assert write_result["tool_use_id"] == "toolu_1" and "wrote 5 bytes to b.txt" in write_result["content"]
    assert "is_error" not in write_result
    assert read_result == {"type": "tool_result", "tool_use_id": "toolu_2", "content": "3 rows from users"}


@pytest.mark.parametrize("how", ["invoke", "stream"])
def test_reviewed_run_pause_edit_resume(server: LLMServer, how: str) -> None:
    streamed = how == "stream"
    server.reply(*reviewed_flow_replies(streamed))
    ran: list[tuple[str, dict[str, Any]]] = []
    agent = reviewed_agent(model_for(server), make_tools(ran))

    outcome = run_sync(agent, how)

    check_outcome(outcome, ran)
    check_server_saw_the_review(server, streamed)
    if streamed:
        assert "".join(t.text for t in outcome.tokens) == "I will write and read." + FINAL_TEXT


@pytest.mark.parametrize("how", ["ainvoke", "astream"])
async def test_reviewed_run_pause_edit_resume_async(server: LLMServer, how: str) -> None:
    streamed = how == "astream"
    server.reply(*reviewed_flow_replies(streamed))
    ran: list[tuple[str, dict[str, Any]]] = []
    model = model_for(server)
    agent = reviewed_agent(model, make_tools(ran))

    outcome = await run_async(agent, how)
    await model.aclose()

    check_outcome(outcome, ran)
    check_server_saw_the_review(server, streamed)


def test_rejected_call_goes_back_with_is_error(server: LLMServer) -> None:
    server.reply(
        json_reply(
            anthropic_message([tool_use_block("toolu_1", "write_file", {"path": "x", "content": "y"})])
        ),
        json_reply(anthropic_message([text_block("Understood, I will not write it.")])),
    )
    ran: list[tuple[str, dict[str, Any]]] = []
    agent = create_agent(
        model_for(server),
        make_tools(ran),
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"write_file": True})],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "t"}}
    first = agent.invoke({"messages": [{"role": "user", "content": "write"}]}, config)
    (interrupt,) = first["__interrupt__"]
    agent.invoke(Command(resume={interrupt.id: {"decisions": [{"type": "reject", "message": "no"}]}}), config)

    assert ran == []
    (result,) = server.bodies()[1]["messages"][2]["content"]
    assert result["is_error"] is True and result["tool_use_id"] == "toolu_1"
    assert "User rejected the tool call for `write_file`" in result["content"]
