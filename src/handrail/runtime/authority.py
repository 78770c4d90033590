"""Who may answer a review: the one authorization function (SPEC rule 12).

Theory of operation
-------------------
A tool's review policy may name ``reviewers``: the roles that may decide its calls
(``interrupt_on={"execute_sql": {"allowed_decisions": [...], "reviewers": ["dba"]}}``).
Every channel that lets an answer in asks :func:`refusal` the same question - may this
reviewer answer this interrupt? - from what the interrupt asks and the agent's
policies:

* the Python API, when a resume or :meth:`~handrail.Agent.decide` reaches
  ``rules.start_events`` (before anything is saved);
* the inbox, which lists for a reviewer only what :func:`refusal` lets them decide;
* the service and the CLI, which go through the two above.

An interrupt asks about the tools its value names: each action request of a batched
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
from typing import TYPE_CHECKING, Any

from handrail.errors import NotAllowedError

if TYPE_CHECKING:
    from handrail.runtime.spec import AgentSpec

__all__ = ["authorize", "refusal", "reviewer_id", "reviewer_roles", "roles_required", "tools_asked"]


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


def roles_required(spec: AgentSpec, value: Any) -> list[tuple[str, tuple[str, ...]]]:
    """``(tool, roles)`` for each tool the value asks about whose policy limits reviewers."""
    from handrail.middleware.human_in_the_loop import HumanInTheLoopMiddleware

    out: list[tuple[str, tuple[str, ...]]] = []
    for tool in dict.fromkeys(tools_asked(value)):
        for middleware in spec.middleware:
            if isinstance(middleware, HumanInTheLoopMiddleware):
                policy = middleware.policies.get(tool)
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
        return frozenset(str(r) for r in reviewer.get("roles") or ())
    return frozenset()


def refusal(spec: AgentSpec, value: Any, reviewer: Any) -> str | None:
    """Why ``reviewer`` may not answer an interrupt with this value, or None if they may."""
    required = roles_required(spec, value)
    if not required:
        return None
    held = reviewer_roles(reviewer)
    who = reviewer_id(reviewer)
    for tool, roles in required:
        if held.isdisjoint(roles):
            if who is None:
                return (
                    f"tool {tool!r} is reviewed by role {_or(roles)} only, and the answer names no "
                    "reviewer: pass config['configurable']['reviewer'] = {'id': ..., 'roles': [...]}"
                )
            return (
                f"reviewer {who!r} (roles: {sorted(held) or 'none'}) may not decide tool {tool!r}: "
                f"it needs role {_or(roles)}"
            )
    return None


def authorize(spec: AgentSpec, interrupt_id: str, value: Any, reviewer: Any) -> None:
    """Raise :class:`~handrail.errors.NotAllowedError` unless ``reviewer`` may answer."""
    reason = refusal(spec, value, reviewer)
    if reason is not None:
        roles = tuple(sorted({r for _, roles in roles_required(spec, value) for r in roles}))
        raise NotAllowedError(
            f"interrupt {interrupt_id}: {reason}; nothing was saved",
            interrupt_id=interrupt_id,
            reviewer=reviewer_id(reviewer),
            roles=roles,
        )


def _or(roles: tuple[str, ...]) -> str:
    quoted = [repr(r) for r in roles]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
