"""The run loop, written once for sync and async (see ``effects.py`` for the drivers).

:func:`run` reads the thread (``reading.py``), lets ``_rules.py`` turn the input into
events, and runs the due steps (``_steps.py``) until the thread pauses or finishes. Each
step's events are saved before a step with effects begins (SPEC rule 7, ``commit.py``).
:func:`update_state`, the other writer, lives here too.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any, NamedTuple

from handrail.context import Runtime
from handrail.errors import ConfigurationError, GraphRecursionError, InvalidInputError
from handrail.review.quorum import CallApprovals, progress
from handrail.runtime import _rules as rules
from handrail.runtime._checkpoint_ids import checkpoint_id_of, seq_of_checkpoint
from handrail.runtime._compat import recursion_limit
from handrail.runtime._fold import ThreadFold
from handrail.runtime._recovery import unfinished_tool_interrupts
from handrail.runtime._steps import hook_step, model_step, stream_writer, tools_step
from handrail.runtime._updates import coerce_update
from handrail.runtime.commit import Persist, buffer, flush
from handrail.runtime.effects import Effect, Env, StoreCall
from handrail.runtime.events import Event
from handrail.runtime.plan import MODEL, TOOLS
from handrail.runtime.reading import interrupts_of, load
from handrail.runtime.streaming import Emit
from handrail.types import Interrupt, RunnableConfig

__all__ = ["CancelledBy", "RunRequest", "RunResult", "cancelled_by", "run", "update_state"]

Gen = Generator[Effect, Any, Any]


class RunRequest(NamedTuple):
    """One call of invoke/stream, as the loop needs it."""

    input: Any
    config: RunnableConfig
    thread_id: str
    checkpoint_id: str | None
    reviewer: Any
    metadata: Mapping[str, Any] | None
    can_pause: bool
    why_cannot_pause: str = ""
    context: Any = None
    channel: str = "python"  # how answers arrive (rule 11): python, http, cli, ...
    record_only: bool = False  # save the answers and stop: a worker runs them (Agent.decide)
    now: float | None = None  # the time expiry is judged at (rule 15); None: the clock's


class RunResult(NamedTuple):
    """Where a run stopped: the state and the interrupts waiting for answers."""

    values: dict[str, Any]
    interrupts: tuple[Interrupt, ...]
    answers: Mapping[str, Any] = {}  # a record-only run's: the answers as saved (``Agent.decide``)
    approvals: Mapping[str, tuple[CallApprovals, ...]] = {}  # and the counts of reviews still pending
    recorded: tuple[str, ...] = ()  # a record-only run's: the reviews its own events resolved


# Time travel ---------------------------------------------------------------------------------
def _travel(env: Env, fold: ThreadFold, checkpoint_id: str, by: Any = None, channel: str = "python") -> Gen:
    """Continue from an earlier checkpoint: append a ``branch`` event back to it (``by``:
    who asked, rule 21)."""
    seq = seq_of_checkpoint(checkpoint_id)
    if seq == fold.checkpoint_seq:
        return fold  # the latest checkpoint: nothing to travel
    if seq is None or seq > fold.head_seq:
        raise InvalidInputError(f"thread {env.thread_id!r} has no checkpoint {checkpoint_id!r}")
    if seq < fold.base_seq:
        raise InvalidInputError(
            f"checkpoint {checkpoint_id!r} of thread {env.thread_id!r} was pruned; the oldest one "
            f"left is {checkpoint_id_of(fold.base_seq)!r}"
        )
    past = yield from load(env, upto_seq=seq)
    if past.checkpoint_seq != seq:
        raise InvalidInputError(f"thread {env.thread_id!r} has no checkpoint {checkpoint_id!r}")
    buffer(env, [Event("branch", {"from_seq": seq, "_past": past, **rules.caller(by, channel)})])
    return fold


# Running --------------------------------------------------------------------------------------
def run(env: Env, request: RunRequest) -> Gen:
    """Run the agent on one input until it pauses or finishes; return a RunResult."""
    spec = env.spec
    # invoke may start from the cached reading (its first append checks it); a stream
    # reads first, so that it never shows chunks of an attempt that is then retried
    trusted = env.trust_cache and not env.modes and request.checkpoint_id is None
    fold = yield from load(env, trust_cache=trusted)
    env.fold = fold
    if request.checkpoint_id is not None:
        yield from _travel(env, fold, request.checkpoint_id, request.reviewer, request.channel)
    alive: set[str] = (yield StoreCall("runs_alive", (env.thread_id,))) if fold.started else set()
    recovered, busy = unfinished_tool_interrupts(spec, fold, alive, env.run_id)
    events = rules.start_events(
        spec,
        fold,
        request.input,
        recovered=recovered,
        busy=busy,
        reviewer=request.reviewer,
        metadata=request.metadata,
        channel=request.channel,
        record_only=request.record_only,
        now=request.now,
    )
    try:
        return (yield from _run_steps(env, request, fold, events))
    except Exception as exc:
        if env.appends and not env.broken:  # the run changed the thread: say why it stopped there
            reason = f"{type(exc).__name__}: {exc}"
            failed = {"run_id": env.run_id, "error": reason if len(reason) <= 2000 else reason[:1997] + "..."}
            buffer(env, [Event("failed", failed)])
        raise
    except BaseException as exc:
        by = cancelled_by(exc)
        if by is not None and not env.broken and (env.appends or fold.head_seq or env.buffer):
            # rule 21: a cancel says who made it (the canceller's task.cancel(CancelledBy(...)))
            data = {"run_id": env.run_id, "error": "cancelled", "cancelled": True}
            buffer(env, [Event("failed", {**data, **rules.caller(by.identity, by.channel)})])
        raise
    finally:
        if env.buffer and not env.broken:
            try:
                yield flush(last=True, failed=True)  # keep what the run did, even when it stops on an error
            except Exception:
                pass  # the original error is the one to report


class CancelledBy:
    """Who cancels a run: give it as the message of ``task.cancel(...)`` (the service does),
    and the run records its cancel with that identity in the thread's log (SPEC rule 21)."""

    __slots__ = ("channel", "identity")

    def __init__(self, identity: Any, channel: str = "python") -> None:
        self.identity = identity
        self.channel = channel

    def __repr__(self) -> str:
        return f"CancelledBy({self.identity!r}, {self.channel!r})"


def cancelled_by(exc: BaseException) -> CancelledBy | None:
    """The :class:`CancelledBy` a cancelled run was given, if ``exc`` is that cancellation."""
    if type(exc).__name__ != "CancelledError":
        return None
    found = next((arg for arg in exc.args if isinstance(arg, CancelledBy)), None)
    return found


def _run_steps(env: Env, request: RunRequest, fold: ThreadFold, events: list[Event]) -> Gen:
    spec = env.spec
    if events:
        buffer(env, events)
        if env.wants("values") and any(e.kind == "input" for e in events):
            yield Emit("values", fold.public_values())
    if request.record_only:  # answers recorded: a worker runs them (the thread is queued if due)
        yield Persist([], flush=True, durable=True, queue=_due(fold))
        counted = {
            key: progress(fold.pending[key].value, fold.pending[key].terms, votes)
            for key, votes in fold.votes.items()
            if key in fold.pending
        }
        mine = tuple(i for e in events if e.kind == "resume" for i in e.data["answers"])
        return RunResult(
            fold.public_values(), interrupts_of(fold.pending, spec), dict(fold.answers), counted, mine
        )
    runtime: Runtime[Any] = Runtime(
        thread_id=env.thread_id,
        config=request.config,
        context=request.context if request.context is not None else request.config.get("context"),
        store=spec.long_term_store,
        stream_writer=stream_writer(env),
        reviewer=request.reviewer,
    )
    limit = recursion_limit(request.config)
    taken = 0
    while _due(fold):  # until it waits for answers (rule 3: answered calls of a tools step still run)
        step = fold.next[0]
        taken += 1
        if taken > limit:  # run() saves what the run did before the error leaves it
            raise GraphRecursionError(
                f"thread {env.thread_id!r}: recursion limit of {limit} steps reached before the agent "
                f"finished (next step {step!r}); every step so far is saved. Raise "
                "config['recursion_limit'] and invoke(None, config) to go on"
            )
        runtime.step = step
        if step == TOOLS:
            yield from tools_step(env, fold, request, runtime)
        elif step == MODEL:
            yield from model_step(env, fold, request, runtime)
        elif step in spec.plan.hooks:
            yield from hook_step(env, fold, request, runtime, step)
        else:
            raise ConfigurationError(
                f"thread {env.thread_id!r} is due to run step {step!r}, which this agent does not "
                f"have (its steps: {sorted(spec.plan.step_names)}); was its middleware removed?"
            )
        if fold.pending:
            break
    yield flush(last=True)
    result = RunResult(fold.public_values(), interrupts_of(fold.pending, env.spec))
    if result.interrupts and env.modes:
        if env.wants("updates"):
            yield Emit("updates", {"__interrupt__": result.interrupts})
        if env.wants("values"):
            yield Emit("values", (result.values, result.interrupts))
    return result


def _due(fold: ThreadFold) -> bool:
    """Whether the thread has a step to run now (not only answers to wait for)."""
    if not fold.next:
        return False
    return not fold.pending or (fold.next[0] == TOOLS and _runnable_tool_calls(fold))


def _runnable_tool_calls(fold: ThreadFold) -> bool:
    waiting = {record.task for record in fold.pending.values()}
    _, calls = fold.pending_calls()
    return any(str(c["id"]) not in waiting and str(c["id"]) not in fold.task_results for c in calls)


def update_state(
    env: Env,
    checkpoint_id: str | None,
    values: Any,
    as_node: str | None,
    by: Any = None,
    channel: str = "python",
) -> Gen:
    """Change the state by hand (``update_state``); returns the new checkpoint's config.

    ``by`` is who made the change and ``channel`` how it arrived (rule 21)."""
    spec = env.spec
    fold = yield from load(env)
    env.fold = fold
    if as_node is not None and as_node not in spec.plan.step_names:
        raise InvalidInputError(
            f"as_node must be one of the agent's steps {sorted(spec.plan.step_names)}, got {as_node!r}"
        )
    if checkpoint_id is not None:  # the update is checked against the state it applies to
        yield from _travel(env, fold, checkpoint_id, by, channel)
    checked = coerce_update(
        spec, values if values is not None else {}, where="update_state values", fold=fold
    )
    data: dict[str, Any] = {"values": checked, "as_node": as_node, "supersede": True}
    data["next"] = None if as_node is not None else list(fold.next)
    data.update(rules.caller(by, channel))
    yield Persist([Event("update", data)], flush=True, durable=True)
    spec.cache.put(fold)
    config: RunnableConfig = {
        "configurable": {"thread_id": env.thread_id, "checkpoint_id": checkpoint_id_of(fold.checkpoint_seq)}
    }
    return config
