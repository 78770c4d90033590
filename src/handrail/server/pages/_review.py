"""The review page: one interrupt, every call it asks about, and one form to answer them all.

``GET /inbox/reviews/{thread_id}/{interrupt_id}`` shows the calls in order (arguments as
highlighted JSON, the description), the last messages of the conversation, and per
call only the decisions its policy allows; edit opens a form built from the tool's
schema (``_forms.py``). A reviewer the policy does not name gets a 403 page (SPEC rule
12), as on every other channel.

``POST`` (same path) reads one decision per call and records the answer through
``reviews.record_answer`` with channel ``web`` - the JSON API's own path, with every
check of the library. A refusal shows the page again with the library's message and
everything that was typed; an answer that lost the race (rule 8) shows who won and the
thread as it stands now. A recorded answer leads to ``.../decided``: what was recorded,
then (live, from ``.../outcome``) what ran and its result, then the next review.

A review whose policy counts approvals (SPEC rule 14) shows per call "1 of 2 approvals",
who approved, and the edit the count stands at; one with an expiry (rule 15) the time
left (``policy.py``). An answer to such a review is a vote: ``.../decided`` then says
the reviewer's approval was recorded and how far the count has come, and the review
waits for the others. An answer to an expired review is refused with the library's
words (a 409 page).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from handrail.errors import AlreadyAnsweredError, InvalidDecisionError, ReviewExpiredError
from handrail.review import reviewer_id
from handrail.review.policy import DEFAULT_DESCRIPTION_PREFIX
from handrail.server._access import require
from handrail.server._problems import Problem
from handrail.server._reviews import inbox_page, record_answer
from handrail.server._service import Service
from handrail.server.pages._forms import FieldSpec, build_fields, read_fields
from handrail.server.pages._grant_form import (
    DURATIONS,
    grant_asked,
    grant_words,
    grantable_calls,
    read_grant,
)
from handrail.server.pages._lookup import (
    ReviewAt,
    find_review,
    live_end,
    outcome_after,
    refused,
    running_here,
)
from handrail.server.pages._markup import folded
from handrail.server.pages._policy import ReviewPolicy, pending_item, review_policy, votes_of
from handrail.server.pages._render import (
    Visitor,
    check_csrf,
    error_page,
    html,
    path_part,
    raw_url,
    read_form,
    redirect,
    render,
    service_of,
    visitor,
)
from handrail.server.pages._shape import DECISION_LABELS, CallReview, ReviewShape, read_shape
from handrail.server.wire import to_wire

__all__ = ["Submitted", "read_answer", "review_url", "router"]

router = APIRouter(include_in_schema=False)
LAST_MESSAGES = 6
OUTCOME_LABELS = {"approve": "Run it again", "respond": "Give its result", "reject": "Reject"}
_BASE = "/inbox/reviews/{thread_id}/{interrupt_id}"


def review_url(thread_id: str, interrupt_id: str) -> str:
    """The review page of one interrupt."""
    return f"/inbox/reviews/{path_part(thread_id)}/{path_part(interrupt_id)}"


async def _readable(request: Request, thread_id: str, interrupt_id: str) -> tuple[Visitor, ReviewAt]:
    me = visitor(request)
    require(me.credential, "review", "a review page")
    review = await find_review(service_of(request), thread_id, interrupt_id)
    if review.status == "unknown":
        raise Problem(404, f"Thread {thread_id!r} has no review {interrupt_id!r}.")
    why = refused(review.agent, review.value, me.credential)
    if why is not None:
        raise Problem(403, f"You may not decide this review: {why}.")
    return me, review


async def _neighbours(
    service: Service, me: Visitor, thread_id: str, interrupt_id: str
) -> dict[str, str | None]:
    """The reviews before and after this one in the reviewer's inbox (its first page)."""
    page = await inbox_page(service, me.credential, limit=50, messages=0)
    keys = [(i["thread_id"], i["interrupt_id"]) for i in page["items"]]
    here = keys.index((thread_id, interrupt_id)) if (thread_id, interrupt_id) in keys else None
    others = [k for k in keys if k != (thread_id, interrupt_id)]
    if here is None:
        after = others[0] if others else None
        before = None
    else:
        after = keys[here + 1] if here + 1 < len(keys) else None
        before = keys[here - 1] if here > 0 else None
    return {
        "next": review_url(*after) if after else None,
        "previous": review_url(*before) if before else None,
    }


def _last_messages(review: ReviewAt, count: int = LAST_MESSAGES) -> list[tuple[int, dict[str, Any]]]:
    """The conversation's last messages, each with its number in the thread (for raw links)."""
    messages = list(review.state.values.get("messages") or [])
    first = max(0, len(messages) - count)
    wired = [(first + n, to_wire(m)) for n, m in enumerate(messages[first:])]
    return [(n, m) for n, m in wired if isinstance(m, dict)]


def _page_data(review: ReviewAt, shape: ReviewShape) -> dict[str, Any]:
    """What the page's script needs: each call's arguments (long values folded) and schema."""
    return {
        "thread_id": review.thread_id,
        "interrupt_id": review.interrupt_id,
        "calls": [
            {"index": c.index, "name": c.name, "args": folded(to_wire(c.args)), "schema": to_wire(c.schema)}
            for c in shape.calls
        ],
    }


def _own_description(call: CallReview) -> str:
    """The policy's description of a call, unless it is the default one (the arguments again)."""
    head, found, _ = call.description.partition(f"\n\nTool: {call.name}\nArgs: ")
    if found:
        return "" if head.strip() == DEFAULT_DESCRIPTION_PREFIX else head
    return call.description


def abouts(review: ReviewAt, shape: ReviewShape) -> dict[int, dict[str, Any]]:
    """Per call: the tool's own description, the policy's (when not the default), where its arguments are."""
    out = {}
    for call in shape.calls:
        tool = review.agent.tools.get(call.name)
        at = (
            ["value", "action_requests", call.index, "args"] if shape.kind == "batched" else ["value", "args"]
        )
        out[call.index] = {
            "doc": str(getattr(tool, "description", "") or ""),
            "note": _own_description(call),
            "at": at,
        }
    return out


def page_links(review: ReviewAt, shape: ReviewShape) -> dict[str, Any]:
    """What a page needs to link folded values to their raw view, and the calls under review."""
    thread = review.thread_id
    return {
        "raw": raw_url(thread, f"e{review.asked.seq}") if review.asked else None,
        "raw_of": lambda n: raw_url(thread, f"m{n}"),
        "reviewed": {c.tool_call_id for c in shape.calls if c.tool_call_id},
    }


async def _show(
    request: Request,
    me: Visitor,
    review: ReviewAt,
    *,
    status: int = 200,
    forms: dict[int, FieldSpec] | None = None,
    chosen: dict[int, str] | None = None,
    messages: dict[int, str] | None = None,
    custom: dict[str, Any] | None = None,
    grants: dict[int, dict[str, str]] | None = None,
    error: str | None = None,
) -> Response:
    service = service_of(request)
    shape = read_shape(review.value, review.agent)
    if forms is None:
        forms = {c.index: build_fields(c.index, c.schema, c.args) for c in shape.calls if "edit" in c.allowed}
    after = await live_end(service)
    item = await pending_item(review)
    policy = review_policy(item, reviewer_id(me.credential.reviewer))
    return render(
        request,
        "review.html",
        status,
        title=f"Review: {', '.join(shape.tools) or 'answer'}",
        me=me,
        review=review,
        shape=shape,
        forms=forms,
        chosen=chosen or {},
        messages=messages or {},
        custom=custom or {"text": "", "json": False},
        error=error,
        labels=OUTCOME_LABELS if shape.kind == "outcome_unknown" else DECISION_LABELS,
        last_messages=_last_messages(review),
        asked_at=review.asked.at if review.asked else None,
        neighbours=await _neighbours(service, me, review.thread_id, review.interrupt_id),
        data=_page_data(review, shape),
        abouts=abouts(review, shape),
        **page_links(review, shape),
        after=after,
        action=review_url(review.thread_id, review.interrupt_id),
        policy=policy,
        grantable=grantable_calls(item, shape),  # rule 16: "approve, and allow for..."
        grants=grants or {},
        durations=DURATIONS,
    )


def _running(service: Service, thread_id: str, record_status: str | None) -> bool:
    return running_here(service, thread_id) or record_status == "running"


async def _settled(
    request: Request, me: Visitor, review: ReviewAt, *, status: int = 200, conflict: bool = False
) -> Response:
    """A review that is not pending: who decided it, what ran, the thread now, the next review."""
    service = service_of(request)
    after = await live_end(service)
    store = review.agent.checkpointer
    record = await store.aget_thread(review.thread_id) if store is not None else None
    running = _running(service, review.thread_id, record.status if record else None)
    shape = read_shape(review.value, review.agent)
    outcome = outcome_after(review, running, [c.tool_call_id for c in shape.calls])
    mine = review.answered is not None and review.answered.reviewer == me.credential.reviewer
    pending_here = [
        (i, review_url(review.thread_id, i.id))
        for i in review.state.interrupts
        if refused(review.agent, i.value, me.credential) is None
    ]
    return render(
        request,
        "decided.html",
        status,
        title="Conflict" if conflict else "Decided" if review.answered else "Review closed",
        me=me,
        review=review,
        shape=shape,
        outcome=outcome,
        conflict=conflict,
        mine=mine and not conflict,
        again=mine and conflict,
        notice=review.notice(),
        last_messages=_last_messages(review),
        pending_here=pending_here,
        neighbours=await _neighbours(service, me, review.thread_id, review.interrupt_id),
        after=after,
        outcome_url=review_url(review.thread_id, review.interrupt_id) + "/outcome",
        **page_links(review, shape),
        answers=_answers(shape, review.answered.value if review.answered else None),
        votes=votes_of(review.trail, review.interrupt_id),
    )


async def _voted(request: Request, me: Visitor, review: ReviewAt, policy: ReviewPolicy) -> Response:
    """After a vote on a review that counts approvals (rule 14): the reviewer's approval was
    recorded, how far each call's count has come, and the review still waits."""
    service = service_of(request)
    shape = read_shape(review.value, review.agent)
    return render(
        request,
        "voted.html",
        title="Approval recorded",
        me=me,
        review=review,
        shape=shape,
        policy=policy,
        proposed={c.tool_call_id: c.args for c in shape.calls if c.tool_call_id},
        votes=votes_of(review.trail, review.interrupt_id),
        neighbours=await _neighbours(service, me, review.thread_id, review.interrupt_id),
        action=review_url(review.thread_id, review.interrupt_id),
    )


def _answers(shape: ReviewShape, answer: Any) -> list[dict[str, Any]]:
    """Each call's decision in a recorded answer: its type, message, and any edit."""
    if not shape.calls or answer is None:
        return []
    found = answer.get("decisions") if isinstance(answer, dict) else None
    decisions = found if isinstance(found, list) else [answer]
    out = []
    for call, decision in zip(shape.calls, decisions, strict=False):
        if not isinstance(decision, dict):
            continue
        edited = decision.get("edited_action")
        out.append(
            {
                "tool": call.name,
                "type": str(decision.get("type")),
                "message": decision.get("message"),
                "proposed": call.args,
                "edited": edited.get("args") if isinstance(edited, dict) else None,
                "grant": grant_words(decision.get("grant")),
            }
        )
    return out


@dataclass
class Submitted:
    """What a submitted review form holds: the answer, what is wrong with it, what was typed."""

    answer: Any = None
    problems: list[str] = field(default_factory=list)
    forms: dict[int, FieldSpec] = field(default_factory=dict)
    chosen: dict[int, str] = field(default_factory=dict)
    messages: dict[int, str] = field(default_factory=dict)
    custom: dict[str, Any] = field(default_factory=dict)
    grants: dict[int, dict[str, str]] = field(default_factory=dict)

    def kept(self) -> dict[str, Any]:
        """What to show again on a refusal, so nothing typed is lost."""
        return {
            "forms": self.forms,
            "chosen": self.chosen,
            "messages": self.messages,
            "custom": self.custom,
            "grants": self.grants,
        }


def read_answer(
    shape: ReviewShape, form: dict[str, list[str]], grantable: frozenset[int] = frozenset()
) -> Submitted:
    """The answer a submitted form holds, one decision per call (nothing is sent on a problem);
    ``grantable``: the calls whose approval may carry a grant (rule 16)."""
    out = Submitted()
    decisions: list[dict[str, Any]] = []
    for call in shape.calls:
        picked = (form.get(f"d:{call.index}") or [""])[-1]
        message = (form.get(f"m:{call.index}") or [""])[-1].replace("\r\n", "\n")
        out.chosen[call.index], out.messages[call.index] = picked, message
        fields = build_fields(call.index, call.schema, call.args) if "edit" in call.allowed else None
        if fields is not None:
            out.forms[call.index] = fields
        where = f"call {call.index + 1} ({call.name})"
        if picked == "edit":
            fields = fields or build_fields(call.index, call.schema, call.args)
            args, errors = read_fields(fields, form)
            out.problems += [f"{where}: {e}" for e in errors]
            decisions.append({"type": "edit", "edited_action": {"name": call.name, "args": args}})
            continue
        if fields is not None:
            read_fields(fields, form)  # keeps what was typed in a form not chosen
        if call.index in grantable:
            grant, problems, out.grants[call.index] = read_grant(form, call.index, where)
            if picked == "approve" and grant_asked(form, call.index):  # rule 16: approve, and allow
                out.problems += problems
                decisions.append({"type": "approve", "grant": grant})
                continue
        elif picked == "approve" and grant_asked(form, call.index):  # the review may not grant
            out.problems.append(f"{where}: this review cannot give a grant; approve without one.")
            continue
        if picked not in DECISION_LABELS:
            out.problems.append(f"Choose a decision for {where}.")
            continue
        decision: dict[str, Any] = {"type": picked}
        if picked in ("reject", "respond") and message.strip():
            decision["message"] = message  # a response without one: the library says what it needs
        decisions.append(decision)
    text = (form.get("answer") or [""])[-1].replace("\r\n", "\n")
    as_json = (form.get("answer_json") or [""])[-1] == "true"
    out.custom = {"text": text, "json": as_json}
    if shape.kind != "custom":
        out.answer = shape.answer(decisions) if decisions else None
    elif not as_json:
        out.answer = text
    else:
        try:
            out.answer = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            out.problems.append(f"The answer is not JSON ({exc}).")
    return out


@router.get(_BASE)
@html
async def review_page(request: Request, thread_id: str, interrupt_id: str) -> Response:
    """One review and the form to answer it (or, once decided, what became of it)."""
    me, review = await _readable(request, thread_id, interrupt_id)
    if review.status != "pending":
        return await _settled(request, me, review)
    return await _show(request, me, review)


@router.post(_BASE)
@html
async def answer(request: Request, thread_id: str, interrupt_id: str) -> Response:
    """Record the answer the form holds (channel ``web``)."""
    me = visitor(request)
    form = await read_form(request)
    check_csrf(request, form, me.csrf)
    me, review = await _readable(request, thread_id, interrupt_id)
    if review.status != "pending":
        return await _settled(request, me, review, status=409, conflict=True)
    shape = read_shape(review.value, review.agent)
    sent = read_answer(shape, form, grantable_calls(await pending_item(review), shape))
    if sent.problems:
        return await _show(request, me, review, status=422, error=" ".join(sent.problems), **sent.kept())
    service = service_of(request)
    try:
        await record_answer(service, thread_id, interrupt_id, sent.answer, me.credential, channel="web")
    except ReviewExpiredError as exc:  # rule 15: the library's words, as the API's 409 says them
        return error_page(request, 409, str(exc), me, back=review_url(thread_id, interrupt_id))
    except AlreadyAnsweredError:
        review = await find_review(service, thread_id, interrupt_id)
        return await _settled(request, me, review, status=409, conflict=True)
    except InvalidDecisionError as exc:
        return await _show(request, me, review, status=422, error=str(exc), **sent.kept())
    except Problem as exc:
        if exc.status != 404:
            raise
        review = await find_review(service, thread_id, interrupt_id)  # answered or withdrawn meanwhile
        return await _settled(request, me, review, status=409, conflict=True)
    return redirect(request, review_url(thread_id, interrupt_id) + "/decided")


@router.get(_BASE + "/decided")
@html
async def decided(request: Request, thread_id: str, interrupt_id: str) -> Response:
    """What was recorded; what ran and its result (live); the next review. A review still
    pending after the visitor's approval (it counts approvals) says the vote was recorded."""
    me, review = await _readable(request, thread_id, interrupt_id)
    if review.status == "pending":
        policy = review_policy(await pending_item(review), reviewer_id(me.credential.reviewer))
        if policy.mine:
            return await _voted(request, me, review, policy)
        return redirect(request, review_url(thread_id, interrupt_id))
    return await _settled(request, me, review)


@router.get(_BASE + "/outcome")
@html
async def outcome(request: Request, thread_id: str, interrupt_id: str) -> Response:
    """The part of the decided page that shows what ran (the page's script asks for it)."""
    me, review = await _readable(request, thread_id, interrupt_id)
    service = service_of(request)
    store = review.agent.checkpointer
    record = await store.aget_thread(thread_id) if store is not None else None
    running = _running(service, thread_id, record.status if record else None)
    shape = read_shape(review.value, review.agent)
    found = outcome_after(review, running, [c.tool_call_id for c in shape.calls])
    pending_here = [
        (i, review_url(thread_id, i.id))
        for i in review.state.interrupts
        if refused(review.agent, i.value, me.credential) is None
    ]
    return render(request, "_outcome.html", outcome=found, review=review, pending_here=pending_here, me=me)
