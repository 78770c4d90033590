"""The live inbox over server-sent events, and two services on one store (issue 15).

Events are the store's feed, written with the events they tell of, so a stream of one
service process shows what another did; ``Last-Event-ID`` resumes a stream; each reviewer
sees only the reviews they may decide (rule 12).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from conftest import Backend, handrail_process, make_token, serving

APPROVE = {"answer": {"decisions": [{"type": "approve"}]}}


def sse(reply: httpx.Response) -> Iterator[tuple[str, str, dict[str, Any]]]:
    event_id, kind = "", ""
    for line in reply.iter_lines():
        if line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            yield event_id, kind, orjson.loads(line[6:])


def collect(url: str, token: str, until: str, box: list[Any], ready: threading.Event, **headers: str) -> None:
    with httpx.stream(
        "GET", f"{url}/handrail/events", headers={"x-api-key": token, **headers}, timeout=60
    ) as r:
        ready.set()
        for event in sse(r):
            box.append(event)
            if event[1] == until:
                return


def start(url: str, token: str, until: str, **headers: str) -> tuple[threading.Thread, list[Any]]:
    box: list[Any] = []
    ready = threading.Event()
    thread = threading.Thread(
        target=collect, args=(url, token, until, box, ready), kwargs=headers, daemon=True
    )
    thread.start()
    assert ready.wait(30)
    return thread, box


def test_the_live_inbox_streams_reviews_and_resumes_from_the_last_event(
    backend: Backend, served: str
) -> None:
    alice, bob = make_token(backend, "alice", "dba"), make_token(backend, "bob", "ops")
    watcher, events = start(served, alice, "run.finished")
    bobs, bob_events = start(served, bob, "run.finished")
    run = {"assistant_id": "sql", "input": {"messages": [{"role": "user", "content": "DELETE FROM t"}]}}
    paused = httpx.post(f"{served}/runs/wait", json=run, headers={"x-api-key": alice}, timeout=60).json()
    watcher.join(30)
    bobs.join(30)
    kinds = [kind for _, kind, _ in events]
    assert kinds == ["review.requested", "run.finished"]
    assert events[0][2]["interrupt_id"] == paused["__interrupt__"][0]["id"] and events[0][2]["tools"] == [
        "execute_sql"
    ]
    assert [kind for _, kind, _ in bob_events] == ["run.finished"]  # bob may not decide SQL
    first_id = events[0][0]
    thread_id = events[0][2]["thread_id"]
    path = f"{served}/handrail/threads/{thread_id}/interrupts/{events[0][2]['interrupt_id']}/answer?wait=true"
    assert httpx.post(path, json=APPROVE, headers={"x-api-key": alice}, timeout=60).status_code == 200
    resumed, replay = start(served, alice, "review.decided", **{"Last-Event-ID": first_id})
    resumed.join(30)
    assert [kind for _, kind, _ in replay] == ["run.finished", "review.decided"]
    assert replay[1][2]["reviewer"]["id"] == "alice" and replay[1][2]["channel"] == "http"


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_two_services_on_one_store_share_the_inbox_and_one_answer_wins(backend: Backend) -> None:
    """A run paused through one service shows in the other's inbox and live stream; of two
    answers at once through the two, one is applied and the other is a 409 naming who won."""
    alice, dana = make_token(backend, "alice", "dba"), make_token(backend, "dana", "dba")
    with serving(backend) as first, serving(backend) as second:
        watcher, events = start(second, alice, "review.requested")
        run = {"assistant_id": "sql", "input": {"messages": [{"role": "user", "content": "DROP TABLE t"}]}}
        paused = httpx.post(f"{first}/runs/wait", json=run, headers={"x-api-key": alice}, timeout=60).json()
        interrupt_id = paused["__interrupt__"][0]["id"]
        watcher.join(30)
        assert events and events[-1][2]["interrupt_id"] == interrupt_id
        inbox = httpx.get(f"{second}/handrail/inbox", headers={"x-api-key": dana}, timeout=60).json()["items"]
        (item,) = inbox
        path = f"/handrail/threads/{item['thread_id']}/interrupts/{interrupt_id}/answer?wait=true"
        replies: list[httpx.Response] = []
        barrier = threading.Barrier(2)

        def answer(url: str, token: str) -> None:
            barrier.wait()
            replies.append(httpx.post(url + path, json=APPROVE, headers={"x-api-key": token}, timeout=60))

        racers = [threading.Thread(target=answer, args=a) for a in ((first, alice), (second, dana))]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join(60)
        statuses = sorted(r.status_code for r in replies)
        assert statuses == [200, 409], [r.text for r in replies]
        loser = next(r for r in replies if r.status_code == 409).json()
        winner = next(r for r in replies if r.status_code == 200).json()
        assert loser["answered_by"] == winner["reviewer"]["id"]
        assert winner["values"]["messages"][-1]["content"] == "done: ran DROP TABLE t"
        state = httpx.get(
            f"{first}/threads/{item['thread_id']}/state", headers={"x-api-key": alice}, timeout=60
        )
        tool_results = [m for m in state.json()["values"]["messages"] if m["type"] == "tool"]
        assert len(tool_results) == 1  # the tool ran once


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_service_killed_mid_tool_is_recovered_by_another(backend: Backend, tmp_path: Any) -> None:
    """Rule 9 across services: SIGKILL the process running a tool; the other shows the call as
    outcome_unknown (it is not run again silently), and an answer through it settles it."""
    import signal

    alice = make_token(backend, "alice", "dba")
    marker = str(tmp_path / "tool")
    serve = ["serve", "served_agent:agent", *backend.store_flags(), "--port", "0"]
    ready = r"on (http://127\.0\.0\.1:\d+)"
    with handrail_process(serve, ready) as (process, found), serving(backend) as second:
        first = found.group(1)
        thread = httpx.post(f"{first}/threads", json={}, headers={"x-api-key": alice}, timeout=60).json()
        run = {"assistant_id": "sql", "input": {"messages": [{"role": "user", "content": f"block {marker}"}]}}
        path = f"{first}/threads/{thread['thread_id']}/runs"
        assert httpx.post(path, json=run, headers={"x-api-key": alice}, timeout=60).status_code == 200
        deadline = time.monotonic() + 60
        while not Path(marker + ".started").exists():
            assert time.monotonic() < deadline, "the tool never started"
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)
        state = {}
        deadline = time.monotonic() + 60
        while not state.get("interrupts"):
            assert time.monotonic() < deadline, state
            reply = httpx.get(
                f"{second}/threads/{thread['thread_id']}/state", headers={"x-api-key": alice}, timeout=60
            )
            state = reply.json()
            time.sleep(0.2)
        (interrupt,) = state["interrupts"]
        assert interrupt["value"]["type"] == "outcome_unknown" and interrupt["value"]["name"] == "block"
        answer = {"answer": {"type": "respond", "message": "it ran: unblocked by hand"}}
        path = (
            f"{second}/handrail/threads/{thread['thread_id']}/interrupts/{interrupt['id']}/answer?wait=true"
        )
        done = httpx.post(path, json=answer, headers={"x-api-key": alice}, timeout=60).json()
        assert done["values"]["messages"][-1]["content"] == "done: it ran: unblocked by hand"


def test_an_answer_given_outside_the_service_shows_live_and_the_service_runs_it(
    backend: Backend, served: str
) -> None:
    """A Python program answers with agent.decide on the same store: the live inbox shows
    the answer (channel python), and the service's worker runs the queued thread."""
    import served_agent

    alice = make_token(backend, "alice", "dba")
    run = {"assistant_id": "sql", "input": {"messages": [{"role": "user", "content": "ANALYZE t"}]}}
    paused = httpx.post(f"{served}/runs/wait", json=run, headers={"x-api-key": alice}, timeout=60).json()
    interrupt_id = paused["__interrupt__"][0]["id"]
    (item,) = httpx.get(f"{served}/handrail/inbox", headers={"x-api-key": alice}, timeout=60).json()["items"]
    watcher, events = start(served, alice, "run.finished")
    program = served_agent.build(backend.saver())
    program.decide(
        item["thread_id"],
        interrupt_id,
        {"decisions": [{"type": "approve"}]},
        reviewer={"id": "ops-bot", "roles": ["dba"]},
    )
    watcher.join(60)
    kinds = [kind for _, kind, _ in events]
    assert kinds == ["review.decided", "run.finished"], events
    assert events[0][2]["reviewer"]["id"] == "ops-bot" and events[0][2]["channel"] == "python"
    state = httpx.get(f"{served}/threads/{item['thread_id']}/state", headers={"x-api-key": alice}, timeout=60)
    assert state.json()["values"]["messages"][-1]["content"] == "done: ran ANALYZE t"
