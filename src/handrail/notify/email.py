"""Email notifications (SPEC §5.4): a mail to the people who may decide a review.

The channel of ``[notifications.email]`` endpoints (``handrail.notify.config``): it works
out each delivery's recipients, writes the mail and sends it with ``aiosmtplib``.

**Recipients** (:func:`recipients_of`): a review's mail goes to each identity with an
address one of whose live tokens may decide it (SPEC rule 12: the ``review`` scope and,
for every tool whose policy names roles, one of them); ``run.*`` mails go to every
identity with an address and a live token, the test mail to every address. Nobody to
mail is a failure no retry mends (``retry=False``), and the error names the roles.

**The mail** (:func:`compose`) has a plain-text and an HTML part: the calls and their
arguments (folded, at most :data:`ARGS_LIMIT` characters a call), who may decide, the
expiry, who decided and how, and a link to the review page. The link only opens the
page, whose ``GET`` never records an answer: a link preview or a scanner decides
nothing. A value that reaches a header is made one line without control characters
(:func:`one_line`): no tool name, argument or thread id can add a header or a recipient.
The ``Message-ID`` is made from the delivery's id (a redelivery is the same message);
later mails about a review answer its first one (``In-Reply-To``).

**Failures** are ``Sent(ok=False)``, never exceptions: a failed connection, a timeout
or a 4xx is retried; a 5xx refusal of every recipient or of the message is not. A
refusal of the session (greeting, ``AUTH``, ``MAIL FROM``, TLS) is the settings'
problem, not the mail's: it is retried, so pending mails go out once they are mended.
"""

from __future__ import annotations

import asyncio
import html
import logging
import os
import re
import time
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import format_datetime
from typing import Any

import aiosmtplib
import orjson

from handrail.notify.channels import Delivery, Endpoint, Receipts, Sent
from handrail.notify.events import TEST_EVENT
from handrail.review.policy import DEFAULT_DESCRIPTION_PREFIX
from handrail.server.db import ServerDB
from handrail.server.tokens import Credential, TokenStore

__all__ = ["ARGS_LIMIT", "FOLD_LIMIT", "EmailChannel", "compose", "one_line", "recipients_of"]

log = logging.getLogger("handrail.notify")

FOLD_LIMIT = 300
"""A string argument longer than this many characters is shown as its head and its length."""

ARGS_LIMIT = 2000
"""The most characters of one call's arguments a mail shows (the page shows them all)."""

_CALLS_LIMIT = 10  # calls shown in one mail; the rest are counted
_SUBJECT_PART = 60  # characters of a tool list, a thread id or a name in a subject
_DEPTH = 12  # nesting of arguments shown before "…"

_TITLES = {
    "review.requested": "Review requested",
    "review.outcome_unknown": "Outcome unknown",
    "review.expired": "Review expired",
    "review.decided": "Review decided",
    "review.approved": "Approval recorded",
    "run.failed": "Run failed",
    "run.finished": "Run finished",
    TEST_EVENT: "Test mail",
}
_LINKS = (("review", "Open the review"), ("thread", "Open the thread"), ("inbox", "Open the inbox"))
_PENDING = ("review.requested", "review.outcome_unknown", "review.approved")  # the review still waits
_PAST = {"approve": "approved", "reject": "rejected", "edit": "edited", "respond": "responded to"}
# an address as the SMTP envelope takes it: ASCII, no spaces, quotes, brackets or separators
_ADDRESS = re.compile(r"^[!#-'*+\-./0-9=?A-Z^-~]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
_MESSAGE_ID = re.compile(r"^<[A-Za-z0-9._-]{1,100}@[A-Za-z0-9.-]{1,253}>$")


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
        if delivery.event not in _TITLES:
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
        if isinstance(mid, str) and _MESSAGE_ID.match(mid):
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


# The mail -----------------------------------------------------------------------------------
def one_line(value: Any, limit: int) -> str:
    """``value`` as text fit for a header: no control or format characters, no line
    breaks, runs of white space made one space, at most ``limit`` characters."""
    text = value if isinstance(value, str) else _json(value, indent=False)
    kept = "".join(
        " " if ch.isspace() else ch for ch in text if unicodedata.category(ch)[0] != "C" or ch.isspace()
    )
    kept = " ".join(kept.split())
    return kept if len(kept) <= limit else kept[: max(limit - 1, 0)].rstrip() + "…"


def _text(value: str) -> str:
    """Body text: line breaks kept, other control and format characters dropped."""
    value = value.replace("\r\n", "\n").replace("\r", "\n").replace("\u2028", "\n").replace("\u2029", "\n")
    return "".join(ch for ch in value if ch in "\n\t" or unicodedata.category(ch) not in ("Cc", "Cf", "Cs"))


def _fold(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        if len(value) <= FOLD_LIMIT:
            return value
        return f"{value[:FOLD_LIMIT]}… [folded: {len(value)} characters in all]"
    if depth >= _DEPTH and isinstance(value, (Mapping, list, tuple)):
        return "…"
    if isinstance(value, Mapping):
        return {str(k)[:FOLD_LIMIT]: _fold(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_fold(v, depth + 1) for v in value]
    return value


def _json(value: Any, *, indent: bool = True) -> str:
    option = orjson.OPT_NON_STR_KEYS | (orjson.OPT_INDENT_2 if indent else 0)
    try:
        return orjson.dumps(value, option=option, default=str).decode()
    except (TypeError, orjson.JSONEncodeError):
        return repr(value)


def _args(args: Any) -> str:
    text = _text(_json(_fold(args)))
    if len(text) > ARGS_LIMIT:
        text = text[:ARGS_LIMIT] + "\n… [cut: the review page shows all of them]"
    return text


@dataclass(frozen=True)
class _Call:
    name: str
    args: str
    note: str


def _calls(data: Mapping[str, Any]) -> list[_Call]:
    out = []
    requests = data.get("action_requests")
    for request in requests if isinstance(requests, list) else ():
        if not isinstance(request, Mapping):
            continue
        description = request.get("description")
        note = description if isinstance(description, str) else ""
        head, found, _ = note.partition("\n\nTool: ")
        if found or note.startswith(DEFAULT_DESCRIPTION_PREFIX):  # the default one: the arguments again
            note = "" if head.strip() in ("", DEFAULT_DESCRIPTION_PREFIX) else head
        name = one_line(request.get("name", "?"), 200)
        out.append(_Call(name, _args(request.get("args", {})), _text(note[:FOLD_LIMIT])))
    return out


def _tools(data: Mapping[str, Any], calls: Sequence[_Call]) -> list[str]:
    tools = data.get("tools")
    named = [t for t in tools if isinstance(t, str)] if isinstance(tools, list) else []
    return list(dict.fromkeys(one_line(t, 200) for t in named or [c.name for c in calls]))


def _decisions(decision: Any, tools: Sequence[str]) -> tuple[list[str], str | None]:
    """Each call's decision in words, and the verb that sums them up (None when mixed)."""
    found = decision.get("decisions") if isinstance(decision, Mapping) else None
    items = found if isinstance(found, list) else [decision]
    lines, kinds = [], set()
    for n, item in enumerate(items[:_CALLS_LIMIT]):
        tool = tools[n] if n < len(tools) else f"call {n + 1}"
        kind = item.get("type") if isinstance(item, Mapping) else None
        if not isinstance(kind, str):
            lines.append(f"{tool}: answered {one_line(item, 200)}")
            kinds.add("answer")
            continue
        kinds.add(kind)
        line = f"{tool}: {one_line(kind, 40)}"
        message = item.get("message")
        if isinstance(message, str) and message.strip():
            line += f", saying {one_line(message, FOLD_LIMIT)!r}"
        edited = item.get("edited_action")
        if isinstance(edited, Mapping):
            line += f", with the arguments {one_line(_fold(edited.get('args')), 500)}"
        if item.get("grant"):
            line += ", with a grant for later calls"
        lines.append(line)
    verb = _PAST.get(next(iter(kinds))) if len(kinds) == 1 else None
    return lines, verb


def _when(at: Any) -> str | None:
    if isinstance(at, bool) or not isinstance(at, (int, float)):
        return None
    try:
        return datetime.fromtimestamp(float(at), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return None


def _link(data: Mapping[str, Any]) -> tuple[str, str] | None:
    links = data.get("links")
    if not isinstance(links, Mapping):
        return None
    for key, label in _LINKS:
        url = links.get(key)
        if isinstance(url, str) and re.match(r"^https?://[^\s<>\"'\\]+$", url) and len(url) <= 2000:
            return label, url
    return None


def _facts(event: str, data: Mapping[str, Any], calls: Sequence[_Call], tools: Sequence[str]) -> list[str]:
    """The mail's facts, one per line, before the calls ("" between paragraphs)."""
    thread, agent = one_line(data.get("thread_id", ""), 200), one_line(data.get("agent") or "?", 100)
    named = ", ".join(tools) or "a call"
    decided = data["decided_by"] if isinstance(data.get("decided_by"), Mapping) else {}
    who, channel = one_line(decided.get("id") or "nobody", 100), one_line(decided.get("channel") or "?", 40)
    said = {
        "review.requested": f"Agent {agent} asks to run {named} on thread {thread} and waits for a person "
        "to decide.",
        "review.outcome_unknown": f"A call of {named} on thread {thread} stopped while it ran: nobody knows "
        "whether it took effect. A person must say what happened (run it again, give its result, or "
        "reject it).",
        "review.expired": f"The review of {named} on thread {thread} expired unanswered.",
        "review.decided": f"The review of {named} on thread {thread} was decided by {who} (through "
        f"{channel}).",
        "review.approved": f"{who} approved {named} on thread {thread}; the review waits for more approvals.",
        "run.failed": f"A run of agent {agent} on thread {thread} failed.",
        "run.finished": f"A run of agent {agent} on thread {thread} finished "
        f"({one_line(data.get('status') or '?', 40)}).",
        TEST_EVENT: "A test mail from handrail: the [notifications.email] settings work.",
    }
    out = [said[event]]
    if not event.startswith("review."):
        return out
    out.append("")
    roles = data["reviewers"] if isinstance(data.get("reviewers"), Mapping) else {}
    for tool in tools:
        names = [one_line(r, 100) for r in roles.get(tool) or () if isinstance(r, str)]
        out.append(f"Who may decide {tool}: " + (f"role {' or '.join(names)}" if names else "any reviewer"))
    allowed = data.get("allowed_decisions") if event in _PENDING else None
    for tool, choices in allowed.items() if isinstance(allowed, Mapping) else ():
        if isinstance(choices, list) and choices:
            listed = one_line(", ".join(map(str, choices)), 200)
            out.append(f"Decisions allowed for {one_line(tool, 100)}: {listed}")
    expires = _when(data.get("expires_at"))
    if expires and event in _PENDING:
        out.append(f"Expires unanswered at {expires}.")
    if "decision" in data and event in ("review.decided", "review.expired", "review.approved"):
        lines, _ = _decisions(data.get("decision"), [c.name for c in calls] or list(tools))
        out += ["", "Decision:" if event != "review.expired" else "On expiry:", *(f"  {s}" for s in lines)]
    return out


def compose(
    delivery: Delivery,
    data: Mapping[str, Any],
    recipients: Sequence[str],
    sender: str,
    *,
    in_reply_to: str | None = None,
    at: float | None = None,
) -> EmailMessage:
    """The mail of one delivery (its event one of those email sends): headers, a plain-text
    part and an HTML part.

    ``data`` is the payload's ``data``; ``recipients`` go in ``To``; the ``Message-ID``
    is made from ``delivery.id`` and the sender's domain; ``in_reply_to`` is the
    ``Message-ID`` of the review's first mail; ``at`` the ``Date`` (epoch seconds).
    """
    event = delivery.event
    calls = _calls(data)
    tools = _tools(data, calls)
    thread = one_line(data.get("thread_id", ""), _SUBJECT_PART)
    subject = f"[handrail] {_TITLES[event]}"
    if event.startswith("review."):
        subject += f": {one_line(', '.join(tools), _SUBJECT_PART) or 'a call'} on thread {thread}"
        if event == "review.decided":
            decided = data.get("decided_by")
            who = decided.get("id") if isinstance(decided, Mapping) else None
            _, verb = _decisions(data.get("decision"), tools)
            subject += f", {verb or 'answered'} by {one_line(who or 'nobody', _SUBJECT_PART)}"
    elif event != TEST_EVENT:
        subject += f" on thread {thread} ({one_line(data.get('agent') or '?', _SUBJECT_PART)})"
    message = EmailMessage(policy=SMTP)
    message["Subject"] = one_line(subject, 250)
    message["From"] = sender
    message["To"] = ", ".join(recipients)
    message["Date"] = format_datetime(datetime.fromtimestamp(at or time.time(), UTC))
    domain = re.sub(r"[^A-Za-z0-9.-]", "", sender.rpartition("@")[2])[:253] or "handrail.invalid"
    message["Message-ID"] = f"<{re.sub(r'[^A-Za-z0-9_-]', '', delivery.id)[:100] or 'mail'}@{domain}>"
    if in_reply_to is not None and _MESSAGE_ID.match(in_reply_to):
        message["In-Reply-To"] = in_reply_to
        message["References"] = in_reply_to
    message["Auto-Submitted"] = "auto-generated"  # RFC 3834: no automatic replies
    message["X-Handrail-Event"] = event
    blocks: list[tuple[str, str]] = [("p", line) for line in _facts(event, data, calls, tools)]
    for n, call in enumerate(calls[:_CALLS_LIMIT], 1):
        blocks += [("p", ""), ("h", f"Call {n}: {call.name}")]
        blocks += [("p", call.note)] if call.note else []
        blocks += [("p", "Arguments:"), ("pre", call.args)]
    if len(calls) > _CALLS_LIMIT:
        blocks += [
            ("p", ""),
            ("p", f"… and {len(calls) - _CALLS_LIMIT} more calls: the review page shows them."),
        ]
    link = _link(data)
    if link is not None:
        blocks += [("p", ""), ("a", "\n".join(link))]
        blocks += [("p", _NOT_DECIDING)] if "/inbox/reviews/" in link[1] else []
    blocks += [("p", ""), ("small", f"handrail ({event}, delivery {one_line(delivery.id, 60)})")]
    message.set_content(_plain(blocks))
    message.add_alternative(_html(blocks), subtype="html")
    return message


_NOT_DECIDING = "Opening the link decides nothing: the page shows the calls, and you answer there, signed in."


def _plain(blocks: Sequence[tuple[str, str]]) -> str:
    out = []
    for kind, text in blocks:
        if kind == "a":
            label, _, url = text.partition("\n")
            out.append(f"{label}: {url}")
        elif kind == "pre":
            out += [f"  {row}" for row in text.split("\n")]
        else:
            out.append(("-- \n" if kind == "small" else "") + _text(text))
    return "\n".join(out) + "\n"


def _html(blocks: Sequence[tuple[str, str]]) -> str:
    def e(text: str) -> str:
        return html.escape(_text(text), quote=True)

    out, paragraph = ['<!DOCTYPE html><html><body style="font-family: sans-serif; line-height: 1.4">'], []
    for kind, text in [*blocks, ("p", "")]:
        if kind == "p" and text:
            paragraph.append(e(text))
            continue
        if paragraph:
            out.append("<p>" + "<br>".join(paragraph) + "</p>")
            paragraph = []
        if kind == "h":
            out.append(f"<h3>{e(text)}</h3>")
        elif kind == "pre":
            out.append(
                f'<pre style="white-space: pre-wrap; background: #f4f4f4; padding: 8px">{e(text)}</pre>'
            )
        elif kind == "a":
            label, _, url = text.partition("\n")
            out.append(f'<p><a href="{e(url)}">{e(label)}</a></p>')
        elif kind == "small":
            out.append(f"<p><small>{e(text)}</small></p>")
    return "\n".join([*out, "</body></html>"]) + "\n"
