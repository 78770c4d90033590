"""SIGHUP reloads the policy file of ``handrail serve --policy`` and ``handrail worker --policy``
(SPEC §5.4): runs started afterwards are gated by the new file; a bad or missing file changes
nothing (the policy in force stays, the process goes on and says why, naming the file, the
line and the key). Judged by what ran: the ledger the tools write (``served_agent``).
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import served_agent
from rich.console import Console

from conftest import HANDRAIL, HERE, Backend, make_token
from handrail import InMemorySaver
from handrail.cli._reload import PolicyReload
from handrail.errors import ConfigurationError
from handrail.server import ServerDB
from handrail.server._service import Service
from handrail.worker import Worker

ON_SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

DEADLINE = 60.0  # seconds: generous; nothing is timed, conditions are polled until then

UNREVIEWED = """\
[agents.sql.interrupt_on]
execute_sql = false
"""

REVIEWED = """\
[agents.sql.interrupt_on.execute_sql]
allowed_decisions = ["reject"]             # the code allows approve too
reviewers = ["ops"]                        # the code says dba
"""

# Were any of it used, SQL would run unreviewed: a bad file must change nothing.
BROKEN = """\
[agents.sql.interrupt_on]
execute_sql = false

[agents.sql.interrupt_on.write_file]
reviewrs = ["ops"]
"""


class Process:
    """A ``handrail`` process started from this folder, its output kept line by line as it comes."""

    def __init__(self, args: list[str]) -> None:
        self.popen = subprocess.Popen(
            [*HANDRAIL, *args],
            cwd=HERE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.append(line.rstrip("\n"))

    def said(self, pattern: str, since: int = 0) -> re.Match[str]:
        """The first line printed from line ``since`` on that matches ``pattern``, once there is one."""
        deadline = time.monotonic() + DEADLINE
        while True:
            ended = not self._reader.is_alive()
            for line in self.lines[since:]:
                found = re.search(pattern, line)
                if found:
                    return found
            output = "\n".join(self.lines)
            assert not ended, (
                f"the process ended ({self.popen.poll()}) without printing {pattern!r}:\n{output}"
            )
            assert time.monotonic() < deadline, f"no line matching {pattern!r} in:\n{output}"
            time.sleep(0.02)

    def hangup(self) -> str:
        """Send SIGHUP; the line the process printed about it."""
        since = len(self.lines)
        os.kill(self.popen.pid, signal.SIGHUP)
        return self.said(r"^SIGHUP: ", since).string

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


@contextmanager
def started(args: list[str], ready: str) -> Iterator[tuple[Process, re.Match[str]]]:
    process = Process(args)
    try:
        yield process, process.said(ready)
    finally:
        process.stop()


@contextmanager
def serving(backend: Backend, agent: str, *flags: str) -> Iterator[tuple[Process, str]]:
    """A running ``handrail serve AGENT`` on the backend's store, and its URL."""
    args = ["serve", agent, *backend.store_flags(), "--port", "0", *flags]
    with started(args, r"on (http://127\.0\.0\.1:\d+)") as (process, found):
        yield process, found.group(1)


def ledger(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """What the tools of the processes ran: (tool, arguments), in order."""
    if not path.exists():
        return []
    return [tuple(json.loads(line)) for line in path.read_text().splitlines()]  # type: ignore[misc]


def start(url: str, token: str, text: str) -> tuple[str, dict[str, Any]]:
    """A new thread of ``sql`` run on ``text`` until it ends or pauses: its id and values."""
    headers = {"x-api-key": token}
    thread = httpx.post(f"{url}/threads", json={}, headers=headers, timeout=60).json()["thread_id"]
    run = {"assistant_id": "sql", "input": {"messages": [{"role": "user", "content": text}]}}
    reply = httpx.post(f"{url}/threads/{thread}/runs/wait", json=run, headers=headers, timeout=60)
    assert reply.status_code == 200, reply.text
    values: dict[str, Any] = reply.json()
    return thread, values


def until(what: str, check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + DEADLINE
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The ledger file the tools of the processes started from now on write."""
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("HANDRAIL_TEST_LEDGER", str(path))
    return path


@ON_SQLITE
def test_sighup_gates_new_runs_of_handrail_serve_by_the_rewritten_file(
    backend: Backend, tmp_path: Path, ran: Path
) -> None:
    policy = tmp_path / "handrail.toml"
    policy.write_text(UNREVIEWED)
    olga = make_token(backend, "olga", "ops")
    with serving(backend, "served_agent:agent", "--policy", str(policy)) as (process, url):
        _, done = start(url, olga, "SELECT 1")
        assert "__interrupt__" not in done and ledger(ran) == [("execute_sql", {"query": "SELECT 1"})]
        policy.write_text(REVIEWED)
        _, done = start(url, olga, "SELECT 2")  # the file is read again on SIGHUP, not before
        assert "__interrupt__" not in done
        said = process.hangup()
        assert f"review policy reloaded from {policy}" in said, said
        _, paused = start(url, olga, "SELECT 3")
        (interrupt,) = paused["__interrupt__"]
        assert interrupt["value"]["review_configs"][0]["allowed_decisions"] == ["reject"]  # the file's terms
        assert [args["query"] for _, args in ledger(ran)] == ["SELECT 1", "SELECT 2"]  # SELECT 3 waits


@ON_SQLITE
def test_a_bad_or_missing_file_on_sighup_keeps_the_policy_in_force(
    backend: Backend, tmp_path: Path, ran: Path
) -> None:
    policy = tmp_path / "handrail.toml"
    policy.write_text(REVIEWED)
    olga = make_token(backend, "olga", "ops")
    with serving(backend, "served_agent:agent", "--policy", str(policy)) as (process, url):
        policy.write_text(BROKEN)
        said = process.hangup()
        assert "review policy not reloaded, the one in force stays" in said, said
        assert f"{policy}:5: agents.sql.interrupt_on.write_file.reviewrs: unknown key" in said, said
        _, paused = start(url, olga, "SELECT 1")
        (interrupt,) = paused["__interrupt__"]
        assert interrupt["value"]["review_configs"][0]["allowed_decisions"] == ["reject"]
        policy.unlink()
        said = process.hangup()
        assert f"the one in force stays: {policy}: cannot be read" in said, said
        _, paused = start(url, olga, "SELECT 2")
        assert paused["__interrupt__"]
        assert ledger(ran) == []  # nothing ran unreviewed
        policy.write_text(UNREVIEWED)  # and a good file is taken after the bad ones
        assert f"review policy reloaded from {policy}" in process.hangup()
        _, done = start(url, olga, "SELECT 3")
        assert "__interrupt__" not in done and ledger(ran) == [("execute_sql", {"query": "SELECT 3"})]
        assert process.popen.poll() is None


@ON_SQLITE
def test_sighup_without_a_policy_file_changes_nothing(backend: Backend, ran: Path) -> None:
    dana = make_token(backend, "dana", "dba")
    with serving(backend, "served_agent:agent") as (process, url):
        said = process.hangup()
        assert "no policy file to reload" in said, said
        _, paused = start(url, dana, "SELECT 1")  # the code's policy: reviewed by a dba
        assert paused["__interrupt__"][0]["value"]["review_configs"][0]["allowed_decisions"] == [
            "approve",
            "reject",
        ]
        assert ledger(ran) == [] and process.popen.poll() is None


WORKER_REVIEWS_BOTH = """\
[agents.sql.interrupt_on]
execute_sql = true
write_file = true
"""


@ON_SQLITE
def test_sighup_reloads_the_policy_of_handrail_worker(backend: Backend, tmp_path: Path, ran: Path) -> None:
    """``chained_agent``: an approved ``execute_sql`` is run by the worker, whose own policy then
    gates the ``write_file`` call that follows it."""
    policy = tmp_path / "handrail.toml"
    policy.write_text(WORKER_REVIEWS_BOTH)
    alice = make_token(backend, "alice", "dba")
    headers = {"x-api-key": alice}
    approve = {"answer": {"decisions": [{"type": "approve"}]}}

    def approved(url: str, text: str) -> str:
        """A thread paused on ``execute_sql text``, approved (the worker runs it on)."""
        thread, paused = start(url, alice, text)
        (interrupt,) = paused["__interrupt__"]
        answer = f"{url}/handrail/threads/{thread}/interrupts/{interrupt['id']}/answer"
        reply = httpx.post(answer, json=approve, headers=headers, timeout=60)
        assert reply.status_code == 202, reply.text
        return thread

    def state(url: str, thread: str) -> dict[str, Any]:
        reply = httpx.get(f"{url}/threads/{thread}/state", headers=headers, timeout=60)
        assert reply.status_code == 200, reply.text
        found: dict[str, Any] = reply.json()
        return found

    flags = ["--policy", str(policy)]
    worker_args = ["worker", "chained_agent:agent", *backend.store_flags(), "--poll", "0.2", *flags]
    with (
        serving(backend, "chained_agent:agent", "--concurrency", "0", *flags) as (_, url),
        started(worker_args, "handrail worker for") as (worker, _),
    ):
        first = approved(url, "SELECT 1")
        waiting = until(
            "the worker to pause the first thread on write_file",
            lambda: state(url, first)["interrupts"],
        )
        assert [a["name"] for a in waiting[0]["value"]["action_requests"]] == ["write_file"]
        assert ledger(ran) == [("execute_sql", {"query": "SELECT 1"})]
        policy.write_text(WORKER_REVIEWS_BOTH.replace("write_file = true", "write_file = false"))
        said = worker.hangup()
        assert f"review policy reloaded from {policy}" in said, said
        second = approved(url, "SELECT 2")
        report = ("write_file", {"path": "report.txt", "content": "ran SELECT 2"})
        until("the worker to write the second thread's report", lambda: report in ledger(ran))
        finished = until("the second thread to finish", lambda: (s := state(url, second))["next"] == [] and s)
        assert finished["interrupts"] == [] and finished["values"]["messages"][-1]["content"] == (
            "done: wrote report.txt"
        )
        assert ledger(ran) == [
            ("execute_sql", {"query": "SELECT 1"}),
            ("execute_sql", {"query": "SELECT 2"}),
            report,
        ]
        assert state(url, first)["interrupts"]  # the first thread's write_file still waits for a reviewer


# In one process: what a reload builds from, and what takes the agents ----------------------------


def _reviewed(agent: Any, text: str) -> list[str] | None:
    """The decisions a review of ``execute_sql text`` allows, or None if it ran unreviewed."""
    config = {"configurable": {"thread_id": f"t-{time.monotonic_ns()}"}}
    out = agent.invoke({"messages": [{"role": "user", "content": text}]}, config)
    if "__interrupt__" not in out:
        return None
    allowed: list[str] = out["__interrupt__"][0].value["review_configs"][0]["allowed_decisions"]
    return allowed


def test_a_reload_builds_on_the_agents_of_the_code_not_on_the_last_reload(tmp_path: Path) -> None:
    policy = tmp_path / "handrail.toml"
    both = UNREVIEWED + UNREVIEWED.replace("agents.sql", "agents.billing")
    policy.write_text(both)
    code = {"sql": served_agent.build(InMemorySaver()), "billing": served_agent.build(InMemorySaver())}
    output = io.StringIO()
    in_use: list[dict[str, Any]] = []
    reloading = PolicyReload(policy, code, Console(file=output, width=60), in_use.append)
    assert reloading.reload() and _reviewed(in_use[-1]["sql"], "SELECT 1") is None
    policy.write_text(BROKEN)
    assert not reloading.reload() and len(in_use) == 1  # nothing swapped in
    policy.write_text(REVIEWED.replace("agents.sql", "agents.billing"))  # sql: no longer in the file
    assert reloading.reload()
    assert _reviewed(in_use[-1]["sql"], "SELECT 2") == ["approve", "reject"]  # the code's policy again
    assert _reviewed(in_use[-1]["billing"], "SELECT 3") == ["reject"]
    assert in_use[-1]["sql"].checkpointer is code["sql"].checkpointer
    lines = output.getvalue().splitlines()
    assert len(lines) == 3 and "reviewrs: unknown key" in lines[1]  # one line each, however wide


def test_the_service_and_its_worker_take_only_the_same_agents_on_the_same_stores(tmp_path: Path) -> None:
    store = InMemorySaver()
    agents = {"sql": served_agent.build(store)}
    service = Service(dict(agents), ServerDB.open(db_path=tmp_path / "handrail.db"))
    service.worker = Worker(agents)
    try:
        with pytest.raises(ConfigurationError, match="hosts"):
            service.worker.use_agents({"other": served_agent.build(store)})
        with pytest.raises(ValueError, match="serves"):
            service.use_agents({"other": served_agent.build(store)})
        with pytest.raises(ValueError, match="store"):
            service.use_agents({"sql": served_agent.build(InMemorySaver())})
        assert service.agents == agents and [g.agents for g in service.worker._groups] == [agents]
        again = {"sql": served_agent.build(store)}
        service.use_agents(again)
        assert service.agent("sql") is again["sql"]
        assert [g.agents for g in service.worker._groups] == [again]
    finally:
        service.db.close()
