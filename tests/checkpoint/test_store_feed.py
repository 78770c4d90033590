"""The store's feed of notices and its queue of answered threads, on every backend.

The feed tells readers (the live inbox, later notifications) what happened, written in
the same transaction as the events it tells of; the queue hands each answered thread to
exactly one worker (``handrail.worker`` rules W1-W2), and a dead worker's run to the
next one, whose run raises the unfinished call as ``outcome_unknown`` (SPEC rule 9).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _stores import PGBOUNCER, Location, Store, approve, build_agent, config, finished, log_lines, start

from handrail.checkpoint.base import ClaimFilter
from handrail.errors import ConflictError
from handrail.runtime.events import decode_notice

WORKER = str(Path(__file__).with_name("_stores.py"))
ALICE = {"id": "alice", "roles": ["ops"]}
APPROVE = {"decisions": [{"type": "approve"}]}


def told(entries: list[Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(e.thread_id, e.kind, decode_notice(e.data, e.thread_id, e.cursor)) for e in entries]


async def test_a_review_cycle_tells_the_feed_what_was_asked_answered_and_ended(
    store: Store, tmp_path: Path
) -> None:
    agent = build_agent(store.saver, tmp_path / "tool.log")
    if store.is_async:
        result = await agent.ainvoke({"messages": ["write_file:t1"]}, config("t1"))
    else:
        result = agent.invoke({"messages": ["write_file:t1"]}, config("t1"))
    interrupt_id = result["__interrupt__"][0].id
    first = await store.read_feed()
    (asked_thread, asked, value), (_, ended, run) = told(first)
    assert (asked_thread, asked, ended) == ("t1", "review.requested", "run.finished")
    assert value["interrupt_id"] == interrupt_id and value["tools"] == ["write_file"]
    assert value["kind"] == "interrupt"
    assert value["value"]["action_requests"][0]["args"] == {"path": "t1"}
    assert run["status"] == "success" and run["thread_status"] == "interrupted"
    assert first[0].seq < first[1].seq or first[0].seq == first[1].seq  # the head after each append
    end = await store.feed_end()
    assert end == first[-1].cursor
    if store.is_async:
        await agent.ainvoke(approve(interrupt_id), {"configurable": {"thread_id": "t1", "reviewer": ALICE}})
    else:
        agent.invoke(approve(interrupt_id), {"configurable": {"thread_id": "t1", "reviewer": ALICE}})
    later = told(await store.read_feed(end))
    assert [kind for _, kind, _ in later] == ["review.decided", "run.finished"]
    decided = later[0][2]
    assert (decided["interrupt_id"], decided["reviewer"], decided["channel"]) == (
        interrupt_id,
        ALICE,
        "python",
    )
    assert decided["answer"] == APPROVE and decided["tools"] == [
        "write_file"
    ]  # what was asked, and how answered
    assert decided["value"]["action_requests"][0]["args"] == {"path": "t1"}
    assert later[1][2]["thread_status"] == "idle"
    assert await store.read_feed(await store.feed_end()) == []
    # paging: a limit, and going on from each page's last cursor, reads every notice once
    pages, cursor = [], None
    while batch := await store.read_feed(cursor, limit=1):
        pages += batch
        cursor = batch[-1].cursor
    assert [e.cursor for e in pages] == [e.cursor for e in await store.read_feed()]


async def test_a_cursor_the_feed_never_gave_is_refused(store: Store) -> None:
    for cursor in ("nonsense", "-1", "1:2:3", "x" * 200, "1e5"):
        with pytest.raises(ValueError, match="not a cursor of this feed"):
            await store.read_feed(cursor)


def test_trimming_drops_old_notices_and_keeps_the_cursors(location: Location, tmp_path: Path) -> None:
    saver = location.saver()
    agent = build_agent(saver, tmp_path / "tool.log")
    start(agent, "t1")
    old = saver.read_feed()
    assert saver.trim_feed(time.time() + 1) == len(old)
    assert saver.read_feed() == []
    start(agent, "t2")
    new = saver.read_feed(old[-1].cursor)
    assert [e.thread_id for e in new] == ["t2", "t2"]  # numbers go on: a kept cursor still reads
    assert saver.trim_feed(0) == 0


def test_an_answer_recorded_for_a_worker_queues_its_thread_for_exactly_one_claim(
    location: Location, tmp_path: Path
) -> None:
    saver = location.saver()
    agent = build_agent(saver, tmp_path / "tool.log")
    interrupt_id = start(agent, "t1")
    assert saver.claim_queued("run-early") is None  # paused, not answered: nothing to do
    agent.decide("t1", interrupt_id, APPROVE, reviewer=ALICE)
    other = location.saver()
    assert other.claim_queued("run-1") == "t1"
    assert saver.claim_queued("run-2") is None and other.claim_queued("run-3") is None
    assert other.runs_alive("t1") == {"run-1"}
    result = build_agent(other, tmp_path / "tool.log").run_claimed("t1", "run-1")
    assert finished(result.values) and log_lines(tmp_path / "tool.log") == ["t1"]
    assert other.runs_alive("t1") == set() and saver.claim_queued("run-4") is None


def test_a_run_that_acts_takes_its_thread_off_the_queue(location: Location, tmp_path: Path) -> None:
    saver = location.saver()
    agent = build_agent(saver, tmp_path / "tool.log")
    interrupt_id = start(agent, "t1")
    agent.decide("t1", interrupt_id, APPROVE, reviewer=ALICE)
    agent.invoke(None, config("t1"))  # the program runs it itself
    assert finished(agent.get_state(config("t1")).values)
    assert saver.claim_queued("run-late") is None
    assert log_lines(tmp_path / "tool.log") == ["t1"]


def test_a_thread_with_a_live_run_is_not_claimed(location: Location, tmp_path: Path) -> None:
    saver = location.saver()
    agent = build_agent(saver, tmp_path / "tool.log")
    interrupt_id = start(agent, "t1")
    saver.claim_run("t1", "run-busy")  # another process is running it as the answer comes
    agent.decide("t1", interrupt_id, APPROVE, reviewer=ALICE)
    assert saver.claim_queued("run-w") is None
    saver.release_run("t1", "run-busy")
    assert saver.claim_queued("run-w") == "t1"
    # a claim on a queued thread takes it off the queue: its claimer runs it
    other = build_agent(saver, tmp_path / "tool.log")
    second = start(other, "t2")
    other.decide("t2", second, APPROVE, reviewer=ALICE)
    saver.claim_run("t2", "run-mine")
    saver.release_run("t2", "run-mine")
    assert saver.claim_queued("run-x") is None


def test_a_claim_takes_only_the_threads_its_filter_names(location: Location, tmp_path: Path) -> None:
    saver = location.saver()
    agent = build_agent(saver, tmp_path / "tool.log")
    for thread, meta in (
        ("mine", {"assistant_id": "sql"}),
        ("theirs", {"assistant_id": "billing"}),
        ("plain", {}),
    ):
        result = agent.invoke({"messages": [f"write_file:{thread}"]}, {**config(thread), "metadata": meta})
        agent.decide(thread, result["__interrupt__"][0].id, APPROVE, reviewer=ALICE)
    sql = ClaimFilter("assistant_id", ("sql",))
    assert saver.claim_queued("run-a", filter=sql) == "mine"
    assert saver.claim_queued("run-b", filter=sql) is None
    assert saver.claim_queued("run-c", filter=sql, thread_id="plain") is None
    assert (
        saver.claim_queued("run-d", filter=ClaimFilter("assistant_id", ("sql",), or_missing=True)) == "plain"
    )
    assert saver.claim_queued("run-e", thread_id="nothing-here") is None
    assert saver.claim_queued("run-f", thread_id="theirs") == "theirs"


def test_a_conflicting_answer_writes_no_notice_and_queues_nothing(location: Location, tmp_path: Path) -> None:
    """Rule 8: nothing of the loser is saved - not its events, its notices or its queued row."""
    saver = location.saver()
    agent = build_agent(saver, tmp_path / "tool.log")
    interrupt_id = start(agent, "t1")
    agent.invoke(approve(interrupt_id), config("t1"))
    end = saver.feed_end()
    with pytest.raises(ConflictError):
        agent.decide("t1", interrupt_id, APPROVE, reviewer=ALICE)
    assert saver.read_feed(end) == [] and saver.claim_queued("run-x") is None


def test_claimers_racing_take_each_queued_thread_once(location: Location, tmp_path: Path) -> None:
    """Rule W1: four Python threads, each with a saver of its own, claim 12 queued threads."""
    saver = location.saver()
    agent = build_agent(saver, tmp_path / "tool.log")
    for n in range(12):
        agent.decide(f"t{n}", start(agent, f"t{n}"), APPROVE, reviewer=ALICE)
    savers = [location.saver() for _ in range(4)]
    won: list[str] = []
    barrier = threading.Barrier(len(savers))

    def claim(own: Any, name: str) -> None:
        barrier.wait()
        count = 0
        while (thread := own.claim_queued(f"run-{name}-{count}")) is not None:
            won.append(thread)
            count += 1

    racers = [threading.Thread(target=claim, args=(own, str(n))) for n, own in enumerate(savers)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(60)
    assert sorted(won) == sorted(f"t{n}" for n in range(12))


def test_a_dead_workers_run_is_taken_over_and_its_call_raised_as_outcome_unknown(
    durable_location: Location, tmp_path: Path
) -> None:
    """Rules W2 and 9: the worker process dies inside the tool; the next claim takes the
    thread, and its run asks about the call instead of running it again."""
    location = durable_location
    log = tmp_path / "tool.log"
    saver = location.saver()
    agent = build_agent(saver, log)
    interrupt_id = start(agent, "t1")
    agent.decide("t1", interrupt_id, APPROVE, reviewer=ALICE)
    command = {"store": location.spec, "log": str(log), "thread": "t1", "op": "work", "tool_mode": "kill"}
    done = subprocess.run(
        [sys.executable, WORKER, "run", json.dumps(command)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == -9, done.stderr  # SIGKILL, in the tool, after its effect
    assert log_lines(log) == ["t1"]
    deadline = time.monotonic() + 60
    while (claimed := saver.claim_queued("run-next")) is None:  # its owner is seen dead
        assert time.monotonic() < deadline, "the dead worker's run was never handed on"
        time.sleep(0.05)
    assert claimed == "t1"
    result = agent.run_claimed("t1", "run-next")
    (unknown,) = result.interrupts
    assert unknown.value["type"] == "outcome_unknown" and unknown.value["name"] == "write_file"
    assert log_lines(log) == ["t1"]  # not run again silently
    told_now = told(saver.read_feed())
    assert ("t1", "review.requested") in [(t, k) for t, k, _ in told_now]
    assert told_now[-2][2]["kind"] == "outcome_unknown"


def test_waiting_for_the_queue_wakes_when_a_thread_is_queued(location: Location, tmp_path: Path) -> None:
    """Rule W5: a waiter wakes at the queueing commit (PostgreSQL: LISTEN from another saver;
    memory and SQLite: the saver's own process), long before its timeout."""
    saver = location.saver()
    waiter = saver if location.backend in ("memory", "sqlite") else location.saver()
    if location.backend == PGBOUNCER:  # LISTEN needs a session: through a transaction pooler it only polls
        began = time.monotonic()
        waiter.wait_queued(0.2)
        assert time.monotonic() - began >= 0.2
        return
    agent = build_agent(saver, tmp_path / "tool.log")
    interrupt_id = start(agent, "t1")
    waiter.wait_queued(0.01)  # the first wait opens the listening connection
    woke: list[float] = []

    def wait() -> None:
        began = time.monotonic()
        waiter.wait_queued(30)
        woke.append(time.monotonic() - began)

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.3)
    agent.decide("t1", interrupt_id, APPROVE, reviewer=ALICE)
    thread.join(40)
    assert woke and woke[0] < 25  # woken, not timed out (a generous bound: shared machines)


async def test_a_large_review_is_told_packed_as_its_event_is_and_reads_back_whole(
    store: Store, tmp_path: Path
) -> None:
    """A review's notice holds its value: a large one is stored compressed, like the
    interrupt event it tells of (a memory store keeps every notice in memory)."""
    long_path = "notes/" + "quarterly-report-" * 60
    agent = build_agent(store.saver, tmp_path / "tool.log")
    if store.is_async:
        await agent.ainvoke({"messages": [f"write_file:{long_path}"]}, config("t1"))
    else:
        agent.invoke({"messages": [f"write_file:{long_path}"]}, config("t1"))
    asked = (await store.read_feed())[0]
    data = decode_notice(asked.data, asked.thread_id, asked.cursor)
    assert data["value"]["action_requests"][0]["args"] == {"path": long_path}
    assert len(asked.data) < len(json.dumps(data).encode()) / 2


def test_a_damaged_notice_raises_naming_its_thread_and_place() -> None:
    from handrail.checkpoint.serde import dumps
    from handrail.errors import SerializationError
    from handrail.runtime.events import pack_payload

    data = {"value": {"text": "the quick brown fox " * 40}}
    packed = pack_payload(dumps(data))
    assert decode_notice(packed, "t1", "41") == data
    for damaged in (packed[:-4], b"{not json", b"\x04" + b"\x00" * 12):
        with pytest.raises(SerializationError, match="thread 't1', notice 41"):
            decode_notice(damaged, "t1", "41")


def test_a_first_run_that_died_right_after_saving_its_input_is_taken_over(
    durable_location: Location, tmp_path: Path
) -> None:
    """Issue 24: the process dies just after the new thread's input is saved, before its
    first step: the run's claim lapses with it, and the next worker takes the thread and
    runs it to its review."""
    location = durable_location
    log = tmp_path / "tool.log"
    command = {
        "store": location.spec,
        "log": str(log),
        "thread": "t1",
        "op": "start",
        "kill_at": [1, "after"],
    }
    done = subprocess.run(
        [sys.executable, WORKER, "run", json.dumps(command)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == -9, done.stderr
    saver = location.saver()
    record = saver.get_thread("t1")
    assert record is not None and record.status == "running" and not record.pending  # input only
    deadline = time.monotonic() + 60
    while (claimed := saver.claim_queued("run-next")) is None:  # its owner is seen dead
        assert time.monotonic() < deadline, "the dead run's thread was never handed on"
        time.sleep(0.05)
    assert claimed == "t1"
    result = build_agent(saver, log).run_claimed("t1", "run-next")
    (review,) = result.interrupts
    assert review.value["action_requests"][0]["name"] == "write_file"
    assert log_lines(log) == []


@pytest.mark.parametrize("backend", ["postgres", PGBOUNCER], indirect=True)
def test_a_postgres_claim_of_a_queued_thread_is_one_round_trip(location: Location, tmp_path: Path) -> None:
    """The pick, the claim and the read of the claimed thread are statements of one
    transaction, sent together: a worker waits for the server once to take a thread and
    load it (and once to find none)."""
    saver = location.saver()
    agent = build_agent(saver, tmp_path / "tool.log")
    for thread in ("t1", "t2"):
        agent.decide(thread, start(agent, thread), APPROVE, reviewer=ALICE)
    claimer = location.saver()
    assert claimer.claim_queued("run-0") is not None  # takes the liveness lock first, once
    batches: list[int] = []
    execute = claimer._io.execute  # type: ignore[attr-defined]

    def counted(conn: Any, batch: list[Any]) -> Any:
        batches.append(len(batch))
        return execute(conn, batch)

    claimer._io.execute = counted  # type: ignore[attr-defined]
    assert claimer.claim_queued("run-1") is not None
    assert batches == [5]  # BEGIN, the pick, the claim, the read, COMMIT: one round trip
    batches.clear()
    assert claimer.claim_queued("run-2") is None
    assert batches == [5]
