"""Where a call would pause, whether a grant lets it run instead (SPEC rule 16).

Asked only at the moment a review would be raised - a batched review of a model turn
(:func:`uncovered`) or a call of the tools step with no answer (:func:`covering`) - so a
run that pauses for nothing reads no grants. The grants in force that may cover a call on
this thread are read from the store; which one covers it is the gate's
(``handrail.review.grants.covering``). A call's use is spent (:func:`spend`: the store's
``spend_grants``, atomic) before the call is planned, and its plan (``tools_planned``)
names the grant; when the grant is gone by then (revoked, lapsed, its last use taken by
another call: ``GrantSpentError``), the next grant in force is tried, and with none left
the call is asked about like any other.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

from handrail.checkpoint.grants import GrantFilter, GrantRecord
from handrail.context import PauseSignal
from handrail.errors import GrantSpentError
from handrail.messages import ToolCall
from handrail.review.grants import covering as grant_covering
from handrail.runtime import answering
from handrail.runtime._fold import ThreadFold
from handrail.runtime.effects import Effect, Env, StoreCall

__all__ = ["covering", "spend", "uncovered"]

Gen = Generator[Effect, Any, Any]


def _in_force(env: Env, fold: ThreadFold, at: float) -> Gen:
    """The grants in force that may cover a call on this thread (none when the store keeps none)."""
    agent = str(fold.metadata.get("assistant_id") or env.spec.name or "")
    found = GrantFilter(agent=agent, covering=env.thread_id, active_at=at, limit=1000)
    try:
        grants: list[GrantRecord] = yield StoreCall("list_grants", (found,))
    except NotImplementedError:
        return []
    return grants


def _may_be_granted(env: Env, name: str) -> bool:
    """Whether any grant could cover a call to ``name`` under the policy in force (when none
    could, no grant is read)."""
    policy = env.spec.policies.by_tool.get(name)
    return policy is not None and policy.grantable and policy.required_approvals == 1


def covering(env: Env, fold: ThreadFold, call: ToolCall) -> Gen:
    """The grant that lets ``call`` run now without a pause, or None."""
    if not _may_be_granted(env, str(call["name"])):
        return None
    at = answering.now()
    grants = yield from _in_force(env, fold, at)
    if not grants:
        return None
    return grant_covering(grants, call, env.thread_id, env.spec.policies, fold.started_by, at)


def spend(env: Env, fold: ThreadFold, call: ToolCall) -> Gen:
    """Spend a use of the grant that covers ``call`` and return it, or None: ask a person."""
    for _ in range(_TRIES):
        grant = yield from covering(env, fold, call)
        if grant is None:
            return None
        try:
            yield StoreCall(
                "spend_grants", ([grant.grant_id],), {"thread_id": env.thread_id, "at": answering.now()}
            )
        except GrantSpentError:
            continue  # gone meanwhile: read again
        return grant
    return None


_TRIES = 3


def uncovered(env: Env, fold: ThreadFold, signal: PauseSignal) -> Gen:
    """The pause to raise for a batched review once the calls grants cover are left out:
    ``signal`` as it was, a smaller review, or None when grants cover every call."""
    value = signal.value
    policies = env.spec.policies
    if signal.source is None or signal.source != policies.source or not isinstance(value, Mapping):
        return signal
    requests, configs = value.get("action_requests"), value.get("review_configs")
    if not isinstance(requests, list) or not isinstance(configs, list) or len(requests) != len(configs):
        return signal
    if not any(isinstance(r, Mapping) and _may_be_granted(env, str(r.get("name"))) for r in requests):
        return signal
    at = answering.now()
    grants = yield from _in_force(env, fold, at)
    if not grants:
        return signal
    kept = [
        (request, config)
        for request, config in zip(requests, configs, strict=True)
        if grant_covering(grants, _call(request), env.thread_id, policies, fold.started_by, at) is None
    ]
    if len(kept) == len(requests):
        return signal
    if not kept:
        return None
    smaller = {**value, "action_requests": [r for r, _ in kept], "review_configs": [c for _, c in kept]}
    return PauseSignal(smaller, signal.index, signal.source)


def _call(request: Any) -> ToolCall:
    return ToolCall(
        name=str(request.get("name")),
        args=request.get("args") if isinstance(request.get("args"), dict) else {},
        id=str(request.get("tool_call_id")),
        type="tool_call",
    )
