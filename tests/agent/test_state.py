"""get_state, history, time travel, update_state, and the cross-thread inbox (SPEC §2, §5)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from handrail import AIMessage, Command, HumanMessage, StateSnapshot, ToolMessage
from handrail.errors import ConfigurationError, InvalidInputError

from _support import AgentFactory, Ledger, call, config, events_of, turn


def _paused_agent(make_agent: AgentFactory):  # type: ignore[no-untyped-def]
    agent = make_agent(
        [turn(call("write_file", "c1", path="a", content="b")), {"content": "done"}, {"content": "again"}]
    )
    agent.invoke({"messages": "go"}, config())
    return agent


def test_get_state_shows_values_next_checkpoint_and_pending_interrupts(make_agent: AgentFactory) -> None:
    agent = _paused_agent(make_agent)
    state = agent.get_state(config())
    assert isinstance(state, StateSnapshot)
    assert [m.type for m in state.values["messages"]] == ["human", "ai"]
    assert "_hitl_decisions" not in state.values
    assert state.next == ("HumanInTheLoopMiddleware.after_model",)
    assert state.config["configurable"]["thread_id"] == "t1"
    assert isinstance(state.config["configurable"]["checkpoint_id"], str)
    assert state.parent_config is not None
    assert datetime.fromisoformat(state.created_at or "").tzinfo is not None
    assert len(state.interrupts) == 1
    assert state.metadata["source"] == "loop"

    agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    done = agent.get_state(config())
    assert done.interrupts == ()  # pending interrupts only
    assert done.next == ()


async def test_aget_state_matches_get_state(make_agent: AgentFactory) -> None:
    agent = _paused_agent(make_agent)
    assert await agent.aget_state(config()) == agent.get_state(config())
    history = [s async for s in agent.aget_state_history(config())]
    assert history == list(agent.get_state_history(config()))


def test_get_state_of_an_unknown_thread_is_empty(make_agent: AgentFactory) -> None:
    agent = make_agent([])
    state = agent.get_state(config("nobody"))
    assert state.values == {"messages": []}
    assert state.next == () and state.interrupts == ()
    assert "checkpoint_id" not in state.config["configurable"]


def test_interrupt_ids_are_stable_across_reads(make_agent: AgentFactory) -> None:
    agent = _paused_agent(make_agent)
    first = agent.get_state(config()).interrupts
    agent._spec.cache.drop("t1")  # a cold read from the store gives the same ids
    assert agent.get_state(config()).interrupts == first


def test_history_is_newest_first_and_chains_parents(make_agent: AgentFactory) -> None:
    agent = _paused_agent(make_agent)
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    history = list(agent.get_state_history(config()))
    ids = [s.config["configurable"]["checkpoint_id"] for s in history]
    assert ids == sorted(ids, reverse=True)
    assert history[0] == agent.get_state(config())
    assert history[-1].metadata["source"] == "input"
    assert history[-1].parent_config is None
    for newer, older in itertools.pairwise(history):
        assert newer.parent_config == older.config
    assert len(list(agent.get_state_history(config(), limit=2))) == 2
    before = list(agent.get_state_history(config(), before=history[1].config))
    assert before[0].config == history[2].config


def test_get_state_at_a_checkpoint_and_unknown_checkpoints(make_agent: AgentFactory) -> None:
    agent = _paused_agent(make_agent)
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    first = list(agent.get_state_history(config()))[-1]
    again = agent.get_state(first.config)
    assert again == first
    assert [m.type for m in again.values["messages"]] == ["human"]
    with pytest.raises(ValueError, match="has no checkpoint 'nope'"):
        agent.get_state(config(checkpoint_id="nope"))


def test_time_travel_replays_from_an_earlier_checkpoint(make_agent: AgentFactory, ledger: Ledger) -> None:
    agent = make_agent(
        [
            turn(call("write_file", "c1", path="a", content="1")),
            {"content": "first ending"},
            turn(call("write_file", "c2", path="b", content="2")),
            {"content": "second ending"},
        ]
    )
    agent.invoke({"messages": "go"}, config())
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    start = list(agent.get_state_history(config()))[-1]  # just after the input
    assert start.next == ("model",)

    replay = agent.invoke(None, start.config)
    assert replay["__interrupt__"][0].value["action_requests"][0]["args"] == {"path": "b", "content": "2"}
    state = agent.get_state(config())
    assert [m.type for m in state.values["messages"]] == ["human", "ai"]
    assert state.metadata["source"] == "loop"
    sources = [s.metadata["source"] for s in agent.get_state_history(config())]
    assert "fork" in sources
    done = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    assert done["messages"][-1].content == "second ending"
    assert ledger.names() == ["write_file", "write_file"]


def test_update_state_adds_values_and_returns_the_new_checkpoint(make_agent: AgentFactory) -> None:
    agent = make_agent([{"content": "hi"}, {"content": "second answer"}])
    agent.invoke({"messages": "hello"}, config())
    new_config = agent.update_state(config(), {"messages": [HumanMessage("added by hand")]})
    state = agent.get_state(config())
    assert state.config == new_config
    assert state.values["messages"][-1].content == "added by hand"
    assert state.metadata["source"] == "update"
    assert state.next == ()


def test_update_state_as_node_sets_what_runs_next(make_agent: AgentFactory) -> None:
    agent = make_agent([{"content": "hi"}, {"content": "answer to the edit"}])
    agent.invoke({"messages": "hello"}, config())
    agent.update_state(config(), {"messages": [HumanMessage("one more thing")]}, as_node="tools")
    state = agent.get_state(config())
    assert state.next == ("model",)
    assert agent.invoke(None, config())["messages"][-1].content == "answer to the edit"


def test_update_state_supersedes_pending_reviews_which_are_asked_again(
    make_agent: AgentFactory, ledger: Ledger
) -> None:
    """A hand edit of the proposed call: the stale request cannot be answered any more."""
    agent = _paused_agent(make_agent)
    (old,) = agent.get_state(config()).interrupts
    ai = agent.get_state(config()).values["messages"][-1]
    fixed = AIMessage(
        "",
        id=ai.id,
        tool_calls=[{"name": "write_file", "args": {"path": "safe.txt", "content": "b"}, "id": "c1"}],
    )
    agent.update_state(config(), {"messages": [fixed]}, as_node="model")
    assert agent.get_state(config()).interrupts == ()
    asked_again = agent.invoke(None, config())["__interrupt__"]
    (new,) = asked_again
    assert new.id != old.id
    assert new.value["action_requests"][0]["args"]["path"] == "safe.txt"
    from handrail.errors import ConflictError

    with pytest.raises(ConflictError):
        agent.invoke(Command(resume={old.id: {"decisions": [{"type": "approve"}]}}), config())
    agent.invoke(Command(resume={new.id: {"decisions": [{"type": "approve"}]}}), config())
    assert ledger.calls == [("write_file", {"path": "safe.txt", "content": "b"})]


def test_update_state_refuses_bad_values(make_agent: AgentFactory) -> None:
    agent = _paused_agent(make_agent)
    before = events_of(agent)
    with pytest.raises(ValueError, match="unknown state key"):
        agent.update_state(config(), {"nope": 1})
    with pytest.raises(ValueError, match="as_node must be one of the agent's steps"):
        agent.update_state(config(), {}, as_node="robot")
    assert events_of(agent) == before


def test_command_update_and_resume_together(make_agent: AgentFactory) -> None:
    from handrail import AgentMiddleware

    class Notes(AgentMiddleware):
        state_schema = dict  # replaced below

    from typing import TypedDict

    class NotesState(TypedDict):
        note: str

    Notes.state_schema = NotesState
    agent = make_agent(
        [turn(call("write_file", "c1", path="a", content="b")), {"content": "done"}], middleware=[Notes()]
    )
    agent.invoke({"messages": "go"}, config())
    result = agent.invoke(
        Command(update={"note": "checked by dana"}, resume={"decisions": [{"type": "approve"}]}), config()
    )
    assert result["note"] == "checked by dana"
    assert result["messages"][-1].content == "done"


def test_an_answer_cannot_ride_along_with_a_change_to_the_conversation(make_agent: AgentFactory) -> None:
    """The reviewer approved the conversation as it was; changing it with the answer is refused."""
    from handrail.errors import InvalidDecisionError

    agent = _paused_agent(make_agent)
    before = events_of(agent)
    with pytest.raises(InvalidDecisionError, match="may not change messages"):
        agent.invoke(
            Command(
                update={"messages": [ToolMessage("x", tool_call_id="c1")]},
                resume={"decisions": [{"type": "approve"}]},
            ),
            config(),
        )
    assert events_of(agent) == before


def test_messages_may_not_separate_tool_calls_from_their_results(make_agent: AgentFactory) -> None:
    agent = _paused_agent(make_agent)
    before = events_of(agent)
    with pytest.raises(
        ValueError, match="would put a human message after tool calls that have no results yet"
    ):
        agent.update_state(config(), {"messages": [HumanMessage("wait")]})
    with pytest.raises(ValueError, match="would put a human message"):
        agent.invoke(Command(update={"messages": [HumanMessage("wait")]}), config())
    assert events_of(agent) == before
    # answering the call in the same update keeps the order, but the call is under review:
    # only its review may give it a result (rule 19)
    with pytest.raises(ValueError, match="waiting for review"):
        agent.update_state(
            config(), {"messages": [ToolMessage("skipped", tool_call_id="c1"), HumanMessage("ok")]}
        )
    assert events_of(agent) == before


def test_list_interrupts_is_the_cross_thread_inbox(make_agent: AgentFactory) -> None:
    agent = make_agent(
        [
            turn(call("write_file", path="a", content="b")),
            turn(call("execute_sql", query="DELETE")),
            turn(call("write_file", path="c", content="d"), call("execute_sql", query="x")),
            {"content": "plain answer"},
            {"content": "alpha done"},
        ]
    )
    agent.invoke({"messages": "1"}, {"configurable": {"thread_id": "alpha"}, "metadata": {"team": "ops"}})
    agent.invoke({"messages": "2"}, {"configurable": {"thread_id": "beta"}, "metadata": {"team": "data"}})
    agent.invoke({"messages": "3"}, {"configurable": {"thread_id": "gamma"}, "metadata": {"team": "ops"}})
    agent.invoke({"messages": "4"}, {"configurable": {"thread_id": "delta"}})

    inbox = agent.list_interrupts()
    assert [item.thread_id for item in inbox.items] == ["alpha", "beta", "gamma"]  # oldest first
    assert inbox.next_cursor is None
    assert inbox.items[0].interrupt == agent.get_state(config("alpha")).interrupts[0]
    assert inbox.items[0].config == config("alpha")

    assert [i.thread_id for i in agent.list_interrupts(tool="execute_sql").items] == ["beta", "gamma"]
    assert [i.thread_id for i in agent.list_interrupts(metadata={"team": "ops"}).items] == ["alpha", "gamma"]
    assert [i.thread_id for i in agent.list_interrupts(thread_id="beta").items] == ["beta"]
    assert agent.list_interrupts(older_than=timedelta(hours=1)).items == []
    assert agent.list_interrupts(kind="outcome_unknown").items == []

    page = agent.list_interrupts(limit=2)
    assert [i.thread_id for i in page.items] == ["alpha", "beta"]
    rest = agent.list_interrupts(limit=2, cursor=page.next_cursor)
    assert [i.thread_id for i in rest.items] == ["gamma"]

    (alpha,) = agent.list_interrupts(thread_id="alpha").items
    agent.invoke(Command(resume={alpha.interrupt.id: {"decisions": [{"type": "reject"}]}}), alpha.config)
    assert [i.thread_id for i in agent.list_interrupts().items] == ["beta", "gamma"]


async def test_alist_interrupts_and_bad_arguments(make_agent: AgentFactory) -> None:
    agent = _paused_agent(make_agent)
    page = await agent.alist_interrupts()
    assert [i.thread_id for i in page.items] == ["t1"]
    with pytest.raises(ValueError, match="limit must be an integer from 1 to 1000"):
        agent.list_interrupts(limit=0)
    with pytest.raises(ValueError, match="cursor 'garbage' is not one list_interrupts returned"):
        agent.list_interrupts(cursor="garbage")
    with pytest.raises(ValueError, match="older_than must be a non-negative"):
        agent.list_interrupts(older_than=-1)


def test_threads_can_be_listed_and_deleted(make_agent: AgentFactory) -> None:
    agent = _paused_agent(make_agent)
    agent.invoke({"messages": "x"}, config("other"))
    records = agent.list_threads()
    assert {r.thread_id for r in records} == {"t1", "other"}
    assert [r.thread_id for r in agent.list_threads(status="interrupted")] == ["t1"]
    other = next(r for r in records if r.thread_id == "other")
    updated = datetime.fromtimestamp(other.updated_at, UTC)
    recent = agent.list_threads(updated_after=updated - timedelta(seconds=1))
    assert recent[0].thread_id == "other"
    assert "other" not in [r.thread_id for r in agent.list_threads(updated_before=other.updated_at)]
    assert len(agent.list_threads(limit=1)) == 1
    for bad in (
        {"status": "sleeping"},
        {"limit": 0},
        {"offset": -1},
        {"updated_after": datetime(2026, 1, 1)},
    ):
        with pytest.raises(InvalidInputError):
            agent.list_threads(**bad)  # type: ignore[arg-type]
    assert agent.delete_thread("t1") is True
    assert agent.delete_thread("t1") is False
    assert agent.get_state(config()).values == {"messages": []}
    assert agent.list_interrupts().items == []


def test_reviewer_is_recorded_with_the_decision(make_agent: AgentFactory) -> None:
    agent = _paused_agent(make_agent)
    reviewer = {"id": "dana", "roles": ["dba"]}
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config(reviewer=reviewer))
    from handrail.runtime.events import decode_event

    store = agent.checkpointer
    resume_events = [decode_event(e, "t1") for e in store.read("t1").events if e.kind == "resume"]  # type: ignore[union-attr]
    assert resume_events[0].data["reviewer"] == reviewer
    assert resume_events[0].data["answers"]  # the decision itself is kept too


def test_reading_without_a_checkpointer_says_what_is_missing(make_agent: AgentFactory) -> None:
    agent = make_agent([{"content": "x"}], checkpointer=None)
    with pytest.raises(ConfigurationError, match="no checkpointer"):
        agent.get_state(config())
    with pytest.raises(ConfigurationError, match="no checkpointer"):
        agent.list_interrupts()


def test_storage_grows_with_what_each_turn_adds(make_agent: AgentFactory) -> None:
    """SPEC §6: no re-serialising the history - each turn adds about the same bytes."""
    script = []
    for i in range(40):
        script.append(turn(call("write_file", f"c{i}", path=f"f{i}.txt", content="x" * 200)))
    script.append({"content": "done"})
    agent = make_agent(script)
    agent.invoke({"messages": "go"}, config())
    sizes = []
    for _ in range(40):
        agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
        sizes.append(sum(len(e[2]) for e in events_of(agent)))
    growth = [b - a for a, b in itertools.pairwise(sizes[:-1])]  # the last resume ends the run
    assert max(growth) - min(growth) < 64  # per-turn bytes do not grow with the thread


def test_the_pending_tool_calls_follow_every_change_to_the_messages() -> None:
    """The fold works out the calls still to run once per change to the messages, never stale."""
    from handrail.runtime._fold import ThreadFold
    from handrail.runtime._pending import pending_tool_calls
    from handrail.runtime.events import Event

    fold = ThreadFold("t1")
    seq = itertools.count(1)

    def apply(kind: str, data: dict[str, object]) -> None:
        fold.apply(Event(kind, data, seq=next(seq), created_at=1.0))

    def ids() -> list[str]:
        _, calls = fold.pending_calls()
        assert fold.pending_calls() == pending_tool_calls(fold.messages)  # the same as working it out
        return [str(c["id"]) for c in calls]

    apply("input", {"values": {"messages": [HumanMessage("go", id="h")]}, "next": ["model"]})
    assert ids() == []
    calls = [{"name": "a", "args": {}, "id": "c1"}, {"name": "b", "args": {}, "id": "c2"}]
    ai = AIMessage("", tool_calls=calls, id="m1")
    apply("step", {"step": "model", "values": {"messages": [ai]}, "next": ["tools"]})
    assert ids() == ["c1", "c2"]
    copy = fold.copy()
    apply("update", {"values": {"messages": [ToolMessage("done", tool_call_id="c1", id="r1")]}, "next": []})
    assert ids() == ["c2"]
    assert [str(c["id"]) for c in copy.pending_calls()[1]] == ["c1", "c2"]  # the copy kept its own
    apply("update", {"values": {"messages": [AIMessage("no calls", id="m1")]}, "next": []})  # replaced by id
    assert ids() == []
