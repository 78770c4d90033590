"""Rebuilding a thread's derived rows from its log (``handrail audit verify --repair``).

A store keeps, beside each log, rows derived from it - the thread's row, its pending
reviews and their index rows - sealed when written and checked when read
(``checkpoint/seals.py``). When they are found damaged, the log still holds the truth:
:func:`derive_from_log` folds a log, checked against its hash chain, into the record
the runtime writes (``commit.thread_record``), and the store's ``repair_thread`` keeps
the rows that are sound and rewrites the others from it (``checkpoint/_repair.py``).

Folding needs no agent: the thread row holds the status, the metadata, the times and
the pending reviews, none of which depends on the state's reducers.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from handrail.checkpoint.base import BaseCheckpointSaver, Derived, StoredEvent
from handrail.checkpoint.integrity import is_sealed
from handrail.runtime.commit import thread_record
from handrail.runtime.reading import checked_log, fold_events
from handrail.runtime.spec import AgentSpec

__all__ = ["derive_from_log", "repair_thread"]


def derive_from_log(thread_id: str, spec: AgentSpec | None = None) -> Callable[[list[StoredEvent]], Derived]:
    """What ``repair_thread`` asks of the runtime: the record a log stands for.

    The log is checked against its hash chain first (SPEC rule 18): a broken log raises
    :class:`~handrail.errors.SerializationError` naming its first bad record, and no row
    is rebuilt from it. The record gets a new epoch (a store keeps its row's own when the
    row is sound); its head hash is the chain's value after the log's last record, for a
    log whose last record is sealed (none otherwise, as an append gives it).
    """

    def derive(stored: list[StoredEvent]) -> Derived:
        events, walked = checked_log(thread_id, stored)
        fold = fold_events(spec or _folding_spec(), thread_id, events)
        fold.epoch = uuid.uuid4().hex
        head = walked.next_prev if stored and is_sealed(stored[-1].payload) else None
        return Derived(thread_record(fold), head)

    return derive


def repair_thread(
    saver: BaseCheckpointSaver, thread_id: str, spec: AgentSpec | None = None, *, dry_run: bool = False
) -> list[str]:
    """Rebuild the thread's damaged derived rows from its log; one line per change (none:
    nothing was damaged; with ``dry_run``, what a repair would change, nothing written).
    Raises :class:`~handrail.errors.SerializationError` when the log itself fails its
    checks, or when the rows must not be rebuilt from it (see
    ``BaseCheckpointSaver.repair_thread``), and ``NotImplementedError`` for a store that
    cannot rebuild rows."""
    return saver.repair_thread(thread_id, derive_from_log(thread_id, spec), dry_run=dry_run)


def _folding_spec() -> AgentSpec:
    """An agent with no tools and no middleware: enough to fold a log (no reducers)."""
    from handrail.models import ScriptedModel

    return AgentSpec(
        name=None, model=ScriptedModel([]), tools={}, middleware=[], system_prompt=None, store=None
    )
