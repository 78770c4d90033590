"""How the review CLI lays out what it prints: long values folded, ids and times never cut.

A value from a model or a tool can be a megabyte (issue 25: ``handrail show`` printed
1.17 MB for a review with a 1 MB argument). :func:`fold` keeps the head of a long value and
says how long the whole is and which command prints it whole (``--full``).

A rich table squeezed into 80 columns shortens its cells with "…"; an id cut that way
cannot be copied into the next command, and a time cut to ``2026-05-02T0`` says nothing.
:func:`id_column` and :func:`time_column` make columns that rich never shortens (an id
longer than the whole terminal wraps inside its cell, it is not cut); :func:`clock`
writes a time as ``2026-05-02 08:06:12`` (UTC).

A review's policy (SPEC rules 14-15) is shown as :func:`approvals_text` ("1 of 2
(alice)", per call that counts approvals, "for an edit" when the count stands at one) and
:func:`expiry_text` ("expires in 43 min (2026-05-02 08:06 UTC)", or "expired at ..."),
read from an inbox item's ``approvals`` and ``expires_at``.

Private to :mod:`handrail.cli`: the review commands and the others that print tables.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from rich.table import Column

from handrail._duration import time_left
from handrail._message_display import visible_json

__all__ = [
    "FOLD_AT",
    "action_of",
    "approvals_text",
    "clock",
    "counted",
    "expiry_text",
    "fold",
    "id_column",
    "one_line",
    "text_column",
    "time_column",
    "time_left",
]

FOLD_AT = 2000
"""How many characters of one value ``handrail show`` prints before folding it."""


def fold(text: str, size: int, hint: str) -> str:
    """``text`` when it has at most ``size`` characters; else its head, then how long it is
    and ``hint`` (where to see it whole).

    >>> fold("x" * 10, 4, "--full prints it whole")
    'xxxx… (10 characters; --full prints it whole)'
    """
    if len(text) <= size:
        return text
    return f"{text[:size]}… ({len(text):,} characters; {hint})"


def one_line(value: Any) -> str:
    """``value`` as one line of JSON, its hidden characters as JSON escapes (``\\u202e``)."""
    return visible_json(orjson.dumps(value, default=str).decode()) if value is not None else ""


def clock(value: Any, *, seconds: bool = True) -> str:
    """A time (ISO 8601 text, epoch seconds or a datetime) as ``2026-05-02 08:06:12`` in UTC;
    anything else as it is."""
    moment: datetime | None = None
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        moment = datetime.fromtimestamp(value, UTC)
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return value
    if moment is None:
        return "" if value is None else str(value)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def id_column(header: str) -> Column:
    """A column for ids: never shortened with "…"; wider than the terminal, it wraps."""
    return Column(header, no_wrap=True, overflow="fold")


def time_column(header: str) -> Column:
    """A column for times (as :func:`clock` writes them): never shortened."""
    return Column(header, no_wrap=True, overflow="fold")


def text_column(header: str) -> Column:
    """A column for free text that gives way to the others, wrapping rather than cutting."""
    return Column(header, overflow="fold")


def counted(item: Any) -> list[dict[str, Any]]:
    """The calls of an inbox item that count approvals (more than one needed; rule 14)."""
    found = item.get("approvals") if isinstance(item, dict) else None
    return [
        a
        for a in (found if isinstance(found, list) else [])
        if isinstance(a, dict) and isinstance(a.get("needed"), int) and a["needed"] > 1
    ]


def action_of(approvals: dict[str, Any]) -> dict[str, Any]:
    """The action (``{"name", "args"}``) one call's approvals are for."""
    action = approvals.get("action")
    return action if isinstance(action, dict) else {}


def approvals_text(item: Any) -> list[str]:
    """Per call that counts approvals: ``1 of 2 (alice)`` (the tool first when several count;
    ``for an edit`` when the approvals are for one, ``rejected`` once a call is decided so)."""
    calls = counted(item)
    out = []
    for a in calls:
        by = [str(who) for who in a.get("approved_by") or []]
        text = f"{len(by)} of {a['needed']}" + (f" ({', '.join(by)})" if by else "")
        action = action_of(a)
        if len(calls) > 1:
            text = f"{action.get('name', '?')}: {text}"
        if a.get("edited"):
            text += " for an edit"
        decided = a.get("decided")
        if isinstance(decided, dict) and decided.get("type") in ("reject", "respond"):
            text += f", {'rejected' if decided['type'] == 'reject' else 'answered'}"
        out.append(text)
    return out


def expiry_text(item: Any, *, at: bool = True, now: float | None = None) -> str | None:
    """When an inbox item's review expires unanswered (rule 15): ``expires in 43 min
    (2026-05-02 08:06 UTC)``, ``expired at 2026-05-02 08:06 UTC``; None when it never does.
    ``at=False`` leaves the time out of a review still open. Judged by the clock the
    library judges expiry by."""
    value = item.get("expires_at") if isinstance(item, dict) else None
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    if now is None:
        from handrail.runtime.answering import now as clock_now

        now = clock_now()
    left = time_left(moment.timestamp() - now)
    when = f"{clock(moment, seconds=False)} UTC"
    if left == "expired":
        return f"expired at {when}"
    return f"{left} ({when})" if at else left
