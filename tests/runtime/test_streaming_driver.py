"""A stream is a plain generator: the run goes on in the consumer's thread, between the
chunks it reads, with no thread or queue of its own (``runtime/streaming.py``). The modes
and shapes are SPEC §2's; a stream closed mid-step leaves its calls to rule 9."""

from __future__ import annotations

import gc
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from handrail import (
    AIMessage,
    AIMessageChunk,
    Command,
    InMemorySaver,
    ScriptedModel,
    create_agent,
    get_stream_writer,
)
from handrail.models.base import ChatModel, ToolSpec

from _support import call, config, turn

MODES = ["values", "updates", "messages", "custom"]


def _two_calls_a_step(threads: list[int] | None = None) -> Any:
    """An agent whose model asks for two tool calls a step, twice; each tool writes custom chunks."""

    def first(x: int) -> str:
        """The first tool."""
        if threads is not None:
            threads.append(threading.get_ident())
        write = get_stream_writer()
        write(f"first {x} starts")
        write(f"first {x} ends")
        return f"first {x}"

    def second(x: int) -> str:
        """The second tool."""
        get_stream_writer()(f"second {x}")
        return f"second {x}"

    model = ScriptedModel(
        [
            turn(call("first", "a1", x=1), call("second", "b1", x=1), content="Two at once."),
            turn(call("first", "a2", x=2), call("second", "b2", x=2)),
            {"content": "All four done."},
        ]
    )
    return create_agent(model, tools=[first, second], checkpointer=InMemorySaver())


def _label(mode: str, chunk: Any) -> str:
    if mode == "values":
        return f"values {len(chunk['messages'])}"
    if mode == "updates":
        return "updates " + ",".join(chunk)
    if mode == "messages":
        return "token"
    return f"custom {chunk}"


def _labels(parts: Sequence[tuple[str, Any]]) -> list[str]:
    """The chunks as labels, a run of tokens as one."""
    labels: list[str] = []
    for mode, chunk in parts:
        label = _label(mode, chunk)
        if not (label == "token" and labels and labels[-1] == "token"):
            labels.append(label)
    return labels


EXPECTED = [
    "values 1",
    "token",
    "updates model",
    "values 2",
    "custom first 1 starts",
    "custom first 1 ends",
    "custom second 1",
    "updates tools",
    "values 4",
    "token",
    "updates model",
    "values 5",
    "custom first 2 starts",
    "custom first 2 ends",
    "custom second 2",
    "updates tools",
    "values 7",
    "token",
    "updates model",
    "values 8",
]


def test_the_order_of_chunks_across_modes_with_several_tool_calls_a_step() -> None:
    agent = _two_calls_a_step()
    parts = list(agent.stream({"messages": ["go"]}, config(), stream_mode=MODES))
    assert _labels(parts) == EXPECTED


async def test_astream_keeps_the_same_order_of_chunks() -> None:
    agent = _two_calls_a_step()
    parts = [part async for part in agent.astream({"messages": ["go"]}, config(), stream_mode=MODES)]
    labels = _labels(parts)
    assert [x for x in labels if not x.startswith("custom")] == [
        x for x in EXPECTED if not x.startswith("custom")
    ]
    # the calls of an async step run concurrently: their writes may interleave, and all
    # come between the model's update and the tools' update
    first, second = (i for i, x in enumerate(labels) if x == "updates tools")
    assert sorted(labels[first - 3 : first]) == [
        "custom first 1 ends",
        "custom first 1 starts",
        "custom second 1",
    ]
    assert sorted(labels[second - 3 : second]) == [
        "custom first 2 ends",
        "custom first 2 starts",
        "custom second 2",
    ]


def test_a_sync_stream_runs_in_the_callers_thread_and_starts_no_thread() -> None:
    ran_in: list[int] = []
    agent = _two_calls_a_step(ran_in)
    before = threading.active_count()
    counts = [
        threading.active_count() for _ in agent.stream({"messages": ["go"]}, config(), stream_mode=MODES)
    ]
    assert ran_in == [threading.get_ident()] * 2
    assert set(counts) == {before}


def test_a_tools_custom_chunks_arrive_before_its_update() -> None:
    agent = _two_calls_a_step()
    labels = _labels(list(agent.stream({"messages": ["go"]}, config(), stream_mode=["updates", "custom"])))
    first_update = labels.index("updates tools")
    assert labels[first_update - 3 : first_update] == [
        "custom first 1 starts",
        "custom first 1 ends",
        "custom second 1",
    ]


def _alive(agent: Any) -> set[str]:
    alive: set[str] = agent.checkpointer.runs_alive("t1")
    return alive


def test_a_stream_closed_after_its_first_chunk_releases_its_run_and_the_thread_goes_on() -> None:
    agent = _two_calls_a_step()
    stream = agent.stream({"messages": ["go"]}, config(), stream_mode=MODES)
    assert _label(*next(stream)) == "values 1"
    stream.close()
    assert _alive(agent) == set()
    assert agent.get_state(config()).next == ("model",)  # the input was saved, nothing after it
    result = agent.invoke(None, config())
    assert result["messages"][-1].content == "All four done."
    assert _alive(agent) == set()


def test_a_stream_dropped_in_the_middle_of_a_step_stops_the_run_where_it_was() -> None:
    """The run stops as a failed run does: the call that ran keeps its result, the planned
    call that had not started comes back as an ``outcome_unknown`` review (rule 9)."""
    ran: list[int] = []
    agent = _two_calls_a_step(ran)
    stream = agent.stream({"messages": ["go"]}, config(), stream_mode="custom")
    assert next(stream) == "first 1 starts"
    del stream  # the generator is collected: the run stops after the call that wrote it
    gc.collect()
    assert _alive(agent) == set()
    (unknown,) = agent.get_state(config()).interrupts
    assert unknown.value["type"] == "outcome_unknown" and unknown.value["tool_call_id"] == "b1"
    result = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    assert len(ran) == 2  # the first call's result was kept: it did not run again
    assert [m.content for m in result["messages"] if m.type == "tool"] == [
        "first 1",
        "second 1",
        "first 2",
        "second 2",
    ]


async def test_an_async_stream_closed_early_releases_its_run() -> None:
    agent = _two_calls_a_step()
    stream = agent.astream({"messages": ["go"]}, config(), stream_mode="updates")
    assert list(await anext(stream)) == ["model"]
    await stream.aclose()
    assert _alive(agent) == set()
    result = await agent.ainvoke(None, config())
    assert result["messages"][-1].content == "All four done."


class _Pulled(ChatModel):
    """A model that streams three tokens and records when each is pulled and when it ends."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def invoke(
        self,
        messages: Sequence[Any],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: Any = None,
        **settings: Any,
    ) -> AIMessage:
        return AIMessage("one two three")

    def stream(
        self,
        messages: Sequence[Any],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: Any = None,
        **settings: Any,
    ) -> Iterator[AIMessageChunk]:
        try:
            for word in ("one", " two", " three"):
                self.log.append(f"pulled {word.strip()}")
                yield AIMessageChunk(content=word)
            self.log.append("model ended")
        except GeneratorExit:
            self.log.append("model closed")
            raise

    async def astream(
        self,
        messages: Sequence[Any],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: Any = None,
        **settings: Any,
    ) -> AsyncIterator[AIMessageChunk]:
        for chunk in self.stream(messages):
            yield chunk


def test_the_models_tokens_arrive_one_by_one_before_the_model_call_ends() -> None:
    log: list[str] = []
    agent = create_agent(_Pulled(log), tools=[], checkpointer=InMemorySaver())
    for token, _ in agent.stream({"messages": ["go"]}, config(), stream_mode="messages"):
        log.append(f"got {token.content.strip()}")
    assert log == [
        "pulled one",
        "got one",
        "pulled two",
        "got two",
        "pulled three",
        "got three",
        "model ended",
    ]


async def test_astream_hands_out_the_models_tokens_one_by_one_too() -> None:
    log: list[str] = []
    agent = create_agent(_Pulled(log), tools=[], checkpointer=InMemorySaver())
    async for token, _ in agent.astream({"messages": ["go"]}, config(), stream_mode="messages"):
        log.append(f"got {token.content.strip()}")
    assert log == [
        "pulled one",
        "got one",
        "pulled two",
        "got two",
        "pulled three",
        "got three",
        "model ended",
    ]


def test_a_stream_closed_while_the_model_streams_closes_the_models_stream_and_the_run() -> None:
    log: list[str] = []
    agent = create_agent(_Pulled(log), tools=[], checkpointer=InMemorySaver())
    stream = agent.stream({"messages": ["go"]}, config(), stream_mode="messages")
    next(stream)
    stream.close()
    assert log == ["pulled one", "model closed"]
    assert _alive(agent) == set()
    assert agent.get_state(config()).next == ("model",)  # the input is saved; the model's answer is not
    assert agent.invoke(None, config())["messages"][-1].content == "one two three"
