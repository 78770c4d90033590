"""Notifications across processes (SPEC rule 17): nothing lost to a SIGKILL, at least once.

``handrail webhooks add`` on the database, ``handrail serve`` and ``handrail deliver``
processes, and a real receiver that verifies with ``standardwebhooks``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import httpx
from webhook_receiver import Receiver, receiving

from conftest import HERE, Backend, handrail_process, make_token, serving


def handrail(backend: Backend, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "handrail", *args, *backend.store_flags()],
        capture_output=True,
        text=True,
        cwd=HERE,
        timeout=60,
    )


def add_hook(backend: Backend, receiver: Receiver, events: str = "review.requested") -> str:
    done = handrail(backend, "webhooks", "add", receiver.url, "--events", events)
    assert done.returncode == 0, done.stderr
    secret = done.stdout.strip().splitlines()[-1]
    assert secret.startswith("whsec_"), done.stdout
    receiver.secrets.append(secret)
    (endpoint_id,) = [w for w in done.stdout.split() if w.startswith("ep_")]
    return endpoint_id


def pause(url: str, token: str, query: str) -> str:
    run = {"assistant_id": "sql", "input": {"messages": [{"role": "user", "content": query}]}}
    paused = httpx.post(f"{url}/runs/wait", json=run, headers={"x-api-key": token}, timeout=60).json()
    return str(paused["__interrupt__"][0]["id"])


def until(what: str, check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def test_a_service_killed_between_the_commit_and_the_delivery_delivers_after_a_restart(
    backend: Backend,
) -> None:
    token = make_token(backend, "alice", "dba")
    with receiving() as receiver:
        add_hook(backend, receiver)
        serve = ["serve", "served_agent:agent", *backend.store_flags(), "--port", "0"]
        # a service that delivers nothing itself: every review is committed, none sent, when it dies
        with handrail_process([*serve, "--deliver-concurrency", "0"], r"on (http://127\.0\.0\.1:\d+)") as (
            process,
            found,
        ):
            interrupt_id = pause(found.group(1), token, "VACUUM")
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        assert receiver.seen == []
        with serving(backend):
            (seen,) = until("the delivery", receiver.delivered)
        assert seen.verified and seen.payload["data"]["interrupt_id"] == interrupt_id
        log = handrail(backend, "webhooks", "deliveries")
        assert log.returncode == 0 and "delivered" in log.stdout and seen.id in log.stdout, log.stdout


def test_a_deliverer_killed_mid_attempt_is_taken_over_with_the_same_webhook_id(backend: Backend) -> None:
    token = make_token(backend, "alice", "dba")
    with receiving(hang_first=1) as receiver:
        add_hook(backend, receiver)
        deliver = ["deliver", *backend.store_flags(), "--poll", "0.05", "--lease", "2"]
        with serving(backend, "--deliver-concurrency", "0") as url:
            interrupt_id = pause(url, token, "VACUUM")
            with handrail_process(deliver, "handrail deliver on") as (doomed, _):
                until("the first attempt", lambda: receiver.seen)
                os.kill(doomed.pid, signal.SIGKILL)  # in the middle of it: the receiver holds it
                doomed.wait()
            with handrail_process(deliver, "handrail deliver on"):
                (seen,) = until("the second attempt", receiver.delivered)
    first, again = receiver.seen
    assert first.id == again.id == seen.id and again.verified  # the same message, at least once
    assert seen.payload["data"]["interrupt_id"] == interrupt_id


def test_the_webhooks_commands_list_test_and_remove(backend: Backend) -> None:
    with receiving() as receiver:
        endpoint_id = add_hook(backend, receiver, "review.requested,review.decided")
        listed = handrail(backend, "webhooks", "list")
        assert listed.returncode == 0 and endpoint_id in listed.stdout, listed.stdout
        tested = handrail(backend, "webhooks", "test", endpoint_id)
        assert tested.returncode == 0 and "Delivered" in tested.stdout, tested.stderr
        (seen,) = receiver.delivered()
        assert seen.verified and seen.payload["type"] == "handrail.test"
        receiver.gone = True
        failed = handrail(backend, "webhooks", "test", endpoint_id)
        assert failed.returncode == 1 and "HTTP 410" in failed.stderr, failed.stderr
        assert "Traceback" not in failed.stderr
    rotated = handrail(backend, "webhooks", "rotate", endpoint_id, "--keep-old-for", "1h")
    assert rotated.returncode == 0 and rotated.stdout.strip().splitlines()[-1].startswith("whsec_")
    removed = handrail(backend, "webhooks", "remove", endpoint_id)
    assert removed.returncode == 0, removed.stderr
    for args in (
        ("webhooks", "remove", endpoint_id),
        ("webhooks", "add", "ftp://x", "--events", "review.requested"),
        ("webhooks", "add", "https://x.example", "--events", "review.nothing"),
        ("webhooks", "add", "https://x.example", "--secret", "not-a-secret"),
        ("webhooks", "retry", "msg_nothing"),
        ("webhooks",),
    ):
        refused = handrail(backend, *args)
        assert refused.returncode != 0 and "Traceback" not in refused.stderr, (args, refused.stderr)
        assert "error" in refused.stderr, (args, refused.stderr)
