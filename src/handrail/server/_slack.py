"""Slack's interactivity endpoint: a button or a modal in Slack answers a review by the same rules.

``POST /handrail/slack/actions`` is the Slack app's *Request URL* for interactivity.
Each request is checked before anything else: it must carry Slack's signature over its
body made with the app's signing secret, with a timestamp at most five minutes off
(``slack_sdk``'s :class:`~slack_sdk.signature.SignatureVerifier`); anything else is a
401 and nothing is recorded. With no signing secret set up the path answers 404.

The Slack user who clicked answers as the handrail identity the mapping table names
(``handrail.server.slack_users``), with the roles of that identity's live review tokens,
through ``reviews.record_answer`` with channel ``slack``: roles (rule 12), self-approval
(13), counted approvals (14), expiry (15) and rule 5 apply as everywhere else. A
refusal - an unmapped user, roles that may not decide, an expired or answered review -
is told to that user alone (an ephemeral message, or the modal's error) in the
library's words, and nothing is recorded.

*Approve* records at once; *Reject* and *Respond* open a modal for the reason or the
result, and its submission records. Slack hears back right after the recording: the
Web API calls that follow (the message's stamp, an ephemeral reply, opening a modal)
run afterwards (``handrail.server._slack_replies``), so a slow Slack API never holds an
answer.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any
from urllib.parse import parse_qs

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from handrail.notify.slack import SlackSettings
from handrail.notify.slack_blocks import (
    ACTION_PREFIX,
    BUTTON_DECISIONS,
    ButtonTarget,
    answer_for,
    escape,
    read_button_value,
    review_blocks,
    review_of,
    section,
    stamped,
)
from handrail.notify.slack_stamps import approvals_said, approvals_stamp, decided_stamp, expired_stamp
from handrail.server._problems import Problem, client_problem, documented
from handrail.server._reviews import record_answer
from handrail.server._service import Service
from handrail.server._slack_replies import Place, later, open_modal, tell, update
from handrail.server.slack_users import SLACK_USER, slack_reviewer
from handrail.server.tokens import Credential

__all__ = ["MAX_BODY", "MAX_SKEW", "router"]

log = logging.getLogger("handrail.server._slack")

MAX_BODY = 512 * 1024
"""The largest interactivity request taken (Slack's carry the clicked message: a few dozen KB)."""
MAX_SKEW = 300
"""Seconds a request's timestamp may be off (Slack's own advice; older ones may be replays)."""
MODAL = "handrail.decide"
"""The ``callback_id`` of the reject / respond modal."""
MESSAGE_BLOCK = "handrail.message"
_SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")

router = APIRouter(prefix="/handrail/slack", tags=["slack"])


_FORM_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/x-www-form-urlencoded": {
                "schema": {
                    "type": "object",
                    "required": ["payload"],
                    "properties": {"payload": {"type": "string", "description": "Slack's JSON payload"}},
                }
            }
        },
    }
}


@router.post("/actions", responses=documented(400, 401, 403, 404, 413), openapi_extra=_FORM_BODY)
async def actions(request: Request) -> Response:
    """Slack's interactivity requests (``block_actions``, ``view_submission``), signed by Slack."""
    service = request.app.state.service
    assert isinstance(service, Service)
    settings = await asyncio.to_thread(SlackSettings.load, service.db)
    if settings.signing_secret is None:
        raise Problem(404, "Slack is not set up on this service (run 'handrail slack setup')")
    try:
        import aiohttp  # noqa: F401 - slack_sdk's async client needs it
        import slack_sdk  # noqa: F401
    except ImportError:
        raise Problem(404, "Slack support is not installed here: pip install 'handrail[slack]'") from None
    body = await _body(request)
    _verify(settings.signing_secret, body, request)
    payload = _payload(body)
    team = payload.get("team")
    team_id = team.get("id") if isinstance(team, dict) else None
    if settings.team_id is not None and team_id != settings.team_id:
        raise Problem(
            403, "this request comes from another Slack workspace than the one handrail is set up for"
        )
    kind = payload.get("type")
    if kind == "block_actions":
        return await _clicked(service, settings, payload)
    if kind == "view_submission":
        return await _submitted(service, settings, payload)
    return Response(status_code=200)  # view_closed, shortcuts ...: nothing to do


async def _body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise Problem(413, f"a Slack request is at most {MAX_BODY} bytes")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise Problem(413, f"a Slack request is at most {MAX_BODY} bytes")
    return body


def _verify(secret: str, body: bytes, request: Request) -> None:
    from slack_sdk.signature import SignatureVerifier

    stamp = request.headers.get("x-slack-request-timestamp", "")
    signature = request.headers.get("x-slack-signature", "")
    fresh = (
        stamp.isascii() and stamp.isdigit() and len(stamp) <= 12 and abs(time.time() - int(stamp)) <= MAX_SKEW
    )
    try:
        valid = (
            fresh
            and bool(_SIGNATURE.fullmatch(signature))
            and SignatureVerifier(secret).is_valid(body, stamp, signature)
        )
    except (ValueError, TypeError):  # a body that is not UTF-8 is no form Slack sends
        valid = False
    if not valid:
        raise Problem(
            401,
            "not a request from Slack: its signature does not match the app's signing secret, or its "
            f"timestamp is more than {MAX_SKEW // 60} minutes off; nothing was recorded",
        )


def _payload(body: bytes) -> dict[str, Any]:
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=True, max_num_fields=10)
        (raw,) = form["payload"]
        payload = orjson.loads(raw)
    except (UnicodeDecodeError, ValueError, KeyError):
        raise Problem(400, "a Slack interactivity request is a form with one field, payload=<JSON>") from None
    if not isinstance(payload, dict):
        raise Problem(400, "the payload of a Slack interactivity request is a JSON object")
    return payload


# block_actions: a button was clicked ------------------------------------------------------------
async def _clicked(service: Service, settings: SlackSettings, payload: dict[str, Any]) -> Response:
    found = payload.get("actions")
    action = found[0] if isinstance(found, list) and found and isinstance(found[0], dict) else {}
    action_id = action.get("action_id")
    decision = action_id.removeprefix(ACTION_PREFIX) if isinstance(action_id, str) else None
    target = read_button_value(action.get("value"))
    if decision not in BUTTON_DECISIONS or target is None:
        return Response(status_code=200)  # a link button, or not one of handrail's
    user = _user(payload)
    place = Place.of(payload)
    credential, why = await asyncio.to_thread(_reviewer, service, user)
    if credential is None:
        later(tell(settings, place, user, why))
        return Response(status_code=200)
    if decision != "approve":
        trigger = payload.get("trigger_id")
        if isinstance(trigger, str):
            later(open_modal(settings, trigger, _modal(decision, target, place)))
        return Response(status_code=200)
    try:
        recorded = await _record(service, target, answer_for(target, "approve"), credential)
    except Exception as exc:
        refusal, stamp = _refusal(exc)
        later(tell(settings, place, user, f"Not recorded: {refusal}"))
        if stamp is not None and place.blocks:  # the review is over: its buttons go
            later(update(settings, place, stamped(place.blocks, stamp, keep_buttons=False)))
        return Response(status_code=200)
    stamp, waiting = _stamp_of(recorded, credential)
    if place.blocks:
        later(update(settings, place, stamped(place.blocks, stamp, keep_buttons=waiting)))
    return Response(status_code=200)


async def _record(
    service: Service, target: ButtonTarget, answer: Any, credential: Credential
) -> dict[str, Any]:
    """Record a Slack user's answer (channel ``slack``) by the rules every channel answers by."""
    return await record_answer(
        service, target.thread_id, target.interrupt_id, answer, credential, channel="slack"
    )


def _user(payload: dict[str, Any]) -> str:
    user = payload.get("user")
    found = user.get("id") if isinstance(user, dict) else None
    return found if isinstance(found, str) and SLACK_USER.fullmatch(found) else "(unknown)"


def _reviewer(service: Service, user: str) -> tuple[Credential | None, str]:
    if not SLACK_USER.fullmatch(user):
        return None, "handrail cannot tell which Slack user this is, so it records nothing."
    return slack_reviewer(service.db, service.tokens, user)


def _refusal(exc: Exception) -> tuple[str, str | None]:
    """What to tell the user of a refused answer, and the stamp when the review is over."""
    from handrail.errors import AlreadyAnsweredError, ReviewExpiredError

    problem = exc if isinstance(exc, Problem) else client_problem(exc)
    if problem is None:
        log.exception("recording an answer from Slack failed")
        return "handrail could not record this answer; the service's log has the details", None
    stamp = None
    if isinstance(exc, ReviewExpiredError):
        stamp = expired_stamp(None, exc.expired_at.timestamp())
    elif isinstance(exc, AlreadyAnsweredError):
        stamp = decided_stamp(
            {"id": exc.answered_by, "channel": exc.channel}, None, exc.answered_at.timestamp()
        ).replace("Answered", "Answered already", 1)
    return escape(problem.detail, limit=1500, newlines=True), stamp


def _stamp_of(recorded: dict[str, Any], credential: Credential) -> tuple[str, bool]:
    """The stamp of a recorded answer, and whether the review still counts approvals."""
    approvals = recorded.get("approvals") or []
    if recorded.get("waiting"):
        return approvals_stamp(approvals), True
    stamp = decided_stamp({"id": credential.name, "channel": "slack"}, recorded.get("answer"), time.time())
    said = approvals_said(approvals)
    return (f"{stamp} · {said}" if said else stamp), False


# view_submission: the reject / respond modal was sent -----------------------------------------
def _modal(decision: str, target: ButtonTarget, place: Place) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "t": target.thread_id,
        "i": target.interrupt_id,
        "n": target.calls,
        "b": target.batched,
        "d": decision,
        "c": place.channel,
        "ts": place.ts,
    }
    if place.review_url is not None and len(place.review_url) < 1500:
        meta["u"] = place.review_url
    rejecting = decision == "reject"
    label = "Why (the agent is told)" if rejecting else "The tool's result, as the agent will read it"
    return {
        "type": "modal",
        "callback_id": MODAL,
        "private_metadata": orjson.dumps(meta).decode(),
        "title": {"type": "plain_text", "text": "Reject" if rejecting else "Respond"},
        "submit": {"type": "plain_text", "text": "Reject" if rejecting else "Send"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            {
                "type": "input",
                "block_id": MESSAGE_BLOCK,
                "optional": rejecting,
                "label": {"type": "plain_text", "text": label},
                "element": {
                    "type": "plain_text_input",
                    "action_id": "message",
                    "multiline": True,
                    "max_length": 3000,
                },
            }
        ],
    }


async def _submitted(service: Service, settings: SlackSettings, payload: dict[str, Any]) -> Response:
    view = payload.get("view")
    if not isinstance(view, dict) or view.get("callback_id") != MODAL:
        return Response(status_code=200)
    try:
        meta = orjson.loads(str(view.get("private_metadata") or ""))
    except orjson.JSONDecodeError:
        meta = None
    target = read_button_value(orjson.dumps(meta).decode()) if isinstance(meta, dict) else None
    decision = meta.get("d") if isinstance(meta, dict) else None
    if target is None or decision not in ("reject", "respond"):
        return _modal_error("This form is not one handrail made; nothing was recorded.")
    assert isinstance(meta, dict)
    message = _typed(view)
    user = _user(payload)
    credential, why = await asyncio.to_thread(_reviewer, service, user)
    if credential is None:
        return _modal_error(why)
    asked = await _asked(service, target, meta.get("u"))
    try:
        recorded = await _record(service, target, answer_for(target, decision, message), credential)
    except Exception as exc:
        return _modal_error(f"Not recorded: {_refusal(exc)[0]}")
    place = Place.named(meta.get("c"), meta.get("ts"))
    stamp, _ = _stamp_of(recorded, credential)
    if place.channel and place.ts:
        blocks = review_blocks(review_of(asked), stamp=stamp, buttons=False) if asked else [section(stamp)]
        later(update(settings, place, blocks))
    return Response(status_code=200)  # an empty answer closes the modal


def _typed(view: dict[str, Any]) -> str | None:
    state = view.get("state")
    values = state.get("values") if isinstance(state, dict) else None
    block = values.get(MESSAGE_BLOCK) if isinstance(values, dict) else None
    field = block.get("message") if isinstance(block, dict) else None
    value = field.get("value") if isinstance(field, dict) else None
    return value[:10_000] if isinstance(value, str) else None


def _modal_error(text: str) -> Response:
    errors = {"response_action": "errors", "errors": {MESSAGE_BLOCK: text[:1900]}}
    return Response(orjson.dumps(errors), media_type="application/json")


async def _asked(service: Service, target: ButtonTarget, review_url: Any) -> dict[str, Any] | None:
    """What the review asks (read before answering it), as a payload's ``data``; None if unknown."""
    try:
        _, agent, _ = await service.owner(target.thread_id)
        state = await agent.aget_state({"configurable": {"thread_id": target.thread_id}})
    except Exception:
        log.warning("could not read thread %r for its Slack message", target.thread_id, exc_info=True)
        return None
    for item in state.interrupts:
        if item.id != target.interrupt_id:
            continue
        value = item.value
        requests = value.get("action_requests") if isinstance(value, dict) else None
        configs = value.get("review_configs") if isinstance(value, dict) else None
        allowed = {
            str(c.get("action_name")): c.get("allowed_decisions")
            for c in (configs if isinstance(configs, list) else ())
            if isinstance(c, dict)
        }
        return {
            "thread_id": target.thread_id,
            "interrupt_id": target.interrupt_id,
            "agent": agent.name,
            "action_requests": requests if isinstance(requests, list) else [value],
            "allowed_decisions": allowed,
            "links": {"review": review_url} if isinstance(review_url, str) else {},
        }
    return None
