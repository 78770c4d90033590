"""When a run pauses, what a resume may contain, and what runs again.

Theory of operation
-------------------
A thread is a log of events (see ``events.py``); its state is the fold of the log
(see ``_fold.py``). A run reads the thread once, decides from this module what its
input means, appends those events, and then runs the steps that are due, appending
each step's events before the next step begins. Every rule below is enforced here or
names the place that enforces it; each has tests citing it.

Rule 1 - Lifecycle. The model answers; ``after_model`` hooks see its tool calls; a
    gated call makes the human-in-the-loop hook call ``interrupt()``, which saves an
    ``interrupt`` event and stops the run. A resume brings decisions; the tools step
    asks the gate about every call (``handrail.review``) and runs approved and edited
    calls, gives rejected or answered ones a synthetic result; then the model is called
    again.
Rule 2 - Batched mode: one interrupt per model turn (``human_in_the_loop.py``).
Rule 3 - Per-call mode: one interrupt per gated call, raised by the tools step, each
    answered on its own; a resume may answer some and leave the rest pending
    (:func:`target_answers`).
Rule 4 - Decisions and their results (``handrail.review``); every tool call ends
    with exactly one ToolMessage, in call order (the fold merges a tools step's results
    in call order when the step ends).
Rule 5 - A resume is validated completely before anything is saved
    (:func:`start_events` raises before returning any event): the payload's shape, the
    interrupt ids it names, and each answer through the validator of whoever raised the
    interrupt (:func:`validate_answer`). A refused resume changes nothing.
Rule 6 - Only the step that paused runs again. Its ``interrupt()`` calls get the
    answers in order (``ThreadFold.answers_for``); tool calls that already have a
    result are skipped (``_steps.py``); the model is not called for the turn under review
    because the model step already ended. Code before an ``interrupt()`` runs again.
Rule 7 - A pause needs a checkpointer and a thread id (``context.interrupt``);
    every step's events are appended before the next step begins (``commit.py``).
Rule 8 - One writer per thread: every append names the head it expects, and the store
    refuses a stale one with ConflictError. An answer to an interrupt that was already
    answered is refused the same way (:func:`target_answers`).
Rule 9 - A tool call that started and never finished, whose run is no longer alive,
    is not run again silently: it becomes an ``outcome_unknown`` interrupt
    (``_recovery.py``: :func:`unfinished_tool_interrupts`), unless its tool is idempotent, in which case
    the tools step simply runs it again (under the answer its start used); what its
    answer does is the gate's (``handrail.review.call_outcome``). A tools step saves the calls it is about to
    run (``tools_planned``) in one commit before any of them acts, so a call that was
    about to start counts as started.
Rule 10 - Records are JSON with named types, loaded strictly (``checkpoint/serde.py``).
Rule 11 - Who answered is recorded with every answer: the ``resume`` event holds the
    reviewer and the channel, the store stamps its time (:func:`start_events`).
Rules 13-15 - The terms a review was asked under (self-approval, approvals counted,
    expiry) hold for every answer before it is saved (``answering.py``).
Rule 12 - A policy's ``reviewers`` roles are checked for every answer before it is
    validated or saved (``handrail.review.authorize``, the one authorization function);
    an answer to the gate's own review is checked by the gate for that reviewer
    (``handrail.review.check_answer``: an edit into another tool needs its roles too).
Rule 19 - No input writes a decision: input, ``Command(update=...)`` and ``update_state``
    may not write private state keys, and a ToolMessage by update may not stand in for
    a call under review or decided and not yet run (``_updates.py``). Which calls
    run is the gate's to say, where tools run (``handrail.review``, ``_steps.py``).
Rule 20 - An update may not take a finished call's result away, which would make it due
    again (``_updates.py``); answers are used up and belong to their branch
    (``_fold.py``).
Rule 21 - The agent a thread belongs to (its ``assistant_id`` / ``graph_id`` metadata)
    is set by its first input and never changed by later input (:func:`start_events`).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from handrail.checkpoint.serde import dumps, loads
from handrail.errors import (
    ConflictError,
    InvalidDecisionError,
    InvalidInputError,
    PendingInterruptError,
    SerializationError,
    short_repr,
)
from handrail.middleware.types import ResumeContext
from handrail.review import authorize, check_answer, check_outcome_decision
from handrail.runtime import answering
from handrail.runtime._fold import BOUND_METADATA, ThreadFold
from handrail.runtime._pending import InterruptRecord, StartedTool
from handrail.runtime._updates import coerce_update
from handrail.runtime.events import Event
from handrail.types import Command, Interrupt

if TYPE_CHECKING:
    from handrail.runtime.spec import AgentSpec

__all__ = [
    "new_interrupt_id",
    "start_events",
    "target_answers",
    "validate_answer",
]

_ID_RE = re.compile(r"^[0-9a-f]{32}$")
_HEXISH_RE = re.compile(r"^[0-9a-fA-F]{6,64}$")


def new_interrupt_id() -> str:
    """A fresh interrupt id (32 hex digits)."""
    return os.urandom(16).hex()


def looks_like_interrupt_id(key: Any) -> bool:
    """Whether ``key`` has the shape of an interrupt id."""
    return isinstance(key, str) and bool(_ID_RE.match(key))


# Rules 3, 5 and 8: which interrupts a resume answers, and whether the answers are valid
def target_answers(fold: ThreadFold, pending: Mapping[str, InterruptRecord], resume: Any) -> dict[str, Any]:
    """Map a ``Command.resume`` onto the pending interrupts it answers.

    A map whose keys are interrupt ids answers exactly those; any other value answers
    the single pending interrupt.
    """
    thread = fold.thread_id
    is_map = _is_resume_map(fold, pending, resume)
    if is_map:
        resume = {_key_id(key): value for key, value in resume.items()}
        unknown = [key for key in resume if key not in pending]
        already = [key for key in unknown if key in fold.answered_ids]
        if already:
            raise ConflictError(
                f"thread {thread!r}: interrupt {', '.join(already)} was already answered "
                "(by another reviewer or an earlier resume); nothing was saved",
                thread_id=thread,
                interrupt_ids=tuple(already),
            )
        stale = [key for key in unknown if key in fold.superseded_ids]
        if stale:
            raise ConflictError(
                f"thread {thread!r}: interrupt {', '.join(stale)} was superseded when the state was "
                f"changed by hand; pending now: {list(pending) or 'none'}; nothing was saved",
                thread_id=thread,
                interrupt_ids=tuple(stale),
            )
        if unknown:
            raise InvalidDecisionError(
                f"thread {thread!r} has no pending interrupt {', '.join(unknown)}; pending: "
                f"{list(pending) or 'none'}"
            )
        return dict(resume)
    if not pending:
        raise InvalidDecisionError(
            f"thread {thread!r} has no pending interrupt, so there is nothing to resume; "
            "send new input instead"
        )
    if len(pending) > 1:
        raise InvalidDecisionError(
            f"thread {thread!r} has {len(pending)} pending interrupts ({', '.join(pending)}); "
            "a bare resume value is ambiguous: send Command(resume={interrupt_id: value, ...})"
        )
    (only,) = pending
    return {only: resume}


MAX_ANSWER_DEPTH = 64
"""How deeply an answer may nest (a decision with edited arguments needs about six)."""


def as_stored(fold: ThreadFold, interrupt_id: str, answer: Any) -> Any:
    """The answer exactly as the store will hold it, or InvalidDecisionError (rule 5).

    What a run applies must be what is saved and audited: an answer JSON cannot hold
    exactly (NaN or Infinity, a key that is not a string, a set, bytes, an integer past
    64 bits, nesting deeper than ``MAX_ANSWER_DEPTH``) is refused before it is saved, and
    an accepted one is applied as it loads back (a tuple becomes a list).
    """
    problem = _json_problem(answer)
    if problem is None:
        try:
            return loads(dumps(answer, where="the answer"))
        except SerializationError as exc:
            problem = str(exc).removeprefix("cannot store the answer: ")
    where = f"interrupt {interrupt_id}: " if len(fold.pending) > 1 else ""
    raise InvalidDecisionError(
        f"{where}the answer cannot be stored as given: {problem}; answers hold JSON values "
        "(objects with string keys, lists, strings, finite numbers, true/false/null)",
        interrupt_id=interrupt_id,
    )


def _json_problem(value: Any) -> str | None:
    """What keeps ``value`` from being stored exactly as JSON, found without recursion."""
    stack: list[tuple[Any, int, str]] = [(value, 0, "answer")]
    while stack:
        item, depth, path = stack.pop()
        if depth > MAX_ANSWER_DEPTH:
            return f"it nests more than {MAX_ANSWER_DEPTH} levels deep (at {path[:120]}...)"
        if isinstance(item, float) and not math.isfinite(item):
            return f"{path} is {item}, which JSON has no number for"
        if isinstance(item, Mapping):
            for key, inner in item.items():
                if not isinstance(key, str):
                    return f"{path} has the key {short_repr(key)}, which is not a string"
                stack.append((inner, depth + 1, f"{path}[{short_repr(key, 40)}]"))
        elif isinstance(item, (list, tuple)):
            stack.extend((inner, depth + 1, f"{path}[{i}]") for i, inner in enumerate(item))
    return None


def _key_id(key: Any) -> Any:
    """A resume map's key as an interrupt id: an ``Interrupt`` object stands for its ``id``."""
    return key.id if isinstance(key, Interrupt) else key


def _is_resume_map(fold: ThreadFold, pending: Mapping[str, InterruptRecord], resume: Any) -> bool:
    """Whether ``resume`` is meant as ``{interrupt_id: answer}`` rather than one bare answer.

    It is when every key is id-like (a full id, an ``Interrupt``, or a string of hex digits
    such as a shortened or mistyped id), or when any key names an interrupt of the thread:
    then unknown keys are reported as unknown ids, not read as a malformed answer.
    """
    if not isinstance(resume, Mapping) or not resume:
        return False
    known = set(pending) | set(fold.answered_ids) | set(fold.superseded_ids)
    if any(isinstance(key, Interrupt) or key in known for key in resume):
        return True
    return all(looks_like_interrupt_id(key) or _hexish(key) for key in resume)


def _hexish(key: Any) -> bool:
    return isinstance(key, str) and bool(_HEXISH_RE.match(key))


def validate_answer(
    spec: AgentSpec, fold: ThreadFold, record: InterruptRecord, answer: Any, reviewer: Any = None
) -> Any:
    """Check one answer (rule 5): the gate's reviews by the gate, for this ``reviewer``
    (an edit into another tool needs its roles too), others by whoever raised them."""
    try:
        if record.kind == "outcome_unknown":
            return check_outcome_decision(answer)
        if record.source is not None and record.source == spec.policies.source:
            return check_answer(
                spec.policies, record.value, answer, reviewer=reviewer, interrupt_id=record.id
            )
        owner = spec.middleware_by_name.get(record.source or "")
        if owner is None:
            return answer
        context = ResumeContext(thread_id=fold.thread_id, interrupt_id=record.id, tools=spec.tools)
        return owner.validate_resume(record.value, answer, context)
    except InvalidDecisionError as exc:
        if len(fold.pending) > 1:
            raise InvalidDecisionError(
                f"interrupt {record.id}: {exc}", interrupt_id=record.id, decision_index=exc.decision_index
            ) from None
        exc.interrupt_id = record.id
        raise
    except ValueError as exc:
        raise InvalidDecisionError(f"interrupt {record.id}: {exc}", interrupt_id=record.id) from None


# The start of a run ----------------------------------------------------------------
def start_events(
    spec: AgentSpec,
    fold: ThreadFold,
    run_input: Any,
    *,
    recovered: list[Event],
    busy: StartedTool | None = None,
    reviewer: Any,
    metadata: Mapping[str, Any] | None,
    channel: str = "python",
    record_only: bool = False,
    now: float | None = None,
) -> list[Event]:
    """The events that begin a run, after validating its input completely.

    ``record_only``: the run records answers and runs nothing (``Agent.decide``); it may
    do so while another run executes a tool of the thread, which then puts its own
    events after the answers (``_rebase.py``).

    Input and updates say who sent them (``reviewer``: the caller's identity) and through
    which channel (SPEC rule 21).

    ``recovered`` are the rule-9 interrupts found for this thread; ``busy`` a tool call
    another live run is executing. Raises before returning when the input is refused,
    so nothing is saved (rule 5).
    """
    if busy is not None and not (record_only and isinstance(run_input, Command) and run_input.update is None):
        named: tuple[str, ...] = ()
        if isinstance(run_input, Command) and run_input.resume is not None:
            with contextlib.suppress(InvalidDecisionError):
                named = tuple(target_answers(fold, fold.pending, run_input.resume))
        raise ConflictError(
            f"thread {fold.thread_id!r} is being run elsewhere: run {busy.run_id} is executing "
            f"tool {busy.name!r} (call {busy.task}); nothing was saved",
            thread_id=fold.thread_id,
            interrupt_ids=named,
        )
    pending = dict(fold.pending)
    for event in recovered:
        record = record_of(event)
        pending[record.id] = record
    if run_input is None:  # rule 15: a review whose expiry passed resolves now
        return [*recovered, *answering.expiry_events(fold, answering.expired_reviews(fold, now))]
    if isinstance(run_input, answering.Withdrawal):  # the asker takes its reviews back: all rejected
        return [*recovered, *answering.withdrawal_events(pending, run_input)]
    if isinstance(run_input, Command):
        events: list[Event] = []
        if run_input.update is not None:
            if (
                isinstance(run_input.update, Mapping)
                and "messages" in run_input.update
                and run_input.resume is not None
                and pending
            ):
                raise InvalidDecisionError(
                    "Command(update=..., resume=...) may not change messages: the answer was given for "
                    "the conversation as it was. Change messages with update_state (the paused step "
                    "then asks again), or send the update without resume"
                )
            values = coerce_update(spec, run_input.update, where="Command.update", fold=fold)
            # Changing the conversation makes pending questions stale, as update_state does.
            supersede = "messages" in values
            update = {"values": values, "next": list(fold.next), "as_node": None, "supersede": supersede}
            events.append(Event("update", {**update, **caller(reviewer, channel)}))
        events += recovered
        if run_input.resume is not None:
            answers = target_answers(fold, pending, run_input.resume)
            for interrupt_id in answers:  # rule 12, before rule 5: a refused reviewer learns nothing more
                authorize(spec.policies, interrupt_id, pending[interrupt_id].value, reviewer)
            answering.refuse_expired(fold, pending, list(answers), now)  # rule 15
            checked = {
                interrupt_id: validate_answer(
                    spec, fold, pending[interrupt_id], as_stored(fold, interrupt_id, answer), reviewer
                )
                for interrupt_id, answer in answers.items()
            }
            # rules 11, 13 and 14: who answered, how, and whether it is a vote or the answer
            events += answering.answer_events(spec, fold, pending, checked, reviewer, channel)
        elif run_input.update is None:
            raise InvalidDecisionError("Command needs resume=..., update=... or both")
        return events
    if pending:
        raise PendingInterruptError(
            f"thread {fold.thread_id!r} is waiting for review ({len(pending)} pending interrupt"
            f"{'s' if len(pending) != 1 else ''}: {', '.join(pending)}); answer with "
            "Command(resume=...) before sending new input"
        )
    if fold.next:
        raise PendingInterruptError(
            f"thread {fold.thread_id!r} has a run in progress (next step: {fold.next[0]}); "
            "continue it with invoke(None, config) before sending new input"
        )
    if not isinstance(run_input, Mapping):
        raise InvalidInputError(
            "input must be a dict like {'messages': [...]}, a Command, or None to continue; "
            f"got {type(run_input).__name__}"
        )
    values = coerce_update(spec, run_input, where="input")
    data: dict[str, Any] = {"values": values, "next": list(spec.plan.start())}
    bound = _binding(spec, fold, metadata)
    if bound:
        data["metadata"] = bound
    return [*recovered, Event("input", {**data, **caller(reviewer, channel)})]


def caller(identity: Any, channel: str) -> dict[str, Any]:
    """Who made a change, for its event (rule 21): nothing when no identity was given."""
    return {} if identity is None else {"by": identity, "channel": channel}


def _binding(spec: AgentSpec, fold: ThreadFold, metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """The input's metadata, with the agent the thread belongs to set once (rule 21).

    A thread's first input names its agent: the caller's ``assistant_id`` (the service
    gives the assistant it runs), else the agent's ``name``; later input may repeat it,
    never change it.
    """
    out = dict(metadata or {})
    if fold.head_seq == 0:
        if "assistant_id" not in out and spec.name:
            out["assistant_id"] = spec.name
        return out
    for key in BOUND_METADATA:
        if key in out and out[key] != fold.metadata.get(key):
            now = repr(fold.metadata[key]) if key in fold.metadata else "none (it was created without one)"
            raise InvalidInputError(
                f"thread {fold.thread_id!r} belongs to {key} {now}; input may not change it (to "
                f"{short_repr(out[key])}): the agent a thread belongs to is set when it is created"
            )
    return out


def record_of(event: Event) -> InterruptRecord:
    data = event.data
    return InterruptRecord(
        id=data["id"],
        step=data["step"],
        task=data["task"],
        index=data["index"],
        kind=data["kind"],
        value=data["value"],
        source=data.get("source"),
        seq=0,
        created_at=event.created_at,
    )
