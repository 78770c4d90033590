"""Running the agent: ``invoke``, ``stream`` and a worker's ``run_claimed``, and their async twins.

A run goes until the agent finishes or pauses (``runtime/loop.py``). ``invoke`` returns
where it stopped; ``stream`` yields progress as it happens, in the chosen modes, while
the run goes on in a thread of its own (sync) or a task (async): the chunks pass through
a queue, and a consumer that stops reading stops the run at its next chunk.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from functools import partial
from typing import Any, Literal

from handrail.agent.core import AgentCore
from handrail.agent.work import Work
from handrail.errors import InvalidInputError
from handrail.runtime import loop
from handrail.types import GraphOutput, Interrupt, RunnableConfig

__all__ = ["STREAM_MODES", "Runs", "StreamMode", "Version"]

StreamMode = Literal["values", "updates", "messages", "custom"]
"""A mode of ``stream``: what it yields as the run goes."""
STREAM_MODES: tuple[str, ...] = ("values", "updates", "messages", "custom")
"""Every stream mode, in the order the docs list them."""
Version = Literal["v1", "v2"]
"""The shape of what ``invoke`` returns and ``stream`` yields (LangGraph's ``version``)."""

Shape = Callable[[str, Any], Any]  # how a stream turns (mode, chunk) into what it yields


class Runs(AgentCore):
    """``invoke``, ``stream`` and ``run_claimed``, and their async twins."""

    def invoke(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        context: Any = None,
        version: Version = "v1",
        **kwargs: Any,
    ) -> Any:
        """Run until the agent finishes or pauses; return the state (v1) or a GraphOutput (v2).

        ``input`` is ``{"messages": [...]}``, a :class:`~handrail.Command`, or None to
        continue the thread from where it stands. When paused, the v1 state holds
        ``"__interrupt__"``: the pending :class:`~handrail.Interrupt` list. ``context`` is
        what hooks and tools read as ``runtime.context``.
        """
        return self._invocation(input, config, context, version, kwargs).run()

    async def ainvoke(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        context: Any = None,
        version: Version = "v1",
        **kwargs: Any,
    ) -> Any:
        """Async :meth:`invoke`."""
        return await self._invocation(input, config, context, version, kwargs).arun()

    def _invocation(
        self, input: Any, config: RunnableConfig | None, context: Any, version: str, options: dict[str, Any]
    ) -> Work[Any]:
        _check_version(version)
        env, request = self._prepare_run(input, config, frozenset(), context, options)
        return self._run(env, request).then(partial(_output, version=version))

    def stream(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        stream_mode: StreamMode | Sequence[StreamMode] = "values",
        version: Version = "v1",
        context: Any = None,
        **kwargs: Any,
    ) -> Iterator[Any]:
        """Run and yield progress as it happens.

        Modes: ``"values"`` (the state after each step), ``"updates"`` (``{step: update}``;
        at a pause ``{"__interrupt__": (...)}``), ``"messages"`` (``(token_chunk,
        metadata)`` as the model streams), ``"custom"`` (what tools send through
        ``get_stream_writer()``). With a list of modes, v1 yields ``(mode, chunk)``; v2
        always yields ``{"type", "ns", "data"}``.
        """
        work, shape = self._streaming(input, config, stream_mode, version, context, kwargs)
        chunks: queue.Queue[tuple[str, Any]] = queue.Queue()
        cancelled = threading.Event()

        def emit(mode: str, chunk: Any) -> None:
            if cancelled.is_set():
                raise _StreamClosed()
            chunks.put((mode, chunk))

        work.env.emit = emit

        def run() -> None:
            try:
                work.run()
                chunks.put((_DONE, None))
            except BaseException as exc:  # handed to the consumer's thread
                chunks.put((_FAILED, exc))

        worker = threading.Thread(target=contextvars.copy_context().run, args=(run,), daemon=True)
        worker.start()
        try:
            while not _ended(*(item := chunks.get())):
                yield shape(*item)
        finally:
            # Stop the run at its next chunk and wait, so the thread is quiet when we return.
            cancelled.set()
            worker.join()

    async def astream(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        stream_mode: StreamMode | Sequence[StreamMode] = "values",
        version: Version = "v1",
        context: Any = None,
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        """Async :meth:`stream`."""
        import asyncio

        work, shape = self._streaming(input, config, stream_mode, version, context, kwargs)
        chunks: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        work.env.emit = lambda mode, chunk: chunks.put_nowait((mode, chunk))

        async def run() -> None:
            try:
                await work.arun()
                chunks.put_nowait((_DONE, None))
            except BaseException as exc:
                chunks.put_nowait((_FAILED, exc))

        task = asyncio.ensure_future(run())
        try:
            while not _ended(*(item := await chunks.get())):
                yield shape(*item)
        finally:
            if not task.done():
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass

    def _streaming(
        self,
        input: Any,
        config: RunnableConfig | None,
        stream_mode: Any,
        version: str,
        context: Any,
        options: dict[str, Any],
    ) -> tuple[Work[loop.RunResult], Shape]:
        """The run of a stream (its ``env.emit`` still to set), and how it shapes a chunk."""
        _check_version(version)
        modes, single = _parse_modes(stream_mode)
        env, request = self._prepare_run(input, config, modes, context, options)
        return self._run(env, request), partial(_format, single=single, version=version)

    def run_claimed(self, thread_id: str, run_id: str) -> loop.RunResult:
        """Run what is due on ``thread_id`` as ``run_id``, a run the caller claimed on the store
        (``claim_queued``: a worker, ``handrail.worker``); the claim ends with the run.

        The run reads the thread first (no cached reading): a claimed run is never retried
        under a run id of its own.
        """
        return self._claimed_run(thread_id, run_id).run()

    async def arun_claimed(self, thread_id: str, run_id: str) -> loop.RunResult:
        """Async :meth:`run_claimed`."""
        return await self._claimed_run(thread_id, run_id).arun()

    def _claimed_run(self, thread_id: str, run_id: str) -> Work[loop.RunResult]:
        env, request = self._prepare_run(None, {"configurable": {"thread_id": thread_id}}, frozenset())
        env.run_id, env.claimed, env.trust_cache = run_id, True, False
        return self._run(env, request)


_DONE = "__done__"
_FAILED = "__failed__"


class _StreamClosed(BaseException):
    """The consumer stopped reading a sync stream; the run stops at its next chunk."""


def _ended(mode: str, chunk: Any) -> bool:
    """Whether a queued item ends a stream; the run's error, if it failed, is raised."""
    if mode == _DONE:
        return True
    if mode == _FAILED:
        if isinstance(chunk, _StreamClosed):
            return True
        raise chunk
    return False


def _check_version(version: str) -> None:
    if version not in ("v1", "v2"):
        raise InvalidInputError(f"version must be 'v1' or 'v2', got {version!r}")


def _parse_modes(stream_mode: Any) -> tuple[frozenset[str], bool]:
    single = isinstance(stream_mode, str)
    modes = [stream_mode] if single else list(stream_mode)
    if not modes:
        raise InvalidInputError(f"stream_mode needs at least one of {list(STREAM_MODES)}")
    for mode in modes:
        if mode not in STREAM_MODES:
            raise InvalidInputError(f"unknown stream_mode {mode!r}; expected one of {list(STREAM_MODES)}")
    return frozenset(modes), single and len(modes) == 1


def _format(mode: str, chunk: Any, *, single: bool, version: str) -> Any:
    interrupts: tuple[Interrupt, ...] | None = None
    if mode == "values" and isinstance(chunk, tuple):
        chunk, interrupts = chunk
    if version == "v2":
        part: dict[str, Any] = {"type": mode, "ns": (), "data": chunk}
        if mode == "values":  # always there, as LangGraph's: empty while nothing is pending
            part["interrupts"] = interrupts if interrupts is not None else ()
        return part
    if interrupts is not None:
        chunk = {**chunk, "__interrupt__": list(interrupts)}
    return chunk if single else (mode, chunk)


def _output(result: loop.RunResult, *, version: str) -> Any:
    if version == "v2":
        return GraphOutput(value=result.values, interrupts=result.interrupts)
    values = dict(result.values)
    if result.interrupts:
        values["__interrupt__"] = list(result.interrupts)
    return values
