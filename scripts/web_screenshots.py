"""Screenshots of the web inbox for the docs: the inbox, a review with its edit form and diff, a thread.

Serves ``examples/web_inbox.py`` on a fresh SQLite file, starts its conversations, and
drives Debian's Chromium with Playwright (as the browser tests do) to save
``docs/images/web-inbox.png``, ``web-review-edit.png`` and ``web-thread.png``.

Usage::

    .venv/bin/python scripts/web_screenshots.py [--out docs/images]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import web_inbox  # noqa: E402

HANDRAIL = [sys.executable, "-m", "handrail"]
ARGS = [
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import expect, sync_playwright

    from handrail.checkpoint.sqlite import SqliteSaver
    from handrail.server.db import ServerDB
    from handrail.server.tokens import TokenStore

    with tempfile.TemporaryDirectory() as folder:
        db_path = Path(folder) / "inbox.db"
        SqliteSaver(db_path).close()  # the store's tables first, as 'handrail tokens' does
        db = ServerDB.open(db_path=db_path)
        token = TokenStore(db).create("alice", ["support", "dba"])[1]
        db.close()
        process = subprocess.Popen(
            [*HANDRAIL, "serve", "examples.web_inbox:agent", "--db", str(db_path), "--port", "0"],
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            assert process.stdout is not None
            seen = []
            for line in process.stdout:
                seen.append(line)
                found = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
                if found:
                    break
            else:
                raise SystemExit("handrail serve did not start:\n" + "".join(seen))
            threading.Thread(target=process.stdout.read, daemon=True).start()
            url = found.group(1)
            threads = web_inbox.start_conversations(url, token) + web_inbox.start_conversations(url, token)
            extra = ["--no-sandbox"] if os.geteuid() == 0 else []
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path="/usr/bin/chromium", headless=True, args=[*ARGS, *extra]
                )
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                page.goto(f"{url}/inbox")
                page.get_by_label("Your token").fill(token)
                page.get_by_role("button", name="Sign in").click()
                page.wait_for_selector("body[data-ready]")
                page.screenshot(path=str(args.out / "web-inbox.png"))

                page.get_by_role("link", name=re.compile("^refund")).first.click()
                page.wait_for_selector("body[data-ready]")
                first = page.locator("section.call").first
                first.get_by_label("Edit").check()
                first.get_by_label(re.compile("^amount_cents")).fill("2450")
                first.get_by_label(re.compile("^reason")).select_option(label="goodwill")
                page.locator("section.call").nth(1).get_by_label("Approve").check()
                page.get_by_role("button", name=re.compile("^Submit")).click()
                expect(page.get_by_role("button", name="Confirm and submit")).to_be_visible()
                page.locator("details.conversation").evaluate("d => { d.open = false; }")
                page.set_viewport_size({"width": 1280, "height": 1800})  # the sticky submit bar below it
                first.screenshot(path=str(args.out / "web-review-edit.png"))
                page.get_by_role("button", name="Confirm and submit").click()
                expect(page.locator("#outcome [data-outcome]")).to_have_attribute("data-settled", "true")
                page.set_viewport_size({"width": 1280, "height": 800})
                page.goto(f"{url}/inbox/threads/{threads[0]}")
                page.screenshot(path=str(args.out / "web-thread.png"), full_page=True)
                browser.close()
        finally:
            process.terminate()
            process.wait(30)
    for name in ("web-inbox.png", "web-review-edit.png", "web-thread.png"):
        print(args.out / name)


if __name__ == "__main__":
    main()
