"""What a service process keeps per run, and how fast one credential may go (SPEC §5.3:
bounded by construction; issue 23).

A run's events and values are not kept once it ends; the records of finished runs are
bounded in number, age and bytes (``server/_registry.py``), so 60 runs of 500 KB no
longer grow a process for good. ``create_app(rate_limit=N)`` / ``handrail serve
--rate-limit N`` gives each credential a token bucket of N requests a second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import served_agent
from test_api import problem, user

from conftest import Backend, Service, make_token, serving
from handrail.server import create_app
from handrail.server._limits import RateLimit
from handrail.server._registry import KEEP, KEEP_SECONDS, RunRegistry

BIG = "x" * 500_000


class _Agent:
    """What the registry calls of an agent: a run that makes big values and streams them."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    async def ainvoke(self, run_input: Any, config: Any, version: str) -> Any:
        await asyncio.sleep(0)
        if self.fail:
            raise RuntimeError("down")
        return SimpleNamespace(value={"messages": [BIG]}, interrupts=())

    async def astream(self, run_input: Any, config: Any, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        for _ in range(3):
            await asyncio.sleep(0)
            yield {"type": "values", "data": {"messages": [BIG]}}
            if self.fail:
                raise RuntimeError("down")

    async def aget_state(self, config: Any) -> Any:
        return SimpleNamespace(values={"messages": [BIG]}, interrupts=())


def _start(registry: RunRegistry, n: int, *, streamed: bool = False, metadata: Any = None, **kw: Any) -> Any:
    modes = ["values"] if streamed else []
    return registry.start(_Agent(**kw), "a", f"t{n}", {}, {}, modes, metadata or {"n": n})  # type: ignore[arg-type]


async def test_after_1000_runs_a_registry_keeps_a_bounded_record_and_no_values() -> None:
    registry = RunRegistry()
    waited = None
    for n in range(1000):
        if n == 999:  # one runs.wait: handed its values, which are not kept either
            waited = registry.start(_Agent(), "a", "t999", {}, {}, [], {}, waited=True)  # type: ignore[arg-type]
            handoff = waited.handoff
        else:
            run = _start(registry, n, streamed=n % 2 == 0, fail=n % 7 == 0)
            await run.done.wait()
    assert waited is not None and handoff is not None
    await waited.done.wait()
    assert handoff.result() == {"messages": [BIG]}
    assert len(registry.runs) == KEEP < 1000 and not registry.active
    assert [r.thread_id for r in registry.runs.values()] == [f"t{n}" for n in range(1000 - KEEP, 1000)]
    for run in registry.runs.values():
        assert run.task is None and run.handoff is None
        assert [e for e, _ in run.events] in (["metadata"], ["metadata", "error"])
        assert all(BIG not in str(data) for _, data in run.events)
        assert (run.status == "error") == (run.failure is not None) == (int(run.thread_id[1:]) % 7 == 0)


async def test_finished_runs_are_forgotten_after_a_time_and_beyond_a_size() -> None:
    now = [0.0]
    registry = RunRegistry(keep_bytes=10_000, clock=lambda: now[0])
    first = _start(registry, 0)
    await first.done.wait()
    assert registry.get("t0", first.run_id) is first
    now[0] = KEEP_SECONDS + 1
    with pytest.raises(Exception, match="no run"):
        registry.get("t0", first.run_id)
    for n in range(5):
        await _start(registry, n, metadata={"note": "y" * 4000}).done.wait()
    assert [r.thread_id for r in registry.runs.values()] == ["t3", "t4"]  # 8 KB of the 10 KB allowed


async def test_a_stream_reading_a_run_gets_every_event_though_the_run_ends_first() -> None:
    registry = RunRegistry()
    run = _start(registry, 0, streamed=True)
    reader = run.follow()  # taken before the run went on: its events are this reader's to read
    await run.done.wait()
    assert [e for e, _ in run.events] == ["metadata"]
    assert [e async for e, _ in reader] == ["metadata", "values", "values", "values"]
    assert not run.events[0][1].get("messages")  # what it kept is its metadata event alone


async def test_a_big_run_over_http_keeps_nothing_and_join_reads_the_store(
    service: Service, client: httpx.AsyncClient
) -> None:
    alice = service.token("alice", "dba")
    thread_id = (await client.post("/threads", json={}, headers=alice)).json()["thread_id"]
    waited = await client.post(
        f"/threads/{thread_id}/runs/wait", json={"assistant_id": "sql", "input": user(BIG)}, headers=alice
    )
    assert waited.status_code == 200 and waited.json()["messages"][0]["content"] == BIG
    registry = service.app.state.service.runs
    (run,) = registry.runs.values()
    assert run.handoff is None and run.task is None and [e for e, _ in run.events] == ["metadata"]
    joined = await client.get(f"/threads/{thread_id}/runs/{run.run_id}/join", headers=alice)
    assert joined.json() == waited.json()  # read from the store: the same values, interrupts too
    listed = await client.get(f"/threads/{thread_id}/runs", headers=alice)
    assert [r["status"] for r in listed.json()] == ["success"]


def test_a_token_bucket_lets_a_burst_through_then_one_request_per_interval() -> None:
    now = [100.0]
    limit = RateLimit(None, service=None, rate=2, clock=lambda: now[0])  # type: ignore[arg-type]
    assert [limit.take("a") for _ in range(2)] == [0.0, 0.0]
    assert limit.take("a") == pytest.approx(0.5)
    assert limit.take("b") == 0.0  # another credential has its own bucket
    now[0] += 0.5
    assert limit.take("a") == 0.0
    now[0] += 60
    assert [limit.take("a") for _ in range(3)][-1] > 0  # the burst never grows beyond the rate
    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="above 0"):
            RateLimit(None, service=None, rate=bad)  # type: ignore[arg-type]


async def test_a_credential_over_its_rate_limit_gets_a_429_with_retry_after(backend: Backend) -> None:
    agent = served_agent.build(backend.saver())
    app = create_app({"sql": agent}, db=backend.server_db(), rate_limit=2)
    tokens = app.state.service.tokens
    alice = {"Authorization": "Bearer " + tokens.create("alice", ["dba"], ["run", "review"])[1]}
    bob = {"x-api-key": tokens.create("bob", ["dba"], ["review"])[1]}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://handrail.test") as client:
        assert [(await client.get("/handrail/inbox", headers=alice)).status_code for _ in range(2)] == [
            200,
            200,
        ]
        refused = await client.post("/threads", json={}, headers=alice)
        body = problem(refused, 429)
        assert refused.headers["retry-after"] == "1" and "2 request(s) a second" in body["detail"]
        assert (await client.get("/handrail/inbox", headers=bob)).status_code == 200
        for _ in range(5):  # no credential: not counted here, refused by the route
            assert (await client.get("/handrail/inbox")).status_code == 401
        await asyncio.sleep(0.6)
        assert (await client.get("/handrail/inbox", headers=alice)).status_code == 200
    unlimited = create_app({"sql": agent}, db=backend.server_db())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=unlimited), base_url="http://h") as client:
        assert {(await client.get("/handrail/inbox", headers=alice)).status_code for _ in range(20)} == {200}
    with pytest.raises(ValueError, match="above 0"):
        create_app({"sql": agent}, db=backend.server_db(), rate_limit=0)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_handrail_serve_takes_a_rate_limit(backend: Backend) -> None:
    token = make_token(backend, "alice", "dba")
    with serving(backend, "--rate-limit", "1") as url:
        statuses = [
            httpx.get(f"{url}/handrail/inbox", headers={"x-api-key": token}).status_code for _ in range(3)
        ]
        assert statuses[0] == 200 and 429 in statuses
        time.sleep(1.1)
        assert httpx.get(f"{url}/handrail/inbox", headers={"x-api-key": token}).status_code == 200
