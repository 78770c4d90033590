"""When a run pauses, what a resume may contain, and what runs again.

Theory of operation
-------------------
A thread is a log of events (see ``events.py``); its state is the fold of the log
(see ``fold.py``). A run reads the thread once, decides from this module what its
input means, appends those events, and then runs the steps that are due, appending
each step's events before the next step begins. Every rule below is enforced here or
names the place that enforces it; each has tests citing it.

Rule 1 - Lifecycle. The model answers; ``after_model`` hooks see its tool calls; a
    gated call makes the human-in-the-loop hook call ``interrupt()``, which saves an
    ``interrupt`` event and stops the run. A resume brings decisions; the tools step
    runs approved and edited calls and gives rejected or answered ones a synthetic
    result; then the model is called again.
Rule 2 - Batched mode: one interrupt per model turn (``human_in_the_loop.py``).
Rule 3 - Per-call mode: one interrupt per gated call, each answered on its own; a
    resume may answer some and leave the rest pending (:func:`target_answers`).
Rule 4 - Decisions and their results (``human_in_the_loop.py``); every tool call ends
    with exactly one ToolMessage, in call order (the fold merges a tools step's results
    in call order when the step ends).
Rule 5 - A resume is validated completely before anything is saved
    (:func:`start_events` raises before returning any event): the payload's shape, the
    interrupt ids it names, and each answer through the validator of whoever raised the
    interrupt (:func:`validate_answer`). A refused resume changes nothing.
Rule 6 - Only the step that paused runs again. Its ``interrupt()`` calls get the
    answers in order (``ThreadFold.answers_for``); tool calls that already have a
    result are skipped (``loop.py``); the model is not called for the turn under review
    because the model step already ended. Code before an ``interrupt()`` runs again.
Rule 7 - A pause needs a checkpointer and a thread id (``context.interrupt``);
    every step's events are appended before the next step begins (``loop.py``).
Rule 8 - One writer per thread: every append names the head it expects, and the store
    refuses a stale one with ConflictError. An answer to an interrupt that was already
    answered is refused the same way (:func:`target_answers`).
Rule 9 - A tool call that started and never finished, whose run is no longer alive,
    is not run again silently: it becomes an ``outcome_unknown`` interrupt
    (:func:`unfinished_tool_interrupts`), unless its tool is idempotent, in which case
    the tools step simply runs it again. A tools step saves the calls it is about to
    run (``tools_planned``) in one commit before any of them acts, so a call that was
    about to start counts as started.
Rule 11 - Who answered is recorded with every answer: the ``resume`` event holds the
    reviewer and the channel, the store stamps its time (:func:`start_events`).
Rule 12 - A policy's ``reviewers`` roles are checked for every answer before it is
    validated or saved (``authority.py``, the one authorization function).
Rule 10 - Records are JSON with named types, loaded strictly (``checkpoint/serde.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
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
from handrail.messages import AIMessage, ToolMessage, coerce_messages, merge_messages_into
from handrail.middleware.human_in_the_loop import reject_message
from handrail.middleware.types import ResumeContext
from handrail.runtime.authority import authorize
from handrail.runtime.events import Event
from handrail.runtime.fold import InterruptRecord, StartedTool, ThreadFold
from handrail.types import Command, Interrupt

if TYPE_CHECKING:
    from handrail.runtime.spec import AgentSpec

__all__ = [
    "OUTCOME_DECISIONS",
    "new_interrupt_id",
    "outcome_result",
    "start_events",
    "target_answers",
    "unfinished_tool_interrupts",
    "validate_answer",
]

_ID_RE = re.compile(r"^[0-9a-f]{32}$")
_HEXISH_RE = re.compile(r"^[0-9a-fA-F]{6,64}$")
OUTCOME_DECISIONS = ("approve", "respond", "reject")


def new_interrupt_id() -> str:
    """A fresh interrupt id (32 hex digits)."""
    return os.urandom(16).hex()


def looks_like_interrupt_id(key: Any) -> bool:
    """Whether ``key`` has the shape of an interrupt id."""
    return isinstance(key, str) and bool(_ID_RE.match(key))


def _outcome_unknown_id(thread_id: str, started: StartedTool) -> str:
    # Derived, not random: get_state shows the same id before and after it is saved. The
    # call's id is part of it: every call planned in one step shares its start record.
    key = f"{thread_id}\x00outcome_unknown\x00{started.seq}\x00{started.task}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _already_asked(fold: ThreadFold, started: StartedTool) -> bool:
    """Whether this start of the call already has an ``outcome_unknown`` review (pending or
    answered), whatever id an older version of handrail gave it."""
    return any(
        record.kind == "outcome_unknown" and record.task == started.task and record.seq > started.seq
        for record in fold.step_interrupts.values()
    )


# Rule 9 ----------------------------------------------------------------------------
def unfinished_tool_interrupts(
    spec: AgentSpec, fold: ThreadFold, alive: set[str], own_run: str | None
) -> tuple[list[Event], StartedTool | None]:
    """``outcome_unknown`` interrupts for tool calls left unfinished by dead runs.

    Also returns a call that a run still alive is executing, if any: that run is still
    working on the thread, and nobody else may write to it (:func:`start_events`).
    """
    events: list[Event] = []
    for started in fold.started.values():
        if started.run_id == own_run:
            continue
        if started.run_id in alive:
            return [], started
        tool = spec.tools.get(started.name)
        if started.idempotent or (tool is not None and tool.idempotent):
            continue  # the tools step runs it again
        interrupt_id = _outcome_unknown_id(fold.thread_id, started)
        if interrupt_id in fold.pending or interrupt_id in fold.answered_ids or _already_asked(fold, started):
            continue
        events.append(
            Event(
                "interrupt",
                {
                    "id": interrupt_id,
                    "step": "tools",
                    "task": started.task,
                    "index": 0,
                    "kind": "outcome_unknown",
                    "value": {
                        "type": "outcome_unknown",
                        "tool_call_id": started.task,
                        "name": started.name,
                        "args": started.args,
                        "description": (
                            f"Tool {started.name!r} was about to run or running when the process "
                            "running it stopped, and its result was never saved. It may or may not "
                            "have taken effect. approve: run it again; respond: give its result; "
                            "reject: do not run it."
                        ),
                        "allowed_decisions": list(OUTCOME_DECISIONS),
                    },
                    "source": None,
                },
            )
        )
    return events, None


def outcome_result(answer: Mapping[str, Any], record_task: str, name: str) -> ToolMessage | None:
    """What an answered ``outcome_unknown`` interrupt leaves: a result, or None to re-run.

    Total over every answer a store may hold (an older handrail saved ``respond`` with an
    empty message without it): a saved answer never leaves a thread that cannot move.
    """
    kind = answer.get("type")
    if kind == "respond":
        message = answer.get("message")
        return ToolMessage(message if isinstance(message, str) else "", tool_call_id=record_task, name=name)
    if kind == "reject":
        reason = answer.get("message")
        return ToolMessage(
            reject_message(name, record_task, reason if isinstance(reason, str) else None),
            tool_call_id=record_task,
            name=name,
            status="error",
        )
    return None


def _validate_outcome_decision(answer: Any) -> dict[str, Any]:
    if isinstance(answer, Mapping) and "decisions" in answer and "type" not in answer:
        decisions = answer["decisions"]
        if isinstance(decisions, list) and len(decisions) == 1:
            answer = decisions[0]
    if not isinstance(answer, Mapping) or answer.get("type") not in OUTCOME_DECISIONS:
        raise InvalidDecisionError(
            "an outcome_unknown interrupt is answered by one decision: {'type': 'approve'} "
            "(run it again), {'type': 'respond', 'message': result} or {'type': 'reject'}"
        )
    kind = answer["type"]
    unexpected = sorted(str(key) for key in set(answer) - {"type", "message"})
    if unexpected:
        raise InvalidDecisionError(f"the decision ({kind}) has unexpected key(s) {short_repr(unexpected)}")
    message = answer.get("message")
    if kind == "respond" and not isinstance(message, str):
        raise InvalidDecisionError("the decision (respond) needs a string 'message': the tool's result")
    if message is not None and not isinstance(message, str):
        raise InvalidDecisionError(f"the decision ({kind}) 'message' must be a string")
    if kind == "approve":
        return {"type": "approve"}
    if kind == "respond":
        return {"type": "respond", "message": message}  # an empty result is a result
    return {"type": kind, "message": message} if message else {"type": kind}


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


def validate_answer(spec: AgentSpec, fold: ThreadFold, record: InterruptRecord, answer: Any) -> Any:
    """Check one answer with the validator of whoever raised the interrupt (rule 5)."""
    try:
        if record.kind == "outcome_unknown":
            return _validate_outcome_decision(answer)
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
) -> list[Event]:
    """The events that begin a run, after validating its input completely.

    ``recovered`` are the rule-9 interrupts found for this thread; ``busy`` a tool call
    another live run is executing. Raises before returning when the input is refused,
    so nothing is saved (rule 5).
    """
    if busy is not None:
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
    if run_input is None:
        return list(recovered)
    if isinstance(run_input, Command):
        events: list[Event] = []
        if run_input.update is not None:
            values = coerce_update(spec, run_input.update, where="Command.update", fold=fold)
            if "messages" in values and run_input.resume is not None and pending:
                raise InvalidDecisionError(
                    "Command(update=..., resume=...) may not change messages: the answer was given for "
                    "the conversation as it was. Change messages with update_state (the paused step "
                    "then asks again), or send the update without resume"
                )
            # Changing the conversation makes pending questions stale, as update_state does.
            supersede = "messages" in values
            events.append(
                Event(
                    "update",
                    {"values": values, "next": list(fold.next), "as_node": None, "supersede": supersede},
                )
            )
        events += recovered
        if run_input.resume is not None:
            answers = target_answers(fold, pending, run_input.resume)
            for interrupt_id in answers:  # rule 12, before rule 5: a refused reviewer learns nothing more
                authorize(spec, interrupt_id, pending[interrupt_id].value, reviewer)
            checked = {
                interrupt_id: validate_answer(
                    spec, fold, pending[interrupt_id], as_stored(fold, interrupt_id, answer)
                )
                for interrupt_id, answer in answers.items()
            }
            resume: dict[str, Any] = {"answers": checked}
            if reviewer is not None:
                resume["reviewer"] = reviewer
            resume["channel"] = channel  # rule 11: who, through which channel (the event has the time)
            events.append(Event("resume", resume))
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
    if metadata:
        data["metadata"] = dict(metadata)
    return [*recovered, Event("input", data)]


def coerce_update(
    spec: AgentSpec, values: Any, *, where: str, fold: ThreadFold | None = None
) -> dict[str, Any]:
    """Check a state update's keys and coerce its messages.

    With ``fold``, also refuse messages that would land between an AI message and the
    results of its tool calls: every provider rejects that order.
    """
    if not isinstance(values, Mapping):
        raise InvalidInputError(f"{where} must be a dict of state keys, got {type(values).__name__}")
    unknown = sorted(key for key in values if key not in spec.state_keys)
    if unknown:
        public = sorted(key for key in spec.state_keys if not key.startswith("_"))
        raise InvalidInputError(f"{where} has unknown state key(s) {unknown}; the agent's state has {public}")
    out = dict(values)
    if "messages" in out:
        try:
            coerced = coerce_messages(out["messages"], where=f"{where}['messages']")
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None
        out["messages"] = [m if m.id is not None else _with_id(m) for m in coerced]
        if fold is not None:
            _check_tool_results_follow_calls(fold, out["messages"], where)
    return out


def _check_tool_results_follow_calls(fold: ThreadFold, update: list[Any], where: str) -> None:
    messages = list(fold.messages)
    merge_messages_into(messages, {m.id: i for i, m in enumerate(messages) if m.id}, update)
    last_ai = max((i for i, m in enumerate(messages) if isinstance(m, AIMessage)), default=None)
    if last_ai is None:
        return
    ai = messages[last_ai]
    assert isinstance(ai, AIMessage)
    after = messages[last_ai + 1 :]
    answered = {m.tool_call_id for m in after if isinstance(m, ToolMessage)}
    unanswered = [tc["id"] for tc in ai.tool_calls if tc["id"] not in answered]
    stray = [m for m in after if not isinstance(m, ToolMessage)]
    if unanswered and stray:
        raise InvalidInputError(
            f"{where} would put a {stray[0].type} message after tool calls that have no results yet "
            f"({', '.join(str(i) for i in unanswered)}); providers refuse that order. Answer the "
            "calls first (or add their ToolMessages in the same update), or edit the AI message "
            "itself (same id)"
        )


def _with_id(message: Any) -> Any:
    from dataclasses import replace

    from handrail.messages import new_id

    return replace(message, id=new_id())


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
