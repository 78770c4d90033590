"""Running the agent: ``invoke``, ``stream`` and a worker's ``run_claimed``, and their async twins.

A run goes until the agent finishes or pauses (``runtime/loop.py``). ``invoke`` returns
where it stopped; ``stream`` yields progress as it happens, in the chosen modes: the run
goes on between the chunks the consumer reads, in the consumer's own thread (sync) or
task (async), driven by ``runtime/streaming.py``; a consumer that stops reading stops
the run there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from functools import partial
from typing import Any, Literal

from handrail.agent._work import Work
from handrail.agent.core import AgentCore
from handrail.errors import InvalidInputError
from handrail.runtime import loop
from handrail.runtime.streaming import stream_async, stream_sync
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

        The stream is a plain generator: the run goes on in the caller's thread while the
        caller asks for the next chunk, with no thread of its own. Steps' chunks and the
        model's tokens go out as they happen. What a hook or tool writes through
        ``get_stream_writer()`` goes out as soon as that hook or tool returns (the run
        cannot hand anything out while the caller's code runs), still in the order
        written and before anything emitted after it; so do the tokens of a model called
        inside a middleware's ``wrap_model_call``. Stopping early (``break``, ``close()``)
        stops the run there; what it saved stays, and ``invoke(None, config)`` goes on.
        """
        work, shape = self._streaming(input, config, stream_mode, version, context, kwargs)
        chunks = stream_sync(work.steps, work.env)
        try:
            for mode, chunk in chunks:
                yield shape(mode, chunk)
        finally:
            chunks.close()  # a consumer that stopped reading stops the run here

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
        """Async :meth:`stream`: the run goes on in the consumer's task, between two chunks
        it reads, as :meth:`stream`'s goes on in the consumer's thread."""
        work, shape = self._streaming(input, config, stream_mode, version, context, kwargs)
        chunks = stream_async(work.steps, work.env)
        try:
            async for mode, chunk in chunks:
                yield shape(mode, chunk)
        finally:
            await chunks.aclose()

    def _streaming(
        self,
        input: Any,
        config: RunnableConfig | None,
        stream_mode: Any,
        version: str,
        context: Any,
        options: dict[str, Any],
    ) -> tuple[Work[loop.RunResult], Shape]:
        """The run of a stream, and how it shapes a chunk."""
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
