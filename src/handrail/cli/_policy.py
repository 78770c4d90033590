"""``handrail policy check FILE``: lint a policy file (SPEC §5.4) before any agent uses it.

The file is read as :func:`handrail.review.policy_file.load_policy_file` reads it where it
is used, so what passes here loads there. With ``--agent NAME=MODULE:AGENT`` (or a
``MODULE:AGENT`` whose agent has a ``name``), the agents and tools the file names are
checked against those agents too. A problem is one line naming the file, the line and the
key, and the exit code is 1.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from handrail.notify.config import notify_settings
from handrail.review.policy_file import load_policy_file

__all__ = ["COMMANDS", "add_commands", "run"]

COMMANDS = frozenset({"policy"})


def add_commands(commands: Any) -> None:
    """Add ``handrail policy`` to the CLI's subcommands."""
    policy = commands.add_parser(
        "policy",
        help="check a policy file (handrail.toml or pyproject.toml's [tool.handrail])",
        description="Work with policy files: the review policy of each agent, kept in TOML.",
    )
    actions = policy.add_subparsers(dest="policy_command", metavar="ACTION", title="actions")
    check = actions.add_parser(
        "check",
        help="validate a policy file, and the agents and tools it names",
        description=(
            "Validate a policy file as strictly as handrail reads it where it is used: every key, "
            "value and decision type. With agents, also that each agent and tool it names exists. "
            "Exits 1 with the file, line and key of the first problem."
        ),
    )
    check.add_argument("file", type=Path, metavar="FILE", help="handrail.toml, or a pyproject.toml")
    check.add_argument("target", metavar="MODULE:AGENT", nargs="?", help="an agent to check it against")
    check.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="NAME=MODULE:AGENT",
        help="an agent to check it against, by the name the file gives it (repeatable)",
    )


def run(args: argparse.Namespace, console: Console, usage: Callable[[str], Exception]) -> int:
    """Run ``handrail policy ...``; a problem of the file raises its PolicyFileError."""
    if args.policy_command != "check":
        raise usage("choose an action: handrail policy check FILE")
    policies = load_policy_file(args.file)
    notify_settings(policies)  # its [notifications], checked as the service reads them
    agents = _agents(args, usage)
    if agents:
        policies.check(agents)
    count = sum(len(table.get("interrupt_on", {})) for table in policies.agents.values())
    names = ", ".join(sorted(policies.agents))
    checked = f"; checked against the tools of {', '.join(sorted(agents))}" if agents else ""
    console.print(
        f"{args.file}: ok: {count} tool policies for {names}{checked}", markup=False, soft_wrap=True
    )
    return 0


def _agents(args: argparse.Namespace, usage: Callable[[str], Exception]) -> dict[str, list[str]]:
    """name -> tool names of the agents given on the command line."""
    if not args.target and not args.agent:
        return {}
    from handrail.server.loading import LoadError, load_agent, parse_agent_flag

    found: dict[str, list[str]] = {}
    try:
        if args.target:
            agent = load_agent(args.target)
            if not agent.name:
                raise usage(
                    f"{args.target} has no name; give it one (create_agent(name=...)) or use --agent NAME="
                )
            found[agent.name] = list(agent.tools)
        for flag in args.agent:
            name, target = parse_agent_flag(flag)
            found[name] = list(load_agent(target).tools)
    except LoadError as exc:
        raise usage(str(exc)) from None
    return found
