"""Bulk answers: approve or reject several reviews of one tool from the inbox at once.

``POST /inbox/bulk`` takes the reviews ticked on the inbox page and answers each one on
its own through ``reviews.record_answer`` - the path of a single answer, with every
check (rule 5, rule 12, rule 8) - so each is recorded by itself, and one that fails
(answered meanwhile, not allowed, refused) leaves exactly that one unanswered and the
others answered. A bulk answer is only decisions: it never carries a grant (SPEC rule
16), so it never lets a later call through without review.

Only reviews whose calls are all of one tool, and the same tool for all, are taken;
an ``outcome_unknown`` review (a call that may have run already) is answered alone.

Nothing is answered on the first post: it shows what would be approved or rejected
(each review's tool, arguments and thread) and asks to confirm; the confirmed post
answers, then says per review what was recorded, with a link to what ran.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from handrail.errors import HandrailError
from handrail.review import reviewer_id
from handrail.server._problems import Problem
from handrail.server._reviews import record_answer
from handrail.server.pages._lookup import answer_verb, find_review, refused
from handrail.server.pages._markup import summary
from handrail.server.pages._policy import counts_of, pending_item, review_policy
from handrail.server.pages._render import check_csrf, html, read_form, render, service_of, visitor
from handrail.server.pages._review import review_url
from handrail.server.pages._shape import read_shape

__all__ = ["MAX_BULK", "router"]

router = APIRouter(include_in_schema=False)
MAX_BULK = 200


def _picked(form: dict[str, list[str]]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for raw in form.get("review") or []:
        try:
            thread_id, interrupt_id = orjson.loads(raw)
        except (orjson.JSONDecodeError, ValueError, TypeError):
            raise Problem(400, "a ticked review is named [thread_id, interrupt_id]") from None
        if not isinstance(thread_id, str) or not isinstance(interrupt_id, str):
            raise Problem(400, "a ticked review is named [thread_id, interrupt_id]")
        if (thread_id, interrupt_id) not in out:
            out.append((thread_id, interrupt_id))
    if not out:
        raise Problem(400, "Tick the reviews to answer first.")
    if len(out) > MAX_BULK:
        raise Problem(400, f"A bulk answer takes at most {MAX_BULK} reviews; {len(out)} were ticked.")
    return out


@router.post("/inbox/bulk")
@html
async def bulk(request: Request) -> Response:
    """Approve or reject each ticked review, one answer each; show what became of each."""
    me = visitor(request)
    form = await read_form(request)
    check_csrf(request, form, me.csrf)
    decision = (form.get("decision") or [""])[-1]
    if decision not in ("approve", "reject"):
        raise Problem(400, "A bulk answer approves or rejects.")
    message = (form.get("message") or [""])[-1].strip()
    picked = _picked(form)
    service = service_of(request)
    verb = "approved" if decision == "approve" else "rejected"
    if (form.get("confirmed") or [""])[-1] != "yes":
        return await _confirm(request, picked, decision, message, verb)
    results: list[dict[str, Any]] = []
    tool: str | None = None
    for thread_id, interrupt_id in picked:
        result: dict[str, Any] = {
            "thread_id": thread_id,
            "interrupt_id": interrupt_id,
            "url": review_url(thread_id, interrupt_id),
            "ok": False,
            "tools": [],
        }
        results.append(result)
        try:
            review = await _readable_review(service, thread_id, interrupt_id, me.credential)
        except Problem as exc:
            result["error"] = exc.detail
            continue
        shape = read_shape(review.value, review.agent)
        result["tools"] = shape.tools
        if review.status != "pending":
            result["error"] = review.notice()
            continue
        why = refused(review.agent, review.value, me.credential)
        if why is not None:
            result["error"] = f"You may not decide this review: {why}."
            continue
        tools = set(shape.tools)
        if shape.kind not in ("batched", "per_call") or len(tools) != 1:
            result["error"] = "Answer this review on its own page (bulk answers take calls of one tool)."
            continue
        if tool is None:
            tool = next(iter(tools))
        if tools != {tool}:
            result["error"] = f"This review is of {next(iter(tools))}, not {tool}: answer it on its own."
            continue
        one: dict[str, Any] = {"type": decision}
        if decision == "reject" and message:
            one["message"] = message
        answer = shape.answer([dict(one) for _ in shape.calls])  # decisions only: never a grant
        try:
            body = await record_answer(service, thread_id, interrupt_id, answer, me.credential, channel="web")
        except HandrailError as exc:
            result["error"] = str(exc)
            continue
        except Problem as exc:
            result["error"] = exc.detail
            continue
        result["ok"] = True
        result["verb"] = answer_verb(answer)
        result["decided_url"] = review_url(thread_id, interrupt_id) + "/decided"
        result["link"] = "What ran"
        if body.get("waiting"):  # a vote of a review that counts approvals (rule 14): nothing ran
            result["recorded"] = _vote_recorded(body.get("approvals") or [])
            result["link"] = "Where its approvals stand"
            continue
        try:
            result["recorded"] = (await find_review(service, thread_id, interrupt_id)).recorded()
        except Problem:
            result["recorded"] = f"Recorded: {result['verb']}."
    done = sum(1 for r in results if r["ok"])
    return render(
        request,
        "bulk.html",
        title="Bulk answer",
        me=me,
        results=results,
        done=done,
        verb=verb,
        tool=tool,
        confirm=None,
    )


def _vote_recorded(approvals: list[Any]) -> str:
    """What a bulk answer's vote recorded: ``Your approval was recorded: 1 of 2 approvals (by alice) ...``."""
    counts = counts_of(approvals)
    said = "; ".join(
        (f"{c.tool}: " if len(counts) > 1 else "") + c.text + (f" (by {c.who})" if c.who else "")
        for c in counts
    )
    return f"Your approval was recorded: {said}. It waits for the other reviewers' approvals."


async def _readable_review(service: Any, thread_id: str, interrupt_id: str, credential: Any) -> Any:
    """The review, for a caller who may read its thread (a 403 or 404 ``Problem`` otherwise):
    what a bulk post names is shown or answered only then, as on the review's own page."""
    await service.readable(thread_id, credential)
    return await find_review(service, thread_id, interrupt_id)


async def _confirm(
    request: Request, picked: list[tuple[str, str]], decision: str, message: str, verb: str
) -> Response:
    """The step before a bulk answer: each ticked review as it stands, and one button to confirm."""
    me = visitor(request)
    service = service_of(request)
    listed: list[dict[str, Any]] = []
    for thread_id, interrupt_id in picked:
        item: dict[str, Any] = {
            "thread_id": thread_id,
            "value": orjson.dumps([thread_id, interrupt_id]).decode(),
            "url": review_url(thread_id, interrupt_id),
            "calls": [],
            "note": None,
            "counts": [],
            "expiry": None,
        }
        listed.append(item)
        try:
            review = await _readable_review(service, thread_id, interrupt_id, me.credential)
        except Problem as exc:
            item["note"] = exc.detail
            continue
        shape = read_shape(review.value, review.agent)
        item["calls"] = [(c.name, summary(c.args)) for c in shape.calls]
        if review.status != "pending":
            item["note"] = review.notice()
            continue
        policy = review_policy(await pending_item(review), reviewer_id(me.credential.reviewer))
        item["counts"], item["expiry"] = list(policy.counts.values()), policy.expiry  # rules 14-15
    return render(
        request,
        "bulk.html",
        title="Confirm the bulk answer",
        me=me,
        confirm={"decision": decision, "message": message, "items": listed},
        verb=verb,
        results=[],
        done=0,
        tool=None,
    )
