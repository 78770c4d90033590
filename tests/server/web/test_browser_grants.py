"""Grants in a real browser (SPEC rule 16): approve, and allow for an hour; revoke on the grants page.

A ``handrail serve grant_agent:agent`` process (``execute_sql`` is reviewed by the ``dba``
role and grantable), Chromium through Playwright (``conftest.browser``). A reviewer
approves a call with "And allow later calls for... on this thread, 1 hour"; the next call
on the thread runs without a review - judged by the ledger the tool writes from the
service's process - and the thread's audit says a grant let it run. On the grants page
(linked from the header) the reviewer revokes it, and the next call on the thread is
asked again. Pages are checked at 1280 px and at 390 px (a phone) for axe-core's serious
or critical violations and for nothing cut off at the side, and photographed into
``/tmp/grant-shots/`` for a person to look at (not part of the repository).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from conftest import Web, accessible, serving

SHOTS = Path("/tmp/grant-shots")
PHONE = 390


def serving_grants(flags: list[str], ledger: Path) -> Any:
    """A ``handrail serve grant_agent:agent`` process whose tools write ``ledger``; yields its URL."""
    return serving(flags, "grant_agent:agent", {"HANDRAIL_GRANT_LEDGER": str(ledger)})


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, browser: Any) -> Iterator[tuple[Web, Path]]:
    """The service on SQLite, and the ledger its tools write."""
    where = tmp_path_factory.mktemp("grants")
    db_path, ledger = where / "handrail.db", where / "ledger.jsonl"
    flags = ["--db", str(db_path)]
    with serving_grants(flags, ledger) as url:
        yield Web(url, flags, db_path=db_path), ledger


def ran(ledger: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []


def send(web: Web, token: str, text: str, thread: str | None = None) -> tuple[str, str | None]:
    """Send ``text`` on ``thread`` (a new one by default) and wait: (thread, the review it
    paused for, or None when it ran to its end without one)."""
    headers = {"x-api-key": token}
    if thread is None:
        thread = httpx.post(f"{web.url}/threads", json={}, headers=headers, timeout=60).json()["thread_id"]
    body = {"assistant_id": "grants", "input": {"messages": [{"role": "user", "content": text}]}}
    reply = httpx.post(f"{web.url}/threads/{thread}/runs/wait", json=body, headers=headers, timeout=60)
    assert reply.status_code == 200, reply.text
    pending = reply.json().get("__interrupt__") or []
    return str(thread), (pending[0]["id"] if pending else None)


def visit(page: Any, url: str) -> None:
    """Open a page; a review page once its script has run."""
    page.goto(url)
    if "/inbox/reviews/" in url:
        page.wait_for_selector("body[data-ready]")


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def fits(page: Any, width: int) -> None:
    """Nothing on the page reaches past its width (no sideways scrolling)."""
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width


def test_allow_for_an_hour_on_the_thread_then_revoke_it(served: tuple[Web, Path], pages: Any) -> None:
    web, ledger = served
    app, dana = web.token("app"), web.token("dana", "dba")
    thread, interrupt = send(web, app, "sql VACUUM logs")
    assert interrupt is not None

    page = pages(web, dana, width=1280, height=900)
    visit(page, f"{web.url}/inbox/reviews/{thread}/{interrupt}")
    allow = page.get_by_label("And allow later calls for…")
    expect(allow).to_be_hidden()  # it goes with Approve
    page.get_by_label("Approve").check()
    expect(allow).to_be_visible()
    expect(page.get_by_label("1 hour")).to_be_disabled()  # the options go with the box
    allow.check()
    expect(page.get_by_label("1 hour")).to_be_enabled()
    expect(page.get_by_label("On this thread")).to_be_checked()  # the defaults: this thread, an hour
    page.get_by_label("15 minutes").check()
    page.get_by_label("1 hour").check()
    expect(page.get_by_label("Only calls with exactly these arguments")).not_to_be_checked()
    assert accessible(page) == []
    fits(page, 1280)
    shot(page, "review-1280-allow-for")

    page.get_by_role("button", name="Submit the decision").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Recorded")
    expect(page.locator(".decisions")).to_contain_text(
        "and allowed later calls on this thread, with any arguments, for 1 hour"
    )
    expect(page.locator("#outcome")).to_contain_text("ran VACUUM logs", timeout=10_000)
    assert accessible(page) == []
    shot(page, "decided-1280-allowed")
    assert ran(ledger) == [{"tool": "execute_sql", "args": {"query": "VACUUM logs"}}]

    # the next call on the thread runs without a review; the audit names the grant and dana
    _, asked = send(web, app, "sql ANALYZE logs", thread)
    assert asked is None
    assert ran(ledger)[-1] == {"tool": "execute_sql", "args": {"query": "ANALYZE logs"}}
    visit(page, f"{web.url}/inbox/threads/{thread}")
    granted = page.locator("tr.ev-tool_started", has_text="ran under a grant")
    expect(granted).to_have_count(1)
    expect(granted).to_contain_text("dana")
    expect(granted.locator(".grant-note")).to_contain_text(
        re.compile(r"No review: grant [0-9a-f]{12}, given by dana")
    )
    shot(page, "thread-1280-ran-under-a-grant")

    # the grants page, from the header: the grant in force, then revoked
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Grants").click()
    page.wait_for_url(f"{web.url}/inbox/grants")
    rows = page.locator("tr.grant-row")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("execute_sql")
    expect(rows.first).to_contain_text("this thread")
    expect(rows.first).to_contain_text("in force")
    expect(rows.first.locator(".left")).to_contain_text(re.compile(r"no limit on calls\s*59 min left"))
    assert accessible(page) == []
    fits(page, 1280)
    shot(page, "grants-1280-in-force")
    rows.first.get_by_role("button", name=re.compile("^Revoke")).click()
    page.wait_for_url(re.compile(r"/inbox/grants\?all=1&revoked=[0-9a-f]+$"))
    expect(page.locator("#revoked-notice")).to_contain_text("Revoked the grant of execute_sql on thread")
    expect(rows.first.locator(".state")).to_contain_text("revoked by dana")
    expect(rows.first.get_by_role("button")).to_have_count(0)
    assert accessible(page) == []
    shot(page, "grants-1280-revoked")

    # revoked: the next call on the thread is asked again, and nothing more ran
    _, asked = send(web, app, "sql REINDEX logs", thread)
    assert asked is not None
    page.wait_for_timeout(300)
    assert [r["args"]["query"] for r in ran(ledger)] == ["VACUUM logs", "ANALYZE logs"]

    # at a phone's width: the review's choice and the grants page fit
    phone = pages(web, dana, width=PHONE, height=844)
    visit(phone, f"{web.url}/inbox/reviews/{thread}/{asked}")
    phone.get_by_label("Approve").check()
    phone.get_by_label("And allow later calls for…").check()
    phone.get_by_label("A number of calls:").check()
    phone.get_by_role("spinbutton", name="Number of calls").fill("3")
    expect(phone.get_by_label("For this agent, on every thread")).to_be_visible()
    fits(phone, PHONE)
    assert accessible(phone) == []
    shot(phone, "review-390-allow-for")
    visit(phone, f"{web.url}/inbox/grants?all=1")
    expect(phone.locator("tr.grant-row")).to_have_count(1)
    fits(phone, PHONE)
    assert accessible(phone) == []
    shot(phone, "grants-390-revoked")
