"""The delivery log page (SPEC rule 17): what was sent where, and a button to send a failed one again.

``GET /inbox/deliveries`` shows the notification endpoints and their deliveries, newest
first (``?status=failed``, ``?endpoint=ID`` narrow it): the event, the review it is
about, the endpoint, its state, the attempts made, the receiver's last status code and
error, and when the next attempt is due. Only an ``admin`` sees it: an endpoint receives
every review's arguments, and so does its log.

``POST /inbox/deliveries/{delivery_id}/retry`` (the page's CSRF token) sends a failed
delivery again, with the same ``webhook-id``, through the API's own path
(``Outbox.retry``); the page then shows the log with it pending.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from starlette.responses import Response

from handrail.notify.outbox import NotFailedError
from handrail.server._access import require
from handrail.server._problems import Problem
from handrail.server.pages._render import (
    check_csrf,
    html,
    path_part,
    read_form,
    redirect,
    render,
    service_of,
    visitor,
)
from handrail.server.pages._review import review_url

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
PAGE_SIZE = 200
_DELIVERY_ID = re.compile(r"msg_[0-9a-f]{32}")
_STATUSES = ("pending", "delivered", "failed")


def _url(status: str | None = None, endpoint: str | None = None, retried: str | None = None) -> str:
    query = {k: v for k, v in (("status", status), ("endpoint", endpoint), ("retried", retried)) if v}
    return "/inbox/deliveries" + (f"?{urlencode(query)}" if query else "")


def _at(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC)


@router.get("/inbox/deliveries")
@html
async def deliveries_page(request: Request) -> Response:
    """The endpoints and the delivery log (``admin``)."""
    me = visitor(request)
    require(me.credential, "admin", "reading the delivery log")
    service = service_of(request)
    outbox = service.outbox
    status = request.query_params.get("status") or None
    if status is not None and status not in _STATUSES:
        raise Problem(400, f"status is one of {', '.join(_STATUSES)}.")
    endpoint = request.query_params.get("endpoint") or None
    if endpoint is not None and len(endpoint) > 80:
        raise Problem(400, "That endpoint id is too long.")
    endpoints = await asyncio.to_thread(outbox.endpoints)
    found = await asyncio.to_thread(outbox.deliveries, endpoint, status=status, limit=PAGE_SIZE + 1)
    rows = [
        {
            "d": d,
            "created": _at(d.created_at),
            "due": _at(d.due_at) if d.status == "pending" else None,
            "delivered": _at(d.delivered_at),
            "review": review_url(d.thread_id, d.interrupt_id) if d.interrupt_id else None,
        }
        for d in found[:PAGE_SIZE]
    ]
    return render(
        request,
        "deliveries.html",
        title="Deliveries",
        me=me,
        endpoints=endpoints,
        rows=rows,
        more=len(found) > PAGE_SIZE,
        chosen=status,
        endpoint=endpoint,
        statuses=_STATUSES,
        retried=request.query_params.get("retried") or None,
        url=_url,
        action=lambda delivery_id: f"/inbox/deliveries/{path_part(delivery_id)}/retry",
    )


@router.post("/inbox/deliveries/{delivery_id}/retry")
@html
async def retry(request: Request, delivery_id: str) -> Response:
    """Send a failed delivery again (``admin``); then the log, with it pending."""
    me = visitor(request)
    form = await read_form(request)
    check_csrf(request, form, me.csrf)
    require(me.credential, "admin", "retrying a delivery")
    if not _DELIVERY_ID.fullmatch(delivery_id):
        raise Problem(404, "There is no such delivery.")
    service = service_of(request)
    try:
        await asyncio.to_thread(service.outbox.retry, delivery_id)
    except KeyError:
        raise Problem(404, "There is no such delivery.") from None
    except NotFailedError as exc:
        raise Problem(409, str(exc)) from None
    if service.deliverer is not None:
        service.deliverer.wake()
    return redirect(request, _url(retried=delivery_id))
