"""What handrail tells Slack after an answer: the message's stamp, a word to the clicker, a modal.

Slack hears back from the interactivity endpoint (``handrail.server._slack``) right after
the answer is recorded; the Web API calls that follow run afterwards, each bounded in
time (:func:`later`; :func:`settle` waits for them), so a slow Slack API never holds an
answer. They go to the :class:`Place` a click came from: the message's channel and ts
(:func:`update` restamps it), the click's ``response_url`` (:func:`tell` answers the
clicker alone, or ``chat.postEphemeral``), a trigger (:func:`open_modal`). A call that
fails is logged, never raised.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any
from urllib.parse import urlsplit

from handrail.notify.slack import SlackChannel, SlackSettings
from handrail.notify.slack_blocks import ACTION_PREFIX, STAMP_BLOCK
from handrail.server.slack_users import SLACK_USER

__all__ = ["Place", "later", "open_modal", "settle", "tell", "update"]

log = logging.getLogger("handrail.server._slack")

_LATER_SECONDS = 30.0  # the longest a Slack call after an answer may take
_pending: set[asyncio.Task[None]] = set()


class Place:
    """Where a click or a modal came from: the message's channel and ts, its blocks, the
    ``response_url`` to answer the clicker through, the review page."""

    __slots__ = ("blocks", "channel", "response_url", "review_url", "ts")

    def __init__(
        self,
        channel: str | None,
        ts: str | None,
        blocks: list[Any] | None = None,
        response_url: str | None = None,
        review_url: str | None = None,
    ) -> None:
        self.channel = channel
        self.ts = ts
        self.blocks = blocks or []
        self.response_url = response_url
        self.review_url = review_url

    @classmethod
    def of(cls, payload: dict[str, Any]) -> Place:
        """The place of a ``block_actions`` payload."""
        container, message, channel = (_dict(payload.get(key)) for key in ("container", "message", "channel"))
        blocks = message.get("blocks")
        return cls(
            _short(channel.get("id")) or _short(container.get("channel_id")),
            _short(container.get("message_ts")) or _short(message.get("ts")),
            blocks if isinstance(blocks, list) and len(blocks) <= 50 else None,
            _short(payload.get("response_url"), 1000),
            _review_url(blocks),
        )

    @classmethod
    def named(cls, channel: Any, ts: Any) -> Place:
        """The place a modal's metadata names (its message's channel and ts, if they are ids)."""
        return cls(_short(channel), _short(ts))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _short(value: Any, limit: int = 64) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= limit and value.isprintable() else None


def _review_url(blocks: Any) -> str | None:
    """The review page's link in a message handrail posted (its "Open in handrail" button)."""
    for block in blocks if isinstance(blocks, list) else ():
        for element in block.get("elements") or () if isinstance(block, dict) else ():
            if isinstance(element, dict) and element.get("action_id") == f"{ACTION_PREFIX}open":
                return _short(element.get("url"), 2000)
    return None


def later(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` after the answer to Slack, bounded in time; its failure is logged."""

    async def bounded() -> None:
        try:
            async with asyncio.timeout(_LATER_SECONDS):  # not wait_for: it can drop a cancel on 3.11
                await work
        except Exception:
            log.warning("a Slack call after an answer failed", exc_info=True)

    task = asyncio.get_running_loop().create_task(bounded())
    _pending.add(task)
    task.add_done_callback(_pending.discard)


async def settle(timeout: float = _LATER_SECONDS) -> None:
    """Wait (at most ``timeout`` seconds) for the Slack calls still running after answers."""
    if _pending:
        await asyncio.wait(set(_pending), timeout=timeout)


async def update(settings: SlackSettings, place: Place, blocks: list[dict[str, Any]]) -> None:
    """Put ``blocks`` in place of the message's (its stamp, after an answer)."""
    channel = _channel(settings)
    if channel is None or place.channel is None or place.ts is None:
        return
    text = next((b["text"]["text"] for b in blocks if b.get("block_id") == STAMP_BLOCK), "handrail review")
    sent = await channel.update(place.channel, place.ts, blocks, text)
    if not sent.ok:
        log.warning("could not stamp the Slack message %s/%s: %s", place.channel, place.ts, sent.error)


async def tell(settings: SlackSettings, place: Place, user: str, text: str) -> None:
    """Tell the clicker alone: through the click's ``response_url``, else ``chat.postEphemeral``."""
    if place.response_url is not None and _may_answer_at(place.response_url, settings):
        from slack_sdk.webhook.async_client import AsyncWebhookClient

        answered = await AsyncWebhookClient(place.response_url, timeout=10).send(
            text=text, response_type="ephemeral", replace_original=False
        )
        if answered.status_code == 200:
            return
        log.warning("Slack's response_url answered %s; trying chat.postEphemeral", answered.status_code)
    channel = _channel(settings)
    if channel is None or place.channel is None or not SLACK_USER.fullmatch(user):
        log.warning("cannot tell Slack user %s: %s", user, text)
        return
    target = place.channel
    sent, _ = await channel.call(
        "chat.postEphemeral", lambda: channel.client.chat_postEphemeral(channel=target, user=user, text=text)
    )
    if not sent.ok:
        log.warning("could not tell Slack user %s why their answer was refused: %s", user, sent.error)


def _may_answer_at(url: str, settings: SlackSettings) -> bool:
    """Whether ``url`` is Slack's (or the configured Web API's host): a response_url is posted to."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname in ("hooks.slack.com", "hooks.slack-gov.com"):
        return True
    if settings.api_url is None:
        return False
    api = urlsplit(settings.api_url)
    return (parts.scheme, parts.netloc) == (api.scheme, api.netloc)


async def open_modal(settings: SlackSettings, trigger: str, view: dict[str, Any]) -> None:
    """Open ``view`` for the user whose click gave ``trigger``."""
    channel = _channel(settings)
    if channel is None:
        log.warning("a Slack click asks for a modal, but no bot token is set up ('handrail slack setup')")
        return
    sent, _ = await channel.call(
        "views.open", lambda: channel.client.views_open(trigger_id=trigger, view=view)
    )
    if not sent.ok:
        log.warning("could not open the Slack modal: %s", sent.error)


def _channel(settings: SlackSettings) -> SlackChannel | None:
    if settings.bot_token is None:
        return None
    return SlackChannel(settings.bot_token, base_url=settings.api_url)
