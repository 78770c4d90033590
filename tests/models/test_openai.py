"""The OpenAI adapter: the real ``openai`` SDK against a local Chat Completions server."""

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
    error_reply,
    json_reply,
    openai_chunk,
    openai_completion,
    openai_sse,
    openai_stream,
    openai_tool_call,
    openai_tool_delta,
    raw_reply,
    sse_reply,
)

from handrail import (
    AIMessage,
    HumanInTheLoopMiddleware,
    HumanMessage,
    InMemorySaver,
    SystemMessage,
    ToolMessage,
    create_agent,
)
from handrail.errors import ConfigurationError
from handrail.models import accumulate_chunks, init_chat_model
from handrail.models.errors import (
    MissingAPIKeyError,
    ModelAuthenticationError,
    ModelConnectionError,
    ModelContextLengthError,
    ModelRateLimitError,
    ModelRequestError,
    ModelResponseError,
    ModelServerError,
)
from handrail.models.openai import OpenAIChatModel

WRITE_SPEC = {
    "name": "write_file",
    "description": "Write text to a file.",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    },
}


def model_for(server: LLMServer, **options: Any) -> OpenAIChatModel:
    options.setdefault("api_key", "test")
    options.setdefault("max_retries", 2)
    model = init_chat_model("openai:gpt-test", base_url=server.url + "/v1", **options)
    assert isinstance(model, OpenAIChatModel)
    return model


# Requests --------------------------------------------------------------------------------------
def test_invoke_sends_the_conversation_in_chat_completions_format(server: LLMServer) -> None:
    server.reply(json_reply(openai_completion("Done.")))
    model = model_for(server, temperature=0.2, max_tokens=50)
    history = [
        SystemMessage("Be brief."),
        HumanMessage("Write two files"),
        AIMessage(
            "Writing.",
            tool_calls=[
                {"name": "write_file", "args": {"path": "a", "content": "x"}, "id": "c1"},
                {"name": "write_file", "args": {"path": "b", "content": "y"}, "id": "c2"},
            ],
        ),
        ToolMessage("wrote a", tool_call_id="c1", name="write_file"),
        ToolMessage("User rejected it", tool_call_id="c2", name="write_file", status="error"),
    ]

    answer = model.invoke(history, tools=[WRITE_SPEC], tool_choice="any", seed=7)

    (request,) = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer test"
    body = request.json
    assert body["model"] == "gpt-test"
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Write two files"},
        {
            "role": "assistant",
            "content": "Writing.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "write_file", "arguments": '{"path": "a", "content": "x"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "write_file", "arguments": '{"path": "b", "content": "y"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "wrote a"},
        {"role": "tool", "tool_call_id": "c2", "content": "User rejected it"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "write_file",
                "description": "Write text to a file.",
                "parameters": WRITE_SPEC["parameters"],
            },
        }
    ]
    assert body["tool_choice"] == "required"
    assert body["temperature"] == 0.2
    assert body["max_tokens"] == 50  # a custom base_url gets the classic name
    assert body["seed"] == 7
    assert "stream" not in body
    assert answer.content == "Done."


def test_answer_carries_ids_usage_and_metadata(server: LLMServer) -> None:
    completion = openai_completion("Hello", usage=(12, 3))
    completion["system_fingerprint"] = "fp_1"
    completion["usage"]["prompt_tokens_details"] = {"cached_tokens": 8}
    server.reply(json_reply(completion))

    answer = model_for(server).invoke([HumanMessage("hi")])

    assert answer.usage_metadata == {
        "input_tokens": 12,
        "output_tokens": 3,
        "total_tokens": 15,
        "input_token_details": {"cache_read": 8},
    }
    assert answer.response_metadata["model_name"] == "gpt-test"
    assert answer.response_metadata["finish_reason"] == "stop"
    assert answer.response_metadata["id"] == completion["id"]
    assert answer.response_metadata["system_fingerprint"] == "fp_1"
    # the message id is handrail's own: local servers repeat completion ids
    assert answer.id and answer.id.startswith("run-") and answer.id != completion["id"]


def test_parallel_tool_calls_come_back_in_order(server: LLMServer) -> None:
    server.reply(
        json_reply(
            openai_completion(
                None,
                [
                    openai_tool_call("c1", "write_file", '{"path": "a", "content": "1"}'),
                    openai_tool_call("c2", "read_data", '{"table": "users"}'),
                    openai_tool_call("c3", "ping", ""),
                ],
            )
        )
    )
    answer = model_for(server, parallel_tool_calls=True).invoke([HumanMessage("go")], tools=[WRITE_SPEC])

    assert answer.content == ""
    assert answer.tool_calls == [
        {"name": "write_file", "args": {"path": "a", "content": "1"}, "id": "c1", "type": "tool_call"},
        {"name": "read_data", "args": {"table": "users"}, "id": "c2", "type": "tool_call"},
        {"name": "ping", "args": {}, "id": "c3", "type": "tool_call"},
    ]
    assert answer.response_metadata["finish_reason"] == "tool_calls"
    assert server.requests[0].json["parallel_tool_calls"] is True


def test_parallel_tool_calls_flag_is_only_sent_with_tools(server: LLMServer) -> None:
    server.reply(json_reply(openai_completion("ok")))
    model_for(server, parallel_tool_calls=False).invoke([HumanMessage("hi")], tool_choice="auto")
    body = server.requests[0].json
    assert "parallel_tool_calls" not in body
    assert "tool_choice" not in body and "tools" not in body


def test_tool_choice_naming_a_tool(server: LLMServer) -> None:
    server.reply(json_reply(openai_completion("ok")))
    model_for(server).invoke([HumanMessage("hi")], tools=[WRITE_SPEC], tool_choice="write_file")
    assert server.requests[0].json["tool_choice"] == {"type": "function", "function": {"name": "write_file"}}


def test_options_the_sdk_does_not_know_reach_the_server(server: LLMServer) -> None:
    server.reply(json_reply(openai_completion("ok")), json_reply(openai_completion("ok")))
    model = model_for(server, top_k=20, repetition_penalty=1.1)
    model.invoke([HumanMessage("hi")])
    model.invoke([HumanMessage("hi")], top_k=5)  # per-call settings win
    first, second = server.bodies()
    assert first["top_k"] == 20 and first["repetition_penalty"] == 1.1
    assert second["top_k"] == 5


def test_max_tokens_name_follows_the_endpoint() -> None:
    messages = [HumanMessage("hi")]
    official = OpenAIChatModel("gpt-5.4", api_key="k", max_tokens=100)
    assert official.request_body(messages, None, None, {})["max_completion_tokens"] == 100
    local = OpenAIChatModel("qwen3", base_url="http://127.0.0.1:1/v1", max_tokens=100)
    body = local.request_body(messages, None, None, {})
    assert body["max_tokens"] == 100 and "max_completion_tokens" not in body
    chosen = OpenAIChatModel("gpt-5.4", api_key="k", max_completion_tokens=9)
    assert chosen.request_body(messages, None, None, {"max_tokens": 3})["max_completion_tokens"] == 9


def test_malformed_tool_arguments_become_invalid_tool_calls(server: LLMServer) -> None:
    server.reply(
        json_reply(
            openai_completion(
                None,
                [
                    openai_tool_call("c1", "write_file", '{"path": "a", "content": '),
                    openai_tool_call("c2", "read_data", '["users"]'),
                    openai_tool_call("c3", "read_data", '{"table": "t"}'),
                ],
            )
        )
    )
    answer = model_for(server).invoke([HumanMessage("go")])

    assert [c["id"] for c in answer.tool_calls] == ["c3"]
    first, second = answer.invalid_tool_calls
    assert first["id"] == "c1" and first["name"] == "write_file"
    assert first["args"] == '{"path": "a", "content": '
    assert "not valid JSON" in (first["error"] or "")
    assert second["id"] == "c2" and "JSON object" in (second["error"] or "")


# Streaming ---------------------------------------------------------------------------------------
def test_stream_yields_text_deltas_and_tool_call_pieces(server: LLMServer) -> None:
    server.reply(
        openai_stream(
            "Let me do both",
            [
                ("c1", "write_file", '{"path": "a.txt", "content": "hi"}'),
                ("c2", "read_data", '{"table": "users"}'),
            ],
            pieces=4,
            usage=(40, 12),
        )
    )
    chunks = list(model_for(server).stream([HumanMessage("go")], tools=[WRITE_SPEC]))

    body = server.requests[0].json
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert [c.content for c in chunks if c.content] == ["Let", " me", " do", " both"]
    pieces = [p for c in chunks for p in c.tool_call_chunks]
    assert len(pieces) == 2 + 2 * 4  # a head per call, then four argument fragments each
    assert {p["index"] for p in pieces} == {0, 1}
    assert [p["name"] for p in pieces if p["name"]] == ["write_file", "read_data"]
    assert len({c.id for c in chunks}) == 1  # one message

    message = accumulate_chunks(chunks)
    assert message.content == "Let me do both"
    assert message.tool_calls == [
        {"name": "write_file", "args": {"path": "a.txt", "content": "hi"}, "id": "c1", "type": "tool_call"},
        {"name": "read_data", "args": {"table": "users"}, "id": "c2", "type": "tool_call"},
    ]
    assert message.usage_metadata == {"input_tokens": 40, "output_tokens": 12, "total_tokens": 52}
    assert message.response_metadata["finish_reason"] == "tool_calls"
    assert message.response_metadata["model_name"] == "gpt-test"


def test_stream_survives_servers_that_repeat_names_and_reuse_indexes(server: LLMServer) -> None:
    chunks = [
        openai_chunk({"role": "assistant"}),
        # the name comes again with every fragment
        openai_chunk(
            {"tool_calls": [openai_tool_delta(0, call_id="c1", name="read_data", arguments='{"ta')]}
        ),
        openai_chunk({"tool_calls": [openai_tool_delta(0, name="read_data", arguments='ble": "a"}')]}),
        # a second call arrives under the same index, with its own id
        openai_chunk({"tool_calls": [openai_tool_delta(0, call_id="c2", name="read_data", arguments="")]}),
        openai_chunk({"tool_calls": [openai_tool_delta(0, arguments='{"table": "b"}')]}),
        openai_chunk({}, finish_reason="tool_calls"),
    ]
    server.reply(sse_reply(openai_sse(chunks)))
    message = accumulate_chunks(list(model_for(server, stream_usage=False).stream([HumanMessage("go")])))

    assert "stream_options" not in server.requests[0].json
    assert message.tool_calls == [
        {"name": "read_data", "args": {"table": "a"}, "id": "c1", "type": "tool_call"},
        {"name": "read_data", "args": {"table": "b"}, "id": "c2", "type": "tool_call"},
    ]
    assert message.usage_metadata is None


def test_lenient_with_missing_indexes_and_ids(server: LLMServer) -> None:
    chunks = [
        {"id": "x", "choices": [{"delta": {"content": "On it."}}]},
        {"choices": [{"delta": {"tool_calls": [{"id": "c1", "function": {"name": "read_data"}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"function": {"arguments": '{"table": "t"}'}}]}}]},
        {"choices": [{"finish_reason": "tool_calls"}]},
    ]
    server.reply(
        sse_reply(openai_sse(chunks)),
        json_reply(openai_completion(None, [{"type": "function", "function": {"name": "read_data"}}])),
    )
    model = model_for(server)
    streamed = accumulate_chunks(list(model.stream([HumanMessage("go")])))
    assert streamed.content == "On it."
    assert streamed.tool_calls == [
        {"name": "read_data", "args": {"table": "t"}, "id": "c1", "type": "tool_call"}
    ]
    whole = model.invoke([HumanMessage("go")])
    assert whole.tool_calls == [{"name": "read_data", "args": {}, "id": None, "type": "tool_call"}]


def test_streamed_malformed_arguments_become_invalid_tool_calls(server: LLMServer) -> None:
    server.reply(openai_stream("", [("c1", "write_file", '{"path": "a.txt", "content": ')]))
    message = accumulate_chunks(list(model_for(server).stream([HumanMessage("go")])))
    assert message.tool_calls == []
    (bad,) = message.invalid_tool_calls
    assert bad["id"] == "c1" and bad["name"] == "write_file"


async def test_async_invoke_and_stream(server: LLMServer) -> None:
    server.reply(
        json_reply(openai_completion("async hello", [openai_tool_call("c9", "read_data", '{"table": "x"}')])),
        openai_stream("streamed async hello", [("c8", "read_data", '{"table": "y"}')]),
    )
    model = model_for(server)
    answer = await model.ainvoke([HumanMessage("hi")], tools=[WRITE_SPEC])
    chunks = [chunk async for chunk in model.astream([HumanMessage("hi")], tools=[WRITE_SPEC])]

    assert answer.content == "async hello"
    assert answer.tool_calls[0]["args"] == {"table": "x"}
    streamed = accumulate_chunks(chunks)
    assert streamed.content == "streamed async hello"
    assert streamed.tool_calls[0]["id"] == "c8"
    assert [r.json.get("stream", False) for r in server.requests] == [False, True]
    await model.aclose()


def test_one_model_serves_several_event_loops(server: LLMServer) -> None:
    model = model_for(server)

    async def ask() -> str:
        try:
            return (await model.ainvoke([HumanMessage("hi")])).text
        finally:
            await model.aclose()

    for n in range(3):
        server.reply(json_reply(openai_completion(f"answer {n}")))
        # each asyncio.run is a new loop; a client of a closed loop must not be reused
        assert asyncio.run(ask()) == f"answer {n}"
    assert len(server.requests) == 3


# Errors --------------------------------------------------------------------------------------------
def test_missing_key_names_the_environment_variable() -> None:
    model = init_chat_model("openai:gpt-5.4")  # building it needs no key
    with pytest.raises(MissingAPIKeyError) as caught:
        model.invoke([HumanMessage("hi")])
    message = str(caught.value)
    assert "OPENAI_API_KEY" in message and "export OPENAI_API_KEY" in message and "api_key=" in message
    assert isinstance(caught.value, ConfigurationError)  # nothing was sent anywhere


def test_key_comes_from_the_environment(server: LLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    server.reply(json_reply(openai_completion("ok")))
    init_chat_model("openai:gpt-test", base_url=server.url + "/v1").invoke([HumanMessage("hi")])
    assert server.requests[0].headers["authorization"] == "Bearer from-env"


def test_a_local_server_needs_no_key(server: LLMServer) -> None:
    server.reply(json_reply(openai_completion("ok")))
    model = init_chat_model("openai:llama3", base_url=server.url + "/v1")
    assert model.invoke([HumanMessage("hi")]).content == "ok"
    assert server.requests[0].headers["authorization"] == "Bearer not-needed"


def test_401_says_the_key_was_rejected(server: LLMServer) -> None:
    server.reply(error_reply(401, "Incorrect API key provided: sk-bad", code="invalid_api_key"))
    with pytest.raises(ModelAuthenticationError) as caught:
        model_for(server).invoke([HumanMessage("hi")])
    error = caught.value
    assert error.status_code == 401 and error.provider == "openai"
    assert "rejected the API key" in str(error) and "Incorrect API key provided" in str(error)
    assert "OPENAI_API_KEY" in str(error)
    assert len(server.requests) == 1  # a 401 is not retried


@pytest.mark.parametrize("status", [429, 500, 503])
def test_429_and_5xx_are_retried_by_the_sdk(server: LLMServer, status: int) -> None:
    server.reply(error_reply(status, "busy"), json_reply(openai_completion("finally")))
    assert model_for(server, max_retries=1).invoke([HumanMessage("hi")]).content == "finally"
    assert len(server.requests) == 2
    assert server.requests[1].headers["x-stainless-retry-count"] == "1"


def test_429_after_the_retries_is_a_rate_limit_error(server: LLMServer) -> None:
    server.reply(*[error_reply(429, "Rate limit reached for requests", code="rate_limit_exceeded")] * 3)
    with pytest.raises(ModelRateLimitError) as caught:
        model_for(server, max_retries=2).invoke([HumanMessage("hi")])
    assert len(server.requests) == 3
    assert "rate limiting" in str(caught.value) and "2 automatic retries" in str(caught.value)
    assert "Rate limit reached" in str(caught.value)


def test_500_after_the_retries_is_a_server_error(server: LLMServer) -> None:
    server.reply(error_reply(500, "The server had an error"), error_reply(500, "The server had an error"))
    with pytest.raises(ModelServerError) as caught:
        model_for(server, max_retries=1).invoke([HumanMessage("hi")])
    assert caught.value.status_code == 500 and "HTTP 500" in str(caught.value)


def test_stream_retries_before_the_first_byte(server: LLMServer) -> None:
    server.reply(error_reply(429, "slow down"), openai_stream("streamed"))
    chunks = list(model_for(server, max_retries=1).stream([HumanMessage("hi")]))
    assert accumulate_chunks(chunks).content == "streamed"


def test_context_length_error_says_what_happened(server: LLMServer) -> None:
    server.reply(
        error_reply(
            400,
            "This model's maximum context length is 8192 tokens. However, your messages resulted "
            "in 9000 tokens.",
            code="context_length_exceeded",
        )
    )
    with pytest.raises(ModelContextLengthError) as caught:
        model_for(server).invoke([HumanMessage("hi")])
    assert "too long for 'gpt-test'" in str(caught.value) and "8192" in str(caught.value)


def test_vllm_style_context_error_without_a_code(server: LLMServer) -> None:
    message = "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens."
    server.reply(json_reply({"object": "error", "message": message, "code": 400}, status=400))
    with pytest.raises(ModelContextLengthError):
        model_for(server).invoke([HumanMessage("hi")])


def test_unknown_model_is_a_request_error(server: LLMServer) -> None:
    server.reply(error_reply(404, "The model `gpt-nope` does not exist", code="model_not_found"))
    with pytest.raises(ModelRequestError) as caught:
        model_for(server).invoke([HumanMessage("hi")])
    assert "Check the model name" in str(caught.value)


@pytest.mark.parametrize(
    "reply",
    [
        raw_reply(b'{"choices": [{"message": '),
        raw_reply(b"<html>502 Bad Gateway</html>", content_type="text/html"),
        json_reply({"unexpected": True}),
    ],
    ids=["truncated-json", "html", "wrong-shape"],
)
def test_malformed_bodies_are_response_errors(server: LLMServer, reply: Any) -> None:
    server.reply(reply)
    with pytest.raises(ModelResponseError) as caught:
        model_for(server).invoke([HumanMessage("hi")])
    assert server.url in str(caught.value)


def test_malformed_stream_event_is_a_response_error(server: LLMServer) -> None:
    good = openai_chunk({"content": "Hel"})
    server.reply(sse_reply([f"data: {json.dumps(good)}\n\n".encode(), b"data: {oops\n\n"]))
    with pytest.raises(ModelResponseError):
        list(model_for(server).stream([HumanMessage("hi")]))


def test_a_stream_without_chunks_is_a_response_error(server: LLMServer) -> None:
    server.reply(sse_reply([b"data: [DONE]\n\n"]))
    with pytest.raises(ModelResponseError, match="without a single chunk"):
        list(model_for(server).stream([HumanMessage("hi")]))


def test_error_event_inside_a_stream(server: LLMServer) -> None:
    server.reply(
        sse_reply([b'data: {"error": {"message": "upstream overloaded", "type": "server_error"}}\n\n'])
    )
    with pytest.raises(ModelServerError) as caught:
        list(model_for(server).stream([HumanMessage("hi")]))
    assert "upstream overloaded" in str(caught.value)


def test_unreachable_server_is_a_connection_error() -> None:
    with LLMServer() as closed:
        url = closed.url
    model = init_chat_model("openai:gpt-test", base_url=url + "/v1", api_key="k", max_retries=0)
    with pytest.raises(ModelConnectionError) as caught:
        model.invoke([HumanMessage("hi")])
    assert url in str(caught.value)


# Through init_chat_model and create_agent ---------------------------------------------------------
def test_provider_strings_route_to_this_adapter() -> None:
    explicit = init_chat_model("openai:gpt-5.4", temperature=0, timeout=30, max_retries=5)
    assert isinstance(explicit, OpenAIChatModel)
    assert (explicit.model_name, explicit.temperature, explicit.timeout, explicit.max_retries) == (
        "gpt-5.4",
        0,
        30,
        5,
    )
    bare = init_chat_model("gpt-5.4")
    assert isinstance(bare, OpenAIChatModel) and bare.provider == "openai"
    agent = create_agent("openai:gpt-5.4", tools=[])
    assert isinstance(agent.model, OpenAIChatModel)


def reviewed_flow_replies(streamed: bool) -> list[Any]:
    calls = [
        ("c1", "write_file", '{"path": "a.txt", "content": "hi"}'),
        ("c2", "read_data", '{"table": "users"}'),
    ]
    if streamed:
        return [openai_stream("I will write and read.", calls), openai_stream(FINAL_TEXT)]
    return [
        json_reply(openai_completion("I will write and read.", [openai_tool_call(*c) for c in calls])),
        json_reply(openai_completion(FINAL_TEXT)),
    ]


def check_server_saw_the_review(server: LLMServer, streamed: bool) -> None:
    first, second = server.bodies()
    for body in (first, second):
        assert [t["function"]["name"] for t in body["tools"]] == ["write_file", "read_data"]
        assert body.get("stream", False) is streamed
    assert first["messages"] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": USER_TEXT},
    ]
    system, user, assistant, write_result, read_result = second["messages"]
    assert (system["role"], user["role"]) == ("system", "user")
    assert assistant["role"] == "assistant" and assistant["content"] == "I will write and read."
    assert [json.loads(c["function"]["arguments"]) for c in assistant["tool_calls"]] == [
        {"path": "a.txt", "content": "hi"},
        {"table": "users"},
    ]
    assert write_result["role"] == "tool" and write_result["tool_call_id"] == "c1"
    assert "wrote 5 bytes to b.txt" in write_result["content"]
    assert read_result == {"role": "tool", "tool_call_id": "c2", "content": "3 rows from users"}


@pytest.mark.parametrize("how", ["invoke", "stream"])
def test_reviewed_run_pause_edit_resume(server: LLMServer, how: str) -> None:
    streamed = how == "stream"
    server.reply(*reviewed_flow_replies(streamed))
    ran: list[tuple[str, dict[str, Any]]] = []
    agent = reviewed_agent(model_for(server), make_tools(ran))

    outcome = run_sync(agent, how)

    check_outcome(outcome, ran)
    check_server_saw_the_review(server, streamed)
    assert outcome.final["messages"][-1].usage_metadata["total_tokens"] > 0
    if streamed:
        text = "".join(t.text for t in outcome.tokens)
        assert text == "I will write and read." + FINAL_TEXT
        assert all(m["thread_id"] == "thread-1" and m["step"] == "model" for m in outcome.metadata)


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
    if streamed:
        assert "".join(t.text for t in outcome.tokens).endswith(FINAL_TEXT)


@pytest.mark.parametrize("streamed", [False, True], ids=["invoke", "stream"])
def test_model_corrects_malformed_and_unknown_tool_calls(server: LLMServer, streamed: bool) -> None:
    bad_calls = [("c1", "read_data", '{"table": '), ("c2", "drop_table", '{"name": "users"}')]
    fixed_calls = [("c3", "read_data", '{"table": "users"}')]
    if streamed:
        server.reply(openai_stream("", bad_calls), openai_stream("", fixed_calls), openai_stream("3 users."))
    else:
        server.reply(
            json_reply(openai_completion(None, [openai_tool_call(*c) for c in bad_calls])),
            json_reply(openai_completion(None, [openai_tool_call(*c) for c in fixed_calls])),
            json_reply(openai_completion("3 users.")),
        )
    ran: list[tuple[str, dict[str, Any]]] = []
    agent = create_agent(
        model_for(server),
        make_tools(ran),
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"write_file": True})],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "t"}}
    inputs = {"messages": [{"role": "user", "content": "How many users?"}]}
    if streamed:
        list(agent.stream(inputs, config, stream_mode="messages"))
        result = agent.get_state(config).values
    else:
        result = agent.invoke(inputs, config)

    assert result["messages"][-1].text == "3 users."
    assert ran == [("read_data", {"table": "users"})]
    second = server.bodies()[1]["messages"]
    assistant = second[1]
    # the malformed call goes back as the model sent it, so the error can answer it
    sent = {c["id"]: c["function"]["arguments"] for c in assistant["tool_calls"]}
    assert sent == {"c1": '{"table": ', "c2": '{"name": "users"}'}
    results = {m["tool_call_id"]: m for m in second[2:]}
    malformed, unknown = results["c1"], results["c2"]
    assert malformed["tool_call_id"] == "c1" and "could not be read" in malformed["content"]
    assert unknown["tool_call_id"] == "c2" and "not a valid tool" in unknown["content"]


def test_resume_after_a_failed_model_call_continues(server: LLMServer) -> None:
    server.reply(error_reply(500, "down"), json_reply(openai_completion("back")))
    agent = create_agent(model_for(server, max_retries=0), [], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    with pytest.raises(ModelServerError):
        agent.invoke({"messages": [{"role": "user", "content": "hi"}]}, config)
    result = agent.invoke(None, config)
    assert result["messages"][-1].text == "back"
    assert [m.type for m in result["messages"]] == ["human", "ai"]
