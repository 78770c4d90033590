"""Effects and the two drivers that perform them.

The run loop (``loop.py``) is written once, as generators that *yield* the effects they
need - read the thread, append events, call a hook, call the model, run tools - and
receive the results. :func:`drive_sync` performs effects with blocking calls,
:func:`drive_async` with ``await``. Each effect says how it is done both ways; nothing
else in the runtime knows whether it runs sync or async.

A stream is driven by the drivers of ``streaming.py`` instead, which hand out chunks as
they go. An effect tells them two more things: the steps they may run in place of it
(:meth:`Effect.nested_sync`: a wrap chain without middleware, the tasks of a tools step,
another attempt's run), so that what those steps emit reaches the stream at once; and,
for a model call that streams, the chunks to hand out one by one (:meth:`Effect.source_sync`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from handrail.checkpoint.base import BaseCheckpointSaver, ThreadRecord
from handrail.context import TaskContext, reset_current_task, set_current_task
from handrail.messages import AIMessage, AIMessageChunk, BaseMessage, new_id
from handrail.middleware.types import (
    AgentMiddleware,
    ModelRequest,
    ModelResponse,
    hook_is_defined,
)
from handrail.models.base import accumulate_chunks
from handrail.runtime._fold import ThreadFold
from handrail.runtime._pending import InterruptRecord
from handrail.runtime.events import Event
from handrail.runtime.spec import AgentSpec
from handrail.tools import run_coroutine_sync

if TYPE_CHECKING:  # asyncio loads when something runs async, not on `import handrail`
    import asyncio

__all__ = ["Effect", "Env", "drive_async", "drive_sync"]

Gen = Generator["Effect", Any, Any]
Emitter = Callable[[str, Any], None]  # where a run's chunks go: (mode, chunk)


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
        emit: Emitter | None = None,
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

    def nested_sync(self, env: Env) -> tuple[Gen, Env] | None:
        """Steps a streaming driver may run in place of this effect, driven sync, and the
        ``Env`` they run in; None: perform the effect."""
        return None

    def nested_async(self, env: Env) -> tuple[Gen, Env] | None:
        """As :meth:`nested_sync`, driven async."""
        return None

    def source_sync(self, env: Env) -> Generator[Any, None, None] | None:
        """Items a streaming driver pulls one by one, handing out ``took(item)`` after each,
        before the effect's result is ``result()``; None: perform the effect."""
        return None

    def source_async(self, env: Env) -> AsyncGenerator[Any, None] | None:
        """As :meth:`source_sync`, driven async."""
        return None

    def took(self, item: Any) -> tuple[str, Any]:
        """Keep ``item`` of the source; the chunk (mode, data) it makes."""
        raise NotImplementedError

    def result(self) -> Any:
        """The effect's result once its source is used up."""
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

    def nested_sync(self, env: Env) -> tuple[Gen, Env] | None:
        return None if self.layers else (self._inline(env), env)

    def nested_async(self, env: Env) -> tuple[Gen, Env] | None:
        return self.nested_sync(env)

    def _inline(self, env: Env) -> Gen:
        """The chain without middleware, as steps: the innermost generator, normalised."""
        env.acted = True
        self.task.source = None
        return self.normalise((yield from self.innermost(self.request)))

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


# Model -----------------------------------------------------------------------------------
class CallModel(Effect):
    """Call the chat model once; with ``stream`` set, each chunk goes to "messages".

    The model runs with ``task`` as the current task, as everything inside a wrap chain.
    """

    __slots__ = ("messages", "metadata", "request", "stream", "taken", "task")

    def __init__(
        self,
        request: ModelRequest,
        messages: list[BaseMessage],
        metadata: dict[str, Any],
        stream: bool,
        task: TaskContext,
    ) -> None:
        self.request = request
        self.messages = messages
        self.metadata = metadata
        self.stream = stream
        self.task = task
        self.taken: list[AIMessageChunk] = []

    def _kwargs(self) -> dict[str, Any]:
        return {
            "tools": [t.spec() for t in self.request.tools] or None,
            "tool_choice": self.request.tool_choice,
            **self.request.model_settings,
        }

    def source_sync(self, env: Env) -> Generator[AIMessageChunk, None, None] | None:
        if not self.stream:
            return None
        return _pulled_under(self.task, iter(self.request.model.stream(self.messages, **self._kwargs())))

    def source_async(self, env: Env) -> AsyncGenerator[AIMessageChunk, None] | None:
        if not self.stream:
            return None
        return _apulled_under(self.task, aiter(self.request.model.astream(self.messages, **self._kwargs())))

    def took(self, item: Any) -> tuple[str, Any]:
        self.taken.append(item)
        return "messages", (item, self.metadata)

    def result(self) -> AIMessage:
        return accumulate_chunks(self.taken)

    def run_sync(self, env: Env) -> AIMessage:
        source = self.source_sync(env)
        if source is None:
            token = set_current_task(self.task)
            try:
                return self.request.model.invoke(self.messages, **self._kwargs())
            finally:
                reset_current_task(token)
        for item in source:
            env.send(*self.took(item))
        return self.result()

    async def run_async(self, env: Env) -> AIMessage:
        source = self.source_async(env)
        if source is None:
            token = set_current_task(self.task)
            try:
                return await self.request.model.ainvoke(self.messages, **self._kwargs())
            finally:
                reset_current_task(token)
        async for item in source:
            env.send(*self.took(item))
        return self.result()


def _pulled_under(task: TaskContext, items: Iterator[Any]) -> Generator[Any, None, None]:
    """``items``, each pulled with ``task`` as the current task (the consumer of a stream
    runs between two pulls, outside it); closing this closes ``items``."""
    try:
        while True:
            token = set_current_task(task)
            try:
                item = next(items)
            except StopIteration:
                return
            finally:
                reset_current_task(token)
            yield item
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()


async def _apulled_under(task: TaskContext, items: AsyncIterator[Any]) -> AsyncGenerator[Any, None]:
    """Async :func:`_pulled_under`."""
    try:
        while True:
            token = set_current_task(task)
            try:
                item = await anext(items)
            except StopAsyncIteration:
                return
            finally:
                reset_current_task(token)
            yield item
    finally:
        close = getattr(items, "aclose", None)
        if close is not None:
            await close()


__all__ += [
    "CallHook",
    "CallModel",
    "Chain",
    "StoreCall",
    "normalise_model_result",
]
