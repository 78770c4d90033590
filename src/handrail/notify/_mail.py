"""The mail of an email notification: its headers, its plain-text part and its HTML part.

:func:`compose` writes the mail of one delivery: the calls and their arguments (folded,
at most :data:`ARGS_LIMIT` characters a call), who may decide, the expiry, who decided
and how, and a link to the review page. The link only opens the page, whose ``GET``
never records an answer: a link preview or a scanner decides nothing. A value that
reaches a header is made one line without control characters (:func:`one_line`): no
tool name, argument or thread id can add a header or a recipient. The ``Message-ID`` is
made from the delivery's id (a redelivery is the same message); a later mail about a
review answers the review's first one (``In-Reply-To``). The channel that sends it is
``handrail.notify._email``.
"""

from __future__ import annotations

import html
import re
import time
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import format_datetime
from typing import Any

import orjson

from handrail.notify.channels import Delivery
from handrail.notify.events import TEST_EVENT
from handrail.review.policy import DEFAULT_DESCRIPTION_PREFIX

__all__ = ["ARGS_LIMIT", "FOLD_LIMIT", "MESSAGE_ID", "TITLES", "compose", "one_line"]

FOLD_LIMIT = 300
"""A string argument longer than this many characters is shown as its head and its length."""

ARGS_LIMIT = 2000
"""The most characters of one call's arguments a mail shows (the page shows them all)."""

TITLES = {
    "review.requested": "Review requested",
    "review.outcome_unknown": "Outcome unknown",
    "review.expired": "Review expired",
    "review.decided": "Review decided",
    "review.approved": "Approval recorded",
    "run.failed": "Run failed",
    "run.finished": "Run finished",
    TEST_EVENT: "Test mail",
}
"""The events a mail is written for, and the title each mail's subject starts with."""

MESSAGE_ID = re.compile(r"^<[A-Za-z0-9._-]{1,100}@[A-Za-z0-9.-]{1,253}>$")
"""A ``Message-ID`` as handrail writes them, and takes them back for ``In-Reply-To``."""

_CALLS_LIMIT = 10  # calls shown in one mail; the rest are counted
_SUBJECT_PART = 60  # characters of a tool list, a thread id or a name in a subject
_DEPTH = 12  # nesting of arguments shown before "…"
_LINKS = (("review", "Open the review"), ("thread", "Open the thread"), ("inbox", "Open the inbox"))
_PENDING = ("review.requested", "review.outcome_unknown", "review.approved")  # the review still waits
_PAST = {"approve": "approved", "reject": "rejected", "edit": "edited", "respond": "responded to"}


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
    subject = f"[handrail] {TITLES[event]}"
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
    if in_reply_to is not None and MESSAGE_ID.match(in_reply_to):
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
