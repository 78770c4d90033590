"""What the pages read about one review: where it stands, who decided it, what ran after.

Everything comes from the library's own readings - the thread's state and its audit
trail, the log itself (DESIGN: "the audit trail is the log itself") - so a page never
keeps a second account that could disagree. A review is ``pending``; ``decided`` (an
answer is in the log: by whom, when, through which channel, what); ``expired`` (the
answer is the clock's: channel ``expiry``); ``withdrawn`` (asked, never answered, no
longer pending: the thread moved on without it); or unknown to the thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from handrail._message_display import reviewer_content
from handrail.agent import Agent
from handrail.review import reviewer_id
from handrail.server._service import Service
from handrail.server.tokens import Credential
from handrail.server.wire import to_wire
from handrail.types import AuditEntry, Interrupt, StateSnapshot

__all__ = [
    "CallOutcome",
    "Outcome",
    "ReviewAt",
    "answer_verb",
    "find_review",
    "outcome_after",
    "refused",
]

_VERBS = {"approve": "approved", "edit": "edited", "reject": "rejected", "respond": "answered"}


@dataclass
class ReviewAt:
    """One review of one thread, as the log has it now."""

    thread_id: str
    interrupt_id: str
    assistant_id: str
    agent: Agent
    state: StateSnapshot
    trail: list[AuditEntry]
    pending: Interrupt | None
    asked: AuditEntry | None
    answered: AuditEntry | None

    @property
    def status(self) -> str:
        """``pending``, ``decided``, ``expired``, ``withdrawn`` or ``unknown``."""
        if self.pending is not None:
            return "pending"
        if self.answered is not None:
            return "expired" if self.answered.channel == "expiry" else "decided"
        return "withdrawn" if self.asked is not None else "unknown"

    @property
    def value(self) -> Any:
        """What the review asks (its interrupt's value)."""
        if self.pending is not None:
            return self.pending.value
        return self.asked.value if self.asked is not None else None

    def recorded(self) -> str:
        """One sentence on the answer recorded: what, by whom, when, through which channel."""
        answered = self.answered
        if answered is None:
            return "No answer is recorded."
        if answered.channel == "expiry":
            return (
                f"Expired unanswered at {_clock(answered)}: its policy had it {answer_verb(answered.value)}."
            )
        return f"Recorded: {self._answer_by(answered)}."

    def _answer_by(self, answered: AuditEntry) -> str:
        """``approved by bob at 10:42 UTC through web``; for a count of approvals (rule 14)
        ``approved with 2 of 2 approvals, the last by bob at ...``."""
        who = reviewer_id(answered.reviewer) or "a caller who gave no name"
        through = f" through {answered.channel}" if answered.channel else ""
        votes = [e for e in self.trail if e.event == "approval" and e.interrupt_id == self.interrupt_id]
        if answered.kind == "quorum" and votes and votes[-1].kind:
            count = votes[-1].kind
            return (
                f"{answer_verb(answered.value)} with {count} approvals, the last by {who} at "
                f"{_clock(answered)}{through}"
            )
        return f"{answer_verb(answered.value)} by {who} at {_clock(answered)}{through}"

    def notice(self) -> str:
        """One sentence on a review that is not pending any more."""
        answered = self.answered
        if answered is not None:
            if answered.channel == "expiry":
                return f"This review expired at {_clock(answered)}: nobody decided it in time."
            return f"Already {self._answer_by(answered)}."
        if self.asked is not None:
            return "This review was withdrawn: the thread went on without an answer to it."
        return "This thread has no such review."


def _clock(entry: AuditEntry) -> str:
    from handrail.server.pages._markup import clock

    return clock(entry.at)


def answer_verb(answer: Any) -> str:
    """``approved``, ``rejected``, ``edited``, ``answered``, or ``decided (approve, reject)``."""
    decisions = answer.get("decisions") if isinstance(answer, Mapping) else None
    if decisions is None:
        decisions = [answer]
    types = [d.get("type") for d in decisions if isinstance(d, Mapping)]
    if not types:
        return "answered"
    if len(set(types)) == 1:
        return _VERBS.get(str(types[0]), "answered")
    return f"decided ({', '.join(str(t) for t in types)})"


async def live_end(service: Service) -> str | None:
    """Where a page's live stream starts: the feed's end now, read before the page's data
    (so that no event falls between what the page shows and what the stream tells)."""
    if service.live is not None:
        end: str | None = await service.live.end()
        return end
    store = service.agents[service.default_assistant].checkpointer
    return None if store is None else await store.afeed_end()


def running_here(service: Service, thread_id: str) -> bool:
    """Whether this process is running the thread now (a run of the API, or its worker)."""
    registry = service.runs
    worker = service.worker
    return bool(
        (registry is not None and thread_id in registry.active)
        or (worker is not None and worker.running(thread_id))
    )


async def find_review(service: Service, thread_id: str, interrupt_id: str) -> ReviewAt:
    """Where the review stands (a 404 ``Problem`` for an unknown thread)."""
    assistant, agent, _ = await service.owner(thread_id)
    config: Any = {"configurable": {"thread_id": thread_id}}
    state = await agent.aget_state(config)
    pending = next((i for i in state.interrupts if i.id == interrupt_id), None)
    trail = await agent.aget_audit_trail(config)
    asked = next((e for e in trail if e.event == "review_requested" and e.interrupt_id == interrupt_id), None)
    answered = next((e for e in trail if e.event == "answered" and e.interrupt_id == interrupt_id), None)
    return ReviewAt(thread_id, interrupt_id, assistant, agent, state, trail, pending, asked, answered)


def refused(agent: Agent, value: Any, credential: Credential) -> str | None:
    """Why ``credential`` may not decide a review asking ``value`` (SPEC rule 12), or None."""
    return agent.refusal(value, credential.reviewer)


@dataclass
class CallOutcome:
    """What became of one call after the answer: what ran (if anything) and its result."""

    tool_call_id: str
    name: str
    ran: bool
    args: Any = None
    proposed: Any = None
    result: str | None = None
    status: str | None = None
    started_seq: int | None = None
    finished_seq: int | None = None

    @property
    def edited(self) -> bool:
        """Whether what ran differs from what the model proposed."""
        return self.ran and self.proposed is not None and self.proposed != self.args


@dataclass
class Outcome:
    """What happened on the thread after an answer, as far as the log shows yet."""

    calls: list[CallOutcome] = field(default_factory=list)
    settled: bool = False
    paused_again: list[Interrupt] = field(default_factory=list)
    final_message: str | None = None


def _content(message: Any) -> str:
    """A message's content as a reviewer reads it (a tool's own result, without the edit notice)."""
    wire = to_wire(message)
    content = reviewer_content(wire)[0] if isinstance(wire, Mapping) else wire
    if isinstance(content, str):
        return content
    from handrail.server.pages._markup import json_text

    return json_text(content)


def outcome_after(review: ReviewAt, running: bool, tool_call_ids: Sequence[str | None]) -> Outcome:
    """The calls' results and the thread's next stop after ``review``'s answer.

    ``running``: whether a run of the thread is still going (then nothing is settled).
    """
    out = Outcome()
    answered = review.answered
    if answered is None:
        return out
    wanted = [t for t in tool_call_ids if t]
    by_id: dict[str, CallOutcome] = {}
    for entry in review.trail:
        if entry.seq <= answered.seq or entry.tool_call_id not in wanted:
            continue
        call = by_id.setdefault(entry.tool_call_id, CallOutcome(entry.tool_call_id, entry.tool or "", False))
        if entry.event == "tool_started":
            call.ran = True
            call.started_seq = entry.seq
            call.args = entry.args
            proposed = entry.proposed
            call.proposed = proposed.get("args") if isinstance(proposed, Mapping) else None
        elif entry.event == "tool_finished":
            call.result = _content(entry.result)
            call.finished_seq = entry.seq
            call.status = str(getattr(entry.result, "status", None) or "success")
    out.calls = [by_id[t] for t in wanted if t in by_id]
    finished = all(by_id.get(t) is not None and by_id[t].result is not None for t in wanted)
    out.settled = finished and not running
    if out.settled:
        out.paused_again = list(review.state.interrupts)
        messages = review.state.values.get("messages") or []
        if not out.paused_again and messages:
            out.final_message = _content(messages[-1])
    return out
