"""Who is calling: every request needs a valid credential (SPEC rule 12: deny by default).

A token comes as ``Authorization: Bearer <token>`` or, for the LangGraph SDKs,
``x-api-key: <token>``. The identity handrail records for an answer is the token's
(rule 11); nothing in a request body can name another one.

A browser signed in to the web inbox holds a session cookie instead (``sessions.py``).
The pages read it (:func:`session_credential`), and so do the API's reads - ``GET``
and ``HEAD`` only, such as the live inbox ``GET /handrail/events`` that a page's
``EventSource`` opens without headers. A write through the JSON API always needs a
token: a cookie alone never changes anything there (the pages' own forms carry a CSRF
token as well).
"""

from __future__ import annotations

import asyncio

from fastapi import Request

from handrail.server._problems import Problem
from handrail.server.sessions import SESSION_COOKIE
from handrail.server.tokens import Credential

__all__ = ["RECHECK_SECONDS", "caller", "recheck", "session_credential"]

RECHECK_SECONDS = 0.5
"""How often a live stream checks its credential again, against its row (not the copy a
process trusts for a second): a revoked token or an ended session closes it within about
this long, whichever process revoked it."""

_READS = frozenset({"GET", "HEAD"})


def session_credential(request: Request) -> Credential | None:
    """The credential of the request's session cookie, if it has a live one."""
    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie:
        return None
    found = request.app.state.service.sessions.credential(cookie)
    assert found is None or isinstance(found, Credential)
    return found


async def recheck(request: Request) -> Credential | None:
    """The request's credential as it stands now, or None when it was revoked or its
    session ended (what a live stream asks every :data:`RECHECK_SECONDS`)."""
    header = request.headers.get("authorization", "")
    token = header[7:].strip() if header[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
    service = request.app.state.service
    if token:
        found = await asyncio.to_thread(service.tokens.verify, token)
    else:
        cookie = request.cookies.get(SESSION_COOKIE)
        found = await asyncio.to_thread(service.sessions.credential, cookie) if cookie else None
    return found if isinstance(found, Credential) else None


async def caller(request: Request) -> Credential:
    """The credential of the request (a FastAPI dependency); 401 without a valid one.

    A token this process verified a moment ago costs nothing; another is checked against
    its row in a worker thread, off the event loop.
    """
    header = request.headers.get("authorization", "")
    token = header[7:].strip() if header[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
    if not token:
        signed_in = session_credential(request) if request.method in _READS else None
        if signed_in is not None:
            return signed_in
        raise Problem(
            401,
            "this service needs a credential: send 'Authorization: Bearer <token>' or 'x-api-key: <token>' "
            "(create one with 'handrail tokens create --name NAME --role ROLE')",
            headers={"WWW-Authenticate": "Bearer"},
        )
    tokens = request.app.state.service.tokens
    credential = tokens.remembered(token) or await asyncio.to_thread(tokens.verify, token)
    if credential is None:
        raise Problem(
            401, "the credential is unknown, malformed or revoked", headers={"WWW-Authenticate": "Bearer"}
        )
    assert isinstance(credential, Credential)
    return credential
