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

import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import openai
from openai.types.chat import ChatCompletion

from handrail.messages import AIMessage, BaseMessage
from handrail.models._common import LOCAL_SERVER_KEY, SDKChatModel, split_known_params
from handrail.models._openai_wire import (
    StreamReader,
    from_openai_completion,
    openai_tool_choice,
    to_openai_messages,
    usage_metadata,
)
from handrail.models._wire import to_openai_tool
from handrail.models.base import ToolSpec
from handrail.models.errors import MissingAPIKeyError, ModelError

__all__ = [
    "OpenAIChatModel",
    "from_init",
    "from_openai_completion",
    "to_openai_messages",
    "to_openai_tool",
    "usage_metadata",
]

_OFFICIAL_HOST = "api.openai.com"


class OpenAIChatModel(SDKChatModel[openai.OpenAI, openai.AsyncOpenAI]):
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
    _sdk: ClassVar[Any] = openai
    _sdk_error = openai.OpenAIError
    _sdk_name = "OpenAI"
    _client_types = (openai.OpenAI, openai.AsyncOpenAI)
    _key_env = "OPENAI_API_KEY"
    _base_url_env = "OPENAI_BASE_URL"
    _default_url = "https://api.openai.com/v1"
    _answer_kind = "chat completion"
    _root_example = "http://localhost:8000/v1"
    _timeout_hint = "check the server"
    _connection_hint = "Is the server running and base_url right?"

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
        super().__init__(
            model,
            example="gpt-5.4",
            api_key=api_key,
            base_url=base_url,
            temperature=temperature,
            max_tokens=max_tokens,
            timeout=timeout,
            max_retries=max_retries,
            parallel_tool_calls=parallel_tool_calls,
            default_headers=default_headers,
            client=client,
            async_client=async_client,
            model_kwargs=model_kwargs,
        )
        self.organization = organization
        self.project = project
        self.stream_usage = stream_usage

    # Clients ------------------------------------------------------------------------------
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

    def _endpoint(self, client: Any) -> Any:
        return client.chat.completions.create

    def _create_kwargs(self, create: Any, body: dict[str, Any], *, stream: bool) -> dict[str, Any]:
        if stream:
            body = {**body, "stream": True}
            if self.stream_usage and "stream_options" not in body:
                body["stream_options"] = {"include_usage": True}
        return split_known_params(create, body)

    # Answers and errors -------------------------------------------------------------------
    def _stream_reader(self) -> StreamReader:
        return StreamReader(self.model_name)

    def _is_answer(self, answer: Any) -> bool:
        return isinstance(answer, ChatCompletion) and bool(answer.choices)

    def _read_answer(self, answer: Any) -> AIMessage:
        return from_openai_completion(answer)

    def _translate_own(self, exc: Exception) -> ModelError | None:
        if isinstance(exc, openai.APIError):  # an error event inside a stream
            body = {"error": exc.body} if exc.body is not None else None
            return self._status_error(None, body, exc.message, None)
        return None


def from_init(model: str, **options: Any) -> OpenAIChatModel:
    """The ``init_chat_model("openai:...")`` factory: ``OpenAIChatModel(model, **options)``."""
    return OpenAIChatModel(model, **options)
