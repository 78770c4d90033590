"""What ``create_agent`` and ``Agent`` take from LangChain beyond the core: the pieces live here.

- ``create_agent(state_schema=...)`` becomes a middleware that only declares state keys;
- ``response_format`` is resolved to a strategy (:mod:`handrail.structured_output`);
- ``agent.with_config(...)`` binds a default config merged into each run's config;
- run options LangGraph accepts and handrail has no use for are checked here.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from handrail import structured_output
from handrail.errors import ConfigurationError
from handrail.middleware.types import AgentMiddleware

if TYPE_CHECKING:
    from handrail.agent.core import AgentCore
    from handrail.models.base import ChatModel
    from handrail.types import RunnableConfig

__all__ = ["coerce_context", "extra_middleware", "merge_configs", "resolve_response_format", "run_config"]

# Run options LangGraph's invoke/stream take: handrail accepts them and behaves as noted.
_IGNORED_OPTIONS = {
    "durability": "handrail saves every step before the next one begins (LangGraph's 'sync')",
    "debug": "use stream_mode='updates' to watch the steps",
    "print_mode": "use stream_mode to choose what to see",
}


class _AgentStateSchema(AgentMiddleware):
    """Carries ``create_agent(state_schema=...)``: the agent's extra state keys, no hooks."""

    def __init__(self, schema: type) -> None:
        self.state_schema = schema
        self.name = "AgentState"


def extra_middleware(state_schema: type | None, response_format: Any) -> list[AgentMiddleware]:
    """The middleware ``create_agent`` adds in front of the caller's for these options."""
    return [_AgentStateSchema(state_schema)] if state_schema is not None else []


def resolve_response_format(response_format: Any, model: ChatModel) -> Any:
    """The structured-output strategy the agent runs with (None: plain answers)."""
    return structured_output.resolve(response_format, model.provider)


def merge_configs(base: Mapping[str, Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """``extra`` over ``base``: ``configurable`` and ``metadata`` merge key by key, ``tags`` add up."""
    merged = dict(base)
    for key, value in (extra or {}).items():
        if key in ("configurable", "metadata") and isinstance(merged.get(key), Mapping):
            merged[key] = {**merged[key], **(value or {})}
        elif key == "tags" and isinstance(merged.get(key), list):
            merged[key] = [*merged[key], *(value or [])]
        else:
            merged[key] = value
    return merged


def run_config(agent: AgentCore, config: RunnableConfig | None, options: Mapping[str, Any]) -> Any:
    """The config a run uses: the agent's bound config under the caller's; options checked."""
    unknown = sorted(set(options) - set(_IGNORED_OPTIONS))
    if unknown:
        raise ConfigurationError(
            f"unexpected run option(s) {unknown}; invoke and stream take input, config, context, "
            f"stream_mode and version (and ignore {sorted(_IGNORED_OPTIONS)})"
        )
    bound: Mapping[str, Any] = getattr(agent, "_bound_config", None) or {}
    if not bound:
        return config
    if config is not None and not isinstance(config, Mapping):
        return config  # _resolve reports the mistake
    return merge_configs(bound, config)


def _is_pydantic_model(cls: type) -> bool:
    # A pydantic model's class was made by pydantic, so pydantic is loaded already: a
    # process whose agent uses none never imports it (about 25 ms).
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and issubclass(cls, pydantic.BaseModel)


def coerce_context(context_schema: Any, context: Any) -> Any:
    """A dict given as ``context`` becomes the ``context_schema`` dataclass or pydantic model."""
    if not isinstance(context, dict) or not isinstance(context_schema, type):
        return context
    if dataclasses.is_dataclass(context_schema) or _is_pydantic_model(context_schema):
        try:
            return context_schema(**context)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"context does not fit context_schema {context_schema.__name__}: {exc}"
            ) from None
    return context
