"""Webhook deliveries, signed per the Standard Webhooks specification.

Each attempt is one ``POST`` of the delivery's JSON body with three headers:
``webhook-id`` (the delivery's id: the same on every attempt, so a receiver can drop a
redelivery it already handled), ``webhook-timestamp`` (the attempt's time, in epoch
seconds) and ``webhook-signature`` (``v1,<base64 HMAC-SHA256>`` over
``id.timestamp.body``, made by the ``standardwebhooks`` package; during a rotation one
signature per live secret, space-separated, so a receiver with either secret verifies).

A 2xx answer delivers. Anything else, a timeout or a refused connection is a failed
attempt (retried by the deliverer), except ``410 Gone``: the receiver says it wants no
more, so the delivery fails at once. The receiver has :data:`TIMEOUT` seconds to answer;
redirects are not followed (a signed body sent somewhere else is not what was set up).
"""

from __future__ import annotations

import base64
import binascii
import time
from datetime import UTC, datetime

import aiohttp
from standardwebhooks.webhooks import Webhook

from handrail.notify.channels import Delivery, Endpoint, Receipts, Sent

__all__ = ["TIMEOUT", "WebhookChannel", "check_secret", "sign_headers"]

TIMEOUT = 10.0
"""Seconds a receiver has to answer an attempt."""

_USER_AGENT = "handrail-webhooks/1"
_SNIPPET = 200  # characters of a failed answer's body kept as its error


def check_secret(secret: object) -> str:
    """A signing secret as Standard Webhooks writes it (``whsec_`` and base64 of 24 to 64
    bytes), or ``ValueError`` saying what was expected."""
    expected = (
        "a secret is 'whsec_' and base64 of 24 to 64 random bytes (handrail makes one if you give none)"
    )
    if not isinstance(secret, str) or not secret.startswith("whsec_"):
        raise ValueError(expected)
    try:
        raw = base64.b64decode(secret[len("whsec_") :], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(expected) from None
    if not 24 <= len(raw) <= 64:
        raise ValueError(expected)
    return secret


def sign_headers(
    delivery_id: str, body: bytes, secrets: list[str], at: float | None = None
) -> dict[str, str]:
    """The three Standard Webhooks headers of one attempt of ``body``, signed with each secret."""
    moment = datetime.fromtimestamp(time.time() if at is None else at, UTC)
    signatures = " ".join(Webhook(secret).sign(delivery_id, moment, body) for secret in secrets)
    return {
        "webhook-id": delivery_id,
        "webhook-timestamp": str(int(moment.timestamp())),
        "webhook-signature": signatures,
    }


class WebhookChannel:
    """Sends webhook deliveries over one shared ``aiohttp`` session (made on first use, in
    the running loop). aiohttp rather than httpx: the deliverer runs inside the service's
    event loop, and a delivery costs aiohttp about a tenth of httpx's CPU there (0.1 ms
    against 1 ms a request, ``bench/notify_delay.py``'s notes), CPU the service's answers
    would otherwise lose.

    Example::

        channel = WebhookChannel()
        sent = await channel.send(endpoint, delivery, outbox)   # Sent(ok=True, code=204)
        await channel.aclose()
    """

    kind = "webhook"

    def __init__(self, *, timeout: float = TIMEOUT) -> None:
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                headers={"user-agent": _USER_AGENT},
                connector=aiohttp.TCPConnector(limit=100, limit_per_host=32),
            )
        return self._session

    async def send(self, endpoint: Endpoint, delivery: Delivery, receipts: Receipts) -> Sent:
        """One signed ``POST`` of ``delivery`` to ``endpoint.target``."""
        secrets = endpoint.live_secrets(time.time())
        if not secrets:
            return Sent(False, error="the endpoint has no signing secret", retry=False)
        headers = {**sign_headers(delivery.id, delivery.body, secrets), "content-type": "application/json"}
        try:
            async with self._client().post(
                endpoint.target, data=delivery.body, headers=headers, allow_redirects=False
            ) as answer:
                code = answer.status
                if 200 <= code < 300:
                    return Sent(True, code=code)
                head = await answer.content.read(_SNIPPET)
        except TimeoutError:
            return Sent(False, error=f"no answer within {self.timeout:g} s")
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            return Sent(False, error=f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        snippet = head.decode(errors="replace").replace("\n", " ").strip()
        error = f"HTTP {code}" + (f": {snippet}" if snippet else "")
        return Sent(False, code=code, error=error, retry=code != 410)

    async def aclose(self) -> None:
        """Close the HTTP session."""
        if self._session is not None:
            await self._session.close()
