"""Who is calling the agent: a reviewer named by a value, the caller named by a config.

A reviewer is a string id or ``{"id": str, "roles": [str, ...]}`` (SPEC rule 12); a
config names its caller as ``configurable["reviewer"]`` or ``configurable["user"]`` (the
same identity, named for a run's starter: rule 13) and the channel it comes through as
``configurable["channel"]`` (rule 11, default ``"python"``). Every method of the facade
that records who did something (answers, state updates, deletions: rule 21) reads it here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from handrail.errors import ConfigurationError

__all__ = ["caller_of", "channel_of", "identity_of", "reviewer_of"]


def reviewer_of(value: Any) -> Any:
    """``value`` checked as a reviewer: None, a non-empty string id, or ``{"id", "roles"}``
    (returned as a new dict with a list of roles); anything else raises
    :class:`~handrail.errors.ConfigurationError`."""
    if value is None:
        return None
    if isinstance(value, str) and value:
        return value
    if isinstance(value, Mapping) and isinstance(value.get("id"), str) and value["id"]:
        roles = value.get("roles", [])
        if not isinstance(roles, (list, tuple)) or not all(isinstance(r, str) for r in roles):
            raise ConfigurationError("reviewer roles must be a list of strings")
        unknown = sorted(set(value) - {"id", "roles"})
        if unknown:
            raise ConfigurationError(f"reviewer has unexpected key(s) {unknown}; expected 'id' and 'roles'")
        return {"id": value["id"], "roles": list(roles)}
    raise ConfigurationError(
        f"reviewer must be a string id or {{'id': str, 'roles': [str, ...]}}, got {value!r}"
    )


def caller_of(configurable: Mapping[str, Any]) -> tuple[Any, str]:
    """Who makes a change, and through which channel, from a config (SPEC rule 21)."""
    channel = channel_of(configurable)
    return identity_of(configurable), channel


def channel_of(configurable: Mapping[str, Any]) -> str:
    """The channel a config's call comes through (``"python"`` unless it names one)."""
    channel = configurable.get("channel", "python")
    if not isinstance(channel, str) or not channel:
        raise ConfigurationError("config['configurable']['channel'] must be a non-empty string")
    return channel


def identity_of(configurable: Mapping[str, Any]) -> Any:
    """Who is calling, from a config: its ``reviewer``, or ``user`` (the same, named for a
    run's starter: SPEC rule 13); giving both, they must agree."""
    reviewer = reviewer_of(configurable.get("reviewer"))
    user = reviewer_of(configurable.get("user"))
    if reviewer is not None and user is not None and reviewer != user:
        raise ConfigurationError(
            "config['configurable'] names both a 'reviewer' and a 'user', and they differ: name the "
            "caller once ('user' is another name for the same identity)"
        )
    return reviewer if reviewer is not None else user
