"""What ``load_tools`` connects to, and with which options: read and checked before
anything starts.

The rules:

- One server is given by ``command=[...]`` (stdio) or ``url=...`` (streamable HTTP);
  several by ``servers={name: server, ...}`` (each a :data:`ServerLike`). A server's name
  is 1 to 64 letters, digits, ``_`` or ``-``; a single server is called ``name``
  (``"mcp"`` unless given).
- ``prefix=True`` puts each server's name and ``_`` before its tools' names; a string
  prefix does the same for a single server; ``False`` (the default) keeps the servers'
  names.
- ``env`` and ``cwd`` go with a command, ``headers`` with a URL; anything else is refused
  here with a :class:`~handrail.errors.ConfigurationError`, as are timeouts and limits
  that are not positive.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from handrail.errors import ConfigurationError
from handrail.mcp._text import SERVER_NAME

__all__ = ["DEFAULT_TIMEOUT", "McpServerConfig", "Plan", "ServerLike", "read_plan"]


@dataclass(frozen=True)
class McpServerConfig:
    """How to reach one MCP server: a command to run (stdio) or a URL (streamable HTTP).

    ``env`` adds to the few variables a stdio server gets from this process (the MCP SDK
    passes on ``HOME``, ``PATH``, ``SHELL``, ``TERM``, ``USER`` and ``LOGNAME`` only);
    ``headers`` go with every HTTP request (an ``Authorization`` header, say). Neither is
    shown in ``repr`` or in error messages.

    Example::

        McpServerConfig(command=["python", "notes_server.py"], env={"NOTES": "/tmp/notes"})
        McpServerConfig(url="https://example.com/mcp", headers={"Authorization": "Bearer ..."})
    """

    command: Sequence[str] | None = None
    url: str | None = None
    headers: Mapping[str, str] | None = field(default=None, repr=False)
    env: Mapping[str, str] | None = field(default=None, repr=False)
    cwd: str | os.PathLike[str] | None = None

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server needs either command=[...] (stdio) or url=... (HTTP), not both")
        if self.command is not None:
            if isinstance(self.command, str) or not self.command:
                raise ValueError("command must be a non-empty list of strings, e.g. ['python', 'server.py']")
            if not all(isinstance(part, str) for part in self.command):
                raise ValueError("command must be a list of strings")
            object.__setattr__(self, "command", tuple(self.command))
            if self.headers is not None:
                raise ValueError("headers are for an MCP server reached by url=")
        if self.url is not None:
            if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
                raise ValueError(f"url must start with http:// or https://, got {self.url!r}")
            if self.env is not None or self.cwd is not None:
                raise ValueError("env and cwd are for an MCP server started with command=")
        for label, values in (("headers", self.headers), ("env", self.env)):
            if values is not None and not all(
                isinstance(k, str) and isinstance(v, str) for k, v in values.items()
            ):
                raise ValueError(f"{label} must map strings to strings")

    def describe(self) -> str:
        """The command or URL, for messages (no headers, no environment)."""
        if self.command is not None:
            return "command " + " ".join(self.command)[:200]
        return f"URL {self.url}"


ServerLike = McpServerConfig | Mapping[str, Any] | Sequence[str] | str
"""A server in ``servers=``: an :class:`McpServerConfig`, a mapping of its fields
(``{"command": [...], "env": {...}}``, ``{"url": ..., "headers": {...}}``), a command as a
list of strings, or a URL."""

DEFAULT_TIMEOUT = 60.0
DEFAULT_DESCRIPTION_LIMIT = 4096
DEFAULT_SCHEMA_LIMIT = 100_000


@dataclass(frozen=True)
class Plan:
    """What ``load_tools`` was asked for, checked before anything starts."""

    servers: tuple[tuple[str, McpServerConfig, str], ...]  # (name, config, prefix)
    idempotent: frozenset[str]
    timeout: float
    connect_timeout: float
    description_limit: int
    schema_limit: int


def read_plan(options: Mapping[str, Any]) -> Plan:
    """Check ``load_tools``' arguments (its ``locals()``) and say what to connect to."""
    servers = options["servers"]
    prefix = options["prefix"]
    single = {key: options[key] for key in ("command", "url", "headers", "env", "cwd")}
    entries: list[tuple[str, McpServerConfig]]
    if servers is not None:
        given = [key for key, value in single.items() if value is not None]
        if given or options["name"] is not None:
            raise ConfigurationError(
                f"load_tools got servers= and {', '.join(given or ['name'])}: give each server's "
                "command or url in its entry of servers="
            )
        if isinstance(prefix, str):
            raise ConfigurationError("with servers=, prefix is True (each server's name) or False")
        if not isinstance(servers, Mapping) or not servers:
            raise ConfigurationError("servers= must be a non-empty mapping of names to servers")
        entries = [(key, _config(key, value)) for key, value in servers.items()]
    else:
        if single["command"] is None and single["url"] is None:
            raise ConfigurationError(
                "load_tools needs command=[...] (stdio), url=... (HTTP) or servers={...}"
            )
        try:
            config = McpServerConfig(**single)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
        entries = [(options["name"] if options["name"] is not None else "mcp", config)]
    for key, _ in entries:
        if not isinstance(key, str) or not SERVER_NAME.fullmatch(key):
            raise ConfigurationError(
                f"MCP server name {key!r} is not valid: use 1-64 letters, digits, '_' or '-'"
            )
    if isinstance(prefix, str) and not SERVER_NAME.fullmatch(prefix):
        raise ConfigurationError(f"prefix {prefix!r} is not valid: use 1-64 letters, digits, '_' or '-'")
    plan = [(key, config, _prefix(prefix, key)) for key, config in entries]
    idempotent = options["idempotent"]
    if isinstance(idempotent, str):
        raise ConfigurationError("idempotent= is a list of tool names, not one string")
    return Plan(
        servers=tuple(plan),
        idempotent=frozenset(idempotent),
        timeout=_seconds("timeout", options["timeout"]),
        connect_timeout=_seconds("connect_timeout", options["connect_timeout"]),
        description_limit=_count("description_limit", options["description_limit"]),
        schema_limit=_count("schema_limit", options["schema_limit"]),
    )


def _config(key: str, value: Any) -> McpServerConfig:
    try:
        if isinstance(value, McpServerConfig):
            return value
        if isinstance(value, str):
            return McpServerConfig(url=value)
        if isinstance(value, Mapping):
            return McpServerConfig(**value)
        if isinstance(value, Sequence):
            return McpServerConfig(command=list(value))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"MCP server {key!r}: {exc}") from None
    raise ConfigurationError(
        f"MCP server {key!r}: expected a command (a list of strings), a URL, a mapping or an "
        f"McpServerConfig, got {type(value).__name__}"
    )


def _prefix(prefix: bool | str, server: str) -> str:
    if prefix is True:
        return server + "_"
    if isinstance(prefix, str):
        return prefix + "_"
    return ""


def _seconds(label: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigurationError(f"{label} must be a positive number of seconds, got {value!r}")
    return float(value)


def _count(label: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{label} must be a positive whole number, got {value!r}")
    return value
