"""SPEC §6 and rule 7: what a cycle writes, how often it commits, and that nothing is lost."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from handrail import AgentMiddleware, Command, InMemorySaver, ScriptedModel, create_agent
from handrail.checkpoint.base import Append, ThreadRecord
from handrail.checkpoint.integrity import unseal
from handrail.checkpoint.serde import dumps
from handrail.errors import ConflictError

from _support import AgentFactory, Ledger, call, config, turn


class CountingSaver(InMemorySaver):
    """Counts appends (each one is a commit in a durable store)."""

    def __init__(self) -> None:
        super().__init__()
        self.appends: list[list[str]] = []
        self.records: list[tuple[bool, ThreadRecord, float]] = []  # durable?, row, last event's time
        self.standalone: list[str] = []

    def append(self, thread_id: str, change: Append) -> None:
        events = change.events
        marks = ["+claim"] if change.claim else []
        marks += ["-release"] if change.release else []
        marks += [] if change.durable else ["~relaxed"]
        self.appends.append([e.kind for e in events] + marks)
        self.records.append((change.durable, change.record, events[-1].created_at if events else 0.0))
        super().append(thread_id, change)

    def claim_run(self, thread_id: str, run_id: str) -> None:
        self.standalone.append("claim")
        super().claim_run(thread_id, run_id)

    def release_run(self, thread_id: str, run_id: str) -> None:
        self.standalone.append("release")
        super().release_run(thread_id, run_id)


def test_a_review_cycle_commits_once_per_effect_boundary(make_agent: AgentFactory, ledger: Ledger) -> None:
    """Rule 7 with few commits: saved before each tool runs, before the model is called, at the pause."""
    saver = CountingSaver()
    script = [
        turn(call("write_file", path=f"{i}", content="x"), call("execute_sql", query="q")) for i in range(3)
    ]
    agent = make_agent([*script, {"content": "done"}], checkpointer=saver)
    agent.invoke({"messages": "go"}, config())
    saver.appends.clear()
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}] * 2}), config())
    assert saver.appends == [
        # the answer, the decision step, the calls about to run and the run's claim (rule 9)
        ["resume", "step", "tools_planned", "+claim"],
        # a result is saved before the next call acts; the plan already holds that call
        ["tool_started", "tool_finished", "tool_started", "~relaxed"],
        ["tool_finished", "step", "~relaxed"],  # results saved before the model sees them
        ["step", "interrupt", "-release"],  # the model's answer, the next question, the run ends
    ]
    assert saver.standalone == []  # liveness costs no commit of its own


def test_a_review_cycle_waits_for_the_disk_twice(make_agent: AgentFactory) -> None:
    """Rules 7 and 9: every step is committed, and two commits a cycle are durable.

    The one that records the calls about to run (so after a power cut a call that may
    have acted is never silently run again) and the pause; the commits between them
    are relaxed (kept if the process dies; made durable by the next durable commit).
    """
    saver = CountingSaver()
    edit = {"type": "edit", "edited_action": {"name": "write_file", "args": {"path": "e", "content": "y"}}}
    decisions = [
        [{"type": "approve"}, {"type": "approve"}],
        [edit, {"type": "approve"}],
        [{"type": "approve"}, {"type": "reject", "message": "no"}],
        [{"type": "reject"}, {"type": "reject", "message": "not now"}],
    ]
    script = [
        turn(call("write_file", path=f"{i}", content="x"), call("execute_sql", query="q"))
        for i in range(len(decisions))
    ]
    agent = make_agent([*script, {"content": "done"}], checkpointer=saver)
    agent.invoke({"messages": "go"}, config())
    for answer in decisions:
        saver.appends.clear()
        agent.invoke(Command(resume={"decisions": answer}), config())
        durable = [kinds for kinds in saver.appends if "~relaxed" not in kinds]
        if any(d["type"] in ("approve", "edit") for d in answer):
            # the plan (every call that may act) is durable in the first commit, before any call acts
            assert durable[0][-2:] == ["tools_planned", "+claim"], saver.appends
        else:  # nothing acts: the answer's own commit is durable
            assert durable[0][0] == "resume", saver.appends
        assert saver.appends[0] == durable[0]
        assert durable[-1] == saver.appends[-1]  # the pause, or the final answer
        assert "-release" in durable[-1] or "+claim" not in durable[0]
        assert len(durable) == 2, saver.appends


def test_the_steps_between_durable_commits_keep_the_thread_rows_time(make_agent: AgentFactory) -> None:
    """A thread's ``updated_at`` is when a run last started, paused or finished.

    The relaxed commits in between (a tool's result, the state before the model call)
    keep the time of the run's previous append, so a store need not move the thread in
    its by-time indexes at every step; the pause then carries its own event's time.
    """
    saver = CountingSaver()
    script = [
        turn(call("write_file", path="a", content="x"), call("execute_sql", query="q")),
        {"content": "ok"},
    ]
    agent = make_agent(script, checkpointer=saver)
    agent.invoke({"messages": "go"}, config())
    saver.records.clear()
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}, {"type": "approve"}]}), config())
    durable = [d for d, _, _ in saver.records]
    assert durable[0] and durable[-1] and not any(durable[1:-1]) and len(durable) == 4
    first, *between, last = [(record, at) for _, record, at in saver.records]
    assert first[0].updated_at == first[1]  # the claim: its own events' time
    assert all(record.updated_at == first[0].updated_at for record, _ in between)
    assert all(record.head_seq > first[0].head_seq for record, _ in between)  # the head still moves
    assert last[0].updated_at == last[1] > first[0].updated_at  # the run's end: its own time
    thread = agent.list_threads()[0]
    assert (thread.status, thread.updated_at) == ("idle", last[0].updated_at)


def test_only_the_result_of_a_tool_that_ran_is_saved_before_the_next_call_acts(
    make_agent: AgentFactory, ledger: Ledger
) -> None:
    """Rule 7: a result a tool produced is committed before another call can act; a
    rejection's result is not (it is made again from the saved decision), so a rejected
    call followed by an approved one costs no extra commit."""
    saver = CountingSaver()
    script = [
        turn(call("write_file", path="a", content="x"), call("execute_sql", query="q1")),
        turn(call("write_file", path="b", content="y"), call("execute_sql", query="q2")),
        {"content": "done"},
    ]
    agent = make_agent(script, checkpointer=saver)
    agent.invoke({"messages": "go"}, config())

    saver.appends.clear()
    agent.invoke(Command(resume={"decisions": [{"type": "reject"}, {"type": "approve"}]}), config())
    before_sql = [kinds for kinds in saver.appends if "tool_started" in kinds]
    assert len(saver.appends) == 3, saver.appends  # the plan, the results before the model, the pause
    assert before_sql == [saver.appends[1]] and "~relaxed" in before_sql[0]

    saver.appends.clear()
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}, {"type": "approve"}]}), config())
    # the first tool's result is saved in the same commit as the second call's start
    assert saver.appends[1] == ["tool_started", "tool_finished", "tool_started", "~relaxed"], saver.appends
    assert len(saver.appends) == 4, saver.appends
    assert ledger.names() == ["execute_sql", "write_file", "execute_sql"]


def test_a_failing_hook_keeps_the_steps_before_it(spec_tools: list, ledger: Ledger) -> None:
    """Buffered steps are written even when the run stops on an error."""

    class Fragile(AgentMiddleware):
        def after_agent(self, state: dict[str, Any], runtime: Any) -> None:
            raise RuntimeError("audit service down")

    agent = create_agent(
        ScriptedModel([turn(call("read_data", table="t")), {"content": "answer"}]),
        spec_tools,
        middleware=[Fragile()],
        checkpointer=InMemorySaver(),
    )
    with pytest.raises(RuntimeError, match="audit service down"):
        agent.invoke({"messages": "go"}, config())
    state = agent.get_state(config())
    assert state.values["messages"][-1].content == "answer"
    assert state.next == ("Fragile.after_agent",)
    assert ledger.names() == ["read_data"]


def test_each_turn_stores_about_what_it_adds(make_agent: AgentFactory) -> None:
    """SPEC §6: bytes grow linearly, within twice the size of the messages themselves."""
    text = "the quarterly report shows revenue growth across all regions while costs stayed flat " * 3
    script = [turn(call("write_file", path=f"notes/{i}.txt", content=text[:200])) for i in range(60)]
    agent = make_agent([*script, {"content": "done"}])
    agent.invoke({"messages": "go"}, config())
    for _ in range(60):
        agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    rows = agent.checkpointer.read("t1").events  # type: ignore[union-attr]
    messages = len(dumps(agent.get_state(config()).values["messages"]))
    # each record's seal (rule 18: a marker and a 32-byte hash) is a fixed cost per record
    bodies = sum(len(unseal(e.payload)[1]) for e in rows)
    assert sum(len(e.payload) for e in rows) - bodies == 33 * len(rows)
    assert bodies < 2 * messages, (bodies, messages)


class ReadCountingSaver(InMemorySaver):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def read(self, thread_id: str, **options: Any) -> Any:
        self.reads += 1
        return super().read(thread_id, **options)


def _next(messages: list[Any]) -> dict[str, Any]:
    """A stateless script, so that any agent continues any thread: write when asked, else answer."""
    last = messages[-1]
    if last.type == "human" and "write" in last.content:
        return turn(call("write_file", path="a", content="b"))
    return {"content": "done" if last.type == "tool" else f"re: {last.content}"}


def _two_agents(saver: InMemorySaver, spec_tools: list) -> tuple[Any, Any]:
    from handrail import HumanInTheLoopMiddleware

    def build() -> Any:
        return create_agent(
            ScriptedModel([_next] * 50),
            spec_tools,
            middleware=[HumanInTheLoopMiddleware({"write_file": True})],
            checkpointer=saver,
        )

    return build(), build()  # two agents, two caches: as two processes would be


def test_a_warm_resume_does_not_read_the_store(spec_tools: list) -> None:
    saver = ReadCountingSaver()
    agent, _ = _two_agents(saver, spec_tools)
    agent.invoke({"messages": "write it"}, config())
    saver.reads = 0
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    assert saver.reads == 0  # the first append checks the cached reading instead


def test_a_stale_cached_reading_is_never_acted_on(spec_tools: list, ledger: Ledger) -> None:
    """Another process moved the thread on: the cached reading is retried from the store."""
    saver = InMemorySaver()
    first, second = _two_agents(saver, spec_tools)
    (pending,) = first.invoke({"messages": "write it"}, config())["__interrupt__"]  # first caches it paused
    second.invoke(Command(resume={pending.id: {"decisions": [{"type": "approve"}]}}), config())
    assert ledger.names() == ["write_file"]

    # first's cache still says "paused"; the truth is "finished"
    assert "__interrupt__" not in first.invoke(None, config())
    with pytest.raises(ConflictError, match="already answered"):
        first.invoke(Command(resume={pending.id: {"decisions": [{"type": "approve"}]}}), config())
    assert ledger.names() == ["write_file"]


def test_a_cached_reading_of_a_deleted_thread_is_not_applied_to_its_successor(spec_tools: list) -> None:
    saver = InMemorySaver()
    first, second = _two_agents(saver, spec_tools)
    first.invoke({"messages": "old"}, config())  # first caches the old thread
    second.delete_thread("t1")
    second.invoke({"messages": "new"}, config())  # same id, same length, another thread
    result = first.invoke({"messages": "more"}, config())
    assert [m.content for m in result["messages"] if m.type == "human"] == ["new", "more"]


def test_a_stale_cache_does_not_turn_a_real_pause_into_an_error(spec_tools: list, ledger: Ledger) -> None:
    saver = InMemorySaver()
    first, second = _two_agents(saver, spec_tools)
    first.invoke({"messages": "hello"}, config())  # cached: finished, nothing pending
    second.invoke({"messages": "now write"}, config())  # the thread pauses elsewhere
    # resuming through first works: its stale "nothing pending" is checked against the store
    done = first.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    assert done["messages"][-1].content == "done"
    assert ledger.names() == ["write_file"]


async def test_concurrent_calls_of_an_async_run_share_their_commits(spec_tools: list) -> None:
    """Async runs start a step's calls together: three commits a cycle, however many calls."""
    from handrail import HumanInTheLoopMiddleware, tool

    started: list[str] = []
    all_started = asyncio.Event()

    @tool
    async def fetch(url: str) -> str:
        """Fetch a page (the three calls overlap, as network calls do)."""
        started.append(url)
        if len(started) == 3:
            all_started.set()
        await all_started.wait()
        return f"<{url}>"

    saver = CountingSaver()
    calls = [call("fetch", url=f"u{i}") for i in range(3)]
    agent = create_agent(
        ScriptedModel([turn(*calls), {"content": "done"}]),
        [fetch],
        middleware=[HumanInTheLoopMiddleware({"fetch": True})],
        checkpointer=saver,
    )
    await agent.ainvoke({"messages": "go"}, config())
    saver.appends.clear()
    result = await agent.ainvoke(Command(resume={"decisions": [{"type": "approve"}] * 3}), config())
    assert result["messages"][-1].content == "done"
    assert len(saver.appends) == 3, saver.appends
    assert saver.appends[0][-2:] == ["tools_planned", "+claim"]  # durable: no "~relaxed"
    assert saver.appends[1].count("tool_finished") == 3


class RecordingSaver(InMemorySaver):
    """Records every append, and whether it returned (was confirmed) before the next began."""

    def __init__(self) -> None:
        super().__init__()
        self.changes: list[Append] = []
        self.open = 0

    def append(self, thread_id: str, change: Append) -> None:
        assert self.open == 0, "an append began before the one before it returned"
        self.open += 1
        try:
            super().append(thread_id, change)
        finally:
            self.open -= 1
        self.changes.append(change)


def test_every_append_is_confirmed_before_the_run_goes_on(make_agent: AgentFactory) -> None:
    """Rules 7 and 8: no append is sent without waiting for the store's answer.

    An append confirmed later, by whichever caller read the thread next, let a parked
    run's next append overtake it, so a winning resume was told ConflictError (issue 12).
    """
    saver = RecordingSaver()
    script = [
        turn(call("write_file", path="a", content="x"), call("execute_sql", query="q")),
        {"content": "ok"},
    ]
    agent = make_agent(script, checkpointer=saver)
    agent.invoke({"messages": "go"}, config())
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}, {"type": "approve"}]}), config())
    assert len(saver.changes) >= 4


def test_a_run_that_stops_in_the_model_call_has_saved_the_tool_results_before_it(
    make_agent: AgentFactory,
) -> None:
    """Rule 7: the commit before the model call is made before the call, failing or not."""
    saver = RecordingSaver()

    def down(messages: Any) -> Any:
        raise RuntimeError("the model is down")

    script = [turn(call("write_file", path="a", content="x")), down]
    agent = make_agent(script, checkpointer=saver)
    agent.invoke({"messages": "go"}, config())
    with pytest.raises(RuntimeError, match="the model is down"):
        agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config())
    assert [m.type for m in agent.get_state(config()).values["messages"]] == ["human", "ai", "tool"]
