"""The whole of a value a page folds: one argument, one result, as plain text to read and copy.

A page never puts a long value on itself whole (``markup.FOLD_LIMIT``); it shows a head
and links here. ``GET /inbox/threads/{thread_id}/raw?at=SOURCE&path=PATH`` answers the
value at ``PATH`` (a JSON array of keys and indexes) inside ``SOURCE``: ``e<seq>``, one
event of the thread's audit trail as the JSON API gives it (``wire.audit_entry``), or
``m<n>``, the thread's message number ``n`` (from 0) as it stands now. A string comes
as ``text/plain``, anything else as indented JSON. Who may read the thread may read
this (``service.readable``), as on the thread page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from handrail.server._problems import Problem
from handrail.server.pages._markup import json_text
from handrail.server.pages._render import html, raw_url, secure, service_of, visitor
from handrail.server.wire import audit_entry, to_wire

__all__ = ["raw_url", "router"]

router = APIRouter(include_in_schema=False)


def _step(value: Any, part: Any) -> Any:
    if isinstance(value, Mapping) and isinstance(part, str) and part in value:
        return value[part]
    listed = isinstance(value, Sequence) and not isinstance(value, str)
    if listed and isinstance(part, int) and not isinstance(part, bool) and 0 <= part < len(value):
        return value[part]
    raise Problem(404, "That value is not in the thread (it may have changed since the page was made).")


@router.get("/inbox/threads/{thread_id}/raw")
@html
async def raw_value(request: Request, thread_id: str) -> Response:
    """One value of a thread, whole."""
    me = visitor(request)
    _, agent, _ = await service_of(request).readable(thread_id, me.credential)
    source = request.query_params.get("at") or ""
    try:
        path = orjson.loads(request.query_params.get("path") or "[]")
    except orjson.JSONDecodeError:
        path = None
    if not isinstance(path, list) or len(path) > 64 or len(source) < 2 or not source[1:].isdigit():
        raise Problem(
            400, "This link is malformed: it names a value by ?at=e<event> or m<message> and &path=[...]."
        )
    number = int(source[1:])
    config: Any = {"configurable": {"thread_id": thread_id}}
    value: Any
    if source[0] == "e":
        found = [e for e in await agent.aget_audit_trail(config) if e.seq == number]
        if not found:
            raise Problem(404, f"The thread's audit trail has no event #{number}.")
        value = audit_entry(found[0])
    elif source[0] == "m":
        messages = list((await agent.aget_state(config)).values.get("messages") or [])
        if number >= len(messages):
            raise Problem(404, f"The thread has no message {number}.")
        value = to_wire(messages[number])
    else:
        raise Problem(400, "This link is malformed: ?at= is e<event> or m<message>.")
    for part in path:
        value = _step(value, part)
    if isinstance(value, str):
        response = Response(value, media_type="text/plain; charset=utf-8")
    else:
        response = Response(json_text(value), media_type="text/plain; charset=utf-8")
    secure(request, response)
    return response
