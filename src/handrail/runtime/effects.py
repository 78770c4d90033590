"""Effects and the two drivers that perform them.

The run loop (``loop.py``) is written once, as generators that *yield* the effects they
need - read the thread, append events, call a hook, call the model, run tools - and
receive the results. :func:`drive_sync` performs effects with blocking calls,
:func:`drive_async` with ``await``. Each effect says how it is done both ways; nothing
else in the runtime knows whether it runs sync or async.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from handrail.checkpoint.base import BaseCheckpointSaver, ThreadRecord
from handrail.context import TaskContext, reset_current_task, set_current_task
from handrail.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage, new_id
from handrail.middleware.types import (
    AgentMiddleware,
    ModelRequest,
    ModelResponse,
    hook_is_defined,
)
from handrail.models.base import accumulate_chunks
from handrail.runtime.events import Event
from handrail.runtime.fold import ThreadFold
from handrail.runtime.pending import InterruptRecord
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
    "RunTasks",
    "StoreCall",
    "normalise_model_result",
    "normalise_tool_result",
    "tool_result_message",
]
