"""Who is calling: every request needs a valid credential (SPEC rule 12: deny by default).

A token comes as ``Authorization: Bearer <token>`` or, for the LangGraph SDKs,
``x-api-key: <token>``. The identity handrail records for an answer is the token's
(rule 11); nothing in a request body can name another one.
"""

from __future__ import annotations

import asyncio

from fastapi import Request

from handrail.server.problems import Problem
from handrail.server.tokens import Credential

__all__ = ["caller"]


async def caller(request: Request) -> Credential:
    """The credential of the request (a FastAPI dependency); 401 without a valid one.

    A token this process verified a moment ago costs nothing; another is checked against
    its row in a worker thread, off the event loop.
    """
    header = request.headers.get("authorization", "")
    token = header[7:].strip() if header[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
    if not token:
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
