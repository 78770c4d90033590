"""Errors under ``/inbox`` are pages of the inbox, whatever answered them.

The pages' own routes turn their errors into pages (``render.html``), but some answers
are made before a route runs: the body limit's 413, the rate limit's 429, a method no
route takes. They are JSON problem details, right for the API and wrong for a browser.
:class:`HtmlErrors` wraps the whole application and, for a path of the web inbox (its
static files aside), makes any problem-details answer the inbox's error page, with
the same status, the same ``Retry-After`` and the problem's own words.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from handrail.server.pages._render import error_page, session_visitor

__all__ = ["HtmlErrors", "is_page_path"]

_ADVICE = {
    413: "Nothing was recorded. A long value can be kept as proposed instead of sent back: "
    "open the review again and choose Edit only for the fields you change.",
    429: "Nothing was done. Wait a moment, then try again.",
}


def is_page_path(path: str) -> bool:
    """Whether ``path`` is a page of the web inbox (its static files are not)."""
    return (path == "/inbox" or path.startswith("/inbox/")) and not path.startswith("/inbox/static/")


class HtmlErrors:
    """ASGI middleware: a problem-details answer to a page of the inbox becomes an HTML page."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_page_path(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        held: Message | None = None
        body: list[bytes] = []

        async def replace(message: Message) -> None:
            nonlocal held
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers") or [])
                if headers.get(b"content-type", b"").startswith(b"application/problem+json"):
                    held = message
                    return
            elif held is not None and message["type"] == "http.response.body":
                body.append(message.get("body", b""))
                if message.get("more_body"):
                    return
                await self._page(scope, held, b"".join(body), send)
                return
            await send(message)

        await self.app(scope, receive, replace)

    async def _page(self, scope: Scope, start: Message, body: bytes, send: Send) -> None:
        status = int(start["status"])
        try:
            problem: Any = orjson.loads(body)
        except orjson.JSONDecodeError:
            problem = {}
        detail = str(problem.get("detail") or "") if isinstance(problem, dict) else ""
        message = " ".join(p for p in (_sentence(detail), _ADVICE.get(status, "")) if p)
        request = Request(scope)
        back = (
            scope["path"]
            if scope.get("method") == "POST" and scope["path"].startswith("/inbox/reviews/")
            else None
        )
        page = error_page(
            request, status, message or "The service could not do this.", session_visitor(request), back=back
        )
        retry = dict(start.get("headers") or []).get(b"retry-after")
        if retry is not None:
            page.headers["Retry-After"] = retry.decode("latin-1")
        await page(scope, _nothing, send)


def _sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


async def _nothing() -> Message:
    return {"type": "http.disconnect"}
