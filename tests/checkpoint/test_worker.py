"""``handrail.worker.Worker`` on every backend: it runs what reviewers decided, once each,
only for its own agents, and leaves a failed run to the people (rules W1-W5)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from _stores import Location, build_agent, config, finished, log_lines, start

from handrail import HumanInTheLoopMiddleware, InMemorySaver, ScriptedModel, create_agent
from handrail.errors import ConfigurationError
from handrail.runtime.events import decode_notice
from handrail.worker import Worker

ALICE = {"id": "alice", "roles": ["ops"]}
APPROVE = {"decisions": [{"type": "approve"}]}


async def _until(check: Any, what: str, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, f"gave up waiting for {what}"
        await asyncio.sleep(0.02)


async def test_a_worker_runs_the_threads_reviewers_answered(location: Location, tmp_path: Path) -> None:
    log = tmp_path / "tool.log"
    agent = build_agent(location.saver(), log)
    for n in range(3):
        agent.decide(f"t{n}", start(agent, f"t{n}"), APPROVE, reviewer=ALICE)
    worker = Worker({"agent": build_agent(location.saver(), log)}, poll=0.05)
    running = asyncio.create_task(worker.run())
    await _until(lambda: worker.ran == 3, "three runs")
    late = start(agent, "late")  # queued while the worker waits: woken or polled
    agent.decide("late", late, APPROVE, reviewer=ALICE)
    await _until(lambda: worker.ran == 4, "the fourth run")
    await worker.stop()
    await running
    assert sorted(log_lines(log)) == ["late", "t0", "t1", "t2"]
    for thread in ("t0", "t1", "t2", "late"):
        assert finished(agent.get_state(config(thread)).values)


async def test_two_workers_on_one_store_run_each_thread_once(
    durable_location: Location, tmp_path: Path
) -> None:
    """Rule W1 with two savers (two processes, as far as the store can tell)."""
    log = tmp_path / "tool.log"
    agent = build_agent(durable_location.saver(), log)
    for n in range(8):
        agent.decide(f"t{n}", start(agent, f"t{n}"), APPROVE, reviewer=ALICE)
    workers = [Worker({"agent": build_agent(durable_location.saver(), log)}, poll=0.05) for _ in range(2)]
    tasks = [asyncio.create_task(w.run()) for w in workers]
    await _until(lambda: sum(w.ran for w in workers) >= 8, "eight runs")
    for worker in workers:
        await worker.stop()
    await asyncio.gather(*tasks)
    assert sorted(log_lines(log)) == sorted(f"t{n}" for n in range(8))


async def test_a_worker_takes_only_its_own_agents_threads(location: Location, tmp_path: Path) -> None:
    """Rule W3: threads named for another assistant stay queued; unnamed ones are the first agent's."""
    log = tmp_path / "tool.log"
    agent = build_agent(location.saver(), log)
    for thread, meta in (
        ("ours", {"assistant_id": "sql"}),
        ("theirs", {"assistant_id": "billing"}),
        ("plain", {}),
    ):
        result = agent.invoke({"messages": [f"write_file:{thread}"]}, {**config(thread), "metadata": meta})
        agent.decide(thread, result["__interrupt__"][0].id, APPROVE, reviewer=ALICE)
    worker = Worker({"sql": build_agent(location.saver(), log)}, poll=0.05)
    running = asyncio.create_task(worker.run())
    await _until(lambda: worker.ran == 2, "two runs")
    await asyncio.sleep(0.2)
    await worker.stop()
    await running
    assert sorted(log_lines(log)) == ["ours", "plain"]
    assert location.saver().claim_queued("run-billing") == "theirs"


async def test_a_failed_run_is_left_with_its_reason_not_retried(location: Location, tmp_path: Path) -> None:
    """Rule W4: the model fails after the tool ran; the worker goes on, the thread says why."""

    def broken(messages: list[Any]) -> Any:
        raise RuntimeError("the model's service is down")

    model = ScriptedModel(
        [{"content": "", "tool_calls": [{"name": "note", "args": {"text": "x"}}]}, broken, broken, broken]
    )

    def note(text: str) -> str:
        """Take a note."""
        return "noted"

    saver = location.saver()
    agent = create_agent(
        model, [note], middleware=[HumanInTheLoopMiddleware({"note": True})], checkpointer=saver
    )
    paused = agent.invoke({"messages": ["go"]}, config("t1"))
    end = saver.feed_end()
    agent.decide("t1", paused["__interrupt__"][0].id, APPROVE, reviewer=ALICE)
    worker = Worker({"agent": agent}, poll=0.05)
    running = asyncio.create_task(worker.run())
    await _until(lambda: worker.ran == 1, "the run")
    await asyncio.sleep(0.3)  # time for a retry, were there one
    await worker.stop()
    await running
    assert worker.ran == 1 and len(model.calls) == 2
    told = [(e.kind, decode_notice(e.data, e.thread_id, e.cursor)) for e in saver.read_feed(end)]
    assert [kind for kind, _ in told] == ["review.decided", "run.finished"]
    assert (told[1][1]["status"], told[1][1]["thread_status"]) == ("error", "running")
    assert saver.claim_queued("run-again") is None
    (failed,) = [e for e in agent.get_audit_trail(config("t1")) if e.event == "run_failed"]
    assert failed.value["error"] == "RuntimeError: the model's service is down"
    state = agent.get_state(config("t1"))
    assert state.values["messages"][-1].content == "noted"  # what the run saved stays


async def test_stop_lets_the_runs_going_finish(location: Location, tmp_path: Path) -> None:
    release = asyncio.Event()
    started = asyncio.Event()

    async def slow(text: str) -> str:
        """A tool that waits to be let go."""
        started.set()
        await release.wait()
        return "done slowly"

    agent = create_agent(
        ScriptedModel(
            [{"content": "", "tool_calls": [{"name": "slow", "args": {"text": "x"}}]}, {"content": "ok"}]
        ),
        [slow],
        middleware=[HumanInTheLoopMiddleware({"slow": True})],
        checkpointer=location.saver(),
    )
    paused = await agent.ainvoke({"messages": ["go"]}, config("t1"))
    await agent.adecide("t1", paused["__interrupt__"][0].id, APPROVE, reviewer=ALICE)
    worker = Worker({"agent": agent}, poll=0.05)
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 60)
    stopping = asyncio.create_task(worker.stop(timeout=60))
    await asyncio.sleep(0.1)
    assert not stopping.done()  # waits for the run
    release.set()
    await stopping
    await running
    assert (await agent.aget_state(config("t1"))).values["messages"][-1].content == "ok"


def test_a_worker_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="at least one agent"):
        Worker({})
    no_store = create_agent(ScriptedModel([{"content": "hi"}]), [])
    with pytest.raises(ConfigurationError, match="no checkpointer"):
        Worker({"a": no_store})
    agent = build_agent(InMemorySaver(), tmp_path / "log")
    with pytest.raises(ConfigurationError, match="concurrency"):
        Worker({"a": agent}, concurrency=0)
    with pytest.raises(ConfigurationError, match="poll"):
        Worker({"a": agent}, poll=0)


async def test_a_worker_runs_at_most_its_concurrency_at_once(location: Location, tmp_path: Path) -> None:
    """Five answered threads, room for two: never more than two tools at once, all five done."""
    going, most = 0, 0

    async def slow(text: str) -> str:
        """A tool that waits a moment."""
        nonlocal going, most
        going += 1
        most = max(most, going)
        await asyncio.sleep(0.05)
        going -= 1
        return "ok"

    agent = create_agent(
        ScriptedModel([_call_slow] * 100),
        [slow],
        middleware=[HumanInTheLoopMiddleware({"slow": True})],
        checkpointer=location.saver(),
    )
    for n in range(5):
        paused = await agent.ainvoke({"messages": ["go"]}, config(f"t{n}"))
        await agent.adecide(f"t{n}", paused["__interrupt__"][0].id, APPROVE, reviewer=ALICE)
    worker = Worker({"agent": agent}, concurrency=2, poll=0.05)
    running = asyncio.create_task(worker.run())
    await _until(lambda: worker.ran == 5, "five runs")
    await worker.stop()
    await running
    assert most == 2


def _call_slow(messages: list[Any]) -> dict[str, Any]:
    if messages and getattr(messages[-1], "type", "") == "tool":
        return {"content": "done"}
    return {"content": "", "tool_calls": [{"name": "slow", "args": {"text": "x"}}]}


async def test_a_worker_of_one_agent_reads_no_record_before_the_run(
    location: Location, tmp_path: Path
) -> None:
    """The claim's filter names one agent: the worker runs it without reading the thread's
    record first (one round trip less on a server); the run's own read comes next."""
    log = tmp_path / "tool.log"
    agent = build_agent(location.saver(), log)
    agent.decide("t1", start(agent, "t1"), APPROVE, reviewer=ALICE)
    saver = location.saver()
    worker = Worker({"agent": build_agent(saver, log)})
    records: list[str] = []
    get_thread = saver.aget_thread

    async def counted(thread_id: str) -> Any:
        records.append(thread_id)
        return await get_thread(thread_id)

    saver.aget_thread = counted  # type: ignore[method-assign]
    result = await worker.run_thread("t1")
    assert result is not None and finished(result.values)
    assert records == [] and log_lines(log) == ["t1"]


async def test_a_claimed_run_loads_its_thread_with_the_claim(location: Location, tmp_path: Path) -> None:
    """On Postgres the claim of a queued thread reads it in the same round trip: the run
    reads nothing more before it acts. A thread changed between the claim and the run's
    first append is read again (that append is refused first), and the run goes on from
    the thread as it is: here an edit of its state superseded the answered review, so
    the run asks again and runs nothing."""
    log = tmp_path / "tool.log"
    agent = build_agent(location.saver(), log)
    for thread in ("t1", "t2"):
        agent.decide(thread, start(agent, thread), APPROVE, reviewer=ALICE)
    saver = location.saver()
    reads: list[str] = []
    read = saver.read

    def counted(thread_id: str, **kwargs: Any) -> Any:
        reads.append(thread_id)
        return read(thread_id, **kwargs)

    saver.read = counted  # type: ignore[method-assign]
    worker = Worker({"agent": build_agent(saver, log)})
    result = await worker.run_thread("t1")
    assert result is not None and finished(result.values)
    postgres = location.backend not in ("memory", "sqlite")
    assert reads == ([] if postgres else ["t1"])
    # the thread moves on between the claim and the run: the run reads it again
    reads.clear()
    assert saver.claim_queued("run-late", thread_id="t2") == "t2"
    agent.update_state(config("t2"), {"messages": []})
    result = await build_agent(saver, log).arun_claimed("t2", "run-late")
    assert result.interrupts and log_lines(log) == ["t1"]
    assert "t2" in reads  # Postgres: once the claim's read was refused; others: the run's read
    assert saver.runs_alive("t2") == set()
