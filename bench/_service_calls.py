"""The calls the service benchmark times: review cycles, answers, reviewers at once, inbox pages.

Part of ``bench/service.py`` (see its documentation).
"""

from __future__ import annotations

import re
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import httpx  # noqa: E402
from _service_servers import APPROVE, HandrailServer, Target, timed  # noqa: E402

from handrail import Command  # noqa: E402


def first_pause(client: Any) -> Target:
    thread = client.threads.create()["thread_id"]
    result = client.runs.wait(thread, "bench", input={"messages": [{"role": "user", "content": "go"}]})
    return thread, result["__interrupt__"][0]["id"]


def api_cycles(client: Any, cycles: int, per_thread: int) -> list[float]:
    """``cycles`` timed ``runs.wait`` resumes, ``per_thread`` on each new thread."""
    samples: list[float] = []
    while len(samples) < cycles:
        thread, interrupt = first_pause(client)
        for _ in range(min(per_thread, cycles - len(samples))):
            command = {"resume": {interrupt: APPROVE}}
            elapsed, result = timed(lambda: client.runs.wait(thread, "bench", command=command))  # noqa: B023
            interrupt = result["__interrupt__"][0]["id"]
            samples.append(elapsed)
    return samples


def library_cycles(agent: Any, cycles: int, per_thread: int) -> list[float]:
    samples: list[float] = []
    while len(samples) < cycles:
        config = {"configurable": {"thread_id": f"lib-{uuid.uuid4().hex}"}}
        interrupt = agent.invoke({"messages": ["go"]}, config)["__interrupt__"][0].id
        for _ in range(min(per_thread, cycles - len(samples))):
            command = Command(resume={interrupt: APPROVE})
            elapsed, result = timed(lambda: agent.invoke(command, config))  # noqa: B023
            interrupt = result["__interrupt__"][0].id
            samples.append(elapsed)
    return samples


ANSWERED = "answered:"  # what an answer "returns" as its run: a worker runs it, under no id known yet


def answer_call(system: str, way: str) -> Callable[[Any, Target], str]:
    """A function that answers one paused thread and returns the id of the run it started
    (for handrail's answer: ``ANSWERED`` and the interrupt, as a worker runs the thread)."""
    if system != "langgraph" and way == "answer":

        def post(client: Any, target: Target) -> str:
            thread, interrupt = target
            client.http.post(
                f"/handrail/threads/{thread}/interrupts/{interrupt}/answer", json={"answer": APPROVE}
            )
            return ANSWERED + interrupt

        return post

    def create(client: Any, target: Target) -> str:
        thread, interrupt = target
        return str(client.runs.create(thread, "bench", command={"resume": {interrupt: APPROVE}})["run_id"])

    return create


def join(client: Any, thread: str, run: str) -> None:
    """Wait for a run to end: ``runs.join``, or for an answer's run, the next interrupt."""
    if not run.startswith(ANSWERED):
        client.runs.join(thread, run)
        return
    answered = run[len(ANSWERED) :]
    deadline = time.perf_counter() + 120
    while time.perf_counter() < deadline:
        interrupts = client.threads.get_state(thread)["interrupts"]
        if interrupts and interrupts[0]["id"] != answered:
            return
        time.sleep(0.002)
    raise SystemExit(f"the answer to {answered} on thread {thread} was never run")


def quiet_answers(client: Any, call: Callable[[Any, Target], str], targets: list[Target]) -> list[float]:
    """Answer each target, timed; join the run it started (untimed) before the next."""
    samples = []
    for target in targets:
        elapsed, run_id = timed(lambda: call(client, target))  # noqa: B023
        samples.append(elapsed)
        join(client, target[0], run_id)
    return samples


def crowd(
    make_client: Callable[[], Any], call: Callable[[Any, Target], str], targets: list[Target], reviewers: int
) -> dict[str, Any]:
    """``reviewers`` threads answering their share of ``targets`` at once."""
    shares = [targets[i::reviewers] for i in range(reviewers)]
    clients = [make_client() for _ in shares]
    barrier = threading.Barrier(len(shares) + 1)
    latencies: list[float] = []
    runs: list[tuple[str, str]] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def reviewer(client: Any, share: list[Target]) -> None:
        mine, started = [], []
        barrier.wait()
        try:
            for target in share:
                elapsed, run_id = timed(lambda: call(client, target))  # noqa: B023
                mine.append(elapsed)
                started.append((target[0], run_id))
        except BaseException as exc:  # counted, and the run reported as failed
            failures.append(exc)
        with lock:
            latencies.extend(mine)
            runs.extend(started)

    workers = [threading.Thread(target=reviewer, args=pair) for pair in zip(clients, shares, strict=True)]
    for worker in workers:
        worker.start()
    barrier.wait()
    start = time.perf_counter()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - start
    if failures:
        raise SystemExit(f"{len(failures)} reviewers failed; first: {failures[0]!r}")
    return {"rate": len(targets) / wall, "latencies": latencies, "runs": runs, "start": start}


def runs_done_rate(client: Any, out: dict[str, Any], window: float) -> float:
    """LangGraph: of the runs the answers started, those that ended, per second.

    Waits until no thread is busy or ``window`` seconds passed, then reads each run's
    own times: the rate is the runs that succeeded over the span from the first run's
    creation to the last one's end, on the server's clock.
    """
    deadline = out["start"] + window
    while time.perf_counter() < deadline and client.threads.search(status="busy", limit=1):
        time.sleep(0.5)
    runs = [client.runs.get(thread, run_id) for thread, run_id in out["runs"]]
    done = [run for run in runs if run["status"] == "success"]
    if not done:
        return 0.0
    first = min(datetime.fromisoformat(run["created_at"]) for run in runs)
    last = max(datetime.fromisoformat(run["updated_at"]) for run in done)
    return len(done) / (last - first).total_seconds()


def join_all(client_factory: Callable[[], Any], runs: list[tuple[str, str]], workers: int = 8) -> None:
    """Wait for the runs the answers started (handrail: so the next batch finds a quiet server)."""
    shares = [runs[i::workers] for i in range(workers)]

    def join_share(share: list[tuple[str, str]]) -> None:
        client = client_factory()
        for thread, run_id in share:
            join(client, thread, run_id)

    threads = [threading.Thread(target=join_share, args=(share,)) for share in shares]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def search_page(client: Any) -> Any:
    return client.threads.search(status="interrupted", limit=50)


def inbox_page(client: Any, messages: int) -> Any:
    return client.http.get("/handrail/inbox", params={"limit": 50, "messages": messages})


def web_inbox_page(server: HandrailServer, count: int) -> tuple[list[float], list[float]]:
    """The reviewers' web page ``GET /inbox`` (50 rows), signed in: its ``Server-Timing``
    (from the request reaching the page's code to the page made) and the whole request."""
    with httpx.Client(base_url=server.url, timeout=60) as http:
        form = http.get("/inbox/signin").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', form)
        assert csrf is not None
        http.post("/inbox/signin", data={"csrf": csrf.group(1), "token": server.token})
        made: list[float] = []
        whole: list[float] = []
        for _ in range(count + 5):  # the first few warm the templates and caches
            started = time.perf_counter()
            reply = http.get("/inbox")
            whole.append(time.perf_counter() - started)
            assert reply.status_code == 200 and reply.text.count('<tr class="row"') == 50, reply.text[:500]
            made.append(float(reply.headers["server-timing"].split("dur=")[1]) / 1000)
    return made[5:], whole[5:]


def pages(action: Callable[[], Any], count: int) -> list[float]:
    action()  # warm
    return [timed(action)[0] for _ in range(count)]


# The run --------------------------------------------------------------------------------------
