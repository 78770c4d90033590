"""``ModelFallbackMiddleware``: when the model call fails, try other models in turn.

As in LangChain: ``ModelFallbackMiddleware(first_model, *additional_models)``, each a
``ChatModel`` or a ``"provider:model"`` string. The agent's own model is tried first;
on an error the next model is tried with the same request, and the last model's error
is raised if all fail. An ``interrupt()`` is not an error: it is never retried.

Example::

    middleware=[ModelFallbackMiddleware("openai:gpt-5.4-mini", "anthropic:claude-sonnet-4-5")]
"""

from __future__ import annotations

from typing import Any

from handrail.errors import ConfigurationError
from handrail.messages import AIMessage
from handrail.middleware.types import (
    AgentMiddleware,
    AsyncModelHandler,
    ModelHandler,
    ModelRequest,
    ModelResponse,
)
from handrail.models import init_chat_model
from handrail.models.base import ChatModel

__all__ = ["ModelFallbackMiddleware"]


def _model(value: Any) -> ChatModel:
    if isinstance(value, ChatModel):
        return value
    if isinstance(value, str):
        return init_chat_model(value)
    raise ConfigurationError(f"fallback models must be ChatModels or 'provider:model' strings, got {value!r}")


class ModelFallbackMiddleware(AgentMiddleware):
    """Call fallback models, in order, when the agent's model raises."""

    def __init__(self, first_model: str | ChatModel, *additional_models: str | ChatModel) -> None:
        self.models = [_model(m) for m in (first_model, *additional_models)]

    def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> ModelResponse | AIMessage:
        try:
            return handler(request)
        except Exception as error:
            last = error
        for model in self.models:
            try:
                return handler(request.override(model=model))
            except Exception as error:
                last = error
        raise last

    async def awrap_model_call(
        self, request: ModelRequest, handler: AsyncModelHandler
    ) -> ModelResponse | AIMessage:
        try:
            return await handler(request)
        except Exception as error:
            last = error
        for model in self.models:
            try:
                return await handler(request.override(model=model))
            except Exception as error:
                last = error
        raise last
