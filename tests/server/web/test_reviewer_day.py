"""Issue 25, items 3, 6 and 8: a megabyte argument, the edit notice, and the inbox's layout, in Chromium.

A review with a ~1 MB argument: its page stays small (the value folded, the whole of it
a link away), approve, reject and an edit of another field are recorded, the JSON inbox
folds it too, and every error under ``/inbox`` is a page. After an edit the reviewer
reads the tool's own result, not the notice written for the model. At 1280x800 the
decision is in view without scrolling, the arguments are shown once beside the tool's
description; at 390 px no page scrolls sideways. Bulk answers are confirmed first and
say what each recorded; a second tab of the same reviewer is told it answered already.
Screenshots go to ``$HANDRAIL_SHOTS`` when it is set (never into the repository).
"""

from __future__ import annotations

import os
import re
from typing import Any

import httpx
from playwright.sync_api import expect

from conftest import Web, accessible

ALICE = ("alice", "support")
MEGABYTE = 1_000_000


def visit(page: Any, url: str) -> Any:
    """Open ``url``; on a page with a script of its own, wait until it has run."""
    reply = page.goto(url)
    if "/inbox/threads/" not in url:
        page.wait_for_selector("body[data-ready]")
    return reply


def shoot(page: Any, name: str) -> None:
    folder = os.environ.get("HANDRAIL_SHOTS")
    if folder:
        os.makedirs(folder, exist_ok=True)
        page.screenshot(path=os.path.join(folder, f"{name}.png"), full_page=True)


def answers(web: Web, token: str, thread_id: str) -> list[dict[str, Any]]:
    trail = web.api(token, "GET", f"/handrail/threads/{thread_id}/audit").json()
    return [e for e in trail if e["event"] == "answered"]


def test_a_megabyte_argument_is_folded_and_approve_reject_and_edit_are_recorded(web: Web, pages: Any) -> None:
    alice = web.token(*ALICE)
    approve, reject, edit = (web.run(alice, f"big {MEGABYTE}") for _ in range(3))
    page = pages(web, alice)

    reply = visit(page, web.url + approve.review_url)
    assert len(reply.body()) < 200_000, len(reply.body())
    expect(page.locator("section.call .fold")).to_contain_text("1,000,000 characters in all")
    whole = page.locator("section.call .fold a").get_attribute("href")
    raw = page.request.get(web.url + whole)
    assert raw.status == 200 and len(raw.text()) == MEGABYTE and raw.text().startswith("0123456789abcdef")
    assert accessible(page) == []
    page.get_by_label("Approve").check()
    page.get_by_role("button", name="Submit the decision").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Recorded")
    assert answers(web, alice, approve.thread_id)[0]["value"] == {"decisions": [{"type": "approve"}]}

    visit(page, web.url + reject.review_url)
    page.get_by_label("Reject").check()
    page.get_by_label("Message to the model").fill("too big")
    page.get_by_role("button", name="Submit the decision").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Recorded")
    assert answers(web, alice, reject.thread_id)[0]["value"]["decisions"][0]["type"] == "reject"

    reply = visit(page, web.url + edit.review_url)
    page.get_by_label("Edit").check()
    page.get_by_label(re.compile(r"^path")).fill("/tmp/big-edited")
    expect(page.get_by_label("Send content?")).to_have_value("keep")
    page.get_by_role("button", name="Submit the decision").click()
    expect(page.locator("[data-diff='0'] pre")).to_contain_text('+   "path": "/tmp/big-edited"')
    page.get_by_role("button", name="Confirm and submit").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Recorded")
    expect(page.locator("#outcome .result")).to_contain_text(
        f"wrote {MEGABYTE} bytes to /tmp/big-edited", timeout=10000
    )
    expect(page.locator("#outcome .outcome")).not_to_contain_text("Note: a human reviewer")
    assert len(page.content()) < 200_000
    (entry,) = answers(web, alice, edit.thread_id)
    args = entry["value"]["decisions"][0]["edited_action"]["args"]
    assert args["path"] == "/tmp/big-edited" and len(args["content"]) == MEGABYTE
    shoot(page, "decided-big-edit-1280")

    visit(page, f"{web.url}/inbox/threads/{edit.thread_id}")
    assert len(page.content()) < 200_000
    expect(page.locator(".msg-tool")).not_to_contain_text("Note: a human reviewer")
    expect(page.locator(".msg-tool")).to_contain_text("ran with arguments a reviewer edited")


def test_the_inbox_api_folds_long_values_unless_asked_for_them_whole(web: Web) -> None:
    alice = web.token(*ALICE)
    paused = web.run(alice, f"big {MEGABYTE}")
    folded = web.api(alice, "GET", "/handrail/inbox?limit=200")
    assert len(folded.content) < 200_000, len(folded.content)
    (item,) = [i for i in folded.json()["items"] if i["interrupt_id"] == paused.interrupt_id]
    content = item["action_requests"][0]["args"]["content"]
    assert content.startswith("0123456789abcdef") and "1000000 characters in all; full=true" in content
    assert item["action_requests"][0]["args"]["path"] == "/tmp/big"  # short values as they are
    whole = web.api(alice, "GET", "/handrail/inbox?limit=200&full=true&messages=0&tool=write_file")
    (item,) = [i for i in whole.json()["items"] if i["interrupt_id"] == paused.interrupt_id]
    assert len(item["action_requests"][0]["args"]["content"]) == MEGABYTE


def test_every_error_under_inbox_is_a_page_of_the_inbox(web: Web) -> None:
    alice = web.token(*ALICE)
    paused = web.run(alice, "refund 10")
    too_big = httpx.post(
        web.url + paused.review_url,
        content=b"csrf=x&d%3A0=approve&v=" + b"x" * 2_000_000,
        headers={"content-type": "application/x-www-form-urlencoded"},
        timeout=60,
    )
    assert too_big.status_code == 413
    assert too_big.headers["content-type"].startswith("text/html")
    assert "Too large to send" in too_big.text and "Nothing was recorded" in too_big.text
    assert 'href="' + paused.review_url + '"' in too_big.text  # back to the review
    wrong_method = httpx.put(web.url + paused.review_url, timeout=30)
    assert wrong_method.status_code == 405 and wrong_method.headers["content-type"].startswith("text/html")
    api = httpx.post(
        web.url + "/handrail/threads/x/interrupts/y/answer", content=b"x" * 2_000_000, timeout=60
    )
    assert api.status_code == 413 and api.headers["content-type"].startswith("application/problem+json")


def test_the_decision_is_in_view_beside_the_arguments_shown_once(web: Web, pages: Any) -> None:
    alice = web.token(*ALICE)
    paused = web.run(alice, "refund 4321")
    page = pages(web, alice, width=1280, height=800)
    visit(page, web.url + paused.review_url)
    box = page.locator("fieldset.decision").bounding_box()
    assert box is not None and box["y"] + box["height"] <= 800, box
    submit = page.get_by_role("button", name="Submit the decision").bounding_box()
    assert submit is not None and submit["y"] + submit["height"] <= 800, submit
    assert page.locator("main").inner_text().count("4321") == 2  # the user's words, the arguments once
    expect(page.locator("section.call .tool-doc")).to_contain_text("Refund a payment, in full or in part.")
    expect(page.locator("section.call")).not_to_contain_text("Tool execution requires approval")
    shoot(page, "review-1280")


def test_no_page_scrolls_sideways_at_390_pixels(web: Web, pages: Any) -> None:
    alice = web.token(*ALICE)
    metadata = {"ticket": {"id": "T-" + "1234567890" * 6, "tags": ["customer-complaint-escalated"] * 4}}
    thread = web.api(alice, "POST", "/threads", json={"metadata": metadata}).json()["thread_id"]
    body = {"assistant_id": "web", "input": {"messages": [{"role": "user", "content": "two"}]}}
    values = web.api(alice, "POST", f"/threads/{thread}/runs/wait", json=body).json()
    review_url = f"/inbox/reviews/{thread}/{values['__interrupt__'][0]['id']}"
    page = pages(web, alice, width=390, height=844)
    for name, path in (("inbox", "/inbox"), ("review", review_url), ("thread", f"/inbox/threads/{thread}")):
        visit(page, web.url + path)
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 390, (path, width)
        shoot(page, f"{name}-390")


def test_bulk_is_confirmed_first_and_says_what_each_recorded(web: Web, pages: Any) -> None:
    alice = web.token(*ALICE)
    paused = [web.run(alice, f"write /tmp/confirm-{i} part {i}") for i in range(2)]
    several = web.run(alice, "two")
    page = pages(web, alice)
    visit(page, web.url + "/inbox")
    row = page.locator(f"tr.row[data-interrupt='{several.interrupt_id}']")
    expect(row.get_by_role("checkbox")).to_have_count(0)
    expect(row).to_contain_text("reviews of several tools are answered on their page")
    for p in paused:
        page.locator(f"tr.row[data-interrupt='{p.interrupt_id}']").get_by_role("checkbox").check()
    page.get_by_role("button", name="Approve ticked").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Approve these 2 reviews?")
    expect(page.locator("main")).to_contain_text('path: "/tmp/confirm-0"')
    assert all(answers(web, alice, p.thread_id) == [] for p in paused)  # nothing yet
    assert accessible(page) == []
    page.get_by_role("button", name="Approve 2 reviews").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Approved 2 of 2 reviews of write_file")
    results = page.locator("ul.results li")
    expect(results.first).to_contain_text(
        re.compile(r"Recorded: approved by alice at \d\d:\d\d UTC through web")
    )
    expect(results.first.get_by_role("link", name="What ran")).to_have_attribute(
        "href", re.compile(r"/decided$")
    )
    assert all(len(answers(web, alice, p.thread_id)) == 1 for p in paused)


def test_an_answer_from_a_second_tab_of_the_same_reviewer_says_so(web: Web, pages: Any) -> None:
    alice = web.token(*ALICE)
    paused = web.run(alice, "refund 77")
    page = pages(web, alice)
    other = page.context.new_page()
    for tab in (page, other):
        visit(tab, web.url + paused.review_url)
        tab.get_by_label("Approve").check()
    page.get_by_role("button", name="Submit the decision").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Recorded")
    other.evaluate("document.getElementById('answer-form').requestSubmit()")
    expect(other.get_by_role("heading", level=1)).to_have_text("You already answered this")
    expect(other.get_by_role("alert").first).to_contain_text(
        re.compile(r"You already answered this review in another tab or session at \d\d:\d\d UTC")
    )


def test_emoji_sequences_show_as_emoji_and_audit_numbers_are_explained(web: Web, pages: Any) -> None:
    alice = web.token(*ALICE)
    paused = web.run(alice, "emoji")
    page = pages(web, alice)
    visit(page, web.url + paused.review_url)
    text = page.locator("section.call pre.json").inner_text()
    assert "\U0001f469\u200d\U0001f4bb \u2014 \U0001f44d" in text and "\\u200d" not in text, text
    page.get_by_label("Edit").check()
    page.get_by_label(re.compile(r"^path")).fill("/tmp/emoji-2")
    page.get_by_role("button", name="Submit the decision").click()
    page.get_by_role("button", name="Confirm and submit").click()
    expect(page.locator("#outcome .result")).to_contain_text("wrote", timeout=10000)
    expect(page.locator("#outcome .outcome")).not_to_contain_text("Note: a human reviewer")
    visit(page, f"{web.url}/inbox/threads/{paused.thread_id}")
    expect(page.get_by_role("columnheader", name="Log event")).to_be_visible()
    expect(page.locator("#audit-hint")).to_contain_text(
        re.compile(r"numbered by its place in the thread's log of \d+ events")
    )
    expect(page.locator(".audit td.seq").first).to_contain_text(re.compile(r"#\d+ of \d+"))
    for shown in (page.locator(".msg-tool"), page.locator(".audit")):  # the model's own words may quote it
        expect(shown).not_to_contain_text("\\u2014")
        expect(shown).not_to_contain_text("Note: a human reviewer")
