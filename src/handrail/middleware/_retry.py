"""``ToolRetryMiddleware`` and ``ModelRetryMiddleware``: try a failed call again, with backoff.

Both take LangChain's parameters and defaults: ``max_retries=2`` (so three attempts),
``retry_on`` (a tuple of exception types, or a predicate; by default every error except
a model error that cannot succeed on a second try - bad credentials, a request the
provider refused, a context too long), ``on_failure`` (``"continue"``: the model gets
an error message and goes on; ``"error"``: the exception stops the run; or a callable
``(exception) -> message``), and the delay ``initial_delay * backoff_factor ** n``
capped at ``max_delay``, with +/-25% ``jitter``.

They compose with review: an ``interrupt()`` is not an error, so a pause is never
retried, swallowed or asked twice; a resumed call starts its attempts again.

Example::

    agent = create_agent(
        model,
        tools=[search],
        middleware=[ToolRetryMiddleware(max_retries=3, tools=["search"], retry_on=(TimeoutError,))],
    )
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

from handrail.context import current_task
from handrail.errors import ConfigurationError
from handrail.messages import AIMessage, ToolMessage
from handrail.middleware.types import (
    AgentMiddleware,
    AsyncModelHandler,
    AsyncToolHandler,
    ModelHandler,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
    ToolHandler,
)
from handrail.models.errors import (
    ModelAuthenticationError,
    ModelContextLengthError,
    ModelRequestError,
)

__all__ = ["ModelRetryMiddleware", "ToolRetryMiddleware", "calculate_delay", "default_retry_on"]

RetryOn = tuple[type[Exception], ...] | Callable[[Exception], bool]
OnFailure = Literal["error", "continue"] | Callable[[Exception], str]


def default_retry_on(exc: BaseException) -> bool:
    """Retry every error except those a second attempt cannot fix."""
    if not isinstance(exc, Exception) or isinstance(exc, ConfigurationError):
        return False
    return not isinstance(exc, (ModelAuthenticationError, ModelContextLengthError, ModelRequestError))


def calculate_delay(
    retry_number: int, *, backoff_factor: float, initial_delay: float, max_delay: float, jitter: bool
) -> float:
    """Seconds to wait before retry ``retry_number`` (0 for the first retry)."""
    delay = initial_delay if backoff_factor == 0 else initial_delay * backoff_factor**retry_number
    delay = min(delay, max_delay)
    if jitter and delay > 0:
        delay = max(0.0, delay + random.uniform(-0.25 * delay, 0.25 * delay))
    return delay


class _Retrying(AgentMiddleware):
    def __init__(
        self,
        *,
        max_retries: int,
        retry_on: RetryOn,
        on_failure: OnFailure,
        backoff_factor: float,
        initial_delay: float,
        max_delay: float,
        jitter: bool,
    ) -> None:
        for label, value in (
            ("max_retries", max_retries),
            ("initial_delay", initial_delay),
            ("max_delay", max_delay),
            ("backoff_factor", backoff_factor),
        ):
            if value < 0:
                raise ConfigurationError(f"{label} must be >= 0, got {value!r}")
        if not (on_failure in ("error", "continue") or callable(on_failure)):
            raise ConfigurationError(
                f"on_failure must be 'continue', 'error' or a callable, got {on_failure!r}"
            )
        self.max_retries = max_retries
        self.retry_on = retry_on
        self.on_failure = on_failure
        self.backoff_factor = backoff_factor
        self.initial_delay = initial_delay
        self.max_delay = max_delay
        self.jitter = jitter

    def _retryable(self, exc: Exception) -> bool:
        if isinstance(self.retry_on, tuple):
            return isinstance(exc, self.retry_on)
        return bool(self.retry_on(exc))

    def _delay(self, attempt: int) -> float:
        return calculate_delay(
            attempt,
            backoff_factor=self.backoff_factor,
            initial_delay=self.initial_delay,
            max_delay=self.max_delay,
            jitter=self.jitter,
        )

    def _failure_text(self, exc: Exception, default: str) -> str:
        if self.on_failure == "error":
            raise exc
        if callable(self.on_failure):
            return str(self.on_failure(exc))
        return default


def _attempts(n: int) -> str:
    return f"{n} attempt" if n == 1 else f"{n} attempts"


class ToolRetryMiddleware(_Retrying):
    """Run a tool call again when the tool raised; ``tools`` limits it to some tools.

    A tool that raises is, in handrail, an error ``ToolMessage``; this middleware looks
    at the exception behind it. Arguments that fail the tool's schema are not retried
    (the same arguments would fail again).
    """

    def __init__(
        self,
        *,
        max_retries: int = 2,
        tools: Sequence[Any] | None = None,
        retry_on: RetryOn = default_retry_on,
        on_failure: OnFailure = "continue",
        backoff_factor: float = 2.0,
        initial_delay: float = 1.0,
        max_delay: float = 60.0,
        jitter: bool = True,
    ) -> None:
        super().__init__(
            max_retries=max_retries,
            retry_on=retry_on,
            on_failure=on_failure,
            backoff_factor=backoff_factor,
            initial_delay=initial_delay,
            max_delay=max_delay,
            jitter=jitter,
        )
        self._tool_filter = None if tools is None else {t if isinstance(t, str) else t.name for t in tools}

    def _applies(self, request: ToolCallRequest) -> bool:
        return self._tool_filter is None or request.tool_call["name"] in self._tool_filter

    def _outcome(self, request: ToolCallRequest, result: ToolMessage, attempt: int) -> ToolMessage | float:
        """The message to return, or the seconds to wait before the next attempt."""
        task = current_task()
        exc = task.tool_errors.pop(str(request.tool_call["id"]), None) if task is not None else None
        if result.status != "error" or not isinstance(exc, Exception) or not self._retryable(exc):
            return result
        if attempt < self.max_retries:
            return self._delay(attempt)
        name = request.tool_call["name"]
        default = (
            f"Tool '{name}' failed after {_attempts(attempt + 1)} with {type(exc).__name__}: {exc}. "
            "Please try again."
        )
        text = self._failure_text(exc, default)
        return ToolMessage(text, tool_call_id=result.tool_call_id, name=name, status="error")

    def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolMessage:
        if not self._applies(request):
            return handler(request)
        attempt = 0
        while True:
            outcome = self._outcome(request, handler(request), attempt)
            if isinstance(outcome, ToolMessage):
                return outcome
            time.sleep(outcome)
            attempt += 1

    async def awrap_tool_call(self, request: ToolCallRequest, handler: AsyncToolHandler) -> ToolMessage:
        import asyncio

        if not self._applies(request):
            return await handler(request)
        attempt = 0
        while True:
            outcome = self._outcome(request, await handler(request), attempt)
            if isinstance(outcome, ToolMessage):
                return outcome
            await asyncio.sleep(outcome)
            attempt += 1


class ModelRetryMiddleware(_Retrying):
    """Call the model again when the call raised (a rate limit, a timeout, a 5xx...).

    When every attempt failed, ``on_failure="continue"`` ends the turn with an
    ``AIMessage`` that says so.
    """

    def __init__(
        self,
        *,
        max_retries: int = 2,
        retry_on: RetryOn = default_retry_on,
        on_failure: OnFailure = "continue",
        backoff_factor: float = 2.0,
        initial_delay: float = 1.0,
        max_delay: float = 60.0,
        jitter: bool = True,
    ) -> None:
        super().__init__(
            max_retries=max_retries,
            retry_on=retry_on,
            on_failure=on_failure,
            backoff_factor=backoff_factor,
            initial_delay=initial_delay,
            max_delay=max_delay,
            jitter=jitter,
        )

    def _outcome(self, exc: Exception, attempt: int) -> ModelResponse | float:
        if not self._retryable(exc):
            raise exc
        if attempt < self.max_retries:
            return self._delay(attempt)
        default = f"Model call failed after {_attempts(attempt + 1)} with {type(exc).__name__}: {exc}"
        return ModelResponse(result=[AIMessage(self._failure_text(exc, default))])

    def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse | AIMessage:
        attempt = 0
        while True:
            try:
                return handler(request)
            except Exception as exc:
                outcome = self._outcome(exc, attempt)
            if isinstance(outcome, ModelResponse):
                return outcome
            time.sleep(outcome)
            attempt += 1

    async def awrap_model_call(
        self, request: ModelRequest, handler: AsyncModelHandler
    ) -> ModelResponse | AIMessage:
        import asyncio

        attempt = 0
        while True:
            try:
                return await handler(request)
            except Exception as exc:
                outcome = self._outcome(exc, attempt)
            if isinstance(outcome, ModelResponse):
                return outcome
            await asyncio.sleep(outcome)
            attempt += 1
