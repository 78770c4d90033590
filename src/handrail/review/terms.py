"""The terms a review is asked under, fixed when it is asked (SPEC rules 13-16, §5.4).

The gate saves them with the review, in its ``interrupt`` event's ``terms``, so a
review keeps them whatever happens to the policy after (a redeploy, a reloaded policy
file): the approvals it needs, whether the run's starter may approve, when it expires
and what its expiry decides, whether an approval may carry a grant. Only what differs
from the defaults is saved; a review without ``terms`` (and every review saved before
them) has the defaults::

    {"expires_after": 3600.0,                              # seconds after the request
     "calls": {"call_1": {"approvals": 2, "self_approval": false,
                          "on_expiry": "approve", "grantable": false}}}

Who may decide (``reviewers``) is not a term: it is checked against the policy in force
when an answer arrives and again when the call runs, so a narrowed role list applies at
once (a policy is never weaker than it reads).

A batched review (one per model turn) expires when the first of its calls' expiry
lapses; each of its calls then resolves by its own ``on_expiry`` (``"reject"`` for a
call whose policy sets no expiry).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from handrail.errors import ConfigurationError, short_repr

if TYPE_CHECKING:
    from handrail.review.policy import Policies


__all__ = [
    "DEFAULT_TERMS",
    "MAX_APPROVALS",
    "MAX_EXPIRY",
    "CallTerms",
    "calls_asked",
    "expires_at",
    "needs_count",
    "parse_terms",
    "terms_for",
    "terms_of",
]


class CallTerms(NamedTuple):
    """What one call's review needs: ``approvals`` from different reviewers (rule 14),
    whether the run's starter may approve or edit it (``self_approval``, rule 13), what
    an expiry decides (``on_expiry``, rule 15), whether an approval may grant (rule 16)."""

    approvals: int = 1
    self_approval: bool = True
    on_expiry: str = "reject"
    grantable: bool = True


DEFAULT_TERMS = CallTerms()


def calls_asked(value: Any) -> Iterator[tuple[str, str, Any]]:
    """``(call id, tool, args)`` of each call a gate's review asks about, in order."""
    if not isinstance(value, Mapping):
        return
    requests = value.get("action_requests")
    if isinstance(requests, list):
        for request in requests:
            if isinstance(request, Mapping) and isinstance(request.get("tool_call_id"), str):
                yield str(request["tool_call_id"]), str(request.get("name")), request.get("args")
    elif isinstance(value.get("tool_call_id"), str):
        yield str(value["tool_call_id"]), str(value.get("name")), value.get("args")


def terms_for(policies: Policies, value: Any) -> dict[str, Any] | None:
    """The terms to save with a review of ``value`` under ``policies`` (None: all default)."""
    calls: dict[str, dict[str, Any]] = {}
    expiry: float | None = None
    for call_id, name, _ in calls_asked(value):
        policy = policies.by_tool.get(name)
        if policy is None:
            continue
        mine: dict[str, Any] = {}
        if policy.required_approvals != 1:
            mine["approvals"] = policy.required_approvals
        if not policy.allow_self_approval:
            mine["self_approval"] = False
        if policy.expires_after is not None:
            expiry = policy.expires_after if expiry is None else min(expiry, policy.expires_after)
            if policy.on_expiry != "reject":
                mine["on_expiry"] = policy.on_expiry
        if not policy.grantable:
            mine["grantable"] = False
        if mine:
            calls[call_id] = mine
    if not calls and expiry is None:
        return None
    out: dict[str, Any] = {}
    if expiry is not None:
        out["expires_after"] = expiry
    if calls:
        out["calls"] = calls
    return out


def terms_of(terms: Any, call_id: str) -> CallTerms:
    """The terms of one call, from a review's saved ``terms`` (the defaults when absent)."""
    if not isinstance(terms, Mapping):
        return DEFAULT_TERMS
    calls = terms.get("calls")
    mine = calls.get(call_id) if isinstance(calls, Mapping) else None
    if not isinstance(mine, Mapping):
        return DEFAULT_TERMS
    approvals = mine.get("approvals", 1)
    return CallTerms(
        approvals=max(1, approvals) if isinstance(approvals, int) and not isinstance(approvals, bool) else 1,
        self_approval=mine.get("self_approval", True) is not False,
        on_expiry="approve" if mine.get("on_expiry") == "approve" else "reject",
        grantable=mine.get("grantable", True) is not False,
    )


def needs_count(terms: Any) -> bool:
    """Whether a review with these terms counts approvals (some call needs more than one)."""
    if not isinstance(terms, Mapping) or not isinstance(terms.get("calls"), Mapping):
        return False
    return any(
        isinstance(mine, Mapping) and isinstance(mine.get("approvals"), int) and mine["approvals"] > 1
        for mine in terms["calls"].values()
    )


def expires_at(terms: Any, asked_at: float) -> float | None:
    """When a review asked at ``asked_at`` (seconds since the epoch) expires, or None."""
    if not isinstance(terms, Mapping):
        return None
    after = terms.get("expires_after")
    if isinstance(after, bool) or not isinstance(after, (int, float)):
        return None
    return asked_at + float(after)


# Reading the keys of rules 13-16 from a policy (``policy.parse_policy``) -----------------------
MAX_APPROVALS = 100
"""The most approvals a policy may require (a larger number is a typo, not a quorum)."""
MAX_EXPIRY = 366 * 24 * 3600.0
"""The longest ``expires_after`` (a year and a day): longer is a unit mistake."""


def parse_terms(tool_name: str, config: Mapping[str, Any], allowed: tuple[str, ...]) -> dict[str, Any]:
    """The keys of rules 13-16, checked: a value that cannot be read is an error, never a default."""
    where = f"interrupt_on[{tool_name!r}]"
    out: dict[str, Any] = {}
    for key in ("allow_self_approval", "grantable"):
        if key in config:
            if not isinstance(config[key], bool):
                raise ConfigurationError(
                    f"{where} {key} must be True or False, got {short_repr(config[key])}"
                )
            out[key] = config[key]
    if "required_approvals" in config:
        count = config["required_approvals"]
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_APPROVALS:
            raise ConfigurationError(
                f"{where} required_approvals must be a whole number from 1 to {MAX_APPROVALS} (how many "
                f"different reviewers must approve), got {short_repr(count)}"
            )
        if count > 1 and "approve" not in allowed and "edit" not in allowed:
            raise ConfigurationError(
                f"{where} required_approvals={count} counts approvals, but allowed_decisions "
                f"{list(allowed)} allow neither 'approve' nor 'edit'"
            )
        out["required_approvals"] = count
    if "expires_after" in config:
        out["expires_after"] = _seconds(where, config["expires_after"])
    if "on_expiry" in config:
        if config["on_expiry"] not in ("reject", "approve"):
            raise ConfigurationError(
                f"{where} on_expiry must be 'reject' or 'approve', got {short_repr(config['on_expiry'])}"
            )
        if "expires_after" not in config:
            raise ConfigurationError(f"{where} on_expiry needs expires_after: when the review expires")
        out["on_expiry"] = config["on_expiry"]
    return out


def _seconds(where: str, value: Any) -> float:
    """``expires_after`` in seconds: a positive number or ``timedelta``, at most a year and a day."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not math.isfinite(seconds)
        or not 0 < seconds <= MAX_EXPIRY
    ):
        raise ConfigurationError(
            f"{where} expires_after must be a number of seconds or a timedelta, more than 0 and at "
            f"most {int(MAX_EXPIRY)} (a year and a day), got {short_repr(value)}"
        )
    return float(seconds)
