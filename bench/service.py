"""The review service's costs, side by side with the library's own cycle on the same store.

With the same client code (the real ``langgraph-sdk``) and the same scripted agent
(``_service_agent.py``: each turn one reviewed SQL call), against a real ``handrail
serve`` process on SQLite and on PostgreSQL:

* **API cycle** - ``runs.wait(command={"resume": {id: approve}})`` until the next
  interrupt; **library cycle** - ``agent.invoke(Command(resume=...))`` in this process on
  the same kind of store: the API's cost is the difference;
* **answer round trip** - ``POST /handrail/threads/T/interrupts/I/answer`` (recorded with
  the caller's identity; the run continues in the service afterwards);
* **answers/s, 50 reviewers** - 50 client threads answering paused threads at once
  (PostgreSQL);
* **inbox page** - ``GET /handrail/inbox?limit=50`` over N paused threads (with and
  without the last messages of each item);
* **web inbox page** - the reviewers' page ``GET /inbox`` (50 rows) over 100,000 paused
  threads: its ``Server-Timing`` and the whole request (``--web-inbox-threads``).

LangGraph's own server (``langgraph dev``) is not measured here yet.

Run::

    .venv/bin/python bench/service.py                 # N = 10,000 paused threads
    .venv/bin/python bench/service.py --inbox-threads 100000 --cycles 500
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _service_agent  # noqa: E402
import httpx  # noqa: E402

from handrail import Command  # noqa: E402

DSN = os.environ.get("HANDRAIL_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
APPROVE = {"decisions": [{"type": "approve"}]}


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


class Store:
    def __init__(self, kind: str, folder: Path) -> None:
        self.kind = kind
        self.path = folder / f"{kind}.db"
        self.schema = f"bench_service_{uuid.uuid4().hex[:8]}"

    def flags(self) -> list[str]:
        if self.kind == "postgres":
            return ["--postgres", DSN, "--schema", self.schema]
        return ["--db", str(self.path)]

    def saver(self) -> Any:
        if self.kind == "postgres":
            from handrail.checkpoint.postgres import PostgresSaver

            saver = PostgresSaver.from_conn_string(DSN, schema=self.schema, pool_size=8)
            saver.setup()
            return saver
        from handrail.checkpoint.sqlite import SqliteSaver

        return SqliteSaver(self.path)

    def drop(self) -> None:
        if self.kind == "postgres":
            import psycopg

            with psycopg.connect(DSN, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


@contextmanager
def serve(store: Store) -> Iterator[tuple[str, str]]:
    command = [sys.executable, "-m", "handrail"]
    token = (
        subprocess.run(
            [*command, "tokens", "create", "--name", "bench", "--role", "dba", *store.flags()],
            cwd=HERE,
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    process = subprocess.Popen(
        [*command, "serve", "_service_agent:agent", *store.flags(), "--port", "0"],
        cwd=HERE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    for line in process.stdout:
        found = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
        if found:
            break
    else:
        raise SystemExit("handrail serve did not start")
    threading.Thread(target=process.stdout.read, daemon=True).start()
    try:
        yield found.group(1), token
    finally:
        process.terminate()
        process.wait(30)


def timed(action: Callable[[], Any], times: int) -> list[float]:
    samples = []
    for _ in range(times):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return samples


def api_cycle(url: str, token: str, cycles: int) -> list[float]:
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=url, api_key=token)
    thread = client.threads.create()["thread_id"]
    state = client.runs.wait(thread, "bench", input={"messages": [{"role": "user", "content": "go"}]})
    box = {"id": state["__interrupt__"][0]["id"]}  # type: ignore[index,call-overload]

    def cycle() -> None:
        result = client.runs.wait(thread, "bench", command={"resume": {box["id"]: APPROVE}})
        box["id"] = result["__interrupt__"][0]["id"]  # type: ignore[index,call-overload]

    timed(cycle, 10)  # warm up
    return timed(cycle, cycles)


def library_cycle(store: Store, cycles: int) -> list[float]:
    agent = _service_agent.build(store.saver())
    config = {"configurable": {"thread_id": f"lib-{uuid.uuid4().hex}"}}
    box = {"id": agent.invoke({"messages": ["go"]}, config)["__interrupt__"][0].id}

    def cycle() -> None:
        result = agent.invoke(Command(resume={box["id"]: APPROVE}), config)
        box["id"] = result["__interrupt__"][0].id

    timed(cycle, 10)
    return timed(cycle, cycles)


def pause_threads(store: Store, count: int, prefix: str) -> list[tuple[str, str]]:
    agent = _service_agent.build(store.saver())
    out = []
    for i in range(count):
        thread = f"{prefix}-{i}"
        result = agent.invoke({"messages": ["go"]}, {"configurable": {"thread_id": thread}})
        out.append((thread, result["__interrupt__"][0].id))
    return out


def answer_round_trip(url: str, token: str, paused: list[tuple[str, str]]) -> list[float]:
    samples = []
    with httpx.Client(base_url=url, headers={"x-api-key": token}) as http:
        for thread, interrupt in paused:
            start = time.perf_counter()
            reply = http.post(
                f"/handrail/threads/{thread}/interrupts/{interrupt}/answer", json={"answer": APPROVE}
            )
            samples.append(time.perf_counter() - start)
            assert reply.status_code == 202, reply.text
    return samples


def answers_per_second(url: str, token: str, paused: list[tuple[str, str]], reviewers: int) -> float:
    shares = [paused[i::reviewers] for i in range(reviewers)]
    barrier = threading.Barrier(reviewers + 1)

    def reviewer(share: list[tuple[str, str]]) -> None:
        with httpx.Client(base_url=url, headers={"x-api-key": token}, timeout=120) as http:
            barrier.wait()
            for thread, interrupt in share:
                http.post(
                    f"/handrail/threads/{thread}/interrupts/{interrupt}/answer", json={"answer": APPROVE}
                )

    workers = [threading.Thread(target=reviewer, args=(share,)) for share in shares]
    for worker in workers:
        worker.start()
    barrier.wait()
    start = time.perf_counter()
    for worker in workers:
        worker.join()
    return len(paused) / (time.perf_counter() - start)


def inbox_page(url: str, token: str, messages: int, times: int) -> list[float]:
    with httpx.Client(base_url=url, headers={"x-api-key": token}) as http:
        return timed(lambda: http.get("/handrail/inbox", params={"limit": 50, "messages": messages}), times)


def web_inbox_page(threads: int, times: int = 50) -> list[tuple[str, str, str]]:
    """The web inbox's page of 50 rows (``GET /inbox``, signed in) over ``threads`` paused threads.

    Self-contained: for each store, one thread paused by the agent for real is copied
    ``threads`` times with new ids (its events and record, through the store's own
    ``append``), then a real ``handrail serve`` is timed: the page's ``Server-Timing``
    (from the request reaching the page's code to the page made) and the whole request.
    """
    import dataclasses
    from concurrent.futures import ThreadPoolExecutor

    def fill(store: Store) -> None:
        agent = _service_agent.build(store.saver())
        saver = agent.checkpointer
        agent.invoke({"messages": ["go"]}, {"configurable": {"thread_id": "web-template"}})
        template = saver.read("web-template")
        saver.delete_thread("web-template")
        now = time.time()

        def copy(i: int) -> None:
            at = now - (threads - i) * 0.01
            events = [dataclasses.replace(e, created_at=at) for e in template.events]
            pending = tuple(dataclasses.replace(p, created_at=at) for p in template.record.pending)
            record = dataclasses.replace(
                template.record,
                thread_id=f"web-{i:06d}",
                epoch=uuid.uuid4().hex,
                created_at=at,
                updated_at=at,
                pending=pending,
            )
            saver.append(record.thread_id, events, expected_seq=0, record=record, durable=False)

        with ThreadPoolExecutor(4 if store.kind == "postgres" else 1) as pool:
            list(pool.map(copy, range(threads), chunksize=256))
        saver.close()

    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory() as folder:
        for kind in ("sqlite", "postgres"):
            store = Store(kind, Path(folder))
            try:
                started = time.perf_counter()
                fill(store)
                print(
                    f"  {kind}: {threads:,} paused threads in {time.perf_counter() - started:.0f} s",
                    flush=True,
                )
                with serve(store) as (url, token), httpx.Client(base_url=url, timeout=60) as http:
                    form = http.get("/inbox/signin").text
                    csrf = re.search(r'name="csrf" value="([^"]+)"', form)
                    assert csrf is not None
                    http.post("/inbox/signin", data={"csrf": csrf.group(1), "token": token})
                    made: list[float] = []
                    whole: list[float] = []
                    for _ in range(times + 5):  # the first few warm the templates and caches
                        start = time.perf_counter()
                        reply = http.get("/inbox")
                        whole.append(time.perf_counter() - start)
                        assert reply.status_code == 200 and reply.text.count('<tr class="row"') == 50, (
                            reply.text[:500]
                        )
                        made.append(float(reply.headers["server-timing"].split("dur=")[1]) / 1000)
                made, whole = made[5:], whole[5:]
                label = f"web inbox page, 50 rows over {threads:,} paused threads"
                rows.append((kind, label + " (server-side)", f"{pct(made, 0.5):.2f} / {pct(made, 0.99):.2f}"))
                rows.append(
                    (kind, label + " (whole request)", f"{pct(whole, 0.5):.2f} / {pct(whole, 0.99):.2f}")
                )
            finally:
                store.drop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--answers", type=int, default=200)
    parser.add_argument("--inbox-threads", type=int, default=10_000)
    parser.add_argument("--reviewers", type=int, default=50)
    parser.add_argument("--web-inbox-threads", type=int, default=100_000, help="0: skip the web inbox rows")
    args = parser.parse_args()
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory() as folder:
        for kind in ("sqlite", "postgres"):
            store = Store(kind, Path(folder))
            try:
                with serve(store) as (url, token):
                    api = api_cycle(url, token, args.cycles)
                    lib = library_cycle(store, args.cycles)
                    rows.append(
                        (
                            kind,
                            "API cycle (runs.wait, resume -> next interrupt)",
                            f"{pct(api, 0.5):.2f} / {pct(api, 0.99):.2f}",
                        )
                    )
                    rows.append(
                        (kind, "library cycle, same store", f"{pct(lib, 0.5):.2f} / {pct(lib, 0.99):.2f}")
                    )
                    rows.append((kind, "API minus library, p50", f"{pct(api, 0.5) - pct(lib, 0.5):.2f}"))
                    trip = answer_round_trip(url, token, pause_threads(store, args.answers, "answer"))
                    rows.append(
                        (
                            kind,
                            "answer round trip (POST, recorded)",
                            f"{pct(trip, 0.5):.2f} / {pct(trip, 0.99):.2f}",
                        )
                    )
                    if kind == "postgres":
                        paused = pause_threads(store, args.reviewers * 10, "crowd")
                        rate = answers_per_second(url, token, paused, args.reviewers)
                        rows.append((kind, f"answers/s, {args.reviewers} reviewers at once", f"{rate:.0f}"))
                    pause_threads(store, args.inbox_threads, "inbox")
                    bare = inbox_page(url, token, 0, 50)
                    full = inbox_page(url, token, 3, 50)
                    label = f"inbox page of 50 over {args.inbox_threads:,} paused threads"
                    rows.append((kind, label, f"{pct(bare, 0.5):.2f} / {pct(bare, 0.99):.2f}"))
                    rows.append(
                        (
                            kind,
                            label + ", with last 3 messages",
                            f"{pct(full, 0.5):.2f} / {pct(full, 0.99):.2f}",
                        )
                    )
            finally:
                store.drop()
    if args.web_inbox_threads:
        rows += web_inbox_page(args.web_inbox_threads)
    width = max(len(r[1]) for r in rows)
    print(f"{'store':9} {'measure':{width}}  p50 / p99 ms (or as named)")
    for kind, label, value in rows:
        print(f"{kind:9} {label:{width}}  {value}")
    print(f"(one run; python {sys.version.split()[0]}; LangGraph's server not measured yet)")


if __name__ == "__main__":
    main()
