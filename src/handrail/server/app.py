"""The FastAPI application: routers, the web inbox's pages, problem details, the limits.

Example::

    from handrail.server import create_app
    app = create_app({"agent": agent}, db=ServerDB.open(db_path="handrail.db"))
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from handrail.agent import Agent
from handrail.notify.channels import Channel
from handrail.notify.config import NotifySettings, apply_settings
from handrail.notify.deliverer import Deliverer, default_channels
from handrail.notify.outbox import Outbox
from handrail.server import _events as events
from handrail.server import _reviews as reviews
from handrail.server import _runs as runs
from handrail.server import _slack as slack
from handrail.server import _slack_replies as slack_replies
from handrail.server import _threads as threads
from handrail.server import _webhooks as webhooks
from handrail.server import grants, pages
from handrail.server._events import LiveFeed
from handrail.server._limits import RateLimit, RequestGuard
from handrail.server._problems import BodyLimit, install
from handrail.server._registry import RunRegistry
from handrail.server._service import Service
from handrail.server.db import ServerDB
from handrail.sweep import asweep
from handrail.worker import Worker

__all__ = ["create_app"]

log = logging.getLogger("handrail.server")


def create_app(
    agents: Mapping[str, Agent],
    *,
    db: ServerDB,
    max_body: int = 1024 * 1024,
    worker_concurrency: int = 8,
    worker_poll: float = 1.0,
    feed_retention: float = 7 * 24 * 3600.0,
    rate_limit: float | None = None,
    sweep_every: float | None = 30.0,
    notifications: NotifySettings | None = None,
    public_url: str = "http://127.0.0.1:8123",
    deliver_concurrency: int = 16,
    channels: Mapping[str, Channel] | None = None,
    unbound: bool = True,
) -> FastAPI:
    """The service's ASGI app for ``agents`` (assistant id -> agent, each with its store).

    The app runs a :class:`~handrail.worker.Worker` for its agents while it is up: the
    answers recorded through it (and any other queued threads of its agents) run here,
    ``worker_concurrency`` at a time (0: none here; leave them to ``handrail worker``
    processes), looking for work every ``worker_poll`` seconds when nothing wakes it.
    Once an hour it drops the store's feed notices older than ``feed_retention``
    seconds (the live inbox's ``Last-Event-ID`` reaches back that far).

    Request bodies are at most ``max_body`` bytes; JSON, ids and pages are bounded as
    ``limits.py`` says. ``rate_limit``: at most this many requests a second per
    credential (a 429 beyond; :class:`~handrail.server._limits.RateLimit`); None, the
    default: no limit. Every ``sweep_every`` seconds it resolves the reviews of its agents
    that expired unanswered (SPEC rule 15, ``handrail.sweep``); None: never here.

    Notifications (SPEC rule 17, ``docs/notifications.md``): the endpoints of
    ``notifications`` (a policy file's ``[notifications]``) are kept with those added
    over the API, and a deliverer sends to them, ``deliver_concurrency`` at a time (0:
    none here; leave it to ``handrail deliver``), through ``channels`` (default: webhooks,
    email, and Slack once set up). ``public_url`` is where reviewers reach this service:
    the links in what is sent.

    ``unbound=False``: threads bound to no agent are not this service's (by default the
    first agent owns them, as ``handrail.worker`` rule W3 says): the MCP gateway serves
    only its own.
    """
    if sweep_every is not None and not sweep_every > 0:
        raise ValueError(f"sweep_every is a number of seconds above 0 (or None), got {sweep_every!r}")
    if rate_limit is not None and not rate_limit > 0:
        raise ValueError(f"rate_limit is a number of requests a second above 0 (or None), got {rate_limit!r}")
    for name, agent in agents.items():
        if agent.checkpointer is None:
            raise ValueError(f"agent {name!r} has no checkpointer: the service keeps threads in a store")
    service = Service(dict(agents), db)
    service.unbound = unbound
    registry = RunRegistry()
    service.runs = registry
    service.worker = Worker(agents, concurrency=max(1, worker_concurrency), poll=worker_poll, unbound=unbound)
    service.runs_answers = worker_concurrency > 0
    service.public_url = (notifications.public_url if notifications else None) or public_url
    service.outbox = Outbox(db)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        stores: dict[int, Any] = {id(a.checkpointer): a.checkpointer for a in agents.values()}
        for store in stores.values():
            result = store.setup() if hasattr(store, "setup") else None  # idempotent
            if inspect.isawaitable(result):
                await result
        moved = await service.move_thread_rows()  # an older version's threads, into the store
        if moved:
            log.info("moved %d thread(s) created and not run into the store", moved)
        service.live = LiveFeed(service)
        await service.live.start()
        registry.listeners.append(service.live.poke)  # a run that ended wrote notices: read them now
        feed_store = service.live.store
        if notifications is not None:
            start = await feed_store.afeed_end()
            await asyncio.to_thread(apply_settings, service.outbox, notifications, start, db)
        background = [asyncio.create_task(_trim(list(stores.values()), feed_retention, service.outbox))]
        if deliver_concurrency > 0:
            found = channels if channels is not None else await asyncio.to_thread(default_channels, db)
            service.deliverer = Deliverer(
                Outbox(db.another(relaxed=True)),  # its own connection; commits that may be made again
                feed_store,
                public_url=service.public_url,
                channels=found,
                concurrency=deliver_concurrency,
            )
            service.live.listeners.append(service.deliverer.wake)
            background.append(asyncio.create_task(service.deliverer.run()))
        if worker_concurrency:
            background.append(asyncio.create_task(service.worker.run()))
        if sweep_every is not None:
            background.append(asyncio.create_task(_sweep(service, sweep_every)))
        try:
            yield
        finally:
            await slack_replies.settle(5)  # message updates still going after an answer in Slack
            await service.worker.stop()
            await service.live.stop()
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            if service.deliverer is not None and service.deliverer.outbox.db is not db:
                service.deliverer.outbox.db.close()
            for run in list(registry.active.values()):
                if run.task is not None:
                    run.task.cancel()

    # No /docs or /redoc: FastAPI's pages load their scripts from a CDN, which the
    # service's origin must not run. /openapi.json describes the API for any viewer.
    app = FastAPI(
        lifespan=lifespan,
        title="handrail",
        summary="Reviewed tool calls: a LangGraph Platform API subset and the reviewers' inbox",
        version=VERSION,
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = service
    install(app)
    _name_assistants(app, sorted(agents))
    app.include_router(threads.router)
    app.include_router(runs.router)
    app.include_router(reviews.router)
    app.include_router(grants.router)
    app.include_router(webhooks.router)
    app.include_router(events.router)
    app.include_router(slack.router)  # Slack's interactivity requests (404 until handrail slack setup)
    pages.install(app)  # the web inbox, under /inbox

    @app.get("/ok", tags=["meta"])
    async def ok() -> dict[str, bool]:
        """Liveness (no credential needed)."""
        return {"ok": True}

    @app.get("/info", tags=["meta"])
    async def info() -> dict[str, object]:
        """What this server is, as LangGraph's ``/info``: its version, and nothing more
        (no credential is needed to ask)."""
        return {"version": VERSION}

    # Outermost last: the headers on every answer, then the rate, the body's size, NUL in the URL.
    app.add_middleware(RequestGuard)
    app.add_middleware(BodyLimit, limit=max_body)
    if rate_limit is not None:
        app.add_middleware(RateLimit, service=service, rate=rate_limit)
    app.add_middleware(pages.HtmlErrors)  # an error under /inbox is a page, not JSON
    app.add_middleware(ApiHeaders)
    return app


VERSION = "0.1.0"

# What every answer that is not a page of the web inbox carries (the pages set their own,
# ``pages/_render.py``): JSON is never a document to run scripts in or to frame.
_API_HEADERS = [
    (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
]


class ApiHeaders:
    """Give every response a Content-Security-Policy (and ``nosniff``) unless it has one."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [(name, value) for name, value in _API_HEADERS if name not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


def _name_assistants(app: FastAPI, names: list[str]) -> None:
    """Say in the OpenAPI document which assistants a run may name: the agents served here."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        schema = generate()  # cached on the app: named once, in place
        run = schema.get("components", {}).get("schemas", {}).get("RunBody", {})
        assistant = run.get("properties", {}).get("assistant_id")
        if isinstance(assistant, dict):
            assistant["enum"] = names
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


async def _trim(stores: list[Any], retention: float, outbox: Outbox) -> None:
    """Drop old feed notices once an hour (the first time at start); never one that an
    endpoint has not turned into a delivery yet (SPEC rule 17)."""
    while True:
        for store in stores:
            try:
                before = time.time() - retention
                cursors = await asyncio.to_thread(outbox.cursors)
                if cursors:
                    first = await store.aread_feed(str(min(cursors.values())), limit=1)
                    if first:
                        before = min(before, first[0].created_at)
                await store.atrim_feed(before)
            except NotImplementedError:
                pass
            except Exception:
                log.warning("could not trim the feed of %r", store, exc_info=True)
        await asyncio.sleep(3600)


async def _sweep(service: Service, every: float) -> None:
    """The sweeper inside the service: expired reviews resolve, and this worker runs them."""
    while True:
        try:
            if await asweep(service.agents, unbound=service.unbound):
                service.worker.wake()
                if service.live is not None:
                    service.live.poke()
        except Exception:
            log.exception("a sweep of expired reviews failed; the next one tries again")
        await asyncio.sleep(every)
