"""Grants (SPEC rule 16): an approval that lets later calls of a tool run without a pause.

An approval may carry ``"grant": {"scope": "thread" | "agent", "args": "exact" | None,
"ttl": seconds, "uses": n}`` (at least one of ``ttl`` and ``uses``). The rules this module
keeps, with the store keeping the records and spending uses (``checkpoint/grants.py``):

G1 - Only an approval grants: a reject, a respond, an edit, an expiry and a bulk answer
    never do (:func:`check_grant` is the only way a decision holds one; the bulk page and
    the expiry never write one). A review that counts approvals (rule 14) grants nothing:
    one reviewer may not stand in for several. A tool whose policy has
    ``grantable: False`` (in the terms the review was asked under) grants nothing.
G2 - A grant is born with the answer that carries it: its ``resume`` event lists it
    (:func:`grants_given`) and the store keeps its record from the same append
    (:func:`records_from`), named by the answer (thread, interrupt, call); it covers the
    tool of the call approved, on its thread or every thread of its agent, with the
    arguments approved when ``args`` is ``"exact"``.
G3 - A grant never covers more than its giver may decide now (:func:`covering`, asked
    where the call would pause): the giver must hold the tool's ``reviewers`` roles under
    the policy in force, the policy must still allow grants and count one approval, and
    where self-approval is off the giver must not be the one who started the run.
G4 - A covered call runs without a pause; its plan (``tools_planned``) spends one use
    in the same commit, and its start names the grant and its giver for the audit. A
    revoked, lapsed or spent grant covers no call that starts after: the commit is
    refused (``GrantSpentError``) and the run asks a person instead.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

from handrail.checkpoint.grants import GrantRecord
from handrail.errors import InvalidDecisionError, short_repr
from handrail.messages import ToolCall
from handrail.review._outcome import call_digest
from handrail.review._who import reviewer_id, tool_refusal
from handrail.review.policy import Policies
from handrail.review.quorum import decisions_of
from handrail.review.terms import calls_asked

__all__ = [
    "GRANT_KEYS",
    "MAX_GRANT_TTL",
    "MAX_GRANT_USES",
    "check_grant",
    "covering",
    "grant_id",
    "grants_given",
    "records_from",
]

GRANT_KEYS = frozenset({"scope", "args", "ttl", "uses"})
MAX_GRANT_TTL = 366 * 24 * 3600.0
"""The longest a grant may last (a year and a day)."""
MAX_GRANT_USES = 1_000_000
"""The most calls a grant may cover."""


def check_grant(raw: Any, label: str) -> dict[str, Any]:
    """A grant as an approval carries it, checked and in canonical form (rule 5):
    ``{"scope", "args", "ttl", "uses"}`` with every key present."""
    where = f"{label} (approve) grant"
    if not isinstance(raw, Mapping):
        raise InvalidDecisionError(
            f"{where} must be an object like {{'scope': 'thread', 'ttl': 3600}}, got {short_repr(raw)}"
        )
    unknown = sorted(str(key) for key in set(raw) - GRANT_KEYS)
    if unknown:
        raise InvalidDecisionError(
            f"{where} has unexpected key(s) {short_repr(unknown)}; it takes {sorted(GRANT_KEYS)}"
        )
    scope = raw.get("scope", "thread")
    if scope not in ("thread", "agent"):
        raise InvalidDecisionError(f"{where} scope must be 'thread' or 'agent', got {short_repr(scope)}")
    args = raw.get("args")
    if args not in (None, "exact"):
        raise InvalidDecisionError(f"{where} args must be 'exact' or null, got {short_repr(args)}")
    ttl, uses = raw.get("ttl"), raw.get("uses")
    if ttl is None and uses is None:
        raise InvalidDecisionError(
            f"{where} needs 'ttl' (seconds), 'uses' (a number of calls) or both: a grant without "
            "either would never end"
        )
    number = isinstance(ttl, (int, float)) and not isinstance(ttl, bool)
    if ttl is not None and not (number and math.isfinite(ttl) and 0 < ttl <= MAX_GRANT_TTL):
        raise InvalidDecisionError(
            f"{where} ttl must be a number of seconds above 0 and at most {int(MAX_GRANT_TTL)}, "
            f"got {short_repr(ttl)}"
        )
    whole = isinstance(uses, int) and not isinstance(uses, bool)
    if uses is not None and not (whole and 1 <= uses <= MAX_GRANT_USES):
        raise InvalidDecisionError(
            f"{where} uses must be a whole number from 1 to {MAX_GRANT_USES}, got {short_repr(uses)}"
        )
    return {"scope": scope, "args": args, "ttl": float(ttl) if ttl is not None else None, "uses": uses}


def grant_id(thread_id: str, interrupt_id: str, call_id: str) -> str:
    """The id of the grant an approval of ``call_id`` gave (32 hex digits)."""
    raw = f"{thread_id}\x00{interrupt_id}\x00{call_id}".encode()
    return hashlib.sha256(raw).hexdigest()[:32]


def grants_given(thread_id: str, interrupt_id: str, value: Any, answer: Any) -> list[dict[str, Any]]:
    """What the grants one answer gives hold (rule G2), for its ``resume`` event: one per
    approval that carries a grant, each named by the answer (:func:`grant_id`)."""
    out = []
    for (call_id, name, args), decision in zip(calls_asked(value), decisions_of(value, answer), strict=False):
        if not isinstance(decision, Mapping) or decision.get("type") != "approve":
            continue
        grant = decision.get("grant")
        if not isinstance(grant, Mapping):
            continue
        exact = grant.get("args") == "exact"
        out.append(
            {
                "id": grant_id(thread_id, interrupt_id, call_id),
                "interrupt_id": interrupt_id,
                "tool_call_id": call_id,
                "tool": name,
                "scope": "agent" if grant.get("scope") == "agent" else "thread",
                "args_digest": call_digest(name, args) if exact else None,
                "args": args if exact else None,
                "ttl": grant.get("ttl"),
                "uses": grant.get("uses"),
            }
        )
    return out


def records_from(thread_id: str, agent: str, given: Any, reviewer: Any, at: float) -> list[GrantRecord]:
    """The records of the grants a ``resume`` event gives (its ``grants``), given at ``at``."""
    out = []
    for item in given if isinstance(given, list) else ():
        ttl, uses = item.get("ttl"), item.get("uses")
        out.append(
            GrantRecord(
                grant_id=str(item["id"]),
                agent=agent,
                tool=str(item["tool"]),
                scope="agent" if item.get("scope") == "agent" else "thread",
                thread_id=thread_id,
                args_digest=item.get("args_digest"),
                args=item.get("args"),
                expires_at=at + float(ttl) if isinstance(ttl, (int, float)) else None,
                uses=uses if isinstance(uses, int) else None,
                used=0,
                given_by=reviewer,
                given_at=at,
                interrupt_id=str(item["interrupt_id"]),
                tool_call_id=str(item["tool_call_id"]),
            )
        )
    return out


def covering(
    grants: Sequence[GrantRecord],
    call: ToolCall,
    thread_id: str,
    policies: Policies,
    starter: str | None,
    at: float,
) -> GrantRecord | None:
    """The grant that lets ``call`` run now without a pause, or None (rule G3); the one
    with the fewest uses left first, then the one that lapses first."""
    name = str(call["name"])
    policy = policies.by_tool.get(name)
    if policy is None or not policy.grantable or policy.required_approvals != 1:
        return None
    digest: str | None = None
    usable = []
    for grant in grants:
        if grant.tool != name or not grant.in_force(at):
            continue
        if grant.scope == "thread" and grant.thread_id != thread_id:
            continue
        if grant.args_digest is not None:
            digest = digest or call_digest(name, call["args"])
            if grant.args_digest != digest:
                continue
        if tool_refusal(policies, name, grant.given_by) is not None:
            continue
        giver = reviewer_id(grant.given_by)
        if giver is None or (not policy.allow_self_approval and giver == starter):
            continue
        usable.append(grant)
    if not usable:
        return None
    return min(
        usable,
        key=lambda g: (
            g.uses_left if g.uses_left is not None else math.inf,
            g.expires_at if g.expires_at is not None else math.inf,
            g.grant_id,
        ),
    )
