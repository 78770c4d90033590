"""Signing in and out: with a token, or with a one-time link from ``handrail tokens link NAME``.

``GET /inbox/signin`` shows the form; ``POST /inbox/signin`` checks the token and
starts a session. ``GET /inbox/link/SECRET`` shows who the link signs in and a button:
only the button's ``POST`` uses the link up, so a mail scanner or a chat preview that
fetches the URL does not spend it. ``POST /inbox/signout`` ends the session.
"""

from __future__ import annotations

import secrets
from urllib.parse import unquote

from fastapi import APIRouter, Request
from starlette.responses import Response

from handrail.server._auth import session_credential
from handrail.server.pages._render import (
    check_csrf,
    html,
    read_form,
    redirect,
    render,
    service_of,
    set_cookie,
    visitor,
)
from handrail.server.sessions import PRESESSION_COOKIE, SESSION_COOKIE
from handrail.server.tokens import Credential

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
_PRESESSION_SECONDS = 3600


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a path of the web inbox, never another site."""
    target = unquote(target or "")
    if target.startswith("/inbox") and not target.startswith("//") and "\\" not in target:
        return target
    return "/inbox"


def _presession(request: Request) -> tuple[str, bool]:
    cookie = request.cookies.get(PRESESSION_COOKIE, "")
    if len(cookie) == 43 and cookie.replace("-", "").replace("_", "").isalnum():
        return cookie, False
    return secrets.token_urlsafe(32), True


def _signin_page(
    request: Request, status: int = 200, error: str | None = None, **context: object
) -> Response:
    cookie, new = _presession(request)
    csrf = service_of(request).sessions.presession_csrf(cookie)
    context.setdefault("next", safe_next(request.query_params.get("next")))
    context.update(title="Sign in", csrf=csrf, error=error, me=None)
    response = render(request, "signin.html", status, **context)
    if new:
        set_cookie(request, response, PRESESSION_COOKIE, cookie, _PRESESSION_SECONDS)
    return response


def _check_presession(request: Request, form: dict[str, list[str]]) -> None:
    cookie = request.cookies.get(PRESESSION_COOKIE, "")
    check_csrf(request, form, service_of(request).sessions.presession_csrf(cookie) if cookie else "-")


def _start(request: Request, credential: Credential, to: str) -> Response:
    cookie = service_of(request).sessions.start(credential)
    response = redirect(request, to)
    set_cookie(request, response, SESSION_COOKIE, cookie, int(service_of(request).sessions.session_seconds))
    response.delete_cookie(PRESESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response


@router.get("/inbox/signin")
@html
async def signin_form(request: Request) -> Response:
    """The sign-in form (straight to the inbox when signed in already)."""
    if session_credential(request) is not None:
        return redirect(request, safe_next(request.query_params.get("next")))
    signed_out = request.query_params.get("signed_out") == "1"
    return _signin_page(request, signed_out=signed_out)


@router.post("/inbox/signin")
@html
async def signin(request: Request) -> Response:
    """Check the token; start a session."""
    form = await read_form(request)
    _check_presession(request, form)
    token = (form.get("token") or [""])[-1].strip()
    to = safe_next((form.get("next") or [""])[-1])
    credential = service_of(request).tokens.verify(token) if token else None
    if credential is None:
        why = "Enter your token." if not token else "That token is unknown, malformed or revoked."
        return _signin_page(request, 401, error=why, next=to, signed_out=False)
    return _start(request, credential, to)


@router.post("/inbox/signout")
@html
async def signout(request: Request) -> Response:
    """End the session."""
    me = visitor(request)
    form = await read_form(request)
    check_csrf(request, form, me.csrf)
    service_of(request).sessions.end(request.cookies.get(SESSION_COOKIE))
    response = redirect(request, "/inbox/signin?signed_out=1")
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response


@router.get("/inbox/link/{secret}")
@html
async def link_page(request: Request, secret: str) -> Response:
    """Who a one-time link signs in, and the button that does it."""
    credential = service_of(request).sessions.link_credential(secret)
    if credential is None:
        return _link_gone(request)
    cookie, new = _presession(request)
    csrf = service_of(request).sessions.presession_csrf(cookie)
    response = render(
        request, "link.html", title="Sign in", csrf=csrf, who=credential, secret=secret, me=None
    )
    if new:
        set_cookie(request, response, PRESESSION_COOKIE, cookie, _PRESESSION_SECONDS)
    return response


@router.post("/inbox/link/{secret}")
@html
async def use_link(request: Request, secret: str) -> Response:
    """Use the link up and start a session."""
    form = await read_form(request)
    _check_presession(request, form)
    credential = service_of(request).sessions.redeem(secret)
    if credential is None:
        return _link_gone(request)
    return _start(request, credential, "/inbox")


def _link_gone(request: Request) -> Response:
    return render(
        request,
        "error.html",
        404,
        title="Sign-in link not valid",
        message="This sign-in link is unknown, used already or expired, or its token was revoked. "
        "Ask for a new one ('handrail tokens link NAME'), or sign in with your token.",
        me=None,
    )
