"""What a service process keeps of the runs it runs (``runs.py`` starts them): a bounded amount.

While a run runs it keeps the server-sent events it produced, so that a stream joining it
late (``runs.join_stream``) sees them all. When it ends they go (a stream already reading
them keeps its own reference until it is done), and what stays is the run's record: its
ids, status, times, metadata and, if it failed, how. The records of at most :data:`KEEP`
finished runs are kept, for at most :data:`KEEP_SECONDS`, holding at most
:data:`KEEP_BYTES` of metadata; the oldest go first. A run's values are never kept:
``runs.wait`` is handed them when the run ends (:attr:`Run.handoff`), and ``runs.join``
reads the thread's state from the store.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from handrail.agent import Agent
from handrail.errors import ConflictError, SerializationError
from handrail.runtime.commit import on_first_save, reset_first_save
from handrail.server._problems import Problem, client_problem
from handrail.server.wire import to_wire

__all__ = ["KEEP", "KEEP_BYTES", "KEEP_SECONDS", "STREAM_MODES", "Run", "RunRegistry", "values_of"]

log = logging.getLogger("handrail.server")

KEEP = 500
"""The most finished runs a process keeps the record of."""

KEEP_SECONDS = 3600.0
"""How long a process keeps the record of a finished run."""

KEEP_BYTES = 16 * 1024 * 1024
"""The most metadata (as JSON) the records of finished runs hold together."""

ACCEPT_SECONDS = 30.0
"""How long ``runs.create`` waits for a run's input to be on record before it answers."""

MESSAGE_CHARS = 2000
"""How much of a failed run's error message its ``error`` event (and ``__error__``) carries."""

# LangGraph stream modes handrail serves, and the agent mode each one reads.
STREAM_MODES = {
    "values": "values",
    "updates": "updates",
    "messages": "messages",
    "messages-tuple": "messages",
    "custom": "custom",
}


@dataclass
class Run:
    """One run of an agent on a thread: its record, and its events while it runs."""

    run_id: str
    thread_id: str
    assistant_id: str
    metadata: dict[str, Any]
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    status: str = "pending"
    events: list[tuple[str, Any]] = field(default_factory=list)
    failure: dict[str, str] | None = None  # the run's own error: {"error": type, "message": ...}
    refusal: tuple[int, str, dict[str, Any]] | None = None  # a client's mistake, as a problem
    handoff: asyncio.Future[dict[str, Any]] | None = None  # the values, for the runs.wait that waits
    task: asyncio.Task[None] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    saved: asyncio.Event = field(default_factory=asyncio.Event)  # its input is on record (or it ended)
    size: int = 0  # its metadata's bytes as JSON
    lost: bool = False  # another writer moved the thread before its first save: it saved nothing
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    async def accepted(self, timeout: float = ACCEPT_SECONDS) -> None:
        """Wait until the run's input is on record (or the run ended): from then on it
        happens even if this process dies, taken over by a worker (issue 24)."""
        waits = [asyncio.ensure_future(self.saved.wait()), asyncio.ensure_future(self.done.wait())]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()

    def publish(self, event: str, data: Any) -> None:
        """Send an event to the streams following the run."""
        self.events.append((event, data))
        self._wake.set()
        self._wake = asyncio.Event()

    def follow(self, tick: float | None = None) -> AsyncIterator[tuple[str, Any]]:
        """Every event of the run, those sent already first, until it ends; of a run that
        has ended, its ``metadata`` event and its ``error`` event if it failed.

        With ``tick``, also ``("", None)`` after each ``tick`` seconds with nothing new, so
        that a reader can look at something else (its credential) while the run is quiet.
        The events are the run's as they are now: a run that ends meanwhile drops its own,
        not the reader's.
        """
        return self._follow(self.events, tick)

    async def _follow(
        self, events: list[tuple[str, Any]], tick: float | None
    ) -> AsyncIterator[tuple[str, Any]]:
        index = 0
        while True:
            wake = self._wake
            while index < len(events):
                yield events[index]
                index += 1
            if self.done.is_set():
                return
            if tick is None:
                await wake.wait()
                continue
            try:
                async with asyncio.timeout(tick):  # not wait_for: it can drop a cancel on 3.11
                    await wake.wait()
            except TimeoutError:
                yield "", None

    def problem(self) -> Problem | None:
        """The problem the run's callers are answered with, when a client's mistake ended it."""
        if self.refusal is None:
            return None
        status, detail, extra = self.refusal
        return Problem(status, detail, **extra)

    def as_json(self) -> dict[str, Any]:
        """The LangGraph ``Run`` dict."""
        return {
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "assistant_id": self.assistant_id,
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
            "status": self.status,
            "metadata": self.metadata,
            "multitask_strategy": "reject",
            "kwargs": {},
        }


class RunRegistry:
    """The runs of this process: the one active run of each thread, and the finished runs'
    records, bounded (see the module's docstring)."""

    def __init__(
        self,
        *,
        keep: int = KEEP,
        keep_seconds: float = KEEP_SECONDS,
        keep_bytes: int = KEEP_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.runs: dict[str, Run] = {}
        self.active: dict[str, Run] = {}
        self.keep, self.keep_seconds, self.keep_bytes = keep, keep_seconds, keep_bytes
        self._clock = clock
        self._finished: OrderedDict[str, float] = OrderedDict()  # run id -> when it ended, oldest first
        self._kept_bytes = 0
        self.listeners: list[Callable[[], None]] = []  # told when a run ends (the live feed reads then)

    def get(self, thread_id: str, run_id: str) -> Run:
        """The run ``run_id`` of ``thread_id``; a 404 when this process has no record of it."""
        self.prune()
        run = self.runs.get(run_id)
        if run is None or run.thread_id != thread_id:
            raise Problem(404, f"no run {run_id!r} on thread {thread_id!r} in this service process")
        return run

    def of_thread(self, thread_id: str) -> list[Run]:
        """The runs of a thread this process has a record of, newest first."""
        self.prune()
        runs = [r for r in self.runs.values() if r.thread_id == thread_id]
        runs.sort(key=lambda r: r.created_at, reverse=True)
        return runs

    def start(
        self,
        agent: Agent,
        assistant_id: str,
        thread_id: str,
        run_input: Any,
        config: dict[str, Any],
        modes: list[str],
        metadata: dict[str, Any],
        *,
        waited: bool = False,
    ) -> Run:
        """Start a run as a task of the event loop; ``waited``: a caller waits for its values
        (``runs.wait``), handed to it through :attr:`Run.handoff`."""
        busy = self.active.get(thread_id)
        if busy is not None:
            raise Problem(
                409,
                f"thread {thread_id!r} is busy with run {busy.run_id}; wait for it (runs.join) or cancel it",
            )
        self.prune()
        run = Run(str(uuid.uuid4()), thread_id, assistant_id, metadata, size=_size(metadata))
        loop = asyncio.get_running_loop()
        if waited:
            run.handoff = loop.create_future()
        self.runs[run.run_id] = run
        self.active[thread_id] = run
        saving = on_first_save(run.saved.set)  # the task copies this context: it tells its first save
        try:
            run.task = loop.create_task(self._execute(run, agent, run_input, config, modes))
        finally:
            reset_first_save(saving)
        return run

    async def _execute(
        self, run: Run, agent: Agent, run_input: Any, config: dict[str, Any], modes: list[str]
    ) -> None:
        run_config: Any = config
        try:
            run.status = "running"
            run.publish("metadata", {"run_id": run.run_id, "attempt": 1})
            values: dict[str, Any] | None = None
            if modes:
                wanted = {STREAM_MODES[m]: m for m in modes}
                agent_modes: list[Any] = sorted(wanted)
                async for part in agent.astream(run_input, run_config, stream_mode=agent_modes, version="v2"):
                    data = part["data"]
                    if part["type"] == "values" and "interrupts" in part:
                        data = {**data, "__interrupt__": part["interrupts"]}
                    run.publish(part["type"], data)  # made JSON when a stream reads it
                if run.handoff is not None:
                    values = await values_of(agent, run.thread_id)
            else:  # runs.wait, runs.create: nobody streams it
                output = await agent.ainvoke(run_input, run_config, version="v2")
                if run.handoff is not None:
                    values = to_wire(output.value)
                    if output.interrupts:
                        values["__interrupt__"] = to_wire(list(output.interrupts))
            if run.handoff is not None and values is not None and not run.handoff.done():
                run.handoff.set_result(values)
            run.status = "success"
        except asyncio.CancelledError:
            run.status = "interrupted"
            run.publish("error", {"error": "CancelledError", "message": "the run was cancelled"})
        except Exception as exc:
            run.status = "error"
            found = _refusal(exc)
            run.lost = isinstance(exc, ConflictError) and not run.saved.is_set()
            if found is not None:
                run.refusal = (found.status, found.detail, found.extra)
            else:
                log.warning("run %s of thread %r failed", run.run_id, run.thread_id, exc_info=True)
            run.failure = {"error": type(exc).__name__, "message": _bounded(str(exc))}
            run.publish("error", run.failure)
        finally:
            run.saved.set()
            self._finish(run)

    def _finish(self, run: Run) -> None:
        """The run ended: drop what it kept for its streams and its waiter; keep its record."""
        run.updated_at = time.time()
        if self.active.get(run.thread_id) is run:
            del self.active[run.thread_id]
        summary = run.events[:1]  # its metadata event, and its error event if it failed
        if len(run.events) > 1 and run.events[-1][0] == "error":
            summary.append(run.events[-1])
        run.events = summary
        run.handoff = None  # the request that waits holds its own reference
        run.task = None
        run.done.set()
        run._wake.set()
        self._finished[run.run_id] = self._clock()
        self._kept_bytes += run.size
        self.prune()
        for listener in self.listeners:
            listener()

    def prune(self) -> None:
        """Forget the oldest finished runs beyond the bounds (count, age, bytes)."""
        oldest = self._clock() - self.keep_seconds
        while self._finished:
            run_id, ended = next(iter(self._finished.items()))
            if len(self._finished) <= self.keep and ended >= oldest and self._kept_bytes <= self.keep_bytes:
                return
            del self._finished[run_id]
            gone = self.runs.pop(run_id, None)
            if gone is not None:
                self._kept_bytes -= gone.size


async def values_of(agent: Agent, thread_id: str) -> dict[str, Any]:
    """The thread's values now, as ``runs.wait`` answers them (``__interrupt__``: its pending
    interrupts), read from the store."""
    snapshot = await agent.aget_state({"configurable": {"thread_id": thread_id}})
    values: dict[str, Any] = to_wire(snapshot.values)
    if snapshot.interrupts:
        values["__interrupt__"] = to_wire(list(snapshot.interrupts))
    return values


def _refusal(exc: Exception) -> Problem | None:
    """The problem a run's error is answered with when the client's input caused it."""
    if isinstance(exc, SerializationError) and not str(exc).startswith(
        ("cannot store input event", "cannot store the metadata")
    ):
        return None  # what the run itself made could not be stored: not the client's doing
    return client_problem(exc)


def _bounded(text: str) -> str:
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 3] + "..."


def _size(metadata: dict[str, Any]) -> int:
    try:
        return len(orjson.dumps(metadata, default=str))
    except (TypeError, ValueError):
        return 0


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()
