"""Where the gateway listens: stdio for a client that launches it, or streamable HTTP.

The rules:

- The gateway is a service of its own, on its store and its service tables: the
  reviewer side (the API, the web inbox, Slack actions, notifications, the sweeper and
  the worker that runs answered calls) is ``handrail serve``'s app for the gateway's one
  agent (``create_app``, threads bound to no agent left alone).
- Over HTTP one port serves both: ``/mcp`` is the MCP endpoint, everything else the
  reviewer side. ``/mcp`` needs a handrail token of scope ``run`` as a bearer token
  (``Authorization: Bearer hr_...``): none or a bad one is a 401, one without ``run`` a
  403, and the MCP session is never opened. The token's identity starts the review
  (it is the run's starter for self-approval, SPEC rule 13).
- Over stdio the MCP wire is stdin and stdout, and nothing else is written to stdout;
  the reviewer side listens on ``review_port`` (127.0.0.1) when one is given, and the
  worker and sweeper run in the process either way.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from starlette.applications import Starlette
from starlette.routing import Mount, Route

from handrail.mcp.gateway import Gateway
from handrail.server.db import ServerDB

__all__ = ["BearerGuard", "http_app", "review_app", "run_stdio"]

log = logging.getLogger("handrail.mcp")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def review_app(gateway: Gateway, db: ServerDB, *, public_url: str, **options: Any) -> Any:
    """The reviewer side of the gateway (``handrail serve``'s app for its agent)."""
    from handrail.server.app import create_app

    app = create_app(
        {gateway.name: gateway.agent},
        db=db,
        public_url=public_url,
        unbound=False,
        sweep_every=options.pop("sweep_every", 5.0),
        **options,
    )
    app.state.service.worker.finished.append(gateway.finished)
    return app


class BearerGuard:
    """``inner`` behind a handrail token of scope ``run`` (401 without one, 403 without ``run``).

    An ASGI app object (not a function), so that a ``Route`` passes it every method."""

    def __init__(self, inner: ASGIApp, tokens: Any) -> None:
        self.inner = inner
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        inner, tokens = self.inner, self.tokens
        if scope["type"] != "http":
            await inner(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        given = headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        credential = None
        if scheme.lower() == "bearer" and token.strip():
            token = token.strip()
            credential = tokens.remembered(token) or await asyncio.to_thread(tokens.verify, token)
        if credential is None:
            await _refuse(
                send, 401, "a handrail token of scope 'run' is needed: Authorization: Bearer hr_..."
            )
            return
        if not credential.has("run"):
            await _refuse(send, 403, f"token {credential.name!r} lacks the 'run' scope that /mcp needs")
            return
        scope.setdefault("state", {})["handrail_credential"] = credential
        await inner(scope, receive, send)


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = ('{"detail": "' + detail.replace('"', "'") + '"}').encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="handrail"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def http_app(gateway: Gateway, db: ServerDB, *, host: str, public_url: str, **options: Any) -> Starlette:
    """One ASGI app: ``/mcp`` (the MCP endpoint, behind a token) and the reviewer side."""
    server = gateway.mcp_server()
    server.streamable_http_app(streamable_http_path="/mcp", host=host)  # makes its session manager
    manager = server.session_manager
    reviewers = review_app(gateway, db, public_url=public_url, **options)
    endpoint = BearerGuard(StreamableHTTPASGIApp(manager), reviewers.state.service.tokens)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with reviewers.router.lifespan_context(reviewers), manager.run():
            yield

    return Starlette(routes=[Route("/mcp", endpoint=endpoint), Mount("/", app=reviewers)], lifespan=lifespan)


async def run_stdio(
    gateway: Gateway, db: ServerDB, *, public_url: str, review_sock: socket.socket | None = None
) -> None:
    """Serve one client over stdin and stdout until it closes them."""
    import uvicorn

    reviewers = review_app(gateway, db, public_url=public_url)
    server = gateway.mcp_server()
    web: uvicorn.Server | None = None
    async with anyio.create_task_group() as group:
        if review_sock is not None:
            web = uvicorn.Server(uvicorn.Config(reviewers, log_level="warning", lifespan="on"))
            group.start_soon(lambda: web.serve(sockets=[review_sock]))
            while not web.started:
                await anyio.sleep(0.01)
            context: Any = _nothing()
        else:
            context = reviewers.router.lifespan_context(reviewers)
        async with context, stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        if web is not None:
            web.should_exit = True


@asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield
