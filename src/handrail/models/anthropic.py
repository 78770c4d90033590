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

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import anthropic
from anthropic.types import Message

from handrail.messages import AIMessage, BaseMessage
from handrail.models._anthropic_wire import (
    StreamReader,
    anthropic_tool_choice,
    from_anthropic_message,
    system_field,
    to_anthropic_messages,
    to_anthropic_tool,
    usage_metadata,
)
from handrail.models._common import LOCAL_SERVER_KEY, SDKChatModel
from handrail.models._wire import system_and_rest
from handrail.models.base import ToolSpec
from handrail.models.errors import MissingAPIKeyError, ModelAuthenticationError, ModelError

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


class AnthropicChatModel(SDKChatModel[anthropic.Anthropic, anthropic.AsyncAnthropic]):
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
    _sdk: ClassVar[Any] = anthropic
    _sdk_error = anthropic.AnthropicError
    _sdk_name = "Anthropic"
    _client_types = (anthropic.Anthropic, anthropic.AsyncAnthropic)
    _key_env = "ANTHROPIC_API_KEY"
    _base_url_env = "ANTHROPIC_BASE_URL"
    _default_url = "https://api.anthropic.com"
    _answer_kind = "message"
    _root_example = "https://api.anthropic.com"
    _timeout_hint = "stream long answers"
    _connection_hint = "Is base_url right?"

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
        super().__init__(
            model,
            example="claude-sonnet-4-5",
            api_key=api_key,
            base_url=base_url,
            temperature=temperature,
            max_tokens=max_tokens if max_tokens is not None else DEFAULT_MAX_TOKENS,
            timeout=timeout,
            max_retries=max_retries,
            parallel_tool_calls=parallel_tool_calls,
            default_headers=default_headers,
            client=client,
            async_client=async_client,
            model_kwargs=model_kwargs,
        )

    # Clients ------------------------------------------------------------------------------
    def _client_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "max_retries": self.max_retries,
            "default_headers": self.default_headers or None,
        }
        base = self._resolved_base_url()
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
        self._new_client(anthropic.Anthropic)

    def _checked(self, client: Any) -> None:
        if client.api_key is None and client.auth_token is None and client.credentials is None:
            raise MissingAPIKeyError(
                "no Anthropic API key: set the ANTHROPIC_API_KEY environment variable "
                "(export ANTHROPIC_API_KEY=sk-ant-...) or pass api_key=... to "
                f"init_chat_model('anthropic:{self.model_name}', api_key=...).",
                provider="anthropic",
            )

    def _new_client(self, client_type: Callable[..., Any]) -> Any:
        with self._errors():
            client = client_type(**self._client_options())
        self._checked(client)
        return client

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

    def _endpoint(self, client: Any) -> Any:
        return client.messages.create

    # Answers and errors -------------------------------------------------------------------
    def _stream_reader(self) -> StreamReader:
        return StreamReader(self.model_name)

    def _is_answer(self, answer: Any) -> bool:
        return isinstance(answer, Message) and isinstance(answer.content, list)

    def _read_answer(self, answer: Any) -> AIMessage:
        return from_anthropic_message(answer)

    def _translate_own(self, exc: Exception) -> ModelError | None:
        if isinstance(exc, anthropic.APIResponseValidationError):
            return self._bad_body(exc)
        if isinstance(exc, anthropic.CredentialsError):
            return ModelAuthenticationError(
                f"the Anthropic SDK could not load credentials: {exc}. Set ANTHROPIC_API_KEY or "
                "pass api_key=... to init_chat_model.",
                provider="anthropic",
            )
        return None


def from_init(model: str, **options: Any) -> AnthropicChatModel:
    """The ``init_chat_model("anthropic:...")`` factory: ``AnthropicChatModel(model, **options)``."""
    return AnthropicChatModel(model, **options)
