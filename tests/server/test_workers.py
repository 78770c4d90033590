"""Many machines: services and workers on one PostgreSQL (issue 15, "Many machines").

Two ``handrail serve`` processes and one ``handrail worker``: a run started through the
first pauses; the second lists it in its inbox and its live stream shows it; the answer
goes through the second; a worker runs it (``handrail.worker``: exactly one per thread);
the run completes and the tool ran once. Then the worker is killed in the middle of a
tool, and another worker takes its run over as SPEC rule 9 says.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_live_inbox import start as watch

from conftest import Backend, handrail_process, make_token, serving, working

pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


def _state(url: str, token: str, thread_id: str) -> dict[str, Any]:
    reply = httpx.get(f"{url}/threads/{thread_id}/state", headers={"x-api-key": token}, timeout=60)
    assert reply.status_code == 200, reply.text
    data: dict[str, Any] = reply.json()
    return data


def _until(what: str, check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def test_two_services_and_a_worker_share_one_store(backend: Backend) -> None:
    alice, dana = make_token(backend, "alice", "dba"), make_token(backend, "dana", "dba")
    with (
        serving(backend, "--concurrency", "0") as first,
        serving(backend, "--concurrency", "0") as second,
        working(backend),
    ):
        watcher, events = watch(second, dana, "review.requested")
        run = {"assistant_id": "sql", "input": {"messages": [{"role": "user", "content": "VACUUM t"}]}}
        paused = httpx.post(f"{first}/runs/wait", json=run, headers={"x-api-key": alice}, timeout=60).json()
        asked_at = time.monotonic()
        interrupt_id = paused["__interrupt__"][0]["id"]
        watcher.join(30)
        seen_after = time.monotonic() - asked_at
        assert events and events[-1][2]["interrupt_id"] == interrupt_id, events
        print(
            f"the second service's live stream showed the review {seen_after * 1000:.0f} ms after it paused"
        )
        (item,) = httpx.get(f"{second}/handrail/inbox", headers={"x-api-key": dana}, timeout=60).json()[
            "items"
        ]
        assert item["interrupt_id"] == interrupt_id
        thread_id = item["thread_id"]
        finished, ran = watch(first, alice, "run.finished")
        answer = f"{second}/handrail/threads/{thread_id}/interrupts/{interrupt_id}/answer"
        reply = httpx.post(
            answer, json={"answer": {"decisions": [{"type": "approve"}]}}, headers={"x-api-key": dana}
        )
        assert reply.status_code == 202, reply.text  # recorded; the worker runs it (the services run none)
        finished.join(60)
        assert [kind for _, kind, _ in ran][-1] == "run.finished", ran
        assert ran[-1][2]["status"] == "success" and ran[-1][2]["thread_status"] == "idle"
        state = _state(first, alice, thread_id)
        messages = state["values"]["messages"]
        assert messages[-1]["content"] == "done: ran VACUUM t"
        assert len([m for m in messages if m["type"] == "tool"]) == 1  # the tool ran once
        audit = httpx.get(f"{first}/handrail/threads/{thread_id}/audit", headers={"x-api-key": alice}).json()
        (answered,) = [e for e in audit if e["event"] == "answered"]
        assert answered["reviewer"]["id"] == "dana" and answered["channel"] == "http"


def test_a_worker_killed_in_a_tool_is_taken_over_by_another(backend: Backend, tmp_path: Path) -> None:
    """Rule W2 and SPEC rule 9: SIGKILL the worker while its tool runs; a second worker takes
    the run, which raises the call as outcome_unknown (not run again); an answer settles it."""
    alice = make_token(backend, "alice", "dba")
    marker = str(tmp_path / "tool")
    with serving(backend, "--concurrency", "0") as url:
        thread = httpx.post(f"{url}/threads", json={}, headers={"x-api-key": alice}, timeout=60).json()
        thread_id = thread["thread_id"]
        run = {"assistant_id": "sql", "input": {"messages": [{"role": "user", "content": "write notes"}]}}
        paused = httpx.post(
            f"{url}/threads/{thread_id}/runs/wait", json=run, headers={"x-api-key": alice}
        ).json()
        interrupt_id = paused["__interrupt__"][0]["id"]
        # the edited call blocks inside the tool (served_agent.block) until the test lets it go
        edit = {"type": "edit", "edited_action": {"name": "block", "args": {"path": marker}}}
        answer = f"{url}/handrail/threads/{thread_id}/interrupts/{interrupt_id}/answer"
        with working(backend) as doomed:
            reply = httpx.post(answer, json={"answer": {"decisions": [edit]}}, headers={"x-api-key": alice})
            assert reply.status_code == 202, reply.text
            _until("the worker's tool to start", lambda: Path(marker + ".started").exists())
            os.kill(doomed.pid, signal.SIGKILL)
            doomed.wait(30)
        with working(backend):
            state = _until(
                "the second worker to raise the call as outcome_unknown",
                lambda: (s := _state(url, alice, thread_id))["interrupts"] and s,
            )
            (unknown,) = state["interrupts"]
            assert unknown["value"]["type"] == "outcome_unknown" and unknown["value"]["name"] == "block"
            assert not Path(marker + ".go").exists()  # the test never let it go: nothing ran it again
            inbox = httpx.get(
                f"{url}/handrail/inbox", headers={"x-api-key": alice}, params={"kind": "outcome_unknown"}
            )
            assert [i["interrupt_id"] for i in inbox.json()["items"]] == [unknown["id"]]
            # with --concurrency 0 only a worker continues the thread: the second one still runs
            settle = f"{url}/handrail/threads/{thread_id}/interrupts/{unknown['id']}/answer?wait=true"
            done = httpx.post(
                settle,
                json={"answer": {"type": "respond", "message": "it never ran"}},
                headers={"x-api-key": alice},
                timeout=60,
            )
            assert done.status_code == 200, done.text
            assert done.json()["values"]["messages"][-1]["content"] == "done: it never ran"


def test_answers_through_two_services_at_once_run_once_on_the_workers(backend: Backend) -> None:
    """Ten paused threads answered through two services at once, two workers running them:
    every thread completes, each tool call once (rule W1)."""
    alice = make_token(backend, "alice", "dba")
    with (
        serving(backend, "--concurrency", "0") as first,
        serving(backend, "--concurrency", "0") as second,
        working(backend),
        working(backend),
    ):
        for n in range(10):
            run = {
                "assistant_id": "sql",
                "input": {"messages": [{"role": "user", "content": f"UPDATE t{n}"}]},
            }
            out = httpx.post(f"{first}/runs/wait", json=run, headers={"x-api-key": alice}, timeout=60).json()
            assert out["__interrupt__"]
        inbox = httpx.get(
            f"{second}/handrail/inbox", headers={"x-api-key": alice}, params={"limit": 50}
        ).json()
        items = inbox["items"]
        assert len(items) == 10
        barrier = threading.Barrier(len(items))
        statuses: list[int] = []

        def answer(n: int, item: dict[str, Any]) -> None:
            url = (first, second)[n % 2]
            path = f"{url}/handrail/threads/{item['thread_id']}/interrupts/{item['interrupt_id']}/answer"
            barrier.wait()
            reply = httpx.post(
                path, json={"answer": {"decisions": [{"type": "approve"}]}}, headers={"x-api-key": alice}
            )
            statuses.append(reply.status_code)

        racers = [threading.Thread(target=answer, args=(n, item)) for n, item in enumerate(items)]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join(60)
        assert statuses == [202] * 10
        for item in items:
            state = _until(
                f"thread {item['thread_id']} to finish",
                lambda item=item: (
                    (s := _state(first, alice, item["thread_id"]))["values"]["messages"][-1]["type"] == "ai"
                    and not s["interrupts"]
                    and s["next"] == []
                    and s
                ),
            )
            tools = [m for m in state["values"]["messages"] if m["type"] == "tool"]
            assert len(tools) == 1, state["values"]["messages"]


def test_a_run_the_service_accepted_happens_though_the_service_dies_at_once(backend: Backend) -> None:
    """Issue 24: runs.create answers once the run's input is on record; the service killed
    right after its answer, another service's worker takes the thread over and the run
    goes on to its review."""
    token = make_token(backend, "alice", "dba")
    serve = ["serve", "served_agent:agent", *backend.store_flags(), "--port", "0"]
    with handrail_process(serve, r"on (http://127\.0\.0\.1:\d+)") as (process, found):
        url = found.group(1)
        thread = httpx.post(f"{url}/threads", json={}, headers={"x-api-key": token}, timeout=60).json()
        run = {"assistant_id": "sql", "input": {"messages": [{"role": "user", "content": "DROP TABLE t"}]}}
        path = f"{url}/threads/{thread['thread_id']}/runs"
        assert httpx.post(path, json=run, headers={"x-api-key": token}, timeout=60).status_code == 200
        os.kill(process.pid, signal.SIGKILL)
    with serving(backend) as second:
        deadline = time.monotonic() + 60
        state: dict[str, Any] = {}
        while not state.get("interrupts"):
            assert time.monotonic() < deadline, state
            reply = httpx.get(f"{second}/threads/{thread['thread_id']}/state", headers={"x-api-key": token})
            state = reply.json()
            time.sleep(0.2)
        (review,) = state["interrupts"]
        assert review["value"]["action_requests"][0]["args"] == {"query": "DROP TABLE t"}


async def test_a_service_with_no_worker_of_its_own_runs_no_answer(backend: Backend, monkeypatch: Any) -> None:
    """Issue 25: ``--concurrency 0`` runs no queued thread in the service, even for an answer
    sent with ``?wait=true``: it waits for a worker, which runs the call."""
    import served_agent

    from handrail.server import _reviews as reviews
    from handrail.server import create_app
    from handrail.worker import Worker

    monkeypatch.setattr(reviews, "WAIT_SECONDS", 0.5)
    served_agent.RAN.clear()
    store = backend.saver()
    agent = served_agent.build(store)
    app = create_app({"sql": agent}, db=backend.server_db(), worker_concurrency=0)
    alice = {"x-api-key": app.state.service.tokens.create("alice", ["dba"], ["run", "review"])[1]}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://handrail.test") as http:
        run = {"assistant_id": "sql", "input": {"messages": [{"role": "user", "content": "DROP TABLE t"}]}}
        assert (await http.post("/runs/wait", json=run, headers=alice)).status_code == 200
        (record,) = await agent.alist_threads()
        state = await agent.aget_state({"configurable": {"thread_id": record.thread_id}})
        thread, interrupt = record.thread_id, state.interrupts[0].id
        path = f"/handrail/threads/{thread}/interrupts/{interrupt}/answer?wait=true"
        body = (
            await http.post(path, json={"answer": {"decisions": [{"type": "approve"}]}}, headers=alice)
        ).json()
        assert body["run_status"] == "pending" and served_agent.RAN == []
        assert await Worker({"sql": agent}).run_thread(thread) is not None
    assert served_agent.RAN == [("execute_sql", {"query": "DROP TABLE t"})]
