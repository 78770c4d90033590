"""Grants on the web inbox (SPEC rule 16), in-process, no browser.

The review page offers "And allow later calls for..." with Approve, only where the review
may grant; the
answer it posts carries the grant through the page's own path (its CSRF token, channel
``web``); a later call the grant covers runs without a review and the thread's audit
names the grant and its giver; the grants page lists what the reviewer may see and
revokes through a CSRF-protected form, after which the next call is asked again. Judged
by what ran (``grant_agent.RAN``, the tools' ledger) as well as by the pages. The agent is
``grant_agent``: ``execute_sql`` (role dba, grantable), ``lookup`` (anyone),
``wire_money`` (``grantable: False``) and ``drop_table`` (two approvals).
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

import grant_agent
import httpx
import pytest

from handrail.checkpoint.sqlite import SqliteSaver
from handrail.server import ServerDB, create_app
from handrail.server.pages._grant_form import grant_words, read_grant


class Site:
    """One app serving ``grant_agent`` on SQLite, with helpers to sign in and start runs."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "h.db"
        self.saver = SqliteSaver(self.path)
        self.agent = grant_agent.build(self.saver)
        self.db = ServerDB.open(db_path=self.path)
        self.app = create_app({"grants": self.agent}, db=self.db, sweep_every=None)
        self.service = self.app.state.service
        self.clients: list[httpx.AsyncClient] = []

    def client(self) -> httpx.AsyncClient:
        found = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app), base_url="http://handrail.test"
        )
        self.clients.append(found)
        return found

    def token(self, name: str, *roles: str, scopes: tuple[str, ...] = ("run", "review")) -> str:
        return str(self.service.tokens.create(name, list(roles), list(scopes))[1])

    async def signed_in(self, token: str) -> httpx.AsyncClient:
        client = self.client()
        page = await client.get("/inbox/signin")
        reply = await client.post("/inbox/signin", data={"csrf": csrf(page.text), "token": token})
        assert reply.status_code == 303, reply.text
        return client

    async def run(self, token: str, text: str, thread: str | None = None) -> tuple[str, str | None]:
        """Send ``text`` on ``thread`` (a new one by default); the thread and the review it
        paused for (None: it ran to its end without one)."""
        api = self.client()
        headers = {"x-api-key": token}
        if thread is None:
            thread = (await api.post("/threads", json={}, headers=headers)).json()["thread_id"]
        body = {"assistant_id": "grants", "input": {"messages": [{"role": "user", "content": text}]}}
        reply = await api.post(f"/threads/{thread}/runs/wait", json=body, headers=headers)
        assert reply.status_code == 200, reply.text
        pending = reply.json().get("__interrupt__") or []
        return thread, (pending[0]["id"] if pending else None)

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
    grant_agent.RAN.clear()
    found = Site(tmp_path)
    async with found.app.router.lifespan_context(found.app):
        yield found
        await found.settle()
        await asyncio.sleep(0.2)  # the live feed's reader takes the last poke (see test_policy_display)
        for client in found.clients:
            await client.aclose()
    found.db.close()
    found.saver.close()
    grant_agent.RAN.clear()


def csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html[:2000]
    return found.group(1)


def review(thread: str, interrupt: str) -> str:
    return f"/inbox/reviews/{thread}/{interrupt}"


def text_of(html: str) -> str:
    """The page's words, one space between them."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def ran() -> list[tuple[str, dict[str, Any]]]:
    return list(grant_agent.RAN)


async def answer(client: httpx.AsyncClient, thread: str, interrupt: str, **form: str) -> httpx.Response:
    page = await client.get(review(thread, interrupt))
    assert page.status_code == 200, page.text
    return await client.post(review(thread, interrupt), data={"csrf": csrf(page.text), **form})


def allow(scope: str = "thread", span: str = "3600", uses: str = "", exact: bool = False) -> dict[str, str]:
    """The form of Approve with "And allow later calls for..." on call 0."""
    form = {"d:0": "approve", "g:0:on": "true", "g:0:scope": scope, "g:0:for": span, "g:0:uses": uses}
    return {**form, "g:0:exact": "true"} if exact else form


def grant_rows(html: str) -> dict[str, str]:
    """The grants page's rows: grant id -> the row's words."""
    rows = re.findall(r'<tr id="g-([0-9a-f]+)"[^>]*>(.*?)</tr>', html, re.S)
    return {gid: text_of(body) for gid, body in rows}


# The form's words ------------------------------------------------------------------------------
def test_read_grant_makes_the_grant_or_says_what_is_missing() -> None:
    def form(**fields: str) -> dict[str, list[str]]:
        return {f"g:0:{k}": [v] for k, v in fields.items()}

    assert read_grant(form(scope="thread", **{"for": "3600"}), 0, "call 1")[0] == {
        "scope": "thread",
        "ttl": 3600.0,
    }
    grant, problems, kept = read_grant(
        form(scope="agent", uses="5", exact="true", **{"for": "calls"}), 0, "x"
    )
    assert grant == {"scope": "agent", "uses": 5, "args": "exact"} and problems == []
    assert kept == {"on": "", "scope": "agent", "for": "calls", "uses": "5", "exact": "true"}
    for bad, said in (
        (form(scope="everywhere", **{"for": "900"}), "choose where"),
        (form(scope="thread", **{"for": "calls"}), "how many calls"),
        (form(scope="thread", uses="0", **{"for": "calls"}), "how many calls"),
        (form(scope="thread", uses="٣", **{"for": "calls"}), "how many calls"),
        (form(scope="thread", **{"for": "99999999"}), "how long"),
    ):
        grant, problems, _ = read_grant(bad, 0, "call 1")
        assert grant is None and said in " ".join(problems), (bad, problems)
    assert (
        grant_words({"scope": "thread", "ttl": 3600.0})
        == "later calls on this thread, with any arguments, for 1 hour"
    )
    assert grant_words({"scope": "agent", "args": "exact", "uses": 1, "ttl": 7200}) == (
        "later calls on every thread of this agent, with exactly these arguments, for 2 hours or for 1 call"
    )
    assert grant_words(None) is None


# The review page --------------------------------------------------------------------------------
async def test_approve_and_allow_is_offered_only_where_the_review_may_grant(site: Site) -> None:
    dana = site.token("dana", "dba")
    sql = await site.run(dana, "sql VACUUM")
    wire = await site.run(dana, "wire 500")
    drop = await site.run(dana, "drop logs")
    client = await site.signed_in(dana)
    page = (await client.get(review(*sql))).text  # type: ignore[arg-type]
    assert 'name="g:0:on" value="true"' in page and "And allow later calls for…" in page
    words = text_of(page)
    for label in ("On this thread", "For this agent, on every thread", "15 minutes", "1 hour", "8 hours"):
        assert label in words, label
    assert "A number of calls" in words and "Only calls with exactly these arguments" in words
    assert 'name="g:0:scope" value="thread" checked' in page and 'name="g:0:for" value="3600" checked' in page
    for paused in (wire, drop):  # grantable: False; two approvals
        other = (await client.get(review(*paused))).text  # type: ignore[arg-type]
        assert 'name="g:0:on"' not in other and "And allow later" not in other and "data-grant" not in other
    refused = await answer(client, *wire, **allow())  # type: ignore[arg-type]
    assert refused.status_code == 422 and "this review cannot give a grant" in text_of(refused.text)
    assert ran() == []
    # Approve without ticking the box: the options typed are not sent as a grant
    options = {k: v for k, v in allow("agent", "calls", uses="9").items() if k != "g:0:on"}
    plain = await answer(client, *sql, **options)  # type: ignore[arg-type]
    assert plain.status_code == 303
    await site.settle()
    assert ran() == [("execute_sql", {"query": "VACUUM"})]
    assert await site.agent.alist_grants(active=False) == []


async def test_a_grant_from_the_page_covers_later_calls_on_the_thread_until_revoked(site: Site) -> None:
    dana, app = site.token("dana", "dba"), site.token("app")
    thread, interrupt = await site.run(app, "sql VACUUM")
    assert interrupt is not None
    client = await site.signed_in(dana)
    sent = await answer(client, thread, interrupt, **allow("thread", "3600"))
    assert sent.status_code == 303, text_of(sent.text)
    await site.settle()
    decided = text_of((await client.get(sent.headers["location"])).text)
    assert "approve , and allowed later calls on this thread, with any arguments, for 1 hour" in decided, (
        decided
    )
    assert ran() == [("execute_sql", {"query": "VACUUM"})]

    _, asked = await site.run(app, "sql ANALYZE", thread)  # covered: no review
    assert asked is None and ran()[-1] == ("execute_sql", {"query": "ANALYZE"})
    other, asked = await site.run(app, "sql REINDEX")  # another thread: not covered
    assert asked is not None and len(ran()) == 2

    trail = text_of((await client.get(f"/inbox/threads/{thread}")).text)
    (grant,) = await site.agent.alist_grants()
    assert "ran under a grant dana via grant" in trail, trail
    assert f"No review: grant {grant.grant_id[:12]} , given by dana , let it run." in trail, trail
    listed = (await client.get("/inbox/grants")).text
    rows = grant_rows(listed)
    assert list(rows) == [grant.grant_id], rows
    assert "execute_sql" in rows[grant.grant_id] and "this thread" in rows[grant.grant_id]
    assert "no limit on calls 59 min left" in rows[grant.grant_id] and "by dana" in rows[grant.grant_id]
    assert "in force" in rows[grant.grant_id] and "with any arguments" in rows[grant.grant_id]
    assert 'href="/inbox/grants"' in (await client.get("/inbox")).text  # linked from the header

    revoked = await client.post(f"/inbox/grants/{grant.grant_id}/revoke", data={"csrf": csrf(listed)})
    assert revoked.status_code == 303 and revoked.headers["location"] == (
        f"/inbox/grants?all=1&revoked={grant.grant_id}"
    )
    after = (await client.get(revoked.headers["location"])).text
    assert "Revoked the grant of execute_sql on thread" in text_of(after)
    row = grant_rows(after)[grant.grant_id]
    assert "revoked by dana" in row and "in force" not in row and "left" not in row, row
    assert "1 call ran under it was to last until" in row, row
    assert f'action="/inbox/grants/{grant.grant_id}/revoke"' not in after  # nothing left to revoke
    assert grant_rows((await client.get("/inbox/grants")).text) == {}  # the default list: in force only

    _, asked = await site.run(app, "sql CHECKPOINT", thread)  # asked again
    assert asked is not None and len(ran()) == 2
    assert other  # (the other thread still waits)


async def test_a_grant_for_the_agent_for_one_call_with_exact_arguments(site: Site) -> None:
    dana, app = site.token("dana", "dba"), site.token("app")
    thread, interrupt = await site.run(app, "lookup k1")
    assert interrupt is not None
    client = await site.signed_in(dana)
    sent = await answer(client, thread, interrupt, **allow("agent", "calls", uses="1", exact=True))
    assert sent.status_code == 303, text_of(sent.text)
    await site.settle()
    listed = grant_rows((await client.get("/inbox/grants")).text)
    (row,) = listed.values()
    assert "every thread of agent grants" in row and "only with exactly these arguments" in row, row
    assert '"key" : "k1"' in row and "1 of 1 call left" in row and "no time limit" in row, row

    _, asked = await site.run(app, "lookup k2")  # other arguments: asked
    assert asked is not None
    _, asked = await site.run(app, "lookup k1")  # another thread, the same arguments: covered
    assert asked is None
    _, asked = await site.run(app, "lookup k1")  # its one use is spent: asked
    assert asked is not None
    assert ran() == [("lookup", {"key": "k1"}), ("lookup", {"key": "k1"})]
    every = grant_rows((await client.get("/inbox/grants?all=1")).text)
    (ended,) = every.values()
    assert "spent" in ended and "1 of 1 call ran under it" in ended and "Revoke" not in ended, ended


async def test_a_form_with_a_missing_number_of_calls_is_refused_and_kept(site: Site) -> None:
    dana = site.token("dana", "dba")
    thread, interrupt = await site.run(dana, "sql VACUUM")
    assert interrupt is not None
    client = await site.signed_in(dana)
    refused = await answer(client, thread, interrupt, **allow("agent", "calls", uses="", exact=True))
    assert refused.status_code == 422
    assert "enter how many calls the grant covers" in text_of(refused.text)
    page = refused.text
    assert (
        'name="g:0:on" value="true" aria-controls="g-0-options" aria-describedby="g-0-hint" checked' in page
    )
    assert 'name="g:0:scope" value="agent" checked' in page and 'name="g:0:for" value="calls" checked' in page
    assert 'id="g-0-exact" name="g:0:exact" value="true" checked' in page
    assert ran() == [] and await site.agent.alist_grants(active=False) == []


async def test_a_reviewer_without_the_tools_roles_neither_sees_nor_revokes_it(site: Site) -> None:
    dana, olga, root = (
        site.token("dana", "dba"),
        site.token("olga", "ops"),
        site.token("root", scopes=("admin",)),
    )
    thread, interrupt = await site.run(dana, "sql VACUUM")
    assert interrupt is not None
    as_dana = await site.signed_in(dana)
    assert (await answer(as_dana, thread, interrupt, **allow())).status_code == 303
    await site.settle()
    (grant,) = await site.agent.alist_grants()

    as_olga = await site.signed_in(olga)
    page = (await as_olga.get("/inbox/grants?all=1")).text
    assert (
        grant_rows(page) == {}
        and grant.grant_id not in page
        and "No grant that you may see." in text_of(page)
    )
    refused = await as_olga.post(f"/inbox/grants/{grant.grant_id}/revoke", data={"csrf": csrf(page)})
    assert refused.status_code == 404 and "that this credential may see" in text_of(refused.text)
    assert (await site.agent.alist_grants())[0].revoked_at is None  # still in force

    as_root = await site.signed_in(root)  # admin sees every grant
    assert list(grant_rows((await as_root.get("/inbox/grants")).text)) == [grant.grant_id]
    unknown = await as_olga.post("/inbox/grants/not-a-grant/revoke", data={"csrf": csrf(page)})
    assert unknown.status_code == 404


async def test_csrf_is_enforced_on_revoking_and_on_granting(site: Site) -> None:
    dana = site.token("dana", "dba")
    thread, interrupt = await site.run(dana, "sql VACUUM")
    assert interrupt is not None
    client = await site.signed_in(dana)
    forged = await client.post(review(thread, interrupt), data={"csrf": "forged", **allow()})
    assert forged.status_code == 403 and await site.agent.alist_grants(active=False) == []
    assert (await answer(client, thread, interrupt, **allow())).status_code == 303
    await site.settle()
    (grant,) = await site.agent.alist_grants()
    page = (await client.get("/inbox/grants")).text
    path = f"/inbox/grants/{grant.grant_id}/revoke"
    for data, headers in (
        ({}, {}),
        ({"csrf": "forged"}, {}),
        ({"csrf": csrf(page)}, {"origin": "https://evil.example"}),
        ({"csrf": csrf(page)}, {"sec-fetch-site": "cross-site"}),
    ):
        refused = await client.post(path, data=data, headers=headers)
        assert refused.status_code == 403 and "came from another site" in text_of(refused.text), data
    assert (await site.agent.alist_grants())[0].revoked_at is None
    signed_out = site.client()
    assert (await signed_out.post(path, data={"csrf": csrf(page)})).status_code == 401
    assert (await site.agent.alist_grants())[0].revoked_at is None


async def test_hostile_strings_are_text_on_every_page(site: Site) -> None:
    dana = site.token("dana", "dba")
    query = '<script>alert("q")</script><img src=x onerror=alert(1)>'
    thread, interrupt = await site.run(dana, f"sql {query}")
    assert interrupt is not None
    odd = {
        "id": '<b onmouseover="alert(2)">eve</b>',
        "roles": ["dba"],
    }  # the library takes any id from Python
    exact = {"type": "approve", "grant": {"scope": "agent", "args": "exact", "ttl": 3600}}
    await site.agent.adecide(thread, interrupt, {"decisions": [exact]}, reviewer=odd)
    await site.agent.ainvoke(None, {"configurable": {"thread_id": thread}})
    _, asked = await site.run(dana, f"sql {query}", thread)
    assert asked is None and len(ran()) == 2
    client = await site.signed_in(dana)
    hostile_thread = '"><script>alert(3)</script>'
    for path in ("/inbox/grants", f"/inbox/threads/{thread}", f"/inbox/grants?all=1&thread={hostile_thread}"):
        html = (await client.get(path)).text
        for raw in ("<script>alert", "<img src=x", "<b onmouseover"):
            assert raw not in html, (path, raw)
    listed = (await client.get("/inbox/grants")).text
    assert "&lt;script&gt;alert(" in listed and "&lt;b onmouseover=" in listed, listed
    trail = (await client.get(f"/inbox/threads/{thread}")).text
    assert "&lt;b onmouseover=" in trail and "ran under a grant" in trail
    filtered = (await client.get(f"/inbox/grants?thread={hostile_thread}")).text
    assert "&lt;script&gt;alert(3)" in filtered or "&#34;&gt;&lt;script&gt;" in filtered
