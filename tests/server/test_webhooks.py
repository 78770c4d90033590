"""Signed webhooks from the outbox (SPEC rule 17, §5.4), on SQLite and PostgreSQL.

A real receiver on 127.0.0.1 verifies every delivery with the ``standardwebhooks``
package; the service runs with its lifespan (its worker and deliverer) as it does under
``handrail serve``. Judged by what the receiver got and by what ran.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import served_agent
from webhook_receiver import Receiver, Seen, receiving

from conftest import Backend
from handrail.notify.channels import Delivery, Endpoint, Sent
from handrail.notify.deliverer import Deliverer
from handrail.notify.outbox import Outbox, backoff
from handrail.notify.webhooks import WebhookChannel
from handrail.server.app import create_app

PUBLIC = "https://handrail.example"


class Served:
    def __init__(self, backend: Backend, **options: Any) -> None:
        self.backend = backend
        self.agent = served_agent.build(backend.saver())
        self.db = backend.server_db()
        self.app = create_app({"sql": self.agent}, db=self.db, sweep_every=None, public_url=PUBLIC, **options)
        self.service = self.app.state.service
        self.tokens = self.service.tokens

    def token(self, name: str, *roles: str, scopes: tuple[str, ...] = ("run", "review")) -> dict[str, str]:
        _, token = self.tokens.create(name, list(roles), list(scopes))
        return {"Authorization": f"Bearer {token}"}

    def people(self) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        """Headers of an admin, of the application that runs the agent, and of a dba."""
        return self.token("root", scopes=("admin",)), self.token("app"), self.token("dana", "dba")


@pytest.fixture
async def served(backend: Backend) -> AsyncIterator[Served]:
    served_agent.RAN.clear()
    found = Served(backend)
    async with found.app.router.lifespan_context(found.app):
        yield found


def served_client(served: Served) -> httpx.AsyncClient:
    """An HTTP client of the served app (in the process, no network)."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=served.app), base_url="http://handrail.test")


@pytest.fixture
async def client(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    async with served_client(served) as found:
        yield found


async def until(check: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Wait (on the loop) until ``check()`` is truthy; its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        await asyncio.sleep(0.02)
    raise AssertionError(f"not so after {timeout} s: {check}")


def of(receiver: Receiver, kind: str) -> list[Seen]:
    """The deliveries of one event type the receiver accepted."""
    return [s for s in receiver.delivered() if s.payload["type"] == kind]


async def ask(client: httpx.AsyncClient, headers: dict[str, str], query: str) -> tuple[str, dict[str, Any]]:
    thread = (await client.post("/threads", json={}, headers=headers)).json()["thread_id"]
    reply = await client.post(
        f"/threads/{thread}/runs/wait",
        json={"assistant_id": "sql", "input": {"messages": [{"role": "user", "content": query}]}},
        headers=headers,
    )
    assert reply.status_code == 200, reply.text
    (review,) = reply.json()["__interrupt__"]
    return thread, review


async def add_hook(
    client: httpx.AsyncClient, admin: dict[str, str], url: str, *events: str
) -> dict[str, Any]:
    body: dict[str, Any] = {"url": url}
    if events:
        body["events"] = list(events)
    made = await client.post("/handrail/webhooks", json=body, headers=admin)
    assert made.status_code == 201, made.text
    return dict(made.json())


async def test_a_review_and_its_decision_are_delivered_signed_with_the_payload_and_links(
    served: Served, client: httpx.AsyncClient
) -> None:
    admin, app, dba = served.people()
    with receiving() as receiver:
        hook = await add_hook(
            client, admin, receiver.url, "review.requested", "review.decided", "run.finished"
        )
        receiver.secrets.append(hook["secret"])
        thread, review = await ask(client, app, "VACUUM")
        (requested,) = await until(lambda: of(receiver, "review.requested"))
        assert requested.verified
        payload = requested.payload
        assert payload["type"] == "review.requested"
        data = payload["data"]
        assert (data["thread_id"], data["interrupt_id"], data["agent"]) == (thread, review["id"], "sql")
        assert data["tools"] == ["execute_sql"]
        assert data["action_requests"][0]["args"] == {"query": "VACUUM"}
        assert data["reviewers"] == {"execute_sql": ["dba"]}
        assert data["allowed_decisions"] == {"execute_sql": ["approve", "reject"]}
        assert data["links"]["review"] == f"{PUBLIC}/inbox/reviews/{thread}/{review['id']}"
        assert data["links"]["api"].endswith(f"/handrail/threads/{thread}/interrupts/{review['id']}/answer")
        answered = await client.post(
            f"/handrail/threads/{thread}/interrupts/{review['id']}/answer?wait=true",
            json={"answer": {"decisions": [{"type": "approve"}]}},
            headers=dba,
        )
        assert answered.status_code == 200, answered.text
        # the run paused (a run ends there), then the answer's run finished
        got = await until(lambda: len(receiver.delivered()) >= 4 and receiver.delivered())
        kinds = [s.payload["type"] for s in got]
        assert sorted(kinds) == ["review.decided", "review.requested", "run.finished", "run.finished"]
        (decided,) = (s.payload["data"] for s in of(receiver, "review.decided"))
        assert decided["decided_by"] == {"id": "dana", "channel": "http"}
        assert decided["decision"] == {"decisions": [{"type": "approve"}]}
        assert decided["tools"] == ["execute_sql"]  # the decision names what was asked
        assert all(s.verified for s in got) and len({s.id for s in got}) == 4
        ended = [s.payload["data"] for s in of(receiver, "run.finished")]
        assert [e["thread_status"] for e in ended] == ["interrupted", "idle"]
    assert served_agent.RAN == [("execute_sql", {"query": "VACUUM"})]
    await until(lambda: len(served.service.outbox.deliveries(status="delivered")) == 4)
    log = (await client.get("/handrail/deliveries", headers=admin)).json()["items"]
    assert sorted((d["event"], d["status"], d["attempts"], d["response_code"]) for d in log) == [
        ("review.decided", "delivered", 1, 204),
        ("review.requested", "delivered", 1, 204),
        ("run.finished", "delivered", 1, 204),
        ("run.finished", "delivered", 1, 204),
    ]


async def test_failed_attempts_are_retried_with_backoff_and_the_same_webhook_id(backend: Backend) -> None:
    served = Served(backend, deliver_concurrency=0)
    outbox = Outbox(served.db)
    async with served.app.router.lifespan_context(served.app):
        with receiving(fail_first=3) as receiver:
            hook = outbox.add_endpoint(
                "webhook",
                receiver.url,
                ["review.requested"],
                start_after=await served.agent.checkpointer.afeed_end(),
            )
            receiver.secrets.append(hook.secrets[0][0])
            transport = httpx.ASGITransport(app=served.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                await ask(client, served.token("app"), "VACUUM")
            deliverer = Deliverer(
                outbox,
                served.agent.checkpointer,
                public_url=PUBLIC,
                channels={"webhook": WebhookChannel()},
                poll=0.02,
                backoff_base=0.05,
            )
            running = asyncio.create_task(deliverer.run())
            try:
                await until(lambda: outbox.deliveries(status="delivered"))
            finally:
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
    assert [s.answered for s in receiver.seen] == [500, 500, 500, 204]
    assert len({s.id for s in receiver.seen}) == 1 and all(s.verified for s in receiver.seen)
    stamps = [int(s.headers["webhook-timestamp"]) for s in receiver.seen]
    assert stamps == sorted(stamps)  # each attempt signed at its own time
    (logged,) = outbox.deliveries()
    assert (logged.id, logged.status, logged.attempts, logged.response_code) == (
        receiver.seen[0].id,
        "delivered",
        4,
        204,
    )


def test_backoff_doubles_with_jitter_and_is_capped() -> None:
    import random

    rng = random.Random(7)
    for attempt in range(1, 30):
        delay = min(3600.0, 2.0 * 2 ** (attempt - 1))
        found = backoff(attempt, rng=rng)
        assert delay / 2 <= found <= delay


async def test_a_delivery_that_keeps_failing_is_marked_failed_then_retried_by_hand_with_its_id(
    served: Served, client: httpx.AsyncClient
) -> None:
    admin = served.token("root", scopes=("admin",))
    outbox: Outbox = served.service.outbox
    with receiving(fail_first=10**6) as receiver:
        hook = await add_hook(client, admin, receiver.url, "review.requested")
        receiver.secrets.append(hook["secret"])
        deliverer = served.service.deliverer
        deliverer.retry_for, deliverer.backoff_base = 0.3, 0.05
        await ask(client, served.token("app"), "VACUUM")
        (failed,) = await until(lambda: outbox.deliveries(status="failed"))
        assert failed.attempts >= 2 and failed.response_code == 500 and failed.last_error == "HTTP 500"
        listed = (await client.get("/handrail/deliveries?status=failed", headers=admin)).json()["items"]
        assert [d["delivery_id"] for d in listed] == [failed.id]
        receiver.fail_first = 0
        seen = len(receiver.seen)
        retried = await client.post(f"/handrail/deliveries/{failed.id}/retry", headers=admin)
        assert retried.status_code == 200 and retried.json()["status"] == "pending", retried.text
        again = await client.post(f"/handrail/deliveries/{failed.id}/retry", headers=admin)
        assert again.status_code in (200, 409)  # pending or delivered by now: never two at once
        await until(lambda: outbox.delivery(failed.id).status == "delivered")  # type: ignore[union-attr]
    assert {s.id for s in receiver.seen} == {failed.id}
    assert receiver.seen[-1].answered == 204 and len(receiver.seen) == seen + 1
    missing = await client.post("/handrail/deliveries/msg_" + "0" * 32 + "/retry", headers=admin)
    assert missing.status_code == 404


async def test_a_receiver_that_answers_410_gone_gets_no_more_attempts(
    served: Served, client: httpx.AsyncClient
) -> None:
    admin = served.token("root", scopes=("admin",))
    with receiving(gone=True) as receiver:
        hook = await add_hook(client, admin, receiver.url, "review.requested")
        receiver.secrets.append(hook["secret"])
        await ask(client, served.token("app"), "VACUUM")
        (failed,) = await until(lambda: served.service.outbox.deliveries(status="failed"))
    assert failed.attempts == 1 and failed.response_code == 410 and len(receiver.seen) == 1


async def test_a_receiver_that_hangs_delays_neither_answers_nor_other_endpoints(
    served: Served, client: httpx.AsyncClient
) -> None:
    admin, app, dba = served.people()
    with receiving(hang_first=10**6) as stuck, receiving() as healthy:
        await add_hook(client, admin, stuck.url, "review.requested", "review.decided")
        hook = await add_hook(client, admin, healthy.url, "review.requested", "review.decided")
        healthy.secrets.append(hook["secret"])
        for query in ("VACUUM", "ANALYZE", "REINDEX"):
            thread, review = await ask(client, app, query)
            answered = await client.post(
                f"/handrail/threads/{thread}/interrupts/{review['id']}/answer?wait=true",
                json={"answer": {"decisions": [{"type": "approve"}]}},
                headers=dba,
            )
            assert answered.status_code == 200, answered.text
        await until(lambda: len(healthy.delivered()) == 6)
        assert stuck.seen and not stuck.delivered()  # its attempts still hang, unanswered
    assert [q["query"] for _, q in served_agent.RAN] == ["VACUUM", "ANALYZE", "REINDEX"]


async def test_several_deliverers_deliver_each_event_once_per_endpoint(backend: Backend) -> None:
    served = Served(backend, deliver_concurrency=0)
    outbox = Outbox(served.db)
    async with served.app.router.lifespan_context(served.app):
        with receiving() as first, receiving() as second:
            start = await served.agent.checkpointer.afeed_end()
            for receiver in (first, second):
                made = outbox.add_endpoint("webhook", receiver.url, ["review.requested"], start_after=start)
                receiver.secrets.append(made.secrets[0][0])
            transport = httpx.ASGITransport(app=served.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                app = served.token("app")
                for n in range(12):
                    await ask(client, app, f"SELECT {n}")
            # three deliverers, each on a connection of its own, racing for the same rows
            deliverers = [
                Deliverer(
                    Outbox(served.backend.server_db()),
                    served.agent.checkpointer,
                    public_url=PUBLIC,
                    channels={"webhook": WebhookChannel()},
                    poll=0.01,
                    concurrency=4,
                )
                for _ in range(3)
            ]
            running = [asyncio.create_task(d.run()) for d in deliverers]
            try:
                await until(lambda: len(first.delivered()) >= 12 and len(second.delivered()) >= 12)
                await asyncio.sleep(0.3)  # anything sent twice would have come by now
            finally:
                for task in running:
                    task.cancel()
                await asyncio.gather(*running, return_exceptions=True)
    for receiver in (first, second):
        ids = [s.id for s in receiver.seen]
        assert len(ids) == 12 and len(set(ids)) == 12 and all(s.verified for s in receiver.seen)
        threads = {s.payload["data"]["thread_id"] for s in receiver.seen}
        assert len(threads) == 12
    assert not {s.id for s in first.seen} & {s.id for s in second.seen}  # an id per endpoint


async def test_a_rotated_secret_and_the_old_one_both_verify_until_the_old_one_retires(
    served: Served, client: httpx.AsyncClient
) -> None:
    admin = served.token("root", scopes=("admin",))
    with receiving() as old_only, receiving() as new_only:
        hook = await add_hook(client, admin, old_only.url, "review.requested")
        old_only.secrets.append(hook["secret"])
        rotated = await client.post(
            f"/handrail/webhooks/{hook['endpoint_id']}/rotate", json={"keep_old_for": 3600}, headers=admin
        )
        assert rotated.status_code == 200, rotated.text
        new_secret = rotated.json()["secret"]
        assert new_secret != hook["secret"] and rotated.json()["secrets"] == 2
        endpoint = served.service.outbox.endpoint(hook["endpoint_id"])
        assert endpoint is not None and len(endpoint.live_secrets(time.time())) == 2
        await ask(client, served.token("app"), "VACUUM")
        (seen,) = await until(lambda: old_only.delivered())
        assert seen.verified and len(seen.headers["webhook-signature"].split(" ")) == 2
        new_only.secrets.append(new_secret)
        new_only._handle(seen.headers, seen.body)  # the same request, verified with the new secret alone
        assert new_only.seen[-1].verified
        retired = await client.post(
            f"/handrail/webhooks/{hook['endpoint_id']}/rotate", json={"keep_old_for": 0}, headers=admin
        )
        assert retired.json()["secrets"] == 1  # the old ones retire at once


async def test_a_channel_that_raises_is_a_failed_attempt_retried_like_any(backend: Backend) -> None:
    db = backend.server_db()
    outbox = Outbox(db)
    endpoint = outbox.add_endpoint(
        "webhook", "http://127.0.0.1:9/hook", ["review.requested"], start_after=None
    )
    from handrail.notify.events import example_event

    made = outbox.add_test(endpoint.id, example_event(PUBLIC, endpoint.id))

    class Broken:
        kind = "webhook"

        async def send(self, endpoint: Endpoint, delivery: Delivery, receipts: Any) -> Sent:
            raise RuntimeError("a defect")

    deliverer = Deliverer(outbox, None, public_url=PUBLIC, channels={"webhook": Broken()})
    after = await deliverer.attempt(made.id)
    assert after is not None and after.status == "pending" and after.last_error == "RuntimeError: a defect"
    assert after.attempts == 1 and after.due_at > time.time()


async def test_attempts_that_finish_while_a_round_is_recorded_are_all_recorded_once(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A defect found by the benchmark: an attempt that finished while a round was being
    written added its result to the list that round had taken, after it was read: the
    result was lost and the delivery sent again a lease later."""
    import random

    from handrail.notify.events import example_event

    outbox = Outbox(backend.server_db())
    endpoint = outbox.add_endpoint("webhook", "http://127.0.0.1:9/h", ["review.requested"], start_after=None)
    made = [outbox.add_test(endpoint.id, example_event(PUBLIC, endpoint.id)) for _ in range(40)]
    sent: list[str] = []

    class Staggered:
        kind = "webhook"

        async def send(self, endpoint: Endpoint, delivery: Delivery, receipts: Any) -> Sent:
            await asyncio.sleep(random.uniform(0, 0.03))
            sent.append(delivery.id)
            return Sent(True, code=204)

    slow_turn = Outbox.turn

    def turn(self: Outbox, *args: Any, **kwargs: Any) -> Any:
        done = slow_turn(self, *args, **kwargs)
        time.sleep(0.02)  # a round's write takes a while: attempts finish meanwhile
        return done

    monkeypatch.setattr(Outbox, "turn", turn)
    deliverer = Deliverer(outbox, None, public_url=PUBLIC, channels={"webhook": Staggered()}, poll=0.01)
    running = asyncio.create_task(deliverer.run())
    try:
        await until(lambda: len(outbox.deliveries(status="delivered", limit=100)) == 40, timeout=20)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    assert sorted(sent) == sorted(d.id for d in made)  # each sent once
    assert {d.attempts for d in outbox.deliveries(limit=100)} == {1}
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")], caplog.text


async def test_the_log_drops_old_delivered_and_failed_deliveries_never_pending_ones(backend: Backend) -> None:
    from handrail.notify.events import example_event

    outbox = Outbox(backend.server_db())
    endpoint = outbox.add_endpoint("webhook", "http://127.0.0.1:9/h", ["review.requested"], start_after=None)
    made = [outbox.add_test(endpoint.id, example_event(PUBLIC, endpoint.id)) for _ in range(3)]
    claimed = outbox.claim("me", limit=2)
    outbox.finish(
        [(claimed[0], Sent(True, code=204)), (claimed[1], Sent(False, code=500, retry=False))], "me"
    )
    deliverer = Deliverer(outbox, None, public_url=PUBLIC, channels={}, retention=-1.0)  # all of it is old
    await deliverer._prune()
    left = outbox.deliveries()
    assert [d.id for d in left] == [d.id for d in made if d.id not in {c.id for c in claimed}]
    assert left[0].status == "pending"
