"""Rules 7, 8 and 9 across real processes, on SQLite and Postgres.

The other processes run ``_stores.py``: fresh interpreters for rule 7 and the rule-8
race, a fork server for the many SIGKILL cases (a child per case, started in
milliseconds). Processes are synchronised by pipes, never by sleeping; the timeouts
in ``wait_until`` are only safety nets.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _stores import (
    Location,
    approve,
    build_agent,
    config,
    finished,
    log_lines,
    start,
    wait_until,
)

from handrail import Command, ToolMessage
from handrail.agent import Agent
from handrail.errors import ConflictError
from handrail.runtime.events import decode_event

WORKER = str(Path(__file__).with_name("_stores.py"))
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="uses fork and SIGKILL")


def run_worker(command: dict[str, Any]) -> dict[str, Any]:
    """Run one command in a fresh interpreter, which then exits."""
    done = subprocess.run(
        [sys.executable, WORKER, "run", json.dumps(command)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


class ForkServer:
    """Runs commands in forked children of one warmed-up worker (see ``_stores._serve``)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, WORKER, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def run(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, "the fork server died"
        report: dict[str, Any] = json.loads(line)
        return report

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


@pytest.fixture(scope="module")
def forks() -> Iterator[ForkServer]:
    server = ForkServer()
    yield server
    server.close()


def dead(saver: Any, thread_id: str) -> None:
    """Wait until no run of the thread is alive (Postgres ends a killed session a moment later)."""
    wait_until(lambda: saver.runs_alive(thread_id) == set(), f"the runs of {thread_id} to be seen dead")


# Rule 7: a pause outlives its process ------------------------------------------------------------
def test_a_pause_made_in_one_process_is_resumed_in_another(
    durable_location: Location, tmp_path: Path
) -> None:
    log = tmp_path / "tool.log"
    spec = {"store": durable_location.spec, "log": str(log), "thread": "t1"}
    paused = run_worker({**spec, "op": "start"})
    here = build_agent(durable_location.saver(), log)
    assert [i.id for i in here.get_state(config("t1")).interrupts] == [paused["interrupt"]]

    assert run_worker({**spec, "op": "resume", "interrupt": paused["interrupt"]}) == {"applied": True}
    assert log_lines(log) == ["t1"]
    assert finished(here.get_state(config("t1")).values)


# Rule 8: one writer per thread ----------------------------------------------------------------------
def test_two_processes_resuming_one_interrupt_one_applies(durable_location: Location, tmp_path: Path) -> None:
    log = tmp_path / "tool.log"
    rounds = 20
    here = build_agent(durable_location.saver(), log)
    paused = {f"t{n}": start(here, f"t{n}") for n in range(rounds)}
    spec = json.dumps({"store": durable_location.spec, "log": str(log)})
    racers = [
        subprocess.Popen(
            [sys.executable, WORKER, "race", spec], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    try:
        for racer in racers:
            assert racer.stdout is not None and racer.stdout.readline() == "ready\n"
        for thread_id, interrupt_id in paused.items():
            for racer in racers:  # release both at once: the parent is the barrier
                assert racer.stdin is not None
                racer.stdin.write(f"go {thread_id} {interrupt_id}\n")
                racer.stdin.flush()
            lines = [racer.stdout.readline() for racer in racers if racer.stdout]
            assert all(lines), f"a racer died at {thread_id}"
            assert sorted(line.split()[0] for line in lines) == ["applied", "conflict"], lines
    finally:
        for racer in racers:
            if racer.stdin is not None:
                racer.stdin.close()
            racer.wait(timeout=60)
    assert sorted(log_lines(log)) == sorted(paused)  # every approved tool ran exactly once
    for thread_id in paused:
        assert finished(here.get_state(config(thread_id)).values)


async def test_async_resumes_racing_in_one_process_one_applies(
    adurable_location: Location, tmp_path: Path
) -> None:
    alocation = adurable_location
    log = tmp_path / "tool.log"
    first = build_agent(await alocation.asaver(), log)
    second = build_agent(await alocation.asaver(), log)
    for n in range(15):
        thread_id = f"t{n}"
        result: Any = await first.ainvoke({"messages": [f"write_file:{thread_id}"]}, config(thread_id))
        (interrupt,) = result["__interrupt__"]
        outcomes = await asyncio.gather(
            first.ainvoke(approve(interrupt.id), config(thread_id)),
            second.ainvoke(approve(interrupt.id), config(thread_id)),
            return_exceptions=True,
        )
        (won,) = [o for o in outcomes if isinstance(o, dict)]
        (lost,) = [o for o in outcomes if isinstance(o, BaseException)]
        assert finished(won)
        assert isinstance(lost, ConflictError), lost
        assert lost.thread_id == thread_id and interrupt.id in lost.interrupt_ids
        assert log_lines(log).count(thread_id) == 1


# Rule 9: killed inside an approved tool -------------------------------------------------------------
def _killed_in_tool(
    forks: ForkServer, location: Location, log: Path, mode: str, tool_name: str = "write_file"
) -> tuple[Agent, Any]:
    """Pause here, resume in a child that the fork server SIGKILLs while its tool runs.

    In ``mode="async"`` the child resumes with ``ainvoke`` on the async saver.
    """
    saver = location.saver()
    here = build_agent(saver, log)
    interrupt_id = start(here, "t1", tool_name)
    report = forks.run(
        {
            "op": "resume",
            "store": location.spec,
            "log": str(log),
            "thread": "t1",
            "interrupt": interrupt_id,
            "tool_mode": "hang",
            "kill_when": "in_tool",
            "async": mode == "async",
        }
    )
    assert report["killed"] and report["notes"] == ["in_tool"], report
    assert log_lines(log) == ["t1"]
    dead(saver, "t1")
    here.killed_pid = report["pid"]  # type: ignore[attr-defined]
    return here, saver


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(
    ("decision", "runs", "content", "status"),
    [
        ({"type": "approve"}, 2, "wrote t1", "success"),
        ({"type": "respond", "message": "it went through"}, 1, "it went through", "success"),
        ({"type": "reject", "message": "leave it"}, 1, "leave it", "error"),
    ],
)
def test_a_tool_killed_mid_run_comes_back_as_outcome_unknown(
    forks: ForkServer,
    durable_location: Location,
    tmp_path: Path,
    mode: str,
    decision: dict[str, Any],
    runs: int,
    content: str,
    status: str,
) -> None:
    log = tmp_path / "tool.log"
    here, _ = _killed_in_tool(forks, durable_location, log, mode)
    fresh = build_agent(durable_location.saver(), log)  # another process's view
    (unknown,) = fresh.get_state(config("t1")).interrupts
    assert unknown.value["type"] == "outcome_unknown"
    assert unknown.value["name"] == "write_file" and unknown.value["args"] == {"path": "t1"}
    # invoke(None) shows the same interrupt, and runs nothing
    (again,) = here.invoke(None, config("t1"))["__interrupt__"]
    assert again == unknown
    assert log_lines(log) == ["t1"]

    result = fresh.invoke(Command(resume={unknown.id: decision}), config("t1"))
    assert finished(result)
    (tool_message,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert tool_message.tool_call_id == unknown.value["tool_call_id"]
    assert content in str(tool_message.content) and tool_message.status == status
    assert log_lines(log) == ["t1"] * runs


def test_the_audit_of_a_tool_killed_mid_run_tells_its_start_the_death_and_the_takeover(
    forks: ForkServer, durable_location: Location, tmp_path: Path
) -> None:
    """Issue 25 item 4: the trail says the call started (by which run, in which process,
    when), that its run died and who took over, then the outcome_unknown review."""
    log = tmp_path / "tool.log"
    here, _ = _killed_in_tool(forks, durable_location, log, "sync")
    killed_pid = here.killed_pid  # type: ignore[attr-defined]
    taker = build_agent(durable_location.saver(), log)
    (unknown,) = taker.invoke(None, config("t1"))["__interrupt__"]
    trail = taker.get_audit_trail(config("t1"))
    events = [entry.event for entry in trail]
    assert events[-4:] == ["answered", "tool_started", "run_abandoned", "review_requested"], events
    started, abandoned, asked = trail[-3:]
    assert started.tool == "write_file" and started.args == {"path": "t1"}
    assert started.tool_call_id == unknown.value["tool_call_id"] and started.kind == "planned"
    dead_run = started.value["run_id"]
    assert dead_run and started.value["worker"].endswith(f":{killed_pid}")
    assert trail[-4].at <= started.at <= abandoned.at
    assert abandoned.value["run_id"] == dead_run
    assert abandoned.value["worker"] == started.value["worker"]
    took_over = abandoned.value["taken_over_by"]
    assert took_over["run_id"] not in (None, dead_run)
    assert took_over["worker"].endswith(f":{os.getpid()}")
    assert (asked.kind, asked.interrupt_id) == ("outcome_unknown", unknown.id)

    # answered and run again, the call's new start names the run that ran it
    taker.invoke(Command(resume={unknown.id: {"type": "approve"}}), config("t1"))
    trail = taker.get_audit_trail(config("t1"))
    (again,) = [e for e in trail if e.event == "tool_started" and e.kind is None]
    assert again.value["worker"].endswith(f":{os.getpid()}") and again.value["run_id"] != dead_run
    assert [e.event for e in trail].count("run_abandoned") == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_idempotent_tool_killed_mid_run_simply_runs_again(
    forks: ForkServer, durable_location: Location, tmp_path: Path, mode: str
) -> None:
    log = tmp_path / "tool.log"
    here, _ = _killed_in_tool(forks, durable_location, log, mode, tool_name="touch_file")
    assert here.get_state(config("t1")).interrupts == ()
    assert finished(here.invoke(None, config("t1")))
    assert log_lines(log) == ["t1", "t1"]


# Killed anywhere: the thread always reloads and resumes -----------------------------------------------
def _recover(agent: Agent, thread_id: str) -> tuple[Any, int]:
    """Drive a thread to its end as a person would; return the state and outcome_unknown count."""
    unknowns = 0
    for _ in range(12):
        state = agent.get_state(config(thread_id))
        if state.interrupts:
            answers = {}
            for interrupt in state.interrupts:
                if interrupt.value.get("type") == "outcome_unknown":
                    unknowns += 1
                    answers[interrupt.id] = {"type": "approve"}
                else:
                    answers[interrupt.id] = {"decisions": [{"type": "approve"}]}
            agent.invoke(Command(resume=answers), config(thread_id))
        elif state.next:
            agent.invoke(None, config(thread_id))
        elif not state.values.get("messages"):
            agent.invoke({"messages": [f"write_file:{thread_id}"]}, config(thread_id))
        else:
            return state, unknowns
    raise AssertionError(f"{thread_id} did not finish: {state}")


def _kill_points() -> list[dict[str, Any]]:
    shuffle = random.Random(7)
    # every other point also saves the whole state at the end of each run (a saved reading),
    # so that kills fall on those appends too and recovery starts from a reading
    points: list[dict[str, Any]] = [
        {"kill_at": [n, when], "reading_every": 2 * (n % 2)}
        for n in range(1, 11)
        for when in ("before", "after")
    ]
    points.append({"tool_mode": "kill"})
    points += [{"kill_after": shuffle.uniform(0.0, 0.06)} for _ in range(10)]
    return points


def test_killed_at_any_point_the_thread_reloads_and_resumes(
    forks: ForkServer, durable_location: Location, tmp_path: Path
) -> None:
    log = tmp_path / "tool.log"
    saver = durable_location.saver()
    kinds = set()
    readings = 0
    for n, point in enumerate(_kill_points()):
        thread_id = f"k{n}"
        report = forks.run(
            {"op": "scenario", "store": durable_location.spec, "log": str(log), "thread": thread_id, **point}
        )
        assert report["exit"] == 0 or report["killed"], report
        dead(saver, thread_id)

        readings += saver.read(thread_id, from_reading=True).reading is not None
        read = saver.read(thread_id)  # the log is whole: numbered without gaps, up to the head
        assert [e.seq for e in read.events] == list(range(1, len(read.events) + 1))
        assert (read.record.head_seq if read.record else 0) == len(read.events)
        events = [decode_event(e, thread_id) for e in read.events]
        may_run: set[str] = set()  # calls planned or started (rule 9), minus those with a result
        for e in events:
            if e.kind == "tools_planned":
                may_run |= set(e.data["calls"])
            elif e.kind == "tool_started":
                may_run.add(e.data["task"])
            elif e.kind == "tool_finished":
                may_run.discard(e.data["message"].tool_call_id)
        unfinished = bool(may_run)
        ran_before = log_lines(log).count(thread_id)
        kinds.add((ran_before, unfinished))

        state, unknowns = _recover(build_agent(saver, log), thread_id)
        assert finished(state.values), (point, state)
        assert unknowns == int(unfinished), point
        # ran once, or a second time only because a person approved an unknown outcome
        assert log_lines(log).count(thread_id) == max(1, ran_before + unknowns), point
    assert (1, True) in kinds and (0, False) in kinds  # killed both inside and outside the tool
    assert readings >= 5  # recovered from a saved reading, too
