"""OpenAI chat models, and every server that speaks the OpenAI Chat Completions API.

:class:`OpenAIChatModel` talks to ``/v1/chat/completions`` through the official ``openai``
SDK (``pip install 'handrail[openai]'``). With ``base_url`` the same adapter drives a
local or self-hosted server: vLLM, Ollama, llama.cpp's ``llama-server``, LM Studio.

Example::

    from handrail.models import init_chat_model

    model = init_chat_model("openai:gpt-5.4", temperature=0)
    local = init_chat_model("openai:qwen3:8b", base_url="http://localhost:11434/v1")

The SDK clients are created on first use, so building a model never touches the network
or the environment; a missing key is reported by the first call.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import openai
import pydantic
from openai.types.chat import ChatCompletion

from handrail.messages import AIMessage, AIMessageChunk, BaseMessage
from handrail.models._common import (
    LOCAL_SERVER_KEY,
    LazyClients,
    preview,
    split_known_params,
    status_error,
    to_openai_tool,
)
from handrail.models._openai_wire import (
    StreamReader,
    from_openai_completion,
    openai_tool_choice,
    to_openai_messages,
    usage_metadata,
)
from handrail.models.base import ChatModel, ToolSpec
from handrail.models.errors import (
    MissingAPIKeyError,
    ModelConnectionError,
    ModelError,
    ModelResponseError,
    ModelTimeoutError,
)

__all__ = [
    "OpenAIChatModel",
    "from_init",
    "from_openai_completion",
    "to_openai_messages",
    "to_openai_tool",
    "usage_metadata",
]

_OFFICIAL_HOST = "api.openai.com"


class OpenAIChatModel(ChatModel):
    """A chat model served over the OpenAI Chat Completions API.

    Args:
        model: The model name the server knows (``"gpt-5.4"``, ``"qwen3:8b"``, ...).
        api_key: Defaults to ``OPENAI_API_KEY``. A custom ``base_url`` without any key
            sends a placeholder, since local servers do not check it.
        base_url: The API root, e.g. ``"http://localhost:8000/v1"`` for vLLM. Defaults to
            ``OPENAI_BASE_URL``, then OpenAI itself.
        organization, project: OpenAI account routing (default from the environment).
        temperature: Sampling temperature; None leaves the server's default.
        max_tokens: Cap on generated tokens. Sent as ``max_completion_tokens`` to OpenAI
            and as ``max_tokens`` to other servers (pass either name in ``model_kwargs``
            to choose yourself).
        timeout: Seconds to wait for an answer (None: the SDK's default of 10 minutes).
        max_retries: How often the SDK retries 408/409/429/5xx answers and connection
            errors, with exponential backoff (honouring ``Retry-After``).
        parallel_tool_calls: Let the model propose several tool calls per turn (the
            server's default when None). Only sent when tools are.
        stream_usage: Ask for token usage at the end of a stream
            (``stream_options.include_usage``); turn off for servers that reject it.
        default_headers: Extra HTTP headers on every request.
        client, async_client: Ready-made ``openai.OpenAI`` / ``openai.AsyncOpenAI``
            clients (Azure, a custom ``http_client``); the options above that configure
            a client are then ignored.
        model_kwargs: Any other request field (``top_p``, ``seed``, ``stop``,
            ``reasoning_effort``, a server's own such as vLLM's ``top_k``). Fields the SDK
            does not know travel in the JSON body as they are.

    Per-call settings (``ModelRequest.model_settings``) override these for one call.
    """

    provider = "openai"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        organization: str | None = None,
        project: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
        max_retries: int = 2,
        parallel_tool_calls: bool | None = None,
        stream_usage: bool = True,
        default_headers: Mapping[str, str] | None = None,
        client: openai.OpenAI | None = None,
        async_client: openai.AsyncOpenAI | None = None,
        **model_kwargs: Any,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError("OpenAIChatModel needs a model name, e.g. 'gpt-5.4'")
        self.model_name = model
        self.base_url = base_url
        self.organization = organization
        self.project = project
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.max_retries = max_retries
        self.parallel_tool_calls = parallel_tool_calls
        self.stream_usage = stream_usage
        self.default_headers = dict(default_headers or {})
        self.model_kwargs = model_kwargs
        self._api_key = api_key
        self._clients: LazyClients[openai.OpenAI, openai.AsyncOpenAI] = LazyClients(
            self._build_client, self._build_async_client, sync=client, async_=async_client
        )

    # Clients ------------------------------------------------------------------------------
    def _resolved_base_url(self) -> str | None:
        return self.base_url or os.environ.get("OPENAI_BASE_URL") or None

    def _is_official(self) -> bool:
        client = self._clients.existing()
        base = str(client.base_url) if client is not None else self._resolved_base_url()
        return base is None or _OFFICIAL_HOST in base

    def check_credentials(self) -> None:
        """Raise :class:`MissingAPIKeyError` now if no key is available (no network needed)."""
        self._client_options()

    def _client_options(self) -> dict[str, Any]:
        key = self._api_key or os.environ.get("OPENAI_API_KEY")
        base = self._resolved_base_url()
        if not key:
            if base is None or _OFFICIAL_HOST in base:
                raise MissingAPIKeyError(
                    "no OpenAI API key: set the OPENAI_API_KEY environment variable "
                    "(export OPENAI_API_KEY=sk-...) or pass api_key=... to "
                    f"init_chat_model('openai:{self.model_name}', api_key=...). For a local "
                    "OpenAI-compatible server (vLLM, Ollama, LM Studio) pass its base_url "
                    "instead; it needs no key.",
                    provider="openai",
                )
            key = LOCAL_SERVER_KEY
        options: dict[str, Any] = {
            "api_key": key,
            "base_url": base,
            "organization": self.organization,
            "project": self.project,
            "max_retries": self.max_retries,
            "default_headers": self.default_headers or None,
        }
        if self.timeout is not None:
            options["timeout"] = self.timeout
        return options

    def _build_client(self) -> openai.OpenAI:
        return openai.OpenAI(**self._client_options())

    def _build_async_client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(**self._client_options())

    def client(self) -> openai.OpenAI:
        """The sync SDK client, created on first use."""
        return self._clients.sync()

    def async_client(self) -> openai.AsyncOpenAI:
        """The async SDK client of the running event loop, created on first use there."""
        return self._clients.async_()

    def close(self) -> None:
        """Close the sync client's connections (the async one: :meth:`aclose`)."""
        self._clients.close()

    async def aclose(self) -> None:
        """Close the running event loop's async client."""
        await self._clients.aclose()

    # Requests ------------------------------------------------------------------------------
    def request_body(
        self,
        messages: Sequence[BaseMessage],
        tools: Sequence[ToolSpec] | None,
        tool_choice: Any,
        settings: Mapping[str, Any],
    ) -> dict[str, Any]:
        """The Chat Completions request for one call (before SDK keyword splitting)."""
        params: dict[str, Any] = {}
        if self.temperature is not None:
            params["temperature"] = self.temperature
        if self.max_tokens is not None:
            params["max_tokens"] = self.max_tokens
        params.update(self.model_kwargs)
        params.update(settings)
        if "max_tokens" in params and self._is_official() and "max_completion_tokens" not in params:
            # OpenAI's reasoning models refuse max_tokens; other servers may not know the new name
            params["max_completion_tokens"] = params.pop("max_tokens")
        body: dict[str, Any] = {"model": self.model_name, "messages": to_openai_messages(messages)}
        if tools:
            body["tools"] = [to_openai_tool(spec) for spec in tools]
            if tool_choice is not None:
                body["tool_choice"] = openai_tool_choice(tool_choice)
            if self.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = self.parallel_tool_calls
        body.update(params)
        return body

    def _create_kwargs(self, create: Any, body: dict[str, Any], *, stream: bool) -> dict[str, Any]:
        if stream:
            body = {**body, "stream": True}
            if self.stream_usage and "stream_options" not in body:
                body["stream_options"] = {"include_usage": True}
        return split_known_params(create, body)

    def invoke(
        self,
        messages: Sequence[BaseMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: Any = None,
        **settings: Any,
    ) -> AIMessage:
        """Send ``messages`` and return the model's answer.

        Example::

            model.invoke([HumanMessage("hi")], tools=[my_tool.spec()])
        """
        body = self.request_body(messages, tools, tool_choice, settings)
        with self._errors():
            create = self.client().chat.completions.create
            completion = create(**self._create_kwargs(create, body, stream=False))
            return self._parse(completion)

    async def ainvoke(
        self,
        messages: Sequence[BaseMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: Any = None,
        **settings: Any,
    ) -> AIMessage:
        """Async :meth:`invoke`, on the SDK's async client."""
        body = self.request_body(messages, tools, tool_choice, settings)
        with self._errors():
            create = self.async_client().chat.completions.create
            completion = await create(**self._create_kwargs(create, body, stream=False))
            return self._parse(completion)

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
        body = self.request_body(messages, tools, tool_choice, settings)
        reader = StreamReader(self.model_name)
        with self._errors():
            create = self.client().chat.completions.create
            events = create(**self._create_kwargs(create, body, stream=True))
            try:
                for event in events:
                    yield from reader.feed(event)
            finally:
                events.close()
        yield reader.finish()

    async def astream(
        self,
        messages: Sequence[BaseMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: Any = None,
        **settings: Any,
    ) -> AsyncIterator[AIMessageChunk]:
        """Async :meth:`stream`, on the SDK's async client."""
        body = self.request_body(messages, tools, tool_choice, settings)
        reader = StreamReader(self.model_name)
        with self._errors():
            create = self.async_client().chat.completions.create
            events = await create(**self._create_kwargs(create, body, stream=True))
            try:
                async for event in events:
                    for chunk in reader.feed(event):
                        yield chunk
            finally:
                await events.close()
        yield reader.finish()

    # Responses and errors -------------------------------------------------------------------
    def _parse(self, completion: Any) -> AIMessage:
        if not isinstance(completion, ChatCompletion) or not completion.choices:
            raise ModelResponseError(
                f"the server at {self._where()} did not answer with a chat completion "
                f"(got {preview(completion)}); is base_url the API root, e.g. "
                "'http://localhost:8000/v1'?",
                provider="openai",
            )
        try:
            return from_openai_completion(completion)
        except (AttributeError, TypeError, ValueError) as exc:
            raise ModelResponseError(
                f"could not read the chat completion from {self._where()}: {exc}", provider="openai"
            ) from exc

    def _where(self) -> str:
        client = self._clients.existing()
        if client is not None:
            return str(client.base_url)
        return self._resolved_base_url() or "https://api.openai.com/v1"

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Translate the SDK's exceptions into :mod:`handrail.models.errors`."""
        try:
            yield
        except ModelError:
            raise
        except openai.APIStatusError as exc:
            raise status_error(
                provider="openai",
                model=self.model_name,
                status=exc.status_code,
                body=exc.body,
                fallback=exc.message,
                request_id=exc.request_id,
                key_env="OPENAI_API_KEY",
                retries=self.max_retries,
            ) from exc
        except openai.APITimeoutError as exc:
            raise ModelTimeoutError(
                f"{self._where()} did not answer in time ({self.max_retries} retries); raise "
                "timeout=... or check the server",
                provider="openai",
            ) from exc
        except openai.APIConnectionError as exc:
            raise ModelConnectionError(
                f"could not connect to {self._where()} ({self.max_retries} retries): "
                f"{exc.__cause__ or exc}. Is the server running and base_url right?",
                provider="openai",
            ) from exc
        except openai.APIError as exc:  # an error event inside a stream
            raise status_error(
                provider="openai",
                model=self.model_name,
                status=None,
                body={"error": exc.body} if exc.body is not None else None,
                fallback=exc.message,
                request_id=None,
                key_env="OPENAI_API_KEY",
                retries=self.max_retries,
            ) from exc
        except (json.JSONDecodeError, pydantic.ValidationError) as exc:
            raise ModelResponseError(
                f"{self._where()} sent a body that is not valid JSON of the expected shape: {exc}",
                provider="openai",
            ) from exc
        except openai.OpenAIError as exc:
            raise ModelError(f"the OpenAI SDK failed: {exc}", provider="openai") from exc


def from_init(model: str, **options: Any) -> OpenAIChatModel:
    """The ``init_chat_model("openai:...")`` factory: ``OpenAIChatModel(model, **options)``."""
    return OpenAIChatModel(model, **options)
