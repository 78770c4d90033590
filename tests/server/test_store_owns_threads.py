"""Two service processes on one store agree on every thread (``_service.py``, rules S1-S5;
SPEC rule 21: the agent a thread belongs to is fixed when it is created; rule 8: one
writer per thread).

Two apps (two ``create_app``, each with its own saver and its own connection to the
service's tables, as two ``handrail serve`` processes have) serve one SQLite file or one
PostgreSQL schema. What one says of a thread - which agent it belongs to, its metadata,
whether a run is on it - the other says too, because both ask the store and neither
keeps an account of its own.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import served_agent

from conftest import Backend
from handrail.server import create_app
from handrail.server._service import Service as AppService
from handrail.worker import Worker

APPROVE = {"decisions": [{"type": "approve"}]}
READS = (
    *("aget_thread", "aread", "aruns_alive", "alist_pending", "alist_threads", "aread_feed"),
    *("get_thread", "read", "runs_alive"),
)


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


class Process:
    """One service app on the backend's store: its own saver, tables connection and client."""

    def __init__(self, backend: Backend) -> None:
        self.store = backend.saver()
        self.agent = served_agent.build(self.store)
        self.app = create_app({"sql": self.agent}, db=backend.server_db())
        self.service: AppService = self.app.state.service
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://one.test")

    def token(self, name: str, *roles: str) -> dict[str, str]:
        return {"x-api-key": self.service.tokens.create(name, list(roles), ["run", "review"])[1]}

    async def close(self) -> None:
        for run in list(self.service.runs.active.values()):
            if run.task is not None:
                run.task.cancel()
        await self.http.aclose()


@pytest.fixture
async def two(backend: Backend) -> AsyncIterator[tuple[Process, Process]]:
    served_agent.RAN.clear()
    first, second = Process(backend), Process(backend)
    yield first, second
    await first.close()
    await second.close()


async def test_a_thread_created_through_one_service_is_seen_with_its_assistant_and_metadata_through_another(
    two: tuple[Process, Process],
) -> None:
    one, other = two
    admin = one.token("root", "dba")
    headers = {"x-api-key": admin["x-api-key"]}
    for named in ({"graph_id": "sql"}, {}):  # for an assistant, and for none (its first run chooses)
        made = await one.http.post("/threads", json={"metadata": {"team": "data", **named}}, headers=headers)
        assert made.status_code == 200, made.text
        thread = made.json()["thread_id"]
        seen = await other.http.get(f"/threads/{thread}", headers=headers)
        assert seen.status_code == 200, seen.text
        assert seen.json()["metadata"] == made.json()["metadata"]
        assert seen.json()["metadata"]["assistant_id"] == "sql" and seen.json()["metadata"]["team"] == "data"
        assert seen.json()["status"] == "idle"
        # the other one refuses to make it again, as the first would
        again = await other.http.post("/threads", json={"thread_id": thread}, headers=headers)
        assert again.status_code == 409, again.text
        found = await other.http.post("/threads/search", json={"metadata": {"team": "data"}}, headers=headers)
        assert thread in {t["thread_id"] for t in found.json()}


async def test_a_run_started_through_one_service_shows_the_thread_busy_through_another_which_refuses_a_run(
    two: tuple[Process, Process], tmp_path: Path
) -> None:
    one, other = two
    alice = one.token("alice", "dba")
    gate = str(tmp_path / "gate")
    thread = (await one.http.post("/threads", json={}, headers=alice)).json()["thread_id"]
    started = await one.http.post(
        f"/threads/{thread}/runs", json={"assistant_id": "sql", "input": user(f"block {gate}")}, headers=alice
    )
    assert started.status_code == 200, started.text
    await _until(lambda: Path(gate + ".started").exists())
    seen = (await other.http.get(f"/threads/{thread}", headers=alice)).json()
    assert seen["status"] == "busy"
    busy = await other.http.post("/threads/search", json={"status": "busy"}, headers=alice)
    assert [t["thread_id"] for t in busy.json()] == [thread]
    second = {"assistant_id": "sql", "input": user("SELECT 1")}
    for path in ("/runs/wait", "/runs", "/runs/stream"):
        refused = await other.http.post(f"/threads/{thread}{path}", json=second, headers=alice)
        assert refused.status_code == 409 and "busy" in refused.json()["detail"], refused.text
    Path(gate + ".go").write_text("go")
    run_id = started.json()["run_id"]
    await one.http.get(f"/threads/{thread}/runs/{run_id}/join", headers=alice)
    assert (await other.http.get(f"/threads/{thread}", headers=alice)).json()["status"] == "idle"
    assert [name for name, _ in served_agent.RAN] == ["block"]


async def test_two_runs_started_at_once_through_two_services_one_wins(two: tuple[Process, Process]) -> None:
    """Both see the thread idle; the store takes one input (SPEC rule 8): the other run saves
    nothing and is a 409 (or, when it read the thread after the winner's input, it is the one
    that goes on and the first stops with a conflict): exactly one run does its work."""
    one, other = two
    alice = one.token("alice", "dba")
    thread = (await one.http.post("/threads", json={}, headers=alice)).json()["thread_id"]
    body = {"assistant_id": "sql", "input": user("write report")}
    replies = await asyncio.gather(
        one.http.post(f"/threads/{thread}/runs/wait", json=body, headers=alice),
        other.http.post(f"/threads/{thread}/runs/wait", json=body, headers=alice),
    )
    won = [r for r in replies if r.status_code == 200 and "__error__" not in r.json()]
    lost = [r for r in replies if r not in won]
    assert len(won) == 1 and len(lost) == 1, [r.text for r in replies]
    loser = lost[0]
    assert loser.status_code == 409 or loser.json()["__error__"]["error"] == "ConflictError", loser.text
    assert len(won[0].json()["__interrupt__"]) == 1  # the winner's review waits, once


async def test_a_thread_created_and_never_run_survives_a_restart(backend: Backend) -> None:
    first = Process(backend)
    alice = first.token("alice", "dba")
    made = await first.http.post(
        "/threads", json={"metadata": {"graph_id": "sql", "team": "data"}}, headers=alice
    )
    thread = made.json()["thread_id"]
    await first.close()
    restarted = Process(backend)  # another process, nothing remembered: the store has it
    try:
        seen = await restarted.http.get(f"/threads/{thread}", headers=alice)
        assert seen.status_code == 200, seen.text
        assert seen.json()["metadata"] == made.json()["metadata"]
        assert seen.json()["created_at"] == made.json()["created_at"]
        ran = await restarted.http.post(
            f"/threads/{thread}/runs/wait", json={"assistant_id": "sql", "input": user("q")}, headers=alice
        )
        assert ran.status_code == 200 and ran.json()["__interrupt__"], ran.text
        assert restarted.store.get_thread(thread).metadata["team"] == "data"
    finally:
        await restarted.close()


async def test_the_worker_and_the_service_agree_on_the_binding_of_a_created_thread_never_run(
    two: tuple[Process, Process],
) -> None:
    one, other = two
    alice = one.token("alice", "dba")
    bystander = served_agent.build(one.store)
    hosts = {
        "named": Worker({"sql": one.agent}),
        "another agent first": Worker({"other": bystander, "sql": one.agent}),
        "no unbound": Worker({"sql": one.agent}, unbound=False),
    }
    for named in ({"graph_id": "sql"}, {}):
        thread = (await one.http.post("/threads", json={"metadata": named}, headers=alice)).json()[
            "thread_id"
        ]
        for name, worker in hosts.items():
            (group,) = worker._groups
            # a worker runs only a thread its claim took: the filter decides, then the agent
            taken = group.filter.matches(one.store.get_thread(thread).metadata)
            hosted = await group.agent_for(thread) if taken else None
            key = next((k for k, a in group.agents.items() if a is hosted), None)
            served = AppService(dict(group.agents), other.service.db)
            served.unbound = group.default is not None
            assert (await served.locate(thread)).assistant == key, (name, named)
        # the service process that did not create it says the same
        assert (await other.service.locate(thread)).assistant == "sql"


async def test_the_old_table_of_created_threads_moves_into_the_store_at_start_up(backend: Backend) -> None:
    """A service database an older version wrote keeps threads created and not run in
    ``handrail_server_threads``: the first start-up moves them into the store, once."""
    db = backend.server_db()
    db.execute(
        "CREATE TABLE handrail_server_threads (thread_id TEXT PRIMARY KEY, assistant_id TEXT NOT NULL, "
        "metadata TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL)"
    )
    rows = [("old-named", "sql", '{"team": "data"}', 1e9), ("old-free", "", "{}", 1e9)]
    for row in rows:
        db.execute("INSERT INTO handrail_server_threads VALUES (?, ?, ?, ?)", row)
    process = Process(backend)
    try:
        assert await process.service.move_thread_rows() == 2
        assert process.service.db.old_thread_rows() is None  # the table is gone
        named = process.store.get_thread("old-named")
        assert named.head_seq == 0 and dict(named.metadata) == {"team": "data", "assistant_id": "sql"}
        assert named.created_at == 1e9
        assert "assistant_id" not in process.store.get_thread("old-free").metadata
        assert (await process.service.locate("old-free")).unbound
        assert await process.service.move_thread_rows() == 0
    finally:
        await process.close()


def _count_reads(store: Any) -> Counter[str]:
    """Count the store's reads from now on (each method wrapped on the instance)."""
    counted: Counter[str] = Counter()
    for name in READS:
        method = getattr(store, name)

        def wrapped(*args: Any, _name: str = name, _method: Any = method, **kwargs: Any) -> Any:
            counted[_name] += 1
            return _method(*args, **kwargs)

        setattr(store, name, wrapped)
    return counted


@pytest.mark.parametrize("path", ["command.resume", "answer"])
async def test_store_reads_per_answer(two: tuple[Process, Process], path: str) -> None:
    """An answer reads the thread's record once in the service (the request hands it on);
    the figures are in the report of the change that removed the second read."""
    one, _ = two
    dana = one.token("dana", "dba")
    thread = f"t-{uuid.uuid4().hex[:8]}"
    paused = await one.http.post(
        f"/threads/{thread}/runs/wait",
        json={"assistant_id": "sql", "input": user("SELECT 1"), "if_not_exists": "create"},
        headers=dana,
    )
    asked = paused.json()["__interrupt__"][0]["id"]
    counted = _count_reads(one.store)
    if path == "command.resume":
        body = {"assistant_id": "sql", "command": {"resume": {asked: APPROVE}}}
        reply = await one.http.post(f"/threads/{thread}/runs", json=body, headers=dana)
    else:
        reply = await one.http.post(
            f"/handrail/threads/{thread}/interrupts/{asked}/answer", json={"answer": APPROVE}, headers=dana
        )
    assert reply.status_code in (200, 202), reply.text
    print(f"store reads per answer ({path}): {dict(counted)}")
    assert counted["aget_thread"] <= 1, counted


async def _until(done: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_a_thread_is_read_once_per_get(two: tuple[Process, Process]) -> None:
    """``GET /threads/{id}`` reads the thread's record once and hands it to the access check
    and the answer, for the caller who started it."""
    one, _ = two
    alice = one.token("alice", "dba")
    made = await one.http.post("/threads", json={"metadata": {"graph_id": "sql"}}, headers=alice)
    thread = made.json()["thread_id"]
    counted = _count_reads(one.store)
    for _ in range(2):  # the binding read afresh, then remembered
        seen = await one.http.get(f"/threads/{thread}", headers=alice)
        assert seen.status_code == 200, seen.text
    assert counted["aget_thread"] == 2, counted


async def test_a_created_thread_in_the_store_is_its_creators_alone(two: tuple[Process, Process]) -> None:
    """A thread created and not run is a record in the store with its owner (SPEC rule 21:
    who made it is recorded): another ordinary credential, through either process, can
    neither read it, run it, rename its owner nor rebind it; nothing runs (the tool's
    ledger) and the record is as its creator left it."""
    one, other = two
    alice, bob = one.token("alice", "dba"), other.token("bob", "dba")
    thread = (await one.http.post("/threads", json={"metadata": {"team": "data"}}, headers=alice)).json()[
        "thread_id"
    ]
    before = one.store.get_thread(thread)
    assert before is not None and before.metadata["owner"] == "alice" and before.head_seq == 0
    for http in (one.http, other.http):
        assert (await http.get(f"/threads/{thread}", headers=bob)).status_code in (403, 404)
        ran = await http.post(
            f"/threads/{thread}/runs/wait",
            json={"assistant_id": "sql", "input": user("DROP TABLE t")},
            headers=bob,
        )
        assert ran.status_code in (403, 404), ran.text
        patched = await http.patch(f"/threads/{thread}", json={"metadata": {"owner": "bob"}}, headers=bob)
        assert patched.status_code in (403, 404, 405, 422), patched.text
        again = await http.post(
            "/threads", json={"thread_id": thread, "metadata": {"assistant_id": "sql"}}, headers=bob
        )
        assert again.status_code in (403, 404, 409), again.text
    assert served_agent.RAN == []
    after = one.store.get_thread(thread)
    assert after is not None and after.head_seq == 0 and after.metadata == before.metadata
    mine = await other.http.post(
        f"/threads/{thread}/runs/wait", json={"assistant_id": "sql", "input": user("q")}, headers=alice
    )
    assert mine.status_code == 200 and mine.json()["__interrupt__"], mine.text
    assert served_agent.RAN == []  # paused for review: still nothing ran
