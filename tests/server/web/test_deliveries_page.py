"""The delivery log on the web inbox (SPEC rule 17), in-process, no browser: an admin sees
the endpoints and each delivery's state, attempts, status code and error, and sends a
failed one again through a CSRF-protected form; a reviewer without ``admin`` is refused
the page and the form, and nothing changes."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import httpx
import served_agent
from test_grant_pages import csrf

from handrail.checkpoint.sqlite import SqliteSaver
from handrail.notify.channels import Sent
from handrail.notify.events import example_event
from handrail.notify.outbox import Outbox
from handrail.server import ServerDB, create_app


async def signed_in(app: object, token: str) -> httpx.AsyncClient:
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://handrail.test")  # type: ignore[arg-type]
    page = await client.get("/inbox/signin")
    reply = await client.post("/inbox/signin", data={"csrf": csrf(page.text), "token": token})
    assert reply.status_code == 303, reply.text
    return client


async def test_an_admin_reads_the_log_and_sends_a_failed_delivery_again(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    app = create_app(
        {"sql": served_agent.build(SqliteSaver(path))},
        db=ServerDB.open(db_path=path),
        sweep_every=None,
        deliver_concurrency=0,
    )
    service = app.state.service
    outbox: Outbox = service.outbox
    endpoint = outbox.add_endpoint(
        "webhook", "http://127.0.0.1:9/<hook>", ["review.requested"], start_after=None
    )
    made = outbox.add_test(endpoint.id, example_event("https://h.example", endpoint.id))
    owner = "test"
    (claimed,) = outbox.claim(owner, only=made.id)
    down = Sent(False, code=503, error="HTTP 503: <b>down</b>", retry=False)
    assert outbox.finish([(claimed, down)], owner) == ["failed"]
    admin = service.tokens.create("root", [], ["admin", "review"])[1]
    reviewer = service.tokens.create("dana", ["dba"], ["review"])[1]
    async with app.router.lifespan_context(app):
        client = await signed_in(app, admin)
        page = await client.get("/inbox/deliveries?status=failed")
        assert page.status_code == 200, page.text
        assert made.id in page.text and "HTTP 503" in page.text and "failed" in page.text
        assert "<b>down</b>" not in page.text and "&lt;hook&gt;" in page.text  # shown, never run as markup
        assert 'href="/inbox/deliveries"' in (await client.get("/inbox")).text  # the admin's menu has it
        form = re.search(r'action="(/inbox/deliveries/[^"]+/retry)"', page.text)
        assert form is not None
        refused = await client.post(form.group(1), data={"csrf": "forged"})
        assert refused.status_code == 403 and outbox.delivery(made.id).status == "failed"  # type: ignore[union-attr]
        sent = await client.post(form.group(1), data={"csrf": csrf(page.text)})
        assert sent.status_code == 303 and "retried=" + made.id in sent.headers["location"]
        after = await client.get(sent.headers["location"])
        assert "Sending again" in after.text
        again = outbox.delivery(made.id)
        assert again is not None and again.status == "pending" and again.due_at <= time.time() + 1

        other = await signed_in(app, reviewer)
        assert (await other.get("/inbox/deliveries")).status_code == 403
        assert 'href="/inbox/deliveries"' not in (await other.get("/inbox")).text
        page_for_reviewer = await other.get("/inbox")
        refused = await other.post(form.group(1), data={"csrf": csrf(page_for_reviewer.text)})
        assert refused.status_code == 403
        for client_ in (client, other):
            await client_.aclose()
    await asyncio.sleep(0)
