"""The Slack channel: a review posts a message with buttons, its answer stamps that message.

``review.requested`` and ``review.outcome_unknown`` post a message to the endpoint's
Slack channel (``Endpoint.target``) with the calls, their arguments (folded when long),
who may decide, until when, and a button per decision the review allows
(``handrail.notify.slack_blocks``); the posted message's ``{"channel", "ts"}`` is the
delivery's receipt. ``review.decided``, ``review.expired`` and ``review.approved`` find
that receipt and update the message to a stamp (``handrail.notify.slack_stamps``:
"Approved by alice in Slack at 10:42 UTC", "1 of 2 approvals (alice)"); without one
they post the stamp as a new message.
``run.finished`` and ``run.failed`` post a short line. A click on a button reaches the
service's interactivity endpoint (``handrail.server._slack``).

Slack's answers are told as a :class:`~handrail.notify.channels.Sent`, never raised:
``ratelimited`` waits for ``Retry-After`` once when Slack asks for at most
:data:`MAX_WAIT` seconds; errors that no retry can mend (a bad token, an unknown
channel, a bot not in the channel) are ``retry=False``.

Settings (:class:`SlackSettings`) come from the environment first
(``HANDRAIL_SLACK_BOT_TOKEN``, ``HANDRAIL_SLACK_SIGNING_SECRET``,
``HANDRAIL_SLACK_API_URL``), else from the service's keys table, where ``handrail slack
setup`` writes them (``slack.bot_token``, ``slack.signing_secret``, ``slack.api_url``,
``slack.team_id``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from handrail.notify.channels import Delivery, Endpoint, Receipts, Sent
from handrail.notify.slack_blocks import (
    ACTION_PREFIX,
    LINKS_BLOCK,
    button,
    escape,
    link,
    review_blocks,
    review_of,
    review_text,
    section,
)
from handrail.notify.slack_stamps import approvals_stamp, decided_stamp, expired_stamp
from handrail.server.db import ServerDB

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

__all__ = ["FATAL_ERRORS", "KEYS", "MAX_WAIT", "SlackChannel", "SlackSettings", "web_client"]

log = logging.getLogger("handrail.notify")

MAX_WAIT = 20.0
"""The longest ``Retry-After`` (seconds) a send waits out before trying once more."""

FATAL_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "no_permission",
        "missing_scope",
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "invalid_blocks",
        "invalid_arguments",
        "msg_too_long",
        "restricted_action",
        "team_access_not_granted",
    }
)
"""Slack errors that trying again cannot mend: the delivery fails at once (``retry=False``)."""

KEYS = {
    "bot_token": ("HANDRAIL_SLACK_BOT_TOKEN", "slack.bot_token"),
    "signing_secret": ("HANDRAIL_SLACK_SIGNING_SECRET", "slack.signing_secret"),
    "api_url": ("HANDRAIL_SLACK_API_URL", "slack.api_url"),
    "team_id": ("HANDRAIL_SLACK_TEAM_ID", "slack.team_id"),
}
"""Each setting's environment variable and its row in ``handrail_server_keys``."""

_UPDATE_GONE = frozenset({"message_not_found", "cant_update_message", "edit_window_closed"})
_ERROR_CHARS = 300


@dataclass(frozen=True, slots=True)
class SlackSettings:
    """The Slack app's bot token and signing secret, the Web API's URL (None: Slack's own)
    and the workspace the token belongs to (clicks from another are refused)."""

    bot_token: str | None = None
    signing_secret: str | None = None
    api_url: str | None = None
    team_id: str | None = None

    @classmethod
    def load(cls, db: ServerDB) -> SlackSettings:
        """The settings in force: each from its environment variable, else from the keys table."""
        names = [row for _, row in KEYS.values()]
        marks = ", ".join("?" for _ in names)
        stored = {
            str(name): str(value)
            for name, value in db.query(
                f"SELECT name, value FROM handrail_server_keys WHERE name IN ({marks})", names
            )
        }
        found = {key: os.environ.get(env) or stored.get(row) or None for key, (env, row) in KEYS.items()}
        return cls(**found)

    @staticmethod
    def save(db: ServerDB, **values: str | None) -> None:
        """Keep settings in the keys table (``bot_token="xoxb-..."``); None removes one."""
        for key, value in values.items():
            if key not in KEYS:
                raise ValueError(f"unknown Slack setting {key!r}; the settings are {', '.join(KEYS)}")
            row = KEYS[key][1]
            if value is None:
                db.execute("DELETE FROM handrail_server_keys WHERE name = ?", (row,))
                continue
            db.execute(
                "INSERT INTO handrail_server_keys (name, value) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                (row, value),
            )


def web_client(token: str, base_url: str | None = None, *, timeout: int = 10) -> AsyncWebClient:
    """slack_sdk's async Web API client for ``token`` (at ``base_url``: Slack's own by default)."""
    from slack_sdk.web.async_client import AsyncWebClient

    if base_url:
        return AsyncWebClient(token=token, base_url=base_url, timeout=timeout)
    return AsyncWebClient(token=token, timeout=timeout)


class SlackChannel:
    """Delivers events to Slack channels with a bot token (the Channel protocol).

    Example::

        channel = SlackChannel.from_db(db)        # None when Slack is not set up
        sent = await channel.send(endpoint, delivery, outbox)
    """

    kind = "slack"

    def __init__(self, token: str, *, base_url: str | None = None, timeout: int = 10) -> None:
        if not isinstance(token, str) or not token.strip():
            raise ValueError("a Slack bot token (xoxb-...) is needed")
        self.client = web_client(token.strip(), base_url, timeout=timeout)

    @classmethod
    def from_db(cls, db: ServerDB, *, base_url: str | None = None) -> SlackChannel | None:
        """The channel with the bot token in force (:class:`SlackSettings`); None without one,
        or when the ``slack`` extra is not installed (a warning says so)."""
        settings = SlackSettings.load(db)
        if settings.bot_token is None:
            return None
        try:
            return cls(settings.bot_token, base_url=base_url or settings.api_url)
        except ImportError as exc:  # slack_sdk (or aiohttp, its async client's) is not installed
            log.warning("a Slack bot token is set up, but %s; pip install 'handrail[slack]'", exc)
            return None

    async def send(self, endpoint: Endpoint, delivery: Delivery, receipts: Receipts) -> Sent:
        """Post or update the message of one delivery; Slack's failures are a ``Sent(ok=False)``."""
        try:
            payload = orjson.loads(delivery.body)
        except orjson.JSONDecodeError:
            return Sent(False, error="the delivery's body is not JSON", retry=False)
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, dict):
            return Sent(False, error="the delivery's body has no data", retry=False)
        at = _time_of(payload.get("timestamp"), delivery.created_at)
        event = delivery.event
        if event in ("review.requested", "review.outcome_unknown"):
            return await self._requested(endpoint, delivery, data, receipts)
        if event in ("review.decided", "review.expired", "review.approved"):
            return await self._answered(endpoint, delivery, data, receipts, at)
        if event in ("run.finished", "run.failed"):
            blocks, text = _run_blocks(event, data)
            return await self.post(endpoint.target, blocks, text)
        if event == "handrail.test":
            text = ":wave: A test message from handrail: this channel receives its notifications."
            return await self.post(endpoint.target, [section(text)], text)
        return Sent(False, error=f"the Slack channel does not send {escape(event)} events", retry=False)

    async def _requested(
        self, endpoint: Endpoint, delivery: Delivery, data: dict[str, Any], receipts: Receipts
    ) -> Sent:
        view = review_of(data)
        answered = None
        if delivery.interrupt_id is not None:  # a late delivery of a review answered meanwhile: no buttons
            answered = receipts.receipt(
                endpoint.id, delivery.interrupt_id, "review.decided"
            ) or receipts.receipt(endpoint.id, delivery.interrupt_id, "review.expired")
        stamp = (
            ":ballot_box_with_check: Answered already: a message of this channel says how"
            if answered
            else None
        )
        return await self.post(
            endpoint.target, review_blocks(view, stamp=stamp, buttons=not answered), review_text(view)
        )

    async def _answered(
        self, endpoint: Endpoint, delivery: Delivery, data: dict[str, Any], receipts: Receipts, at: float
    ) -> Sent:
        view = review_of(data)
        interrupt = delivery.interrupt_id
        posted = None
        if interrupt is not None:
            posted = _message(receipts.receipt(endpoint.id, interrupt, "review.requested")) or _message(
                receipts.receipt(endpoint.id, interrupt, "review.outcome_unknown")
            )
        if delivery.event == "review.approved":
            if interrupt is not None and receipts.receipt(endpoint.id, interrupt, "review.decided"):
                return Sent(True)  # decided already: a vote stamp would bring buttons back
            stamp = approvals_stamp(data.get("approvals"), _who(data), _through(data))
            if not view.calls:  # the payload cannot rebuild the message: a reply beside it
                where, under = posted if posted is not None else (endpoint.target, None)
                return await self.post(where, [section(stamp)], stamp, thread_ts=under)
            blocks = review_blocks(view, stamp=stamp, buttons=True)
        elif delivery.event == "review.expired":
            stamp = expired_stamp(data.get("decision"), at)
            blocks = review_blocks(view, stamp=stamp, buttons=False)
        else:
            stamp = decided_stamp(data.get("decided_by"), data.get("decision"), at)
            blocks = review_blocks(view, stamp=stamp, buttons=False)
        text = f"{review_text(view)}: {stamp}"
        if posted is None:
            return await self.post(endpoint.target, blocks, text)
        channel, ts = posted
        updated, error = await self.call(
            "chat.update", lambda: self.client.chat_update(channel=channel, ts=ts, blocks=blocks, text=text)
        )
        if error in _UPDATE_GONE:  # the message was deleted or can no longer change: post the stamp anew
            return await self.post(endpoint.target, blocks, text)
        return updated

    # Slack's Web API --------------------------------------------------------------------------------
    async def post(
        self, channel: str, blocks: list[dict[str, Any]], text: str, *, thread_ts: str | None = None
    ) -> Sent:
        """``chat.postMessage``; the receipt is the posted message's ``{"channel", "ts"}``."""
        extra: dict[str, Any] = {"thread_ts": thread_ts} if thread_ts else {}
        return await self._call(
            "chat.postMessage",
            lambda: self.client.chat_postMessage(
                channel=channel, blocks=blocks, text=text, unfurl_links=False, unfurl_media=False, **extra
            ),
        )

    async def update(self, channel: str, ts: str, blocks: list[dict[str, Any]], text: str) -> Sent:
        """``chat.update`` of the message at ``channel``/``ts``."""
        return await self._call(
            "chat.update", lambda: self.client.chat_update(channel=channel, ts=ts, blocks=blocks, text=text)
        )

    async def _call(self, method: str, call: Callable[[], Awaitable[Any]]) -> Sent:
        sent, _ = await self.call(method, call)
        return sent

    async def call(self, method: str, call: Callable[[], Awaitable[Any]]) -> tuple[Sent, str | None]:
        """Make one Web API call (``call``); how it went, and Slack's error name if it refused."""
        import aiohttp
        from slack_sdk.errors import SlackApiError, SlackClientError

        for attempt in range(2):
            try:
                response = await call()
            except SlackApiError as exc:
                answer = exc.response
                status = getattr(answer, "status_code", None)
                error = _error_of(answer)
                if error == "ratelimited" or status == 429:
                    wait = _retry_after(getattr(answer, "headers", None))
                    if attempt == 0 and wait is not None and wait <= MAX_WAIT:
                        await asyncio.sleep(wait)
                        continue
                    after = f" (Slack asks to retry after {wait:g} s)" if wait is not None else ""
                    return Sent(False, status, f"Slack rate-limited {method}{after}"), "ratelimited"
                refused = f"Slack refused {method}: {error}"[:_ERROR_CHARS]
                return Sent(False, status, refused, retry=error not in FATAL_ERRORS), error
            except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
                reason = f"could not reach Slack for {method}: {type(exc).__name__}: {exc}"[:_ERROR_CHARS]
                return Sent(False, None, reason), None
            data = response.data if isinstance(response.data, dict) else {}
            channel, ts = data.get("channel"), data.get("ts")
            receipt = (
                {"channel": channel, "ts": ts} if isinstance(channel, str) and isinstance(ts, str) else None
            )
            return Sent(True, response.status_code, receipt=receipt), None
        return Sent(False, 429, f"Slack rate-limited {method}"), "ratelimited"  # pragma: no cover


def _error_of(answer: Any) -> str:
    data = getattr(answer, "data", None)
    error = data.get("error") if isinstance(data, dict) else None
    return str(error) if error else f"HTTP {getattr(answer, 'status_code', '?')}"


def _retry_after(headers: Any) -> float | None:
    """``Retry-After`` in seconds, from headers whatever their case; None when absent or odd."""
    if not isinstance(headers, Mapping) and not hasattr(headers, "items"):
        return None
    for name, value in headers.items():
        if str(name).lower() == "retry-after":
            try:
                seconds = float(value)
            except (TypeError, ValueError):
                return None
            return seconds if 0 <= seconds < 86_400 else None
    return None


def _message(receipt: Mapping[str, Any] | None) -> tuple[str, str] | None:
    if receipt is None:
        return None
    channel, ts = receipt.get("channel"), receipt.get("ts")
    return (channel, ts) if isinstance(channel, str) and isinstance(ts, str) else None


def _who(data: Mapping[str, Any]) -> Any:
    decided = data.get("decided_by")
    return decided.get("id") if isinstance(decided, Mapping) else None


def _through(data: Mapping[str, Any]) -> Any:
    decided = data.get("decided_by")
    return decided.get("channel") if isinstance(decided, Mapping) else None


def _time_of(stamp: Any, fallback: float) -> float:
    if isinstance(stamp, str):
        try:
            return datetime.fromisoformat(stamp).timestamp()
        except ValueError:
            pass
    return fallback


def _run_blocks(event: str, data: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """A short message for ``run.finished`` / ``run.failed``: its blocks and its text."""
    agent = data.get("agent")
    who = f"agent *{escape(agent)}*" if isinstance(agent, str) else "an agent"
    thread = escape(data.get("thread_id"), limit=128)
    if event == "run.failed":
        text = f":x: A run of {who} on thread {thread} stopped with an error."
    else:
        status = data.get("thread_status")
        left = f" (the thread is {escape(status)})" if isinstance(status, str) else ""
        text = f":checkered_flag: A run of {who} on thread {thread} finished{left}."
    blocks = [section(text)]
    links = data.get("links")
    url = link(links.get("thread")) if isinstance(links, Mapping) else None
    if url is not None:
        blocks.append(
            {
                "type": "actions",
                "block_id": LINKS_BLOCK,
                "elements": [button("Open the thread", f"{ACTION_PREFIX}open", url=url)],
            }
        )
    return blocks, text
