"""The FastAPI application: routers, the web inbox's pages, problem details, the body limit.

Example::

    from handrail.server import create_app
    app = create_app({"agent": agent}, db=ServerDB.open(db_path="handrail.db"))
"""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from handrail.agent import Agent
from handrail.server import events, pages, reviews, runs, threads
from handrail.server.db import ServerDB
from handrail.server.problems import BodyLimit, install
from handrail.server.runs import RunRegistry
from handrail.server.service import Service

__all__ = ["create_app"]


def create_app(agents: Mapping[str, Agent], *, db: ServerDB, max_body: int = 1024 * 1024) -> FastAPI:
    """The service's ASGI app for ``agents`` (assistant id -> agent, each with its store)."""
    for name, agent in agents.items():
        if agent.checkpointer is None:
            raise ValueError(f"agent {name!r} has no checkpointer: the service keeps threads in a store")
    service = Service(dict(agents), db)
    registry = RunRegistry(service.events)
    service.runs = registry

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        stores: dict[int, Any] = {id(a.checkpointer): a.checkpointer for a in agents.values()}
        for store in stores.values():
            result = store.setup() if hasattr(store, "setup") else None  # idempotent
            if inspect.isawaitable(result):
                await result
        yield
        for run in list(registry.active.values()):
            if run.task is not None:
                run.task.cancel()

    app = FastAPI(
        lifespan=lifespan,
        title="handrail",
        summary="Reviewed tool calls: a LangGraph Platform API subset and the reviewers' inbox",
        version="0.1.0",
    )
    app.state.service = service
    install(app)
    app.include_router(threads.router)
    app.include_router(runs.router)
    app.include_router(reviews.router)
    app.include_router(events.router)
    pages.install(app)  # the web inbox, under /inbox

    @app.get("/ok", tags=["meta"])
    async def ok() -> dict[str, bool]:
        """Liveness (no credential needed)."""
        return {"ok": True}

    @app.get("/info", tags=["meta"])
    async def info() -> dict[str, object]:
        """What this server is (no credential needed), as LangGraph's ``/info``."""
        return {
            "version": "0.1.0",
            "handrail": True,
            "pid": os.getpid(),
            "flags": {"assistants": True, "crons": False},
        }

    app.add_middleware(BodyLimit, limit=max_body)
    return app
