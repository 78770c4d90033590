"""Browser tests of the web inbox: Playwright driving Debian's Chromium, headless.

One Chromium for the browser tests (a module's fixture: Playwright's sync API keeps an
event loop running while it is open, which the asyncio tests of the other modules
could not share), one ``handrail serve`` per module (``web_agent``
on SQLite, or PostgreSQL where a test says so). Each test's pages fail it on any
dialog (``alert`` and the like), uncaught script error or console error - a CSP
violation is one - and :func:`accessible` runs axe-core in a page (no serious or
critical violations).

Without Chromium, Playwright or axe-core the tests skip, except under
``HANDRAIL_REQUIRE_BROWSER=1`` (``.ci/run`` sets it), where they fail.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

HERE = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"
AXE = HERE / "js" / "node_modules" / "axe-core" / "axe.min.js"
ARGS = [
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PG_DSN = os.environ.get("HANDRAIL_TEST_POSTGRES_DSN") or "postgresql://postgres@127.0.0.1:5432/test"


def missing(why: str) -> None:
    if os.environ.get("HANDRAIL_REQUIRE_BROWSER"):
        pytest.fail(f"the browser tests must run here (HANDRAIL_REQUIRE_BROWSER is set): {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium, shared by the module's browser tests."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("Playwright for Python is not installed (pip install -e '.[dev]')")
    if not os.access(CHROMIUM, os.X_OK):
        missing(f"no Chromium at {CHROMIUM} (apt-get install chromium; make test does, as root)")
    if not AXE.is_file():
        missing(f"axe-core is not installed: run 'npm install' in {AXE.parents[2]} (make test does)")
    args = [*ARGS, "--no-sandbox"] if os.geteuid() == 0 else ARGS
    with sync_playwright() as playwright:
        found = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
        yield found
        found.close()


@dataclass(frozen=True)
class Paused:
    """A thread a test started, and the review it paused for."""

    thread_id: str
    interrupt_id: str
    values: dict[str, Any]

    @property
    def review_url(self) -> str:
        return f"/inbox/reviews/{self.thread_id}/{self.interrupt_id}"


@dataclass
class Web:
    """One running ``handrail serve`` of ``web_agent`` and what the tests do with it."""

    url: str
    flags: list[str]
    db_path: Path | None = None
    schema: str | None = None
    tokens: dict[str, str] = field(default_factory=dict)

    def token(self, name: str, *roles: str) -> str:
        """A token for ``name`` (made once per name)."""
        if name not in self.tokens:
            from handrail.server.db import ServerDB
            from handrail.server.tokens import TokenStore

            db = (
                ServerDB.open(postgres=PG_DSN, schema=self.schema)
                if self.schema
                else ServerDB.open(db_path=self.db_path)
            )
            try:
                self.tokens[name] = TokenStore(db).create(name, list(roles), ["run", "review"])[1]
            finally:
                db.close()
        return self.tokens[name]

    def run(self, token: str, text: str, url: str | None = None) -> Paused:
        """Start a thread with the user message ``text``; wait until it pauses (or ends)."""
        base = url or self.url
        headers = {"x-api-key": token}
        thread = httpx.post(f"{base}/threads", json={}, headers=headers, timeout=60).json()["thread_id"]
        body = {"assistant_id": "web", "input": {"messages": [{"role": "user", "content": text}]}}
        reply = httpx.post(f"{base}/threads/{thread}/runs/wait", json=body, headers=headers, timeout=60)
        assert reply.status_code == 200, reply.text
        values = reply.json()
        pending = values.get("__interrupt__") or [{}]
        return Paused(thread, pending[0].get("id", ""), values)

    def api(self, token: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A call to the JSON API with ``token``."""
        return httpx.request(method, self.url + path, headers={"x-api-key": token}, timeout=60, **kwargs)


@contextmanager
def serving(
    flags: list[str], target: str = "web_agent:agent", env: dict[str, str] | None = None
) -> Iterator[str]:
    """A ``handrail serve TARGET`` process (a module of this folder; ``env`` added to its
    environment); yields its URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "handrail", "serve", target, *flags, "--port", "0"],
        cwd=HERE,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            found = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
            if found:
                break
        else:
            raise AssertionError("handrail serve stopped: " + "".join(lines))
        log = Path(tempfile.gettempdir()) / f"handrail-web-serve-{process.pid}.log"

        def keep() -> None:  # what the service printed (its tracebacks), for a failing test to name
            assert process.stdout is not None
            with log.open("w") as out:
                for line in process.stdout:
                    out.write(line)
                    out.flush()

        threading.Thread(target=keep, daemon=True).start()
        print(f"handrail serve's output: {log}")
        yield found.group(1)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory, browser: Any) -> Iterator[Web]:
    """A service on SQLite for the module's tests."""
    db_path = tmp_path_factory.mktemp("web") / "handrail.db"
    flags = ["--db", str(db_path)]
    with serving(flags) as url:
        yield Web(url, flags, db_path=db_path)


def postgres_schema() -> str:
    try:
        import psycopg

        with psycopg.connect(PG_DSN, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        if os.environ.get("HANDRAIL_REQUIRE_POSTGRES"):
            raise
        pytest.skip(f"PostgreSQL at {PG_DSN} is not reachable ({exc})")
    return f"hr_web_{uuid.uuid4().hex[:12]}"


def drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


_STATUS_LOGGED = "Failed to load resource: the server responded with a status of "


class Watched:
    """A page whose dialogs, script errors and console errors are kept, to fail the test."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.problems: list[str] = []
        page.on("dialog", self._dialog)
        page.on("pageerror", lambda error: self.problems.append(f"script error: {error}"))
        page.on("console", self._console)

    def _dialog(self, dialog: Any) -> None:
        self.problems.append(f"a {dialog.type} dialog opened: {dialog.message!r}")
        dialog.dismiss()

    def _console(self, message: Any) -> None:
        # A page answered with an error status (a 403 page, a 409 conflict) is logged as a failed
        # load: not a fault of the page. Anything else - a CSP refusal, a script error - is.
        if message.type == "error" and not message.text.startswith(_STATUS_LOGGED):
            self.problems.append(f"console error: {message.text}")


@pytest.fixture
def pages(browser: Any) -> Iterator[Any]:
    """Make signed-in pages: ``pages(web, token)``; each is checked for problems at the end."""
    contexts: list[Any] = []
    watched: list[Watched] = []

    def open_page(web: Web, token: str, *, width: int = 1280, height: int = 800) -> Any:
        context = browser.new_context(viewport={"width": width, "height": height})
        contexts.append(context)
        page = context.new_page()
        watched.append(Watched(page))
        sign_in(page, web.url, token)
        return page

    yield open_page
    problems = [p for w in watched for p in w.problems]
    for context in contexts:
        context.close()
    assert not problems, problems


def sign_in(page: Any, url: str, token: str) -> None:
    page.goto(f"{url}/inbox")
    page.get_by_label("Your token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{url}/inbox")


def accessible(page: Any) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page (none expected)."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text())  # run by the driver: not an inline script, the CSP stays
    found: list[dict[str, Any]] = page.evaluate(
        """async () => {
            const result = await axe.run(document, {resultTypes: ["violations"]});
            return result.violations
                .filter((v) => v.impact === "serious" || v.impact === "critical")
                .map((v) => ({id: v.id, impact: v.impact, help: v.help,
                              nodes: v.nodes.slice(0, 3).map((n) => n.html)}));
        }"""
    )
    return found
