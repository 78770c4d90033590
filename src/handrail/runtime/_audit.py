"""The audit trail's entries, read from a thread's log (DESIGN: the trail is the log).

Each stored event gives the entries that say what it records: a review request, each
answer with who gave it, a tool call that started (with the arguments that ran, and the
run and process that ran it) and its result, a change to the thread and who made it.

A crash leaves a gap that the trail tells, from what the log knows (rule 9): a tools
step saves the calls it is about to run (``tools_planned``, naming its run and process)
before any of them acts, and each call's own start is saved with its result. A call
whose run died inside it has the plan and no start: its entry is a ``tool_started`` of
kind ``"planned"``, at the time of the plan. The run that later found it dead saved an
``outcome_unknown`` review naming the dead run and itself; that review comes after a
``run_abandoned`` entry (which run died, in which process, and who took over).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from handrail.errors import stored_time
from handrail.messages import AIMessage, BaseMessage, ToolMessage
from handrail.review.quorum import progress
from handrail.review.terms import calls_asked
from handrail.runtime._checkpoint_ids import checkpoint_id_of
from handrail.runtime.events import Event
from handrail.types import AuditEntry

__all__ = ["TrailReader"]

_CHANGES = frozenset({"input", "update", "branch"})


class TrailReader:
    """Turns a thread's events into audit entries, oldest first.

    It reads the whole log once first (``events``), for what an entry needs from other
    events: the calls as the model proposed them, the process each run ran in, which
    planned calls never saved a start of their own.
    """

    def __init__(self, thread_id: str, events: list[Event]) -> None:
        self.thread_id = thread_id
        self.proposed = _proposed_calls(events)
        self.workers: dict[str, str] = {}  # run id -> the process it ran in
        self.started: set[tuple[Any, Any]] = set()  # (run id, call id) of each saved start
        self.asked: dict[tuple[Any, Any], Any] = {}  # (dead run, call id) -> the args asked about
        self.announced: set[tuple[Any, Any]] = set()  # (dead run, taker) already told
        self.reviews: dict[str, tuple[Any, Any]] = {}  # interrupt id -> (value, terms), as asked
        self.votes: dict[str, list[tuple[Any, Any]]] = {}  # interrupt id -> the approvals so far
        for event in events:
            data = event.data
            if event.kind == "tools_planned" and isinstance(data.get("worker"), str):
                self.workers[str(data.get("run_id"))] = data["worker"]
            elif event.kind == "tool_started":
                self.started.add((data.get("run_id"), data["task"]))
            elif event.kind == "interrupt" and data.get("abandoned") is not None:
                value = data["value"]
                if isinstance(value, dict):
                    self.asked[(data["abandoned"], data.get("task"))] = value.get("args")

    def entries(self, event: Event) -> list[AuditEntry]:
        """The entries of one event (none for events the trail does not show)."""
        at = stored_time(event.created_at, self.thread_id, f"record {event.seq}", event.seq)
        data = event.data
        if event.kind == "interrupt":
            self.reviews[data["id"]] = (data["value"], data.get("terms"))
            return [
                *self._takeover(event, at),
                self._entry(
                    event,
                    at,
                    "review_requested",
                    interrupt_id=data["id"],
                    value=data["value"],
                    kind=data.get("kind", "interrupt"),
                ),
            ]
        if event.kind == "resume":
            kind = (
                "expired"
                if data.get("channel") == "expiry"
                else "withdrawn"
                if data.get("withdrawn")
                else "quorum"
                if data.get("quorum")
                else None
            )
            for interrupt_id in data["answers"]:
                self.votes.pop(interrupt_id, None)
            return [
                self._entry(
                    event,
                    at,
                    "answered",
                    interrupt_id=interrupt_id,
                    value=answer,
                    kind=kind,
                    reviewer=data.get("reviewer"),
                    channel=data.get("channel"),
                )
                for interrupt_id, answer in data["answers"].items()
            ]
        if event.kind == "approval":
            return [self._approval(event, at)]
        if event.kind == "tools_planned":
            return self._planned(event, at)
        if event.kind == "tool_started":
            call = self.proposed.get(data["task"], {})
            grant = data.get("grant") if isinstance(data.get("grant"), dict) else None
            # a call a grant let run names the grant and who gave it (rule 16), channel "grant"
            by_grant = {"reviewer": grant.get("given_by"), "channel": "grant"} if grant else {}
            return [
                self._entry(
                    event,
                    at,
                    "tool_started",
                    tool_call_id=data["task"],
                    tool=data["name"],
                    args=data.get("ran", data["args"] if "args" in data else call.get("args")),
                    proposed=call or None,
                    value={
                        **self._run(data.get("run_id")),
                        **({"grant_id": grant.get("id")} if grant else {}),
                    },
                    **by_grant,
                )
            ]
        if event.kind in _CHANGES:
            return [self._change(event, at)]
        if event.kind == "failed":
            name = "run_cancelled" if data.get("cancelled") else "run_failed"
            value = {"run_id": data.get("run_id"), "error": data["error"]}
            return [self._entry(event, at, name, value=value, by=data.get("by"), channel=data.get("channel"))]
        if event.kind != "tool_finished":
            return []
        message: BaseMessage = data["message"]
        if not isinstance(message, ToolMessage):
            raise TypeError("a tool_finished event must hold a ToolMessage")
        return [
            self._entry(
                event,
                at,
                "tool_finished",
                tool_call_id=getattr(message, "tool_call_id", None),
                tool=message.name,
                result=message,
            )
        ]

    def _approval(self, event: Event, at: Any) -> AuditEntry:
        """One approval of a review that counts them (rule 14); ``kind`` says how far each
        call has come: ``"1 of 2"`` (the tool named first when the review asks about several)."""
        data = event.data
        interrupt_id = data["interrupt"]
        votes = self.votes.setdefault(interrupt_id, [])
        votes.append((data["answer"], data.get("reviewer")))
        value, terms = self.reviews.get(interrupt_id, (None, None))
        counts = progress(value, terms, votes)
        names = [name for _, name, _ in calls_asked(value)]
        said = [
            f"{name} {count}" if len(counts) > 1 else str(count)
            for name, count in zip(names, counts, strict=False)
        ]
        return self._entry(
            event,
            at,
            "approval",
            interrupt_id=interrupt_id,
            value=data["answer"],
            kind=", ".join(said) or None,
            reviewer=data.get("reviewer"),
            channel=data.get("channel"),
        )

    def _entry(self, event: Event, at: Any, name: str, **fields: Any) -> AuditEntry:
        return AuditEntry(thread_id=self.thread_id, seq=event.seq, at=at, event=name, **fields)  # type: ignore[arg-type]

    def _run(self, run_id: Any) -> dict[str, Any]:
        """Which run, in which process (None for runs saved before processes were named)."""
        return {"run_id": run_id, "worker": self.workers.get(str(run_id)) if run_id is not None else None}

    def _planned(self, event: Event, at: Any) -> list[AuditEntry]:
        """A ``tool_started`` of kind "planned" for each planned call its run never saved
        a start of: the run died in it (or is running it now)."""
        run_id = event.data.get("run_id")
        entries = []
        for task in event.data["calls"]:
            if (run_id, task) in self.started:
                continue  # its own start tells it
            call = self.proposed.get(task, {})
            args = self.asked.get((run_id, task), call.get("args"))  # what rule 9 asked about
            entries.append(
                self._entry(
                    event,
                    at,
                    "tool_started",
                    kind="planned",
                    tool_call_id=task,
                    tool=call.get("name"),
                    args=args,
                    proposed=call or None,
                    value=self._run(run_id),
                )
            )
        return entries

    def _takeover(self, event: Event, at: Any) -> list[AuditEntry]:
        """A ``run_abandoned`` entry before the first review a takeover asked."""
        data = event.data
        dead, taker = data.get("abandoned"), data.get("run_id")
        if dead is None or (dead, taker) in self.announced:
            return []
        self.announced.add((dead, taker))
        value = {**self._run(dead), "taken_over_by": {"run_id": taker, "worker": data.get("worker")}}
        return [self._entry(event, at, "run_abandoned", value=value)]

    def _change(self, event: Event, at: Any) -> AuditEntry:
        """The audit entry of a change to the thread: who made it, and what (rule 21)."""
        data = event.data
        kind = None
        if event.kind == "input":
            name, value = "input", data.get("metadata") or None
        elif event.kind == "update":
            name, value, kind = "state_updated", {"keys": sorted(data["values"])}, data.get("as_node")
        else:
            name, value = "forked", {"from_checkpoint": checkpoint_id_of(int(data["from_seq"]))}
        return self._entry(
            event, at, name, value=value, kind=kind, by=data.get("by"), channel=data.get("channel")
        )


def _proposed_calls(events: Iterable[Event]) -> dict[str, dict[str, Any]]:
    """Every tool call the model proposed, by id (a start event omits unchanged args)."""
    calls: dict[str, dict[str, Any]] = {}
    for event in events:
        messages: Any = ()
        if event.kind == "snapshot":
            messages = event.data["state"].get("values", {}).get("messages", ())
        elif isinstance(event.data.get("values"), dict):
            messages = event.data["values"].get("messages", ())
        for message in messages:
            if isinstance(message, AIMessage):
                for call in message.tool_calls:
                    if call.get("id"):
                        calls[str(call["id"])] = dict(call)
    return calls
