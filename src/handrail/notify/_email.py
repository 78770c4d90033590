"""Email notifications (SPEC §5.4): a mail to the people who may decide a review.

The channel of ``[notifications.email]`` endpoints (``handrail.notify.config``): it works
out each delivery's recipients, has the mail written (``handrail.notify._mail``) and sends
it with ``aiosmtplib``.

**Recipients** (:func:`recipients_of`): a review's mail goes to each identity with an
address one of whose live tokens may decide it (SPEC rule 12: the ``review`` scope and,
for every tool whose policy names roles, one of them); ``run.*`` mails go to every
identity with an address and a live token, the test mail to every address. Nobody to
mail is a failure no retry mends (``retry=False``), and the error names the roles.
Later mails about a review answer its first one (``In-Reply-To``).

**Failures** are ``Sent(ok=False)``, never exceptions: a failed connection, a timeout
or a 4xx is retried; a 5xx refusal of every recipient or of the message is not. A
refusal of the session (greeting, ``AUTH``, ``MAIL FROM``, TLS) is the settings'
problem, not the mail's: it is retried, so pending mails go out once they are mended.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import aiosmtplib
import orjson

from handrail.notify._mail import MESSAGE_ID, TITLES, compose, one_line
from handrail.notify.channels import Delivery, Endpoint, Receipts, Sent
from handrail.notify.events import TEST_EVENT
from handrail.server.db import ServerDB
from handrail.server.tokens import Credential, TokenStore

__all__ = ["EmailChannel", "recipients_of"]

log = logging.getLogger("handrail.notify")

# an address as the SMTP envelope takes it: ASCII, no spaces, quotes, brackets or separators
_ADDRESS = re.compile(r"^[!#-'*+\-./0-9=?A-Z^-~]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")


class _Unusable(Exception):
    """Settings that no retry can make work."""


class EmailChannel:
    """Sends email deliveries through the SMTP server each endpoint's options name.

    ``db`` holds the tokens that say who may decide what (``TokenStore``).

    Example::

        channel = EmailChannel(ServerDB.open(db_path="handrail.db"))
        sent = await channel.send(endpoint, delivery, outbox)
        # Sent(ok=True, code=250, receipt={"recipients": ["dana@example.com"], "message_id": "<msg_…@…>"})
    """

    kind = "email"

    def __init__(self, db: ServerDB) -> None:
        self._db = db
        self._tokens: TokenStore | None = None

    async def send(self, endpoint: Endpoint, delivery: Delivery, receipts: Receipts) -> Sent:
        """Mail ``delivery`` to those who may act on it; never raises for a failure."""
        try:
            return await self._send(endpoint, delivery, receipts)
        except _Unusable as exc:
            return Sent(False, error=str(exc), retry=False)
        except Exception as exc:  # a defect here: recorded and retried like any failed attempt
            log.exception("email delivery %s failed", delivery.id)
            return Sent(False, error=one_line(f"the email channel failed: {type(exc).__name__}: {exc}", 500))

    def _credentials(self) -> list[Credential]:
        if self._tokens is None:
            self._tokens = TokenStore(self._db)
        return self._tokens.all()

    async def _send(self, endpoint: Endpoint, delivery: Delivery, receipts: Receipts) -> Sent:
        smtp, addresses = _settings(endpoint.options)
        try:
            payload = orjson.loads(delivery.body)
        except orjson.JSONDecodeError:
            raise _Unusable("the delivery's body is not JSON") from None
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, dict):
            raise _Unusable("the delivery's body has no data")
        if delivery.event not in TITLES:
            raise _Unusable(f"email sends no mail for {one_line(delivery.event, 60)!r}")
        credentials = await asyncio.to_thread(self._credentials)
        recipients, roles = recipients_of(delivery.event, data, addresses, credentials)
        if not recipients:
            who = f"no reviewer of roles {roles}" if roles else "nobody who may act on it"
            return Sent(False, error=f"{who} has an address (and a live token) to mail", retry=False)
        replying = await _first_mail(receipts, endpoint.id, delivery)
        message = compose(
            delivery, data, recipients, smtp["sender"], in_reply_to=replying, at=delivery.created_at
        )
        message_id = str(message["Message-ID"])
        try:
            refused, _ = await aiosmtplib.send(message, recipients=recipients, **smtp)
        except Exception as exc:
            return _failure(exc)
        receipt: dict[str, Any] = {"recipients": recipients, "message_id": message_id}
        if refused:
            receipt["refused"] = {rcpt: f"{r.code} {one_line(r.message, 200)}" for rcpt, r in refused.items()}
        return Sent(True, code=250, receipt=receipt)


def _settings(options: Mapping[str, Any]) -> tuple[dict[str, Any], Mapping[str, Any]]:
    """``aiosmtplib.send``'s arguments from an endpoint's options, and its addresses."""
    host, port, sender = options.get("host"), options.get("port", 587), options.get("from")
    if not isinstance(host, str) or not host or one_line(host, 255) != host:
        raise _Unusable("the email endpoint names no SMTP host")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise _Unusable(f"the email endpoint's port {port!r} is not a port number")
    if not isinstance(sender, str) or not _ADDRESS.match(sender):
        raise _Unusable(f"the email endpoint's from {one_line(sender, 100)!r} is not a plain ASCII address")
    timeout = options.get("timeout", 30.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        timeout = 30.0
    password, name = None, options.get("password_env")
    if name is not None and (password := os.environ.get(str(name))) is None:
        raise _Unusable(f"the environment variable {one_line(name, 100)!r} (password_env) is not set")
    username, starttls, addresses = options.get("username"), options.get("starttls"), options.get("addresses")
    smtp = {
        "sender": sender,
        "hostname": host,
        "port": port,
        "timeout": float(timeout),
        "use_tls": options.get("tls") is True,
        "start_tls": starttls if isinstance(starttls, bool) else None,  # None: when the server offers it
        "username": username if isinstance(username, str) and username else None,
        "password": password,
    }
    return smtp, addresses if isinstance(addresses, Mapping) else {}


def recipients_of(
    event: str, data: Mapping[str, Any], addresses: Mapping[str, Any], credentials: Iterable[Credential]
) -> tuple[list[str], list[str]]:
    """Whom a mail about ``event`` goes to: the sorted, de-duplicated addresses, and the
    roles the review needs (sorted; empty when anyone may decide it).

    ``addresses`` maps identities (token names) to addresses; ``credentials`` are every
    token (``TokenStore.all()``). An address that is not a plain ASCII mail address is
    left out.
    """
    needed: list[frozenset[str]] = []
    reviewers = data.get("reviewers")
    if isinstance(reviewers, Mapping):
        for roles in reviewers.values():
            if isinstance(roles, list) and any(isinstance(r, str) for r in roles):
                needed.append(frozenset(r for r in roles if isinstance(r, str)))
    every_role = sorted(set().union(*needed)) if needed else []
    live = [c for c in credentials if c.revoked_at is None]
    if event == TEST_EVENT:
        chosen = set(addresses)
    elif event.startswith("review."):
        chosen = {c.name for c in live if c.has("review") and all(not r.isdisjoint(c.roles) for r in needed)}
    else:
        chosen = {c.name for c in live}
    found = {addresses[name] for name in chosen if name in addresses}
    return sorted(a for a in found if isinstance(a, str) and _ADDRESS.match(a)), every_role


async def _first_mail(receipts: Receipts, endpoint_id: str, delivery: Delivery) -> str | None:
    """The Message-ID of the mail that asked for this review, when it went out."""
    if delivery.interrupt_id is None or delivery.event in ("review.requested", "review.outcome_unknown"):
        return None
    for asked in ("review.requested", "review.outcome_unknown"):
        try:
            found = await asyncio.to_thread(receipts.receipt, endpoint_id, delivery.interrupt_id, asked)
        except Exception:  # the thread of mails is a nicety: never a reason to fail
            return None
        mid = found.get("message_id") if isinstance(found, Mapping) else None
        if isinstance(mid, str) and MESSAGE_ID.match(mid):
            return mid
    return None


def _failure(exc: Exception) -> Sent:
    """How a failed SMTP exchange is recorded, and whether trying again can help."""
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        codes = [r.code for r in exc.recipients]
        said = "; ".join(f"{r.recipient}: {r.code} {one_line(r.message, 100)}" for r in exc.recipients)
        permanent = bool(codes) and all(500 <= c < 600 for c in codes)
        error = one_line(f"every recipient was refused: {said}", 500)
        return Sent(False, code=max(codes, default=None), error=error, retry=not permanent)
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        stage = {
            aiosmtplib.SMTPRecipientRefused: "the recipient",
            aiosmtplib.SMTPDataError: "the message",
            aiosmtplib.SMTPSenderRefused: "the sender",
            aiosmtplib.SMTPAuthenticationError: "the login",
            aiosmtplib.SMTPHeloError: "the greeting",
        }.get(type(exc), "the session")
        # a refusal of the message or its recipients is final; one of the session is the settings'
        permanent = 500 <= exc.code < 600 and stage in ("the recipient", "the message")
        error = f"the SMTP server refused {stage}: {exc.code} {one_line(exc.message, 300)}"
        return Sent(False, code=exc.code, error=one_line(error, 500), retry=not permanent)
    if isinstance(exc, (TimeoutError, aiosmtplib.SMTPTimeoutError)):
        return Sent(False, error=one_line(f"the SMTP server did not answer in time: {exc}", 500))
    return Sent(
        False, error=one_line(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, 500)
    )
