"""The agent a thread belongs to is fixed when it is created (SPEC rule 21), over HTTP.

A ``strict`` agent (``execute_sql`` reviewed by a dba) and a ``lax`` one (the same tool,
nothing reviewed) are served side by side on one store. No client input - a run naming
another assistant, ``metadata``, ``config.metadata`` or ``config.configurable`` naming
``lax`` - moves a strict thread to ``lax``: each is a 422 and saves nothing. And a
process serves, lists and runs only the threads of the agents it hosts (under their keys
and their own names). Judged by the ledger the tools write (``binding_agents.LEDGER``, or
its file for a ``handrail serve`` process): what actually ran, never a reply.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from binding_agents import LEDGER, build, ledger_file

from conftest import Backend, handrail_process, make_token
from handrail.checkpoint.base import ThreadFilter
from handrail.server import create_app
from handrail.server._events import LiveFeed
from handrail.worker import Worker, hosted_names

APPROVE = {"decisions": [{"type": "approve"}]}


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def problem(reply: httpx.Response, status: int) -> str:
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"].startswith("application/problem+json")
    detail: str = reply.json()["detail"]
    return detail


class Pair:
    """``strict`` and ``lax`` on one store, served by one app (and the agents themselves)."""

    def __init__(self, backend: Backend, agents: dict[str, str] | None = None) -> None:
        self.store = backend.saver()
        self.strict = build("strict", self.store)
        self.lax = build("lax", self.store)
        built = {"strict": self.strict, "lax": self.lax}
        served = {key: built[kind] for key, kind in (agents or {"strict": "strict", "lax": "lax"}).items()}
        self.app = create_app(served, db=backend.server_db())
        self.service = self.app.state.service
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app), base_url="http://handrail.test"
        )

    def token(self, name: str, *roles: str, scopes: tuple[str, ...] = ("run", "review")) -> dict[str, str]:
        return {"x-api-key": self.service.tokens.create(name, list(roles), list(scopes))[1]}

    async def paused(self, headers: dict[str, str], text: str, thread: str | None = None) -> tuple[str, str]:
        """A strict thread paused on ``text``: (thread id, interrupt id)."""
        thread = thread or f"t-{uuid.uuid4().hex[:8]}"
        reply = await self.http.post(
            f"/threads/{thread}/runs/wait",
            json={"assistant_id": "strict", "input": user(text), "if_not_exists": "create"},
            headers=headers,
        )
        assert reply.status_code == 200, reply.text
        return thread, reply.json()["__interrupt__"][0]["id"]


@pytest.fixture
async def pair(backend: Backend) -> AsyncIterator[Pair]:
    LEDGER.clear()
    found = Pair(backend)
    yield found
    await found.http.aclose()


REBINDS: list[dict[str, Any]] = [
    {"assistant_id": "lax"},
    {"metadata": {"assistant_id": "lax"}},
    {"metadata": {"graph_id": "lax"}},
    {"metadata": {"assistant_id": "strict", "graph_id": "lax"}},
    {"config": {"metadata": {"assistant_id": "lax"}}},
    {"config": {"metadata": {"graph_id": "lax"}}, "metadata": {"assistant_id": "strict"}},
    {"config": {"configurable": {"assistant_id": "lax"}}},
    {"metadata": {"assistant_id": ["lax"]}},
    {"metadata": {"assistant_id": 7}},
]


async def test_no_run_rebinds_a_strict_thread(pair: Pair) -> None:
    """The attack of the security review, and its variants: each a 422, nothing saved; the
    thread is continued as strict, by the service's worker too; a lax-only worker never
    takes it. SQL runs only when a dba approved it."""
    alice = pair.token("alice", "dba")
    thread, asked = await pair.paused(alice, "DROP TABLE a")
    before = pair.store.get_thread(thread)
    assert before.metadata["assistant_id"] == "strict"
    resume = {"command": {"resume": {asked: APPROVE}}}
    for extra in REBINDS:
        for body in ({"input": user("DROP TABLE b")}, resume):
            request = {"assistant_id": "strict", **body, **extra}
            for path in ("/runs/wait", "/runs", "/runs/stream"):
                reply = await pair.http.post(f"/threads/{thread}{path}", json=request, headers=alice)
                detail = problem(reply, 422)
                assert "belongs to assistant 'strict'" in detail, detail
    assert pair.store.get_thread(thread) == before and LEDGER == []

    # a new thread that names another agent in its own run is refused too, and nothing is kept
    threads = len(pair.store.list_threads(ThreadFilter()))
    for extra in REBINDS[1:]:  # (the first one, a run of lax, is fine on a new thread)
        stateless = {"assistant_id": "strict", "input": user("DROP TABLE c"), **extra}
        problem(await pair.http.post("/runs/wait", json=stateless, headers=alice), 422)
    problem(
        await pair.http.post(
            "/threads", json={"metadata": {"graph_id": "strict", "assistant_id": "lax"}}, headers=alice
        ),
        422,
    )
    assert len(pair.store.list_threads(ThreadFilter())) == threads

    # the dba's approval runs through the service's worker: as strict
    answer = f"/handrail/threads/{thread}/interrupts/{asked}/answer"
    done = await pair.http.post(answer, params={"wait": "true"}, json={"answer": APPROVE}, headers=alice)
    assert done.status_code == 200 and done.json()["run_status"] == "success", done.text
    assert LEDGER == [("execute_sql", "DROP TABLE a")]

    # after a worker took it: still no rebinding, and new input is reviewed
    for extra in REBINDS:
        request = {"assistant_id": "strict", "input": user("DROP TABLE b"), **extra}
        problem(await pair.http.post(f"/threads/{thread}/runs/wait", json=request, headers=alice), 422)
    again = {"assistant_id": "strict", "input": user("DROP TABLE b"), "metadata": {"graph_id": "strict"}}
    reply = await pair.http.post(f"/threads/{thread}/runs/wait", json=again, headers=alice)
    assert reply.status_code == 200, reply.text
    (interrupt,) = reply.json()["__interrupt__"]
    assert LEDGER == [("execute_sql", "DROP TABLE a")]
    record = pair.store.get_thread(thread)
    assert record.metadata["assistant_id"] == "strict" and "graph_id" not in record.metadata

    # answered in Python (queued): a worker hosting only lax never takes it; the strict one does
    await pair.strict.adecide(thread, interrupt["id"], APPROVE, reviewer={"id": "dana", "roles": ["dba"]})
    assert await Worker({"lax": pair.lax}).run_thread(thread) is None
    assert LEDGER == [("execute_sql", "DROP TABLE a")]
    assert await pair.service.worker.run_thread(thread) is not None
    assert LEDGER == [("execute_sql", "DROP TABLE a"), ("execute_sql", "DROP TABLE b")]


async def test_a_thread_created_for_an_agent_is_bound_by_its_first_run(pair: Pair) -> None:
    """threads.create's metadata names the agent; its first run writes it into the log, and
    a thread created for no agent is bound by its first run, to that run's assistant."""
    alice = pair.token("alice", "dba")
    made = await pair.http.post(
        "/threads", json={"metadata": {"graph_id": "strict", "team": "data"}}, headers=alice
    )
    thread = made.json()["thread_id"]
    created = pair.store.get_thread(thread)  # in the store, without a log (service.py rule S1)
    assert created.head_seq == 0 and created.metadata["assistant_id"] == "strict"
    lax_run = {"assistant_id": "strict", "input": user("DROP TABLE d"), "metadata": {"assistant_id": "lax"}}
    problem(await pair.http.post(f"/threads/{thread}/runs/wait", json=lax_run, headers=alice), 422)
    assert pair.store.get_thread(thread) == created  # nothing saved
    run = {"assistant_id": "strict", "input": user("DROP TABLE d")}
    assert (await pair.http.post(f"/threads/{thread}/runs/wait", json=run, headers=alice)).status_code == 200
    record = pair.store.get_thread(thread)
    assert dict(record.metadata) == {
        "assistant_id": "strict",
        "graph_id": "strict",
        "team": "data",
        "owner": "alice",  # who created it (its run-scoped credential)
    }
    seen = (await pair.http.get(f"/threads/{thread}", headers=alice)).json()
    assert seen["metadata"] == dict(record.metadata) and seen["status"] == "interrupted"

    free = (await pair.http.post("/threads", json={}, headers=alice)).json()["thread_id"]
    ran = await pair.http.post(
        f"/threads/{free}/runs/wait", json={"assistant_id": "lax", "input": user("SELECT 1")}, headers=alice
    )
    assert ran.status_code == 200, ran.text
    assert LEDGER == [("execute_sql", "SELECT 1")]  # lax reviews nothing: it is lax's thread now
    assert pair.store.get_thread(free).metadata["assistant_id"] == "lax"
    problem(
        await pair.http.post(
            f"/threads/{free}/runs/wait", json={**run, "input": user("SELECT 2")}, headers=alice
        ),
        422,
    )
    assert LEDGER == [("execute_sql", "SELECT 1")]


def test_the_langgraph_sdk_cannot_rebind_a_thread(backend: Backend, tmp_path: Path, monkeypatch: Any) -> None:
    """The same attack through LangGraph's own Python client against a real ``handrail serve``."""
    from langgraph_sdk import get_sync_client

    ledger = str(tmp_path / "ledger.jsonl")
    monkeypatch.setenv("HANDRAIL_BINDING_LEDGER", ledger)
    token = make_token(backend, "alice", "dba")
    args = [
        "serve",
        "binding_agents:strict",
        "--agent",
        "lax=binding_agents:lax",
        *backend.store_flags(),
        "--port",
        "0",
    ]
    with handrail_process(args, r"on (http://127\.0\.0\.1:\d+)") as (_, found):
        client = get_sync_client(url=found.group(1), api_key=token)
        assert sorted(a["assistant_id"] for a in client.assistants.search()) == ["lax", "strict"]
        thread = client.threads.create(metadata={"graph_id": "strict"})["thread_id"]
        paused = client.runs.wait(thread, "strict", input=user("DROP TABLE a"))
        asked = paused["__interrupt__"][0]["id"]  # type: ignore[call-overload, index]
        resume = {"resume": {asked: APPROVE}}
        attempts: list[tuple[str, dict[str, Any]]] = [
            ("lax", {"input": user("DROP TABLE b")}),
            ("lax", {"command": resume}),
            ("strict", {"input": user("DROP TABLE b"), "metadata": {"assistant_id": "lax"}}),
            ("strict", {"command": resume, "metadata": {"assistant_id": "lax", "graph_id": "lax"}}),
            ("strict", {"input": user("DROP TABLE b"), "metadata": {"graph_id": "lax"}}),
            ("strict", {"command": resume, "config": {"metadata": {"assistant_id": "lax"}}}),
        ]
        for assistant, kwargs in attempts:
            with pytest.raises(httpx.HTTPStatusError) as refused:
                client.runs.wait(thread, assistant, **kwargs)
            assert refused.value.response.status_code == 422, refused.value.response.text
            with pytest.raises(httpx.HTTPStatusError) as refused:
                list(client.runs.stream(thread, assistant, **kwargs))
            assert refused.value.response.status_code == 422
        assert ledger_file(ledger) == []
        client.runs.wait(thread, "strict", command=resume)
        assert ledger_file(ledger) == [("execute_sql", "DROP TABLE a")]
        again = client.runs.wait(thread, "strict", input=user("DROP TABLE b"), metadata={"ticket": "T-9"})
        assert again["__interrupt__"]  # type: ignore[call-overload, index]
        seen = client.threads.get(thread)
        assert seen["metadata"]["assistant_id"] == "strict" and seen["metadata"]["ticket"] == "T-9"
        assert ledger_file(ledger) == [("execute_sql", "DROP TABLE a")]


async def test_threads_of_an_agent_not_served_here_are_not_seen(pair: Pair) -> None:
    """A Python program's agent named ``demo`` on the same store: its thread is in no listing
    here and every route answers 404, as for a thread that does not exist. A thread of an
    unnamed agent (bound to none) belongs to the first agent served."""
    alice = pair.token("alice", "dba")
    ours, _ = await pair.paused(alice, "DROP TABLE ours")
    demo = build("strict", pair.store, name="demo")
    theirs = "demo-thread-7f3a"
    asked = demo.invoke({"messages": ["DROP TABLE theirs"]}, config(theirs))["__interrupt__"][0].id
    assert pair.store.get_thread(theirs).metadata["assistant_id"] == "demo"
    plain = "plain-thread-9c1d"
    build("strict", pair.store, name=None).invoke({"messages": ["DROP TABLE plain"]}, config(plain))
    assert "assistant_id" not in pair.store.get_thread(plain).metadata

    inbox = (await pair.http.get("/handrail/inbox", headers=alice)).json()
    assert sorted(i["thread_id"] for i in inbox["items"]) == sorted([ours, plain])
    only_strict = (await pair.http.get("/handrail/inbox", params={"agent": "strict"}, headers=alice)).json()
    assert sorted(i["thread_id"] for i in only_strict["items"]) == sorted([ours, plain])
    assert (await pair.http.get("/handrail/inbox", params={"agent": "lax"}, headers=alice)).json()[
        "items"
    ] == []
    found = (await pair.http.post("/threads/search", json={"limit": 100}, headers=alice)).json()
    assert sorted(t["thread_id"] for t in found) == sorted([ours, plain])
    by_name = {"metadata": {"assistant_id": "demo"}}
    assert (await pair.http.post("/threads/search", json=by_name, headers=alice)).json() == []
    admin = pair.token("root", scopes=("admin",))  # the audit across threads is an admin's
    trail = (await pair.http.get("/handrail/audit", headers=admin)).json()
    assert {e["thread_id"] for e in trail} == {ours, plain}

    missing = "no-such-thread"
    run = {"assistant_id": "strict", "input": user("x")}
    for thread in (theirs, missing):
        replies = [
            await pair.http.get(f"/threads/{thread}", headers=alice),
            await pair.http.get(f"/threads/{thread}/state", headers=alice),
            await pair.http.post(f"/threads/{thread}/history", json={}, headers=alice),
            await pair.http.get(f"/handrail/threads/{thread}/audit", headers=alice),
            await pair.http.post(
                f"/handrail/threads/{thread}/interrupts/{asked}/answer",
                json={"answer": APPROVE},
                headers=alice,
            ),
            await pair.http.post(f"/threads/{thread}/runs/wait", json=run, headers=alice),
            await pair.http.delete(f"/threads/{thread}", headers=admin),
        ]
        for reply in replies:
            assert problem(reply, 404) == f"no thread {thread!r} is served here"
    # a thread that exists is not made again for this service, whatever agent it is of
    create = {**run, "if_not_exists": "create"}
    reply = await pair.http.post(f"/threads/{theirs}/runs/wait", json=create, headers=alice)
    assert problem(reply, 404) == f"no thread {theirs!r} is served here"
    assert pair.store.get_thread(theirs) is not None and LEDGER == []
    assert len(demo.get_state(config(theirs)).interrupts) == 1  # nothing answered it

    # the web pages, signed in
    web = httpx.AsyncClient(transport=httpx.ASGITransport(app=pair.app), base_url="http://handrail.test")
    form = (await web.get("/inbox/signin")).text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form)
    assert csrf is not None
    signed = await web.post("/inbox/signin", data={"csrf": csrf.group(1), "token": alice["x-api-key"]})
    assert signed.status_code == 303, signed.text
    page = await web.get("/inbox")
    assert page.status_code == 200 and ours in page.text and plain in page.text and theirs not in page.text
    for path in (
        f"/inbox/threads/{theirs}",
        f"/inbox/reviews/{theirs}/{asked}",
        f"/inbox/threads/{theirs}/audit.csv",
    ):
        assert (await web.get(path)).status_code == 404
    row = await web.get("/inbox/rows", params={"thread": theirs, "interrupt": asked})
    assert row.status_code == 204
    await web.aclose()

    # the live stream tells of ours, never of theirs
    feed = LiveFeed(pair.service)
    credential = pair.service.tokens.verify(alice["x-api-key"])
    told = [
        (entry.thread_id, await feed.event(entry, credential)) for entry in await pair.store.aread_feed(None)
    ]
    assert {thread for thread, event in told if event is not None} == {ours, plain}
    assert any(thread == theirs for thread, _ in told)

    # the unbound thread is the first agent's: strict runs it, lax may not
    problem(
        await pair.http.post(
            f"/threads/{plain}/runs/wait", json={"assistant_id": "lax", "input": user("x")}, headers=alice
        ),
        422,
    )
    assert (await pair.http.get(f"/threads/{plain}", headers=alice)).json()["metadata"][
        "assistant_id"
    ] == "strict"
    state = (await pair.http.get(f"/threads/{plain}/state", headers=alice)).json()
    answer = f"/handrail/threads/{plain}/interrupts/{state['interrupts'][0]['id']}/answer"
    done = await pair.http.post(answer, params={"wait": "true"}, json={"answer": APPROVE}, headers=alice)
    assert done.status_code == 200 and done.json()["run_status"] == "success", done.text
    assert LEDGER == [("execute_sql", "DROP TABLE plain")]


async def test_a_worker_takes_only_the_threads_of_the_agents_it_hosts(pair: Pair) -> None:
    """A worker hosting strict never takes a thread bound to lax; hosted under a key that is
    not its name, an agent still takes the threads a Python program made with it."""
    reviewer = {"id": "dana", "roles": ["dba"]}
    gated_lax = build("strict", pair.store, name="lax")  # a Python program's gated agent named lax
    asked = gated_lax.invoke({"messages": ["DROP TABLE l"]}, config("lax-thread"))["__interrupt__"][0].id
    await gated_lax.adecide("lax-thread", asked, APPROVE, reviewer=reviewer)
    only_strict = Worker({"strict": pair.strict}, poll=0.05)
    assert await only_strict.run_thread("lax-thread") is None
    task = asyncio.create_task(only_strict.run())
    await asyncio.sleep(0.5)
    await only_strict.stop()
    await asyncio.wait_for(task, 10)
    assert only_strict.ran == 0 and LEDGER == []
    assert await Worker({"lax": gated_lax}).run_thread("lax-thread") is not None  # its own agent's worker
    assert LEDGER == [("execute_sql", "DROP TABLE l")]

    # the strict agent (named "strict") hosted as "ops": its Python threads are bound to "strict"
    asked = pair.strict.invoke({"messages": ["DROP TABLE p"]}, config("python-thread"))["__interrupt__"][0].id
    assert pair.store.get_thread("python-thread").metadata["assistant_id"] == "strict"
    await pair.strict.adecide("python-thread", asked, APPROVE, reviewer=reviewer)
    assert await Worker({"lax": pair.lax}).run_thread("python-thread") is None
    assert await Worker({"ops": pair.strict}).run_thread("python-thread") is not None
    assert LEDGER == [("execute_sql", "DROP TABLE l"), ("execute_sql", "DROP TABLE p")]


async def test_a_service_hosts_an_agent_under_its_key_and_its_name(backend: Backend) -> None:
    LEDGER.clear()
    pair = Pair(backend, {"ops": "strict", "lax": "lax"})
    try:
        alice = pair.token("alice", "dba")
        assert pair.service.names == {"ops": "ops", "lax": "lax", "strict": "ops"}
        asked = pair.strict.invoke({"messages": ["DROP TABLE q"]}, config("named"))["__interrupt__"][0].id
        seen = await pair.http.get("/threads/named", headers=alice)
        assert seen.status_code == 200 and seen.json()["metadata"]["assistant_id"] == "strict"
        inbox = (await pair.http.get("/handrail/inbox", params={"agent": "ops"}, headers=alice)).json()
        assert [i["thread_id"] for i in inbox["items"]] == ["named"]
        run = {"assistant_id": "lax", "input": user("x")}
        detail = problem(await pair.http.post("/threads/named/runs/wait", json=run, headers=alice), 422)
        assert "belongs to assistant 'ops'" in detail
        answer = f"/handrail/threads/named/interrupts/{asked}/answer"
        done = await pair.http.post(answer, params={"wait": "true"}, json={"answer": APPROVE}, headers=alice)
        assert done.status_code == 200 and done.json()["run_status"] == "success", done.text
        assert LEDGER == [("execute_sql", "DROP TABLE q")]
        again = {"assistant_id": "ops", "input": user("DROP TABLE r"), "metadata": {"assistant_id": "strict"}}
        admin = pair.token(
            "root", scopes=("admin",)
        )  # a Python program's thread: nobody's to run but an admin
        paused = await pair.http.post("/threads/named/runs/wait", json=again, headers=admin)
        assert paused.status_code == 200 and paused.json()["__interrupt__"], paused.text
        assert pair.store.get_thread("named").metadata["assistant_id"] == "strict"
        # threads.create may name the agent by its own name too; the first run writes the key
        made = await pair.http.post("/threads", json={"metadata": {"graph_id": "strict"}}, headers=alice)
        created = made.json()["thread_id"]
        problem(await pair.http.post(f"/threads/{created}/runs/wait", json=run, headers=alice), 422)
        first = {"assistant_id": "ops", "input": user("DROP TABLE s")}
        assert (
            await pair.http.post(f"/threads/{created}/runs/wait", json=first, headers=alice)
        ).status_code == 200
        bound = pair.store.get_thread(created).metadata
        assert (bound["assistant_id"], bound["graph_id"]) == ("ops", "ops")
        assert LEDGER == [("execute_sql", "DROP TABLE q")]
    finally:
        await pair.http.aclose()


def test_hosted_names_give_a_key_before_a_name() -> None:
    strict, lax, unnamed = build("strict"), build("lax"), build("lax", name=None)
    assert hosted_names({"a": strict, "b": lax, "c": unnamed}) == {
        "a": "a",
        "b": "b",
        "c": "c",
        "strict": "a",
        "lax": "b",
    }
    # a name another agent's key holds stays that agent's
    assert hosted_names({"strict": lax, "other": strict}) == {
        "strict": "strict",
        "other": "other",
        "lax": "strict",
    }
