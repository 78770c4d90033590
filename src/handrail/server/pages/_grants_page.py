"""The grants page (SPEC rule 16): the grants a reviewer may see, and a button to revoke each.

``GET /inbox/grants`` lists the grants in force that the signed-in reviewer may see -
those of tools their roles decide and those they gave (``admin``: every grant of the
agents served here), as ``GET /handrail/grants`` lists them (``visible_grants``) - newest
first: the tool, where it applies (a thread, or every thread of the agent), the arguments
it covers, the calls and time it has left, who gave it and when, with a link to the
review that gave it. ``?all=1`` adds the spent, lapsed and revoked ones; ``?thread=ID``
keeps those given on one thread.

``POST /inbox/grants/{grant_id}/revoke`` (the page's CSRF token, as every form) revokes
one through the API's own path (``revoke_visible``): a grant the reviewer may not see is
a 404 page, as over the API. The page then shows the list with the grant revoked: it
covers no call that starts after.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from starlette.responses import Response

from handrail._duration import span as _span
from handrail.checkpoint.grants import GrantRecord
from handrail.review import reviewer_id
from handrail.runtime import answering
from handrail.server._access import require
from handrail.server._limits import MAX_ID
from handrail.server._problems import Problem
from handrail.server.grants import revoke_visible, visible_grants
from handrail.server.pages._markup import clock
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

__all__ = ["GrantRow", "grant_row", "router"]

router = APIRouter(include_in_schema=False)
PAGE_SIZE = 200
_GRANT_ID = re.compile(r"[0-9a-f]{1,64}")


def _who(reviewer: Any) -> str:
    return reviewer_id(reviewer) or "a caller who gave no name"


@dataclass(frozen=True, slots=True)
class GrantRow:
    """One grant as the page shows it."""

    grant_id: str
    tool: str
    agent: str
    scope: str
    thread_id: str
    exact: bool
    args: Any
    uses: int | None
    used: int
    uses_left: int | None
    expires_at: datetime | None
    seconds_left: float | None
    given_by: str
    given_at: datetime
    review: str
    revoked_by: str | None
    revoked_at: datetime | None
    state: str  # "in force", "revoked", "lapsed" or "spent"

    @property
    def short_id(self) -> str:
        """The first 12 characters of the id (as the CLI prints it)."""
        return self.grant_id[:12]

    @property
    def calls_left(self) -> str:
        """``4 of 5 calls left``, or ``no limit on calls``."""
        if self.uses is None or self.uses_left is None:
            return "no limit on calls"
        return f"{self.uses_left} of {self.uses} call{'' if self.uses == 1 else 's'} left"

    @property
    def calls_ran(self) -> str:
        """For a grant that ended: ``2 of 5 calls ran under it``."""
        of = f" of {self.uses}" if self.uses is not None else ""
        return f"{self.used}{of} call{'' if (self.uses or self.used) == 1 else 's'} ran under it"

    @property
    def time_left(self) -> str:
        """``59 min left``, ``lapsed``, or ``no time limit``."""
        if self.seconds_left is None:
            return "no time limit"
        return "lapsed" if self.seconds_left <= 0 else f"{_span(self.seconds_left)} left"

    @property
    def expires_iso(self) -> str:
        """When it lapses, UTC, ISO 8601 (empty when it never does by time)."""
        if self.expires_at is None:
            return ""
        return self.expires_at.isoformat(timespec="seconds").replace("+00:00", "Z")

    @property
    def expires_clock(self) -> str:
        """When it lapses, as the pages write a time."""
        return clock(self.expires_at) if self.expires_at is not None else ""


def _moment(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


def grant_row(grant: GrantRecord, at: float) -> GrantRow:
    """How the page shows ``grant`` at ``at`` (seconds since the epoch)."""
    if grant.revoked_at is not None:
        state = "revoked"
    elif grant.expires_at is not None and not at < grant.expires_at:
        state = "lapsed"
    elif grant.uses is not None and grant.used >= grant.uses:
        state = "spent"
    else:
        state = "in force"
    return GrantRow(
        grant_id=grant.grant_id,
        tool=grant.tool,
        agent=grant.agent,
        scope=grant.scope,
        thread_id=grant.thread_id,
        exact=grant.args_digest is not None,
        args=grant.args,
        uses=grant.uses,
        used=grant.used,
        uses_left=grant.uses_left,
        expires_at=_moment(grant.expires_at) if grant.expires_at is not None else None,
        seconds_left=grant.expires_at - at if grant.expires_at is not None else None,
        given_by=_who(grant.given_by),
        given_at=_moment(grant.given_at),
        review=review_url(grant.thread_id, grant.interrupt_id),
        revoked_by=_who(grant.revoked_by) if grant.revoked_at is not None else None,
        revoked_at=_moment(grant.revoked_at) if grant.revoked_at is not None else None,
        state=state,
    )


def grants_url(*, every: bool = False, thread: str | None = None, revoked: str | None = None) -> str:
    """The grants page with these filters."""
    query = {
        k: v
        for k, v in (("all", "1" if every else None), ("thread", thread), ("revoked", revoked))
        if v is not None
    }
    return "/inbox/grants" + (f"?{urlencode(query)}" if query else "")


@router.get("/inbox/grants")
@html
async def grants_page(request: Request) -> Response:
    """The grants the signed-in reviewer may see, each with a button to revoke it."""
    me = visitor(request)
    service = service_of(request)
    params = request.query_params
    every = params.get("all") in ("1", "true")
    thread = params.get("thread") or None
    if thread is not None and len(thread) > MAX_ID:
        raise Problem(400, "That thread id is too long.")
    revoked = params.get("revoked") or None
    found = await visible_grants(
        service, me.credential, thread_id=thread, active=not every, limit=PAGE_SIZE + 1
    )
    at = answering.now()
    rows = [grant_row(g, at) for g in found[:PAGE_SIZE]]
    just = next((r for r in rows if r.grant_id == revoked), None)
    return render(
        request,
        "grants.html",
        title="Grants",
        me=me,
        rows=rows,
        more=len(found) > PAGE_SIZE,
        every=every,
        thread=thread,
        just=just,
        now=datetime.fromtimestamp(at, UTC),
        url=grants_url,
        action=lambda grant_id: f"/inbox/grants/{path_part(grant_id)}/revoke",
        thread_url=lambda thread_id: f"/inbox/threads/{path_part(thread_id)}",
    )


@router.post("/inbox/grants/{grant_id}/revoke")
@html
async def revoke(request: Request, grant_id: str) -> Response:
    """Revoke one grant the reviewer may see; then the list, with it revoked."""
    me = visitor(request)
    form = await read_form(request)
    check_csrf(request, form, me.csrf)
    require(me.credential, "review", "revoking a grant")
    if not _GRANT_ID.fullmatch(grant_id):
        raise Problem(404, "There is no such grant.")
    await revoke_visible(service_of(request), me.credential, grant_id)
    thread = (form.get("thread") or [""])[-1] or None
    return redirect(request, grants_url(every=True, thread=thread, revoked=grant_id))
