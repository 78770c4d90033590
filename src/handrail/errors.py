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

import math
import reprlib
from datetime import UTC, datetime

__all__ = [
    "AlreadyAnsweredError",
    "ConfigurationError",
    "ConflictError",
    "GrantSpentError",
    "GraphRecursionError",
    "HandrailError",
    "InvalidDecisionError",
    "InvalidInputError",
    "NotAllowedError",
    "PendingInterruptError",
    "ReviewExpiredError",
    "SerializationError",
    "StoreUnavailableError",
    "short_repr",
    "stored_time",
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


class ReviewExpiredError(ConflictError):
    """The review expired unanswered (SPEC rule 15) and can no longer be answered.

    ``expired_at`` (an aware ``datetime``) says when it expired; once the expiry has been
    recorded (by a sweep, ``invoke(None, config)``), when that was. The policy's
    ``on_expiry`` decides it. The service answers it with a 409.
    """

    def __init__(self, message: str, *, thread_id: str, interrupt_id: str, expired_at: datetime) -> None:
        super().__init__(message, thread_id=thread_id, interrupt_ids=(interrupt_id,))
        self.expired_at = expired_at


class GrantSpentError(ConflictError):
    """A grant could not cover a call (SPEC rule 16): it was revoked, lapsed, or another
    call took its last use first. Nothing of the append was saved; the run asks a person
    instead. ``grant_id`` names the grant."""

    def __init__(self, message: str, *, thread_id: str, grant_id: str) -> None:
        super().__init__(message, thread_id=thread_id)
        self.grant_id = grant_id


class SerializationError(HandrailError):
    """A value could not be stored, or a stored record could not be loaded (SPEC rule 10).

    Saved data is JSON with named types; an unknown type or a damaged record fails
    loudly with the thread and record named, and never loads as something else.
    """

    def __init__(self, message: str, *, thread_id: str | None = None, seq: int | None = None) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.seq = seq


class StoreUnavailableError(HandrailError, ConnectionError):
    """The store's database server cannot be reached; nothing was read or saved.

    The message names the server (host and port) and the reason it gave, or the
    network's, e.g. ``cannot connect to PostgreSQL at 127.0.0.1:5433: ... Connection
    refused``; ``host`` and ``port`` hold them too.
    """

    def __init__(self, message: str, *, host: str | None = None, port: str | None = None) -> None:
        super().__init__(message)
        self.host = host
        self.port = port


_SHORT = reprlib.Repr()
_SHORT.maxlevel = 3
_SHORT.maxstring = 60
_SHORT.maxother = 60
_SHORT.maxdict = _SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxset = 6


def short_repr(value: object, limit: int = 80) -> str:
    """A ``repr`` of a caller's value for an error message: bounded in depth and length.

    Never recurses into a deep value nor copies a huge one into the message.
    """
    try:
        text = _SHORT.repr(value)
    except Exception:  # a value whose own __repr__ fails still gets a message
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def stored_time(seconds: float, thread_id: str, record: str, seq: int | None = None) -> datetime:
    """A stored time (epoch seconds) as an aware UTC datetime; an impossible one is damage.

    ``record`` names the record in the error (``"record 12"``, ``"pending interrupt X"``).
    """
    try:
        if not math.isfinite(seconds) or not 0 <= seconds < _YEAR_10000:
            raise ValueError(f"{seconds!r} is not a time between 1970 and 9999")
        return datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError, TypeError) as exc:
        raise SerializationError(
            f"cannot load thread {thread_id!r}, {record}: damaged time ({exc})", thread_id=thread_id, seq=seq
        ) from None


_YEAR_10000 = 253402300800.0


class GraphRecursionError(HandrailError, RecursionError):
    """A run took more steps than ``config["recursion_limit"]`` allows (LangGraph's name).

    Every step done so far is saved; raise the limit and ``invoke(None, config)`` to go on.
    """
