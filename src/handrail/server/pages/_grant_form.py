"""The review page's "approve, and allow for..." (SPEC rule 16): which calls may grant, and the form.

A call's approval may carry a grant where its review may give one (``handrail.review.grants``
G1): a review of a call (not an ``outcome_unknown`` question) that does not count
approvals (rule 14), a tool whose policy was grantable when the review was asked (the
review's ``terms``), and a call whose policy allows approval. Only there does the page
offer the choice; the library checks the answer again, as through every channel.

With Approve chosen for call ``i``, a box "And allow later calls for..." (``g:i:on=true``)
makes the approval carry a grant, with ``g:i:scope`` (``thread`` or ``agent``),
``g:i:for`` (``900``, ``3600``, ``28800`` seconds, or ``calls``), ``g:i:uses`` (with
``calls``: how many) and ``g:i:exact`` (``true``: only calls with the arguments approved).
:func:`read_grant` makes the ``grant`` of the approval from them, or says what is missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from handrail.review.grants import MAX_GRANT_USES
from handrail.review.terms import needs_count, terms_of
from handrail.runtime.inbox import PendingInterrupt
from handrail.server.pages._shape import ReviewShape

__all__ = ["DURATIONS", "grant_asked", "grant_words", "grantable_calls", "read_grant"]
DURATIONS = {"900": "15 minutes", "3600": "1 hour", "28800": "8 hours"}
"""How long a grant from the page lasts: seconds -> words (or a number of calls)."""


def grantable_calls(item: PendingInterrupt | None, shape: ReviewShape) -> frozenset[int]:
    """The calls of a pending review whose approval may carry a grant (by index)."""
    if item is None or item.kind != "interrupt" or shape.kind not in ("batched", "per_call"):
        return frozenset()
    if needs_count(item.terms):  # one reviewer may not stand in for several (rule 14)
        return frozenset()
    return frozenset(
        c.index
        for c in shape.calls
        if "approve" in c.allowed and c.tool_call_id and terms_of(item.terms, c.tool_call_id).grantable
    )


def _last(form: Mapping[str, list[str]], name: str) -> str:
    return (form.get(name) or [""])[-1]


def grant_asked(form: Mapping[str, list[str]], index: int) -> bool:
    """Whether call ``index``'s "And allow later calls for..." box is ticked."""
    return _last(form, f"g:{index}:on") == "true"


def read_grant(
    form: Mapping[str, list[str]], index: int, where: str
) -> tuple[dict[str, Any] | None, list[str], dict[str, str]]:
    """The grant call ``index``'s fields ask for, the problems with them, and what was typed."""
    kept = {
        "on": _last(form, f"g:{index}:on"),
        "scope": _last(form, f"g:{index}:scope"),
        "for": _last(form, f"g:{index}:for"),
        "uses": _last(form, f"g:{index}:uses").strip(),
        "exact": _last(form, f"g:{index}:exact"),
    }
    problems = []
    grant: dict[str, Any] = {}
    if kept["scope"] in ("thread", "agent"):
        grant["scope"] = kept["scope"]
    else:
        problems.append(f"{where}: choose where the grant applies (this thread or this agent).")
    if kept["for"] in DURATIONS:
        grant["ttl"] = float(kept["for"])
    elif kept["for"] == "calls":
        uses = int(kept["uses"]) if kept["uses"].isascii() and kept["uses"].isdigit() else 0
        if 1 <= uses <= MAX_GRANT_USES:
            grant["uses"] = uses
        else:
            problems.append(f"{where}: enter how many calls the grant covers (1 to {MAX_GRANT_USES:,}).")
    else:
        problems.append(f"{where}: choose how long the grant lasts, or for how many calls.")
    if kept["exact"] == "true":
        grant["args"] = "exact"
    return (None if problems else grant), problems, kept


def grant_words(grant: Any) -> str | None:
    """What a grant in an answer covers, in words: ``later calls on this thread, with any
    arguments, for 1 hour`` (None when the decision carries none)."""
    if not isinstance(grant, Mapping):
        return None
    where = "on every thread of this agent" if grant.get("scope") == "agent" else "on this thread"
    which = "with exactly these arguments" if grant.get("args") == "exact" else "with any arguments"
    bounds = []
    ttl, uses = grant.get("ttl"), grant.get("uses")
    if isinstance(ttl, (int, float)):
        bounds.append(f"for {DURATIONS.get(str(int(ttl)), _span(float(ttl)))}")
    if isinstance(uses, int):
        bounds.append(f"for {uses} call{'' if uses == 1 else 's'}")
    return f"later calls {where}, {which}, {' or '.join(bounds)}"


def _span(seconds: float) -> str:
    left = int(seconds)
    for size, unit in ((86400, "day"), (3600, "hour"), (60, "minute")):
        if left >= size and left % size == 0:
            count = left // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{left} seconds"
