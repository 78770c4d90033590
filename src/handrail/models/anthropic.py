"""Anthropic (Claude) chat models through the official ``anthropic`` SDK.

``pip install 'handrail[anthropic]'``. The Messages API differs from Chat Completions in
ways this adapter hides: the system prompt is a request field, not a message; tool calls
are ``tool_use`` content blocks and their results ``tool_result`` blocks inside a user
turn (all results of one assistant turn travel in one user turn, ``is_error`` set for
failed or rejected calls); ``max_tokens`` is required.

Example::

    from handrail.models import init_chat_model

    model = init_chat_model("anthropic:claude-sonnet-4-5", max_tokens=2048)
    model = init_chat_model("claude-sonnet-4-5")        # provider inferred from the name
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import anthropic
import pydantic
from anthropic.types import Message

from handrail.messages import AIMessage, AIMessageChunk, BaseMessage
from handrail.models._anthropic_wire import (
    StreamReader,
    anthropic_tool_choice,
    from_anthropic_message,
    system_field,
    to_anthropic_messages,
    to_anthropic_tool,
    usage_metadata,
)
from handrail.models._common import (
    LOCAL_SERVER_KEY,
    LazyClients,
    preview,
    split_known_params,
    status_error,
    system_and_rest,
)
from handrail.models.base import ChatModel, ToolSpec
from handrail.models.errors import (
    MissingAPIKeyError,
    ModelAuthenticationError,
    ModelConnectionError,
    ModelError,
    ModelResponseError,
    ModelTimeoutError,
)

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "AnthropicChatModel",
    "from_anthropic_message",
    "from_init",
    "to_anthropic_messages",
    "to_anthropic_tool",
    "usage_metadata",
]

DEFAULT_MAX_TOKENS = 4096
"""``max_tokens`` when none is given (the Messages API requires one)."""


class AnthropicChatModel(ChatModel):
    """A Claude model over the Anthropic Messages API.

    Args:
        model: The model name (``"claude-sonnet-4-5"``, ...).
        api_key: Defaults to ``ANTHROPIC_API_KEY`` (or ``ANTHROPIC_AUTH_TOKEN``, or an
            Anthropic credentials profile). A custom ``base_url`` without any credentials
            sends a placeholder key.
        base_url: The API root (default ``ANTHROPIC_BASE_URL``, then Anthropic's).
        max_tokens: Cap on generated tokens; default :data:`DEFAULT_MAX_TOKENS`.
        temperature: Sampling temperature; None leaves the API's default.
        timeout: Seconds to wait for an answer (None: the SDK's default).
        max_retries: How often the SDK retries 408/409/429/5xx (and 529 overloaded)
            answers and connection errors, with exponential backoff.
        parallel_tool_calls: False asks for at most one tool call per turn
            (``disable_parallel_tool_use``); None leaves the API's default (several).
        default_headers: Extra HTTP headers (e.g. ``anthropic-beta``).
        client, async_client: Ready-made ``anthropic.Anthropic`` /
            ``anthropic.AsyncAnthropic`` clients; the client options above are then ignored.
        model_kwargs: Any other request field (``top_p``, ``stop_sequences``, ``thinking``,
            ``metadata``, ...). Fields the installed SDK does not know go in the JSON body.
    """

    provider = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        timeout: float | None = None,
        max_retries: int = 2,
        parallel_tool_calls: bool | None = None,
        default_headers: Mapping[str, str] | None = None,
        client: anthropic.Anthropic | None = None,
        async_client: anthropic.AsyncAnthropic | None = None,
        **model_kwargs: Any,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError("AnthropicChatModel needs a model name, e.g. 'claude-sonnet-4-5'")
        self.model_name = model
        self.base_url = base_url
        self.max_tokens = max_tokens if max_tokens is not None else DEFAULT_MAX_TOKENS
        self.temperature = temperature
        self.timeout = timeout
        self.max_retries = max_retries
        self.parallel_tool_calls = parallel_tool_calls
        self.default_headers = dict(default_headers or {})
        self.model_kwargs = model_kwargs
        self._api_key = api_key
        self._clients: LazyClients[anthropic.Anthropic, anthropic.AsyncAnthropic] = LazyClients(
            self._build_client, self._build_async_client, sync=client, async_=async_client
        )

    # Clients ------------------------------------------------------------------------------
    def _client_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "max_retries": self.max_retries,
            "default_headers": self.default_headers or None,
        }
        base = self.base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
        if base is not None:
            options["base_url"] = base
        if self._api_key:
            options["api_key"] = self._api_key
        elif base is not None and not (
            os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")
        ):
            options["api_key"] = LOCAL_SERVER_KEY
        if self.timeout is not None:
            options["timeout"] = self.timeout
        return options

    def check_credentials(self) -> None:
        """Raise :class:`MissingAPIKeyError` now if no key is available (no network needed)."""
        self._build_client()

    def _checked(self, client: Any) -> None:
        if client.api_key is None and client.auth_token is None and client.credentials is None:
            raise MissingAPIKeyError(
                "no Anthropic API key: set the ANTHROPIC_API_KEY environment variable "
                "(export ANTHROPIC_API_KEY=sk-ant-...) or pass api_key=... to "
                f"init_chat_model('anthropic:{self.model_name}', api_key=...).",
                provider="anthropic",
            )

    def _build_client(self) -> anthropic.Anthropic:
        with self._errors():
            client = anthropic.Anthropic(**self._client_options())
        self._checked(client)
        return client

    def _build_async_client(self) -> anthropic.AsyncAnthropic:
        with self._errors():
            client = anthropic.AsyncAnthropic(**self._client_options())
        self._checked(client)
        return client

    def client(self) -> anthropic.Anthropic:
        """The sync SDK client, created on first use."""
        return self._clients.sync()

    def async_client(self) -> anthropic.AsyncAnthropic:
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
        """The Messages API request for one call (before SDK keyword splitting)."""
        system, conversation = system_and_rest(messages)
        params: dict[str, Any] = {"max_tokens": self.max_tokens}
        if self.temperature is not None:
            params["temperature"] = self.temperature
        params.update(self.model_kwargs)
        params.update(settings)
        body: dict[str, Any] = {"model": self.model_name, "messages": to_anthropic_messages(conversation)}
        system_prompt = system_field(system)
        if system_prompt:
            body["system"] = system_prompt
        if tools:
            body["tools"] = [to_anthropic_tool(spec) for spec in tools]
            choice = anthropic_tool_choice(tool_choice)
            if self.parallel_tool_calls is False:
                choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
            if choice is not None:
                body["tool_choice"] = choice
        body.update(params)
        return body

    def invoke(
        self,
        messages: Sequence[BaseMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: Any = None,
        **settings: Any,
    ) -> AIMessage:
        """Send ``messages`` (a leading SystemMessage becomes ``system``); return the answer.

        Example::

            model.invoke([SystemMessage("Be brief."), HumanMessage("hi")])
        """
        body = self.request_body(messages, tools, tool_choice, settings)
        with self._errors():
            create = self.client().messages.create
            message = create(**split_known_params(create, body))
            return self._parse(message)

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
            create = self.async_client().messages.create
            message = await create(**split_known_params(create, body))
            return self._parse(message)

    def stream(
        self,
        messages: Sequence[BaseMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: Any = None,
        **settings: Any,
    ) -> Iterator[AIMessageChunk]:
        """Yield the answer as it is generated: text deltas and ``input_json`` pieces of
        tool calls, then a last chunk with the stop reason and usage."""
        body = self.request_body(messages, tools, tool_choice, settings)
        reader = StreamReader(self.model_name)
        with self._errors():
            create = self.client().messages.create
            events = create(**split_known_params(create, {**body, "stream": True}))
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
            create = self.async_client().messages.create
            events = await create(**split_known_params(create, {**body, "stream": True}))
            try:
                async for event in events:
                    for chunk in reader.feed(event):
                        yield chunk
            finally:
                await events.close()
        yield reader.finish()

    # Responses and errors -------------------------------------------------------------------
    def _parse(self, message: Any) -> AIMessage:
        if not isinstance(message, Message) or not isinstance(message.content, list):
            raise ModelResponseError(
                f"the server at {self._where()} did not answer with a message (got "
                f"{preview(message)}); is base_url the API root, e.g. 'https://api.anthropic.com'?",
                provider="anthropic",
            )
        try:
            return from_anthropic_message(message)
        except (AttributeError, TypeError, ValueError) as exc:
            raise ModelResponseError(
                f"could not read the message from {self._where()}: {exc}", provider="anthropic"
            ) from exc

    def _where(self) -> str:
        client = self._clients.existing()
        if client is not None:
            return str(client.base_url)
        return self.base_url or os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Translate the SDK's exceptions into :mod:`handrail.models.errors`."""
        try:
            yield
        except ModelError:
            raise
        except anthropic.APIStatusError as exc:
            raise status_error(
                provider="anthropic",
                model=self.model_name,
                status=exc.status_code,
                body=exc.body,
                fallback=exc.message,
                request_id=exc.request_id,
                key_env="ANTHROPIC_API_KEY",
                retries=self.max_retries,
            ) from exc
        except anthropic.APITimeoutError as exc:
            raise ModelTimeoutError(
                f"{self._where()} did not answer in time ({self.max_retries} retries); raise "
                "timeout=... or stream long answers",
                provider="anthropic",
            ) from exc
        except anthropic.APIConnectionError as exc:
            raise ModelConnectionError(
                f"could not connect to {self._where()} ({self.max_retries} retries): "
                f"{exc.__cause__ or exc}. Is base_url right?",
                provider="anthropic",
            ) from exc
        except (anthropic.APIResponseValidationError, json.JSONDecodeError, pydantic.ValidationError) as exc:
            raise ModelResponseError(
                f"{self._where()} sent a body that is not valid JSON of the expected shape: {exc}",
                provider="anthropic",
            ) from exc
        except anthropic.CredentialsError as exc:
            raise ModelAuthenticationError(
                f"the Anthropic SDK could not load credentials: {exc}. Set ANTHROPIC_API_KEY or "
                "pass api_key=... to init_chat_model.",
                provider="anthropic",
            ) from exc
        except anthropic.AnthropicError as exc:
            raise ModelError(f"the Anthropic SDK failed: {exc}", provider="anthropic") from exc


def from_init(model: str, **options: Any) -> AnthropicChatModel:
    """The ``init_chat_model("anthropic:...")`` factory: ``AnthropicChatModel(model, **options)``."""
    return AnthropicChatModel(model, **options)
