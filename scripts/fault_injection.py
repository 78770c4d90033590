"""Fault injection: kill reviewed runs at random moments, then check what survived.

Each trial starts a thread whose model proposes several tool calls a step (gated and not,
idempotent and not), and a child process that reviews and runs it: it approves every
review until the thread is done. The parent kills the child with SIGKILL after a random
delay - in a tool, in a store's commit, between steps, anywhere - and then recovers the
thread in a fresh agent, as a reviewer would: it answers every ``outcome_unknown`` review
with ``respond`` (the call is never run again) and approves the rest, until the thread is
done. Every real execution of a tool is written to a ledger file outside the store. The
checks (SPEC rules 7 and 9, and 18):

* no non-idempotent call ran twice;
* every call that began and has no saved result came back as an ``outcome_unknown``
  review of its own (one per call, never one shared by a step);
* no pause is lost: the thread finishes with one ToolMessage for every tool call, and its
  log verifies against its hash chain.

Two more scenarios (issue 24), with ``--scenario``:

* ``races``: a thread waits for two per-call reviews; two processes' savers answer one
  each at the same moment. Both answers must be recorded (answers to different reviews
  never conflict), and each call runs once.
* ``first-run``: a new thread's first run dies right after its input is saved, before
  its first step. The next claim must hand the thread on, and its run must go on to its
  review, with nothing run twice.

Usage::

    python scripts/fault_injection.py --backend sqlite --trials 240
    python scripts/fault_injection.py --backend postgres --trials 240 --postgres postgresql://...
    python scripts/fault_injection.py --backend postgres --scenario all --trials 240

The test suite runs a few dozen trials per backend (tests/test_fault_injection.py).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from handrail import Command, HumanInTheLoopMiddleware, ScriptedModel, ToolMessage, create_agent, tool
from handrail.agent import Agent
from handrail.checkpoint.base import BaseCheckpointSaver
from handrail.errors import ConflictError

TURNS = 3  # model turns that propose tools, then a final answer


def build_agent(
    saver: BaseCheckpointSaver,
    ledger: Path,
    tool_delay: float = 0.0,
    *,
    mode: str = "batched",
    die_in_model: bool = False,
) -> Agent:
    """Three calls a step: two gated, non-idempotent ``charge`` calls, one ungated ``notify``
    (not idempotent either) and, every other turn, an idempotent ``lookup``. ``mode``: the
    review mode; ``die_in_model``: the process kills itself at the first model call (its
    input is saved by then)."""

    def record(key: str) -> None:
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{key}\n".encode())  # one write: a line is whole or absent
        finally:
            os.close(fd)
        if tool_delay:
            time.sleep(tool_delay)

    @tool
    def charge(key: str) -> str:
        """Charge a card (not safe to repeat)."""
        record(key)
        return f"charged {key}"

    @tool
    def notify(key: str) -> str:
        """Send a notification (not safe to repeat)."""
        record(key)
        return f"notified {key}"

    @tool(idempotent=True)
    def lookup(key: str) -> str:
        """Read something (safe to repeat)."""
        record(key)
        return f"looked up {key}"

    def next_turn(messages: list[Any]) -> dict[str, Any]:
        if die_in_model:
            os.kill(os.getpid(), signal.SIGKILL)
        turn = sum(1 for m in messages if m.type == "ai")
        if turn >= TURNS:
            return {"content": "done"}
        calls = [
            {"name": "charge", "args": {"key": f"c{turn}a"}, "id": f"c{turn}a"},
            {"name": "notify", "args": {"key": f"n{turn}"}, "id": f"n{turn}"},
            {"name": "charge", "args": {"key": f"c{turn}b"}, "id": f"c{turn}b"},
        ]
        if turn % 2 == 0:
            calls.append({"name": "lookup", "args": {"key": f"l{turn}"}, "id": f"l{turn}"})
        return {"content": "", "tool_calls": calls}

    return create_agent(
        ScriptedModel([next_turn] * 1000),
        [charge, notify, lookup],
        middleware=[
            HumanInTheLoopMiddleware(
                {"charge": True, "notify": False, "lookup": False},
                interrupt_mode=mode,  # type: ignore[arg-type]
            )
        ],
        checkpointer=saver,
    )


def _config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def _answers(interrupts: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pending in interrupts:
        value = pending.value
        if isinstance(value, dict) and value.get("type") == "outcome_unknown":
            out[pending.id] = {"type": "respond", "message": f"recovered {value['tool_call_id']}"}
        elif isinstance(value, dict) and value.get("type") == "tool_approval":
            out[pending.id] = {"type": "approve"}
        else:
            out[pending.id] = {"decisions": [{"type": "approve"}] * len(value["action_requests"])}
    return out


def review_until_done(agent: Agent, thread_id: str, *, patience: float = 20.0) -> None:
    """Answer and run the thread until it is finished (what the child does, and recovery)."""
    deadline = time.monotonic() + patience
    started = agent.get_state(_config(thread_id)).values.get("messages")
    if not started:
        agent.invoke({"messages": "charge the cards"}, _config(thread_id))
    while time.monotonic() < deadline:
        state = agent.get_state(_config(thread_id))
        try:
            if state.interrupts:
                agent.invoke(Command(resume=_answers(state.interrupts)), _config(thread_id))
            elif state.next:
                agent.invoke(None, _config(thread_id))
            else:
                return
        except ConflictError:
            time.sleep(0.02)  # the killed run is not known dead yet (a lock or lease to lapse)
    raise TimeoutError(f"thread {thread_id} did not finish in {patience} s")


@dataclass
class Tally:
    """What the trials found."""

    trials: int = 0
    killed: int = 0
    outcome_unknown: int = 0
    races: int = 0
    race_answers: int = 0  # answers recorded in the races
    first_runs: int = 0
    taken_over: int = 0  # first runs a later claim handed on
    failures: list[str] = field(default_factory=list)

    def line(self, backend: str) -> str:
        parts = [f"{backend}: {self.trials} trials, {self.killed} killed mid-run"]
        parts.append(f"{self.outcome_unknown} outcome_unknown reviews")
        if self.races:
            parts.append(
                f"{self.races} two-review races, {self.race_answers} of {2 * self.races} answers recorded"
            )
        if self.first_runs:
            parts.append(
                f"{self.first_runs} first runs killed after their input, {self.taken_over} taken over"
            )
        return ", ".join(parts) + f", {len(self.failures)} failures"


def trial(open_saver: Callable[[], Any], ledger: Path, delay: float | None, tally: Tally) -> float:
    """One thread, one child killed after ``delay`` seconds (None: not killed), one recovery;
    failures go in ``tally``. Returns how long the child ran."""
    thread_id = f"fi-{uuid.uuid4().hex[:12]}"
    ledger.write_text("")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: review and run until killed (or done)
        os.close(read_end)
        try:
            with open_saver() as saver:
                agent = build_agent(saver, ledger, tool_delay=0.002)
                os.write(write_end, b"r")
                review_until_done(agent, thread_id)
        finally:
            os._exit(0)
    os.close(write_end)
    os.read(read_end, 1)  # the child has opened its store: kill it from here on
    os.close(read_end)
    began = time.monotonic()
    if delay is not None:
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    ran = time.monotonic() - began
    tally.trials += 1
    tally.killed += os.WIFSIGNALED(status)
    with open_saver() as saver:
        _recover_and_check(build_agent(saver, ledger), thread_id, ledger, tally)
    return ran


def race_trial(open_saver: Callable[[], Any], ledger: Path, tally: Tally) -> None:
    """Two per-call reviews of one thread, answered at the same moment through two savers."""
    import threading

    thread_id = f"fr-{uuid.uuid4().hex[:12]}"
    ledger.write_text("")
    with open_saver() as first, open_saver() as second:
        agents = [build_agent(saver, ledger, mode="per_call") for saver in (first, second)]
        paused = agents[0].invoke({"messages": "charge the cards"}, _config(thread_id))
        reviews = [p.id for p in paused["__interrupt__"]]
        start = threading.Barrier(2)
        refused: list[str] = []

        def answer(agent: Agent, interrupt_id: str, who: str) -> None:
            start.wait()
            try:
                agent.decide(thread_id, interrupt_id, {"type": "approve"}, reviewer=who)
            except Exception as exc:
                refused.append(f"{type(exc).__name__}: {exc}")

        racers = [
            threading.Thread(target=answer, args=(agent, review, f"r{i}"))
            for i, (agent, review) in enumerate(zip(agents, reviews, strict=True))
        ]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join(60)
        tally.races += 1
        tally.race_answers += 2 - len(refused)
        for reason in refused:
            tally.failures.append(f"{thread_id}: an answer to another review was refused: {reason}")
        _recover_and_check(agents[0], thread_id, ledger, tally)


def first_run_trial(open_saver: Callable[[], Any], ledger: Path, tally: Tally) -> None:
    """A new thread's first run dies right after its input is saved; a claim must hand it on."""
    thread_id = f"ff-{uuid.uuid4().hex[:12]}"
    ledger.write_text("")
    pid = os.fork()
    if pid == 0:
        try:
            with open_saver() as saver:
                build_agent(saver, ledger, die_in_model=True).invoke({"messages": "go"}, _config(thread_id))
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    tally.first_runs += 1
    tally.killed += os.WIFSIGNALED(status)
    with open_saver() as saver:
        run_id = f"run-{uuid.uuid4().hex[:12]}"
        deadline = time.monotonic() + 30
        while saver.claim_queued(run_id, thread_id=thread_id) is None:
            if time.monotonic() > deadline:
                tally.failures.append(f"{thread_id}: the dead first run's thread was never handed on")
                return
            time.sleep(0.02)
        tally.taken_over += 1
        agent = build_agent(saver, ledger)
        agent.run_claimed(thread_id, run_id)
        _recover_and_check(agent, thread_id, ledger, tally)


def _recover_and_check(agent: Agent, thread_id: str, ledger: Path, tally: Tally) -> None:
    def fail(what: str) -> None:
        tally.failures.append(f"{thread_id}: {what}")

    ran_before = Counter(ledger.read_text().split())
    state = _settled_state(agent, thread_id)
    if state is not None:
        unknown = [
            p.value["tool_call_id"] for p in state.interrupts if p.value.get("type") == "outcome_unknown"
        ]
        tally.outcome_unknown += len(unknown)
        if len(unknown) != len(set(unknown)):
            fail(f"two outcome_unknown reviews for one call: {unknown}")
        trail = agent.get_audit_trail(_config(thread_id))
        results = {entry.tool_call_id for entry in trail if entry.event == "tool_finished"}
        for key in ran_before:
            if key not in results and key not in unknown and not key.startswith("l"):
                fail(f"call {key} ran, has no saved result and no outcome_unknown review")
    review_until_done(agent, thread_id)
    ran = Counter(ledger.read_text().split())
    twice = sorted(key for key, count in ran.items() if count > 1 and not key.startswith("l"))
    if twice:
        fail(f"non-idempotent calls ran twice: {twice}")
    final = agent.get_state(_config(thread_id))
    messages = final.values["messages"]
    calls = [c["id"] for m in messages if m.type == "ai" for c in m.tool_calls]
    results = [m.tool_call_id for m in messages if isinstance(m, ToolMessage)]
    if sorted(calls) != sorted(results) or messages[-1].content != "done":
        fail(f"the thread did not finish whole: calls {calls}, results {results}")
    report = agent.verify_audit(_config(thread_id))
    if not report.ok:
        fail(f"the log does not verify: record {report.first_bad}: {report.reason}")


def _settled_state(agent: Agent, thread_id: str, patience: float = 20.0) -> Any:
    """The thread's state once the killed run is known dead (None if it never started)."""
    deadline = time.monotonic() + patience
    while True:
        state = agent.get_state(_config(thread_id))
        if not state.values.get("messages"):
            return None
        alive = agent.checkpointer.runs_alive(thread_id) if agent.checkpointer is not None else set()
        if not alive or time.monotonic() > deadline:
            return state
        time.sleep(0.02)


def openers(backend: str, workdir: Path, dsn: str | None) -> Callable[[], Any]:
    """A function that opens a new saver of ``backend`` on the same store, as a context manager."""
    if backend == "sqlite":
        from handrail import SqliteSaver

        path = workdir / "faults.db"
        return lambda: SqliteSaver(path)
    if backend == "postgres":
        from handrail import PostgresSaver

        if dsn is None:
            raise SystemExit("--backend postgres needs --postgres DSN (or HANDRAIL_TEST_POSTGRES_DSN)")
        schema = f"hr_faults_{uuid.uuid4().hex[:10]}"

        @contextmanager
        def open_postgres() -> Iterator[Any]:
            with PostgresSaver.from_conn_string(dsn, schema=schema, pool_size=2) as saver:
                saver.setup()
                yield saver

        return open_postgres
    raise SystemExit(f"unknown backend {backend!r}: sqlite or postgres")


SCENARIOS = ("kills", "races", "first-run")


def run(
    backend: str,
    trials: int,
    workdir: Path,
    dsn: str | None,
    seed: int,
    scenarios: tuple[str, ...] = ("kills",),
) -> Tally:
    rng = random.Random(seed)
    open_saver = openers(backend, workdir, dsn)
    tally = Tally()
    ledger = workdir / "ledger.txt"
    if "kills" in scenarios:
        # how long a run takes unkilled: the quickest of three, so that a slow first run (a
        # busy machine, cold caches) does not spread the kill moments past most runs' end
        whole = min(trial(open_saver, ledger, None, Tally()) for _ in range(3))
        for _ in range(trials):  # kill moments spread over the whole run
            trial(open_saver, ledger, rng.uniform(0.0, whole), tally)
    if "races" in scenarios:
        for _ in range(trials):
            race_trial(open_saver, ledger, tally)
    if "first-run" in scenarios:
        for _ in range(trials):
            first_run_trial(open_saver, ledger, tally)
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--trials", type=int, default=240)
    parser.add_argument("--postgres", default=os.environ.get("HANDRAIL_TEST_POSTGRES_DSN"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="kills")
    args = parser.parse_args(argv)
    scenarios = SCENARIOS if args.scenario == "all" else (args.scenario,)
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        workdir = args.workdir or Path(scratch)
        started = time.monotonic()
        tally = run(args.backend, args.trials, workdir, args.postgres, args.seed, scenarios)
        print(f"{tally.line(args.backend)} in {time.monotonic() - started:.0f} s")
        for failure in tally.failures:
            print("  FAIL", failure)
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
