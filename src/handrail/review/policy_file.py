"""Policy files: the review policy of each agent, kept in TOML beside the code (SPEC §5.4).

A policy file is ``handrail.toml``, or the ``[tool.handrail]`` table of ``pyproject.toml``.
It holds, per agent (by the name ``create_agent(name=...)`` or ``handrail serve`` gives
it), what ``HumanInTheLoopMiddleware(interrupt_on=...)`` takes in code::

    [agents.support]
    description_prefix = "Support action pending review"    # optional

    [agents.support.interrupt_on]
    read_data = false                     # never reviewed
    send_email = true                     # every decision allowed

    [agents.support.interrupt_on.refund]
    allowed_decisions = ["approve", "reject"]
    reviewers = ["support"]
    description = "Refunds need a second pair of eyes"

The rules this module keeps:

- A file is read as strictly as code: every key is checked by the same parser as
  ``interrupt_on`` in Python (``policy.parse_policy``), and what it refuses there is
  refused here, as a :class:`PolicyFileError` that names the file, the line and the key.
  Keys that need Python (``when``: a callable) are refused in a file.
- A bad file never means auto-approve: loading fails as a whole; nothing of a file that
  has one error is used.
- An agent or a tool the file names must exist where the file is used: :meth:`PolicyFile.
  interrupt_on_for` refuses a tool the agent does not have, :meth:`PolicyFile.check`
  an agent that is not served. A tool of the agent that the file does not name is not
  reviewed, as in code.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from handrail._duration import DurationError, parse_duration
from handrail.errors import ConfigurationError
from handrail.review.policy import _CONFIG_KEYS, _LEGACY_KEYS, parse_policy

__all__ = [
    "PolicyFile",
    "PolicyFileError",
    "load_policy_file",
    "review_middleware",
    "review_replaced",
    "sole_review_middleware",
]

_AGENT_KEYS = frozenset({"interrupt_on", "description_prefix"})
_PYTHON_ONLY = frozenset({"when"})
_KNOWN = _CONFIG_KEYS | frozenset(_LEGACY_KEYS)
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


class PolicyFileError(ConfigurationError):
    """A policy file that cannot be used, with where: ``path``, ``line`` (1-based, or None
    when the file could not be read) and ``key`` (the dotted key, or None)."""

    def __init__(self, path: Path, line: int | None, key: str | None, problem: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {key}: {problem}" if key else f"{where}: {problem}")
        self.path = path
        self.line = line
        self.key = key
        self.problem = problem


@dataclass(frozen=True)
class PolicyFile:
    """A loaded, validated policy file: each agent's ``interrupt_on`` and description prefix.

    Example::

        policies = load_policy_file("handrail.toml")
        middleware = HumanInTheLoopMiddleware(**policies.for_agent("support", tools=["refund"]))
    """

    path: Path
    agents: Mapping[str, Mapping[str, Any]]
    _lines: Mapping[tuple[str, ...], int]
    _prefix: tuple[str, ...]
    notifications: Mapping[str, Any] | None = None  # its [notifications] table, as written

    def error(self, key: tuple[str, ...], problem: str) -> PolicyFileError:
        """The :class:`PolicyFileError` for ``key`` (a dotted path from the file's top, as
        ``("notifications", "email", "port")``), at its line. For the layers that read a
        table of the file themselves (``handrail.notify.config.notify_settings``)."""
        return _error(self.path, self._lines, self._prefix, key, problem)

    def for_agent(self, agent: str, *, tools: Collection[str]) -> dict[str, Any]:
        """The keyword arguments of ``HumanInTheLoopMiddleware`` for ``agent``: its
        ``interrupt_on`` (and ``description_prefix`` when the file sets one).

        Raises :class:`PolicyFileError` when the file has no such agent, or names a tool
        that is not in ``tools``.
        """
        if agent not in self.agents:
            named = ", ".join(sorted(self.agents)) or "none"
            raise PolicyFileError(
                self.path, None, None, f"has no policy for agent {agent!r} (agents in the file: {named})"
            )
        table = self.agents[agent]
        interrupt_on = {tool: _in_seconds(config) for tool, config in table.get("interrupt_on", {}).items()}
        for tool in interrupt_on:
            if tool not in tools:
                self._fail(
                    ("agents", agent, "interrupt_on", tool),
                    f"agent {agent!r} has no tool {tool!r} (its tools: {', '.join(sorted(tools)) or 'none'})",
                )
        found: dict[str, Any] = {"interrupt_on": interrupt_on}
        if "description_prefix" in table:
            found["description_prefix"] = table["description_prefix"]
        return found

    def check(self, agents: Mapping[str, Collection[str]]) -> None:
        """Check the file against the agents that use it (name -> tool names): every agent
        and tool it names must be there. Raises :class:`PolicyFileError` on the first that
        is not."""
        for agent in self.agents:
            if agent not in agents:
                served = ", ".join(sorted(agents)) or "none"
                self._fail(("agents", agent), f"no agent is named {agent!r} here (agents: {served})")
            self.for_agent(agent, tools=agents[agent])

    def _fail(self, key: tuple[str, ...], problem: str) -> None:
        raise _error(self.path, self._lines, self._prefix, key, problem)


def load_policy_file(path: str | Path) -> PolicyFile:
    """Read and validate a policy file (``handrail.toml``, or a ``pyproject.toml`` with a
    ``[tool.handrail]`` table).

    Raises :class:`PolicyFileError` naming the file, the line and the key of the first
    problem; nothing of a file with a problem is used.

    Example::

        policies = load_policy_file("handrail.toml")
        policies.agents["support"]["interrupt_on"]["refund"]["reviewers"]  # ['support']
    """
    where = Path(path)
    try:
        text = where.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyFileError(where, None, None, f"cannot be read ({exc})") from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        at = re.search(r"at line (\d+)", str(exc))
        line = getattr(exc, "lineno", None) or (int(at.group(1)) if at else None)
        raise PolicyFileError(where, line, None, f"is not valid TOML: {exc}") from None
    lines = _key_lines(text)
    prefix: tuple[str, ...] = ()
    if where.name == "pyproject.toml":
        prefix = ("tool", "handrail")
        tool = document.get("tool", {})
        if not isinstance(tool, dict) or not isinstance(tool.get("handrail"), dict):
            raise PolicyFileError(where, None, None, "has no [tool.handrail] table")
        document = tool["handrail"]
    agents = _agents(where, lines, prefix, document)
    notifications = document.get("notifications")
    if notifications is not None and not isinstance(notifications, dict):
        raise _error(where, lines, prefix, ("notifications",), "must be a table: [notifications]")
    return PolicyFile(where, agents, lines, prefix, notifications)


def _agents(
    path: Path, lines: Mapping[tuple[str, ...], int], prefix: tuple[str, ...], document: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    def fail(key: tuple[str, ...], problem: str) -> PolicyFileError:
        return _error(path, lines, prefix, key, problem)

    for key in document:
        if key not in ("agents", "notifications"):
            raise fail((key,), "unknown key; a policy file holds [agents.NAME] tables and [notifications]")
    agents = document.get("agents", {})
    if not isinstance(agents, dict) or not agents:
        raise fail(("agents",), "needs at least one [agents.NAME] table")
    loaded: dict[str, dict[str, Any]] = {}
    for name, table in agents.items():
        at = ("agents", name)
        if not _NAME.fullmatch(name):
            raise fail(at, "an agent's name is 1-128 letters, digits or '_.:-'")
        if not isinstance(table, dict):
            raise fail(at, "must be a table with an interrupt_on table")
        unknown = sorted(set(table) - _AGENT_KEYS)
        if unknown:
            raise fail((*at, unknown[0]), f"unknown key; an agent's table takes {sorted(_AGENT_KEYS)}")
        prefix_text = table.get("description_prefix")
        if prefix_text is not None and not isinstance(prefix_text, str):
            raise fail((*at, "description_prefix"), "must be a string")
        interrupt_on = table.get("interrupt_on")
        if not isinstance(interrupt_on, dict):
            raise fail((*at, "interrupt_on"), "must be a table of tool = true | false | {policy}")
        for tool, config in interrupt_on.items():
            _check_entry(fail, (*at, "interrupt_on", tool), tool, config)
        loaded[name] = table
    return loaded


def _check_entry(fail: Any, at: tuple[str, ...], tool: str, config: Any) -> None:
    """One tool's entry, checked by the parser code uses; the problem located on its key."""
    if isinstance(config, dict):
        for key in config:
            if key in _PYTHON_ONLY:
                raise fail((*at, key), "takes a Python callable; set it in code, not in a policy file")
            if key not in _KNOWN:
                raise fail(
                    (*at, key), f"unknown key; a tool's policy takes {sorted(_CONFIG_KEYS - _PYTHON_ONLY)}"
                )
    try:
        parse_policy(tool, _in_seconds(config))
    except DurationError as exc:
        raise fail((*at, "expires_after"), str(exc)) from None
    except ConfigurationError as exc:
        said = str(exc).split("]", 1)[-1]  # past "interrupt_on['tool']"
        named = [
            key
            for key in (config if isinstance(config, dict) else ())
            if re.search(rf"'{re.escape(key)}'|\b{re.escape(key)} must\b", said)
        ]
        if not named and "decision" in said and isinstance(config, dict) and "allowed_decisions" in config:
            named = ["allowed_decisions"]
        raise fail((*at, named[0]) if named else at, str(exc)) from None


def _in_seconds(config: Any) -> Any:
    """A tool's entry with ``expires_after`` in seconds: a file may write ``"1h"``."""
    if isinstance(config, dict) and isinstance(config.get("expires_after"), str):
        return {**config, "expires_after": parse_duration(config["expires_after"])}
    return config


def _error(
    path: Path,
    lines: Mapping[tuple[str, ...], int],
    prefix: tuple[str, ...],
    key: tuple[str, ...],
    problem: str,
) -> PolicyFileError:
    """The error for ``key``, at the line of the key or of the nearest table that holds it."""
    full = (*prefix, *key)
    for end in range(len(full), 0, -1):
        if full[:end] in lines:
            return PolicyFileError(path, lines[full[:end]], ".".join(_shown(full)), problem)
    return PolicyFileError(path, None, ".".join(_shown(full)), problem)


def _shown(key: tuple[str, ...]) -> Iterator[str]:
    for part in key:
        yield part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else '"' + part.replace('"', '\\"') + '"'


# Where each key is: a small reader of TOML's key syntax (tomllib keeps no positions). It
# finds table headers and `key = value` lines; a key inside an inline table or a value
# spanning lines is located at the line of the table or key that holds it.
_BARE = re.compile(r"[A-Za-z0-9_-]+")


def _key_lines(text: str) -> dict[tuple[str, ...], int]:
    found: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for number, raw in enumerate(text.split("\n"), start=1):  # TOML ends lines at LF only
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            array = line.startswith("[[")
            parsed = _dotted(line, 2 if array else 1)
            if parsed is not None:
                table, rest = parsed
                if rest.lstrip().startswith("]"):
                    found.setdefault(table, number)
            continue
        parsed = _dotted(line, 0)
        if parsed is not None and parsed[1].lstrip().startswith("="):
            found.setdefault((*table, *parsed[0]), number)
    return found


def _dotted(line: str, start: int) -> tuple[tuple[str, ...], str] | None:
    """A dotted key at ``line[start:]``: its parts and what follows, or None."""
    parts: list[str] = []
    at = start
    while True:
        while at < len(line) and line[at] in " \t":
            at += 1
        if at >= len(line):
            return None
        if line[at] in "\"'":
            quote = line[at]
            end = at + 1
            value: list[str] = []
            while end < len(line) and line[end] != quote:
                if quote == '"' and line[end] == "\\" and end + 1 < len(line):
                    value.append(line[end + 1])
                    end += 2
                    continue
                value.append(line[end])
                end += 1
            if end >= len(line):
                return None
            parts.append("".join(value))
            at = end + 1
        else:
            bare = _BARE.match(line, at)
            if bare is None:
                return None
            parts.append(bare.group())
            at = bare.end()
        while at < len(line) and line[at] in " \t":
            at += 1
        if at < len(line) and line[at] == ".":
            at += 1
            continue
        return tuple(parts), line[at:]


def review_middleware(source: str | Path | PolicyFile, agent: str | None, tools: Collection[str]) -> Any:
    """The ``HumanInTheLoopMiddleware`` a policy file gives ``agent`` (``create_agent(...,
    policy_file=...)``). Without a name, the file must hold exactly one agent."""
    from handrail.middleware.human_in_the_loop import HumanInTheLoopMiddleware

    policies = source if isinstance(source, PolicyFile) else load_policy_file(source)
    if agent is None:
        if len(policies.agents) != 1:
            named = ", ".join(sorted(policies.agents))
            raise PolicyFileError(
                policies.path,
                None,
                None,
                f"holds several agents ({named}): name this one with create_agent(name=...)",
            )
        (agent,) = policies.agents
    return HumanInTheLoopMiddleware(**policies.for_agent(agent, tools=tools))


def sole_review_middleware(
    source: str | os.PathLike[str], agent: str | None, given: Sequence[Any], tools: Mapping[str, Any]
) -> Any:
    """The review middleware of ``create_agent(..., policy_file=...)``: refused beside a
    ``HumanInTheLoopMiddleware`` of the code (one policy, not two)."""
    from handrail.middleware.human_in_the_loop import HumanInTheLoopMiddleware

    if any(isinstance(item, HumanInTheLoopMiddleware) for item in given):
        raise ConfigurationError(
            "policy_file and a HumanInTheLoopMiddleware in middleware both give the review policy; use one"
        )
    return review_middleware(os.fspath(source), agent, list(tools))


def review_replaced(
    source: str | os.PathLike[str], agent: str | None, middleware: Sequence[Any], tools: Mapping[str, Any]
) -> list[Any]:
    """``middleware`` with its ``HumanInTheLoopMiddleware`` (if any) replaced by the one the
    file gives ``agent``, bound to ``tools`` (``Agent.with_policy_file``)."""
    from handrail.middleware.human_in_the_loop import HumanInTheLoopMiddleware

    kept = [m for m in middleware if not isinstance(m, HumanInTheLoopMiddleware)]
    gate = review_middleware(os.fspath(source), agent, list(tools))
    gate.bind(tools)
    return [*kept, gate]
