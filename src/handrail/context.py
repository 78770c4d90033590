"""What code running inside a run can reach: ``interrupt()``, the stream writer, runtimes.

A hook, a model wrapper or a tool runs as a *task* of a step. The run loop puts a
:class:`TaskContext` in a context variable while the task runs; :func:`interrupt` and
:func:`get_stream_writer` read it. When a paused step runs again on resume, the context
carries the answers already given, matched to ``interrupt()`` calls by their order in
the task (the first call gets the first answer, and so on).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic

from handrail.errors import ConfigurationError

__all__ = [
    "Runtime",
    "TaskContext",
    "ToolRuntime",
    "get_stream_writer",
    "interrupt",
]

StreamWriter = Callable[[Any], None]


def _discard(_: Any) -> None:
    return None


if TYPE_CHECKING:  # defaults of type variables (PEP 696) are for type checkers
    from typing_extensions import TypeVar

    ContextT = TypeVar("ContextT", default=Any)
    StateT = TypeVar("StateT", default=Any)
else:  # at run time plain ones serve (typing_extensions costs 3 ms to import)
    from typing import TypeVar

    ContextT = TypeVar("ContextT")
    StateT = TypeVar("StateT")


@dataclass(slots=True, kw_only=True)
class Runtime(Generic[ContextT]):
    """Passed to middleware hooks: the run's context, store, stream writer and thread.

    Every field has a default, so a hook can be unit-tested by calling it with
    ``Runtime()`` or ``Runtime(context=...)``. ``Runtime[MyContext]`` works in
    signatures, as in LangGraph.

    - ``context``: what the caller passed as ``invoke(..., context=...)`` (or
      ``config["context"]``); typed by ``create_agent(context_schema=...)``.
    - ``store``: the ``store`` given to ``create_agent`` (None when there is none).
    - ``stream_writer``: sends a chunk to ``stream_mode="custom"``.
    - ``thread_id``, ``config``, ``reviewer`` (who answered, when the run was started by
      a resume) and ``step`` (the step running now): handrail's own additions.

    Example::

        @dataclass
        class Ctx:
            user_id: str

        class Greeter(AgentMiddleware):
            def before_model(self, state, runtime: Runtime[Ctx]):
                print("user", runtime.context.user_id)

        Greeter().before_model({"messages": []}, Runtime(context=Ctx("u1")))
    """

    context: ContextT = None  # type: ignore[assignment]
    store: Any = None
    stream_writer: StreamWriter = _discard
    previous: Any = None
    thread_id: str | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    reviewer: Any = None
    step: str = ""


@dataclass(slots=True, kw_only=True)
class ToolRuntime(Runtime[ContextT], Generic[ContextT, StateT]):
    """Injected into a tool that declares a parameter of this type.

    Adds the calling ``tool_call_id``, the ``state`` at the time of the call and the
    agent's ``tools`` to what :class:`Runtime` has (``context``, ``store``,
    ``stream_writer``, ``config``). The
    parameter is hidden from the tool's argument schema. ``ToolRuntime[Ctx]`` and
    ``ToolRuntime[Ctx, State]`` work in signatures.

    Example::

        @tool
        def whoami(runtime: ToolRuntime) -> str:
            \"\"\"Say which thread is running.\"\"\"
            return runtime.thread_id or "none"
    """

    tool_call_id: str = ""
    state: StateT = field(default_factory=dict)  # type: ignore[assignment]
    tools: list[Any] = field(default_factory=list)

    @classmethod
    def of_call(
        cls,
        runtime: Runtime[Any],
        tool_call_id: str,
        state: Any,
        *,
        step: str | None = None,
        tools: Iterable[Any] = (),
    ) -> ToolRuntime[Any, Any]:
        """The runtime a call of a run sees: ``runtime``'s, with the call's id and state,
        and the agent's tools (``tools``, as LangChain's ``ToolRuntime.tools``)."""
        return cls(
            tools=list(tools),
            thread_id=runtime.thread_id,
            config=runtime.config,
            context=runtime.context,
            store=runtime.store,
            stream_writer=runtime.stream_writer,
            reviewer=runtime.reviewer,
            step=runtime.step if step is None else step,
            tool_call_id=tool_call_id,
            state=state,
        )

    if not TYPE_CHECKING:

        def __class_getitem__(cls, params):
            # ``ToolRuntime[Ctx]``: the state's type defaults to Any, as its type variable says
            if not isinstance(params, tuple):
                params = (params,)
            # (named: slots=True makes a new class, which the bare super()'s cell does not know)
            return super(ToolRuntime, cls).__class_getitem__(params + (Any,) * (2 - len(params)))


class PauseSignal(BaseException):
    """Raised by :func:`interrupt` to unwind a task that must wait for an answer.

    A ``BaseException`` so that a tool's ``except Exception`` does not swallow it.
    """

    def __init__(self, value: Any, index: int, source: str | None) -> None:
        super().__init__(value)
        self.value = value
        self.index = index
        self.source = source


class TaskContext:
    """The per-task context :func:`interrupt` and :func:`get_stream_writer` read.

    ``tool_errors``: the exception behind each error ToolMessage a tool's failure
    became (by call id), for wrappers that retry (``ToolRetryMiddleware``).
    """

    __slots__ = (
        "answers",
        "can_pause",
        "counter",
        "source",
        "stream_writer",
        "tool_errors",
        "why_cannot_pause",
    )

    def __init__(
        self,
        answers: Mapping[int, Any],
        can_pause: bool,
        stream_writer: StreamWriter,
        source: str | None = None,
        why_cannot_pause: str = "",
        counter: int = 0,
        tool_errors: dict[str, BaseException] | None = None,
    ) -> None:
        self.answers = answers
        self.can_pause = can_pause
        self.stream_writer = stream_writer
        self.source = source
        self.why_cannot_pause = why_cannot_pause
        self.counter = counter
        self.tool_errors: dict[str, BaseException] = {} if tool_errors is None else tool_errors

    def next_index(self) -> int:
        index = self.counter
        self.counter += 1
        return index


_current: ContextVar[TaskContext | None] = ContextVar("handrail_task", default=None)


def current_task() -> TaskContext | None:
    """The context of the task running now, or None outside a run."""
    return _current.get()


def set_current_task(ctx: TaskContext | None) -> Any:
    """Install ``ctx`` for the running task; returns a token for :func:`reset_current_task`."""
    return _current.set(ctx)


def reset_current_task(token: Any) -> None:
    _current.reset(token)


def interrupt(value: Any) -> Any:
    """Pause the run and wait for an answer; return the answer once it is given.

    Call it from a tool or a middleware hook. The first time, it saves ``value`` as a
    pending :class:`~handrail.Interrupt` and stops the run; the caller sees it in
    ``result["__interrupt__"]``. When the thread is resumed with
    ``Command(resume=answer)``, the step that paused runs again from its start and this
    call returns ``answer``. Code before the call therefore runs again on resume: keep
    side effects after it.

    Example::

        @tool
        def ask_user(question: str) -> str:
            \"\"\"Ask the user a question.\"\"\"
            return interrupt({"question": question})

    Raises :class:`~handrail.errors.ConfigurationError` when the agent has no
    checkpointer or the config no ``thread_id`` (SPEC rule 7), and ``RuntimeError``
    outside a run.
    """
    ctx = _current.get()
    if ctx is None:
        raise RuntimeError("interrupt() can only be called inside a tool or middleware hook of a run")
    index = ctx.next_index()
    if index in ctx.answers:
        return ctx.answers[index]
    if not ctx.can_pause:
        raise ConfigurationError(
            f"cannot pause for review: {ctx.why_cannot_pause}. A pause must be saved: pass "
            "checkpointer=InMemorySaver() (or another saver) to create_agent and "
            "config={'configurable': {'thread_id': '...'}} to invoke"
        )
    raise PauseSignal(value, index, ctx.source)


def get_stream_writer() -> StreamWriter:
    """Return a function that sends a chunk to ``stream_mode="custom"``.

    Outside a run, or when nobody streams custom chunks, the writer discards them.

    Example::

        @tool
        def fetch(url: str) -> str:
            \"\"\"Fetch a page.\"\"\"
            get_stream_writer()({"progress": "fetching " + url})
            ...
    """
    ctx = _current.get()
    return ctx.stream_writer if ctx is not None else _discard
