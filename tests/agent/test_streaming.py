"""stream / astream: modes, v1 and v2 shapes, tokens, custom chunks (SPEC §2)."""

from __future__ import annotations

from typing import Any

import pytest

from handrail import AIMessageChunk, Command, Interrupt, get_stream_writer, tool

from _support import AgentFactory, Ledger, call, config, turn


def _agent(make_agent: AgentFactory) -> Any:
    return make_agent(
        [
            turn(call("write_file", "c1", path="a", content="b"), content="I will write the file."),
            {"content": "All done."},
        ]
    )


def test_updates_and_messages_v1_yield_mode_chunk_pairs_and_the_interrupt(make_agent: AgentFactory) -> None:
    """The seed's streaming example: tokens, then the interrupt in updates mode."""
    agent = _agent(make_agent)
    parts = list(agent.stream({"messages": "go"}, config(), stream_mode=["updates", "messages"]))
    modes = [mode for mode, _ in parts]
    assert set(modes) == {"updates", "messages"}
    tokens = [chunk for mode, (chunk, meta) in ((m, c) for m, c in parts if m == "messages")]
    assert all(isinstance(t, AIMessageChunk) for t in tokens)
    assert "".join(t.content for t in tokens) == "I will write the file."
    assert len([t for t in tokens if t.content]) > 1  # token by token, not one blob
    metadata = next(c[1] for m, c in parts if m == "messages")
    assert metadata["thread_id"] == "t1" and metadata["step"] == "model"
    updates = [c for m, c in parts if m == "updates"]
    assert list(updates[0]) == ["model"]
    assert "__interrupt__" in updates[-1]
    (pending,) = updates[-1]["__interrupt__"]
    assert isinstance(pending, Interrupt)
    assert pending == agent.get_state(config()).interrupts[0]

    resumed = list(
        agent.stream(
            Command(resume={"decisions": [{"type": "approve"}]}),
            config(),
            stream_mode=["updates", "messages"],
        )
    )
    steps = [next(iter(c)) for m, c in resumed if m == "updates"]
    assert steps == [
        "HumanInTheLoopMiddleware.after_model",
        "tools",
        "model",
        "HumanInTheLoopMiddleware.after_model",
    ]
    text = "".join(c[0].content for m, c in resumed if m == "messages")
    assert text == "All done."


def test_single_mode_v1_yields_bare_chunks(make_agent: AgentFactory) -> None:
    agent = _agent(make_agent)
    updates = list(agent.stream({"messages": "go"}, config(), stream_mode="updates"))
    assert all(isinstance(u, dict) for u in updates)
    assert "__interrupt__" in updates[-1]


def test_values_mode_emits_whole_state_and_the_pause(make_agent: AgentFactory) -> None:
    agent = _agent(make_agent)
    values = list(agent.stream({"messages": "go"}, config(), stream_mode="values"))
    assert [len(v["messages"]) for v in values[:2]] == [1, 2]
    final = values[-1]
    assert "__interrupt__" in final  # the last values chunk equals invoke's v1 result
    assert final == {
        **agent.get_state(config()).values,
        "__interrupt__": list(agent.get_state(config()).interrupts),
    }


def test_v2_parts_are_typed_and_the_paused_values_part_carries_interrupts(make_agent: AgentFactory) -> None:
    agent = _agent(make_agent)
    parts = list(
        agent.stream(
            {"messages": "go"}, config(), stream_mode=["values", "updates", "messages"], version="v2"
        )
    )
    assert all(set(p) >= {"type", "ns", "data"} and p["ns"] == () for p in parts)
    assert {p["type"] for p in parts} == {"values", "updates", "messages"}
    last_values = [p for p in parts if p["type"] == "values"][-1]
    assert last_values["interrupts"] == agent.get_state(config()).interrupts
    assert "__interrupt__" not in last_values["data"]
    single = list(agent.stream(None, config(), stream_mode="updates", version="v2"))
    assert single and all(p["type"] == "updates" for p in single)


def test_custom_mode_carries_what_tools_write(make_agent: AgentFactory, ledger: Ledger) -> None:
    @tool
    def long_job(steps: int) -> str:
        """Do work in steps."""
        writer = get_stream_writer()
        for i in range(steps):
            writer({"progress": i + 1, "of": steps})
        return "finished"

    agent = make_agent([turn(call("long_job", steps=3)), {"content": "ok"}], policy=False, tools=[long_job])
    custom = list(agent.stream({"messages": "go"}, config(), stream_mode="custom"))
    assert custom == [{"progress": 1, "of": 3}, {"progress": 2, "of": 3}, {"progress": 3, "of": 3}]


def test_stream_writer_outside_custom_mode_discards(make_agent: AgentFactory) -> None:
    get_stream_writer()({"ignored": True})  # outside a run: a no-op


def test_unknown_stream_mode_is_refused(make_agent: AgentFactory) -> None:
    agent = _agent(make_agent)
    with pytest.raises(ValueError, match="unknown stream_mode 'debug'"):
        list(agent.stream({"messages": "go"}, config(), stream_mode="debug"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs at least one"):
        list(agent.stream({"messages": "go"}, config(), stream_mode=[]))


def test_errors_in_a_stream_reach_the_consumer(make_agent: AgentFactory) -> None:
    from handrail.errors import PendingInterruptError

    agent = _agent(make_agent)
    agent.invoke({"messages": "go"}, config())
    with pytest.raises(PendingInterruptError):
        list(agent.stream({"messages": "more"}, config()))


def test_breaking_out_of_a_stream_keeps_the_thread_consistent(
    make_agent: AgentFactory, ledger: Ledger
) -> None:
    agent = make_agent([turn(call("read_data", table="t")), {"content": "done"}], policy=False)
    for _chunk in agent.stream({"messages": "go"}, config(), stream_mode="updates"):
        break
    # whatever was saved, the thread continues to the same end
    result = agent.invoke(None, config())
    assert result["messages"][-1].content == "done"
    assert ledger.names() == ["read_data"]


async def test_astream_matches_stream(make_agent: AgentFactory) -> None:
    agent = _agent(make_agent)
    parts = [
        p async for p in agent.astream({"messages": "go"}, config(), stream_mode=["updates", "messages"])
    ]
    assert "".join(c[0].content for m, c in parts if m == "messages") == "I will write the file."
    assert "__interrupt__" in parts[-1][1]
    resumed = [
        p
        async for p in agent.astream(
            Command(resume={"decisions": [{"type": "approve"}]}), config(), version="v2"
        )
    ]
    assert resumed[-1]["data"]["messages"][-1].content == "All done."


async def test_astream_custom_and_errors(make_agent: AgentFactory) -> None:
    @tool
    async def ping() -> str:
        """Ping."""
        get_stream_writer()("pong")
        return "ok"

    agent = make_agent([turn(call("ping")), {"content": "ok"}], policy=False, tools=[ping])
    assert [c async for c in agent.astream({"messages": "go"}, config(), stream_mode="custom")] == ["pong"]
    from handrail.errors import InvalidDecisionError

    with pytest.raises(InvalidDecisionError):
        [c async for c in agent.astream(Command(resume="x"), config())]
