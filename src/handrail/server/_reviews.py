"""handrail's own paths: the inbox across threads, answers by interrupt id, the audit trail.

``GET /handrail/inbox`` lists the reviews the caller may decide (SPEC rule 12), each with
its action requests, the decisions allowed, the tools' argument schemas and the last
messages of its thread. ``POST /handrail/threads/{thread_id}/interrupts/{interrupt_id}/answer``
records an answer with the caller's identity (rule 11) through ``Agent.adecide`` - the
same checks as the library, the same messages - and the service's worker then continues
the thread; ``?wait=true`` returns once the run paused again or ended.
``GET /handrail/threads/{thread_id}/audit`` is the thread's audit trail, and
``GET /handrail/audit`` the trail across threads, as JSON or CSV.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

import orjson
from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from handrail.errors import InvalidDecisionError
from handrail.server._access import require
from handrail.server._auth import caller
from handrail.server._bodies import AnswerBody, InterruptPath, ThreadPath
from handrail.server._events import decode_notice
from handrail.server._limits import MAX_ID, GuardedRoute, check_storable, load_json
from handrail.server._problems import Problem, documented
from handrail.server._service import Service
from handrail.server.tokens import Credential
from handrail.server.wire import audit_csv, audit_entry, inbox_entry, to_wire

__all__ = ["FOLD_LIMIT", "fold_long", "inbox_page", "record_answer", "router"]

WAIT_SECONDS = 120.0  # how long ``?wait=true`` follows a run another worker took

router = APIRouter(
    prefix="/handrail", tags=["reviews"], responses=documented(400, 401, 413), route_class=GuardedRoute
)
_AUDIT_BODIES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The audit trail, oldest first",
        "content": {
            "application/json": {"schema": {"type": "array", "items": {"type": "object"}}},
            "text/csv": {"schema": {"type": "string"}},
        },
    }
}


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data, default=str), status_code=status, media_type="application/json")


def _service(request: Request) -> Service:
    service = request.app.state.service
    assert isinstance(service, Service)
    return service


def _metadata_filter(raw: str | None) -> dict[str, Any] | None:
    """The ``metadata`` query parameter: JSON as a body is taken (``limits.load_json``), an
    object, no NUL in it."""
    if raw is None:
        return None
    shape = '\'metadata\' must be a JSON object, e.g. {"team": "data"}'
    try:
        value = load_json(raw, "'metadata'")
    except ValueError as exc:
        raise Problem(400, f"{exc}; {shape}") from None
    if not isinstance(value, dict):
        raise Problem(400, shape)
    try:
        return check_storable(value, "'metadata'")
    except ValueError as exc:
        raise Problem(400, str(exc)) from None


@router.get("/inbox", responses=documented(404, 422))
async def inbox(
    request: Request,
    tool: str | None = Query(None, max_length=MAX_ID, description="only reviews of this tool"),
    agent: str | None = Query(None, max_length=MAX_ID, description="only threads of this assistant"),
    thread_id: str | None = Query(None, max_length=MAX_ID, description="only the reviews of this thread"),
    older_than: float | None = Query(None, ge=0, description="seconds"),
    metadata: str | None = Query(None, description="a JSON object the thread's metadata must contain"),
    kind: str | None = Query(None, pattern="^(interrupt|outcome_unknown)$"),
    limit: int = Query(20, ge=1, le=200),
    cursor: str | None = Query(None, max_length=1024, description="next_cursor of the page before"),
    order: Literal["oldest", "newest"] = Query(
        "oldest", description="by creation time: oldest or newest first"
    ),
    messages: int = Query(3, ge=0, le=50, description="how many of the thread's last messages to include"),
    full: bool = Query(False, description="long strings whole (else each over 4096 characters is folded)"),
    credential: Credential = Depends(caller),
) -> Response:
    """The reviews waiting for the caller, oldest first (or ``order=newest``), a page at a time.

    ``next_cursor`` continues the listing in the same order (pass the same ``order`` with it).
    A string over :data:`FOLD_LIMIT` characters anywhere in an item is folded: its first
    :data:`FOLD_HEAD` characters and a note of its length (``full=true`` gives it whole).
    """
    page = await inbox_page(
        _service(request),
        credential,
        tool=tool,
        agent=agent,
        thread_id=thread_id,
        older_than=older_than,
        metadata=_metadata_filter(metadata),
        kind=kind,
        limit=limit,
        cursor=cursor,
        order=order,
        messages=messages,
    )
    if not full:
        page["items"] = [fold_long(item) for item in page["items"]]
    return _json(page)


FOLD_LIMIT = 4096
"""The inbox's strings longer than this are folded unless ``full=true``."""
FOLD_HEAD = 1000


def fold_long(value: Any) -> Any:
    """``value`` with each string over :data:`FOLD_LIMIT` characters cut to its head and a note."""
    if isinstance(value, str):
        if len(value) <= FOLD_LIMIT:
            return value
        note = f"[handrail: folded, {len(value)} characters in all; full=true gives the whole value]"
        return f"{value[:FOLD_HEAD]}… {note}"
    if isinstance(value, dict):
        return {key: fold_long(item) for key, item in value.items()}
    if isinstance(value, list):
        return [fold_long(item) for item in value]
    return value


@router.post(
    "/threads/{thread_id}/interrupts/{interrupt_id}/answer", responses=documented(403, 404, 409, 422)
)
async def answer(
    thread_id: ThreadPath,
    interrupt_id: InterruptPath,
    request: Request,
    payload: AnswerBody,
    wait: bool = False,
    credential: Credential = Depends(caller),
) -> Response:
    """Record the caller's answer to one interrupt; the service then continues the thread.

    The body is ``{"answer": ...}`` (for a tool review ``{"answer": {"decisions": [...]}}``).
    An identity in the body is ignored: the credential says who answers.
    """
    unexpected = sorted(payload.model_extra or {})
    if unexpected:
        raise Problem(400, f'unexpected field(s) {unexpected}; the body is {{"answer": ...}}')
    # The review CLI names itself (X-Handrail-Channel: cli); any other client is "http".
    channel = "cli" if request.headers.get("x-handrail-channel") == "cli" else "http"
    body = await record_answer(
        _service(request), thread_id, interrupt_id, payload.answer, credential, channel=channel, wait=wait
    )
    return _json(body, 200 if wait else 202)


@router.get("/threads/{thread_id}/audit", responses={**_AUDIT_BODIES, **documented(404, 422)})
async def audit(
    thread_id: ThreadPath,
    request: Request,
    format: str = Query("json", pattern="^(json|csv)$"),
    credential: Credential = Depends(caller),
) -> Response:
    """Who was asked what, who answered what, when and how, and what ran (JSON or CSV)."""
    _, agent, _ = await _service(request).readable(thread_id, credential)
    entries = [
        audit_entry(e) for e in await agent.aget_audit_trail({"configurable": {"thread_id": thread_id}})
    ]
    if format == "json":
        return _json(entries)
    return Response(audit_csv(entries), media_type="text/csv")


# What every channel calls (the JSON API here, the web pages, chat buttons) ----------------------
async def inbox_page(
    service: Service,
    credential: Credential,
    *,
    tool: str | None = None,
    agent: str | None = None,
    thread_id: str | None = None,
    older_than: float | None = None,
    metadata: dict[str, Any] | None = None,
    kind: str | None = None,
    limit: int = 20,
    cursor: str | None = None,
    order: Literal["oldest", "newest"] = "oldest",
    messages: int = 3,
) -> dict[str, Any]:
    """One page of the reviews ``credential`` may decide: ``{"items": [...], "next_cursor"}``.

    Only the threads of the agents served here (of ``agent`` alone, when given) are listed.
    It needs the ``review`` scope.
    """
    require(credential, "review", "the inbox")
    if agent is not None:
        service.agent(agent)
    library = service.agents[agent or service.default_assistant]
    page = await library.alist_interrupts(
        tool=tool,
        thread_id=thread_id,
        older_than=older_than,
        metadata=metadata,
        kind=kind,
        limit=limit,
        cursor=cursor,
        reviewer=credential.reviewer,
        order=order,
        owners=service.owners(agent),
    )

    async def last_messages(item: Any) -> list[Any]:
        owner = service.agents[service.owner_of(item.metadata) or service.default_assistant]
        state = await owner.aget_state({"configurable": {"thread_id": item.thread_id}})
        return list(state.values.get("messages", []))[-messages:]

    # the page's threads are read at once, not one after another
    lasts = await asyncio.gather(*(last_messages(item) for item in page.items)) if messages else []
    if not messages:
        return {"items": [inbox_entry(item, []) for item in page.items], "next_cursor": page.next_cursor}
    items = [inbox_entry(item, last) for item, last in zip(page.items, lasts, strict=True)]
    return {"items": items, "next_cursor": page.next_cursor}


async def record_answer(
    service: Service,
    thread_id: str,
    interrupt_id: str,
    answer: Any,
    credential: Credential,
    *,
    channel: str,
    wait: bool = False,
) -> dict[str, Any]:
    """Record ``credential``'s answer to one interrupt; a worker then continues the thread.

    The checks are the library's (rule 5, rule 12; ``Agent.adecide``): a refused answer
    raises and saves nothing. An interrupt that is not pending on the thread is a 404.
    The answer queues the thread in the same transaction (``handrail.worker``), and this
    process's worker is woken. Returns what was recorded (the answer endpoint's body);
    with ``wait``, once the run that continued the thread paused again or ended, with
    ``run_status`` (``success`` or ``error``), ``run_error`` and the thread's ``values``.
    """
    require(credential, "review", "answering a review")
    _, agent, _ = await service.owner(thread_id, fresh=True)
    store = agent.checkpointer
    assert store is not None
    before = await store.afeed_end() if wait else None
    try:
        decision = await agent.adecide(
            thread_id, interrupt_id, answer, reviewer=credential.reviewer, channel=channel
        )
    except InvalidDecisionError:
        state = await agent.aget_state({"configurable": {"thread_id": thread_id}})
        if interrupt_id not in {i.id for i in state.interrupts}:
            raise Problem(
                404,
                f"thread {thread_id!r} has no pending interrupt {interrupt_id!r}; pending: "
                f"{[i.id for i in state.interrupts] or 'none'}",
            ) from None
        raise
    body: dict[str, Any] = {
        "thread_id": thread_id,
        "interrupt_id": interrupt_id,
        "answer": to_wire(decision.answer),
        "reviewer": decision.reviewer,
        "channel": decision.channel,
        # rule 14: a vote on a review that needs more approvals leaves it pending
        "waiting": decision.waiting,
        "approvals": [a.as_json() for a in decision.approvals],
    }
    if service.live is not None:
        service.live.poke()
    if not wait or decision.waiting:  # a vote runs nothing: there is no run to wait for
        service.worker.wake()
        return body
    body.update(await _continued(service, agent, thread_id, before))
    return body


async def _continued(service: Service, agent: Any, thread_id: str, before: str | None) -> dict[str, Any]:
    """Run the queued thread here, or wait for the worker that took it; how it went."""
    outcome: dict[str, Any] = {"run_status": "success"}
    try:  # with --concurrency 0 this process runs no queued thread: it waits for a worker
        ran = await service.worker.run_thread(thread_id) if service.runs_answers else None
    except Exception as exc:  # the run's own error: its thread keeps what it saved
        ran, outcome = None, {"run_status": "error", "run_error": f"{type(exc).__name__}: {exc}"}
    if ran is None and "run_error" not in outcome:
        outcome.update(await _finished_elsewhere(agent.checkpointer, thread_id, before))
    state = await agent.aget_state({"configurable": {"thread_id": thread_id}})
    values = to_wire(state.values)
    if state.interrupts:
        values["__interrupt__"] = to_wire(list(state.interrupts))
    outcome["values"] = values
    return outcome


async def _finished_elsewhere(store: Any, thread_id: str, after: str | None) -> dict[str, Any]:
    """Follow the feed until a run of ``thread_id`` ends (another worker took it)."""
    deadline = time.monotonic() + WAIT_SECONDS
    position = after
    while time.monotonic() < deadline:
        for entry in await store.aread_feed(position):
            position = entry.cursor
            if entry.thread_id == thread_id and entry.kind == "run.finished":
                data = decode_notice(entry) or {}
                status = data.get("status", "success")
                return (
                    {"run_status": status}
                    if status == "success"
                    else {
                        "run_status": status,
                        "run_error": "the run stopped with an error (see the thread's state)",
                    }
                )
        await asyncio.sleep(0.05)
    return {
        "run_status": "pending",
        "run_error": f"no run ended within {WAIT_SECONDS:.0f} s; it may still go on",
    }


@router.get("/audit", responses={**_AUDIT_BODIES, **documented(404, 422)})
async def audit_across(
    request: Request,
    since: float | None = Query(None, ge=0, description="entries at or after this time (epoch seconds)"),
    until: float | None = Query(None, ge=0, description="entries at or before this time (epoch seconds)"),
    agent: str | None = Query(None, max_length=MAX_ID, description="only threads of this assistant"),
    metadata: str | None = Query(None, description="a JSON object the thread's metadata must contain"),
    limit: int = Query(1000, ge=1, le=100_000, description="at most this many entries, the oldest"),
    format: str = Query("json", pattern="^(json|csv)$"),
    credential: Credential = Depends(caller),
) -> Response:
    """The audit trail across threads, oldest first (JSON or CSV): each thread of the agents
    served here updated since ``since`` is read from its log (``admin`` scope)."""
    require(credential, "admin", "the audit across threads")
    service = _service(request)
    if agent is not None:
        service.agent(agent)
    library = service.agents[agent or service.default_assistant]
    trail = await library.aaudit(
        since=since,
        until=until,
        metadata=_metadata_filter(metadata),
        limit=limit,
        owners=service.owners(agent),
    )
    entries = [audit_entry(e) for e in trail]
    if format == "json":
        return _json(entries)
    return Response(audit_csv(entries), media_type="text/csv")
