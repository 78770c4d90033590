"""Where the review CLI reads and answers reviews: a service over HTTP, or a store directly.

:class:`ServiceReviews` talks to ``handrail serve`` (``--url``/``--token`` or
``HANDRAIL_URL``/``HANDRAIL_TOKEN``): the identity is the token's. :class:`StoreReviews`
opens the store (``--db``/``--postgres``) with the agent (``--agent module:obj``), records
answers with ``Agent.decide`` as ``--reviewer``/``--role`` through channel ``cli``, then
runs what they allow in this process. Both give the same JSON shapes as the service:
an inbox item carries its ``approvals`` and ``expires_at`` (SPEC rules 14-15), and an
answer that is one vote of several carries ``waiting`` and ``approvals``. Grants (rule
16) are listed and revoked as ``GET /handrail/grants`` and ``POST
/handrail/grants/{id}/revoke`` give them (``handrail.server.grants.grant_json``); over a
service only those the token may see, on a store every grant it keeps.
"""

from __future__ import annotations

import getpass
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol
from urllib.parse import quote

__all__ = ["CHANNEL_HEADER", "ReviewError", "Reviews", "ServiceReviews", "StoreReviews"]


class ReviewError(ValueError):
    """A review command was refused or failed; the message says why (one line).

    ``status`` is the HTTP status of the refusal (a store's refusals get the status the
    service would give: 403 for a reviewer without the role, 409 for an answered or
    expired review), and ``problem`` the service's problem details (``answered_by``,
    ``answered_at``, ``channel`` of a 409, or its ``expired_at``; ``roles`` of a 403), or empty.
    """

    def __init__(self, message: str, *, status: int | None = None, problem: dict[str, Any] | None = None):
        super().__init__(message)
        self.status = status
        self.problem: dict[str, Any] = dict(problem or {})


CHANNEL_HEADER = "X-Handrail-Channel"
"""The request header by which the CLI tells the service that an answer comes through it
(``cli``); the service records any other answer over HTTP as ``http``."""


class Reviews(Protocol):
    """What the review CLI needs, from a service or a store."""

    def inbox(
        self, *, tool: str | None, limit: int, cursor: str | None, order: str = "oldest", full: bool = False
    ) -> dict[str, Any]: ...
    def answer(self, thread_id: str, interrupt_id: str, answer: Any) -> dict[str, Any]: ...
    def state(self, thread_id: str) -> dict[str, Any]: ...
    def pending(self, thread_id: str) -> dict[str, dict[str, Any]]: ...
    def threads(self, status: str | None, limit: int) -> list[dict[str, Any]]: ...
    def audit(self, thread_id: str) -> list[dict[str, Any]]: ...
    def audit_across(
        self, *, since: float | None, until: float | None, limit: int
    ) -> list[dict[str, Any]]: ...
    def thread_ids(self, prefix: str) -> list[str]: ...
    def locate(self, prefix: str) -> list[dict[str, Any]]: ...
    def grants(
        self, *, thread_id: str | None = None, agent: str | None = None, active: bool = True
    ) -> list[dict[str, Any]]: ...
    def revoke_grant(self, grant_id: str) -> dict[str, Any]: ...


class ServiceReviews:
    """The review CLI's calls, over HTTP to ``handrail serve``."""

    def __init__(self, url: str, token: str) -> None:
        import httpx

        self._http = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}", CHANNEL_HEADER: "cli"},
            timeout=60,
        )

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

        try:
            reply = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ReviewError(f"cannot reach the service at {self._http.base_url}: {exc}") from None
        if reply.status_code >= 400:
            try:
                problem = reply.json()
                problem = problem if isinstance(problem, dict) else {}
            except ValueError:
                problem = {}
            detail = problem.get("detail") or reply.text
            raise ReviewError(f"{reply.status_code}: {detail}", status=reply.status_code, problem=problem)
        return reply.json()

    def inbox(
        self, *, tool: str | None, limit: int, cursor: str | None, order: str = "oldest", full: bool = False
    ) -> dict[str, Any]:
        """A page of the inbox; with ``full``, long values whole (the service folds them otherwise:
        an answer that edits arguments needs them whole)."""
        given = {
            "tool": tool,
            "limit": limit,
            "cursor": cursor,
            "order": order,
            "full": "true" if full else None,
        }
        params = {k: v for k, v in given.items() if v is not None}
        result: dict[str, Any] = self._call("GET", "/handrail/inbox", params=params)
        return result

    def answer(self, thread_id: str, interrupt_id: str, answer: Any) -> dict[str, Any]:
        path = f"/handrail/threads/{thread_id}/interrupts/{interrupt_id}/answer"
        result: dict[str, Any] = self._call("POST", path, params={"wait": "true"}, json={"answer": answer})
        return result

    def state(self, thread_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", f"/threads/{thread_id}/state")
        return result

    def pending(self, thread_id: str) -> dict[str, dict[str, Any]]:
        """The inbox items of ``thread_id``'s reviews this token may decide, by interrupt id
        (their approvals and expiry)."""
        found: dict[str, dict[str, Any]] = {}
        cursor: str | None = None
        for _ in range(0, _SCAN, _PAGE):
            params: dict[str, Any] = {"limit": _PAGE, "messages": 0, "thread_id": thread_id}
            if cursor:
                params["cursor"] = cursor
            page = self._call("GET", "/handrail/inbox", params=params)
            found.update({i["interrupt_id"]: i for i in page["items"] if i.get("thread_id") == thread_id})
            cursor = page.get("next_cursor")
            if not cursor:
                break
        return found

    def threads(self, status: str | None, limit: int) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"limit": limit}
        if status:
            body["status"] = status
        result: list[dict[str, Any]] = self._call("POST", "/threads/search", json=body)
        return result

    def audit(self, thread_id: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", f"/handrail/threads/{thread_id}/audit")
        return result

    def audit_across(self, *, since: float | None, until: float | None, limit: int) -> list[dict[str, Any]]:
        given = {"since": since, "until": until, "limit": limit}
        params = {k: v for k, v in given.items() if v is not None}
        result: list[dict[str, Any]] = self._call("GET", "/handrail/audit", params=params)
        return result

    def thread_ids(self, prefix: str) -> list[str]:
        """The ids of the threads this token may read that are ``prefix`` or start with it."""
        try:
            self._call("GET", f"/threads/{quote(prefix, safe='')}")
            return [prefix]
        except ReviewError as exc:
            if exc.status not in (403, 404, 422):
                raise
        found: list[str] = []
        for offset in range(0, _SCAN, _PAGE):
            page = self._call("POST", "/threads/search", json={"limit": _PAGE, "offset": offset})
            found += [t["thread_id"] for t in page if str(t["thread_id"]).startswith(prefix)]
            if len(page) < _PAGE:
                break
        return found

    def locate(self, prefix: str) -> list[dict[str, Any]]:
        """Reviews whose id starts with ``prefix`` found in the audit of the threads this token
        may read (the most recently updated): pending or answered, whoever may decide them."""
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for thread in self._call("POST", "/threads/search", json={"limit": _LOCATE_THREADS}):
            try:
                entries = self.audit(str(thread["thread_id"]))
            except ReviewError:
                continue
            _note_reviews(found, entries, prefix)
        return list(found.values())

    def grants(
        self, *, thread_id: str | None = None, agent: str | None = None, active: bool = True
    ) -> list[dict[str, Any]]:
        """The grants this token may see, newest first (with ``active``, only those in force)."""
        given = {"thread_id": thread_id, "agent": agent, "active": "true" if active else "false"}
        params: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        found: list[dict[str, Any]] = []
        for offset in range(0, _SCAN, _GRANT_PAGE):
            page = self._call(
                "GET", "/handrail/grants", params={**params, "limit": _GRANT_PAGE, "offset": offset}
            )
            found += page["items"]
            if len(page["items"]) < _GRANT_PAGE:
                break
        return found

    def revoke_grant(self, grant_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", f"/handrail/grants/{quote(grant_id, safe='')}/revoke")
        return result


class StoreReviews:
    """The review CLI's calls, straight on a store, with the agent hosted in this process."""

    def __init__(self, agent: Any, reviewer: str | None, roles: list[str]) -> None:
        self._agent = agent
        self._reviewer = {"id": reviewer or getpass.getuser(), "roles": list(roles)}

    def inbox(
        self, *, tool: str | None, limit: int, cursor: str | None, order: str = "oldest", full: bool = False
    ) -> dict[str, Any]:
        """A page of the inbox (a store's values are always whole)."""
        from handrail.server.wire import inbox_entry

        page = self._agent.list_interrupts(
            tool=tool, limit=limit, cursor=cursor, reviewer=self._reviewer, order=order
        )
        items = []
        for item in page.items:
            state = self._agent.get_state({"configurable": {"thread_id": item.thread_id}})
            items.append(inbox_entry(item, list(state.values.get("messages", []))[-3:]))
        return {"items": items, "next_cursor": page.next_cursor}

    def answer(self, thread_id: str, interrupt_id: str, answer: Any) -> dict[str, Any]:
        from handrail.errors import (
            AlreadyAnsweredError,
            InvalidDecisionError,
            NotAllowedError,
            ReviewExpiredError,
        )
        from handrail.messages import new_id
        from handrail.server.wire import to_wire

        try:
            decision = self._agent.decide(
                thread_id, interrupt_id, answer, reviewer=self._reviewer, channel="cli"
            )
        except AlreadyAnsweredError as exc:  # what the service's 409 says
            answered = {"answered_by": exc.answered_by, "answered_at": exc.answered_at.isoformat()}
            raise ReviewError(str(exc), status=409, problem={**answered, "channel": exc.channel}) from None
        except ReviewExpiredError as exc:  # what the service's 409 says (rule 15)
            raise ReviewError(
                str(exc), status=409, problem={"expired_at": exc.expired_at.isoformat()}
            ) from None
        except NotAllowedError as exc:  # what the service's 403 says
            raise ReviewError(str(exc), status=403, problem={"roles": list(exc.roles)}) from None
        except InvalidDecisionError as exc:  # what the service's 422 says
            raise ReviewError(str(exc), status=422, problem={"detail": str(exc)}) from None
        counted = {
            "waiting": decision.waiting,  # a vote of several (rule 14): nothing runs yet
            "approvals": [a.as_json() for a in decision.approvals],
        }
        if decision.waiting:
            return {
                "thread_id": thread_id,
                "interrupt_id": interrupt_id,
                "reviewer": decision.reviewer,
                **counted,
            }
        # the answer queued the thread: run it here, unless a worker took it first (handrail.worker)
        store = self._agent.checkpointer
        assert store is not None
        run_id = new_id("run-")
        if store.claim_queued(run_id, thread_id=thread_id) is not None:
            self._agent.run_claimed(thread_id, run_id)
        state = self._agent.get_state({"configurable": {"thread_id": thread_id}})
        values = to_wire(state.values)
        if state.interrupts:
            values["__interrupt__"] = to_wire(list(state.interrupts))
        return {
            "thread_id": thread_id,
            "interrupt_id": interrupt_id,
            "reviewer": decision.reviewer,
            "values": values,
            **counted,
        }

    def pending(self, thread_id: str) -> dict[str, dict[str, Any]]:
        """The inbox items of ``thread_id``'s pending reviews, by interrupt id (their approvals
        and expiry), whoever may decide them."""
        from handrail.server.wire import inbox_entry

        page = self._agent.list_interrupts(thread_id=thread_id, limit=1000)
        return {item.interrupt.id: inbox_entry(item, []) for item in page.items}

    def state(self, thread_id: str) -> dict[str, Any]:
        from handrail.server.wire import state_of

        return state_of(thread_id, self._agent.get_state({"configurable": {"thread_id": thread_id}}))

    def threads(self, status: str | None, limit: int) -> list[dict[str, Any]]:
        store_status = {"busy": "running"}.get(status or "", status)
        records = self._agent.list_threads(status=store_status, limit=limit)
        return [
            {
                "thread_id": r.thread_id,
                "status": r.status,
                "updated_at": r.updated_at,
                "metadata": dict(r.metadata),
            }
            for r in records
        ]

    def audit(self, thread_id: str) -> list[dict[str, Any]]:
        from handrail.server.wire import audit_entry

        return [
            audit_entry(e) for e in self._agent.get_audit_trail({"configurable": {"thread_id": thread_id}})
        ]

    def audit_across(self, *, since: float | None, until: float | None, limit: int) -> list[dict[str, Any]]:
        from handrail.server.wire import audit_entry

        return [audit_entry(e) for e in self._agent.audit(since=since, until=until, limit=limit)]

    def thread_ids(self, prefix: str) -> list[str]:
        """The ids of the store's threads that are ``prefix`` or start with it."""
        store = self._agent.checkpointer
        if store is not None and store.get_thread(prefix) is not None:
            return [prefix]
        found: list[str] = []
        for offset in range(0, _SCAN, _PAGE):
            page = self._agent.list_threads(limit=_PAGE, offset=offset)
            found += [r.thread_id for r in page if r.thread_id.startswith(prefix)]
            if len(page) < _PAGE:
                break
        return found

    def locate(self, prefix: str) -> list[dict[str, Any]]:
        """Reviews whose id starts with ``prefix``, whoever may decide them: pending (as the
        inbox gives them) or answered (from the audit across threads)."""
        from handrail.server.wire import audit_entry, inbox_entry

        found: dict[tuple[str, str], dict[str, Any]] = {}
        cursor = None
        while True:
            page = self._agent.list_interrupts(limit=200, cursor=cursor)  # no reviewer: every review
            for item in page.items:
                if item.interrupt.id.startswith(prefix):
                    found[(item.thread_id, item.interrupt.id)] = inbox_entry(item, [])
            cursor = page.next_cursor
            if not cursor:
                break
        _note_reviews(found, [audit_entry(e) for e in self._agent.audit(limit=_SCAN)], prefix)
        return list(found.values())

    def grants(
        self, *, thread_id: str | None = None, agent: str | None = None, active: bool = True
    ) -> list[dict[str, Any]]:
        """The store's grants, newest first (with ``active``, only those in force); ``agent``
        is an assistant id, as the grants keep it."""
        from handrail.runtime import answering
        from handrail.server.grants import grant_json

        found: list[dict[str, Any]] = []
        for offset in range(0, _SCAN, _GRANT_PAGE):
            page = self._agent.list_grants(
                thread_id=thread_id, agent=agent, active=active, limit=_GRANT_PAGE, offset=offset
            )
            at = answering.now()
            found += [grant_json(g, at) for g in page]
            if len(page) < _GRANT_PAGE:
                break
        return found

    def revoke_grant(self, grant_id: str) -> dict[str, Any]:
        from handrail.errors import InvalidInputError
        from handrail.runtime import answering
        from handrail.server.grants import grant_json

        try:
            revoked = self._agent.revoke_grant(grant_id, by=self._reviewer)
        except InvalidInputError as exc:
            raise ReviewError(str(exc), status=404) from None
        return grant_json(revoked, answering.now())


_PAGE = 100
_GRANT_PAGE = 500
_SCAN = 100_000  # at most this many threads, or audit entries, are looked through for a prefix
_LOCATE_THREADS = 50


def _note_reviews(
    found: dict[tuple[str, str], dict[str, Any]], entries: list[dict[str, Any]], prefix: str
) -> None:
    """Add to ``found`` the reviews of audit ``entries`` whose id starts with ``prefix``,
    shaped as inbox items (their action requests from the request's entry)."""
    for e in entries:
        interrupt_id = e.get("interrupt_id")
        if e.get("event") not in ("review_requested", "answered") or not interrupt_id:
            continue
        if not str(interrupt_id).startswith(prefix):
            continue
        item = found.setdefault(
            (e["thread_id"], interrupt_id),
            {"thread_id": e["thread_id"], "interrupt_id": interrupt_id, "value": None, "action_requests": []},
        )
        value = e.get("value")
        if e["event"] == "review_requested" and item["value"] is None and isinstance(value, dict):
            item["value"] = value
            item["action_requests"] = value.get("action_requests") or ([value] if "name" in value else [])


@contextmanager
def open_reviews(args: Any) -> Iterator[Reviews]:
    """The reviews the command's flags name: a service (``--url``) or a store (``--db``/``--postgres``)."""
    import os

    url = args.url or os.environ.get("HANDRAIL_URL")
    if args.db is None and args.postgres is None and url:
        token = args.token or os.environ.get("HANDRAIL_TOKEN")
        if not token:
            raise ReviewError(
                "a service needs a token: --token TOKEN or HANDRAIL_TOKEN (see 'handrail tokens create')"
            )
        yield ServiceReviews(url, token)
        return
    if args.agent is None:
        raise ReviewError(
            "name a service (--url or HANDRAIL_URL, with --token) or a store and its agent "
            "(--db PATH or --postgres DSN, with --agent module:obj)"
        )
    from handrail.server.loading import load_agent, on_store

    agent = load_agent(args.agent)
    if args.postgres is not None:
        from handrail.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(args.postgres, schema=args.schema, pool_size=2) as saver:
            saver.setup()
            yield StoreReviews(on_store(agent, saver), args.reviewer, args.role)
        return
    from handrail.checkpoint.sqlite import SqliteSaver

    with SqliteSaver(args.db or "handrail.db") as sqlite_saver:
        yield StoreReviews(on_store(agent, sqlite_saver), args.reviewer, args.role)
