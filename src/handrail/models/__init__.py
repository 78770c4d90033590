"""Chat models: the protocol, the scripted test model and ``init_chat_model``.

``init_chat_model("provider:model", **options)`` builds a model from a string. Providers
live in their own modules and are imported only when asked for, so a missing SDK is a
clear error about an extra, not an import failure at ``import handrail``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from handrail.errors import ConfigurationError
from handrail.models.base import ChatModel, ToolSpec, accumulate_chunks
from handrail.models.errors import (
    MissingAPIKeyError,
    ModelAuthenticationError,
    ModelConnectionError,
    ModelContextLengthError,
    ModelError,
    ModelRateLimitError,
    ModelRequestError,
    ModelResponseError,
    ModelServerError,
    ModelTimeoutError,
)

if TYPE_CHECKING:
    from handrail.models.scripted import ScriptedModel, ScriptExhaustedError

__all__ = [
    "ChatModel",
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
    "ScriptExhaustedError",
    "ScriptedModel",
    "ToolSpec",
    "accumulate_chunks",
    "infer_provider",
    "init_chat_model",
    "register_provider",
]

# provider -> (module, factory attribute, pip extra)
_PROVIDERS: dict[str, tuple[str, str, str | None]] = {
    "scripted": ("handrail.models.scripted", "ScriptedModel", None),
    "openai": ("handrail.models.openai", "from_init", "openai"),
    "anthropic": ("handrail.models.anthropic", "from_init", "anthropic"),
}
_CUSTOM: dict[str, Callable[..., ChatModel]] = {}

_PREFIXES = (
    ("gpt-", "openai"),
    ("o1", "openai"),
    ("o3", "openai"),
    ("o4", "openai"),
    ("chatgpt", "openai"),
    ("claude", "anthropic"),
)


def register_provider(name: str, factory: Callable[..., ChatModel]) -> None:
    """Make ``init_chat_model(f"{name}:model")`` call ``factory(model, **options)``."""
    _CUSTOM[name] = factory


def infer_provider(model: str) -> str | None:
    """Guess the provider of a bare model name (``"gpt-5.4"`` -> ``"openai"``)."""
    if model == "scripted":
        return "scripted"
    lowered = model.lower()
    for prefix, provider in _PREFIXES:
        if lowered.startswith(prefix):
            return provider
    return None


def init_chat_model(model: str, *, model_provider: str | None = None, **options: Any) -> ChatModel:
    """Build a chat model from ``"provider:model"`` (or a bare well-known model name).

    Example::

        init_chat_model("openai:gpt-5.4", temperature=0)
        init_chat_model("claude-sonnet-4-5", max_tokens=1024)   # provider inferred
        init_chat_model("scripted", responses=[{"content": "hi"}])
    """
    if not isinstance(model, str) or not model:
        raise ConfigurationError(f"model must be a non-empty string like 'openai:gpt-5.4', got {model!r}")
    provider, _, name = model.partition(":") if ":" in model else (model_provider or "", "", model)
    if not provider:
        provider = infer_provider(name) or ""
    if not provider:
        raise ConfigurationError(
            f"cannot tell which provider serves {model!r}: write 'provider:model' "
            f"(providers: {', '.join(sorted({*_PROVIDERS, *_CUSTOM}))})"
        )
    if provider in _CUSTOM:
        return _CUSTOM[provider](name, **options)
    if provider == "scripted":  # loaded on first use, as the name is (module __getattr__)
        from handrail.models.scripted import ScriptedModel as Scripted

        return Scripted(options.pop("responses", ()))
    entry = _PROVIDERS.get(provider)
    if entry is None:
        raise ConfigurationError(
            f"unknown model provider {provider!r} in {model!r}; known: "
            f"{', '.join(sorted({*_PROVIDERS, *_CUSTOM}))}"
        )
    module_name, attribute, extra = entry
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"the {provider!r} provider needs its SDK: pip install 'handrail[{extra}]' ({exc})"
        ) from None
    factory: Callable[..., ChatModel] = getattr(module, attribute)
    return factory(name, **options)


def __getattr__(name: str) -> Any:
    # The scripted model loads on first use (an agent on a real provider never needs it).
    if name in ("ScriptedModel", "ScriptExhaustedError"):
        from handrail.models import scripted

        value = getattr(scripted, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
