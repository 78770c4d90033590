"""The Agent: its parts put together, the copies it makes of itself, what it is made of.

Each part is one concept, in a module of its own: running (``runs.py``), the reviewer's
side (``reviews.py``), threads' state and the inbox (``_state.py``), looking after
threads (``maintenance.py``); they stand on ``core.py``. Every method has an async twin
that shares its implementation (``_work.py``).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from handrail.agent._maintenance import Maintenance
from handrail.agent._reviews import Reviews
from handrail.agent._runs import Runs
from handrail.agent._state import State
from handrail.checkpoint.base import BaseCheckpointSaver
from handrail.errors import ConfigurationError
from handrail.models.base import ChatModel
from handrail.runtime.spec import FoldCache
from handrail.tools import Tool
from handrail.types import RunnableConfig

__all__ = ["Agent"]


class Agent(Runs, Reviews, State, Maintenance):
    """A runnable agent: ``invoke``, ``stream``, state, history and the inbox.

    Every method has an async twin (``ainvoke``, ``astream``, ``aget_state``, ...).
    """

    def with_config(self, config: RunnableConfig | None = None, **kwargs: Any) -> Agent:
        """A copy of the agent whose runs use ``config`` (and ``kwargs``) as defaults.

        The caller's config is merged over it (``configurable`` and ``metadata`` key by
        key). Example: ``agent.with_config({"recursion_limit": 50})``.
        """
        from handrail import _compat_agent

        bound = Agent(self._spec)
        bound._bound_config = _compat_agent.merge_configs(
            _compat_agent.merge_configs(self._bound_config, config), kwargs
        )
        return bound

    def with_policy_file(self, policy_file: str | os.PathLike[str], *, name: str | None = None) -> Agent:
        """The same agent under the review policy a policy file gives it (``handrail serve
        --policy``): the file's table for ``name`` (default: the agent's name, or the
        file's only agent) replaces the agent's ``HumanInTheLoopMiddleware``, if it has
        one. Raises :class:`~handrail.review.policy_file.PolicyFileError` as
        ``create_agent(..., policy_file=...)`` does.
        """
        from handrail.review.policy_file import review_replaced

        middleware = review_replaced(
            policy_file, name or self._spec.name, self._spec.middleware, self._spec.tools
        )
        moved = Agent(replace(self._spec, middleware=middleware, cache=FoldCache()))
        moved._bound_config = self._bound_config
        return moved

    def with_checkpointer(self, checkpointer: BaseCheckpointSaver) -> Agent:
        """The same agent keeping its threads in ``checkpointer`` (with a cache of its own).

        Example: ``handrail serve`` runs every served agent on the store its flags name,
        ``agent.with_checkpointer(AsyncPostgresSaver.from_conn_string(dsn))``.
        """
        if not isinstance(checkpointer, BaseCheckpointSaver):
            raise ConfigurationError(
                f"checkpointer must be a saver such as InMemorySaver(), got {type(checkpointer).__name__}"
            )
        moved = Agent(replace(self._spec, store=checkpointer, cache=FoldCache()))
        moved._bound_config = self._bound_config
        return moved

    def get_graph(self, config: RunnableConfig | None = None, *, xray: Any = False) -> Any:
        """The agent's steps as a graph: ``agent.get_graph().draw_mermaid()``."""
        from handrail.graph import agent_graph

        return agent_graph(self._spec)

    @property
    def name(self) -> str | None:
        """The agent's name (also set on its AI messages)."""
        return self._spec.name

    @property
    def checkpointer(self) -> BaseCheckpointSaver | None:
        """The store the agent saves its threads in."""
        return self._spec.store

    @property
    def tools(self) -> dict[str, Tool]:
        """The agent's tools by name."""
        return dict(self._spec.tools)

    @property
    def model(self) -> ChatModel:
        """The chat model."""
        return self._spec.model
