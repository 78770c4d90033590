"""The run-time details LangGraph code relies on that handrail keeps: stream metadata, recursion limit.

``stream_mode="messages"`` yields ``(chunk, metadata)``. handrail's own keys are
``thread_id``, ``step`` and ``run_id``; LangGraph's keys are there too
(``langgraph_node``, ``langgraph_step``, ``langgraph_triggers``, ``langgraph_path``,
``langgraph_checkpoint_ns``, ``checkpoint_ns``, ``ls_provider``, ``ls_model_name``,
``ls_model_type``), so code that filters tokens by node works unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from handrail.errors import ConfigurationError

if TYPE_CHECKING:
    from handrail.runtime._fold import ThreadFold
    from handrail.runtime.effects import Env

__all__ = ["DEFAULT_RECURSION_LIMIT", "recursion_limit", "stream_metadata"]

DEFAULT_RECURSION_LIMIT = 10_007
"""Steps a run may take when ``config["recursion_limit"]`` is not set (LangGraph's default)."""


def stream_metadata(env: Env, fold: ThreadFold, node: str) -> dict[str, Any]:
    """The metadata of the ``messages`` chunks one model call streams."""
    model = env.spec.model
    return {
        "thread_id": env.thread_id,
        "step": node,
        "run_id": env.run_id,
        "langgraph_step": fold.head_seq + 1,  # grows with every step, as LangGraph's does
        "langgraph_node": node,
        "langgraph_triggers": (f"branch:to:{node}",),
        "langgraph_path": ("__pregel_pull", node),
        "langgraph_checkpoint_ns": f"{node}:{env.run_id}",
        "checkpoint_ns": f"{node}:{env.run_id}",
        "ls_provider": model.provider,
        "ls_model_name": model.model_name,
        "ls_model_type": "chat",
    }


def recursion_limit(config: Mapping[str, Any]) -> int:
    """``config["recursion_limit"]``: the most steps one run may take."""
    value = config.get("recursion_limit", DEFAULT_RECURSION_LIMIT)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"config['recursion_limit'] must be a positive integer, got {value!r}")
    return value
