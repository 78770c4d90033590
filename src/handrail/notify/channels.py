"""What a channel is: the one thing the deliverer asks of webhooks, Slack and email.

The deliverer (``handrail.notify.deliverer``) claims a :class:`Delivery` (one event for
one :class:`Endpoint`) and hands it to the channel of the endpoint's ``kind``. The
channel sends it and says how that went with a :class:`Sent`; it raises nothing for a
receiver's failure (a refused connection, a timeout, a 500: ``Sent(ok=False, ...)``).
An exception out of ``send`` is a defect of the channel: the deliverer records it as a
failed attempt and retries like any other.

A channel must be safe to call again with the same delivery: delivery is at least once
(SPEC rule 17), and a redelivery carries the same ``Delivery.id``. ``Sent.receipt``
is kept with the delivery (Slack keeps the posted message's channel and ``ts`` there,
so the decision's delivery can update that message).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["CHANNEL_KINDS", "Channel", "Delivery", "Endpoint", "Receipts", "Sent"]

CHANNEL_KINDS = ("webhook", "slack", "email")
"""The kinds of endpoint: a signed HTTP POST, a Slack channel, the reviewers' mail."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where notifications go: one webhook URL, one Slack channel or one mail setup.

    ``id`` is ``ep_`` and 16 hex digits for an endpoint added by the CLI or the API, or
    ``file:NAME`` for one a policy file names. ``target`` is the URL (webhook), the Slack
    channel id, or "" (email: the recipients follow from each review). ``events`` are the
    event types it receives (:data:`handrail.notify.events.EVENT_TYPES`). ``secrets``
    sign webhook deliveries, newest first: each is ``(secret, retire_at)`` with
    ``retire_at`` None for the current one and the epoch second until which an older
    one still signs (a rotation keeps both valid for a while). ``options`` holds what a
    kind needs besides (email: SMTP settings and addresses; Slack: token names).
    """

    id: str
    kind: str
    target: str
    events: tuple[str, ...]
    secrets: tuple[tuple[str, float | None], ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    source: str = "api"
    created_at: float = 0.0

    def live_secrets(self, now: float) -> list[str]:
        """The secrets that sign a delivery at ``now``: the current one and those not yet retired."""
        return [secret for secret, retire_at in self.secrets if retire_at is None or retire_at > now]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One event for one endpoint, as the outbox keeps it.

    ``id`` is the message id (``msg_`` and 32 hex digits; the ``webhook-id`` header),
    the same on every attempt. ``body`` is the JSON payload (bytes, exactly as sent
    each time). ``attempts`` counts the attempts made before this one. ``interrupt_id``
    is the review the event is about (None for ``run.*`` events).
    """

    id: str
    endpoint_id: str
    event: str
    thread_id: str
    interrupt_id: str | None
    body: bytes
    status: str = "pending"
    attempts: int = 0
    created_at: float = 0.0
    due_at: float = 0.0
    last_error: str | None = None
    response_code: int | None = None
    delivered_at: float | None = None
    receipt: Mapping[str, Any] | None = None
    window_from: float = 0.0  # when its retry time started: made, or last retried by hand


@dataclass(frozen=True, slots=True)
class Sent:
    """How one attempt went: ``ok``; the receiver's status ``code`` (None when there was no
    answer); ``error``, a one-line reason when not ok; ``receipt``, what to keep of the
    receiver's answer (JSON-able); ``retry``: False when trying again cannot help (the
    deliverer then marks the delivery failed at once)."""

    ok: bool
    code: int | None = None
    error: str | None = None
    receipt: Mapping[str, Any] | None = None
    retry: bool = True


class Receipts(Protocol):
    """What a channel may read back: the receipt an earlier delivery to the same endpoint
    kept for a review (Slack: the message posted for ``review.requested``)."""

    def receipt(self, endpoint_id: str, interrupt_id: str, event: str) -> Mapping[str, Any] | None:
        """The receipt of the delivered ``event`` about ``interrupt_id`` to ``endpoint_id``."""
        ...


class Channel(Protocol):
    """Sends deliveries of one kind of endpoint."""

    kind: str

    async def send(self, endpoint: Endpoint, delivery: Delivery, receipts: Receipts) -> Sent:
        """Make one attempt; never raise for the receiver's failure (return ``Sent(ok=False)``)."""
        ...
