"""The flags several commands share, and the types of their values.

:func:`add_store_flags` gives a command the store's flags, ``--db PATH`` or ``--postgres
DSN`` and ``--schema NAME`` (serve, worker, tokens, sweep, webhooks, deliver, slack,
mcp); :func:`add_policy_flag` gives it ``--policy FILE``. :func:`count_flag` and
:func:`duration_flag` are argparse types: a whole number of at least 0, and a duration
(``30s``, ``5m``, ``1h``, or seconds).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from handrail._duration import DurationError, parse_duration
from handrail.cli._store import DEFAULT_DB

__all__ = ["add_policy_flag", "add_store_flags", "count_flag", "duration_flag"]


def add_store_flags(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the flags of the store: ``--db PATH`` or ``--postgres DSN``, and ``--schema NAME``."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--db", type=Path, metavar="PATH", help=f"the SQLite file (default: ./{DEFAULT_DB})")
    where.add_argument("--postgres", metavar="DSN", help="a PostgreSQL database, e.g. postgresql://host/db")
    parser.add_argument("--schema", metavar="NAME", help="the PostgreSQL schema of handrail's tables")


def add_policy_flag(parser: Any) -> None:
    """Give ``parser`` ``--policy FILE``: the agents' review policy from a policy file."""
    parser.add_argument(
        "--policy",
        type=Path,
        metavar="FILE",
        help="the review policy of the agents from a policy file (handrail.toml or pyproject.toml's "
        "[tool.handrail]), by their names; it replaces the policy in their code. Give workers and "
        "services of one store the same file",
    )


def count_flag(text: str) -> int:
    """An argparse type: a whole number of at least 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number of at least 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a whole number of at least 0, got {text!r}")
    return value


def duration_flag(text: str) -> float:
    """An argparse type: a duration (``30s``, ``5m``, ``1h``, or seconds)."""
    try:
        return parse_duration(text)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
