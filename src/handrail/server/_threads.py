"""Threads and assistants: the LangGraph Platform API's ``/threads`` and ``/assistants``.

Each served agent is an assistant whose ``assistant_id`` and ``graph_id`` are its name.
A thread's status is ``busy`` while a run is alive on it in the store, whichever process
runs it (``_service.py``, rule S4), ``interrupted`` while reviews wait, else ``idle``.
A thread created here is in the store from then on (rule S1). Only the threads of the
agents served here exist for these routes (SPEC rule 21, ``_service.py``): another
agent's thread is a 404, and a search never finds it.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import orjson
from fastapi import APIRouter, Body, Depends, Request
from starlette.responses import Response

from handrail.agent import Agent
from handrail.checkpoint.base import ThreadRecord
from handrail.server._access import OWNER_KEY, claim_owner, require
from handrail.server._auth import caller
from handrail.server._bodies import (
    AssistantSearch,
    CheckpointPath,
    HistoryBody,
    ThreadCreate,
    ThreadPath,
    ThreadSearch,
)
from handrail.server._limits import GuardedRoute
from handrail.server._problems import Problem
from handrail.server._service import Service
from handrail.server.tokens import Credential
from handrail.server.wire import state_of, to_wire

__all__ = ["router"]

router = APIRouter(tags=["threads"], route_class=GuardedRoute)
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC).isoformat()


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data, default=str), status_code=status, media_type="application/json")


def _service(request: Request) -> Service:
    service = request.app.state.service
    assert isinstance(service, Service)
    return service


def _assistant(name: str, agent: Agent) -> dict[str, Any]:
    return {
        "assistant_id": name,
        "graph_id": name,
        "config": {},
        "context": {},
        "created_at": _EPOCH,
        "updated_at": _EPOCH,
        "metadata": {"created_by": "handrail", "tools": sorted(agent.tools)},
        "version": 1,
        "name": name,
        "description": None,
    }


@router.post("/assistants/search")
async def search_assistants(
    request: Request, payload: AssistantSearch | None = Body(None), credential: Credential = Depends(caller)
) -> Response:
    """The served agents, as assistants."""
    query = payload or AssistantSearch()
    query.refuse_extra("assistants search")
    service = _service(request)
    found = [
        _assistant(name, agent)
        for name, agent in service.agents.items()
        if query.graph_id in (None, name) and query.name in (None, name)
    ]
    return _json(found[query.offset : query.offset + query.limit])


@router.get("/assistants/{assistant_id}")
async def get_assistant(
    assistant_id: str, request: Request, credential: Credential = Depends(caller)
) -> Response:
    """One served agent."""
    service = _service(request)
    return _json(_assistant(assistant_id, service.agent(assistant_id)))


async def _thread_json(
    service: Service, thread_id: str, record: ThreadRecord | None = None, assistant: str | None = None
) -> dict[str, Any]:
    """A LangGraph Thread; ``record`` (and ``assistant``): the store's row of it (and its
    agent's key), when the caller has them already."""
    if assistant is None or record is None:
        assistant, agent, found = await service.owner(thread_id)
        record = record or found
    agent = service.agents[assistant]
    snapshot = await agent.aget_state({"configurable": {"thread_id": thread_id}})
    record = await service.record_of(thread_id, agent, record)
    if await service.busy(thread_id, agent, record):
        status = "busy"
    elif snapshot.interrupts:
        status = "interrupted"
    else:
        status = "idle"
    if record is not None:
        created = datetime.fromtimestamp(record.created_at, UTC).isoformat()
        updated = datetime.fromtimestamp(record.updated_at, UTC).isoformat()
        metadata = dict(record.metadata)
    else:  # deleted meanwhile
        created = updated = _EPOCH
        metadata = {}
    metadata.setdefault("assistant_id", assistant)
    metadata.setdefault("graph_id", assistant)
    interrupts = [to_wire(i) for i in snapshot.interrupts]
    return {
        "thread_id": thread_id,
        "created_at": created,
        "updated_at": updated,
        "metadata": to_wire(metadata),
        "status": status,
        "values": to_wire(snapshot.values),
        "interrupts": {snapshot.next[0]: interrupts} if interrupts and snapshot.next else {},
    }


@router.post("/threads")
async def create_thread(
    request: Request, payload: ThreadCreate | None = Body(None), credential: Credential = Depends(caller)
) -> Response:
    """Create a thread (``metadata.graph_id`` or ``assistant_id`` names its agent); the
    caller is recorded as its owner (``run`` scope). A ``thread_id`` the client names is
    letters, digits and ``. _ : @ ~ + = -`` (see ``limits.py``)."""
    body = payload or ThreadCreate()
    body.refuse_extra("thread create")
    service = _service(request)
    require(credential, "run", "creating a thread")
    metadata = claim_owner(credential, body.metadata or {}, "'metadata'")
    thread_id = body.thread_id or str(uuid.uuid4())
    # named, or left for the thread's first run to choose (as LangGraph's server does)
    named: set[str] = set()
    for key in ("graph_id", "assistant_id"):
        if metadata.get(key):
            served = service.key_of(metadata[key])  # an assistant, or a name one is hosted under
            if served is None:
                raise Problem(
                    404, f"no assistant {metadata[key]!r:.100}; this service serves {sorted(service.agents)}"
                )
            named.add(served)
    if len(named) > 1:
        raise Problem(422, f"'metadata' names two assistants {sorted(named)}; a thread belongs to one")
    assistant = named.pop() if named else None
    if body.if_exists not in (None, "raise", "do_nothing"):
        raise Problem(422, f"if_exists={body.if_exists!r:.100} is not supported; use 'raise' or 'do_nothing'")
    found = await service.locate(thread_id, fresh=True)
    if not found.found:
        kept = {k: v for k, v in metadata.items() if k != "assistant_id" or assistant is not None}
        record = await service.create_thread(thread_id, assistant, kept)
        if record is not None:
            owner = assistant or (service.default_assistant if service.unbound else None)
            return _json(await _thread_json(service, thread_id, record, owner))
    if body.if_exists == "do_nothing":
        await service.readable(thread_id, credential)
        return _json(await _thread_json(service, thread_id))
    raise Problem(409, f"thread {thread_id!r} exists already")


@router.get("/threads/{thread_id}")
async def get_thread(
    thread_id: ThreadPath, request: Request, credential: Credential = Depends(caller)
) -> Response:
    """One thread, with its values and pending interrupts (its record read once)."""
    service = _service(request)
    assistant, agent, record = await service.owner(thread_id)
    record = await service.record_of(thread_id, agent, record)
    await service.access.check_read(credential, thread_id, agent, record)
    return _json(await _thread_json(service, thread_id, record, assistant))


@router.post("/threads/search")
async def search_threads(
    request: Request, payload: ThreadSearch | None = Body(None), credential: Credential = Depends(caller)
) -> Response:
    """Threads by metadata and status (``idle``, ``busy``, ``interrupted``), newest update first."""
    body = payload or ThreadSearch()
    body.refuse_extra("threads search")
    for name in ("values", "ids"):
        if getattr(body, name):
            raise Problem(422, f"threads search by {name!r} is not supported by handrail")
    if body.sort_by not in (None, "updated_at") or body.sort_order not in (None, "desc"):
        raise Problem(422, "threads search sorts by updated_at, newest first, only")
    status = body.status
    if status not in (None, "idle", "busy", "interrupted"):
        raise Problem(422, f"status {status!r:.100} is not supported; use 'idle', 'busy' or 'interrupted'")
    limit, offset, metadata = body.limit, body.offset, body.metadata
    service = _service(request)
    agent = service.agents[service.default_assistant]
    store_status: Any = {"busy": "running"}.get(status, status) if status else None
    if not credential.has("review") and not credential.has("admin"):  # rule A5: only its own threads
        metadata = {**(metadata or {}), OWNER_KEY: credential.name}
    records = await agent.alist_threads(
        metadata=metadata, status=store_status, limit=limit, offset=offset, owners=service.owners()
    )
    owned = [(r, service.owner_of(r.metadata)) for r in records]
    if not credential.has("admin"):
        readable = await asyncio.gather(*(_may_read(service, credential, r, key) for r, key in owned))
        owned = [pair for pair, ok in zip(owned, readable, strict=True) if ok]
    # the threads of a page are read at once, not one after another
    return _json(
        list(await asyncio.gather(*(_thread_json(service, r.thread_id, r, key) for r, key in owned)))
    )


async def _may_read(service: Service, credential: Credential, record: ThreadRecord, key: str | None) -> bool:
    if key is None:
        return False
    return await service.access.may_read(credential, record.thread_id, service.agents[key], record)


@router.get("/threads/{thread_id}/state")
async def get_state(
    thread_id: ThreadPath, request: Request, credential: Credential = Depends(caller)
) -> Response:
    """The thread's state now (a ThreadState)."""
    _, agent, _ = await _service(request).readable(thread_id, credential)
    return _json(state_of(thread_id, await agent.aget_state({"configurable": {"thread_id": thread_id}})))


@router.get("/threads/{thread_id}/state/{checkpoint_id}")
async def get_state_at(
    thread_id: ThreadPath,
    checkpoint_id: CheckpointPath,
    request: Request,
    credential: Credential = Depends(caller),
) -> Response:
    """The thread's state at one checkpoint."""
    _, agent, _ = await _service(request).readable(thread_id, credential)
    config = {"configurable": {"thread_id": thread_id, "checkpoint_id": checkpoint_id}}
    return _json(state_of(thread_id, await agent.aget_state(config)))  # type: ignore[arg-type]


@router.post("/threads/{thread_id}/history")
async def history(
    thread_id: ThreadPath,
    request: Request,
    payload: HistoryBody | None = Body(None),
    credential: Credential = Depends(caller),
) -> Response:
    """The thread's checkpoints, newest first."""
    body = payload or HistoryBody()
    body.refuse_extra("history")
    limit = body.limit
    if body.metadata or body.checkpoint:
        raise Problem(422, "history by 'metadata' or 'checkpoint' is not supported by handrail")
    before = body.before
    before_config = None
    if before is not None:
        checkpoint_id = before if isinstance(before, str) else before.checkpoint_id
        before_config = {"configurable": {"thread_id": thread_id, "checkpoint_id": checkpoint_id}}
    _, agent, _ = await _service(request).readable(thread_id, credential)
    states = [
        state_of(thread_id, snapshot)
        async for snapshot in agent.aget_state_history(
            {"configurable": {"thread_id": thread_id}},
            before=before_config,  # type: ignore[arg-type]
            limit=limit,
        )
    ]
    return _json(states)


@router.delete("/threads/{thread_id}")
async def delete_thread(
    thread_id: ThreadPath, request: Request, credential: Credential = Depends(caller)
) -> Response:
    """Delete a thread and its whole log (``admin`` scope)."""
    service = _service(request)
    require(credential, "admin", "deleting a thread")
    _, agent, _ = await service.owner(thread_id, fresh=True)
    await agent.adelete_thread(thread_id, by=credential.reviewer)  # a record of who, when, what (rule 21)
    service.forget(thread_id)
    return Response(status_code=204)
