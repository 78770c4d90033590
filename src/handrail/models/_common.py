"""The shared body of the model adapters: the four calls written once.

Rules of this module:

- :class:`AdapterModel` owns the public signatures of ``invoke`` / ``ainvoke`` /
  ``stream`` / ``astream``; an adapter implements the four hooks over one
  :class:`ModelCall` (the scripted and LangChain adapters).
- :class:`SDKChatModel` is the base of the adapters over a provider's official SDK
  (OpenAI, Anthropic: both SDKs share one shape). It owns the clients, the calls, the
  reading of answers and the SDK's shared exceptions; an adapter keeps only what
  differs: the request body, the SDK's ``create``, its wire module's answer and stream
  readers, and the exceptions only its SDK has.
- Sync and async are one logic: the request is built and the answer read by the same
  methods around the one line that calls the SDK (``create(...)`` or ``await create(...)``).
- Nothing here knows a wire format (that is ``_wire.py`` and the provider's module).
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import threading
import weakref
from abc import abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from handrail.messages import AIMessage, AIMessageChunk, BaseMessage
from handrail.models._wire import preview, status_error
from handrail.models.base import ChatModel, ToolSpec
from handrail.models.errors import (
    ModelConnectionError,
    ModelError,
    ModelResponseError,
    ModelTimeoutError,
)

if TYPE_CHECKING:  # asyncio loads when something runs async, not on `import handrail`
    import asyncio

__all__ = [
    "LOCAL_SERVER_KEY",
    "AdapterModel",
    "LazyClients",
    "ModelCall",
    "SDKChatModel",
    "split_known_params",
]

LOCAL_SERVER_KEY = "not-needed"
"""The key sent to a custom ``base_url`` when none is configured (local servers ignore it)."""


SyncClient = TypeVar("SyncClient")
AsyncClient = TypeVar("AsyncClient")


class LazyClients(Generic[SyncClient, AsyncClient]):
    """An adapter's SDK clients, built on first use.

    The async client is built once per event loop: its connection pool belongs to the
    loop that opened it, and a second ``asyncio.run`` with the first loop's client fails
    with "Event loop is closed". Clients handed in ready-made are always used as they are.
    """

    def __init__(
        self,
        build_sync: Callable[[], SyncClient],
        build_async: Callable[[], AsyncClient],
        *,
        sync: SyncClient | None = None,
        async_: AsyncClient | None = None,
    ) -> None:
        self._build_sync = build_sync
        self._build_async = build_async
        self.given_async = async_
        self._sync: SyncClient | None = sync
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncClient] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def sync(self) -> SyncClient:
        """The sync client (one for every thread: the SDK clients are thread-safe)."""
        with self._lock:
            if self._sync is None:
                self._sync = self._build_sync()
            return self._sync

    def async_(self) -> AsyncClient:
        """The async client for the running event loop (call from a coroutine)."""
        import asyncio

        if self.given_async is not None:
            return self.given_async
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._async.get(loop)
            if client is None:
                client = self._async[loop] = self._build_async()
            return client

    def existing(self) -> Any:
        """Some client already built or handed in (for its ``base_url``), or None."""
        with self._lock:
            for client in (self._sync, self.given_async, *self._async.values()):
                if client is not None:
                    return client
        return None

    def forget_async(self) -> AsyncClient | None:
        """Drop the running loop's async client from the cache and return it (to close it)."""
        import asyncio

        if self.given_async is not None:
            return self.given_async
        with self._lock:
            return self._async.pop(asyncio.get_running_loop(), None)

    def close(self) -> None:
        """Close the sync client's connections, if it was built."""
        client: Any = self._sync
        if client is not None:
            client.close()

    async def aclose(self) -> None:
        """Close the running event loop's async client, if there is one."""
        client: Any = self.forget_async()
        if client is not None:
            await client.close()


@functools.cache
def _accepted_params(function: Callable[..., Any]) -> frozenset[str]:
    parameters = inspect.signature(function).parameters
    return frozenset(
        name
        for name, p in parameters.items()
        if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    )


def split_known_params(create: Callable[..., Any], request: dict[str, Any]) -> dict[str, Any]:
    """Keep the keywords ``create`` takes; move the others into ``extra_body``.

    So a server-specific option (vLLM's ``top_k``, a newer API field the installed SDK
    does not know yet) still reaches the server, in the JSON body.
    """
    accepted = _accepted_params(getattr(create, "__func__", create))
    known = {k: v for k, v in request.items() if k in accepted or k == "extra_body"}
    extra = {k: v for k, v in request.items() if k not in known}
    if extra:
        known["extra_body"] = {**extra, **(known.get("extra_body") or {})}
    return known


@dataclass(frozen=True)
class ModelCall:
    """One call's input, as ``invoke`` / ``ainvoke`` / ``stream`` / ``astream`` received it."""

    messages: Sequence[BaseMessage]
    tools: Sequence[ToolSpec] | None = None
    tool_choice: Any = None
    settings: dict[str, Any] = field(default_factory=dict)


class AdapterModel(ChatModel):
    """A :class:`ChatModel` whose four calls hand one :class:`ModelCall` to hooks.

    Implement :meth:`_invoke`, :meth:`_ainvoke`, :meth:`_stream` and :meth:`_astream`.
    """

    def invoke(
        self,
        messages: Sequence[BaseMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: Any = None,
        **settings: Any,
    ) -> AIMessage:
        """Send ``messages`` (a leading SystemMessage is the system prompt) and return
        the model's answer; ``settings`` override the model's own for this call.

        Example::

            model.invoke([SystemMessage("Be brief."), HumanMessage("hi")], tools=[my_tool.spec()])
        """
        return self._invoke(ModelCall(messages, tools, tool_choice, settings))

    async def ainvoke(
        self,
        messages: Sequence[BaseMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: Any = None,
        **settings: Any,
    ) -> AIMessage:
        """Async :meth:`invoke`."""
        return await self._ainvoke(ModelCall(messages, tools, tool_choice, settings))

    def stream(
        self,
        messages: Sequence[BaseMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: Any = None,
        **settings: Any,
    ) -> Iterator[AIMessageChunk]:
        """Yield the answer as it is generated: text deltas, then tool-call pieces, then a
        last chunk with the finish reason and usage."""
        return self._stream(ModelCall(messages, tools, tool_choice, settings))

    def astream(
        self,
        messages: Sequence[BaseMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: Any = None,
        **settings: Any,
    ) -> AsyncIterator[AIMessageChunk]:
        """Async :meth:`stream`."""
        return self._astream(ModelCall(messages, tools, tool_choice, settings))

    @abstractmethod
    def _invoke(self, call: ModelCall) -> AIMessage: ...

    @abstractmethod
    async def _ainvoke(self, call: ModelCall) -> AIMessage: ...

    @abstractmethod
    def _stream(self, call: ModelCall) -> Iterator[AIMessageChunk]: ...

    @abstractmethod
    def _astream(self, call: ModelCall) -> AsyncIterator[AIMessageChunk]: ...


class SDKChatModel(AdapterModel, Generic[SyncClient, AsyncClient]):
    """The adapters over a provider's official SDK (see the module's rules).

    A subclass sets the class attributes below and implements :meth:`request_body`,
    :meth:`_endpoint`, :meth:`_is_answer`, :meth:`_read_answer`, :meth:`_stream_reader`
    and :meth:`_client_options`; :meth:`_create_kwargs`, :meth:`_new_client` and
    :meth:`_translate_own` when its SDK needs more.
    """

    _sdk: ClassVar[Any]
    """The SDK module (``openai``, ``anthropic``)."""
    _sdk_error: ClassVar[type[Exception]]
    """The root of the SDK's exceptions."""
    _sdk_name: ClassVar[str]
    _client_types: ClassVar[tuple[Callable[..., Any], Callable[..., Any]]]
    """The SDK's sync and async client classes."""
    _key_env: ClassVar[str]
    _base_url_env: ClassVar[str]
    _default_url: ClassVar[str]
    _answer_kind: ClassVar[str]
    """What the API answers (``"chat completion"``), for error messages."""
    _root_example: ClassVar[str]
    _timeout_hint: ClassVar[str]
    _connection_hint: ClassVar[str]

    def __init__(
        self,
        model: str,
        *,
        example: str,
        api_key: str | None,
        base_url: str | None,
        temperature: float | None,
        max_tokens: int | None,
        timeout: float | None,
        max_retries: int,
        parallel_tool_calls: bool | None,
        default_headers: Mapping[str, str] | None,
        client: SyncClient | None,
        async_client: AsyncClient | None,
        model_kwargs: dict[str, Any],
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError(f"{type(self).__name__} needs a model name, e.g. {example!r}")
        self.model_name = model
        self.base_url = base_url
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.max_retries = max_retries
        self.parallel_tool_calls = parallel_tool_calls
        self.default_headers = dict(default_headers or {})
        self.model_kwargs = model_kwargs
        self._api_key = api_key
        sync_type, async_type = self._client_types
        self._clients: LazyClients[SyncClient, AsyncClient] = LazyClients(
            lambda: self._new_client(sync_type),
            lambda: self._new_client(async_type),
            sync=client,
            async_=async_client,
        )

    # Clients ------------------------------------------------------------------------------
    @abstractmethod
    def _client_options(self) -> dict[str, Any]: ...

    def _new_client(self, client_type: Callable[..., Any]) -> Any:
        return client_type(**self._client_options())

    def _resolved_base_url(self) -> str | None:
        return self.base_url or os.environ.get(self._base_url_env) or None

    def client(self) -> SyncClient:
        """The sync SDK client, created on first use."""
        return self._clients.sync()

    def async_client(self) -> AsyncClient:
        """The async SDK client of the running event loop, created on first use there."""
        return self._clients.async_()

    def close(self) -> None:
        """Close the sync client's connections (the async one: :meth:`aclose`)."""
        self._clients.close()

    async def aclose(self) -> None:
        """Close the running event loop's async client."""
        await self._clients.aclose()

    # Calls --------------------------------------------------------------------------------
    @abstractmethod
    def request_body(
        self,
        messages: Sequence[BaseMessage],
        tools: Sequence[ToolSpec] | None,
        tool_choice: Any,
        settings: Mapping[str, Any],
    ) -> dict[str, Any]:
        """The API request for one call (before SDK keyword splitting)."""
        ...

    @abstractmethod
    def _endpoint(self, client: Any) -> Callable[..., Any]:
        """The SDK's ``create`` on ``client``."""
        ...

    def _create_kwargs(self, create: Any, body: dict[str, Any], *, stream: bool) -> dict[str, Any]:
        return split_known_params(create, {**body, "stream": True} if stream else body)

    def _send(self, call: ModelCall, client: Callable[[], Any], *, stream: bool) -> Any:
        """Build the request, then call the SDK on ``client()``: its answer (a stream when
        ``stream``), or the awaitable of it on an async client."""
        body = self.request_body(call.messages, call.tools, call.tool_choice, call.settings)
        create = self._endpoint(client())
        return create(**self._create_kwargs(create, body, stream=stream))

    def _invoke(self, call: ModelCall) -> AIMessage:
        with self._errors():
            return self._parse(self._send(call, self.client, stream=False))

    async def _ainvoke(self, call: ModelCall) -> AIMessage:
        with self._errors():
            return self._parse(await self._send(call, self.async_client, stream=False))

    def _stream(self, call: ModelCall) -> Iterator[AIMessageChunk]:
        reader = self._stream_reader()
        with self._errors():
            events = self._send(call, self.client, stream=True)
            try:
                for event in events:
                    yield from reader.feed(event)
            finally:
                events.close()
        yield reader.finish()

    async def _astream(self, call: ModelCall) -> AsyncIterator[AIMessageChunk]:
        reader = self._stream_reader()
        with self._errors():
            events = await self._send(call, self.async_client, stream=True)
            try:
                async for event in events:
                    for chunk in reader.feed(event):
                        yield chunk
            finally:
                await events.close()
        yield reader.finish()

    # Answers and errors -------------------------------------------------------------------
    @abstractmethod
    def _stream_reader(self) -> Any:
        """A fresh reader of stream events (``feed(event)`` -> chunks, ``finish()``)."""
        ...

    @abstractmethod
    def _is_answer(self, answer: Any) -> bool: ...

    @abstractmethod
    def _read_answer(self, answer: Any) -> AIMessage: ...

    def _parse(self, answer: Any) -> AIMessage:
        if not self._is_answer(answer):
            raise ModelResponseError(
                f"the server at {self._where()} did not answer with a {self._answer_kind} "
                f"(got {preview(answer)}); is base_url the API root, e.g. {self._root_example!r}?",
                provider=self.provider,
            )
        try:
            return self._read_answer(answer)
        except (AttributeError, TypeError, ValueError) as exc:
            raise ModelResponseError(
                f"could not read the {self._answer_kind} from {self._where()}: {exc}",
                provider=self.provider,
            ) from exc

    def _where(self) -> str:
        client = self._clients.existing()
        if client is not None:
            return str(client.base_url)
        return self._resolved_base_url() or self._default_url

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Translate the SDK's exceptions into :mod:`handrail.models.errors`."""
        try:
            yield
        except ModelError:
            raise
        except Exception as exc:
            error = self._translate(exc)
            if error is None:
                raise
            raise error from exc

    def _translate(self, exc: Exception) -> ModelError | None:
        sdk = self._sdk
        if isinstance(exc, sdk.APIStatusError):
            return self._status_error(exc.status_code, exc.body, exc.message, exc.request_id)
        if isinstance(exc, sdk.APITimeoutError):
            return ModelTimeoutError(
                f"{self._where()} did not answer in time ({self.max_retries} retries); raise "
                f"timeout=... or {self._timeout_hint}",
                provider=self.provider,
            )
        if isinstance(exc, sdk.APIConnectionError):
            return ModelConnectionError(
                f"could not connect to {self._where()} ({self.max_retries} retries): "
                f"{exc.__cause__ or exc}. {self._connection_hint}",
                provider=self.provider,
            )
        own = self._translate_own(exc)
        if own is not None:
            return own
        import pydantic  # loaded with the SDK already; not on `import handrail`

        if isinstance(exc, (json.JSONDecodeError, pydantic.ValidationError)):
            return self._bad_body(exc)
        if isinstance(exc, self._sdk_error):
            return ModelError(f"the {self._sdk_name} SDK failed: {exc}", provider=self.provider)
        return None

    def _translate_own(self, exc: Exception) -> ModelError | None:
        """The error for an exception only this SDK has (None: not one of those)."""
        return None

    def _bad_body(self, exc: Exception) -> ModelError:
        return ModelResponseError(
            f"{self._where()} sent a body that is not valid JSON of the expected shape: {exc}",
            provider=self.provider,
        )

    def _status_error(
        self, status: int | None, body: Any, fallback: str, request_id: str | None
    ) -> ModelError:
        return status_error(
            provider=self.provider,
            model=self.model_name,
            status=status,
            body=body,
            fallback=fallback,
            request_id=request_id,
            key_env=self._key_env,
            retries=self.max_retries,
        )
