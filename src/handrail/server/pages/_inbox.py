"""The inbox page: every review the reviewer may decide, filtered, searched, paged, live.

``GET /inbox`` lists a page of 50 through ``reviews.inbox_page`` - the JSON inbox's own
path, so SPEC rule 12 decides what shows - oldest or newest first, by agent, tool, kind
and thread metadata, with the cursor for the next page. The search box narrows a page
to the reviews whose tool, arguments, description, thread or metadata contain the
words; it reads the inbox in order and stops at a page of matches or after
:data:`SEARCH_LIMIT` reviews read (and says so, with a link to read on).

The page's script opens the live inbox (``/handrail/events``, from the event the page
was made after) and asks ``GET /inbox/rows`` for each new review: the row, made by the
same template, or nothing when the review is not for this reviewer or this filter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlencode

import orjson
from fastapi import APIRouter, Request
from starlette.datastructures import QueryParams
from starlette.responses import Response

from handrail.errors import InvalidInputError
from handrail.server._access import require
from handrail.server._problems import Problem
from handrail.server._reviews import inbox_page
from handrail.server._service import Service
from handrail.server.pages._lookup import live_end
from handrail.server.pages._markup import json_text, summary
from handrail.server.pages._policy import counts_of, expiry_of
from handrail.server.pages._render import html, path_part, render, service_of, visitor
from handrail.server.tokens import Credential
from handrail.server.wire import inbox_entry

__all__ = ["PAGE_SIZE", "SEARCH_LIMIT", "Filters", "router", "row_of"]

router = APIRouter(include_in_schema=False)
PAGE_SIZE = 50
SEARCH_LIMIT = 2000


@dataclass(frozen=True, slots=True)
class Filters:
    """What the inbox page was asked for (its query string), checked."""

    order: Literal["oldest", "newest"] = "oldest"
    tool: str | None = None
    agent: str | None = None
    kind: str | None = None
    meta: str = ""
    q: str = ""
    cursor: str | None = None

    @classmethod
    def of(cls, query: QueryParams, service: Service) -> Filters:
        """The filters of a query string; a 400 ``Problem`` naming what is wrong."""
        order = query.get("order") or "oldest"
        if order not in ("oldest", "newest"):
            raise Problem(400, f"order is 'oldest' or 'newest', not {order!r}")
        kind = query.get("kind") or None
        if kind not in (None, "interrupt", "outcome_unknown"):
            raise Problem(400, f"kind is 'interrupt' or 'outcome_unknown', not {kind!r}")
        agent = query.get("agent") or None
        if agent is not None and agent not in service.agents:
            raise Problem(400, f"this service serves no agent {agent!r}; it serves {sorted(service.agents)}")
        found = cls(
            order="newest" if order == "newest" else "oldest",
            tool=query.get("tool") or None,
            agent=agent,
            kind=kind,
            meta=(query.get("meta") or "").strip(),
            q=(query.get("q") or "").strip(),
            cursor=query.get("cursor") or None,
        )
        found.metadata()  # checked now, so a bad filter is a 400 before anything is read
        return found

    def metadata(self) -> dict[str, Any] | None:
        """The metadata filter: ``key=value`` pairs separated by spaces.

        A value that reads as a JSON number, ``true``, ``false`` or ``null`` matches as
        that; quote it (``id="7"``) to match a string.
        """
        if not self.meta:
            return None
        out: dict[str, Any] = {}
        for pair in self.meta.split():
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise Problem(
                    400, f"metadata is key=value pairs separated by spaces, e.g. team=data; got {pair!r}"
                )
            try:
                parsed = orjson.loads(value)
            except orjson.JSONDecodeError:
                parsed = value
            out[key] = parsed if isinstance(parsed, (int, float, bool, str)) or parsed is None else value
        return out

    def query(self, **changes: Any) -> str:
        """This page's query string with ``changes`` (``None`` drops a key)."""
        values: dict[str, Any] = {
            "order": self.order if self.order != "oldest" else None,
            "tool": self.tool,
            "agent": self.agent,
            "kind": self.kind,
            "meta": self.meta or None,
            "q": self.q or None,
            "cursor": self.cursor,
        }
        values.update(changes)
        return urlencode({k: v for k, v in values.items() if v is not None})

    @property
    def active(self) -> bool:
        """Whether any filter or search narrows the listing."""
        return any((self.tool, self.agent, self.kind, self.meta, self.q))


def _markers(item: Mapping[str, Any]) -> list[str]:
    """The row's plain markers: ``outcome unknown``. (Approvals and expiry are shown by
    ``policy.py``'s views: ``approvals`` and ``expiry`` of the row.)"""
    return ["outcome unknown"] if item.get("kind") == "outcome_unknown" else []


def row_of(item: Mapping[str, Any]) -> dict[str, Any]:
    """What one inbox row shows, from an inbox item (``wire.inbox_entry``)."""
    calls = [(str(r.get("name", "")), summary(r.get("args"))) for r in item.get("action_requests") or []]
    tools = sorted(set(item.get("tools") or []))
    single_tool = tools[0] if len(tools) == 1 else None
    thread, interrupt = str(item["thread_id"]), str(item["interrupt_id"])
    return {
        "thread_id": thread,
        "interrupt_id": interrupt,
        "calls": calls or [("(custom review)", summary(item.get("value"), 120))],
        "tools": tools,
        "kind": item.get("kind"),
        "created_at": item["created_at"],
        "agent": (item.get("metadata") or {}).get("assistant_id"),
        "metadata": " ".join(
            f"{k}={v if isinstance(v, str) else json_text(v, indent=False)}"
            for k, v in (item.get("metadata") or {}).items()
            if k not in ("assistant_id", "graph_id")
        ),
        "markers": _markers(item),
        # rules 14-15: how far its approvals have come, when it expires unanswered
        "approvals": counts_of(item.get("approvals") or []),
        "expiry": expiry_of(item.get("expires_at")),
        "url": f"/inbox/reviews/{path_part(thread)}/{path_part(interrupt)}",
        "thread_url": f"/inbox/threads/{path_part(thread)}",
        # Bulk answers take reviews of one tool; an outcome_unknown one is answered alone.
        "bulk_tool": single_tool if item.get("kind") == "interrupt" and calls else None,
        "bulk_value": json_text([thread, interrupt], indent=False),
        "bulk_why": _not_bulk(item, tools, bool(calls)),
    }


def _not_bulk(item: Mapping[str, Any], tools: list[str], calls: bool) -> str | None:
    """Why a row has no box to tick for a bulk answer (None: it has one)."""
    if item.get("kind") == "outcome_unknown":
        return "a call that may have run already is answered on its page"
    if not calls:
        return "a question of the agent's own is answered on its page"
    if len(tools) != 1:
        return "reviews of several tools are answered on their page"
    return None


def _matches(item: Mapping[str, Any], words: list[str]) -> bool:
    haystack = " ".join(
        [
            str(item["thread_id"]),
            " ".join(item.get("tools") or []),
            json_text(item.get("action_requests"), indent=False),
            json_text(item.get("metadata"), indent=False),
        ]
    ).casefold()
    return all(w in haystack for w in words)


async def _listing(
    service: Service, credential: Credential, filters: Filters
) -> tuple[list[dict[str, Any]], str | None, int | None]:
    """The page's items, the cursor of the next page, and how many were read (a search)."""
    common: dict[str, Any] = {
        "tool": filters.tool,
        "agent": filters.agent,
        "kind": filters.kind,
        "metadata": filters.metadata(),
        "order": filters.order,
        "messages": 0,
    }
    try:
        if not filters.q:
            page = await inbox_page(service, credential, limit=PAGE_SIZE, cursor=filters.cursor, **common)
            return list(page["items"]), page["next_cursor"], None
        words = filters.q.casefold().split()
        found: list[dict[str, Any]] = []
        cursor, read = filters.cursor, 0
        while len(found) < PAGE_SIZE and read < SEARCH_LIMIT:
            # Never more than the matches still wanted: the page ends exactly at a cursor.
            wanted = PAGE_SIZE - len(found)
            page = await inbox_page(service, credential, limit=wanted, cursor=cursor, **common)
            read += len(page["items"])
            found += [item for item in page["items"] if _matches(item, words)]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        return found, cursor, read
    except InvalidInputError as exc:
        raise Problem(400, f"This inbox link is out of date or malformed: {exc}") from None


def _tools(service: Service) -> list[str]:
    return sorted({name for agent in service.agents.values() for name in agent.tools})


@router.get("/")
async def root() -> Response:
    """The service's root: the web inbox."""
    from starlette.responses import RedirectResponse

    return RedirectResponse("/inbox", status_code=303)


@router.get("/inbox")
@html
async def inbox(request: Request) -> Response:
    """The inbox page."""
    me = visitor(request)
    service = service_of(request)
    filters = Filters.of(request.query_params, service)
    after = await live_end(service)  # before reading: no event falls between
    items, next_cursor, read = await _listing(service, me.credential, filters)
    rows = [row_of(item) for item in items]
    return render(
        request,
        "inbox.html",
        title="Inbox",
        me=me,
        rows=rows,
        filters=filters,
        next_cursor=next_cursor,
        searched=read,
        search_limit=SEARCH_LIMIT,
        tools=_tools(service),
        agents=sorted(service.agents),
        many_agents=len(service.agents) > 1,
        after=after,
        count=f"{len(rows)}+" if next_cursor else str(len(rows)),
    )


@router.get("/inbox/rows")
@html
async def inbox_row(request: Request) -> Response:
    """One review's row for a live page (204 when it is not for this reviewer or filter)."""
    me = visitor(request)
    require(me.credential, "review", "the inbox")
    service = service_of(request)
    filters = Filters.of(request.query_params, service)
    thread_id, interrupt_id = request.query_params.get("thread"), request.query_params.get("interrupt")
    if not thread_id or not interrupt_id:
        raise Problem(400, "a row is named by ?thread=...&interrupt=...")
    try:
        _, agent, _ = await service.owner(thread_id)
    except Problem:
        return Response(status_code=204)
    page = await agent.alist_interrupts(
        thread_id=thread_id,
        tool=filters.tool,
        kind=filters.kind,
        metadata=filters.metadata(),
        reviewer=me.credential.reviewer,
        limit=100,
        owners=service.owners(filters.agent),
    )
    for item in page.items:
        if item.interrupt.id == interrupt_id:
            entry = inbox_entry(item, [])
            if filters.q and not _matches(entry, filters.q.casefold().split()):
                break
            many = len(service.agents) > 1
            return render(request, "_row.html", row=row_of(entry), me=me, many_agents=many)
    return Response(status_code=204)
