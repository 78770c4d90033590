"""Putting a run's append after answers another writer recorded meanwhile (SPEC rule 8).

One writer per thread: every append names the head it expects, and the store refuses a
stale one. But a reviewer answering one review (``Agent.decide``: a ``resume`` event,
nothing run) while a run executes another call of the same thread is not a competing
writer: the answer touches only its own review. So when an append is refused, the run
reads what was added; when every added event is an answer to reviews this append does
not answer, it reads the thread again, puts its own events after those answers, seals
them anew and appends again. Anything else (another run's step, a state update, an
answer to a review this append answers too) is a real conflict, refused as before.

Why it is safe: an answer only records a decision (the pending review becomes answered,
its call is bound to that answer, ``handrail.review``); nothing it does depends on the
run's events, nor theirs on it, so both orders give the same thread. The answered calls
then run in this run's tools step or the next run's, once: a run's plan (rule 9) names
them before any acts.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from handrail.checkpoint.base import StoredEvent
from handrail.runtime._fold import ThreadFold
from handrail.runtime.effects import Effect, Env, StoreCall
from handrail.runtime.events import Event, decode_event, encode_event
from handrail.runtime.reading import load

__all__ = ["rebase"]

Gen = Generator[Effect, Any, Any]

_MOVABLE = frozenset(
    {"interrupt", "resume", "tools_planned", "tool_started", "tool_finished", "step", "failed"}
)
"""Kinds of our own events that can be put after answers (not input, updates, forks)."""


def rebase(env: Env, events: list[Event], expected: int) -> Gen:
    """After a refused append of ``events`` after event ``expected``: the rows to append
    and the head to expect now, or None when the refusal is a real conflict.

    On success the run's fold is the thread with the other writer's answers and then our
    events (updated in place: the run holds it).
    """
    fold = env.fold
    assert fold is not None
    if any(e.kind not in _MOVABLE for e in events):
        return None
    read = yield StoreCall("read", (env.thread_id,), {"after_seq": expected})
    added = read.events
    if not added or read.record is None or read.record.epoch != fold.epoch:
        return None
    if any(row.kind not in ("resume", "approval") for row in added):
        return None
    ours = {key for e in events if e.kind == "resume" for key in e.data["answers"]}
    theirs = {key for row in added for key in _answered(decode_event(row, env.thread_id))}
    if ours & theirs:
        return None  # both answer one review: the store's refusal stands (rule 8)
    base: ThreadFold = yield from load(Env(env.spec, env.store, env.thread_id, trust_cache=False))
    if base.epoch != fold.epoch or base.head_seq != expected + len(added):
        return None  # more changed since: the caller tries again, or gives up
    head = base.head_seq
    try:
        for event in events:
            event.seq = base.head_seq + 1
            base.apply(event)
    except Exception:
        return None  # our events do not read the same after theirs: a real conflict
    stored: list[StoredEvent] = []
    chain = base.chain
    for event in events:
        row, chain = encode_event(event, env.thread_id, chain)
        stored.append(row)
    base.chain, base.chain_sealed = chain, True
    keep = (fold.reading_seq,)
    for name in ThreadFold.__slots__:  # the run holds this fold: it becomes the rebased one
        setattr(fold, name, getattr(base, name))
    (fold.reading_seq,) = keep
    return stored, head


def _answered(event: Event) -> list[str]:
    """The reviews an answer or a vote is about."""
    return [event.data["interrupt"]] if event.kind == "approval" else list(event.data["answers"])
