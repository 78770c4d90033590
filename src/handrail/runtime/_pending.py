"""What a thread waits on: reviews asked and not answered, tool calls not finished.

The fold (``_fold.py``) keeps these by id as it reads the log: an :class:`InterruptRecord`
for each interrupt raised in the current step (``ThreadFold.pending`` holds those not
answered yet), a :class:`StartedTool` for each tool call that began and has no result
(SPEC rule 9), and :func:`pending_tool_calls` are the calls of the last AI message that
have no result yet.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from handrail.messages import AIMessage, BaseMessage, ToolMessage
from handrail.review.terms import expires_at

__all__ = ["InterruptRecord", "StartedTool", "pending_tool_calls"]


class InterruptRecord:
    """An interrupt raised in the current step. ``index`` orders the calls in a task.

    A value: never changed once made. ``stored`` is its inbox payload, which the write
    path makes once and keeps in an equal record (:meth:`with_stored`); it takes no part
    in equality.
    """

    __slots__ = (
        "created_at",
        "id",
        "index",
        "kind",
        "seq",
        "source",
        "step",
        "stored",
        "task",
        "terms",
        "value",
    )
    _COMPARED = ("id", "step", "task", "index", "kind", "value", "source", "seq", "created_at", "terms")

    def __init__(
        self,
        id: str,
        step: str,
        task: str,
        index: int,
        kind: str,
        value: Any,
        source: str | None,
        seq: int,
        created_at: float,
        stored: bytes | None = None,
        terms: dict[str, Any] | None = None,
    ) -> None:
        self.id, self.step, self.task, self.index, self.kind = id, step, task, index, kind
        self.value, self.source, self.seq, self.created_at = value, source, seq, created_at
        self.stored = stored
        self.terms = terms  # what the review was asked under (``handrail.review.terms``)

    def with_stored(self, stored: bytes) -> InterruptRecord:
        """This record, carrying its inbox payload ``stored``."""
        return InterruptRecord(
            self.id,
            self.step,
            self.task,
            self.index,
            self.kind,
            self.value,
            self.source,
            self.seq,
            self.created_at,
            stored,
            self.terms,
        )

    @property
    def expires_at(self) -> float | None:
        """When this review expires unanswered (rule 15), or None."""
        return expires_at(self.terms, self.created_at)

    def __eq__(self, other: object) -> bool:
        if type(other) is not InterruptRecord:
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self._COMPARED)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._COMPARED)
        return f"InterruptRecord({fields})"


class StartedTool(NamedTuple):
    """A ``tool_started`` event with no ``tool_finished`` after it (yet)."""

    task: str
    name: str
    args: dict[str, Any]
    run_id: str | None
    idempotent: bool
    seq: int


def pending_tool_calls(messages: list[BaseMessage]) -> tuple[AIMessage | None, list[dict[str, Any]]]:
    """The last AI message and those of its tool calls that have no ToolMessage yet.

    Malformed calls (``invalid_tool_calls``) count too: each gets an error result the
    model can correct.
    """
    answered: set[str] = set()
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            answered.add(message.tool_call_id)
        elif isinstance(message, AIMessage):
            calls: list[dict[str, Any]] = [tc for tc in message.tool_calls if tc.get("id") not in answered]  # type: ignore[misc]
            if message.invalid_tool_calls:
                calls += [
                    {**tc, "invalid": True}
                    for tc in message.invalid_tool_calls
                    if tc.get("id") not in answered
                ]
            return message, calls
        else:
            return None, []
    return None, []
