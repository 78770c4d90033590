"""Notification endpoints and their delivery log over HTTP (SPEC rule 17, §5.4).

``GET /handrail/webhooks``                        the endpoints (every kind; no secrets)
``POST /handrail/webhooks``                       add a webhook: ``{"url", "events", "secret"?}``;
                                                  the reply shows its secret, this once
``DELETE /handrail/webhooks/{endpoint_id}``       remove one (its log stays)
``POST /handrail/webhooks/{endpoint_id}/test``    queue a ``handrail.test`` delivery
``POST /handrail/webhooks/{endpoint_id}/rotate``  a new secret; the old one signs too for
                                                  ``keep_old_for`` seconds (default a day)
``GET /handrail/deliveries``                      the delivery log, newest first
                                                  (``endpoint_id``, ``status``, ``limit``)
``POST /handrail/deliveries/{delivery_id}/retry`` send a failed delivery again (same id)

All need the ``admin`` scope: an endpoint receives every review's arguments. An endpoint
a policy file names is changed in the file, not here (409).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

import orjson
from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from handrail.notify.channels import Delivery, Endpoint
from handrail.notify.config import DEFAULT_EVENTS, check_url
from handrail.notify.events import check_event_types, example_event
from handrail.notify.outbox import NotFailedError, Outbox
from handrail.notify.webhooks import check_secret
from handrail.server._access import require
from handrail.server._auth import caller
from handrail.server._limits import GuardedRoute
from handrail.server._problems import Problem, documented
from handrail.server._service import Service
from handrail.server.tokens import Credential

__all__ = ["delivery_json", "endpoint_json", "router"]

router = APIRouter(
    prefix="/handrail",
    tags=["notifications"],
    responses=documented(400, 401, 403, 413),
    route_class=GuardedRoute,
)

EndpointPath = Path(
    ..., min_length=1, max_length=80, pattern=r"^[A-Za-z0-9_.:-]+$", description="an endpoint id"
)
DeliveryPath = Path(
    ..., min_length=1, max_length=40, pattern=r"^msg_[0-9a-f]{32}$", description="a delivery id"
)
_BODY_CHARS = 2000  # of a delivery's body shown in the log


class WebhookBody(BaseModel):
    """A webhook to add: where, which events (default: every review event), and its
    signing secret (``whsec_...``; default: a new one, shown once in the reply)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    url: str = Field(max_length=2000)
    events: list[str] = Field(default_factory=lambda: list(DEFAULT_EVENTS), max_length=20)
    secret: str | None = Field(None, max_length=200)


class RotateBody(BaseModel):
    """A rotation: how long the old secret still signs (seconds; at most 30 days)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    keep_old_for: float = Field(86400.0, ge=0, le=30 * 86400)
    secret: str | None = Field(None, max_length=200)


def endpoint_json(endpoint: Endpoint, *, secret: bool = False) -> dict[str, Any]:
    """An endpoint as JSON: its secret only when ``secret`` (the reply that made it)."""
    found: dict[str, Any] = {
        "endpoint_id": endpoint.id,
        "kind": endpoint.kind,
        "target": endpoint.target,
        "events": list(endpoint.events),
        "source": endpoint.source,
        "created_at": endpoint.created_at,
        "secrets": len(endpoint.live_secrets(time.time())),
    }
    if secret and endpoint.secrets:
        found["secret"] = endpoint.secrets[0][0]
    return found


def delivery_json(delivery: Delivery) -> dict[str, Any]:
    """One entry of the delivery log."""
    body = delivery.body.decode(errors="replace")
    return {
        "delivery_id": delivery.id,
        "endpoint_id": delivery.endpoint_id,
        "event": delivery.event,
        "thread_id": delivery.thread_id or None,
        "interrupt_id": delivery.interrupt_id,
        "status": delivery.status,
        "attempts": delivery.attempts,
        "created_at": delivery.created_at,
        "next_attempt_at": delivery.due_at if delivery.status == "pending" else None,
        "delivered_at": delivery.delivered_at,
        "response_code": delivery.response_code,
        "last_error": delivery.last_error,
        "body": body if len(body) <= _BODY_CHARS else body[:_BODY_CHARS] + "...",
    }


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data, default=str), status_code=status, media_type="application/json")


def _outbox(request: Request) -> tuple[Service, Outbox]:
    service = request.app.state.service
    assert isinstance(service, Service) and service.outbox is not None
    return service, service.outbox


def _wake(service: Service) -> None:
    if service.deliverer is not None:
        service.deliverer.wake()


async def _own_endpoint(outbox: Outbox, endpoint_id: str, doing: str) -> Endpoint:
    endpoint = await asyncio.to_thread(outbox.endpoint, endpoint_id)
    if endpoint is None:
        raise Problem(404, f"no endpoint {endpoint_id!r}")
    if endpoint.source == "file" and doing != "test":
        raise Problem(409, f"endpoint {endpoint_id!r} comes from the policy file: {doing} it there")
    return endpoint


@router.get("/webhooks")
async def list_endpoints(request: Request, credential: Credential = Depends(caller)) -> Response:
    """The notification endpoints in use, oldest first (``admin`` scope)."""
    require(credential, "admin", "listing notification endpoints")
    _, outbox = _outbox(request)
    found = await asyncio.to_thread(outbox.endpoints)
    return _json({"items": [endpoint_json(e) for e in found]})


@router.post("/webhooks", status_code=201, responses=documented(422))
async def add_webhook(
    request: Request, payload: WebhookBody, credential: Credential = Depends(caller)
) -> Response:
    """Add a webhook; the reply holds its secret, this once (``admin`` scope)."""
    require(credential, "admin", "adding a webhook")
    service, outbox = _outbox(request)
    try:
        url = check_url(payload.url, "url")
        events = check_event_types(payload.events, "events")
        secret = check_secret(payload.secret) if payload.secret is not None else None
    except ValueError as exc:
        raise Problem(422, str(exc)) from None
    start = await service.store.afeed_end()  # it receives what is committed from now on
    made = await asyncio.to_thread(
        outbox.add_endpoint, "webhook", url, events, start_after=start, secret=secret
    )
    return _json(endpoint_json(made, secret=True), 201)


@router.delete("/webhooks/{endpoint_id}", status_code=204, responses=documented(404, 409))
async def remove_endpoint(
    request: Request, endpoint_id: str = EndpointPath, credential: Credential = Depends(caller)
) -> Response:
    """Stop sending to an endpoint; its delivery log stays (``admin`` scope)."""
    require(credential, "admin", "removing a notification endpoint")
    _, outbox = _outbox(request)
    await _own_endpoint(outbox, endpoint_id, "remove")
    await asyncio.to_thread(outbox.remove_endpoint, endpoint_id)
    return Response(status_code=204)


@router.post("/webhooks/{endpoint_id}/test", status_code=202, responses=documented(404))
async def test_endpoint(
    request: Request, endpoint_id: str = EndpointPath, credential: Credential = Depends(caller)
) -> Response:
    """Queue a ``handrail.test`` delivery to an endpoint; its log entry tells how it went."""
    require(credential, "admin", "testing a notification endpoint")
    service, outbox = _outbox(request)
    endpoint = await _own_endpoint(outbox, endpoint_id, "test")
    made = await asyncio.to_thread(
        outbox.add_test, endpoint.id, example_event(service.public_url, endpoint.id)
    )
    _wake(service)
    return _json(delivery_json(made), 202)


@router.post("/webhooks/{endpoint_id}/rotate", responses=documented(404, 409, 422))
async def rotate_secret(
    request: Request,
    payload: RotateBody | None = None,
    endpoint_id: str = EndpointPath,
    credential: Credential = Depends(caller),
) -> Response:
    """Give a webhook a new secret; the old one still signs for ``keep_old_for`` seconds."""
    require(credential, "admin", "rotating a webhook's secret")
    _, outbox = _outbox(request)
    endpoint = await _own_endpoint(outbox, endpoint_id, "rotate")
    if endpoint.kind != "webhook":
        raise Problem(
            422, f"endpoint {endpoint_id!r} is a {endpoint.kind} endpoint; only webhooks are signed"
        )
    body = payload or RotateBody.model_validate({})
    try:
        secret = check_secret(body.secret) if body.secret is not None else None
    except ValueError as exc:
        raise Problem(422, str(exc)) from None
    rotated = await asyncio.to_thread(
        outbox.rotate_secret, endpoint_id, keep_old_for=body.keep_old_for, secret=secret
    )
    return _json(endpoint_json(rotated, secret=True))


@router.get("/deliveries", responses=documented(404))
async def list_deliveries(
    request: Request,
    endpoint_id: str | None = Query(None, max_length=80, description="deliveries to this endpoint"),
    status: Literal["pending", "delivered", "failed"] | None = Query(None, description="of this status"),
    limit: int = Query(50, ge=1, le=500),
    credential: Credential = Depends(caller),
) -> Response:
    """The delivery log, newest first (``admin`` scope)."""
    require(credential, "admin", "reading the delivery log")
    _, outbox = _outbox(request)
    found = await asyncio.to_thread(outbox.deliveries, endpoint_id, status=status, limit=limit)
    return _json({"items": [delivery_json(d) for d in found]})


@router.post("/deliveries/{delivery_id}/retry", responses=documented(404, 409))
async def retry_delivery(
    request: Request, delivery_id: str = DeliveryPath, credential: Credential = Depends(caller)
) -> Response:
    """Send a failed delivery again, with the same ``webhook-id`` (``admin`` scope)."""
    require(credential, "admin", "retrying a delivery")
    service, outbox = _outbox(request)
    try:
        again = await asyncio.to_thread(outbox.retry, delivery_id)
    except KeyError:
        raise Problem(404, f"no delivery {delivery_id!r}") from None
    except NotFailedError as exc:
        raise Problem(409, str(exc)) from None
    _wake(service)
    return _json(delivery_json(again))
