"""How every page is made: the templates, the security headers, sessions, forms and errors.

Each page route is wrapped by :func:`html`: errors become plain pages (never a 500 for
a client's mistake, never a JSON body in a browser), a route that needs a reviewer gets
one from the session cookie or sends the browser to sign in, and every response carries
the same headers - a Content-Security-Policy that allows only the service's own
scripts and styles (no ``unsafe-inline``), no framing, no referrer to other sites (a sign-in link's
secret never leaks), no caching of pages that hold reviews, and ``Server-Timing``
(how long the page took to make, which the benchmark reads).

Templates are Jinja2 with autoescaping on every template: a value is text unless it
went through :mod:`~handrail.server.pages._markup`, which builds markup from escaped
pieces only.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

import starlette.staticfiles
from fastapi import Request
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.responses import HTMLResponse, RedirectResponse, Response

from handrail._message_display import reviewer_content
from handrail.errors import (
    ConflictError,
    HandrailError,
    InvalidDecisionError,
    InvalidInputError,
    NotAllowedError,
    PendingInterruptError,
)
from handrail.server._auth import session_credential
from handrail.server._problems import Problem, _TooLarge
from handrail.server._service import Service
from handrail.server.pages import _markup as markup
from handrail.server.sessions import SESSION_COOKIE
from handrail.server.tokens import Credential

__all__ = [
    "CSP",
    "STATIC",
    "SignInNeeded",
    "StaticFiles",
    "Visitor",
    "check_csrf",
    "error_page",
    "html",
    "path_part",
    "raw_url",
    "read_form",
    "render",
    "secure",
    "service_of",
    "session_visitor",
    "set_cookie",
    "visitor",
]

log = logging.getLogger("handrail.server")

HERE = Path(__file__).resolve().parent.parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
}
_MAX_FIELDS = 5000


def path_part(value: Any) -> str:
    """``value`` quoted as one segment of a URL path (nothing left that means something)."""
    return quote(str(value), safe="")


def raw_url(thread_id: str, source: str) -> str:
    """The raw view (``_raw.py``) of ``source`` (``e<seq>`` or ``m<n>``) of a thread; pages add ``&path=``."""
    return f"/inbox/threads/{path_part(thread_id)}/raw?at={quote(source, safe='')}"


def static_url(name: str) -> str:
    """The URL of one of the pages' static files (scripts import each other by these names)."""
    return f"/inbox/static/{name}"


class StaticFiles(starlette.staticfiles.StaticFiles):
    """The pages' scripts, styles and icon: checked again on each use (a new version is never
    mixed with an old one), never taken for another type."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers["Cache-Control"] = "no-cache"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        highlight=markup.highlight_json,
        fold_text=markup.fold_text,
        reviewer_content=reviewer_content,
        visible=markup.visible,
        summary=markup.summary,
        one_line=markup.one_line,
        clock=markup.clock,
        age=markup.age,
        json=markup.json_text,
        part=path_part,
    )
    env.globals.update(static=static_url, line_diff=markup.line_diff, raw_url=raw_url)
    return env


ENV = _environment()


class SignInNeeded(Exception):
    """The page needs a signed-in reviewer and the request has no live session."""


@dataclass(frozen=True, slots=True)
class Visitor:
    """A signed-in reviewer: their credential and their forms' CSRF token."""

    credential: Credential
    csrf: str

    @property
    def name(self) -> str:
        """Who is signed in."""
        return self.credential.name


def service_of(request: Request) -> Service:
    """The service the request reached."""
    service = request.app.state.service
    assert isinstance(service, Service)
    return service


def visitor(request: Request) -> Visitor:
    """The signed-in reviewer of the request; :class:`SignInNeeded` without one."""
    credential = session_credential(request)
    if credential is None:
        raise SignInNeeded()
    cookie = request.cookies[SESSION_COOKIE]
    return Visitor(credential, service_of(request).sessions.csrf(cookie))


def session_visitor(request: Request) -> Visitor | None:
    """The signed-in reviewer of the request, or None."""
    try:
        return visitor(request)
    except SignInNeeded:
        return None


def render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """The page ``template`` with ``context``, and the headers every page has."""
    body = ENV.get_template(template).render(request=request, **context)
    response = HTMLResponse(body, status_code=status)
    secure(request, response)
    return response


def secure(request: Request, response: Response) -> None:
    """Add the headers every page has (and how long it took to make) to ``response``."""
    response.headers.update(_HEADERS)
    started = getattr(request.state, "page_started", None)
    if started is not None:
        response.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.2f}"


def redirect(request: Request, to: str) -> Response:
    """A 303 to ``to`` (a path of this service)."""
    response = RedirectResponse(to, status_code=303)
    secure(request, response)
    return response


def set_cookie(request: Request, response: Response, name: str, value: str, max_age: int | None) -> None:
    """Set an HttpOnly, SameSite=Strict cookie, Secure when the request came over TLS."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


async def read_form(request: Request) -> dict[str, list[str]]:
    """A submitted form (``application/x-www-form-urlencoded``) as name -> values."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = await request.body()
    if not body and not kind:
        return {}
    if kind != "application/x-www-form-urlencoded":
        raise Problem(400, "this page takes a form (application/x-www-form-urlencoded)")
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=_MAX_FIELDS)
    except (UnicodeDecodeError, ValueError):
        raise Problem(400, "the form could not be read (not UTF-8, or too many fields)") from None
    form: dict[str, list[str]] = {}
    for name, value in pairs:
        form.setdefault(name, []).append(value)
    return form


def check_csrf(request: Request, form: dict[str, list[str]], expected: str) -> None:
    """Refuse (403) a form without the page's CSRF token, or sent from another site.

    Besides the token: a browser's ``Sec-Fetch-Site: cross-site``, or an ``Origin`` whose
    host is not the request's ``Host``, is refused. The scheme is not compared: behind a
    proxy that ends TLS the service may see http where the browser saw https.
    """
    origin = request.headers.get("origin")
    cross = request.headers.get("sec-fetch-site") == "cross-site"
    elsewhere = origin is not None and urlsplit(origin).netloc != request.headers.get("host", "")
    sent = (form.get("csrf") or [""])[-1]
    if cross or elsewhere or not _same(expected, sent):
        raise Problem(
            403,
            "This form expired or came from another site, so nothing was done. "
            "Reload the page and try again.",
        )


def _same(expected: str, sent: str) -> bool:
    from handrail.server.sessions import SessionStore

    return SessionStore.matches(expected, sent)


def error_page(
    request: Request, status: int, message: str, signed_in: Visitor | None = None, *, back: str | None = None
) -> HTMLResponse:
    """A plain page that says what went wrong (with ``back``: a link to the page to go back to)."""
    titles = {
        400: "Not understood",
        401: "Sign in",
        403: "Not allowed",
        404: "Not found",
        405: "Not understood",
        409: "Conflict",
        413: "Too large to send",
        422: "Not accepted",
        429: "Too many requests",
    }
    return render(
        request,
        "error.html",
        status,
        title=titles.get(status, "Something went wrong"),
        message=message,
        me=signed_in,
        back=back,
    )


def _status_of(exc: HandrailError) -> int:
    if isinstance(exc, NotAllowedError):
        return 403
    if isinstance(exc, (ConflictError, PendingInterruptError)):
        return 409
    if isinstance(exc, (InvalidDecisionError, InvalidInputError)):
        return 400
    return 500


Route = Callable[..., Awaitable[Response]]


def html(route: Route) -> Route:
    """Wrap a page route: time it, add the headers, turn every error into a plain page."""

    @functools.wraps(route)
    async def wrapped(request: Request, *args: Any, **kwargs: Any) -> Response:
        request.state.page_started = time.perf_counter()
        try:
            return await route(request, *args, **kwargs)
        except SignInNeeded:
            if request.method in ("GET", "HEAD"):
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return redirect(request, f"/inbox/signin?next={quote(target, safe='')}")
            return error_page(request, 401, "Your session ended. Sign in again, then repeat what you did.")
        except Problem as exc:
            return error_page(request, exc.status, exc.detail, session_visitor(request))
        except _TooLarge:
            raise  # the body limit answers it (413), and HtmlErrors makes that a page
        except HandrailError as exc:
            status = _status_of(exc)
            if status != 500:
                return error_page(request, status, str(exc), session_visitor(request))
            log.exception("page %s %s failed", request.method, request.url.path)
        except Exception:
            log.exception("page %s %s failed", request.method, request.url.path)
        return error_page(request, 500, "The service failed on this page; its log has the details.")

    return wrapped
