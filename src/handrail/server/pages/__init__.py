"""The web inbox: pages for reviewers, served by ``handrail serve`` under ``/inbox``.

One module per concern: ``signin`` (tokens, one-time links, sessions), ``inbox`` (the
list, live rows), ``review`` (one review, its form, what became of it), ``bulk``,
``thread`` (conversation and audit trail), ``raw`` (the whole of a folded value),
``grants_page`` (the grants a reviewer may see and revoke: SPEC rule 16);
``deliveries`` (the notification endpoints and their delivery log, for admins: rule 17);
``render`` makes every page (templates,
headers, CSRF, errors), ``forms`` builds edit forms from a tool's JSON schema and reads
them back typed, ``shape`` reads what a review asks, ``lookup`` where it stands,
``policy`` what its policy adds (approvals counted, the time left before it expires:
SPEC rules 14-15), ``grant_form`` the review page's "Approve and allow for..." (rule
16), and ``markup`` shows untrusted values as text. Templates are in
``server/templates``, the pages' own scripts and styles in ``server/static``. See
``docs/service.md``.
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, Request
from starlette.responses import Response

from handrail.server.pages import _bulk as bulk
from handrail.server.pages import _deliveries as deliveries
from handrail.server.pages import _grants_page as grants_page
from handrail.server.pages import _inbox as inbox
from handrail.server.pages import _raw as raw
from handrail.server.pages import _review as review
from handrail.server.pages import _signin as signin
from handrail.server.pages import _thread as thread
from handrail.server.pages._errors import HtmlErrors
from handrail.server.pages._render import STATIC, StaticFiles, error_page, html, session_visitor

__all__ = ["HtmlErrors", "install"]

_fallback = APIRouter(include_in_schema=False)


@_fallback.api_route("/inbox/{rest:path}", methods=["GET", "POST", "HEAD"])
@html
async def not_found(request: Request, rest: str) -> Response:
    """Any other path of the web inbox: a plain page, not a JSON problem."""
    return error_page(request, 404, "There is no such page in the inbox.", session_visitor(request))


def install(app: FastAPI) -> None:
    """Serve the web inbox from ``app``: its pages, its static files, its fallback page."""
    app.mount("/inbox/static", StaticFiles(directory=STATIC), name="inbox-static")
    for module in (signin, inbox, review, bulk, thread, raw, grants_page, deliveries):
        app.include_router(module.router)
    app.include_router(_fallback)
    # Errors answered before a page's route runs (413, 429) are pages too: add
    # ``HtmlErrors`` outside every other middleware (``app.py`` does, last).
