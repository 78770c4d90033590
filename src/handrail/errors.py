"""The errors handrail raises.

Every error is a :class:`HandrailError`. Errors caused by bad input are also
:class:`ValueError` subclasses, so code written against LangChain's ``ValueError``
keeps working. Each message says what was wrong and what was expected.

Example::

    from handrail.errors import InvalidDecisionError

    try:
        agent.invoke(Command(resume={"decisions": []}), config)
    except InvalidDecisionError as exc:
        print(exc)  # expected 1 decision (one per action request, in order), got 0
"""

from __future__ import annotations

from datetime import datetime

__all__ = [
    "AlreadyAnsweredError",
    "ConfigurationError",
    "ConflictError",
    "HandrailError",
    "InvalidDecisionError",
    "InvalidInputError",
    "NotAllowedError",
    "PendingInterruptError",
    "SerializationError",
]


class HandrailError(Exception):
    """Base class of every error raised by handrail."""


class ConfigurationError(HandrailError, ValueError):
    """An agent, middleware or run was configured wrongly.

    Raised for a bad ``interrupt_on`` entry, duplicate tool or middleware names, a
    missing ``thread_id`` while a checkpointer is set, or an interrupt raised by an
    agent that has no checkpointer (SPEC rule 7).
    """


class InvalidDecisionError(HandrailError, ValueError):
    """A resume (``Command(resume=...)``) was refused before anything was saved.

    The thread is unchanged and the same interrupt can be answered again (SPEC rule 5).
    ``interrupt_id`` names the interrupt whose answer was refused and
    ``decision_index`` (0-based) the decision within a batch, when the fault is in one.
    """

    def __init__(
        self, message: str, *, interrupt_id: str | None = None, decision_index: int | None = None
    ) -> None:
        super().__init__(message)
        self.interrupt_id = interrupt_id
        self.decision_index = decision_index


class InvalidInputError(HandrailError, ValueError):
    """Input, a state update or a call argument was malformed; nothing was saved.

    The message says what was wrong and what was expected, e.g. an unknown state key,
    a message without a role, an unknown stream mode or checkpoint id.
    """


class PendingInterruptError(HandrailError, ValueError):
    """New input was sent to a thread that is waiting for a review.

    Answer the pending interrupts with ``Command(resume=...)`` first; handrail never
    drops a pending review silently.
    """


class ConflictError(HandrailError):
    """Another writer changed the thread first (SPEC rule 8).

    Two resumes of the same interrupt end with exactly one applied; the other gets this
    error, which names the thread and the interrupt, and nothing of it is saved.
    """

    def __init__(
        self,
        message: str,
        *,
        thread_id: str | None = None,
        interrupt_ids: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.interrupt_ids = interrupt_ids


class NotAllowedError(HandrailError, PermissionError):
    """This reviewer may not answer this review (SPEC rule 12); nothing was saved.

    Raised when a policy's ``reviewers`` roles exclude the reviewer who answers (or
    when an answer names no reviewer at all). ``interrupt_id`` names the review,
    ``reviewer`` who tried and ``roles`` the roles that may decide it. The service
    answers it with a 403.
    """

    def __init__(
        self,
        message: str,
        *,
        interrupt_id: str | None = None,
        reviewer: str | None = None,
        roles: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.interrupt_id = interrupt_id
        self.reviewer = reviewer
        self.roles = roles


class AlreadyAnsweredError(ConflictError):
    """The interrupt was answered already (SPEC rule 8); says by whom, when and how.

    Raised by :meth:`~handrail.Agent.decide` in place of a plain
    :class:`ConflictError` when the earlier answer is found in the audit trail.
    """

    def __init__(
        self,
        message: str,
        *,
        thread_id: str,
        interrupt_id: str,
        answered_by: str | None,
        answered_at: datetime,
        channel: str | None,
    ) -> None:
        super().__init__(message, thread_id=thread_id, interrupt_ids=(interrupt_id,))
        self.answered_by = answered_by
        self.answered_at = answered_at
        self.channel = channel


class SerializationError(HandrailError):
    """A value could not be stored, or a stored record could not be loaded (SPEC rule 10).

    Saved data is JSON with named types; an unknown type or a damaged record fails
    loudly with the thread and record named, and never loads as something else.
    """

    def __init__(self, message: str, *, thread_id: str | None = None, seq: int | None = None) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.seq = seq
