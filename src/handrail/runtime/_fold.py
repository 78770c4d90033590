"""The fold: a thread's state as the reading of its event log up to a point.

``ThreadFold.apply(event)`` advances the reading by one event. It is the only code
that gives events their meaning; the run loop appends events and then applies them,
and loading a thread applies the stored ones, so a thread read back from the store is
exactly the thread that was run.

The records it keeps of reviews asked and calls started are in ``_pending.py``; its
stored form (a saved reading, a snapshot) is ``_fold_codec.py``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from operator import attrgetter
from typing import Any

from handrail.checkpoint.integrity import GENESIS
from handrail.errors import SerializationError
from handrail.messages import AIMessage, BaseMessage, ToolMessage, merge_messages_into
from handrail.review import Answer, answers_from, reviewer_id
from handrail.review.quorum import count_votes
from handrail.review.terms import needs_count
from handrail.runtime._checkpoint_ids import checkpoint_id_of
from handrail.runtime._pending import InterruptRecord, StartedTool, pending_tool_calls
from handrail.runtime.events import CHECKPOINT_KINDS, Event

__all__ = ["BOUND_METADATA", "Reducer", "ThreadFold", "as_next"]

BOUND_METADATA = ("assistant_id", "graph_id")
"""Thread metadata keys that name the agent a thread belongs to: set once, by its first
input, and never changed after (SPEC rule 21; ``_rules.py`` refuses input that tries)."""

Reducer = Callable[[Any, Any], Any]


class ThreadFold:
    """The state of one thread after its events up to ``head_seq``.

    * ``values`` - the state dict (``messages`` plus middleware keys);
    * ``next`` - the steps due to run; empty when the run is finished;
    * ``pending`` - interrupts raised and not yet answered, in the order raised;
    * ``step_interrupts`` / ``answers`` - every interrupt of the current step and the
      answers given, which a re-run of the step receives;
    * ``task_results`` - tool results of the current ``tools`` step, by tool call id;
    * ``started`` - tool calls that began and have no result yet (SPEC rule 9);
    * ``decided`` - answers given on this branch to tool calls, by call id, that no
      ``tool_started`` has used yet, and ``used`` - those a start used whose call has not
      finished (rules 19-20, ``handrail.review``);
    * ``votes`` - the approvals given to pending reviews that count them (rule 14:
      ``(answer, reviewer)`` by interrupt id, ``handrail.review.quorum``), and
      ``started_by`` - the id of who sent the input that started the run (rule 13).
    """

    __slots__ = (
        "_calls",
        "_message_index",
        "_messages_changed",
        "answered_ids",
        "answers",
        "base_seq",
        "chain",
        "chain_sealed",
        "checkpoint_at",
        "checkpoint_count",
        "checkpoint_kind",
        "checkpoint_seq",
        "checkpoint_writes",
        "created_at",
        "decided",
        "epoch",
        "head_seq",
        "last_step",
        "metadata",
        "next",
        "parent_checkpoint_seq",
        "pending",
        "reading_seq",
        "reducers",
        "started",
        "started_by",
        "step_interrupts",
        "superseded_ids",
        "task_results",
        "thread_id",
        "updated_at",
        "used",
        "values",
        "votes",
    )

    def __init__(self, thread_id: str, reducers: Mapping[str, Reducer] | None = None) -> None:
        self.thread_id = thread_id
        self.reducers: Mapping[str, Reducer] = reducers or {}
        self.values: dict[str, Any] = {"messages": []}
        self._message_index: dict[str, int] = {}
        self._messages_changed = 0  # counts changes to the message list (for ``_calls``)
        self._calls: tuple[int, tuple[AIMessage | None, list[dict[str, Any]]]] | None = None
        self.next: tuple[str, ...] = ()
        self.head_seq = 0
        self.checkpoint_seq = 0
        self.checkpoint_count = 0
        self.pending: dict[str, InterruptRecord] = {}
        self.step_interrupts: dict[str, InterruptRecord] = {}
        self.answers: dict[str, Any] = {}
        self.answered_ids: set[str] = set()
        self.superseded_ids: set[str] = set()
        self.task_results: dict[str, ToolMessage] = {}
        self.started: dict[str, StartedTool] = {}
        self.decided: dict[str, Answer] = {}
        self.used: dict[str, Answer] = {}
        self.votes: dict[str, list[tuple[Any, Any]]] = {}
        self.started_by: str | None = None
        self.created_at = 0.0
        self.updated_at = 0.0
        self.checkpoint_at = 0.0
        self.checkpoint_kind = ""
        self.parent_checkpoint_seq = 0
        self.checkpoint_writes: dict[str, Any] | None = None
        self.last_step: str | None = None
        self.epoch = ""
        self.metadata: dict[str, Any] = {}
        self.base_seq = 0  # the snapshot a reading started from; older checkpoints were pruned
        self.reading_seq = 0  # the event of the latest saved reading of this thread (0: none known)
        # the hash the next stored record chains to, and whether a sealed record came before
        # (``checkpoint/integrity.py``); kept by whoever reads or writes the stored records
        self.chain = GENESIS
        self.chain_sealed = False

    # Reading --------------------------------------------------------------------
    @property
    def messages(self) -> list[BaseMessage]:
        messages: list[BaseMessage] = self.values["messages"]
        return messages

    def position_of(self, message_id: str) -> int | None:
        """Where the message with this id is in ``messages``, if it is there."""
        return self._message_index.get(message_id)

    def pending_calls(self) -> tuple[AIMessage | None, list[dict[str, Any]]]:
        """:func:`pending_tool_calls` of the messages, worked out once per change to them.

        The list is shared with later callers: read it, never change it.
        """
        cached = self._calls
        if cached is not None and cached[0] == self._messages_changed:
            return cached[1]
        found = pending_tool_calls(self.messages)
        self._calls = (self._messages_changed, found)
        return found

    @property
    def checkpoint_id(self) -> str | None:
        """The id of the latest checkpoint, or None for a thread with no events."""
        return checkpoint_id_of(self.checkpoint_seq) if self.checkpoint_seq else None

    def public_values(self) -> dict[str, Any]:
        """The state as callers see it: private keys left out, lists copied; in a tools step
        that paused, the results of its calls that finished follow, in call order (as LangGraph)."""
        out = {key: value for key, value in self.values.items() if not key.startswith("_")}
        done, calls = self.task_results, self.pending_calls()[1] if self.pending and self.task_results else ()
        out["messages"] = [*out.get("messages", ()), *(done[c["id"]] for c in calls if c["id"] in done)]
        return out

    def state_view(self) -> dict[str, Any]:
        """The state as hooks see it: every key, with its own copy of the message list."""
        view = dict(self.values)
        view["messages"] = list(self.messages)
        return view

    def answers_for(self, task: str, *, gate: str | None = None) -> dict[int, Any]:
        """The answers a re-run of ``task`` gets for its ``interrupt()`` calls, by index.

        ``gate``: the name of the review gate, whose per-call reviews of a tool call are
        the executor's, not the tool's own ``interrupt()`` calls.
        """
        return {
            record.index: self.answers[record.id]
            for record in self.step_interrupts.values()
            if record.task == task
            and record.kind == "interrupt"
            and record.id in self.answers
            and (gate is None or record.source != gate or record.step != "tools")
        }

    def copy(self) -> ThreadFold:
        """An independent copy (values shallow-copied, message list copied)."""
        other = ThreadFold.__new__(ThreadFold)
        for name in ThreadFold.__slots__:
            setattr(other, name, getattr(self, name))
        other.values = dict(self.values)
        other.values["messages"] = list(self.messages)
        other._message_index = dict(self._message_index)
        other.pending = dict(self.pending)
        other.step_interrupts = dict(self.step_interrupts)
        other.answers = dict(self.answers)
        other.answered_ids = set(self.answered_ids)
        other.superseded_ids = set(self.superseded_ids)
        other.task_results = dict(self.task_results)
        other.started = dict(self.started)
        other.decided = dict(self.decided)
        other.used = dict(self.used)
        other.votes = {key: list(value) for key, value in self.votes.items()}
        other.metadata = dict(self.metadata)
        return other

    def adopt(self, past: ThreadFold, event: Event) -> None:
        """Apply a ``branch`` event: the state becomes ``past``, the log goes on."""
        if event.seq != self.head_seq + 1:
            raise SerializationError(
                f"thread {self.thread_id!r}: event {event.seq} follows event {self.head_seq}",
                thread_id=self.thread_id,
                seq=event.seq,
            )
        answered = self.answered_ids | past.answered_ids
        superseded = self.superseded_ids | past.superseded_ids | set(self.pending)
        previous_checkpoint = self.checkpoint_seq
        keep = (self.created_at, self.epoch, self.metadata, self.chain, self.chain_sealed)
        for name in ThreadFold.__slots__:
            setattr(self, name, getattr(past.copy(), name))
        self.created_at, self.epoch, self.metadata, self.chain, self.chain_sealed = keep
        self.answered_ids = answered
        self.superseded_ids = superseded - set(self.pending)
        # rule 20: answers belong to the branch they were given on; a new branch asks again
        self.decided = {}
        self.used = {}
        self.votes = {}
        self.head_seq = event.seq
        self.updated_at = event.created_at
        self.parent_checkpoint_seq = previous_checkpoint
        self.checkpoint_seq = event.seq
        self.checkpoint_count += 1
        self.checkpoint_at = event.created_at
        self.checkpoint_kind = "branch"
        self.checkpoint_writes = None

    # Advancing ------------------------------------------------------------------
    def apply(self, event: Event) -> None:
        """Advance the reading by one event (``branch`` events are handled by the loader)."""
        if event.seq != self.head_seq + 1:
            raise SerializationError(
                f"thread {self.thread_id!r}: event {event.seq} follows event {self.head_seq}; "
                "the log has a gap or a repeat",
                thread_id=self.thread_id,
                seq=event.seq,
            )
        try:
            _APPLY[event.kind](self, event.data, event)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SerializationError(
                f"cannot load thread {self.thread_id!r}, record {event.seq}: damaged "
                f"{event.kind} event ({type(exc).__name__}: {exc})",
                thread_id=self.thread_id,
                seq=event.seq,
            ) from None
        self.head_seq = event.seq
        if not self.created_at:
            self.created_at = event.created_at
        self.updated_at = event.created_at
        if event.kind in CHECKPOINT_KINDS:
            self.parent_checkpoint_seq = self.checkpoint_seq
            self.checkpoint_seq = event.seq
            self.checkpoint_count += 1
            self.checkpoint_at = event.created_at
            self.checkpoint_kind = event.kind
            self.checkpoint_writes = (
                {event.data["step"]: event.data.get("values")} if event.kind == "step" else None
            )

    def _apply_input(self, data: dict[str, Any], event: Event) -> None:
        metadata = data.get("metadata")
        if metadata:
            if not isinstance(metadata, dict):
                raise TypeError("metadata must be an object")
            for key in BOUND_METADATA:  # a log written before rule 21: its first binding holds
                if key in metadata and key in self.metadata and metadata[key] != self.metadata[key]:
                    metadata = {k: v for k, v in metadata.items() if k != key}
            self.metadata.update(metadata)
        self._apply_values(data["values"])
        self._end_step(as_next(data["next"]))
        self.last_step = None
        self.decided = {}  # a new run: no call of the last one is due any more
        self.used = {}
        self.started_by = reviewer_id(data.get("by"))  # rule 13: who started this run

    def _apply_step(self, data: dict[str, Any], event: Event) -> None:
        step = data["step"]
        if not isinstance(step, str):
            raise TypeError("step must be a string")
        if step == "tools":
            # the results join the conversation in call order, whatever order they finished in
            _, calls = self.pending_calls()
            results = [self.task_results[c["id"]] for c in calls if c["id"] in self.task_results]
            if results:
                self._apply_messages(results)
            self.decided = {}  # every call of the step has its result: no answer is left to use
            self.used = {}
        values = data.get("values")
        if values:
            self._apply_values(values)
        self._end_step(as_next(data["next"]))
        self.last_step = step

    def _apply_update(self, data: dict[str, Any], event: Event) -> None:
        self._apply_values(data["values"])
        if data.get("supersede", True):
            # A hand edit makes pending questions stale: the step asks again when it re-runs.
            self.superseded_ids.update(self.pending)
            self.pending = {}
            self.answers = {}
            self.step_interrupts = {}
            self.votes = {}
        self.next = as_next(data["next"])
        if data.get("as_node"):
            self.last_step = data["as_node"]

    def _apply_interrupt(self, data: dict[str, Any], event: Event) -> None:
        step = _str(data["step"])
        record = InterruptRecord(
            id=_str(data["id"]),
            step=step,
            task=_str(data.get("task", step)),
            index=int(data.get("index", 0)),
            kind=_str(data.get("kind", "interrupt")),
            value=data["value"],
            source=data.get("source"),
            seq=event.seq,
            created_at=event.created_at,
            terms=_terms(data.get("terms")),
        )
        self.pending[record.id] = record
        self.step_interrupts[record.id] = record
        if record.kind == "interrupt":
            self.started.pop(record.task, None)  # the task paused; it did not finish unseen
            used = self.used.pop(record.task, None)
            if used is not None:  # a tool that paused runs again on resume, under the same answer
                self.decided[record.task] = used

    def _apply_resume(self, data: dict[str, Any], event: Event) -> None:
        answers = data["answers"]
        if not isinstance(answers, dict):
            raise TypeError("answers must be an object")
        reviewer = data.get("reviewer")
        expired = frozenset(data.get("expired") or ())
        for interrupt_id, value in answers.items():
            record = self.pending.pop(interrupt_id, None)
            if record is None:
                raise ValueError(f"answer to interrupt {interrupt_id!r}, which is not pending")
            self.answers[interrupt_id] = value
            self.answered_ids.add(interrupt_id)
            votes = self.votes.pop(interrupt_id, [])
            # rule 14: the calls a count decided were approved by who approved their action
            approvers = (
                {c.call_id: c.approvers for c in count_votes(record.value, record.terms, votes)}
                if needs_count(record.terms)
                else None
            )
            # rule 19: the answer, bound to each call it decides and to what its reviewer saw
            for answer in answers_from(
                record.id,
                record.kind,
                record.source,
                record.value,
                value,
                reviewer,
                event.seq,
                terms=record.terms,
                approvers=approvers,
                expired=expired,
                withdrawn=bool(data.get("withdrawn")),
            ):
                self.decided[answer.call_id] = answer

    def _apply_approval(self, data: dict[str, Any], event: Event) -> None:
        interrupt_id = _str(data["interrupt"])
        if interrupt_id not in self.pending:
            raise ValueError(f"approval of interrupt {interrupt_id!r}, which is not pending")
        self.votes.setdefault(interrupt_id, []).append((data["answer"], data.get("reviewer")))

    def _apply_tools_planned(self, data: dict[str, Any], event: Event) -> None:
        calls = data["calls"]
        if not isinstance(calls, list):
            raise TypeError("calls must be a list of tool call ids")
        _, pending = self.pending_calls()
        proposed = {call.get("id"): call for call in pending}
        for task in calls:
            call = proposed.get(_str(task))
            if call is None:
                raise ValueError(
                    f"tools_planned names call {task!r}, which the last AI message does not propose"
                )
            action = _planned_action(call, self.decided.get(task))
            self.started[task] = StartedTool(
                task=task,
                name=str(action.get("name")),
                args=dict(action.get("args") or {}),
                run_id=data.get("run_id"),
                idempotent=False,
                seq=event.seq,
            )

    def _apply_tool_started(self, data: dict[str, Any], event: Event) -> None:
        task = _str(data["task"])
        args = data["args"] if "args" in data else self.proposed_args(task)
        if not isinstance(args, dict):
            raise TypeError("args must be an object")
        self.started[task] = StartedTool(
            task=task,
            name=_str(data["name"]),
            args=args,
            run_id=data.get("run_id"),
            idempotent=bool(data.get("idempotent", False)),
            seq=event.seq,
        )
        answer = self.decided.pop(task, None)  # rule 20: the start uses the answer up
        if answer is not None:
            self.used[task] = answer

    def proposed_args(self, task: str) -> Any:
        """The args the model proposed for call ``task`` (a start event omits them when equal)."""
        _, calls = self.pending_calls()
        for call in calls:
            if call.get("id") == task:
                return call.get("args")
        raise ValueError(f"tool_started for call {task!r}, which the last AI message does not propose")

    def _apply_tool_finished(self, data: dict[str, Any], event: Event) -> None:
        message = data["message"]
        if not isinstance(message, ToolMessage):
            raise TypeError("a tool_finished event must hold a ToolMessage")
        task = _str(data.get("task", message.tool_call_id))
        self.task_results[task] = message
        self.started.pop(task, None)
        self.decided.pop(task, None)
        self.used.pop(task, None)

    def _apply_failed(self, data: dict[str, Any], event: Event) -> None:
        _str(data["error"])  # a record for the audit trail: the state is what the run saved

    def _apply_branch(self, data: dict[str, Any], event: Event) -> None:
        raise ValueError("branch events are applied by the loader, which refolds the log")

    def _apply_snapshot(self, data: dict[str, Any], event: Event) -> None:
        raise ValueError("snapshot events start a reading; the loader begins there")

    def _end_step(self, next_steps: tuple[str, ...]) -> None:
        self.next = next_steps
        self.pending = {}
        self.step_interrupts = {}
        self.answers = {}
        self.task_results = {}
        self.votes = {}

    def restore_values(self, values: dict[str, Any]) -> None:
        """Hold ``values`` as the state (a restored reading's); its message list is indexed anew."""
        messages = values.setdefault("messages", [])
        # (checked by their types, indexed by their ids, in bulk: a reading holds thousands)
        kinds = {*map(type, messages)} if isinstance(messages, list) else {type(None)}
        if not all(issubclass(kind, BaseMessage) for kind in kinds):
            raise TypeError("the snapshot's messages must be a list of messages")
        self.values = values
        self._messages_changed += 1
        index = dict(zip(map(_id_of, messages), range(len(messages)), strict=True))
        index.pop(None, None)
        self._message_index = index

    def _apply_values(self, update: Mapping[str, Any]) -> None:
        if not isinstance(update, Mapping):
            raise TypeError("a state update must be an object")
        for key, value in update.items():
            if key == "messages":
                self._apply_messages(value)
            elif key in self.reducers and key in self.values:
                self.values[key] = self.reducers[key](self.values[key], value)
            else:
                self.values[key] = value

    def _apply_messages(self, update: Iterable[BaseMessage]) -> None:
        self._messages_changed += 1
        self._message_index = merge_messages_into(self.messages, self._message_index, update)


# what applies each kind of event (``branch`` is the loader's: see ``reading.advance``)
_APPLY: dict[str, Callable[[ThreadFold, dict[str, Any], Event], None]] = {
    name.removeprefix("_apply_"): method
    for name, method in vars(ThreadFold).items()
    if name.startswith("_apply_") and name not in ("_apply_values", "_apply_messages")
}


def _planned_action(call: dict[str, Any], answer: Answer | None) -> dict[str, Any]:
    """What a planned call will run: the edited action when its answer is an edit."""
    if answer is not None and answer.kind == "review" and answer.decision.get("type") == "edit":
        edited = answer.decision.get("edited_action")
        if isinstance(edited, dict):
            return edited
    return call


def _terms(raw: Any) -> dict[str, Any] | None:
    if raw is not None and not isinstance(raw, dict):
        raise TypeError("an interrupt's terms must be an object")
    return raw


_id_of = attrgetter("id")


def as_next(value: Any) -> tuple[str, ...]:
    """A stored ``next`` as the fold keeps it: a tuple of step names (TypeError otherwise)."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise TypeError("next must be a list of step names")
    return tuple(value)


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, found {type(value).__name__}")
    return value
