"""LangChain's built-in middleware docs, ported, and how each composes with review.

ToolRetryMiddleware, ModelRetryMiddleware, ModelCallLimitMiddleware,
ToolCallLimitMiddleware, ModelFallbackMiddleware and SummarizationMiddleware, with
LangChain's parameters and defaults. With review (SPEC rules 1, 6, 7): a retry never
swallows or repeats an interrupt; a limit counts across pauses and resumes of a thread;
a summary never separates a tool call from its ToolMessage.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handrail import (
    AIMessage,
    Command,
    HumanInTheLoopMiddleware,
    InMemorySaver,
    ScriptedModel,
    SqliteSaver,
    ToolMessage,
    create_agent,
    interrupt,
    tool,
)
from handrail.middleware import (
    ModelCallLimitMiddleware,
    ModelFallbackMiddleware,
    ModelRetryMiddleware,
    SummarizationMiddleware,
    ToolCallLimitMiddleware,
    ToolRetryMiddleware,
)
from handrail.middleware._limits import ModelCallLimitExceededError, ToolCallLimitExceededError
from handrail.models.errors import ModelAuthenticationError, ModelRateLimitError


def calls(*names: str, **args: Any) -> dict[str, Any]:
    return {"content": "", "tool_calls": [{"name": n, "args": dict(args)} for n in names]}


def config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


# ToolRetryMiddleware ----------------------------------------------------------------------
def test_tool_retry_defaults_are_langchains() -> None:
    retry = ToolRetryMiddleware()
    assert (retry.max_retries, retry.on_failure, retry.backoff_factor) == (2, "continue", 2.0)
    assert (retry.initial_delay, retry.max_delay, retry.jitter) == (1.0, 60.0, True)


def test_tool_retry_runs_a_failing_tool_again_until_it_succeeds() -> None:
    attempts: list[int] = []

    @tool
    def fetch(url: str) -> str:
        """Fetch a page."""
        attempts.append(1)
        if len(attempts) < 3:
            raise TimeoutError("slow network")
        return "page"

    agent = create_agent(
        ScriptedModel([calls("fetch", url="u"), {"content": "ok"}]),
        tools=[fetch],
        middleware=[ToolRetryMiddleware(max_retries=2, initial_delay=0, retry_on=(TimeoutError,))],
    )
    result = agent.invoke({"messages": ["go"]})
    assert len(attempts) == 3 and result["messages"][2].content == "page"


def test_tool_retry_gives_up_with_langchains_message() -> None:
    @tool
    def fetch(url: str) -> str:
        """Fetch a page."""
        raise ConnectionError("refused")

    agent = create_agent(
        ScriptedModel([calls("fetch", url="u"), {"content": "ok"}]),
        tools=[fetch],
        middleware=[ToolRetryMiddleware(max_retries=1, initial_delay=0)],
    )
    message = agent.invoke({"messages": ["go"]})["messages"][2]
    assert message.status == "error"
    assert (
        message.content
        == "Tool 'fetch' failed after 2 attempts with ConnectionError: refused. Please try again."
    )


def test_tool_retry_only_for_listed_tools_and_not_for_bad_arguments() -> None:
    runs: list[str] = []

    @tool
    def a(x: int) -> str:
        """A."""
        runs.append("a")
        raise ValueError("a fails")

    @tool
    def b(x: int) -> str:
        """B."""
        runs.append("b")
        raise ValueError("b fails")

    agent = create_agent(
        ScriptedModel([calls("a", "b", x=1), calls("a", x="not a number"), {"content": "ok"}]),
        tools=[a, b],
        middleware=[
            ToolRetryMiddleware(
                max_retries=2, tools=["a"], initial_delay=0, on_failure=lambda e: f"gave up: {e}"
            )
        ],
    )
    result = agent.invoke({"messages": ["go"]})
    assert runs == ["a", "a", "a", "b"]
    assert result["messages"][2].content == "gave up: a fails"
    assert "must be" in result["messages"][5].content or "valid" in result["messages"][5].content


def test_tool_retry_never_swallows_or_repeats_an_interrupt() -> None:
    """SPEC rule 6: the retried tool pauses once; on resume it runs with the answer."""
    asked: list[str] = []

    @tool
    def ask_user(question: str) -> str:
        """Ask the user."""
        asked.append(question)
        answer = interrupt({"question": question})
        return f"user said {answer}"

    agent = create_agent(
        ScriptedModel([calls("ask_user", question="color?"), {"content": "ok"}]),
        tools=[ask_user],
        middleware=[ToolRetryMiddleware(max_retries=3, initial_delay=0)],
        checkpointer=InMemorySaver(),
    )
    paused = agent.invoke({"messages": ["go"]}, config("retry-pause"))
    assert len(paused["__interrupt__"]) == 1 and asked == ["color?"]
    result = agent.invoke(Command(resume="blue"), config("retry-pause"))
    assert result["messages"][2].content == "user said blue"
    assert asked == ["color?", "color?"]  # once to pause, once on resume (rule 6), never retried


def test_tool_retry_with_review_runs_the_approved_call_until_it_works() -> None:
    attempts: list[int] = []

    @tool
    def deploy(env: str) -> str:
        """Deploy."""
        attempts.append(1)
        if len(attempts) == 1:
            raise TimeoutError("flaky")
        return "deployed"

    agent = create_agent(
        ScriptedModel([calls("deploy", env="prod"), {"content": "ok"}]),
        tools=[deploy],
        middleware=[
            ToolRetryMiddleware(initial_delay=0),
            HumanInTheLoopMiddleware(interrupt_on={"deploy": True}),
        ],
        checkpointer=InMemorySaver(),
    )
    paused = agent.invoke({"messages": ["go"]}, config("retry-review"))
    assert len(paused["__interrupt__"]) == 1 and attempts == []
    result = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config("retry-review"))
    assert result["messages"][2].content == "deployed" and len(attempts) == 2


# ModelRetryMiddleware ---------------------------------------------------------------------
def test_model_retry_retries_retryable_errors_and_gives_up_with_a_message() -> None:
    failures = [
        ModelRateLimitError("slow down", provider="x"),
        ModelRateLimitError("slow down", provider="x"),
    ]

    def flaky(messages: Any) -> Any:
        if failures:
            raise failures.pop()
        return {"content": "finally"}

    agent = create_agent(
        ScriptedModel([flaky, flaky, flaky]), middleware=[ModelRetryMiddleware(initial_delay=0)]
    )
    assert agent.invoke({"messages": ["hi"]})["messages"][-1].content == "finally"

    def always(messages: Any) -> Any:
        raise ModelRateLimitError("slow down", provider="x")

    agent = create_agent(
        ScriptedModel([always] * 2), middleware=[ModelRetryMiddleware(max_retries=1, initial_delay=0)]
    )
    assert agent.invoke({"messages": ["hi"]})["messages"][-1].content == (
        "Model call failed after 2 attempts with ModelRateLimitError: slow down"
    )


def test_model_retry_does_not_retry_what_cannot_succeed() -> None:
    def denied(messages: Any) -> Any:
        raise ModelAuthenticationError("bad key", provider="x")

    agent = create_agent(ScriptedModel([denied]), middleware=[ModelRetryMiddleware(initial_delay=0)])
    with pytest.raises(ModelAuthenticationError):
        agent.invoke({"messages": ["hi"]})


def test_model_retry_async() -> None:
    failures = [TimeoutError("t")]

    def flaky(messages: Any) -> Any:
        if failures:
            raise failures.pop()
        return {"content": "ok"}

    agent = create_agent(ScriptedModel([flaky, flaky]), middleware=[ModelRetryMiddleware(initial_delay=0)])
    assert asyncio.run(agent.ainvoke({"messages": ["hi"]}))["messages"][-1].content == "ok"


# ModelFallbackMiddleware ------------------------------------------------------------------
def test_model_fallback_tries_the_next_model() -> None:
    def down(messages: Any) -> Any:
        raise ConnectionError("primary down")

    backup = ScriptedModel([{"content": "from the backup"}])
    agent = create_agent(
        ScriptedModel([down]), middleware=[ModelFallbackMiddleware(ScriptedModel([down]), backup)]
    )
    assert agent.invoke({"messages": ["hi"]})["messages"][-1].content == "from the backup"


def test_model_fallback_raises_the_last_error_when_all_fail() -> None:
    def down(messages: Any) -> Any:
        raise ConnectionError("down")

    agent = create_agent(ScriptedModel([down]), middleware=[ModelFallbackMiddleware(ScriptedModel([down]))])
    with pytest.raises(ConnectionError):
        agent.invoke({"messages": ["hi"]})


# ModelCallLimitMiddleware -----------------------------------------------------------------
@tool
def search(query: str) -> str:
    """Search."""
    return "results"


def test_model_call_limit_ends_the_run_with_langchains_message() -> None:
    agent = create_agent(
        ScriptedModel([calls("search", query="q")] * 5),
        tools=[search],
        middleware=[ModelCallLimitMiddleware(run_limit=2)],
    )
    result = agent.invoke({"messages": ["go"]})
    assert result["messages"][-1].content == "Model call limits exceeded: run limit (2/2)"


def test_model_call_limit_error_behaviour() -> None:
    agent = create_agent(
        ScriptedModel([calls("search", query="q")] * 5),
        tools=[search],
        middleware=[ModelCallLimitMiddleware(thread_limit=1, exit_behavior="error")],
    )
    with pytest.raises(ModelCallLimitExceededError, match=r"thread limit \(1/1\)"):
        agent.invoke({"messages": ["go"]})


def test_model_call_limit_counts_across_pauses_resumes_and_processes(tmp_path: Any) -> None:
    """The counts are state: saved with the thread, read back by any process (rule 7)."""
    path = str(tmp_path / "limits.db")

    def agent() -> Any:
        return create_agent(
            ScriptedModel([calls("search", query="q"), calls("search", query="q"), {"content": "never"}]),
            tools=[search],
            middleware=[
                ModelCallLimitMiddleware(thread_limit=2),
                HumanInTheLoopMiddleware(interrupt_on={"search": True}),
            ],
            checkpointer=SqliteSaver(path),
        )

    approve = Command(resume={"decisions": [{"type": "approve"}]})
    assert "__interrupt__" in agent().invoke({"messages": ["go"]}, config("limit"))
    assert "__interrupt__" in agent().invoke(approve, config("limit"))  # second model call, paused again
    result = agent().invoke(approve, config("limit"))  # a third call would pass the thread limit
    assert result["messages"][-1].content == "Model call limits exceeded: thread limit (2/2)"
    assert result["thread_model_call_count"] == 2


def test_model_call_limit_run_count_starts_again_with_new_input() -> None:
    agent = create_agent(
        ScriptedModel([{"content": "one"}, {"content": "two"}]),
        middleware=[ModelCallLimitMiddleware(run_limit=1)],
        checkpointer=InMemorySaver(),
    )
    assert agent.invoke({"messages": ["a"]}, config("runs"))["messages"][-1].content == "one"
    result = agent.invoke({"messages": ["b"]}, config("runs"))
    assert result["messages"][-1].content == "two"
    assert result["thread_model_call_count"] == 2


# ToolCallLimitMiddleware ------------------------------------------------------------------
def test_tool_call_limit_blocks_calls_past_the_limit_and_lets_the_model_go_on() -> None:
    ran: list[str] = []

    @tool
    def lookup(key: str) -> str:
        """Look up."""
        ran.append(key)
        return key

    agent = create_agent(
        ScriptedModel(
            [
                {"content": "", "tool_calls": [{"name": "lookup", "args": {"key": k}} for k in "abc"]},
                {"content": "done"},
            ]
        ),
        tools=[lookup],
        middleware=[ToolCallLimitMiddleware(tool_name="lookup", run_limit=2)],
    )
    result = agent.invoke({"messages": ["go"]})
    assert ran == ["a", "b"]
    blocked = [m for m in result["messages"] if isinstance(m, ToolMessage) and m.status == "error"]
    assert [m.content for m in blocked] == ["Tool call limit exceeded. Do not call 'lookup' again."]
    assert result["messages"][-1].content == "done"
    assert ToolCallLimitMiddleware(tool_name="lookup", run_limit=1).name == "ToolCallLimitMiddleware[lookup]"


def test_tool_call_limit_end_and_error_behaviours() -> None:
    def agent(behaviour: str) -> Any:
        return create_agent(
            ScriptedModel([calls("search", "search", query="q"), {"content": "never"}]),
            tools=[search],
            middleware=[ToolCallLimitMiddleware(thread_limit=1, exit_behavior=behaviour)],  # type: ignore[arg-type]
        )

    result = agent("end").invoke({"messages": ["go"]})
    assert result["messages"][-1].content == "Tool call limit reached: thread limit exceeded (2/1 calls)."
    assert [m.status for m in result["messages"] if isinstance(m, ToolMessage)] == ["error", "error"]
    with pytest.raises(ToolCallLimitExceededError):
        agent("error").invoke({"messages": ["go"]})


def test_tool_call_limit_counts_across_pause_and_resume_and_blocked_calls_are_not_reviewed() -> None:
    agent = create_agent(
        ScriptedModel(
            [calls("search", query="1"), calls("search", "search", query="2"), {"content": "done"}]
        ),
        tools=[search],
        middleware=[
            HumanInTheLoopMiddleware(interrupt_on={"search": True}),
            ToolCallLimitMiddleware(thread_limit=2),  # listed after: its after_model runs first
        ],
        checkpointer=InMemorySaver(),
    )
    first = agent.invoke({"messages": ["go"]}, config("tool-limit"))
    assert len(first["__interrupt__"][0].value["action_requests"]) == 1
    second = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config("tool-limit"))
    # one of the two new calls passes the thread limit: only the other one is reviewed
    assert len(second["__interrupt__"][0].value["action_requests"]) == 1
    done = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config("tool-limit"))
    assert done["thread_tool_call_count"] == {"__all__": 2}
    results = [m for m in done["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in results] == ["success", "error", "success"]


# SummarizationMiddleware ------------------------------------------------------------------
def test_summarization_replaces_old_messages_with_a_summary() -> None:
    summariser = ScriptedModel([{"content": "The user greeted the agent five times."}])
    main = ScriptedModel([{"content": "reply"}])
    agent = create_agent(
        main,
        middleware=[SummarizationMiddleware(summariser, trigger=("messages", 6), keep=("messages", 2))],
        checkpointer=InMemorySaver(),
    )
    history: list[Any] = []
    for i in range(3):
        history += [{"role": "user", "content": f"hello {i}"}, {"role": "assistant", "content": f"hi {i}"}]
    result = agent.invoke({"messages": history}, config("summary"))
    first = result["messages"][0]
    assert first.type == "human" and first.additional_kwargs == {"lc_source": "summarization"}
    assert (
        first.content
        == "Here is a summary of the conversation to date:\n\nThe user greeted the agent five times."
    )
    assert [m.content for m in result["messages"][1:]] == ["hello 2", "hi 2", "reply"]
    assert "hello 0" in summariser.calls[0][0].content
    assert [m.content for m in main.calls[0][1:]] == ["hello 2", "hi 2"]


def test_summarization_never_separates_a_tool_call_from_its_result() -> None:
    summariser = ScriptedModel([{"content": "summary"}])
    history: list[Any] = [
        {"role": "user", "content": "find it"},
        AIMessage("", tool_calls=[{"name": "search", "args": {"query": "a"}, "id": "s1"}]),
        ToolMessage("found a", tool_call_id="s1", name="search"),
        AIMessage(
            "",
            tool_calls=[
                {"name": "search", "args": {"query": "b"}, "id": "s2"},
                {"name": "search", "args": {"query": "c"}, "id": "s3"},
            ],
        ),
        ToolMessage("found b", tool_call_id="s2", name="search"),
        ToolMessage("found c", tool_call_id="s3", name="search"),
    ]
    agent = create_agent(
        ScriptedModel([{"content": "done"}]),
        tools=[search],
        middleware=[SummarizationMiddleware(summariser, trigger=("messages", 5), keep=("messages", 1))],
    )
    result = agent.invoke({"messages": history})
    kept = result["messages"][1:]
    assert isinstance(kept[0], AIMessage) and [c["id"] for c in kept[0].tool_calls] == ["s2", "s3"]
    assert [m.tool_call_id for m in kept if isinstance(m, ToolMessage)] == ["s2", "s3"]


def test_summarization_parameters_and_deprecated_names() -> None:
    middleware = SummarizationMiddleware(ScriptedModel([]))
    assert middleware.keep == ("messages", 20) and middleware.trim_tokens_to_summarize == 4000
    assert middleware.triggers == []
    with pytest.warns(DeprecationWarning):
        old = SummarizationMiddleware(ScriptedModel([]), max_tokens_before_summary=100, messages_to_keep=5)
    assert (old.triggers, old.keep) == ([("tokens", 100)], ("messages", 5))


def test_tool_retry_and_fallback_in_async_runs() -> None:
    attempts: list[int] = []

    @tool
    async def fetch(url: str) -> str:
        """Fetch a page."""
        attempts.append(1)
        if len(attempts) < 2:
            raise TimeoutError("slow")
        return "page"

    def down(messages: Any) -> Any:
        raise ConnectionError("primary down")

    backup = ScriptedModel([calls("fetch", url="u"), {"content": "ok"}])
    agent = create_agent(
        ScriptedModel([down, down]),
        tools=[fetch],
        middleware=[ModelFallbackMiddleware(backup), ToolRetryMiddleware(initial_delay=0)],
    )
    result = asyncio.run(agent.ainvoke({"messages": ["go"]}))
    assert result["messages"][2].content == "page" and len(attempts) == 2
    assert result["messages"][-1].content == "ok"


@settings(max_examples=40, deadline=None)
@given(turns=st.lists(st.integers(1, 4), min_size=1, max_size=5), limit=st.integers(0, 6))
def test_tool_call_limit_never_lets_more_calls_run_than_the_thread_limit(
    turns: list[int], limit: int
) -> None:
    ran: list[int] = []

    @tool
    def work(n: int) -> str:
        """Work."""
        ran.append(n)
        return "done"

    script: list[Any] = [
        {"content": "", "tool_calls": [{"name": "work", "args": {"n": i}} for i in range(count)]}
        for count in turns
    ]
    agent = create_agent(
        ScriptedModel([*script, {"content": "finished"}]),
        tools=[work],
        middleware=[ToolCallLimitMiddleware(thread_limit=limit)],
    )
    result = agent.invoke({"messages": ["go"]})
    total = sum(turns)
    assert len(ran) == min(total, limit)
    blocked = [m for m in result["messages"] if isinstance(m, ToolMessage) and m.status == "error"]
    assert len(blocked) == total - len(ran)
    assert result["messages"][-1].content == "finished"
