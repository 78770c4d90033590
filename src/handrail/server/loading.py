"""Finding the agents to serve (``module:attribute``) and giving them the service's store.

``handrail serve app.agents:agent`` imports ``app.agents`` (the current directory is on
the import path) and serves its ``agent``. Whatever checkpointer the module gave the
agent, the service runs it on the store its flags name (``--db`` / ``--postgres``), so
every process of one deployment shares one store.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from handrail.agent import Agent
from handrail.checkpoint.base import BaseCheckpointSaver

__all__ = ["load_agent", "on_store", "parse_agent_flag"]


class LoadError(ValueError):
    """An agent target could not be loaded; the message says why."""


def load_agent(target: str) -> Agent:
    """The :class:`~handrail.Agent` at ``module:attribute`` (``attribute`` may be dotted)."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise LoadError(f"an agent is named 'module:attribute', e.g. app.agents:agent; got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise LoadError(f"cannot import {module_name!r} for {target!r}: {exc}") from None
    value: Any = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise LoadError(f"{module_name!r} has no attribute {attribute!r}")
        value = getattr(value, part)
    if not isinstance(value, Agent):
        raise LoadError(f"{target!r} is a {type(value).__name__}, not an Agent made by create_agent")
    return value


def parse_agent_flag(flag: str) -> tuple[str, str]:
    """``name=module:attribute`` -> ``(name, target)``."""
    name, sep, target = flag.partition("=")
    if not sep or not name or not target:
        raise LoadError(f"--agent takes NAME=module:attribute, e.g. billing=app.agents:billing; got {flag!r}")
    return name, target


def on_store(agent: Agent, store: BaseCheckpointSaver) -> Agent:
    """The same agent, saving its threads in ``store``."""
    return agent.with_checkpointer(store)
