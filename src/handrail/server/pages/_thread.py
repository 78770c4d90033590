"""The thread page: the whole conversation, its pending reviews and its audit trail (and CSV).

``GET /inbox/threads/{thread_id}`` shows every message, the reviews waiting on the thread
(linked when the reviewer may decide them, else which role they wait for) and the audit
trail - asked, who decided what and when and through which channel, edited from what,
what ran and with what outcome - read from the log itself. ``.../audit.csv`` is the
same trail as the JSON API's CSV, as a download. Any signed-in reviewer may read a
thread, as any credential may read it through the API; deciding is what roles limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from handrail._message_display import reviewer_content
from handrail.review import reviewer_id
from handrail.server.pages._lookup import answer_verb, refused
from handrail.server.pages._markup import summary
from handrail.server.pages._policy import review_policy
from handrail.server.pages._render import html, path_part, raw_url, render, secure, service_of, visitor
from handrail.server.pages._review import review_url
from handrail.server.pages._shape import read_shape
from handrail.server.wire import audit_csv, audit_entry, to_wire
from handrail.types import AuditEntry

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


def _content(result: Any) -> tuple[str, str | None]:
    wire = to_wire(result)
    if isinstance(wire, Mapping):
        content = reviewer_content(wire)[0]  # a tool's own result, not the notice for the model
        text = content if isinstance(content, str) else summary(content, 2000)
        return text, str(wire.get("status") or "") or None
    return summary(wire, 2000), None


def trail_rows(entries: list[AuditEntry]) -> list[dict[str, Any]]:
    """The audit trail as the page's table shows it, oldest first."""
    rows = []
    for e in entries:
        row: dict[str, Any] = {"seq": e.seq, "at": e.at, "event": e.event, "who": None, "channel": e.channel}
        if e.event == "review_requested":
            shape = read_shape(e.value)
            calls = "; ".join(f"{c.name}({summary(c.args, 200)})" for c in shape.calls)
            row["what"] = calls or summary(e.value)
            row["label"] = "outcome unknown: asked" if e.kind == "outcome_unknown" else "asked"
        elif e.event == "answered":
            row["who"] = reviewer_id(e.reviewer)
            row["label"] = answer_verb(e.value)
            if e.kind == "quorum":  # rule 14: what the approvals decided together
                row["label"] += ": approvals complete"
            elif e.kind == "expired":  # rule 15: nobody answered in time
                row["label"] = f"expired: {row['label']}"
            row["answer"] = to_wire(e.value)
        elif e.event == "approval":  # one vote of a review that counts approvals (rule 14)
            row["who"] = reviewer_id(e.reviewer)
            row["label"] = f"approval: {e.kind}" if e.kind else "approval"
            row["answer"] = to_wire(e.value)
        elif e.event == "tool_started":
            row["label"] = "ran"
            row["what"] = f"{e.tool}({summary(e.args, 200)})"
            grant = e.value.get("grant_id") if isinstance(e.value, Mapping) else None
            if e.channel == "grant" and isinstance(grant, str):  # rule 16: no review; a grant let it run
                row["label"] = "ran under a grant"
                row["who"] = reviewer_id(e.reviewer)
                row["grant"] = grant
            proposed = e.proposed.get("args") if isinstance(e.proposed, Mapping) else None
            if proposed is not None and proposed != e.args:
                row["label"] = "ran, edited"
                row["diff"] = (proposed, e.args)
        elif e.event == "tool_finished":
            text, status = _content(e.result)
            row["label"] = "outcome" + (f" ({status})" if status else "")
            row["what"] = f"{e.tool}: {text}"
            row["status"] = status
        else:  # a change to the thread (input, an update, a fork...) or what the runtime saw
            row["label"] = e.event.replace("_", " ")
            row["who"] = reviewer_id(e.by) if isinstance(e.by, Mapping) else None
            shown = e.value if e.value is not None else e.result
            if shown is not None:
                row["what"] = summary(to_wire(shown), 300)
        rows.append(row)
    return rows


@router.get("/inbox/threads/{thread_id}")
@html
async def thread_page(request: Request, thread_id: str) -> Response:
    """One thread: conversation, pending reviews, audit trail."""
    me = visitor(request)
    service = service_of(request)
    assistant, agent, row = await service.readable(thread_id, me.credential)
    config: Any = {"configurable": {"thread_id": thread_id}}
    state = await agent.aget_state(config)
    trail = await agent.aget_audit_trail(config)
    pending = []
    items = {}
    if state.interrupts:  # their approvals and expiry (rules 14-15), as the inbox has them
        page = await agent.alist_interrupts(thread_id=thread_id, limit=1000)
        items = {i.interrupt.id: i for i in page.items}
    for interrupt in state.interrupts:
        shape = read_shape(interrupt.value, agent)
        allowed = refused(agent, interrupt.value, me.credential) is None
        roles = agent.roles_for(interrupt.value)
        policy = review_policy(items.get(interrupt.id), reviewer_id(me.credential.reviewer))
        pending.append(
            {
                "tools": shape.tools,
                "url": review_url(thread_id, interrupt.id) if allowed else None,
                "roles": roles,
                "counts": list(policy.counts.values()),
                "expiry": policy.expiry,
            }
        )
    store = agent.checkpointer
    record = await store.aget_thread(thread_id) if store is not None else None
    metadata = dict(record.metadata) if record else dict(row.metadata) if row else {}
    return render(
        request,
        "thread.html",
        title=f"Thread {thread_id}",
        me=me,
        thread_id=thread_id,
        assistant=assistant,
        metadata=to_wire(metadata),
        thread_status=record.status if record else "idle",
        messages=[
            (n, m)
            for n, m in enumerate(to_wire(list(state.values.get("messages") or [])))
            if isinstance(m, dict)
        ],
        raw_of=lambda source: raw_url(thread_id, source),
        log_length=record.head_seq if record else None,
        pending=pending,
        trail=trail_rows(trail),
        csv_url=f"/inbox/threads/{path_part(thread_id)}/audit.csv",
    )


@router.get("/inbox/threads/{thread_id}/audit.csv")
@html
async def audit_download(request: Request, thread_id: str) -> Response:
    """The thread's audit trail as CSV (the JSON API's columns), as a download."""
    me = visitor(request)
    _, agent, _ = await service_of(request).readable(thread_id, me.credential)
    entries = await agent.aget_audit_trail({"configurable": {"thread_id": thread_id}})
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in thread_id)[:80] or "thread"
    response = Response(
        audit_csv([audit_entry(e) for e in entries]),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="audit-{name}.csv"'},
    )
    secure(request, response)
    return response
