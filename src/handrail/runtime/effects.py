"""Effects and the two drivers that perform them.

The run loop (``loop.py``) is written once, as generators that *yield* the effects they
need - read the thread, append events, call a hook, call the model, run tools - and
receive the results. :func:`drive_sync` performs effects with blocking calls,
:func:`drive_async` with ``await``. Each effect says how it is done both ways; nothing
else in the runtime knows whether it runs sync or async.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Generator, Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from handrail.checkpoint.base import (
    BaseCheckpointSaver,
    Notice,
    PendingReview,
    StoredEvent,
    ThreadRecord,
    ThreadStatus,
)
from handrail.checkpoint.grants import GrantChange, GrantRecord
from handrail.checkpoint.integrity import GENESIS, seal
from handrail.checkpoint.serde import dumps
from handrail.context import (
    PauseSignal,
    TaskContext,
    reset_current_task,
    set_current_task,
)
from handrail.errors import ConflictError
from handrail.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage, new_id
from handrail.middleware.types import (
    AgentMiddleware,
    ModelRequest,
    ModelResponse,
    hook_is_defined,
)
from handrail.models.base import accumulate_chunks
from handrail.review.grants import records_from as grant_records
from handrail.review.quorum import progress
from handrail.runtime.events import Event, encode_event, pack_payload, review_payload, review_record
from handrail.runtime.fold import InterruptRecord, ThreadFold
from handrail.runtime.spec import AgentSpec
from handrail.tools import Tool, run_coroutine_sync

if TYPE_CHECKING:  # asyncio loads when something runs async, not on `import handrail`
    import asyncio

__all__ = ["Effect", "Env", "drive_async", "drive_sync"]

Gen = Generator["Effect", Any, Any]
Emit = Callable[[str, Any], None]


class Env:
    """What the drivers need to perform effects for one run (or one read)."""

    __slots__ = (
        "acted",
        "appends",
        "asked",
        "broken",
        "buffer",
        "buffer_from",
        "claimed",
        "conflicted",
        "emit",
        "fold",
        "last_record",
        "lock",
        "modes",
        "optimistic",
        "ran",
        "run_id",
        "spec",
        "store",
        "thread_id",
        "trust_cache",
    )

    def __init__(
        self,
        spec: AgentSpec,
        store: BaseCheckpointSaver,
        thread_id: str,
        run_id: str | None = None,
        emit: Emit | None = None,
        modes: frozenset[str] = frozenset(),
        *,
        trust_cache: bool = True,
    ) -> None:
        self.spec = spec
        self.store = store
        self.thread_id = thread_id
        self.asked: dict[str, InterruptRecord] = {}  # reviews answered in the buffer: what they asked
        self.run_id = run_id if run_id is not None else new_id("run-")
        self.emit = emit
        self.modes = modes
        self.fold: ThreadFold | None = None
        self.claimed = False
        self.broken = False
        self.appends = 0
        self.trust_cache = trust_cache  # a run may start from the cached reading without reading the store
        self.optimistic = False  # ... and this one did
        self.buffer: list[Event] = []
        self.buffer_from = 0
        self.lock: asyncio.Lock | None = None
        self.ran: set[str] = set()  # tool calls this run started
        self.acted = False  # a hook, a wrapper, the model or a tool ran: the run did something
        self.conflicted = False  # an append was refused: another writer changed the thread first
        self.last_record: ThreadRecord | None = None  # the thread row of this run's last append

    def wants(self, mode: str) -> bool:
        return mode in self.modes

    def send(self, mode: str, chunk: Any) -> None:
        if self.emit is not None and mode in self.modes:
            self.emit(mode, chunk)


class Effect:
    """Something the loop needs done; performed by a driver."""

    def run_sync(self, env: Env) -> Any:
        raise NotImplementedError

    async def run_async(self, env: Env) -> Any:
        raise NotImplementedError


def drive_sync(gen: Gen, env: Env) -> Any:
    """Run a loop generator to completion with blocking calls."""
    send: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = gen.throw(error) if error is not None else gen.send(send)
        except StopIteration as stop:
            return stop.value
        try:
            send, error = effect.run_sync(env), None
        except BaseException as exc:  # handed back to the generator, which may handle it
            send, error = None, exc


async def drive_async(gen: Gen, env: Env) -> Any:
    """Run a loop generator to completion with ``await``."""
    send: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = gen.throw(error) if error is not None else gen.send(send)
        except StopIteration as stop:
            return stop.value
        try:
            send, error = await effect.run_async(env), None
        except BaseException as exc:
            send, error = None, exc


# Store ---------------------------------------------------------------------------------
class StoreCall(Effect):
    """Call a store method (``read``, ``runs_alive``, ...) or its ``a``-prefixed twin."""

    __slots__ = ("args", "kwargs", "method")

    def __init__(self, method: str, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> None:
        self.method = method
        self.args = args
        self.kwargs: dict[str, Any] = {} if kwargs is None else kwargs

    def run_sync(self, env: Env) -> Any:
        return getattr(env.store, self.method)(*self.args, **self.kwargs)

    async def run_async(self, env: Env) -> Any:
        return await getattr(env.store, "a" + self.method)(*self.args, **self.kwargs)


@dataclass(slots=True)
class Persist(Effect):
    """Add events to the thread (applying them to the run's fold at once).

    Events are buffered and written in one append when ``flush`` is set. The loop
    flushes before anything that acts on the world - a tool call, a model call, a hook
    of middleware that is not known to be pure - and when the run stops, so every step
    is saved before a step with effects begins (SPEC rule 7), in as few commits as
    that allows.

    A ``step`` or ``update`` event whose ``next`` is None gets it computed here, after its
    values are applied, from the plan (so routing sees the state the step produced).

    Durability: every flush is committed, so a process that dies loses nothing saved
    (rule 7). Only some commits also wait for the disk (an fsync): the one that records
    the tool calls a step is about to run (rule 9 must hold after a power cut too: a
    call that may have acted is on disk first), the one that holds an answer (a
    person's decision is on disk even when every call was rejected and none acts), the
    one that claims the run, the run's last (a pause or an answer is never lost once
    ``invoke`` returns) and those asked for with ``durable=True``. The commits in
    between - a tool's result, the state before a model call - need not: a store writes
    its log in order, so the next durable commit makes them durable too, and a power
    cut before it rolls the thread back to the recorded calls, which come back as
    ``outcome_unknown`` reviews, never silently run again. That is two waits for the
    disk per review cycle.
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
                _share_review_payloads(env.fold, events, stored)
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
        """The run to claim and/or release in this append (rule 9 costs no commit of its own).

        A run claims the thread with its input too: if its process dies before the run
        ends, the claim lapses with it and a worker takes the thread over (issue 24), as
        it does a run that died in a tool.
        """
        acting = any(e.kind in _CLAIMING for e in events)
        claim = env.run_id if not env.claimed and acting else None
        release = env.run_id if self.release and (env.claimed or claim) else None
        return claim, release

    def _durable(self, events: list[Event], claim: str | None) -> bool:
        # a claim made with input alone need not wait for the disk: a power cut that loses
        # it loses the input too, and there is then nothing to take over
        acted = claim is not None and any(e.kind != "input" for e in events if e.kind in _CLAIMING)
        return self.durable or self.release or acted or any(e.kind in _DURABLE_KINDS for e in events)

    def _append_args(
        self, env: Env, method: str
    ) -> tuple[list[Event], list[StoredEvent], dict[str, Any]] | None:
        """What to hand the store's ``append``/``aappend``, or None: nothing to write."""
        taken = self._take(env)
        if taken is None:
            return None
        events, stored, expected = taken
        return events, stored, self._kwargs(env, events, expected, method)

    def _kwargs(self, env: Env, events: list[Event], expected: int, method: str) -> dict[str, Any]:
        """The keywords of the append of ``events`` after event ``expected``."""
        claim, release = self._liveness(env, events)
        durable = self._durable(events, claim)
        kwargs = {
            "expected_seq": expected,
            "record": self._record(env, durable),
            "claim": claim,
            "release": release,
            **_relaxed(env.store, durable, method),
        }
        change = _grant_change(env, events)
        if change is not None:
            kwargs["grants"] = change  # rule 16: born with the answer that gives them
        if takes(type(env.store), method, "notices"):
            notices = self._notices(env, events, kwargs["record"])
            if notices:
                kwargs["notices"] = notices
            if self.queue:
                kwargs["queue"] = True
        if self.release and env.fold is not None and _reading_due(env.fold, env.store, method):
            try:
                kwargs["reading"] = saved_reading(env.fold)
            except BaseException:
                env.broken = True  # the buffer is already taken: stop here
                raise
        return kwargs

    def _notices(self, env: Env, events: list[Event], record: ThreadRecord) -> list[Notice]:
        """The feed's rows for this append: reviews asked and answered, and a run's end."""
        notices: list[Notice] = []
        fold = env.fold
        assert fold is not None
        agent = record.metadata.get("assistant_id") or env.spec.name  # the agent the thread is of
        for event in events:
            if event.kind == "interrupt":
                asked = fold.pending.get(event.data["id"])
                if asked is not None:
                    notices.append(_notice("review.requested", env, {**_asked(env, asked), "agent": agent}))
            elif event.kind == "resume":
                expired = event.data.get("channel") == "expiry"
                for interrupt_id in event.data["answers"]:
                    answered = {
                        "interrupt_id": interrupt_id,
                        "reviewer": event.data.get("reviewer"),
                        "channel": event.data.get("channel"),
                        "answer": event.data["answers"][interrupt_id],
                        "agent": agent,
                    }
                    asked = env.asked.pop(interrupt_id, None) or fold.pending.get(interrupt_id)
                    if asked is not None:  # what was asked, so a notification names the tools
                        answered = {**_asked(env, asked), **answered}
                    notices.append(_notice("review.expired" if expired else "review.decided", env, answered))
            elif event.kind == "approval":
                voted = {
                    "interrupt_id": event.data["interrupt"],
                    "reviewer": event.data.get("reviewer"),
                    "channel": event.data.get("channel"),
                    "agent": agent,
                }
                asked = fold.pending.get(voted["interrupt_id"])
                if asked is not None:  # what was asked, and how far its count has come (rule 14)
                    counted = progress(asked.value, asked.terms, fold.votes.get(asked.id, ()))
                    voted = {**_asked(env, asked), **voted, "approvals": [c.as_json() for c in counted]}
                notices.append(_notice("review.approved", env, voted))
        if self.release:
            ended: dict[str, Any] = {"run_id": env.run_id, "status": "error" if self.failed else "success"}
            ended["agent"] = agent
            notices.append(_notice("run.finished", env, {**ended, "thread_status": record.status}))
        return notices

    def _failed(self, env: Env, events: list[Event], exc: BaseException) -> BaseException:
        """The run cannot go on after a failed append; a conflict is told in the run's terms."""
        env.broken = True
        env.conflicted = isinstance(exc, ConflictError)
        return self._conflict(env, events, exc) if isinstance(exc, ConflictError) else exc

    def _appended(self, env: Env, kwargs: dict[str, Any]) -> None:
        env.appends += 1
        if env.appends == 1:
            saved = _ON_FIRST_SAVE.get()
            if saved is not None:
                saved()
        env.last_record = kwargs["record"]
        reading = kwargs.get("reading")
        if reading is not None and env.fold is not None:
            env.fold.reading_seq = reading.seq
        if kwargs["claim"] is not None:
            env.claimed = True
        if kwargs["release"] is not None:
            env.claimed = False

    def run_sync(self, env: Env) -> None:
        prepared = self._append_args(env, "append")
        if prepared is None:
            return
        events, stored, kwargs = prepared
        for attempt in range(_REBASES + 1):
            try:
                env.store.append(env.thread_id, stored, **kwargs)
                break
            except ConflictError as exc:
                moved = drive_sync(self._rebased(env, events, kwargs), env) if attempt < _REBASES else None
                if moved is None:
                    raise self._failed(env, events, exc) from None
                stored, kwargs = moved[0], self._kwargs(env, events, moved[1], "append")
            except BaseException as exc:
                error = self._failed(env, events, exc)
                if error is exc:
                    raise
                raise error from None
        self._appended(env, kwargs)

    def _rebased(self, env: Env, events: list[Event], kwargs: dict[str, Any]) -> Gen:
        from handrail.runtime.rebase import rebase  # rebase reads the thread (reading.py), which imports this

        return rebase(env, events, kwargs["expected_seq"])

    async def run_async(self, env: Env) -> None:
        if env.lock is None:  # one coroutine drives the run: nothing to serialise
            await self._write_async(env)
            return
        async with env.lock:  # concurrent tool calls: one append at a time, in order
            await self._write_async(env)

    async def _write_async(self, env: Env) -> None:
        prepared = self._append_args(env, "aappend")
        if prepared is None:
            return
        events, stored, kwargs = prepared
        for attempt in range(_REBASES + 1):
            try:
                await env.store.aappend(env.thread_id, stored, **kwargs)
                break
            except ConflictError as exc:
                rebase = self._rebased(env, events, kwargs)
                moved = await drive_async(rebase, env) if attempt < _REBASES else None
                if moved is None:
                    raise self._failed(env, events, exc) from None
                stored, kwargs = moved[0], self._kwargs(env, events, moved[1], "aappend")
            except BaseException as exc:
                error = self._failed(env, events, exc)
                if error is exc:
                    raise
                raise error from None
        self._appended(env, kwargs)


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


def _notice(kind: str, env: Env, data: dict[str, Any]) -> Notice:
    # packed as an event's payload is (a review's notice holds its value, which can be large)
    return Notice(kind, pack_payload(dumps(data, where=f"a notice of thread {env.thread_id!r}")))


def _asked(env: Env, record: InterruptRecord) -> dict[str, Any]:
    tools = list(tools_named_by(record.value))
    roles = {tool: policy.reviewers for tool in tools if (policy := env.spec.policies.by_tool.get(tool))}
    asked = {"interrupt_id": record.id, "kind": record.kind, "tools": tools, "value": record.value}
    # who may decide, and until when: what a notification says (rules 12, 15)
    asked["reviewers"] = {tool: list(found) for tool, found in roles.items() if found is not None}
    expires = record.expires_at
    if expires is not None:
        asked["expires_at"] = expires
    return asked


_CLAIMING = frozenset({"input", "tools_planned", "tool_started"})  # what makes a run claim the thread
_REBASES = 3  # how often an append refused for another writer's answers is put after them
_DURABLE_KINDS = frozenset({"tools_planned", "resume", "approval"})  # calls about to act; a person's answer
_NO_ARGS: dict[str, Any] = {}
_RELAXED: dict[str, Any] = {"durable": False}
# A run's last append also saves the whole reading of the thread once twice as many
# events were added since the last saved one as the thread has messages, at least
# READING_MIN and at most READING_EVERY: a new process then folds at most that many. A
# reading costs about as much to write as the thread has messages, so the interval grows
# with it and the writes cost the same per event (about 1 µs) whatever the thread's
# length; a cold load costs about a reading's decoding plus that many events, small
# threads included.
READING_EVERY = 400
READING_MIN = 64


@functools.cache
def takes(store_type: type[BaseCheckpointSaver], method: str, keyword: str) -> bool:
    """Whether a store's ``method`` takes ``keyword`` (stores written before it may not).

    ``append``'s ``durable`` and ``reading`` and ``read``'s ``from_reading`` came after
    the first stores; the runtime passes them only to stores that take them.
    """
    # an async twin may hand everything to the sync method (the defaults do): both must take it
    twin = method[1:] if method.startswith("a") and hasattr(BaseCheckpointSaver, method[1:]) else None
    methods = (method, twin) if twin else (method,)
    return all(
        any(p.name == keyword or p.kind is p.VAR_KEYWORD for p in inspect.signature(m).parameters.values())
        for m in (getattr(store_type, name) for name in methods)
    )


def _relaxed(store: BaseCheckpointSaver, durable: bool, method: str) -> dict[str, Any]:
    """The keyword to pass for a commit that need not wait for the disk, if the store takes it."""
    if durable or not takes(type(store), method, "durable"):
        return _NO_ARGS
    return _RELAXED


def _reading_due(fold: ThreadFold, store: BaseCheckpointSaver, method: str) -> bool:
    interval = min(READING_EVERY, max(READING_MIN, 2 * len(fold.values.get("messages") or ())))
    return fold.head_seq - fold.reading_seq >= interval and takes(type(store), method, "reading")


def saved_reading(fold: ThreadFold) -> StoredEvent:
    """The stored form of a fold: the thread's saved reading at its head, sealed on its own
    (it holds the chain's hash at its event: ``checkpoint/integrity.py``, rule 4)."""
    raw = dumps(fold.to_reading(), where=f"the state of thread {fold.thread_id!r}")
    payload, _ = seal(GENESIS, fold.thread_id, fold.head_seq, "reading", fold.updated_at, pack_payload(raw))
    return StoredEvent(seq=fold.head_seq, kind="reading", created_at=fold.updated_at, payload=payload)


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
            if event.kind == "resume":  # what was asked, for the notice of its answer (``_notices``)
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


def _share_review_payloads(fold: ThreadFold, events: list[Event], stored: list[StoredEvent]) -> None:
    """Give each review raised in this append its event's stored bytes as its inbox payload."""
    for event, row in zip(events, stored, strict=True):
        if event.kind == "interrupt":
            record = fold.pending.get(event.data["id"])
            if record is not None and record.stored is None:
                object.__setattr__(record, "stored", review_payload(row.payload))  # a cache, not state


def _inbox_payload(record: InterruptRecord, thread_id: str) -> bytes:
    """The stored form of a pending interrupt's value, made once per interrupt."""
    if record.stored is None:
        stored = review_record(record.id, record.kind, record.value, thread_id, record.terms)
        object.__setattr__(record, "stored", stored)  # a cache, not state
    assert record.stored is not None
    return record.stored


def tools_named_by(value: Any) -> tuple[str, ...]:
    """The tool names an interrupt value is about (for the inbox's tool filter)."""
    if isinstance(value, dict):
        requests = value.get("action_requests")
        if isinstance(requests, list):
            return tuple(str(r.get("name")) for r in requests if isinstance(r, dict))
        if isinstance(value.get("name"), str):
            return (value["name"],)
    return ()


# Hooks ------------------------------------------------------------------------------------
class CallHook(Effect):
    """Call one node hook (``before_model`` ...) of one middleware."""

    __slots__ = ("hook", "middleware", "runtime", "state", "task")

    def __init__(
        self, middleware: AgentMiddleware, hook: str, state: dict[str, Any], runtime: Any, task: TaskContext
    ) -> None:
        self.middleware = middleware
        self.hook = hook
        self.state = state
        self.runtime = runtime
        self.task = task

    def run_sync(self, env: Env) -> Any:
        sync_defined, async_defined = hook_is_defined(self.middleware, self.hook)
        env.acted = env.acted or self.hook not in self.middleware.pure_hooks
        token = set_current_task(self.task)
        try:
            if sync_defined or not async_defined:
                return getattr(self.middleware, self.hook)(self.state, self.runtime)
            return run_coroutine_sync(getattr(self.middleware, "a" + self.hook)(self.state, self.runtime))
        finally:
            reset_current_task(token)

    async def run_async(self, env: Env) -> Any:
        _, async_defined = hook_is_defined(self.middleware, self.hook)
        env.acted = env.acted or self.hook not in self.middleware.pure_hooks
        token = set_current_task(self.task)
        try:
            if async_defined:
                return await getattr(self.middleware, "a" + self.hook)(self.state, self.runtime)
            return getattr(self.middleware, self.hook)(self.state, self.runtime)
        finally:
            reset_current_task(token)


# Wrap chains (wrap_model_call / wrap_tool_call) -------------------------------------------
class Chain(Effect):
    """Run ``request`` through the middleware's wrap hooks down to an innermost generator.

    The first middleware is outermost. A middleware with only a sync hook also works in
    async runs (it runs in a worker thread) and one with only an async hook in sync runs.
    """

    __slots__ = ("hook", "innermost", "layers", "normalise", "request", "task")

    def __init__(
        self,
        hook: str,
        layers: Sequence[AgentMiddleware],
        request: Any,
        innermost: Callable[[Any], Gen],
        task: TaskContext,
        normalise: Callable[[Any], Any],
    ) -> None:
        self.hook = hook
        self.layers = layers
        self.request = request
        self.innermost = innermost
        self.task = task
        self.normalise = normalise

    def run_sync(self, env: Env) -> Any:
        env.acted = True
        token = set_current_task(self.task)
        try:
            return self._call_sync(env, 0, self.request)
        finally:
            reset_current_task(token)

    def _call_sync(self, env: Env, position: int, request: Any) -> Any:
        if position == len(self.layers):
            self.task.source = None  # interrupts from here on belong to the tool or model itself
            return drive_sync(self.innermost(request), env)
        middleware = self.layers[position]
        task = self.task

        def handler(inner: Any) -> Any:
            outer = task.source
            try:
                return self._call_sync(env, position + 1, inner)
            finally:
                task.source = outer

        task.source = middleware.name
        sync_defined, async_defined = hook_is_defined(middleware, self.hook)
        if sync_defined or not async_defined:
            result = getattr(middleware, self.hook)(request, handler)
        else:
            import asyncio

            async def async_handler(inner: Any) -> Any:
                return await asyncio.to_thread(handler, inner)

            result = run_coroutine_sync(getattr(middleware, "a" + self.hook)(request, async_handler))
        return self.normalise(result)

    async def run_async(self, env: Env) -> Any:
        env.acted = True
        token = set_current_task(self.task)
        try:
            return await self._call_async(env, 0, self.request)
        finally:
            reset_current_task(token)

    async def _call_async(self, env: Env, position: int, request: Any) -> Any:
        import asyncio

        if position == len(self.layers):
            self.task.source = None
            return await drive_async(self.innermost(request), env)
        middleware = self.layers[position]
        task = self.task

        async def handler(inner: Any) -> Any:
            outer = task.source
            try:
                return await self._call_async(env, position + 1, inner)
            finally:
                task.source = outer

        task.source = middleware.name
        _, async_defined = hook_is_defined(middleware, self.hook)
        if async_defined:
            result = await getattr(middleware, "a" + self.hook)(request, handler)
        else:
            loop = asyncio.get_running_loop()

            def sync_handler(inner: Any) -> Any:
                return asyncio.run_coroutine_threadsafe(handler(inner), loop).result()

            result = await asyncio.to_thread(getattr(middleware, self.hook), request, sync_handler)
        return self.normalise(result)


def normalise_model_result(result: Any) -> ModelResponse:
    """A wrap_model_call hook may return a ModelResponse or a bare AIMessage."""
    if isinstance(result, ModelResponse):
        return result
    if isinstance(result, AIMessage):
        return ModelResponse(result=[result])
    raise TypeError(
        f"wrap_model_call must return a ModelResponse or an AIMessage, got {type(result).__name__}"
    )


def normalise_tool_result(result: Any) -> ToolMessage:
    """A wrap_tool_call hook must return a ToolMessage."""
    if isinstance(result, ToolMessage):
        return result
    raise TypeError(f"wrap_tool_call must return a ToolMessage, got {type(result).__name__}")


# Model -----------------------------------------------------------------------------------
class CallModel(Effect):
    """Call the chat model once; with ``stream`` set, forward each chunk to "messages"."""

    __slots__ = ("messages", "metadata", "request", "stream")

    def __init__(
        self, request: ModelRequest, messages: list[BaseMessage], metadata: dict[str, Any], stream: bool
    ) -> None:
        self.request = request
        self.messages = messages
        self.metadata = metadata
        self.stream = stream

    def _kwargs(self) -> dict[str, Any]:
        return {
            "tools": [t.spec() for t in self.request.tools] or None,
            "tool_choice": self.request.tool_choice,
            **self.request.model_settings,
        }

    def run_sync(self, env: Env) -> AIMessage:
        model = self.request.model
        if not self.stream:
            return model.invoke(self.messages, **self._kwargs())
        chunks: list[AIMessageChunk] = []
        for chunk in model.stream(self.messages, **self._kwargs()):
            chunks.append(chunk)
            env.send("messages", (chunk, self.metadata))
        return accumulate_chunks(chunks)

    async def run_async(self, env: Env) -> AIMessage:
        model = self.request.model
        if not self.stream:
            return await model.ainvoke(self.messages, **self._kwargs())
        chunks: list[AIMessageChunk] = []
        async for chunk in model.astream(self.messages, **self._kwargs()):
            chunks.append(chunk)
            env.send("messages", (chunk, self.metadata))
        return accumulate_chunks(chunks)


# Tools -----------------------------------------------------------------------------------
class CallTool(Effect):
    """Call a tool's function with arguments already validated."""

    __slots__ = ("args", "runtime", "tool")

    def __init__(self, tool: Tool, args: dict[str, Any], runtime: Any) -> None:
        self.tool = tool
        self.args = args
        self.runtime = runtime

    def run_sync(self, env: Env) -> Any:
        return self.tool.run(self.args, self.runtime)

    async def run_async(self, env: Env) -> Any:
        return await self.tool.arun(self.args, self.runtime)


class RunTasks(Effect):
    """Run several task generators: one after another (sync) or concurrently (async).

    In async runs every task finishes before the first error (if any) is raised, so no
    tool is abandoned half-way by a sibling's failure.
    """

    __slots__ = ("tasks",)

    def __init__(self, tasks: list[Gen]) -> None:
        self.tasks = tasks

    def run_sync(self, env: Env) -> None:
        for task in self.tasks:
            drive_sync(task, env)

    async def run_async(self, env: Env) -> None:
        import asyncio

        if len(self.tasks) == 1:
            await drive_async(self.tasks[0], env)
            return
        outer, env.lock = env.lock, asyncio.Lock()  # the tasks' appends take turns
        try:
            results = await asyncio.gather(
                *(drive_async(task, env) for task in self.tasks), return_exceptions=True
            )
        finally:
            env.lock = outer
        for result in results:
            if isinstance(result, BaseException):
                raise result


def tool_result_message(
    result: Any, call_id: str, name: str, response_format: str = "content"
) -> ToolMessage:
    """Turn what a tool returned into its ToolMessage.

    With ``response_format="content_and_artifact"`` the tool returns ``(content,
    artifact)``: the content is what the model sees, the artifact rides on the message.
    """
    if response_format == "content_and_artifact" and not isinstance(result, ToolMessage):
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(
                f"tool {name!r} has response_format='content_and_artifact' and must return a "
                f"(content, artifact) tuple, got {type(result).__name__}"
            )
        message = tool_result_message(result[0], call_id, name)
        message.artifact = result[1]
        return message
    if isinstance(result, ToolMessage):
        if result.tool_call_id == call_id:
            return result
        # a tool that built its own message keeps its content, answering this call
        return ToolMessage(
            result.content,
            tool_call_id=call_id,
            name=result.name or name,
            status=result.status,
            artifact=result.artifact,
        )
    if isinstance(result, str):
        content: Any = result
    elif result is None:
        content = ""
    else:
        try:
            content = orjson.dumps(result, option=orjson.OPT_NON_STR_KEYS).decode()
        except TypeError:
            content = str(result)
    return ToolMessage(content, tool_call_id=call_id, name=name)


__all__ += [
    "CallHook",
    "CallModel",
    "CallTool",
    "Chain",
    "PauseSignal",
    "Persist",
    "RunTasks",
    "StoreCall",
    "buffer",
    "normalise_model_result",
    "normalise_tool_result",
    "thread_record",
    "tool_result_message",
    "tools_named_by",
]
