"""What a review's Slack message says once it is answered: the stamps.

A stamp is one line of mrkdwn put in the message's stamp block (``slack_blocks.stamped``)
when a review is decided (:func:`decided_stamp`), expires unanswered
(:func:`expired_stamp`) or counts an approval that is not yet enough
(:func:`approvals_stamp`): what was decided, by whom, through which channel and when.
Every name in it is escaped as the message's other texts are (``slack_blocks.escape``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from handrail.notify.slack_blocks import escape, when

__all__ = ["approvals_said", "approvals_stamp", "decided_stamp", "expired_stamp"]

_CHANNELS = {
    "slack": "in Slack",
    "web": "in the web inbox",
    "http": "through the API",
    "cli": "at the command line",
    "email": "from a mail link",
    "python": "from Python",
    "mcp": "through MCP",
    "grant": "by a grant",
}


def _by(who: Any, channel: Any) -> str:
    name = f"*{escape(who)}*" if isinstance(who, str) and who else "someone"
    through = _CHANNELS.get(channel) if isinstance(channel, str) else None
    return f"{name} {through}" if through else name


def decided_stamp(decided_by: Any, decision: Any, at: float) -> str:
    """``:white_check_mark: Approved by alice in Slack at 10:42 UTC`` and the like, from a
    ``review.decided`` payload's ``decided_by`` and ``decision``."""
    who = decided_by.get("id") if isinstance(decided_by, Mapping) else None
    channel = decided_by.get("channel") if isinstance(decided_by, Mapping) else None
    found = (
        decision.get("decisions") if isinstance(decision, Mapping) and "type" not in decision else [decision]
    )
    decisions = [d for d in found if isinstance(d, Mapping)] if isinstance(found, list) else []
    kinds = list(dict.fromkeys(str(d.get("type")) for d in decisions))
    by = f"by {_by(who, channel)} at {when(at)}"
    if kinds == ["approve"]:
        return f":white_check_mark: Approved {by}"
    if kinds == ["edit"] or set(kinds) == {"approve", "edit"}:
        return f":pencil2: Approved with edits {by}"
    messages = [
        str(d.get("message")) for d in decisions if isinstance(d.get("message"), str) and d.get("message")
    ]
    said = f": {escape(messages[0], limit=500, newlines=True)}" if messages else ""
    if kinds == ["reject"]:
        return f":no_entry: Rejected {by}{said}"
    if kinds == ["respond"]:
        return f":speech_balloon: Answered {by} in place of the tool{said}"
    if not kinds:
        return f":ballot_box_with_check: Answered {by}"
    return f":ballot_box_with_check: Decided {by}: " + ", ".join(escape(k) for k in kinds) + said


def expired_stamp(decision: Any, at: float) -> str:
    """``:hourglass: Expired unanswered at 10:42 UTC``, and what its policy decided."""
    found = (
        decision.get("decisions") if isinstance(decision, Mapping) and "type" not in decision else [decision]
    )
    kinds = (
        {str(d.get("type")) for d in found if isinstance(d, Mapping)} if isinstance(found, list) else set()
    )
    outcome = (
        " (its policy approved it)" if kinds == {"approve"} else " (its policy rejected it)" if kinds else ""
    )
    return f":hourglass: Expired unanswered at {when(at)}{outcome}"


def approvals_said(approvals: Any) -> str | None:
    """``1 of 2 approvals (alice)`` from each call's ``{"approvals", "needed", "approved_by"}``
    (a recorded answer's ``approvals``); None without any."""
    counts = [a for a in approvals if isinstance(a, Mapping)] if isinstance(approvals, list) else []
    if not counts:
        return None
    first = counts[0]
    names = [n for n in first.get("approved_by") or () if isinstance(n, str)]
    said = f"{first.get('approvals', len(names))} of {first.get('needed', '?')} approvals"
    if any(
        c.get("approvals") != first.get("approvals") or c.get("needed") != first.get("needed") for c in counts
    ):
        said = "; ".join(f"{c.get('approvals')} of {c.get('needed')}" for c in counts) + " approvals"
    listed = f" ({', '.join(names)})" if names else ""
    return escape(said + listed, limit=500)


def approvals_stamp(approvals: Any, who: Any = None, channel: Any = None) -> str:
    """``:ballot_box_with_check: 1 of 2 approvals (alice)`` for a vote on a review that counts
    approvals; without counts, who approved and that more are needed."""
    said = approvals_said(approvals)
    if said is not None:
        return f":ballot_box_with_check: {said}"
    return f":ballot_box_with_check: Approved by {_by(who, channel)}; more approvals are needed"
