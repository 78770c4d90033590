"""Who may answer a review (SPEC rule 12): the one authorization function.

A review asks about the tools its value names: each action request of a batched
``HITLRequest``, the ``name`` of a per-call or ``outcome_unknown`` request. A reviewer
may answer it when, for every named tool whose policy has ``reviewers``, they hold at
least one of those roles. A policy without ``reviewers`` lets anyone answer (the
application decides who gets to call). An answer that names no reviewer, or a reviewer
given as a bare string (no roles), is refused for a review limited to roles: deny is
the default. Interrupts of other shapes (an ``interrupt()`` of your own) name no tool
and are open to any caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from handrail.errors import NotAllowedError
from handrail.review.policy import Policies

__all__ = [
    "authorize",
    "may_answer",
    "refusal",
    "reviewer_id",
    "reviewer_roles",
    "roles_required",
    "tool_refusal",
    "tools_asked",
]


def tools_asked(value: Any) -> list[str]:
    """The tool names an interrupt value asks a reviewer about (empty for custom values)."""
    if not isinstance(value, Mapping):
        return []
    requests = value.get("action_requests")
    if isinstance(requests, list):
        return [str(r["name"]) for r in requests if isinstance(r, Mapping) and isinstance(r.get("name"), str)]
    if value.get("type") in ("tool_approval", "outcome_unknown") and isinstance(value.get("name"), str):
        return [value["name"]]
    return []


def roles_required(policies: Policies, value: Any) -> list[tuple[str, tuple[str, ...]]]:
    """``(tool, roles)`` for each tool the value asks about whose policy limits reviewers."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for tool in dict.fromkeys(tools_asked(value)):
        policy = policies.by_tool.get(tool)
        if policy is not None and policy.reviewers is not None:
            out.append((tool, policy.reviewers))
    return out


def reviewer_id(reviewer: Any) -> str | None:
    """The id of a reviewer given as a string or ``{"id", "roles"}``."""
    if isinstance(reviewer, str):
        return reviewer
    if isinstance(reviewer, Mapping) and isinstance(reviewer.get("id"), str):
        return str(reviewer["id"])
    return None


def reviewer_roles(reviewer: Any) -> frozenset[str]:
    """The roles of a reviewer (none for a bare string id)."""
    if isinstance(reviewer, Mapping):
        roles = reviewer.get("roles")
        if isinstance(roles, (list, tuple, set, frozenset)):
            return frozenset(str(r) for r in roles)
    return frozenset()


def tool_refusal(policies: Policies, tool: str, reviewer: Any) -> str | None:
    """Why ``reviewer`` may not decide a call to ``tool``, or None if they may."""
    policy = policies.by_tool.get(tool)
    if policy is None or policy.reviewers is None:
        return None
    held = reviewer_roles(reviewer)
    if not held.isdisjoint(policy.reviewers):
        return None
    who = reviewer_id(reviewer)
    if who is None:
        return (
            f"tool {tool!r} is reviewed by role {_or(policy.reviewers)} only, and the answer names no "
            "reviewer: pass config['configurable']['reviewer'] = {'id': ..., 'roles': [...]}"
        )
    return (
        f"reviewer {who!r} (roles: {sorted(held) or 'none'}) may not decide tool {tool!r}: "
        f"it needs role {_or(policy.reviewers)}"
    )


def refusal(policies: Policies, value: Any, reviewer: Any) -> str | None:
    """Why ``reviewer`` may not answer an interrupt with this value, or None if they may."""
    for tool in dict.fromkeys(tools_asked(value)):
        reason = tool_refusal(policies, tool, reviewer)
        if reason is not None:
            return reason
    return None


def may_answer(policies: Policies, value: Any, reviewer: Any) -> bool:
    """Whether ``reviewer`` may answer an interrupt with this value (every channel, the inbox)."""
    return refusal(policies, value, reviewer) is None


def authorize(policies: Policies, interrupt_id: str, value: Any, reviewer: Any) -> None:
    """Raise :class:`~handrail.errors.NotAllowedError` unless ``reviewer`` may answer."""
    reason = refusal(policies, value, reviewer)
    if reason is not None:
        raise not_allowed(policies, interrupt_id, reason, reviewer, tools_asked(value))


def not_allowed(
    policies: Policies, interrupt_id: str, reason: str, reviewer: Any, tools: list[str]
) -> NotAllowedError:
    """The refusal of rule 12, naming the review, who tried and the roles that may decide."""
    roles = {r for tool in tools for r in (getattr(policies.by_tool.get(tool), "reviewers", None) or ())}
    return NotAllowedError(
        f"interrupt {interrupt_id}: {reason}; nothing was saved",
        interrupt_id=interrupt_id,
        reviewer=reviewer_id(reviewer),
        roles=tuple(sorted(roles)),
    )


def _or(roles: tuple[str, ...]) -> str:
    quoted = [repr(r) for r in roles]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
