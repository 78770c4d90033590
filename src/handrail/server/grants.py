"""Grants over HTTP (SPEC rule 16): list them, revoke them.

A grant is given by an approval that carries one, through the answer endpoint
(``{"answer": {"decisions": [{"type": "approve", "grant": {"scope": "thread", "ttl":
3600}}]}}``); these routes show and end them:

``GET /handrail/grants``                    the grants of the agents served here, newest
                                            first (``thread_id``, ``agent``, ``tool``,
                                            ``active``, ``limit``, ``offset``)
``POST /handrail/grants/{grant_id}/revoke`` revoke one: it covers no call that starts after

Both need the ``review`` scope. A reviewer sees and revokes the grants of tools their roles
may decide (SPEC rule 12) and the grants they gave; ``admin`` every grant of the agents
served here. An unknown grant, or one the caller may not see, is a 404.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Depends, Path, Query, Request
from starlette.responses import Response

from handrail.checkpoint.grants import GrantFilter, GrantRecord
from handrail.review import reviewer_id, tool_refusal
from handrail.runtime import answering
from handrail.server._access import require
from handrail.server._auth import caller
from handrail.server._limits import MAX_ID, GuardedRoute
from handrail.server._problems import Problem, documented
from handrail.server._service import Service
from handrail.server.tokens import Credential
from handrail.server.wire import to_wire

__all__ = ["grant_json", "router", "visible_grants"]

router = APIRouter(
    prefix="/handrail", tags=["grants"], responses=documented(400, 401, 403, 413), route_class=GuardedRoute
)

GrantPath = Path(..., min_length=1, max_length=64, pattern=r"^[0-9a-f]{1,64}$", description="a grant id")


def grant_json(grant: GrantRecord, at: float) -> dict[str, Any]:
    """One grant as JSON."""
    return {
        "grant_id": grant.grant_id,
        "agent": grant.agent,
        "tool": grant.tool,
        "scope": grant.scope,
        "thread_id": grant.thread_id,
        "args": to_wire(grant.args) if grant.args_digest is not None else None,
        "exact_args": grant.args_digest is not None,
        "expires_at": grant.expires_at,
        "uses": grant.uses,
        "used": grant.used,
        "uses_left": grant.uses_left,
        "given_by": grant.given_by,
        "given_at": grant.given_at,
        "interrupt_id": grant.interrupt_id,
        "tool_call_id": grant.tool_call_id,
        "revoked_at": grant.revoked_at,
        "revoked_by": grant.revoked_by,
        "in_force": grant.in_force(at),
    }


def _service(request: Request) -> Service:
    service = request.app.state.service
    assert isinstance(service, Service)
    return service


def _may_see(service: Service, credential: Credential, grant: GrantRecord) -> bool:
    """Whether the caller may see and revoke ``grant``: an agent served here, and admin, its
    giver, or a reviewer whose roles may decide its tool."""
    key = service.key_of(grant.agent) if grant.agent else service.default_assistant
    if key is None:
        return False
    if credential.has("admin") or reviewer_id(grant.given_by) == credential.name:
        return True
    policies = service.agents[key]._spec.policies
    return grant.tool in policies.by_tool and tool_refusal(policies, grant.tool, credential.reviewer) is None


async def visible_grants(
    service: Service,
    credential: Credential,
    *,
    thread_id: str | None = None,
    agent: str | None = None,
    tool: str | None = None,
    active: bool = True,
    limit: int = 50,
    offset: int = 0,
) -> list[GrantRecord]:
    """The grants the caller may see (the JSON API and the web page)."""
    require(credential, "review", "listing grants")
    if agent is not None:
        service.agent(agent)
    at = answering.now()
    wanted = GrantFilter(
        agent=None, tool=tool, thread_id=thread_id, active_at=at if active else None, limit=1000, offset=0
    )
    found = await service.store.alist_grants(wanted)
    names = {name for name, key in service.names.items() if agent in (None, key)}
    kept = [
        g
        for g in found
        if (g.agent in names or (not g.agent and agent in (None, service.default_assistant)))
        and _may_see(service, credential, g)
    ]
    return kept[offset : offset + limit]


@router.get("/grants", responses=documented(404, 422))
async def list_grants(
    request: Request,
    thread_id: str | None = Query(None, max_length=MAX_ID, description="grants given on this thread"),
    agent: str | None = Query(None, max_length=MAX_ID, description="grants for this assistant"),
    tool: str | None = Query(None, max_length=MAX_ID, description="grants of this tool"),
    active: bool = Query(True, description="only grants in force now"),
    limit: int = Query(50, ge=1, le=500),
    offset: int = Query(0, ge=0, le=100_000),
    credential: Credential = Depends(caller),
) -> Response:
    """The grants the caller may see, newest first (``review`` scope)."""
    service = _service(request)
    grants = await visible_grants(
        service,
        credential,
        thread_id=thread_id,
        agent=agent,
        tool=tool,
        active=active,
        limit=limit,
        offset=offset,
    )
    at = answering.now()
    body = {"items": [grant_json(g, at) for g in grants]}
    return Response(orjson.dumps(body, default=str), media_type="application/json")


@router.post("/grants/{grant_id}/revoke", responses=documented(404))
async def revoke_grant(
    request: Request, grant_id: str = GrantPath, credential: Credential = Depends(caller)
) -> Response:
    """Revoke a grant: it covers no call that starts after (``review`` scope, and a grant
    the caller may see). Revoking twice changes nothing."""
    require(credential, "review", "revoking a grant")
    service = _service(request)
    revoked = await revoke_visible(service, credential, grant_id)
    body = grant_json(revoked, answering.now())
    return Response(orjson.dumps(body, default=str), media_type="application/json")


async def revoke_visible(service: Service, credential: Credential, grant_id: str) -> GrantRecord:
    """Revoke ``grant_id`` for the caller, or a 404 when there is none they may see."""
    found = [g for g in await service.store.alist_grants(GrantFilter(limit=1000)) if g.grant_id == grant_id]
    if not found or not _may_see(service, credential, found[0]):
        raise Problem(404, f"no grant {grant_id!r} that this credential may see")
    revoked = await service.store.arevoke_grant(grant_id, by=credential.reviewer)
    if revoked is None:  # pragma: no cover - deleted between the two reads
        raise Problem(404, f"no grant {grant_id!r}")
    return revoked
