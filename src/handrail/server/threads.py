"""Threads and assistants: the LangGraph Platform API's ``/threads`` and ``/assistants``.

Each served agent is an assistant whose ``assistant_id`` and ``graph_id`` are its name.
A thread's status is ``busy`` while a run of this process works on it, ``interrupted``
while reviews wait, else ``idle``. Only the threads of the agents served here exist for
these routes (SPEC rule 21, ``service.py``): another agent's thread is a 404, and a
search never finds it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson
from fastapi import APIRouter, Body, Depends, Request
from starlette.responses import Response

from handrail.agent import Agent
from handrail.checkpoint.base import ThreadRecord
from handrail.server.auth import caller
from handrail.server.problems import Problem
from handrail.server.runs import RunRegistry
from handrail.server.service import UNBOUND, Service
from handrail.server.tokens import Credential
from handrail.server.wire import state_of, to_wire

__all__ = ["router"]

router = APIRouter(tags=["threads"])
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC).isoformat()


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data, default=str), status_code=status, media_type="application/json")


def _service(request: Request) -> Service:
    service = request.app.state.service
    assert isinstance(service, Service)
    return service


def _object(payload: Any, allowed: set[str], what: str) -> Mapping[str, Any]:
    if payload is None:
        return {}
    if not isinstance(payload, Mapping):
        raise Problem(400, f"the {what} body must be a JSON object")
    unsupported = sorted(set(payload) - allowed)
    if unsupported:
        raise Problem(422, f"{what} field(s) {unsupported} are not supported by handrail")
    return payload


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
    request: Request, payload: Any = Body(None), credential: Credential = Depends(caller)
) -> Response:
    """The served agents, as assistants."""
    allowed = {"graph_id", "name", "metadata", "limit", "offset", "sort_by", "sort_order", "select"}
    query = _object(payload, allowed, "assistants search")
    service = _service(request)
    found = [
        _assistant(name, agent)
        for name, agent in service.agents.items()
        if query.get("graph_id") in (None, name) and query.get("name") in (None, name)
    ]
    offset, limit = int(query.get("offset") or 0), int(query.get("limit") or 10)
    return _json(found[offset : offset + limit])


@router.get("/assistants/{assistant_id}")
async def get_assistant(
    assistant_id: str, request: Request, credential: Credential = Depends(caller)
) -> Response:
    """One served agent."""
    service = _service(request)
    return _json(_assistant(assistant_id, service.agent(assistant_id)))


async def _thread_json(
    service: Service, thread_id: str, record: ThreadRecord | None = None
) -> dict[str, Any]:
    """A LangGraph Thread; ``record``: the store's row of it, when the caller has it already."""
    assistant, agent, row = await service.owner(thread_id)
    snapshot = await agent.aget_state({"configurable": {"thread_id": thread_id}})
    store = agent.checkpointer
    if record is None and store is not None:
        record = await store.aget_thread(thread_id)
    registry = service.runs
    assert isinstance(registry, RunRegistry)
    if thread_id in registry.active:
        status = "busy"
    elif snapshot.interrupts:
        status = "interrupted"
    else:
        status = "idle"
    if record is not None:  # its log: the first input wrote what it was created with
        created = datetime.fromtimestamp(record.created_at, UTC).isoformat()
        updated = datetime.fromtimestamp(record.updated_at, UTC).isoformat()
        metadata = dict(record.metadata)
    else:  # created and not run yet
        created = updated = row.created_at.isoformat() if row else _EPOCH
        metadata = dict(row.metadata) if row else {}
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
    request: Request, payload: Any = Body(None), credential: Credential = Depends(caller)
) -> Response:
    """Create a thread (``metadata.graph_id`` or ``assistant_id`` names its agent)."""
    body = _object(payload, {"thread_id", "metadata", "if_exists"}, "thread create")
    service = _service(request)
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise Problem(422, "'metadata' must be an object")
    thread_id = body.get("thread_id") or str(uuid.uuid4())
    if not isinstance(thread_id, str):
        raise Problem(422, "'thread_id' must be a string")
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
    assistant = named.pop() if named else UNBOUND
    if body.get("if_exists") not in (None, "raise", "do_nothing"):
        raise Problem(422, f"if_exists={body['if_exists']!r} is not supported; use 'raise' or 'do_nothing'")
    found = await service.locate(thread_id)
    if found.logged or found.row is not None:
        if body.get("if_exists") == "do_nothing":
            return _json(await _thread_json(service, thread_id))
        raise Problem(409, f"thread {thread_id!r} exists already")
    await asyncio.to_thread(service.add_thread, thread_id, assistant, dict(metadata))
    return _json(await _thread_json(service, thread_id))


@router.get("/threads/{thread_id}")
async def get_thread(thread_id: str, request: Request, credential: Credential = Depends(caller)) -> Response:
    """One thread, with its values and pending interrupts."""
    return _json(await _thread_json(_service(request), thread_id))


@router.post("/threads/search")
async def search_threads(
    request: Request, payload: Any = Body(None), credential: Credential = Depends(caller)
) -> Response:
    """Threads by metadata and status (``idle``, ``busy``, ``interrupted``), newest update first."""
    allowed = {"metadata", "status", "limit", "offset", "values", "ids", "sort_by", "sort_order"}
    body = _object(payload, allowed, "threads search")
    for name in ("values", "ids"):
        if body.get(name):
            raise Problem(422, f"threads search by {name!r} is not supported by handrail")
    if body.get("sort_by") not in (None, "updated_at") or body.get("sort_order") not in (None, "desc"):
        raise Problem(422, "threads search sorts by updated_at, newest first, only")
    status = body.get("status")
    if status not in (None, "idle", "busy", "interrupted"):
        raise Problem(422, f"status {status!r} is not supported; use 'idle', 'busy' or 'interrupted'")
    limit, offset = body.get("limit", 10), body.get("offset", 0)
    if not isinstance(limit, int) or not 1 <= limit <= 1000 or not isinstance(offset, int) or offset < 0:
        raise Problem(422, "'limit' must be 1 to 1000 and 'offset' a non-negative integer")
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise Problem(422, "'metadata' must be an object")
    service = _service(request)
    agent = service.agents[service.default_assistant]
    store_status = {"busy": "running"}.get(status, status) if status else None
    records = await agent.alist_threads(
        metadata=metadata, status=store_status, limit=limit, offset=offset, owners=service.owners()
    )
    # the threads of a page are read at once, not one after another
    return _json(list(await asyncio.gather(*(_thread_json(service, r.thread_id, r) for r in records))))


@router.get("/threads/{thread_id}/state")
async def get_state(thread_id: str, request: Request, credential: Credential = Depends(caller)) -> Response:
    """The thread's state now (a ThreadState)."""
    _, agent, _ = await _service(request).owner(thread_id)
    return _json(state_of(thread_id, await agent.aget_state({"configurable": {"thread_id": thread_id}})))


@router.get("/threads/{thread_id}/state/{checkpoint_id}")
async def get_state_at(
    thread_id: str, checkpoint_id: str, request: Request, credential: Credential = Depends(caller)
) -> Response:
    """The thread's state at one checkpoint."""
    _, agent, _ = await _service(request).owner(thread_id)
    config = {"configurable": {"thread_id": thread_id, "checkpoint_id": checkpoint_id}}
    return _json(state_of(thread_id, await agent.aget_state(config)))  # type: ignore[arg-type]


@router.post("/threads/{thread_id}/history")
async def history(
    thread_id: str, request: Request, payload: Any = Body(None), credential: Credential = Depends(caller)
) -> Response:
    """The thread's checkpoints, newest first."""
    body = _object(payload, {"limit", "before", "metadata", "checkpoint"}, "history")
    limit = body.get("limit", 10)
    if not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise Problem(422, "'limit' must be an integer from 1 to 1000")
    if body.get("metadata") or body.get("checkpoint"):
        raise Problem(422, "history by 'metadata' or 'checkpoint' is not supported by handrail")
    before = body.get("before")
    before_config = None
    if before is not None:
        checkpoint_id = before.get("checkpoint_id") if isinstance(before, Mapping) else before
        if not isinstance(checkpoint_id, str):
            raise Problem(422, "'before' must be a checkpoint id or {'checkpoint_id': ...}")
        before_config = {"configurable": {"thread_id": thread_id, "checkpoint_id": checkpoint_id}}
    _, agent, _ = await _service(request).owner(thread_id)
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
    thread_id: str, request: Request, credential: Credential = Depends(caller)
) -> Response:
    """Delete a thread and its whole log."""
    service = _service(request)
    _, agent, _ = await service.owner(thread_id, fresh=True)
    await agent.adelete_thread(thread_id)
    await asyncio.to_thread(service.drop_thread, thread_id)
    return Response(status_code=204)
