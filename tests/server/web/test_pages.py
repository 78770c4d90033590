"""The web inbox's pages over HTTP, in-process (no browser): sessions, CSRF, headers, forms, rules.

The browser tests (``test_browser.py``) show the pages working; these pin what the server
does with each request, including the requests no page of ours would send.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time
from collections.abc import AsyncIterator
from html import unescape
from pathlib import Path
from typing import Any

import httpx
import pytest
import web_agent

from handrail import HumanInTheLoopMiddleware, ScriptedModel, create_agent
from handrail.checkpoint.sqlite import SqliteSaver
from handrail.server import ServerDB, create_app
from handrail.server.pages import _bulk as bulk_page
from handrail.server.pages import _inbox as inbox_page

APPROVE = {"answer": {"decisions": [{"type": "approve"}]}}


def per_call_agent(saver: Any) -> Any:
    def ping(host: str, count: int = 1) -> str:
        """Ping a host."""
        return f"pinged {host} {count} times"

    call = {"content": "", "tool_calls": [{"name": "ping", "args": {"host": "db1", "count": 3}}]}
    return create_agent(
        ScriptedModel([call, {"content": "pinged"}] * 50),
        tools=[ping],
        middleware=[HumanInTheLoopMiddleware({"ping": True}, interrupt_mode="per_call")],
        checkpointer=saver,
        name="pinger",
    )


class Site:
    """The app of one test, with helpers to sign in, start runs and read what was recorded."""

    def __init__(self, tmp_path: Path, base: str = "http://handrail.test") -> None:
        saver = SqliteSaver(tmp_path / "h.db")
        self.agent = web_agent.build(saver)
        self.db = ServerDB.open(db_path=tmp_path / "h.db")
        self.app = create_app({"web": self.agent, "pinger": per_call_agent(saver)}, db=self.db)
        self.service = self.app.state.service
        self.base = base
        self.clients: list[httpx.AsyncClient] = []
        self.saver = saver
        self.path = tmp_path / "h.db"

    def client(self, base: str | None = None) -> httpx.AsyncClient:
        found = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url=base or self.base)
        self.clients.append(found)
        return found

    def token(self, name: str, *roles: str) -> str:
        return str(self.service.tokens.create(name, list(roles), ["run", "review"])[1])

    async def signed_in(self, token: str, base: str | None = None) -> httpx.AsyncClient:
        client = self.client(base)
        page = await client.get("/inbox/signin")
        reply = await client.post("/inbox/signin", data={"csrf": csrf(page.text), "token": token})
        assert reply.status_code == 303, reply.text
        return client

    async def run(self, token: str, text: str, assistant: str = "web", **metadata: Any) -> tuple[str, str]:
        api = self.client()
        headers = {"x-api-key": token}
        made = {"metadata": {**metadata, "graph_id": assistant}}
        thread = (await api.post("/threads", json=made, headers=headers)).json()["thread_id"]
        body = {"assistant_id": assistant, "input": {"messages": [{"role": "user", "content": text}]}}
        values = (await api.post(f"/threads/{thread}/runs/wait", json=body, headers=headers)).json()
        return thread, values["__interrupt__"][0]["id"]

    async def settle(self) -> None:
        """Until no run of the API or the worker is going, and the store holds no run row:
        none queued, and none claimed (the worker's claim commits before it counts the run)."""
        deadline = time.monotonic() + 10
        while self.service.runs.active or self.service.worker._running or self.queued():
            assert time.monotonic() < deadline, "a run did not end"
            await asyncio.sleep(0.02)

    def queued(self) -> bool:
        with sqlite3.connect(self.path) as conn:
            return bool(conn.execute("SELECT 1 FROM handrail_runs").fetchall())

    async def answers(self, thread: str) -> list[Any]:
        trail = await self.agent.aget_audit_trail({"configurable": {"thread_id": thread}})
        return [e for e in trail if e.event == "answered"]


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    found = Site(tmp_path)
    async with found.app.router.lifespan_context(found.app):  # the worker and the live inbox's reader
        yield found
        await found.settle()
        for client in found.clients:
            await client.aclose()
    found.db.close()
    found.saver.close()


def csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html[:2000]
    return found.group(1)


def review(thread: str, interrupt: str) -> str:
    return f"/inbox/reviews/{thread}/{interrupt}"


def text_of(html: str) -> str:
    return unescape(re.sub(r"<[^>]+>", "", html))


# Sessions and sign-in --------------------------------------------------------------------------
async def test_pages_send_a_visitor_without_a_session_to_sign_in(site: Site) -> None:
    client = site.client()
    reply = await client.get("/inbox?tool=refund")
    assert (
        reply.status_code == 303
        and reply.headers["location"] == "/inbox/signin?next=%2Finbox%3Ftool%3Drefund"
    )
    posted = await client.post("/inbox/bulk", data={"decision": "approve"})
    assert posted.status_code == 401 and "text/html" in posted.headers["content-type"]
    assert "Your session ended" in posted.text
    assert (await client.get("/")).headers["location"] == "/inbox"


async def test_sign_in_sets_a_strict_http_only_cookie_that_is_secure_over_tls(site: Site) -> None:
    token = site.token("alice", "support")
    for base, secure in (("http://handrail.test", False), ("https://handrail.test", True)):
        client = site.client(base)
        page = await client.get("/inbox/signin")
        reply = await client.post("/inbox/signin", data={"csrf": csrf(page.text), "token": token})
        cookie = next(
            v for k, v in reply.headers.multi_items() if k == "set-cookie" and "handrail_session=" in v
        )
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie
        assert ("Secure" in cookie) is secure
        assert (await client.get("/inbox")).status_code == 200


async def test_sign_in_refuses_a_bad_token_a_missing_csrf_token_and_another_origin(site: Site) -> None:
    token = site.token("alice", "support")
    client = site.client()
    form = await client.get("/inbox/signin")
    wrong = await client.post("/inbox/signin", data={"csrf": csrf(form.text), "token": token[:-2] + "xx"})
    assert wrong.status_code == 401 and "unknown, malformed or revoked" in wrong.text
    assert token[:-2] not in wrong.text  # what was typed is not echoed
    assert (await client.post("/inbox/signin", data={"token": token})).status_code == 403
    other = {"origin": "https://evil.example"}
    assert (
        await client.post("/inbox/signin", data={"csrf": csrf(form.text), "token": token}, headers=other)
    ).status_code == 403
    cross = {"sec-fetch-site": "cross-site"}
    assert (
        await client.post("/inbox/signin", data={"csrf": csrf(form.text), "token": token}, headers=cross)
    ).status_code == 403
    null = {"origin": "null"}
    assert (
        await client.post("/inbox/signin", data={"csrf": csrf(form.text), "token": token}, headers=null)
    ).status_code == 403
    assert "handrail_session" not in client.cookies
    # Behind a proxy that ends TLS the browser's origin is https while the service sees http.
    proxied = {"origin": "https://handrail.test", "sec-fetch-site": "same-origin"}
    reply = await client.post(
        "/inbox/signin", data={"csrf": csrf(form.text), "token": token}, headers=proxied
    )
    assert reply.status_code == 303 and "handrail_session" in client.cookies


@pytest.mark.parametrize(
    ("given", "goes"),
    [
        ("/inbox/threads/t1", "/inbox/threads/t1"),
        ("https://evil.example/", "/inbox"),
        ("//evil.example", "/inbox"),
        ("/docs", "/inbox"),
    ],
)
async def test_after_signing_in_the_browser_goes_only_to_an_inbox_page(
    site: Site, given: str, goes: str
) -> None:
    client = site.client()
    form = await client.get("/inbox/signin")
    reply = await client.post(
        "/inbox/signin", data={"csrf": csrf(form.text), "token": site.token("a"), "next": given}
    )
    assert reply.headers["location"] == goes


async def test_a_session_reads_the_api_but_never_writes_through_it(site: Site) -> None:
    token = site.token("alice", "support")
    thread, interrupt = await site.run(token, "refund 10")
    client = await site.signed_in(token)
    assert (await client.get("/handrail/inbox")).status_code == 200  # (the live inbox: test_browser.py)
    refused = await client.post(f"/handrail/threads/{thread}/interrupts/{interrupt}/answer", json=APPROVE)
    assert refused.status_code == 401
    assert await site.answers(thread) == []


async def test_signing_out_or_revoking_the_token_ends_the_session(site: Site) -> None:
    token = site.token("alice", "support")
    client = await site.signed_in(token)
    page = await client.get("/inbox")
    cookie = client.cookies["handrail_session"]
    out = await client.post("/inbox/signout", data={"csrf": csrf(page.text)})
    assert out.status_code == 303 and out.headers["location"] == "/inbox/signin?signed_out=1"
    again = site.client()
    again.cookies.set("handrail_session", cookie)
    assert (await again.get("/inbox")).status_code == 303
    second = await site.signed_in(token)
    site.service.tokens.revoke("alice")
    assert (await second.get("/inbox")).status_code == 303
    assert (await second.get("/handrail/inbox")).status_code == 401


async def test_a_one_time_link_shows_who_it_signs_in_and_works_once(site: Site) -> None:
    site.token("alice", "support")
    credential = site.service.tokens.live("alice")
    link = site.service.sessions.link(credential)
    client = site.client()
    path = f"/inbox/link/{link.secret}"
    for _ in range(2):  # looking at it (a mail scanner, a chat preview) does not use it up
        shown = await client.get(path)
        assert shown.status_code == 200 and "Sign in as alice" in shown.text
    assert (await client.post(path, data={})).status_code == 403
    used = await client.post(path, data={"csrf": csrf(shown.text)})
    assert used.status_code == 303 and "handrail_session" in client.cookies
    assert (await client.post(path, data={"csrf": csrf(shown.text)})).status_code == 403  # a stale form
    assert (await site.client().get(path)).status_code == 404
    short = site.service.sessions.link(credential, seconds=0.05)
    await asyncio.sleep(0.1)
    assert (await site.client().get(f"/inbox/link/{short.secret}")).status_code == 404
    revoked = site.service.sessions.link(credential)
    site.service.tokens.revoke("alice")
    assert (await site.client().get(f"/inbox/link/{revoked.secret}")).status_code == 404
    assert (await site.client().get("/inbox/link/not-a-secret")).status_code == 404


# Headers and untrusted content -----------------------------------------------------------------
async def test_every_page_sends_a_csp_without_inline_scripts_and_has_none(site: Site) -> None:
    token = site.token("alice", "support", "dba")
    thread, interrupt = await site.run(token, "write /tmp/a b")
    client = await site.signed_in(token)
    page = await client.get(review(thread, interrupt))
    answered = await client.post(review(thread, interrupt), data={"csrf": csrf(page.text), "d:0": "approve"})
    await site.settle()
    paths = [
        "/inbox",
        review(thread, interrupt),
        review(thread, interrupt) + "/decided",
        f"/inbox/threads/{thread}",
        "/inbox/nowhere",
        f"/inbox/threads/{thread}x",
    ]
    replies = [answered, *[await client.get(p) for p in paths], await site.client().get("/inbox/signin")]
    for reply in replies:
        csp = reply.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
        assert (
            reply.headers["x-content-type-options"] == "nosniff"
            and reply.headers["x-frame-options"] == "DENY"
        )
        if reply.status_code != 303:
            body = reply.text
            assert "text/html" in reply.headers["content-type"]
            scripts = re.findall(r"<script\b[^>]*>", body)
            assert all('src="/inbox/static/' in s or 'type="application/json"' in s for s in scripts), scripts
            assert not re.search(r"\sstyle=|\son[a-z]+=", body)


async def test_arguments_and_messages_are_shown_as_text(site: Site) -> None:
    token = site.token("alice", "support")
    hostile = "<script>alert(1)</script> <img src=x onerror=alert(2)> "
    hostile += '<a href="javascript:alert(3)">x</a> \x1b[31m \u202eevil'
    thread, interrupt = await site.run(token, f"write /tmp/x {hostile}")
    client = await site.signed_in(token)
    for path in ("/inbox", review(thread, interrupt), f"/inbox/threads/{thread}"):
        body = (await client.get(path)).text
        assert "<script>alert" not in body and "<img src=x" not in body and '<a href="javascript:' not in body
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
        assert '<span class="ctl">\\u202e</span>' in body  # the override is shown, not obeyed
        outside_fields = re.sub(r"<textarea[^>]*>.*?</textarea>|value=\"[^\"]*\"", "", body, flags=re.S)
        assert "\u202e" not in outside_fields and "\x1b" not in outside_fields
    data = re.search(
        r'<script type="application/json" id="review-data">(.*?)</script>',
        (await client.get(review(thread, interrupt))).text,
        re.S,
    )
    assert data and "<" not in data.group(1)  # the page's data cannot close its script element


# Answers through the review page ----------------------------------------------------------------
async def test_edited_values_keep_the_types_of_the_schema(site: Site) -> None:
    token = site.token("alice", "support")
    thread, interrupt = await site.run(token, "refund 4900")
    client = await site.signed_in(token)
    page = await client.get(review(thread, interrupt))
    form = {
        "csrf": csrf(page.text),
        "d:0": "edit",
        'v:0:["payment_id"]': "pay_8812",
        'v:0:["amount_cents"]': "2500",
        'v:0:["reason"]': '"fraud"',
        's:0:["notify"]': "set",
        'v:0:["notify"]': "true",
        's:0:["note"]': "null",
        'v:0:["note"]': "ignored: null was chosen",
    }
    reply = await client.post(review(thread, interrupt), data=form)
    assert reply.status_code == 303 and reply.headers["location"] == review(thread, interrupt) + "/decided"
    (entry,) = await site.answers(thread)
    args = entry.value["decisions"][0]["edited_action"]["args"]
    assert args == {
        "payment_id": "pay_8812",
        "amount_cents": 2500,
        "reason": "fraud",
        "notify": True,
        "note": None,
    }
    assert type(args["amount_cents"]) is int
    assert entry.channel == "web" and entry.reviewer == {"id": "alice", "roles": ["support"]}
    await site.settle()
    decided = await client.get(reply.headers["location"])
    assert "Recorded: edited by alice at" in text_of(decided.text) and "through web" in decided.text
    outcome = await client.get(review(thread, interrupt) + "/outcome")
    assert 'data-settled="true"' in outcome.text and "refunded 2500 cents (int)" in outcome.text


async def test_what_cannot_be_read_is_refused_and_kept_on_the_page(site: Site) -> None:
    token = site.token("alice", "support")
    thread, interrupt = await site.run(token, "refund 4900")
    client = await site.signed_in(token)
    page = await client.get(review(thread, interrupt))
    form = {
        "csrf": csrf(page.text),
        "d:0": "edit",
        'v:0:["payment_id"]': "pay_8812",
        'v:0:["amount_cents"]': "25x0",
        'v:0:["reason"]': '"nope"',
    }
    reply = await client.post(review(thread, interrupt), data=form)
    assert reply.status_code == 422
    shown = text_of(reply.text)
    assert (
        "amount_cents: '25x0' is not a number" in shown and "reason: choose one of the listed values" in shown
    )
    assert 'value="25x0"' in reply.text and 'value="edit" checked' in reply.text
    assert await site.answers(thread) == []


async def test_the_librarys_refusal_is_shown_with_its_own_message(site: Site) -> None:
    token = site.token("alice", "support")
    thread, interrupt = await site.run(token, "archive /srv/a.log")
    client = await site.signed_in(token)
    page = await client.get(review(thread, interrupt))
    form = {"csrf": csrf(page.text), "d:0": "edit", 'v:0:["path"]': "/etc/shadow"}
    reply = await client.post(review(thread, interrupt), data=form)
    assert reply.status_code == 422
    assert (
        "only files under /srv/ may be archived" in text_of(reply.text)
        and 'value="/etc/shadow"' in reply.text
    )
    thread2, interrupt2 = await site.run(token, "refund 5")
    page = await client.get(review(thread2, interrupt2))
    empty = await client.post(
        review(thread2, interrupt2), data={"csrf": csrf(page.text), "d:0": "respond", "m:0": " "}
    )
    assert empty.status_code == 422 and "needs a 'message'" in text_of(empty.text)
    none = await client.post(review(thread2, interrupt2), data={"csrf": csrf(page.text)})
    assert none.status_code == 422 and "Choose a decision for refund" not in none.text
    assert "Choose a decision for call 1 (refund)." in text_of(none.text)
    assert await site.answers(thread) == [] and await site.answers(thread2) == []


async def test_the_answer_form_needs_its_csrf_token(site: Site) -> None:
    token = site.token("alice", "support")
    thread, interrupt = await site.run(token, "refund 5")
    client = await site.signed_in(token)
    for data in ({"d:0": "approve"}, {"d:0": "approve", "csrf": "0" * 64}):
        reply = await client.post(review(thread, interrupt), data=data)
        assert reply.status_code == 403 and "This form expired or came from another site" in reply.text
    assert await site.answers(thread) == []


async def test_a_review_decided_elsewhere_says_who_and_when_never_an_error_page(site: Site) -> None:
    alice, dana = site.token("alice", "support"), site.token("dana", "support")
    thread, interrupt = await site.run(alice, "refund 5")
    client = await site.signed_in(dana)
    page = await client.get(review(thread, interrupt))
    api = site.client()
    path = f"/handrail/threads/{thread}/interrupts/{interrupt}/answer?wait=true"
    assert (await api.post(path, json=APPROVE, headers={"x-api-key": alice})).status_code == 200
    late = await client.post(review(thread, interrupt), data={"csrf": csrf(page.text), "d:0": "reject"})
    assert late.status_code == 409 and "Someone else was first" in late.text
    assert re.search(
        r"Already approved by alice at \d\d:\d\d UTC through http\. Nothing of yours was saved",
        text_of(late.text),
    )
    assert "refunded 5 cents" in late.text  # the thread as it stands now
    shown = await client.get(review(thread, interrupt))
    assert shown.status_code == 200 and "Already approved by alice" in shown.text
    (entry,) = await site.answers(thread)
    assert entry.reviewer["id"] == "alice"


async def test_a_reviewer_without_the_role_is_refused_everywhere_and_sees_nothing(site: Site) -> None:
    alice, carol = site.token("alice", "support"), site.token("carol", "ops")
    thread, interrupt = await site.run(alice, "refund 5")
    ran_before = list(web_agent.RAN)
    client = await site.signed_in(carol)
    inbox = await client.get("/inbox")
    assert (
        "Nothing waits for your review" in inbox.text
        and "refund" not in text_of(inbox.text).split("Tool and arguments")[1]
    )
    assert (await client.get(review(thread, interrupt))).status_code == 403
    posted = await client.post(review(thread, interrupt), data={"csrf": csrf(inbox.text), "d:0": "approve"})
    assert posted.status_code == 403 and "needs role 'support'" in text_of(posted.text)
    row = await client.get("/inbox/rows", params={"thread": thread, "interrupt": interrupt})
    assert row.status_code == 204
    bulk = await client.post(
        "/inbox/bulk",
        data={
            "csrf": csrf(inbox.text),
            "decision": "approve",
            "review": f'["{thread}","{interrupt}"]',
            "confirmed": "yes",
        },
    )
    assert "Approved 0 of 1" in bulk.text and "payment_id" not in text_of(bulk.text)
    assert "reading thread" in text_of(bulk.text)  # the thread is not hers to read (issue 23)
    # the confirm step shows nothing of a review whose thread she may not read
    confirm = await client.post(
        "/inbox/bulk",
        data={"csrf": csrf(inbox.text), "decision": "approve", "review": f'["{thread}","{interrupt}"]'},
    )
    assert "payment_id" not in text_of(confirm.text) and "refund(" not in text_of(confirm.text)
    # nor does the raw view of a folded value
    raw = await client.get(f"/inbox/threads/{thread}/raw", params={"at": "m1", "path": "[]"})
    assert raw.status_code == 403 and "payment_id" not in raw.text
    assert await site.answers(thread) == []
    assert list(web_agent.RAN) == ran_before  # nothing ran
    # a thread with no review carol may decide and no answer of hers is not hers to read (issue 23)
    thread_page = await client.get(f"/inbox/threads/{thread}")
    assert thread_page.status_code == 403 and "text/html" in thread_page.headers["content-type"]
    assert "refund" not in thread_page.text


async def test_unknown_reviews_and_threads_are_plain_not_found_pages(site: Site) -> None:
    token = site.token("alice", "support")
    thread, _ = await site.run(token, "refund 5")
    client = await site.signed_in(token)
    for path in (review(thread, "nope"), review("no-such-thread", "x"), "/inbox/threads/no-such-thread"):
        reply = await client.get(path)
        assert reply.status_code == 404 and "text/html" in reply.headers["content-type"], path


async def test_a_per_call_review_is_answered_with_one_decision(site: Site) -> None:
    token = site.token("alice")
    thread, interrupt = await site.run(token, "go", assistant="pinger")
    client = await site.signed_in(token)
    page = await client.get(review(thread, interrupt))
    assert 'name="v:0:[&#34;count&#34;]"' in page.text  # the form comes from the tool's own schema
    form = {
        "csrf": csrf(page.text),
        "d:0": "edit",
        'v:0:["host"]': "db2",
        's:0:["count"]': "set",
        'v:0:["count"]': "5",
    }
    assert (await client.post(review(thread, interrupt), data=form)).status_code == 303
    (entry,) = await site.answers(thread)
    assert entry.value == {
        "type": "edit",
        "edited_action": {"name": "ping", "args": {"host": "db2", "count": 5}},
    }


# Bulk ------------------------------------------------------------------------------------------
async def test_bulk_answers_each_review_on_its_own_and_a_failure_leaves_only_that_one(site: Site) -> None:
    alice, dana = site.token("alice", "support"), site.token("dana", "support")
    writes = [await site.run(alice, f"write /tmp/b{i} x") for i in range(3)]
    refund = await site.run(alice, "refund 9")
    api = site.client()
    first = writes[0]
    path = f"/handrail/threads/{first[0]}/interrupts/{first[1]}/answer"
    reject = {"answer": {"decisions": [{"type": "reject", "message": "dana was first"}]}}
    assert (await api.post(path, json=reject, headers={"x-api-key": dana})).status_code == 202
    client = await site.signed_in(alice)
    page = await client.get("/inbox")
    picked = [f'["{t}","{i}"]' for t, i in [*writes, refund]]
    asked = await client.post(
        "/inbox/bulk", data={"csrf": csrf(page.text), "decision": "approve", "review": picked}
    )
    assert "Approve these 4 reviews?" in text_of(asked.text)
    reply = await client.post(
        "/inbox/bulk",
        data={"csrf": csrf(page.text), "decision": "approve", "review": picked, "confirmed": "yes"},
    )
    shown = text_of(reply.text)
    assert reply.status_code == 200 and "Approved 2 of 4 reviews of write_file" in shown
    assert "Already rejected by dana at" in shown and "This review is of refund, not write_file" in shown
    for thread, _ in writes[1:]:
        (entry,) = await site.answers(thread)
        assert entry.value == {"decisions": [{"type": "approve"}]} and entry.channel == "web"  # never a grant
    (entry,) = await site.answers(first[0])
    assert entry.reviewer["id"] == "dana"
    assert await site.answers(refund[0]) == []


async def test_bulk_rejects_with_the_message_and_refuses_what_it_cannot_take(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = site.token("alice", "support")
    writes = [await site.run(token, f"write /tmp/r{i} x") for i in range(2)]
    client = await site.signed_in(token)
    page = await client.get("/inbox")
    token_field = csrf(page.text)
    picked = [f'["{t}","{i}"]' for t, i in writes]
    reply = await client.post(
        "/inbox/bulk",
        data={
            "csrf": token_field,
            "decision": "reject",
            "message": "not today",
            "review": picked,
            "confirmed": "yes",
        },
    )
    assert "Rejected 2 of 2" in text_of(reply.text)
    for thread, _ in writes:
        (entry,) = await site.answers(thread)
        assert entry.value == {"decisions": [{"type": "reject", "message": "not today"}]}
    assert (
        await client.post("/inbox/bulk", data={"csrf": token_field, "decision": "edit", "review": picked})
    ).status_code == 400
    assert (
        await client.post("/inbox/bulk", data={"csrf": token_field, "decision": "approve"})
    ).status_code == 400
    assert (
        await client.post("/inbox/bulk", data={"csrf": token_field, "decision": "approve", "review": "nope"})
    ).status_code == 400
    monkeypatch.setattr(bulk_page, "MAX_BULK", 1)
    assert (
        await client.post("/inbox/bulk", data={"csrf": token_field, "decision": "approve", "review": picked})
    ).status_code == 400


# The inbox page ----------------------------------------------------------------------------------
async def test_the_inbox_filters_searches_orders_and_pages(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = site.token("alice", "support", "dba")
    made = [
        await site.run(token, "write /tmp/one x", team="data"),
        await site.run(token, "refund 111", team="billing"),
        await site.run(token, "sql SELECT 1", team="data", priority=2),
        await site.run(token, "write /tmp/needle x", team="ops"),
    ]
    client = await site.signed_in(token)

    async def rows(query: str = "") -> list[str]:
        reply = await client.get(f"/inbox?{query}")
        assert reply.status_code == 200, reply.text
        return re.findall(r'<tr class="row" data-thread="([^"]+)"', reply.text)

    threads = [t for t, _ in made]
    assert await rows() == threads
    assert await rows("order=newest") == threads[::-1]
    assert await rows("tool=write_file") == [threads[0], threads[3]]
    assert await rows("meta=team%3Ddata") == [threads[0], threads[2]]
    assert await rows("meta=team%3Ddata+priority%3D2") == [threads[2]]
    assert await rows("agent=pinger") == [] and await rows("agent=web") == threads
    assert await rows("kind=outcome_unknown") == []
    assert await rows("q=NEEDLE") == [threads[3]]
    assert await rows("q=refund+111") == [threads[1]]
    title = re.search(r"<title>(.*?)</title>", (await client.get("/inbox")).text)
    assert title and title.group(1) == "(4) Inbox · handrail"

    monkeypatch.setattr(inbox_page, "PAGE_SIZE", 3)
    first = await client.get("/inbox")
    assert "(3+) Inbox" in first.text
    cursor = re.search(r'href="/inbox\?cursor=([^"]+)"', first.text)
    assert cursor and await rows(f"cursor={cursor.group(1)}") == [threads[3]]
    monkeypatch.setattr(inbox_page, "SEARCH_LIMIT", 2)
    searched = await client.get("/inbox?q=needle")
    assert (
        "The search read 3 reviews and stopped there" in searched.text and "Search further" in searched.text
    )
    for bad in ("order=sideways", "kind=other", "agent=nobody", "meta=novalue", "cursor=abc"):
        reply = await client.get(f"/inbox?{bad}")
        assert reply.status_code == 400 and "text/html" in reply.headers["content-type"], bad


async def test_a_live_row_comes_from_the_same_template_and_respects_the_filters(site: Site) -> None:
    token = site.token("alice", "support", "dba")
    thread, interrupt = await site.run(token, "refund 42")
    client = await site.signed_in(token)
    row = await client.get("/inbox/rows", params={"thread": thread, "interrupt": interrupt})
    assert (
        row.status_code == 200
        and row.text.lstrip().startswith('<tr class="row"')
        and "amount_cents: 42" in row.text
    )
    assert (
        await client.get(
            "/inbox/rows", params={"thread": thread, "interrupt": interrupt, "tool": "execute_sql"}
        )
    ).status_code == 204
    assert (
        await client.get(
            "/inbox/rows", params={"thread": thread, "interrupt": interrupt, "q": "nothing like it"}
        )
    ).status_code == 204
    assert (
        await client.get("/inbox/rows", params={"thread": "nope", "interrupt": interrupt})
    ).status_code == 204
    assert (await client.get("/inbox/rows")).status_code == 400


async def test_the_inbox_page_says_how_long_it_took_to_make(site: Site) -> None:
    token = site.token("alice", "support")
    client = await site.signed_in(token)
    timing = (await client.get("/inbox")).headers["server-timing"]
    assert re.fullmatch(r"app;dur=\d+\.\d\d", timing)


# The thread page ---------------------------------------------------------------------------------
async def test_the_thread_page_shows_the_conversation_and_the_audit_trail_with_its_csv(site: Site) -> None:
    token = site.token("alice", "support")
    thread, interrupt = await site.run(token, "refund 4900")
    client = await site.signed_in(token)
    page = await client.get(review(thread, interrupt))
    form = {
        "csrf": csrf(page.text),
        "d:0": "edit",
        'v:0:["payment_id"]': "pay_8812",
        'v:0:["amount_cents"]': "100",
        'v:0:["reason"]': '"other"',
    }
    await client.post(review(thread, interrupt), data=form)
    await site.settle()
    shown = await client.get(f"/inbox/threads/{thread}")
    text = text_of(shown.text)
    for words in (
        "refund 4900",
        "asked",
        "edited",
        "ran, edited",
        "Edited from the proposal",
        "refunded 100 cents",
        "via web",
        "done: ",
    ):
        assert words in text, words
    assert '<span class="del">-   &#34;amount_cents&#34;: 4900,</span>' in shown.text
    assert '<span class="add">+   &#34;amount_cents&#34;: 100,</span>' in shown.text
    csv = await client.get(f"/inbox/threads/{thread}/audit.csv")
    assert csv.headers["content-disposition"] == f'attachment; filename="audit-{thread}.csv"'
    assert (
        csv.text.splitlines()[0].startswith("thread_id,seq,at,event")
        and ",answered," in csv.text
        and ",web," in csv.text
    )
