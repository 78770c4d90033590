"""What every part of the Agent stands on: its spec, the config a call names, a run prepared.

A config names the thread (``configurable["thread_id"]``); an agent with a checkpointer
needs one for every call, and an agent without one runs each call on a store of its
own, where nothing can pause. :meth:`AgentCore._prepare_run` checks a run's config once,
for invoke, stream and the answers recorded without running (``reviews.py``), and
:meth:`AgentCore._run` hands the run to :func:`~handrail.agent._retry.attempts`, as a
:class:`~handrail.agent._work.Work` either driver performs.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from handrail.agent import _retry as retry
from handrail.agent._callers import channel_of, identity_of
from handrail.agent._work import Work
from handrail.checkpoint.base import BaseCheckpointSaver
from handrail.checkpoint.memory import InMemorySaver
from handrail.errors import ConfigurationError
from handrail.runtime import loop
from handrail.runtime.effects import Env
from handrail.runtime.spec import AgentSpec
from handrail.types import RunnableConfig

__all__ = ["NO_CHECKPOINTER", "AgentCore"]

NO_CHECKPOINTER = (
    "this agent has no checkpointer, so it keeps no threads: pass "
    "checkpointer=InMemorySaver() (or another saver) to create_agent"
)
"""What a call that needs the agent's threads says when it has none."""


class AgentCore:
    """The agent's spec and bound config, and how a call finds its store and thread."""

    def __init__(self, spec: AgentSpec) -> None:
        self._spec = spec
        self._bound_config: dict[str, Any] = {}

    def _store_or_raise(self) -> BaseCheckpointSaver:
        store = self._spec.store
        if store is None:
            raise ConfigurationError(NO_CHECKPOINTER)
        return store

    def _resolve(
        self, config: RunnableConfig | None, *, for_run: bool = False
    ) -> tuple[BaseCheckpointSaver, str, Mapping[str, Any], bool, str]:
        """The store, the thread id, the ``configurable``, whether the call can pause and why not."""
        if config is None:
            config = {}
        if not isinstance(config, Mapping):
            raise ConfigurationError(
                "config must be a dict like {'configurable': {'thread_id': ...}}, got "
                f"{type(config).__name__}"
            )
        configurable = config.get("configurable") or {}
        if not isinstance(configurable, Mapping):
            raise ConfigurationError("config['configurable'] must be a dict")
        thread_id = configurable.get("thread_id")
        if thread_id is not None:
            if isinstance(thread_id, (int, uuid.UUID)) and not isinstance(thread_id, bool):
                thread_id = str(thread_id)
            if not isinstance(thread_id, str) or not thread_id:
                raise ConfigurationError(f"thread_id must be a non-empty string, got {thread_id!r}")
        store = self._spec.store
        if store is None:
            if not for_run:
                raise ConfigurationError(NO_CHECKPOINTER)
            return (
                InMemorySaver(),
                thread_id or uuid.uuid4().hex,
                configurable,
                False,
                "the agent has no checkpointer",
            )
        if thread_id is None:
            raise ConfigurationError(
                "the agent has a checkpointer, so every call needs a thread: pass "
                "config={'configurable': {'thread_id': '...'}}"
            )
        return store, thread_id, configurable, True, ""

    def _reader(self, config: RunnableConfig | None) -> tuple[Env, Mapping[str, Any]]:
        """An ``Env`` that reads the thread ``config`` names, and its ``configurable``."""
        store, thread_id, configurable, _, _ = self._resolve(config)
        return Env(self._spec, store, thread_id), configurable

    def _prepare_run(
        self,
        input: Any,
        config: RunnableConfig | None,
        modes: frozenset[str],
        context: Any = None,
        options: Mapping[str, Any] | None = None,
    ) -> tuple[Env, loop.RunRequest]:
        """A run's ``Env`` and request, its config checked (``options``: invoke's keywords)."""
        from handrail import _compat_agent

        config = _compat_agent.run_config(self, config, options or {})
        context = _compat_agent.coerce_context(self._spec.context_schema, context)
        store, thread_id, configurable, can_pause, why = self._resolve(config, for_run=True)
        reviewer = identity_of(configurable)
        metadata = (config or {}).get("metadata")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise ConfigurationError("config['metadata'] must be a dict")
        checkpoint_id = configurable.get("checkpoint_id")
        if checkpoint_id is not None and not isinstance(checkpoint_id, str):
            raise ConfigurationError("config['configurable']['checkpoint_id'] must be a string")
        request = loop.RunRequest(
            input=input,
            config=config or {},
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
            reviewer=reviewer,
            metadata=metadata,
            can_pause=can_pause,
            why_cannot_pause=why,
            context=context,
            channel=channel_of(configurable),
        )
        return Env(self._spec, store, thread_id, modes=modes), request

    def _run(self, env: Env, request: loop.RunRequest) -> Work[loop.RunResult]:
        """The run of ``request``, tried again as ``retry.py`` allows."""
        return Work(retry.attempts(env, request), env)
