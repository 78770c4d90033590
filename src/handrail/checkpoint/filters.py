"""What a listing or a claim of the store protocol takes: the filters, and how metadata matches.

:class:`ThreadFilter` picks threads (``list_threads``), :class:`PendingFilter` pending
reviews (``list_pending``), :class:`ClaimFilter` the threads of some agents (a worker's
``claim_queued``, and the ``owners`` of every listing, deletion records included).
A metadata filter is a subset match (:func:`metadata_matches`). Re-exported by
:mod:`handrail.checkpoint.base`, where the protocol that takes them lives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["ClaimFilter", "PendingFilter", "PendingOrder", "ThreadFilter", "ThreadStatus", "metadata_matches"]

ThreadStatus = Literal["idle", "running", "interrupted"]
"""A thread's status: a run is going on, it waits for a review, or neither."""

PendingOrder = Literal["oldest", "newest"]
"""The inbox's order: by creation time, ``"oldest"`` first (the default) or ``"newest"`` first."""


@dataclass(frozen=True, slots=True)
class ClaimFilter:
    """Which queued threads a worker takes: those whose metadata ``key`` is one of
    ``values`` and, with ``or_missing``, those without ``key`` at all.

    A thread's first input binds it to its agent under ``"assistant_id"`` (SPEC rule
    21): a worker or service takes and lists the threads bound to the names it hosts,
    and its first agent also those bound to none. A value that is not a string never
    matches.
    """

    key: str
    values: tuple[str, ...]
    or_missing: bool = False

    def matches(self, metadata: Mapping[str, Any]) -> bool:
        """Whether a thread with ``metadata`` passes the filter."""
        if self.key not in metadata:
            return self.or_missing
        return metadata[self.key] in self.values


@dataclass(frozen=True, slots=True)
class PendingFilter:
    """Which pending reviews to list. Every field left as None matches everything.

    ``older_than`` is a number of seconds; ``metadata`` must be a subset of the
    thread's metadata. Items come in ``(created_at, thread_id, interrupt_id)`` order,
    ascending with ``order="oldest"`` and descending with ``order="newest"`` (a backward
    walk of the same index); ``after`` is that key of the last item of the previous page,
    and a page holds only the items past it in the chosen order. ``owners``: only the
    threads it passes (the agents a process hosts, :class:`ClaimFilter`).
    """

    tool: str | None = None
    thread_id: str | None = None
    older_than: float | None = None
    metadata: Mapping[str, Any] | None = None
    kind: str | None = None
    after: tuple[float, str, str] | None = None
    limit: int = 50
    order: PendingOrder = "oldest"
    owners: ClaimFilter | None = None


@dataclass(frozen=True, slots=True)
class ThreadFilter:
    """Which threads to list (newest update first); ``owners`` as :class:`PendingFilter`'s."""

    metadata: Mapping[str, Any] | None = None
    status: ThreadStatus | None = None
    updated_after: float | None = None
    updated_before: float | None = None
    limit: int = 100
    offset: int = 0
    owners: ClaimFilter | None = None


def metadata_matches(wanted: Mapping[str, Any] | None, actual: Mapping[str, Any]) -> bool:
    """Whether every key of ``wanted`` is in ``actual`` with an equal value."""
    if not wanted:
        return True
    return all(key in actual and actual[key] == value for key, value in wanted.items())
