"""The web inbox shows review policies (SPEC rules 14-15), in-process, no browser.

A review of ``execute_sql`` under ``{"required_approvals": 2, "expires_after": 3600}``
(``policy_agent``): every page that shows it says "k of 2 approvals", who approved (ids),
the edit the count stands at, and the time left with its absolute time (UTC). A vote lands
on a page that says the reviewer's approval was recorded and "1 of 2"; an answer to an
expired review gets the library's 409 words as a page. Time moves by
``handrail.runtime.answering.CLOCK``, never by sleeping. Judged by what ran (the agent's
ledger) as well as by the pages.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from html import unescape
from pathlib import Path
from typing import Any

import httpx
import policy_agent
import pytest

from handrail.checkpoint.sqlite import SqliteSaver
from handrail.review.quorum import CallApprovals
from handrail.runtime import answering
from handrail.server import ServerDB, create_app
from handrail.server.pages import _policy as policy

HOUR = 3600


class Site:
    """One app serving ``policy_agent`` on SQLite, with helpers to sign in and start runs."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "h.db"
        self.saver = SqliteSaver(self.path)
        self.agent = policy_agent.build(self.saver)
        self.db = ServerDB.open(db_path=self.path)
        # no sweeper here: a test moves the clock past an expiry and looks before anything resolves it
        self.app = create_app({"policy": self.agent}, db=self.db, sweep_every=None)
        self.service = self.app.state.service
        self.clients: list[httpx.AsyncClient] = []

    def client(self) -> httpx.AsyncClient:
        found = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app), base_url="http://handrail.test"
        )
        self.clients.append(found)
        return found

    def token(self, name: str) -> str:
        return str(self.service.tokens.create(name, [], ["run", "review"])[1])

    async def signed_in(self, token: str) -> httpx.AsyncClient:
        client = self.client()
        page = await client.get("/inbox/signin")
        reply = await client.post("/inbox/signin", data={"csrf": csrf(page.text), "token": token})
        assert reply.status_code == 303, reply.text
        return client

    async def run(self, token: str, text: str) -> tuple[str, str]:
        api = self.client()
        headers = {"x-api-key": token}
        thread = (await api.post("/threads", json={}, headers=headers)).json()["thread_id"]
        body = {"assistant_id": "policy", "input": {"messages": [{"role": "user", "content": text}]}}
        values = (await api.post(f"/threads/{thread}/runs/wait", json=body, headers=headers)).json()
        return thread, values["__interrupt__"][0]["id"]

    async def settle(self) -> None:
        """Until no run of the API or the worker is going and none is queued."""
        deadline = time.monotonic() + 10
        while self.service.runs.active or self.service.worker._running or self.queued():
            assert time.monotonic() < deadline, "a run did not end"
            await asyncio.sleep(0.02)

    def queued(self) -> bool:
        with sqlite3.connect(self.path) as conn:
            return bool(conn.execute("SELECT 1 FROM handrail_runs").fetchall())


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    policy_agent.RAN.clear()
    found = Site(tmp_path)
    async with found.app.router.lifespan_context(found.app):
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
    """The page's words, one space between them."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def later(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Move the clock expiry is judged by ``seconds`` ahead."""
    monkeypatch.setattr(answering, "CLOCK", lambda: time.time() + seconds)


async def answer(client: httpx.AsyncClient, thread: str, interrupt: str, **form: str) -> httpx.Response:
    page = await client.get(review(thread, interrupt))
    assert page.status_code == 200, page.text
    return await client.post(review(thread, interrupt), data={"csrf": csrf(page.text), **form})


# The helpers' words ----------------------------------------------------------------------------
def test_time_left_is_rounded_down_and_past_is_expired() -> None:
    assert policy.time_left(43 * 60 + 59) == "expires in 43 min"
    assert policy.time_left(42.9) == "expires in 42 s"
    assert policy.time_left(2 * HOUR + 5 * 60 + 30) == "expires in 2 h 5 min"
    assert policy.time_left(2 * HOUR) == "expires in 2 h"
    assert policy.time_left(3 * 86400 + 4 * HOUR + 1) == "expires in 3 d 4 h"
    assert policy.time_left(0) == "expired" and policy.time_left(-5) == "expired"


def test_expiry_of_reads_iso_text_and_judges_by_the_given_clock() -> None:
    at = datetime(2026, 12, 4, 17, 47, 6, tzinfo=UTC)
    found = policy.expiry_of(at.isoformat(), "reject", now=at.timestamp() - 43 * 60)
    assert found is not None
    assert (found.text, found.iso, found.outcome, found.expired) == (
        "expires in 43 min",
        "2026-12-04T17:47:06Z",
        "rejected",
        False,
    )
    gone = policy.expiry_of(at, now=at.timestamp() + 1)
    assert gone is not None and gone.expired and gone.text == "expired" and gone.outcome is None
    assert policy.expiry_of(None) is None and policy.expiry_of("not a time") is None


def test_counts_show_only_calls_that_count_and_name_the_edit() -> None:
    action = {"name": "execute_sql", "args": {"query": "SELECT 2"}}
    counted = CallApprovals("call_1", 2, ("alice",), action, True, None)
    single = CallApprovals("call_2", 1, (), {"name": "lookup", "args": {}}, False, None)
    (count,) = policy.counts_of([counted.as_json(), single.as_json()])
    assert (count.text, count.who, count.missing, count.edited, count.args) == (
        "1 of 2 approvals",
        "alice",
        1,
        True,
        {"query": "SELECT 2"},
    )
    assert policy.counts_of([counted]) == [count]  # the library's own objects read the same


# The pages -------------------------------------------------------------------------------------
async def test_two_approvals_on_the_pages_vote_by_vote_then_the_call_runs_once(site: Site) -> None:
    alice, bob = site.token("alice"), site.token("bob")
    thread, interrupt = await site.run(alice, "DELETE FROM logs")
    as_alice, as_bob = await site.signed_in(alice), await site.signed_in(bob)

    inbox = text_of((await as_alice.get("/inbox")).text)
    assert "0 of 2 approvals" in inbox and "expires in 59 min" in inbox, inbox
    page = (await as_alice.get(review(thread, interrupt))).text
    assert "0 of 2 approvals" in text_of(page) and "No approval yet." in text_of(page)
    expires = re.search(
        r'<time datetime="([^"]+)" title="Expires at \1" data-expires>expires in 59 min<', page
    )
    assert expires and expires.group(1).endswith("Z"), page  # the absolute time, UTC, ISO 8601
    asked = datetime.fromisoformat(expires.group(1).replace("Z", "+00:00")) - timedelta(seconds=HOUR)
    assert abs((datetime.now(UTC) - asked).total_seconds()) < 60

    voted = await answer(as_alice, thread, interrupt, **{"d:0": "approve"})
    assert voted.status_code == 303 and voted.headers["location"] == review(thread, interrupt) + "/decided"
    landed = await as_alice.get(voted.headers["location"])
    words = text_of(landed.text)
    assert landed.status_code == 200 and "<title>Approval recorded" in landed.text, words
    assert "Your approval was recorded" in words and "1 of 2 approvals" in words, words
    assert "approved by alice" in words and "runs once 1 more reviewer approves it" in words, words
    assert "Decided" not in words and "Recorded:" not in words
    assert policy_agent.RAN == []  # a vote runs nothing

    for client, who in ((as_alice, "alice"), (as_bob, "bob")):
        row = text_of((await client.get("/inbox")).text)
        assert "1 of 2 approvals by alice" in row, (who, row)
    page = text_of((await as_alice.get(review(thread, interrupt))).text)
    assert "Approved by alice" in page and "Your approval is counted" in page, page
    page = text_of((await as_bob.get(review(thread, interrupt))).text)
    assert "Approved by alice" in page and "Your approval is counted" not in page, page
    # a page that is not the voter's: bob has not voted, so .../decided is his review page again
    assert (await as_bob.get(review(thread, interrupt) + "/decided")).status_code == 303
    thread_page = text_of((await as_bob.get(f"/inbox/threads/{thread}")).text)
    assert "approval: 1 of 2" in thread_page and "1 of 2 approvals by alice" in thread_page, thread_page

    done = await answer(as_bob, thread, interrupt, **{"d:0": "approve"})
    assert done.status_code == 303
    await site.settle()
    decided = text_of((await as_bob.get(done.headers["location"])).text)
    assert re.search(r"Recorded: approved with 2 of 2 approvals, the last by bob at \d\d:\d\d UTC", decided)
    assert "Approvals counted" in decided and "alice" in decided, decided
    assert policy_agent.RAN == [("execute_sql", {"query": "DELETE FROM logs"})]
    assert "DELETE FROM logs" not in text_of((await as_alice.get("/inbox")).text)
    trail = text_of((await as_alice.get(f"/inbox/threads/{thread}")).text)
    assert "approval: 2 of 2" in trail and "approved: approvals complete" in trail, trail


async def test_an_edit_starts_the_count_and_the_pages_show_the_edit_it_stands_at(site: Site) -> None:
    alice, bob = site.token("alice"), site.token("bob")
    thread, interrupt = await site.run(alice, "DELETE FROM logs")
    as_alice, as_bob = await site.signed_in(alice), await site.signed_in(bob)
    edited = await answer(
        as_alice, thread, interrupt, **{"d:0": "edit", 'v:0:["query"]': "DELETE FROM logs LIMIT 10"}
    )
    assert edited.status_code == 303
    landed = text_of((await as_alice.get(edited.headers["location"])).text)
    assert "Your approval of execute_sql , as edited, was recorded: 1 of 2 approvals" in landed, landed
    assert "The edit the approvals of execute_sql are for" in landed and "LIMIT 10" in landed

    row = text_of((await as_bob.get("/inbox")).text)
    assert '1 of 2 approvals by alice for an edit: query: "DELETE FROM logs LIMIT 10"' in row, row
    page = text_of((await as_bob.get(review(thread, interrupt))).text)
    assert "These approvals are for an edit" in page and "Edited arguments the approvals are for" in page
    assert '"query": "DELETE FROM logs LIMIT 10"' in page, page

    assert (await answer(as_bob, thread, interrupt, **{"d:0": "approve"})).status_code == 303
    await site.settle()
    assert policy_agent.RAN == [("execute_sql", {"query": "DELETE FROM logs LIMIT 10"})]


async def test_time_left_follows_the_clock_and_an_expired_review_is_refused_as_a_page(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = site.token("alice")
    thread, interrupt = await site.run(alice, "DROP TABLE users")
    plain, _ = await site.run(alice, "lookup k1")  # one approval, no expiry: nothing to show
    client = await site.signed_in(alice)
    page = (await client.get(review(thread, interrupt))).text

    later(monkeypatch, 17 * 60)
    inbox = (await client.get("/inbox")).text
    assert "expires in 42 min" in text_of(inbox), text_of(inbox)
    row = re.search(r'<tr class="row" data-thread="' + plain + r'".*?</tr>', inbox, re.S)
    assert row and "approvals" not in row.group(0) and "expires" not in row.group(0)
    assert "Unanswered, this review expires at" in text_of((await client.get(review(thread, interrupt))).text)

    later(monkeypatch, HOUR + 60)
    inbox = text_of((await client.get("/inbox")).text)
    assert "0 of 2 approvals expired" in inbox, inbox
    shown = text_of((await client.get(review(thread, interrupt))).text)
    assert (
        "This review expired at" in shown and "can no longer be answered: its policy has it rejected" in shown
    )

    refused = await client.post(review(thread, interrupt), data={"csrf": csrf(page), "d:0": "approve"})
    assert refused.status_code == 409 and "<title>Conflict" in refused.text
    said = text_of(refused.text)
    assert re.search(rf"interrupt {interrupt} expired unanswered at \S+ and can no longer be answered", said)
    assert "nothing was saved" in said and "Back to the review" in said, said
    trail = await site.agent.aget_audit_trail({"configurable": {"thread_id": thread}})
    assert [e.event for e in trail if e.event in ("answered", "approval")] == []
    assert policy_agent.RAN == []


async def test_who_approved_and_the_edit_are_shown_escaped(site: Site) -> None:
    """Reviewer ids (the library takes any from Python) and edited arguments are text on every page."""
    alice = site.token("alice")
    thread, interrupt = await site.run(alice, "SELECT 1")
    odd = {"id": '<img src=x onerror="alert(1)">', "roles": []}
    edit = {"type": "edit", "edited_action": {"name": "execute_sql", "args": {"query": "<b>DROP</b>"}}}
    vote = await site.agent.adecide(thread, interrupt, {"decisions": [edit]}, reviewer=odd)
    assert vote.waiting
    client = await site.signed_in(alice)
    for path in (review(thread, interrupt), "/inbox", f"/inbox/threads/{thread}"):
        html = (await client.get(path)).text
        assert "<img src=x" not in html and "<b>DROP" not in html, path
        assert "&lt;img src=x onerror=" in html and "&lt;b&gt;DROP" in html, path
    voted = await answer(client, thread, interrupt, **{"d:0": "approve"})
    assert voted.status_code == 303  # alice's approval of the edit it stands at completes the count
    await site.settle()
    assert policy_agent.RAN == [("execute_sql", {"query": "<b>DROP</b>"})]
    html = (await client.get(voted.headers["location"])).text
    assert "<img src=x" not in html and "&lt;img src=x onerror=" in html


async def test_a_bulk_approval_of_a_counted_review_says_it_was_a_vote(site: Site) -> None:
    alice = site.token("alice")
    thread, interrupt = await site.run(alice, "VACUUM")
    client = await site.signed_in(alice)
    inbox = (await client.get("/inbox")).text
    ticked = {"csrf": csrf(inbox), "decision": "approve", "review": f'["{thread}", "{interrupt}"]'}
    confirm = text_of((await client.post("/inbox/bulk", data=ticked)).text)
    assert "0 of 2 approvals your approval counts as one" in confirm and "expires in 59 min" in confirm, (
        confirm
    )
    result = await client.post("/inbox/bulk", data={**ticked, "confirmed": "yes"})
    words = text_of(result.text)
    assert "Your approval was recorded: 1 of 2 approvals (by alice)" in words, words
    assert "Where its approvals stand" in words and policy_agent.RAN == []


async def test_the_json_inbox_and_the_page_agree(site: Site) -> None:
    """The row reads the API's own fields: the count and the expiry the JSON inbox gives."""
    alice = site.token("alice")
    thread, interrupt = await site.run(alice, "SELECT 1")
    api = site.client()
    body: dict[str, Any] = {"answer": {"decisions": [{"type": "approve"}]}}
    path = f"/handrail/threads/{thread}/interrupts/{interrupt}/answer"
    assert (await api.post(path, json=body, headers={"x-api-key": alice})).json()["waiting"] is True
    (item,) = (await api.get("/handrail/inbox", headers={"x-api-key": alice})).json()["items"]
    client = await site.signed_in(alice)
    page = (await client.get("/inbox")).text
    at = datetime.fromisoformat(item["expires_at"]).astimezone(UTC).isoformat(timespec="seconds")
    assert f'datetime="{at.replace("+00:00", "Z")}"' in page
    assert item["approvals"][0]["approved_by"] == ["alice"] and "1 of 2 approvals by alice" in text_of(page)
