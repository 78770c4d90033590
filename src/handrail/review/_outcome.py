"""What one tool call may do now, read from the answers in the log (SPEC rules 9, 19, 20).

An answer event (``resume``) is bound, call by call, to what its reviewer saw: the call
id and a digest of the tool and arguments (:func:`answers_from`). The fold keeps the
answers given on its branch that no ``tool_started`` has used yet; :func:`call_outcome`
reads them for every call the tools step is about to run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import orjson

from handrail.messages import ToolCall, ToolMessage
from handrail.review._answers import is_canonical
from handrail.review._who import reviewer_id, tool_refusal
from handrail.review.policy import DECISION_SOURCE, Policies, Policy, reject_message
from handrail.review.terms import DEFAULT_TERMS, CallTerms, terms_of

__all__ = [
    "Answer",
    "Ask",
    "Outcome",
    "Result",
    "Run",
    "answers_from",
    "call_digest",
    "call_outcome",
    "expired_message",
    "withdrawn_message",
]


def call_digest(name: str, args: Any) -> str:
    """A digest of a tool and its arguments, exact to the JSON value (``1``, ``1.0`` and
    ``true`` differ; key order does not)."""
    raw = orjson.dumps([name, args], option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=repr)
    return hashlib.sha256(raw).hexdigest()[:32]


class Answer(NamedTuple):
    """An answer in the log, bound to the one tool call it decides.

    ``kind`` is ``"review"`` (an answer to the gate's review of the call),
    ``"outcome_unknown"`` (an answer to rule 9's question), ``"expired"`` (the
    review's expiry decided it, rule 15) or ``"withdrawn"`` (its asker took it back);
    ``source`` names who raised the review;
    ``digest`` is :func:`call_digest` of the call the reviewer saw; ``action``, for
    ``outcome_unknown``, is the call as it was started (what ``approve`` runs again);
    ``terms`` the call's review terms when not the defaults (``CallTerms`` as a dict);
    ``approvers`` who approved the action, for a review that counted approvals (rule 14).
    """

    call_id: str
    interrupt_id: str
    kind: str
    source: str | None
    digest: str
    decision: dict[str, Any]
    reviewer: Any
    seq: int
    action: dict[str, Any] | None = None
    terms: dict[str, Any] | None = None
    approvers: list[Any] | None = None

    @property
    def call_terms(self) -> CallTerms:
        """The terms the call's review was asked under."""
        return CallTerms(**self.terms) if self.terms else DEFAULT_TERMS


def answers_from(
    interrupt_id: str,
    kind: str,
    source: str | None,
    value: Any,
    answer: Any,
    reviewer: Any,
    seq: int,
    *,
    terms: Any = None,
    approvers: Mapping[str, tuple[Any, ...]] | None = None,
    expired: frozenset[str] = frozenset(),
    withdrawn: bool = False,
) -> list[Answer]:
    """The answers one ``resume`` event gives to tool calls: one per call the review asked
    about. A review of another shape (an ``interrupt()`` of your own) decides no call.

    ``terms``: the review's; ``approvers``: who approved each call, for a review that
    counted approvals; ``expired``: the calls the review's expiry decided; ``withdrawn``:
    the asker took the review back (``runtime.answering.Withdrawal``).
    """
    out = _bound(interrupt_id, kind, source, value, answer, reviewer, seq)
    if withdrawn:
        out = [bound._replace(kind="withdrawn") if bound.kind == "review" else bound for bound in out]
    if terms is None and approvers is None and not expired:
        return out
    return [
        bound._replace(
            kind="expired" if bound.call_id in expired and bound.kind == "review" else bound.kind,
            terms=_terms_dict(terms_of(terms, bound.call_id)),
            approvers=list(approvers.get(bound.call_id, ())) if approvers is not None else None,
        )
        for bound in out
    ]


def _terms_dict(terms: CallTerms) -> dict[str, Any] | None:
    return None if terms == DEFAULT_TERMS else terms._asdict()


def _bound(
    interrupt_id: str, kind: str, source: str | None, value: Any, answer: Any, reviewer: Any, seq: int
) -> list[Answer]:
    if not isinstance(value, Mapping):
        return []
    if kind == "outcome_unknown" or value.get("type") == "tool_approval":
        decision = answer
        if isinstance(answer, Mapping) and "decisions" in answer and "type" not in answer:
            listed = answer["decisions"]
            decision = listed[0] if isinstance(listed, list) and len(listed) == 1 else None
        call_id, name, args = value.get("tool_call_id"), value.get("name"), value.get("args")
        if not (isinstance(call_id, str) and isinstance(name, str) and isinstance(decision, dict)):
            return []
        bound = "outcome_unknown" if kind == "outcome_unknown" else "review"
        action = {"name": name, "args": args} if bound == "outcome_unknown" else None
        return [
            Answer(
                call_id, interrupt_id, bound, source, call_digest(name, args), decision, reviewer, seq, action
            )
        ]
    requests = value.get("action_requests")
    decisions = answer.get("decisions") if isinstance(answer, Mapping) else None
    if not isinstance(requests, list) or not isinstance(decisions, list) or len(requests) != len(decisions):
        return []
    out = []
    for request, decision in zip(requests, decisions, strict=True):
        if not isinstance(request, Mapping) or not isinstance(decision, dict):
            continue
        call_id, name = request.get("tool_call_id"), request.get("name")
        if isinstance(call_id, str) and isinstance(name, str):
            digest = call_digest(name, request.get("args"))
            out.append(Answer(call_id, interrupt_id, "review", source, digest, decision, reviewer, seq))
    return out


class Run(NamedTuple):
    """Run ``call`` (the edited action, for an edit: ``edited`` is then True); ``grant``:
    ``{"id", "given_by"}`` of the grant that lets it run without a pause (rule 16)."""

    call: ToolCall
    edited: bool = False
    grant: dict[str, Any] | None = None


class Result(NamedTuple):
    """Do not run the call: ``message`` is its result."""

    message: ToolMessage


class Ask(NamedTuple):
    """No answer in the log authorizes the call: a reviewer must be asked under ``policy``."""

    policy: Policy


Outcome = Run | Result | Ask


def call_outcome(
    policies: Policies,
    tools: Mapping[str, Any],
    call: ToolCall,
    *,
    answer: Answer | None,
    used: Answer | None = None,
    started: tuple[str, Any] | None = None,
    idempotent: bool = False,
    starter: str | None = None,
    request: Callable[[], Any],
) -> Outcome:
    """What ``call`` may do now (rules 9, 19 and 20).

    ``answer`` is the unused answer to this call on this branch, if any; ``used`` the
    answer a start of the call used, and ``started`` the ``(name, args)`` of that start,
    when it never finished; ``starter`` is the id of who started the run (rule 13);
    ``request`` builds the ``ToolCallRequest`` that a policy's ``when`` reads. A call to a
    tool the agent does not have never runs.
    """
    name = call["name"]
    if name not in tools:
        return Result(
            ToolMessage(
                f"Error: {name!r} is not a valid tool; try one of {sorted(tools)}.",
                tool_call_id=str(call["id"]),
                name=name,
                status="error",
            )
        )
    if answer is not None:
        outcome = _answered(policies, tools, call, answer, started, starter)
        if outcome is not None:
            return outcome
    if used is not None and started is not None and idempotent and _trusted(policies, used):
        # rule 9: an idempotent call that died mid-run runs again under the answer its start used
        return _run_started(call, started)
    policy = policies.gates(name, request)
    return Run(call) if policy is None else Ask(policy)


def _trusted(policies: Policies, answer: Answer) -> bool:
    """Whether ``answer`` answers a review the gate raised (rule 9's included)."""
    return answer.kind == "outcome_unknown" or (
        answer.source is not None and answer.source == policies.source
    )


def _answered(
    policies: Policies,
    tools: Mapping[str, Any],
    call: ToolCall,
    answer: Answer,
    started: tuple[str, Any] | None,
    starter: str | None,
) -> Outcome | None:
    """What ``answer`` makes of ``call``, or None when it does not authorize it (any more)."""
    if not _trusted(policies, answer) or (
        answer.kind != "outcome_unknown" and not is_canonical(answer.decision)
    ):
        return None
    name, call_id = call["name"], str(call["id"])
    seen = started if answer.kind == "outcome_unknown" and started is not None else (name, call["args"])
    if answer.digest != call_digest(*seen):
        return None  # the call changed since the reviewer saw it: ask again
    decision = answer.decision
    kind = decision.get("type")
    if answer.kind == "withdrawn":  # the asker took it back: never run, whoever withdrew it
        marker = {"lc_source": DECISION_SOURCE, "lc_data": {"decision": "withdrawn"}}
        reason = decision.get("message")
        return Result(
            ToolMessage(
                withdrawn_message(name, call_id, reason if isinstance(reason, str) else None),
                tool_call_id=call_id,
                name=name,
                status="error",
                additional_kwargs=marker,
            )
        )
    if answer.kind == "expired":  # rule 15: nobody answered; the policy's on_expiry decides
        if kind == "approve":
            return Run(call)
        marker = {"lc_source": DECISION_SOURCE, "lc_data": {"decision": "expired"}}
        return Result(
            ToolMessage(
                expired_message(name, call_id),
                tool_call_id=call_id,
                name=name,
                status="error",
                additional_kwargs=marker,
            )
        )
    if kind in ("approve", "edit") and answer.kind == "review":
        target = decision.get("edited_action", {}).get("name", name) if kind == "edit" else name
        if not _enough(policies, answer, (seen[0], target), starter):
            return None  # rules 12-14: not approved by enough reviewers who may decide it now
    elif tool_refusal(policies, seen[0], answer.reviewer) is not None:
        return None  # the policy changed since: this reviewer may not decide it now
    marker = {"lc_source": DECISION_SOURCE, "lc_data": {"decision": kind}} if answer.kind == "review" else {}
    message = decision.get("message")
    if kind == "respond":
        content = message if isinstance(message, str) else ""
        return Result(ToolMessage(content, tool_call_id=call_id, name=name, additional_kwargs=marker))
    if kind == "reject":
        text = reject_message(name, call_id, message if isinstance(message, str) else None)
        return Result(
            ToolMessage(text, tool_call_id=call_id, name=name, status="error", additional_kwargs=marker)
        )
    if kind == "approve":
        if answer.kind == "outcome_unknown":
            return _run_started(call, seen)
        return Run(call)
    if kind == "edit" and answer.kind == "review":
        edited = decision["edited_action"]
        target = edited["name"]
        if target not in tools:
            return None
        if target != name:
            policy = policies.by_tool.get(target)
            if policy is not None and "approve" not in policy.allowed:
                return None  # its author's roles there were checked with the approvers
        return Run(
            ToolCall(name=target, args=dict(edited["args"]), id=call_id, type="tool_call"), edited=True
        )
    return None


def _enough(policies: Policies, answer: Answer, tools: tuple[str, str], starter: str | None) -> bool:
    """Whether an approval (or edit) of ``answer`` has the approvers its terms need, each
    one who may decide every tool in ``tools`` now (rule 12), the run's starter not
    counted where self-approval is off (rule 13), each counted once (rule 14)."""
    terms = answer.call_terms
    approvers = answer.approvers if answer.approvers is not None else [answer.reviewer]
    if terms == DEFAULT_TERMS:
        return all(tool_refusal(policies, tool, answer.reviewer) is None for tool in tools)
    counted: set[str] = set()
    for reviewer in approvers:
        who = reviewer_id(reviewer)
        if any(tool_refusal(policies, tool, reviewer) is not None for tool in tools):
            continue
        if not terms.self_approval and (who is None or (starter is not None and who == starter)):
            continue
        if who is None:
            if terms.approvals == 1:
                return True  # one approval, from a caller the policy lets answer unnamed
            continue
        counted.add(who)
    return len(counted) >= terms.approvals


def expired_message(name: str, call_id: str) -> str:
    """The ``ToolMessage`` text of a call whose review expired unanswered (rule 15)."""
    return (
        f"The review of the tool call for `{name}` (id {call_id}) expired before anyone answered it, "
        "so the tool was not executed. No person rejected it: it simply was not approved in time. "
        "Do not retry it unless the user asks you to."
    )


def withdrawn_message(name: str, call_id: str, reason: str | None) -> str:
    """The ``ToolMessage`` text of a call whose review its asker withdrew."""
    why = f": {reason}" if reason else ""
    return (
        f"The review of the tool call for `{name}` (id {call_id}) was withdrawn before anyone "
        f"answered it{why}. The tool was not executed."
    )


def _run_started(call: ToolCall, started: tuple[str, Any]) -> Run:
    """Run again the call as it was started (the edited action, if it was one)."""
    name, args = started
    if name == call["name"] and args == call["args"]:
        return Run(call)
    return Run(ToolCall(name=name, args=dict(args), id=str(call["id"]), type="tool_call"), edited=True)
