"""Review policies in a real browser (SPEC rules 14-15): "1 of 2", who approved, the time left.

A ``handrail serve policy_agent:agent`` process (``execute_sql`` needs two approvals and
expires after an hour), Chromium through Playwright (``conftest.browser``). Two reviewers
approve one review: the first lands on a page that says their approval was recorded and
"1 of 2", the second reviewer's open inbox shows the count change live, and the call runs
once after the second approval - judged by the ledger the tool writes from the service's
process. Pages are checked at desktop width and at 390 px (a phone), for axe-core's
serious or critical violations, and photographed into ``/tmp/policy-shots/`` for a person
to look at (not part of the repository).
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

SHOTS = Path("/tmp/policy-shots")
PHONE = 390


def serving_policies(flags: list[str], ledger: Path) -> Any:
    """A ``handrail serve policy_agent:agent`` process whose tools write ``ledger``; yields its URL."""
    return serving(flags, "policy_agent:agent", {"HANDRAIL_POLICY_LEDGER": str(ledger)})


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, browser: Any) -> Iterator[tuple[Web, Path]]:
    """The service on SQLite, and the ledger its tool writes."""
    where = tmp_path_factory.mktemp("policies")
    db_path, ledger = where / "handrail.db", where / "ledger.jsonl"
    flags = ["--db", str(db_path)]
    with serving_policies(flags, ledger) as url:
        yield Web(url, flags, db_path=db_path), ledger


def ran(ledger: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []


def start(web: Web, token: str, text: str) -> tuple[str, str]:
    """A thread of ``policy_agent`` paused on the review of ``text``: (thread, interrupt)."""
    headers = {"x-api-key": token}
    thread = httpx.post(f"{web.url}/threads", json={}, headers=headers, timeout=60).json()["thread_id"]
    body = {"assistant_id": "policy", "input": {"messages": [{"role": "user", "content": text}]}}
    reply = httpx.post(f"{web.url}/threads/{thread}/runs/wait", json=body, headers=headers, timeout=60)
    assert reply.status_code == 200, reply.text
    return thread, reply.json()["__interrupt__"][0]["id"]


def visit(page: Any, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-ready]")


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def within(page: Any, locator: Any, width: int) -> None:
    """``locator`` is visible and lies inside the page's width (nothing cut off at the side)."""
    expect(locator).to_be_visible()
    box = locator.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5, (box, width)
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width


def row(page: Any, interrupt_id: str) -> Any:
    return page.locator(f"tr.row[data-interrupt='{interrupt_id}']")


def test_two_reviewers_approve_and_the_call_runs_once_after_the_second(
    served: tuple[Web, Path], pages: Any
) -> None:
    web, ledger = served
    carol, alice, bob = web.token("carol"), web.token("alice"), web.token("bob")
    thread, interrupt = start(web, carol, "DELETE FROM logs WHERE day < 7")

    # alice, at a desktop's width: the inbox and the review say 0 of 2, and the time left
    first = pages(web, alice, width=1280, height=900)
    visit(first, web.url + "/inbox")
    mine = row(first, interrupt)
    expect(mine.locator(".marker.approvals")).to_have_text("0 of 2 approvals")
    expiry = mine.locator(".marker.expiry time")
    expect(expiry).to_have_text(re.compile(r"^expires in 59 min$"))
    iso = expiry.get_attribute("datetime")
    assert (
        iso
        and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", iso)
        and expiry.get_attribute("title") == f"Expires at {iso}"
    )
    # the time alone, or with the date when the expiry falls on another day (after 23:00 UTC)
    expect(mine.locator(".expiry-at")).to_have_text(re.compile(r"^(\d{4}-\d\d-\d\d )?\d\d:\d\d UTC$"))
    within(first, mine.locator(".markers"), 1280)
    assert accessible(first) == []
    shot(first, "inbox-desktop-0-of-2")

    visit(first, web.url + f"/inbox/reviews/{thread}/{interrupt}")
    box = first.locator("#approvals-0")
    expect(box).to_contain_text("Approvals: 0 of 2 approvals")
    expect(box).to_contain_text("No approval yet. It runs once 2 different reviewers approved the same call")
    expect(first.locator(".meta .marker.expiry")).to_have_text("expires in 59 min")
    expect(first.locator("#expiry-hint")).to_contain_text("Unanswered, this review expires at")
    assert accessible(first) == []
    shot(first, "review-desktop-0-of-2")

    # bob's inbox is open, at a phone's width, while alice approves
    second = pages(web, bob, width=PHONE, height=844)
    visit(second, web.url + "/inbox")
    expect(row(second, interrupt).locator(".marker.approvals")).to_have_text("0 of 2 approvals")

    first.get_by_label("Approve").check()
    first.get_by_role("button", name="Submit the decision").click()
    expect(first.get_by_role("heading", level=1)).to_have_text("Your approval was recorded")
    recorded = first.locator("#vote-recorded")
    expect(recorded).to_contain_text(
        "Your approval of execute_sql was recorded: 1 of 2 approvals (approved by alice)"
    )
    expect(recorded).to_contain_text("It runs once 1 more reviewer approves it.")
    expect(first.locator("main")).not_to_contain_text("Decided")
    expect(first.locator(".meta .marker.expiry")).to_have_text("expires in 59 min")
    assert accessible(first) == []
    shot(first, "voted-desktop-1-of-2")
    assert ran(ledger) == []  # a vote runs nothing

    # live, no reload: bob's row now says 1 of 2, by alice; at 390 px it all fits
    theirs = row(second, interrupt)
    expect(theirs.locator(".marker.approvals")).to_have_text("1 of 2 approvals", timeout=5000)
    expect(theirs.locator(".approvers")).to_have_text("by alice")
    expect(theirs.locator(".marker.expiry time")).to_have_text("expires in 59 min")
    within(second, theirs.locator(".marker.approvals"), PHONE)
    within(second, theirs.locator(".marker.expiry"), PHONE)
    assert accessible(second) == []
    shot(second, "inbox-390-1-of-2")

    visit(second, web.url + f"/inbox/reviews/{thread}/{interrupt}")
    box = second.locator("#approvals-0")
    expect(box).to_contain_text("Approvals: 1 of 2 approvals")
    expect(box).to_contain_text(
        "Approved by alice. It runs once 2 different reviewers approved the same call"
    )
    expect(box).to_contain_text("approved the same call: 1 more approval is needed.")
    within(second, box.locator(".marker.approvals"), PHONE)
    within(second, second.locator(".meta .marker.expiry"), PHONE)
    assert accessible(second) == []
    shot(second, "review-390-1-of-2")

    second.get_by_label("Approve").check()
    second.get_by_role("button", name="Submit the decision").click()
    expect(second.get_by_role("heading", level=1)).to_have_text("Recorded")
    expect(second.get_by_role("status").first).to_contain_text(
        "Recorded: approved with 2 of 2 approvals, the last by bob"
    )
    expect(second.locator("#outcome")).to_contain_text("ran DELETE FROM logs WHERE day < 7", timeout=10_000)
    expect(second.locator(".votes")).to_contain_text("alice")
    assert accessible(second) == []
    shot(second, "decided-390-2-of-2")
    assert ran(ledger) == [{"tool": "execute_sql", "args": {"query": "DELETE FROM logs WHERE day < 7"}}]

    # the first reviewer's inbox: the review is gone (decided), and the call ran exactly once
    visit(first, web.url + "/inbox")
    expect(row(first, interrupt)).to_have_count(0)
    first.wait_for_timeout(500)
    assert len(ran(ledger)) == 1


def test_a_review_shows_its_time_left_at_both_widths(served: tuple[Web, Path], pages: Any) -> None:
    web, _ = served
    dana = web.token("dana")
    thread, interrupt = start(web, dana, "VACUUM FULL")
    for width, height in ((1280, 800), (PHONE, 844)):
        page = pages(web, dana, width=width, height=height)
        visit(page, web.url + "/inbox")
        marker = row(page, interrupt).locator(".marker.expiry")
        expect(marker).to_have_text("expires in 59 min")
        within(page, marker, width)
        visit(page, web.url + f"/inbox/reviews/{thread}/{interrupt}")
        expect(page.locator(".meta .marker.expiry")).to_have_text("expires in 59 min")
        expect(page.locator("#expiry-hint")).to_contain_text("its policy then has it rejected")
        within(page, page.locator(".meta .marker.expiry"), width)
        shot(page, f"review-{width}-time-left")
