"""The write path: how a run's events reach the store.

The loop never writes to the store itself. It hands its events to :func:`buffer`, which
applies them to the run's fold at once, and yields :class:`Persist` (:func:`flush`) when
the buffer must be written. Every append a run makes follows these rules.

Rule 1 - When a run writes. Buffered events go to the store in one append when the loop
flushes: before anything that acts on the world (a tool call, a model call, a hook of
middleware that is not known to be pure) and when the run stops. So every step is saved
before a step with effects begins (SPEC rule 7), in as few commits as that allows. Every
append is confirmed by the store before the run goes on (issue 12).

Rule 2 - What is sealed. Each stored event is sealed to the one before it: its hash
covers its thread, number, kind, time and bytes and the previous record's hash
(``checkpoint/integrity.py``), so the log is a chain whose head the thread's row holds.
A saved reading is sealed on its own, and holds the chain's hash at its event.

Rule 3 - One writer. An append names the head it follows and the thread's epoch; the
store refuses it when another writer moved the thread first (SPEC rule 8). An append
refused for answers another writer recorded meanwhile, to reviews it does not answer,
is put after them (``_rebase.py``), up to ``_REBASES`` times; any other refusal stops
the run with a ConflictError in the run's terms, and nothing of the append is saved.
After a failed append, or a failure while preparing one, the run is *broken*: its fold
may hold events the store will not, and it writes nothing more.

Rule 4 - What is durable. Every append is committed, so a process that dies loses
nothing saved. Only some also wait for the disk (an fsync): the one that records the
tool calls a step is about to run (rule 9 must hold after a power cut too: a call that
may have acted is on disk first), the one that holds an answer or an approval (a
person's decision is on disk even when every call was rejected and none acts), the one
that claims the run once it acts, the run's last (a pause or an answer is never lost
once ``invoke`` returns) and those asked for with ``durable=True``. The appends in
between - a tool's result, the state before a model call - need not: a store writes its
log in order, so the next durable append makes them durable too, and a power cut before
it rolls the thread back to the recorded calls, which come back as ``outcome_unknown``
reviews, never silently run again. That is two waits for the disk per review cycle.

Rule 5 - When a run claims. A run claims the thread in its first append that holds
input, planned calls or a started tool, and ends its claim in its last, in the same
commits (liveness costs no commit of its own, rule 9). If its process dies before the
run ends, the claim lapses with it and a worker takes the thread over (issue 24). A
claim made with input alone need not wait for the disk: a power cut that loses it loses
the input too, and there is then nothing to take over.

Rule 6 - The thread's row. Each append replaces the thread's row with the projection of
the fold after it (:func:`thread_record`): head, status, pending reviews and their inbox
payloads, metadata. Its time is the time of its last event, except that an append that
need not wait for the disk keeps the time of the run's previous append while the status
is the same (the row tells when a run started, paused or finished).

Rule 7 - What rides on an append. The grants an answer gives (rule 16: born with it),
the feed's notices of reviews asked and answered and of the run's end (``_notices.py``)
and, for answers recorded for a worker to run (``Agent.decide``), the thread's place in
the queue.

Rule 8 - When a reading is saved. A run's last append also saves the whole reading of
the thread (``_fold_codec.py``) once twice as many events were added since the last
saved one as the thread has messages, at least ``READING_MIN`` and at most
``READING_EVERY``: a new process then folds at most that many (SPEC §6). A reading
costs about as much to write as the thread has messages, so the interval grows with it
and the writes cost the same per event (about 1 µs) whatever the thread's length; a
cold load costs about a reading's decoding plus that many events, small threads
included.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass

from handrail.checkpoint.base import (
    Append,
    PendingReview,
    StoredEvent,
    ThreadRecord,
    ThreadStatus,
)
from handrail.checkpoint.grants import GrantChange, GrantRecord
from handrail.errors import ConflictError
from handrail.messages import BaseMessage, new_id
from handrail.review.grants import records_from as grant_records
from handrail.runtime._fold import ThreadFold
from handrail.runtime._fold_codec import saved_reading
from handrail.runtime._notices import notices_of
from handrail.runtime._pending import InterruptRecord
from handrail.runtime._rebase import rebase
from handrail.runtime.effects import Effect, Env, Gen, drive_async, drive_sync
from handrail.runtime.events import (
    Event,
    encode_event,
    review_payload,
    review_record,
    tools_named_by,
)

__all__ = [
    "READING_EVERY",
    "READING_MIN",
    "Persist",
    "buffer",
    "flush",
    "on_first_save",
    "reset_first_save",
    "saved_reading",
    "thread_record",
    "thread_status",
]

_CLAIMING = frozenset({"input", "tools_planned", "tool_started"})  # what makes a run claim (rule 5)
_DURABLE_KINDS = frozenset({"tools_planned", "resume", "approval"})  # calls about to act; a person's answer
_REBASES = 3  # how often an append refused for another writer's answers is put after them (rule 3)
READING_EVERY = 400  # rule 8
READING_MIN = 64
_WITH_MESSAGES = frozenset({"input", "step", "update", "tool_finished"})  # events that may add messages


@dataclass(slots=True)
class Persist(Effect):
    """Add events to the thread (applying them to the run's fold at once).

    Events are buffered and written in one append when ``flush`` is set (rule 1); the
    other fields say what else the append does (rules 4, 5 and 7).

    A ``step`` or ``update`` event whose ``next`` is None gets it computed here, after its
    values are applied, from the plan (so routing sees the state the step produced).
    """

    events: list[Event]
    flush: bool = False
    release: bool = False  # the run's last write: end its claim in the same commit
    durable: bool = False  # wait for the disk even if nothing below asks for it
    queue: bool = False  # answers recorded for a worker to run (``Agent.decide``): queue the thread
    failed: bool = False  # the run's last write, made as it stops on an error

    def _take(self, env: Env) -> tuple[list[Event], list[StoredEvent], int] | None:
        """Prepare, and when flushing hand back what to append (emptying the buffer)."""
        buffer(env, self.events)
        if not self.flush or not env.buffer:
            return None
        try:
            events, env.buffer = env.buffer, []
            fold = env.fold
            assert fold is not None
            stored = []
            for event in events:  # each record sealed to the one before it
                row, fold.chain = encode_event(event, env.thread_id, fold.chain)
                stored.append(row)
            fold.chain_sealed = True
            if env.fold is not None and env.fold.pending:
                _share_review_payloads(env.fold, events, stored, same=env.store.in_process)
            return events, stored, env.buffer_from
        except BaseException:
            env.broken = True  # the fold may hold events the store will not: stop here
            raise

    def _record(self, env: Env, durable: bool) -> ThreadRecord:
        """The thread row; the steps between a run's durable commits keep its time."""
        fold = env.fold
        assert fold is not None
        last = env.last_record
        kept = not durable and last is not None and last.status == thread_status(fold)
        try:
            if fold.pending:
                _make_review_payloads(fold)
            return thread_record(fold, updated_at=last.updated_at if kept and last else None)
        except BaseException:
            env.broken = True  # the buffer is already taken: stop here
            raise

    def _conflict(self, env: Env, events: list[Event], exc: ConflictError) -> ConflictError:
        answered = tuple(
            dict.fromkeys(
                [i for e in events if e.kind == "resume" for i in e.data["answers"]]
                + [e.data["interrupt"] for e in events if e.kind == "approval"]
            )
        )
        if answered:
            return ConflictError(
                f"thread {env.thread_id!r}: interrupt {', '.join(answered)} was answered by another "
                "writer first; nothing of this resume was saved",
                thread_id=env.thread_id,
                interrupt_ids=answered,
            )
        return ConflictError(
            f"thread {env.thread_id!r} was changed by another writer during this run; the run "
            f"stopped before saving its next step ({exc})",
            thread_id=env.thread_id,
        )

    def _liveness(self, env: Env, events: list[Event]) -> tuple[str | None, str | None]:
        """The run to claim and/or release in this append (rule 5)."""
        acting = any(e.kind in _CLAIMING for e in events)
        claim = env.run_id if not env.claimed and acting else None
        release = env.run_id if self.release and (env.claimed or claim) else None
        return claim, release

    def _durable(self, events: list[Event], claim: str | None) -> bool:
        """Whether this append waits for the disk (rule 4; a claim with input alone need not)."""
        acted = claim is not None and any(e.kind != "input" for e in events if e.kind in _CLAIMING)
        return self.durable or self.release or acted or any(e.kind in _DURABLE_KINDS for e in events)

    def _prepared(self, env: Env) -> tuple[list[Event], Append] | None:
        """The events to write and the append to hand the store, or None: nothing to write."""
        taken = self._take(env)
        if taken is None:
            return None
        events, stored, expected = taken
        return events, self._change(env, events, stored, expected)

    def _change(self, env: Env, events: list[Event], stored: list[StoredEvent], expected: int) -> Append:
        """The append of ``events`` (``stored``: their rows) after event ``expected``."""
        claim, release = self._liveness(env, events)
        durable = self._durable(events, claim)
        record = self._record(env, durable)
        grants = _grant_change(env, events)  # rule 16: born with the answer that gives them
        notices = notices_of(env, events, record, last=self.release, failed=self.failed)
        fold = env.fold
        try:
            reading = (
                saved_reading(fold) if self.release and fold is not None and _reading_due(fold) else None
            )
            return Append(
                stored,
                expected_seq=expected,
                record=record,
                claim=claim,
                release=release,
                durable=durable,
                reading=reading,
                notices=notices,
                queue=self.queue,
                grants=grants,
            )
        except BaseException:
            env.broken = True  # the buffer is already taken: stop here
            raise

    def _failed(self, env: Env, events: list[Event], exc: BaseException) -> BaseException:
        """The run cannot go on after a failed append; a conflict is told in the run's terms."""
        env.broken = True
        env.conflicted = isinstance(exc, ConflictError)
        return self._conflict(env, events, exc) if isinstance(exc, ConflictError) else exc

    def _appended(self, env: Env, change: Append) -> None:
        env.appends += 1
        if env.appends == 1:
            saved = _ON_FIRST_SAVE.get()
            if saved is not None:
                saved()
        env.last_record = change.record
        if change.reading is not None and env.fold is not None:
            env.fold.reading_seq = change.reading.seq
        if change.claim is not None:
            env.claimed = True
        if change.release is not None:
            env.claimed = False

    def run_sync(self, env: Env) -> None:
        prepared = self._prepared(env)
        if prepared is None:
            return
        events, change = prepared
        for attempt in range(_REBASES + 1):
            try:
                env.store.append(env.thread_id, change)
                break
            except ConflictError as exc:
                moved = drive_sync(self._rebased(env, events, change), env) if attempt < _REBASES else None
                if moved is None:
                    raise self._failed(env, events, exc) from None
                change = self._change(env, events, *moved)
            except BaseException as exc:
                error = self._failed(env, events, exc)
                if error is exc:
                    raise
                raise error from None
        self._appended(env, change)

    def _rebased(self, env: Env, events: list[Event], change: Append) -> Gen:
        return rebase(env, events, change.expected_seq)

    async def run_async(self, env: Env) -> None:
        if env.lock is None:  # one coroutine drives the run: nothing to serialise
            await self._write_async(env)
            return
        async with env.lock:  # concurrent tool calls: one append at a time, in order
            await self._write_async(env)

    async def _write_async(self, env: Env) -> None:
        prepared = self._prepared(env)
        if prepared is None:
            return
        events, change = prepared
        for attempt in range(_REBASES + 1):
            try:
                await env.store.aappend(env.thread_id, change)
                break
            except ConflictError as exc:
                rebase = self._rebased(env, events, change)
                moved = await drive_async(rebase, env) if attempt < _REBASES else None
                if moved is None:
                    raise self._failed(env, events, exc) from None
                change = self._change(env, events, *moved)
            except BaseException as exc:
                error = self._failed(env, events, exc)
                if error is exc:
                    raise
                raise error from None
        self._appended(env, change)


_ON_FIRST_SAVE: ContextVar[Callable[[], None] | None] = ContextVar("handrail_on_first_save", default=None)


def on_first_save(callback: Callable[[], None] | None) -> Token[Callable[[], None] | None]:
    """Call ``callback`` when a run started from this context (a task created after this
    call copies it) first saves something: from then on its input is on record, and if its
    process dies a worker takes the thread over. The service answers ``runs.create`` then.
    Returns the token to undo it with ``reset_first_save``."""
    return _ON_FIRST_SAVE.set(callback)


def reset_first_save(token: Token[Callable[[], None] | None]) -> None:
    """Undo :func:`on_first_save`."""
    _ON_FIRST_SAVE.reset(token)


def flush(*, last: bool = False, failed: bool = False) -> Persist:
    """The effect that writes whatever the run has buffered (``last``: the run ends here).

    ``failed``: the run stops on an error. Every append is confirmed by the store before
    the run goes on: an append sent without waiting, confirmed by whichever caller read
    the thread next, let a parked run's next append overtake it (issue 12), and is gone.
    """
    return Persist([], flush=True, release=last, failed=failed)


def _reading_due(fold: ThreadFold) -> bool:
    interval = min(READING_EVERY, max(READING_MIN, 2 * len(fold.values.get("messages") or ())))
    return fold.head_seq - fold.reading_seq >= interval


def buffer(env: Env, events: list[Event]) -> None:
    """Add events to the run's buffer and apply them to its fold, without writing them.

    The loop calls this directly for events that need no commit yet (no effect round
    trip); :class:`Persist` does the same and then writes the buffer when it flushes.
    """
    if env.broken:
        raise ConflictError(
            f"thread {env.thread_id!r}: an earlier append of this run failed; it cannot continue",
            thread_id=env.thread_id,
        )
    if not events:
        return
    fold = env.fold
    assert fold is not None
    try:
        if not env.buffer:
            env.buffer_from = fold.head_seq
        now = time.time()
        for event in events:
            event.seq = fold.head_seq + 1
            event.created_at = now
            _assign_message_ids(event)
            if event.kind == "resume":  # what was asked, for the notice of its answer (``_notices.py``)
                asked = fold.pending
                env.asked.update((i, asked[i]) for i in event.data["answers"] if i in asked)
            if event.kind in ("step", "update") and event.data.get("next") is None:
                jump = event.data.pop("jump_to", None)
                event.data["next"] = []
                fold.apply(event)
                after = event.data.get("as_node") if event.kind == "update" else event.data["step"]
                fold.next = env.spec.plan.after(after, fold.messages, jump) if after else ()
                event.data["next"] = list(fold.next)
            elif event.kind == "branch":
                fold.adopt(event.data.pop("_past"), event)
            else:
                fold.apply(event)
            env.buffer.append(event)
        if not fold.epoch:
            fold.epoch = new_id()
    except BaseException:
        env.broken = True  # the fold may hold events the store will not: stop here
        raise


def _assign_message_ids(event: Event) -> None:
    if event.kind not in _WITH_MESSAGES:
        return
    values = event.data.get("values")
    if isinstance(values, dict) and isinstance(values.get("messages"), list):
        for message in values["messages"]:
            if isinstance(message, BaseMessage) and message.id is None:
                message.id = new_id()
    message = event.data.get("message")
    if isinstance(message, BaseMessage) and message.id is None:
        message.id = new_id()


_WITH_MESSAGES = frozenset({"input", "step", "update", "tool_finished"})  # events that may add messages


def thread_status(fold: ThreadFold) -> ThreadStatus:
    """The thread's status, as its row gives it."""
    return "interrupted" if fold.pending else ("running" if fold.next else "idle")


def thread_record(fold: ThreadFold, *, updated_at: float | None = None) -> ThreadRecord:
    """The thread row for the store, from the fold after an append.

    Its ``updated_at`` is the time of the fold's last event, unless given. An append that need not
    wait for the disk (a tool's result, the state before a model call) keeps the time
    of the run's last append instead, while the status is the same: the row's time
    tells when a run started, paused or finished, and the store need not move the
    thread in its by-time indexes at every step (an update that changes no indexed
    column is cheaper for SQLite and PostgreSQL alike).
    """
    return ThreadRecord(
        thread_id=fold.thread_id,
        head_seq=fold.head_seq,
        status=thread_status(fold),
        epoch=fold.epoch,
        created_at=fold.created_at,
        updated_at=fold.updated_at if updated_at is None else updated_at,
        metadata=dict(fold.metadata),
        pending=tuple(
            PendingReview(
                interrupt_id=record.id,
                kind=record.kind,
                tools=tools_named_by(record.value),
                created_at=record.created_at,
                payload=_inbox_payload(record, fold.thread_id),
            )
            for record in fold.pending.values()
        )
        if fold.pending
        else (),
    )


def _grant_change(env: Env, events: list[Event]) -> GrantChange | None:
    """The grants an append gives (the ``grants`` of its answers), or None
    (``handrail.review.grants`` G2)."""
    new: list[GrantRecord] = []
    for event in events:
        if event.kind == "resume" and event.data.get("grants"):
            fold = env.fold
            agent = str((fold.metadata.get("assistant_id") if fold else None) or env.spec.name or "")
            by = event.data.get("reviewer")
            new += grant_records(env.thread_id, agent, event.data["grants"], by, event.created_at)
    return GrantChange(new=new) if new else None


def _share_review_payloads(
    fold: ThreadFold, events: list[Event], stored: list[StoredEvent], *, same: bool
) -> None:
    """Give each review raised in this append its event's stored bytes as its inbox payload
    (``same``: those bytes themselves, for a store that keeps objects in memory)."""
    for event, row in zip(events, stored, strict=True):
        if event.kind == "interrupt":
            record = fold.pending.get(event.data["id"])
            if record is not None and record.stored is None:
                _keep(fold, record.with_stored(review_payload(row.payload, same=same)))


def _make_review_payloads(fold: ThreadFold) -> None:
    """Make the inbox payload of each pending review that has none (one raised before this
    run, read back from the store), once per review: later appends reuse it."""
    for record in fold.pending.values():
        if record.stored is None:  # replacing a value leaves the dict's iteration intact
            _keep(fold, record.with_stored(_inbox_payload(record, fold.thread_id)))


def _keep(fold: ThreadFold, record: InterruptRecord) -> None:
    """Put ``record`` in place of the equal one the fold holds (it carries its payload)."""
    fold.pending[record.id] = record
    if record.id in fold.step_interrupts:
        fold.step_interrupts[record.id] = record


def _inbox_payload(record: InterruptRecord, thread_id: str) -> bytes:
    """The inbox payload of a pending review: the one it carries, or one made now."""
    if record.stored is not None:
        return record.stored
    return review_record(record.id, record.kind, record.value, thread_id, record.terms)
