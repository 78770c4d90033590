"""The gate: who may answer a review, what an answer may say, what a tool call may do now.

Theory of operation
-------------------
A tool call the policies gate runs only on an answer in the thread's log that
authorizes exactly that call. The gate is checked where tools run - the executor asks
:func:`call_outcome` for every call, just before its ``tool_started`` event - so no
channel can skip it: not a model turn, input, ``Command(update=...)``, ``update_state``,
a fork, a replay from an earlier checkpoint, nor a worker on another machine. This
package is pure: it reads policies, review values and answers, and says what may
happen; the run's steps (``runtime/_steps.py``) and the fold (``runtime/_fold.py``) act on it.

Rule 5 - An answer is checked completely before it is saved (:func:`check_answer`):
    its shape, one decision per call asked about, each decision one the call's review
    allows, an edit naming one of the agent's tools with arguments its schema accepts;
    an edit into another tool must be one its author could have approved there (that
    tool's ``allowed_decisions`` include ``approve``; its ``reviewers`` include one of the
    author's roles). A refused answer saves nothing.
Rule 9 - A call that started and never finished, whose run is gone, is asked about as
    ``outcome_unknown`` (``runtime/_rules.py`` raises it); its answer is one more case of
    :func:`call_outcome`: approve runs again what was started, respond gives its result,
    reject gives the rejection. An idempotent tool runs again under the answer its start
    used.
Rule 12 - A policy's ``reviewers`` roles are checked for every answer, by every
    channel, before it is checked or saved (:func:`authorize`); the inbox lists for each
    reviewer what :func:`may_answer` lets them decide.
Rule 19 - An answer is bound, call by call, to what its reviewer saw: the call id and a
    digest of the tool and its arguments (:func:`answers_from`); only answers to reviews
    the gate itself raised count. :func:`call_outcome` lets a gated call run only on such
    an answer on this branch whose digest matches the call as it is now and whose
    reviewer may decide it now (an edit: may approve the edited tool too). State never
    carries decisions: no key a client can write makes a call count as answered. A call
    to a tool the agent does not have never runs and never counts as "not reviewed": it
    gets an error result.
Rule 20 - An approval authorizes one execution: the call's ``tool_started`` event uses
    it up. A ``branch`` (a fork, a replay from an earlier checkpoint) starts with no
    answers: every gated call is asked about again there. A call that finished is never
    run again on its branch (an update may not take its result away: ``_rules.py``).

What the executor does with an outcome: :class:`Run` runs the call (an edit runs the
edited action, and its result starts with the edit notice); :class:`Result` records a
result without running anything; :class:`Ask` raises a per-call review of the call as it
is now (whatever the policies' mode: the batched review was asked before the tools step,
and a call found unanswered there is asked about on its own).
"""

from handrail.review._answers import (
    ANYONE,
    OUTCOME_DECISIONS,
    check_answer,
    check_outcome_decision,
    is_canonical,
)
from handrail.review._outcome import (
    Answer,
    Ask,
    Outcome,
    Result,
    Run,
    answers_from,
    call_digest,
    call_outcome,
    expired_message,
)
from handrail.review._who import (
    authorize,
    may_answer,
    refusal,
    reviewer_id,
    reviewer_roles,
    roles_required,
    tool_refusal,
    tools_asked,
)
from handrail.review.policy import (
    NO_POLICIES,
    Policies,
    Policy,
    parse_policy,
    reject_message,
    with_edit_notice,
)
from handrail.review.terms import DEFAULT_TERMS, CallTerms, expires_at, needs_count, terms_for, terms_of

__all__ = [
    "ANYONE",
    "DEFAULT_TERMS",
    "NO_POLICIES",
    "OUTCOME_DECISIONS",
    "Answer",
    "Ask",
    "CallTerms",
    "Outcome",
    "Policies",
    "Policy",
    "Result",
    "Run",
    "answers_from",
    "authorize",
    "call_digest",
    "call_outcome",
    "check_answer",
    "check_outcome_decision",
    "expired_message",
    "expires_at",
    "is_canonical",
    "may_answer",
    "needs_count",
    "parse_policy",
    "refusal",
    "reject_message",
    "reviewer_id",
    "reviewer_roles",
    "roles_required",
    "terms_for",
    "terms_of",
    "tool_refusal",
    "tools_asked",
    "with_edit_notice",
]
