"""The web inbox in a real browser: sign in, live rows, the edit form, decisions, conflicts, bulk,
and two services on one PostgreSQL updating each other's pages live.

One Chromium for the module (``conftest.browser``). Every page these tests open fails its
test on a dialog, a script error or a console error (a CSP violation is one), and is
checked with axe-core (no serious or critical violations).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from conftest import HERE, PG_DSN, Watched, Web, accessible, drop_schema, postgres_schema, serving

ALICE = ("alice", "support")
BOB = ("bob", "dba")
CAROL = ("carol", "ops")


def row(page: Any, interrupt_id: str) -> Any:
    return page.locator(f"tr.row[data-interrupt='{interrupt_id}']")


def visit(page: Any, url: str) -> Any:
    """Open ``url`` and wait for the page's own script to have run."""
    reply = page.goto(url)
    page.wait_for_selector("body[data-ready]")
    return reply


def answered(web: Web, token: str, thread_id: str) -> list[dict[str, Any]]:
    trail = web.api(token, "GET", f"/handrail/threads/{thread_id}/audit").json()
    return [e for e in trail if e["event"] == "answered"]


def test_a_reviewer_signs_in_sees_a_review_arrive_live_edits_it_and_sees_the_result(
    web: Web, pages: Any
) -> None:
    alice = web.token(*ALICE)
    page = pages(web, alice)
    expect(page.get_by_text("Signed in as")).to_contain_text("alice")
    assert accessible(page) == []
    paused = web.run(alice, "refund 4900")
    interrupt_id = paused.interrupt_id
    expect(row(page, interrupt_id)).to_be_visible(timeout=5000)  # no reload
    expect(row(page, interrupt_id)).to_contain_text("amount_cents: 4900")
    assert re.match(r"^\(\d+\+?\) Inbox", page.title())
    row(page, interrupt_id).get_by_role("link").first.click()

    expect(page.get_by_role("heading", level=1)).to_have_text("Review: refund")
    page.wait_for_selector("body[data-ready]")
    assert accessible(page) == []
    page.get_by_label("Edit").check()
    amount = page.get_by_label(re.compile(r"^amount_cents"))
    amount.fill("2500")
    page.get_by_label(re.compile(r"^reason")).select_option(label="other")
    page.get_by_role("button", name="Submit the decision").click()
    diff = page.locator("[data-diff='0'] pre")
    expect(diff).to_contain_text('-   "amount_cents": 4900,')
    expect(diff).to_contain_text('+   "amount_cents": 2500,')
    expect(page.get_by_role("button", name="Confirm and submit")).to_be_visible()
    assert accessible(page) == []
    page.get_by_role("button", name="Confirm and submit").click()

    expect(page.get_by_role("heading", level=1)).to_have_text("Recorded")
    expect(page.get_by_role("status").first).to_contain_text("Recorded: edited by alice")
    result = page.locator("#outcome .result")
    expect(result).to_contain_text("refunded 2500 cents (int) on pay_8812, reason other", timeout=5000)
    expect(page.locator("#outcome")).to_contain_text("The run ended")
    assert accessible(page) == []

    (entry,) = answered(web, alice, paused.thread_id)
    args = entry["value"]["decisions"][0]["edited_action"]["args"]
    assert args["amount_cents"] == 2500 and isinstance(args["amount_cents"], int)
    assert args["reason"] == "other" and "notify" not in args  # left out, as proposed
    assert entry["reviewer"] == {"id": "alice", "roles": ["support"]} and entry["channel"] == "web"


def test_another_reviewer_rejects_with_a_message_and_the_row_leaves_other_pages(web: Web, pages: Any) -> None:
    bob, dana = web.token(*BOB), web.token("dana", "dba")
    paused = web.run(bob, "sql DROP TABLE invoices")
    watcher = pages(web, dana)
    expect(row(watcher, paused.interrupt_id)).to_be_visible()
    looking = pages(web, dana)
    visit(looking, web.url + paused.review_url)
    page = pages(web, bob)
    visit(page, web.url + paused.review_url)
    assert page.get_by_label("Edit").count() == 0  # only the decisions the policy allows
    page.get_by_label("Reject").check()
    page.get_by_label("Message to the model").fill("Not on a Friday.")
    page.get_by_role("button", name="Submit the decision").click()
    expect(page.get_by_role("status").first).to_contain_text("Recorded: rejected by bob")
    expect(page.locator("#outcome")).to_contain_text(
        "User rejected the tool call for `execute_sql` with reason: Not on a Friday.", timeout=5000
    )
    expect(row(watcher, paused.interrupt_id)).to_have_count(0, timeout=5000)  # gone, no reload
    notice = looking.locator("#live-notice")
    expect(notice).to_contain_text("bob just decided this review (through web)", timeout=5000)
    expect(notice.get_by_role("link", name="See what was decided")).to_be_visible()
    (entry,) = answered(web, bob, paused.thread_id)
    assert entry["value"] == {"decisions": [{"type": "reject", "message": "Not on a Friday."}]}


def test_a_reviewer_without_the_role_sees_nothing_and_a_direct_url_is_refused(web: Web, pages: Any) -> None:
    carol, bob = web.token(*CAROL), web.token(*BOB)
    page = pages(web, carol)
    paused = web.run(bob, "sql DELETE FROM sessions")
    page.wait_for_timeout(1000)  # the live stream had its chance to add it
    expect(page.locator("tr.row")).to_have_count(0)
    expect(page.get_by_text("Nothing waits for your review")).to_be_visible()
    reply = page.goto(web.url + paused.review_url)
    assert reply is not None and reply.status == 403
    expect(page.get_by_role("heading", level=1)).to_have_text("Not allowed")
    expect(page.locator("main")).to_contain_text("may not decide tool 'execute_sql': it needs role 'dba'")
    assert accessible(page) == []


def test_two_reviewers_answer_one_review_at_once_and_one_sees_who_was_first(web: Web, pages: Any) -> None:
    bob, erin = web.token(*BOB), web.token("erin", "dba")
    paused = web.run(bob, "sql VACUUM")
    first, second = pages(web, bob), pages(web, erin)
    for page in (first, second):
        visit(page, web.url + paused.review_url)
        page.get_by_label("Approve").check()
    with first.expect_navigation(), second.expect_navigation():
        for page in (first, second):  # both forms sent before either answer comes back
            page.evaluate("document.getElementById('answer-form').requestSubmit()")
    headings = sorted(p.get_by_role("heading", level=1).inner_text() for p in (first, second))
    assert headings == ["Recorded", "Someone else was first"], headings
    loser = first if first.get_by_role("heading", level=1).inner_text() != "Recorded" else second
    winner_name = "bob" if loser is second else "erin"
    expect(loser.get_by_role("alert")).to_contain_text(
        re.compile(
            rf"Already approved by {winner_name} at \d\d:\d\d UTC through web\. Nothing of yours was saved"
        )
    )
    assert accessible(loser) == []
    assert len(answered(web, bob, paused.thread_id)) == 1


def test_bulk_approve_of_three_reviews_of_one_tool(web: Web, pages: Any) -> None:
    alice = web.token(*ALICE)
    paused = [web.run(alice, f"write /tmp/bulk-{i} part {i}") for i in range(3)]
    other = web.run(alice, "refund 100")
    page = pages(web, alice)
    visit(page, web.url + "/inbox?tool=write_file")
    for p in paused:
        row(page, p.interrupt_id).get_by_role("checkbox").check()
    expect(page.locator("#bulk-status")).to_have_text("3 reviews of write_file ticked.")
    page.get_by_role("button", name="Approve ticked").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Approve these 3 reviews?")
    page.get_by_role("button", name="Approve 3 reviews").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Approved 3 of 3 reviews of write_file")
    assert accessible(page) == []
    for p in paused:
        (entry,) = answered(web, alice, p.thread_id)
        assert entry["value"] == {"decisions": [{"type": "approve"}]}  # each its own answer, no grant
        assert entry["channel"] == "web" and entry["reviewer"]["id"] == "alice"
    assert answered(web, alice, other.thread_id) == []


def test_several_calls_of_one_review_are_answered_together_in_one_submit(web: Web, pages: Any) -> None:
    alice = web.token(*ALICE)
    paused = web.run(alice, "two")
    page = pages(web, alice)
    visit(page, web.url + paused.review_url)
    calls = page.locator("section.call")
    expect(calls).to_have_count(2)
    calls.nth(0).get_by_label("Approve").check()
    calls.nth(1).get_by_label("Reject").check()
    calls.nth(1).get_by_label("Message to the model").fill("the ledger is written by the refund job")
    page.get_by_role("button", name="Submit all 2 decisions").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Recorded")
    expect(page.locator("#outcome .result").first).to_contain_text("refunded 700 cents", timeout=5000)
    (entry,) = answered(web, alice, paused.thread_id)
    assert entry["value"] == {
        "decisions": [
            {"type": "approve"},
            {"type": "reject", "message": "the ledger is written by the refund job"},
        ]
    }


def test_the_library_refusal_is_shown_and_nothing_typed_is_lost(web: Web, pages: Any) -> None:
    alice = web.token(*ALICE)
    paused = web.run(alice, "archive /srv/old.log")
    page = pages(web, alice)
    visit(page, web.url + paused.review_url)
    page.get_by_label("Edit").check()
    page.get_by_label(re.compile("^path")).fill("/home/alice/notes.txt")
    page.get_by_role("button", name="Submit the decision").click()
    page.get_by_role("button", name="Confirm and submit").click()
    expect(page.locator("#form-error")).to_contain_text("only files under /srv/ may be archived")
    expect(page.get_by_label(re.compile("^path"))).to_have_value("/home/alice/notes.txt")
    expect(page.get_by_label("Edit")).to_be_checked()
    assert accessible(page) == []
    assert answered(web, alice, paused.thread_id) == []


def test_the_page_checks_the_schema_and_a_response_needs_a_message(web: Web, pages: Any) -> None:
    alice = web.token(*ALICE)
    paused = web.run(alice, "refund 300")
    page = pages(web, alice)
    visit(page, web.url + paused.review_url)
    page.get_by_label("Edit").check()
    page.get_by_label(re.compile(r"^amount_cents")).fill("")
    page.get_by_role("button", name="Submit the decision").click()
    expect(page.locator(".field.invalid .field-error")).to_contain_text("enter a whole number")
    assert page.url.endswith(paused.review_url)  # nothing was sent
    page.get_by_label("Respond").check()
    page.get_by_role("button", name="Submit the decision").click()
    expect(page.locator("[data-message] .field-error")).to_contain_text("A response needs a message")
    assert answered(web, alice, paused.thread_id) == []


def test_untrusted_content_is_shown_as_text_and_never_runs(web: Web, pages: Any) -> None:
    alice = web.token(*ALICE)
    payload = '<script>alert(1)</script><img src=x onerror="window.pwned=1"> javascript:alert(2) \u202eevil'
    paused = web.run(alice, f"write /tmp/<b>x</b> {payload}")
    page = pages(web, alice)  # any dialog or script error fails the test
    for path in ("/inbox", paused.review_url, f"/inbox/threads/{paused.thread_id}"):
        page.goto(web.url + path)
        expect(page.locator("main")).to_contain_text("<script>alert(1)</script>")
        expect(page.locator("main")).to_contain_text("\\u202e")  # the override is shown, not obeyed
        assert page.evaluate("() => window.pwned") is None
        assert page.locator("main script:not([type='application/json'])").count() == 0
        assert page.locator("main img").count() == 0 and page.locator("main b").count() == 0
        assert page.locator("a[href^='javascript:']").count() == 0
        assert accessible(page) == []
    visit(page, web.url + paused.review_url)
    page.get_by_label("Approve").check()
    page.get_by_role("button", name="Submit the decision").click()
    expect(page.locator("#outcome")).to_contain_text("wrote", timeout=5000)
    assert page.evaluate("() => window.pwned") is None


def test_forms_need_their_csrf_token(web: Web, pages: Any, browser: Any) -> None:
    alice = web.token(*ALICE)
    paused = web.run(alice, "write /tmp/csrf x")
    page = pages(web, alice)
    visit(page, web.url + paused.review_url)
    page.get_by_label("Approve").check()
    page.evaluate("document.querySelector('#answer-form input[name=csrf]').value = 'forged'")
    page.get_by_role("button", name="Submit the decision").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Not allowed")
    expect(page.locator("main")).to_contain_text("This form expired or came from another site")
    # A page of another site posting to the service: no session cookie goes with it (SameSite).
    other = page.context.new_page()
    other.set_content(
        f"<form method=post action='{web.url}{paused.review_url}'><input name=d:0 value=approve>"
        "<button>go</button></form>"
    )
    other.click("button")
    other.wait_for_load_state()
    assert answered(web, alice, paused.thread_id) == []


def test_keyboard_moves_decides_and_helps(web: Web, pages: Any) -> None:
    alice = web.token(*ALICE)
    web.run(alice, "write /tmp/keys-1 a")
    page = pages(web, alice)
    page.goto(web.url + "/inbox?tool=write_file&order=newest")
    page.wait_for_selector("body[data-ready]")
    page.keyboard.press("?")
    expect(page.get_by_role("dialog", name="Keyboard shortcuts")).to_be_visible()
    assert accessible(page) == []
    page.keyboard.press("Escape")
    page.keyboard.press("j")
    expect(page.locator("tr.row.current")).to_have_count(1)
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", level=1)).to_have_text("Review: write_file")
    page.wait_for_selector("body[data-ready]")
    page.keyboard.press("e")
    expect(page.get_by_label("Edit")).to_be_checked()
    page.locator("body").click(position={"x": 5, "y": 300})
    page.keyboard.press("a")
    expect(page.get_by_label("Approve")).to_be_checked()
    expect(page.get_by_role("button", name="Submit the decision")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", level=1)).to_have_text("Recorded")


def test_phone_width_pages_fit_and_pass_the_accessibility_check(web: Web, pages: Any) -> None:
    alice = web.token(*ALICE)
    paused = web.run(alice, "refund 1200")
    page = pages(web, alice, width=390, height=844)
    for path in ("/inbox", paused.review_url, f"/inbox/threads/{paused.thread_id}"):
        page.goto(web.url + path)
        if path == paused.review_url:
            page.wait_for_selector("body[data-ready]")
            page.get_by_label("Edit").check()
        assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth"), path
        assert accessible(page) == [], path


def test_a_one_time_link_signs_in_once_and_signing_out_ends_the_session(web: Web, browser: Any) -> None:
    web.token(*ALICE)
    done = subprocess.run(
        [sys.executable, "-m", "handrail", "tokens", "link", "alice", "--url", web.url, *web.flags],
        cwd=HERE,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    link = done.stdout.strip().splitlines()[-1]
    assert link.startswith(f"{web.url}/inbox/link/")
    context = browser.new_context()
    try:
        page = context.new_page()
        watched = Watched(page)
        page.goto(link)
        assert accessible(page) == []
        page.get_by_role("button", name="Sign in as alice").click()
        expect(page.get_by_role("heading", level=1)).to_have_text("Inbox")
        cookie = next(c for c in context.cookies() if c["name"] == "handrail_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and not cookie["secure"]  # plain http
        events = page.evaluate("async () => (await fetch('/handrail/inbox')).status")
        assert events == 200  # the session is a credential for the API's reads
        page.get_by_role("button", name="Sign out").click()
        expect(page.get_by_text("You are signed out.")).to_be_visible()
        assert accessible(page) == []
        assert page.evaluate("async () => (await fetch('/handrail/inbox')).status") == 401
        reply = page.goto(link)
        assert reply is not None and reply.status == 404  # used up
        assert watched.problems == []
    finally:
        context.close()


# Two services on one PostgreSQL: live across processes (SPEC §5.3) ---------------------------
LIVE_WITHIN = 1.0


@pytest.fixture(scope="module")
def two(browser: Any) -> Iterator[tuple[Web, Web]]:
    schema = postgres_schema()
    flags = ["--postgres", PG_DSN, "--schema", schema]
    try:
        with serving(flags) as first, serving(flags) as second:
            shared: dict[str, str] = {}
            yield (
                Web(first, flags, schema=schema, tokens=shared),
                Web(second, flags, schema=schema, tokens=shared),
            )
    finally:
        drop_schema(schema)


@pytest.mark.parametrize("direction", ["first to second", "second to first"])
def test_a_review_saved_through_one_service_appears_on_the_others_page_within_a_second(
    two: tuple[Web, Web], pages: Any, direction: str
) -> None:
    saver, watcher = two if direction == "first to second" else two[::-1]
    token = watcher.token("alice", "support")
    page = pages(watcher, token)
    page.wait_for_selector("body[data-ready]")
    page.wait_for_timeout(300)  # the page's live stream is open
    paused = saver.run(token, "refund 4200")
    saved = time.monotonic()
    row = page.locator(f"tr.row[data-interrupt='{paused.interrupt_id}']")
    expect(row).to_be_visible(timeout=int(LIVE_WITHIN * 1000))
    took = time.monotonic() - saved
    assert took < LIVE_WITHIN, took
    # ... and an answer through the first service takes it off the page of the second as fast.
    answer = {"answer": {"decisions": [{"type": "approve"}]}}
    path = f"/handrail/threads/{paused.thread_id}/interrupts/{paused.interrupt_id}/answer"
    assert saver.api(token, "POST", path, json=answer).status_code == 202
    decided = time.monotonic()
    expect(row).to_have_count(0, timeout=int(LIVE_WITHIN * 1000))
    took = time.monotonic() - decided
    assert took < LIVE_WITHIN, took
