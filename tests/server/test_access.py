"""Who may do what on the service (SPEC §5.3, ``server/_access.py``), on SQLite and PostgreSQL.

A matrix: every route, with no credential and with each scope, on a thread the caller
started and on one it did not. Refusals are 403 problems naming the scope they needed
and save nothing; what ran is judged by the served agent's ledger.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
import served_agent

from conftest import Service

APPROVE = {"decisions": [{"type": "approve"}]}


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


class World:
    """One service with four credentials and two threads of ``app``'s: ``paused`` waits for
    a DBA's review, ``idle`` has finished its run."""

    def __init__(self, service: Service, client: httpx.AsyncClient) -> None:
        self.service, self.client = service, client
        self.headers = {
            "none": {},
            "app": service.token("app", scopes=("run",)),  # started both threads
            "other": service.token("other", scopes=("run",)),
            "reviewer": service.token("rita", "dba", scopes=("review",)),
            "admin": service.token("root", scopes=("admin",)),
        }

    async def setup(self) -> None:
        self.paused = await self.start("DELETE FROM logs")
        self.interrupt = (await self.state(self.paused))["interrupts"][0]["id"]
        self.idle = await self.start("write notes.txt")
        interrupt = (await self.state(self.idle))["interrupts"][0]["id"]
        root = self.headers["admin"]
        rita = self.service.token("rita2", "dba", scopes=("review",))
        path = f"/handrail/threads/{self.idle}/interrupts/{interrupt}/answer?wait=true"
        assert (await self.client.post(path, json={"answer": APPROVE}, headers=rita)).status_code == 200
        assert (await self.client.get(f"/threads/{self.idle}", headers=root)).json()["status"] == "idle"
        served_agent.RAN.clear()

    async def start(self, text: str) -> str:
        app = self.headers["app"]
        thread = (await self.client.post("/threads", json={}, headers=app)).json()["thread_id"]
        body = {"assistant_id": "sql", "input": user(text)}
        reply = await self.client.post(f"/threads/{thread}/runs/wait", json=body, headers=app)
        assert reply.status_code == 200, reply.text
        return str(thread)

    async def state(self, thread: str) -> dict[str, Any]:
        reply = await self.client.get(f"/threads/{thread}/state", headers=self.headers["admin"])
        result: dict[str, Any] = reply.json()
        return result

    async def call(self, who: str, method: str, path: str, body: Any = None) -> httpx.Response:
        return await self.client.request(method, path, json=body, headers=self.headers[who])


@pytest.fixture
async def world(service: Service, client: httpx.AsyncClient) -> World:
    found = World(service, client)
    await found.setup()
    return found


WHO = ("none", "app", "other", "reviewer", "admin")


def expect(reply: httpx.Response, status: int, scope: str | None = None) -> None:
    assert reply.status_code == status, (reply.request.method, reply.request.url, reply.text)
    if status == 403 and scope is not None:
        assert reply.json()["scope"] == scope and f"'{scope}' scope" in reply.json()["detail"]


@pytest.mark.parametrize(
    "method, path",
    [
        ("GET", "/threads/{paused}"),
        ("GET", "/threads/{paused}/state"),
        ("POST", "/threads/{paused}/history"),
        ("GET", "/threads/{paused}/runs"),
        ("GET", "/handrail/threads/{paused}/audit"),
    ],
)
async def test_reading_a_thread_is_for_its_starter_its_reviewers_and_admins(
    world: World, method: str, path: str
) -> None:
    """Rules A2-A4: the run scope reads what it started; review what it may decide; admin all."""
    where = path.format(paused=world.paused)
    wanted = {"none": 401, "app": 200, "other": 403, "reviewer": 200, "admin": 200}
    for who in WHO:
        expect(await world.call(who, method, where, {} if method == "POST" else None), wanted[who], "admin")
    # a reviewer whose roles cannot decide its review, and who answered nothing there, reads nothing
    ops = world.service.token("otto", "ops", scopes=("review",))
    assert (
        await world.client.request(method, where, json={} if method == "POST" else None, headers=ops)
    ).status_code == 403


async def test_a_reviewer_who_decided_a_thread_may_read_it_afterwards(world: World) -> None:
    rita2 = world.service.token("rita2", "dba", scopes=("review",))  # the name that answered on idle
    assert (await world.client.get(f"/threads/{world.idle}", headers=rita2)).status_code == 200
    assert (await world.call("reviewer", "GET", f"/threads/{world.idle}")).status_code == 403


async def test_searches_show_each_caller_only_what_it_may_read(world: World) -> None:
    """Rule A5."""
    found: dict[str, set[str]] = {}
    for who in ("app", "other", "reviewer", "admin"):
        reply = await world.call(who, "POST", "/threads/search", {"limit": 100})
        assert reply.status_code == 200, reply.text
        found[who] = {t["thread_id"] for t in reply.json()}
    both = {world.paused, world.idle}
    assert found["app"] == both and found["admin"] >= both
    assert found["other"] == set() and found["reviewer"] == {world.paused}
    expect(await world.call("none", "POST", "/threads/search", {}), 401)


async def test_the_inbox_and_answers_need_the_review_scope(world: World) -> None:
    for who, status in (("none", 401), ("app", 403), ("other", 403)):
        expect(await world.call(who, "GET", "/handrail/inbox"), status, "review")
    items = (await world.call("reviewer", "GET", "/handrail/inbox")).json()["items"]
    assert [i["thread_id"] for i in items] == [world.paused]
    assert (await world.call("admin", "GET", "/handrail/inbox")).json()["items"] == []  # no dba role
    path = f"/handrail/threads/{world.paused}/interrupts/{world.interrupt}/answer"
    for who, status in (("none", 401), ("app", 403), ("other", 403), ("admin", 403)):
        expect(await world.call(who, "POST", path, {"answer": APPROVE}), status)  # admin: no dba role
    resume = {"assistant_id": "sql", "command": {"resume": {world.interrupt: APPROVE}}}
    expect(await world.call("app", "POST", f"/threads/{world.paused}/runs/wait", resume), 403, "review")
    assert served_agent.RAN == []
    expect(await world.call("reviewer", "POST", path + "?wait=true", {"answer": APPROVE}), 200)
    assert served_agent.RAN == [("execute_sql", {"query": "DELETE FROM logs"})]


async def test_input_is_for_the_starter_and_admins(world: World) -> None:
    run = {"assistant_id": "sql", "input": user("write more.txt")}
    where = f"/threads/{world.idle}/runs/wait"
    expect(await world.call("none", "POST", where, run), 401)
    expect(await world.call("other", "POST", where, run), 403, "admin")
    expect(await world.call("reviewer", "POST", where, run), 403, "run")
    expect(await world.call("app", "POST", where, run), 200)
    for who, status in (("reviewer", 403), ("app", 200), ("other", 200), ("admin", 200)):
        expect(await world.call(who, "POST", "/threads", {}), status, "run")
    expect(await world.call("reviewer", "POST", "/runs/wait", run), 403, "run")


async def test_state_updates_forks_deletion_and_the_whole_audit_are_an_admins(world: World) -> None:
    update = {"assistant_id": "sql", "command": {"update": {"messages": [{"role": "user", "content": "x"}]}}}
    history = (await world.call("admin", "POST", f"/threads/{world.idle}/history", {"limit": 50})).json()
    fork = {"assistant_id": "sql", "checkpoint_id": history[-1]["checkpoint"]["checkpoint_id"]}
    for who in ("app", "other", "reviewer"):
        expect(await world.call(who, "POST", f"/threads/{world.idle}/runs/wait", update), 403, "admin")
        expect(await world.call(who, "POST", f"/threads/{world.idle}/runs/wait", fork), 403, "admin")
        expect(await world.call(who, "DELETE", f"/threads/{world.idle}"), 403, "admin")
        expect(await world.call(who, "GET", "/handrail/audit"), 403, "admin")
    expect(await world.call("admin", "GET", "/handrail/audit"), 200)
    expect(await world.call("admin", "DELETE", f"/threads/{world.idle}"), 204)
    # rule 21: the deletion is recorded with who made it, and the audit still shows it
    trail = (await world.call("admin", "GET", "/handrail/audit")).json()
    (deleted,) = [e for e in trail if e["event"] == "thread_deleted"]
    assert deleted["thread_id"] == world.idle and deleted["by"] == {"id": "root", "roles": []}
    assert len(deleted["value"]["head_hash"]) == 64


async def test_cancelling_a_run_is_for_its_starter_and_admins(world: World, tmp_path: Path) -> None:
    marker = tmp_path / "blk"
    run = {"assistant_id": "sql", "input": user(f"block {marker}")}
    created = await world.call("app", "POST", f"/threads/{world.idle}/runs", run)
    run_id = created.json()["run_id"]
    for _ in range(500):  # until the tool runs: the run is cancelled in the middle of it
        if Path(f"{marker}.started").exists():
            break
        await asyncio.sleep(0.01)
    cancel = f"/threads/{world.idle}/runs/{run_id}/cancel"
    for who, status in (("none", 401), ("other", 403), ("reviewer", 403)):
        expect(await world.call(who, "POST", cancel), status)
    expect(await world.call("app", "POST", cancel + "?wait=true"), 204)
    Path(f"{marker}.go").write_text("go")  # the tool's thread may end
    trail = (await world.call("admin", "GET", f"/handrail/threads/{world.idle}/audit")).json()
    (cancelled,) = [e for e in trail if e["event"] == "run_cancelled"]  # rule 21: who cancelled it
    assert cancelled["by"] == {"id": "app", "roles": []} and cancelled["channel"] == "http"


async def test_the_live_inbox_is_for_reviewers(world: World) -> None:
    for who, status in (("none", 401), ("app", 403)):
        expect(await world.call(who, "GET", "/handrail/events"), status)


async def test_a_revoked_tokens_stream_closes_within_two_seconds(service: Service) -> None:
    """Live streams check their credential again at least once a second (SPEC §5.3)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(service.app, port=0, log_level="error", lifespan="on"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    headers = service.token("rita", "dba", scopes=("review",))
    try:
        base = f"http://127.0.0.1:{port}"
        async with (
            httpx.AsyncClient(base_url=base, timeout=10) as http,
            http.stream("GET", "/handrail/events", headers=headers) as stream,
        ):
            lines = stream.aiter_lines()
            assert (await lines.__anext__()).startswith(": handrail live inbox")
            service.tokens.revoke("rita")
            loop = asyncio.get_running_loop()
            began = loop.time()

            async def drain() -> None:
                async for _ in lines:
                    pass

            await asyncio.wait_for(drain(), 5)
            assert loop.time() - began < 2.0
    finally:
        server.should_exit = True
        await task
