"""The errors a chat-model adapter raises.

A provider SDK has its own exception tree; the adapters translate it into these, so code
that drives an agent catches one family whatever the model. Each message says what
happened and what to do about it; the SDK's exception stays on ``__cause__``.

The SDK retries 429 and 5xx answers itself (``max_retries``, default 2); a
:class:`ModelRateLimitError` or :class:`ModelServerError` means those retries ran out.
A failed model call saves nothing: the thread stays where it was, and
``agent.invoke(None, config)`` tries the step again.

Example::

    from handrail.models.errors import ModelAuthenticationError, ModelError

    try:
        agent.invoke(inputs, config)
    except ModelAuthenticationError as exc:
        print(exc)   # openai rejected the API key (HTTP 401): ... Set OPENAI_API_KEY ...
    except ModelError as exc:
        print(exc.provider, exc.status_code, exc)
"""

from __future__ import annotations

import re
from typing import Any

from handrail.errors import ConfigurationError, HandrailError

__all__ = [
    "MissingAPIKeyError",
    "ModelAuthenticationError",
    "ModelConnectionError",
    "ModelContextLengthError",
    "ModelError",
    "ModelRateLimitError",
    "ModelRequestError",
    "ModelResponseError",
    "ModelServerError",
    "ModelTimeoutError",
    "error_detail",
    "looks_like_context_overflow",
]


class ModelError(HandrailError):
    """A call to a chat model failed.

    ``provider`` names the adapter (``"openai"``, ``"anthropic"``), ``status_code`` the
    HTTP status when there was one, ``request_id`` the provider's id for the request
    (quote it to their support).
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status_code: int | None = None,
        request_id: str | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.status_code = status_code
        self.request_id = request_id
        self.body = body


class ModelAuthenticationError(ModelError):
    """The provider refused the credentials (HTTP 401), or the key may not do this (403)."""


class MissingAPIKeyError(ModelAuthenticationError, ConfigurationError):
    """No API key was given and the provider's environment variable is not set.

    Also a :class:`~handrail.errors.ConfigurationError` (a ``ValueError``): nothing was
    sent anywhere.
    """


class ModelRateLimitError(ModelError):
    """HTTP 429 (rate limit or exhausted quota), still there after the SDK's retries."""


class ModelContextLengthError(ModelError):
    """The conversation (plus the requested output) does not fit the model's context window."""


class ModelRequestError(ModelError):
    """The provider refused the request as malformed or impossible (other 4xx answers)."""


class ModelServerError(ModelError):
    """The provider failed (5xx, or an error event in a stream), still after retries."""


class ModelConnectionError(ModelError):
    """The provider could not be reached (refused connection, DNS, TLS, reset)."""


class ModelTimeoutError(ModelConnectionError):
    """The provider did not answer within ``timeout`` seconds."""


class ModelResponseError(ModelError):
    """The provider answered with something that is not the expected wire format."""


_CONTEXT_PATTERNS = re.compile(
    r"context[ _-]?length|context window|maximum context|prompt is too long|too many tokens"
    r"|input is too long|exceeds the (?:model'?s? )?(?:maximum|max)",
    re.IGNORECASE,
)


def looks_like_context_overflow(code: str | None, message: str) -> bool:
    """True when an error code or message says the prompt does not fit the context window.

    Covers OpenAI (``context_length_exceeded``), Anthropic (``prompt is too long``) and the
    wording of the common OpenAI-compatible servers (vLLM, llama.cpp, Ollama).
    """
    if code and "context_length" in code:
        return True
    return bool(_CONTEXT_PATTERNS.search(message))


def error_detail(body: Any, fallback: str) -> tuple[str, str | None]:
    """The human message and the error code inside a provider's JSON error body.

    Both OpenAI (``{"error": {"message", "code"}}``) and Anthropic (``{"type": "error",
    "error": {"type", "message"}}``) nest them under ``"error"``; some compatible servers
    put a bare string there or at the top level.
    """
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, str):
            return inner, None
        if isinstance(inner, dict):
            message = inner.get("message")
            code = inner.get("code") or inner.get("type")
            if isinstance(message, str) and message:
                return message, str(code) if code is not None else None
    if isinstance(body, str) and body.strip():
        return body.strip()[:500], None
    return fallback, None
