"""The ``handrail`` command: its parser, and the dispatch of each command to its module.

Each group of commands adds its subparsers (``add_commands``) and runs them (``run``) in
a module of its own; ``cli/__init__.py`` lists which. ``handrail audit verify THREAD ...
| --all`` checks threads' stored logs against their hash chains (``_audit.py``); the
``audit`` parser is the review commands' (``_review.py``).

A mistake on the command line ends with one line on stderr and exit code 2; a problem
found while running (an unknown thread, a store that cannot be opened) with one line
and exit code 1; Ctrl-C with a short message and exit code 130 (``_errors.py``).

Everything is printed through :func:`handrail.cli._safe_text.safe_console`: a control or
invisible formatting character in a value (a thread id, a tool's arguments, a model's
message, an error that quotes them) reaches the terminal as an escape such as ``\\x1b``
or ``\\u202e``, never raw.
"""

from __future__ import annotations

import argparse
import sqlite3
from collections.abc import Sequence
from typing import NoReturn

from handrail import __version__
from handrail.cli import (
    _demo_command,
    _grants,
    _mcp,
    _policy,
    _review,
    _service,
    _slack,
    _sweep,
    _webhooks,
)
from handrail.cli._errors import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    StoreError,
    UsageError,
    one_line,
)
from handrail.cli._safe_text import safe_console, safe_markup
from handrail.cli._store import open_store
from handrail.errors import HandrailError

__all__ = ["run_command"]


class _Parser(argparse.ArgumentParser):
    """An argument parser that reports mistakes in one line instead of usage and exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _build_parser() -> argparse.ArgumentParser:
    """The parser of the whole command: ``--version`` and every command group's subparsers."""
    parser = _Parser(
        prog="handrail",
        description="Put a person between an AI agent and the tools it calls.",
    )
    parser.add_argument("--version", action="version", version=f"handrail {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    _demo_command.add_commands(commands)  # demo (handrail.cli._demo_command)
    _service.add_commands(commands)  # serve, worker, tokens (handrail.cli._service)
    _review.add_commands(commands)  # inbox, show, approve, ..., audit (handrail.cli._review)
    _policy.add_commands(commands)  # policy check (handrail.cli._policy)
    _sweep.add_commands(commands)  # sweep (handrail.cli._sweep)
    _grants.add_commands(commands)  # grants list | revoke (handrail.cli._grants)
    _webhooks.add_commands(commands)  # webhooks ..., deliver (handrail.cli._webhooks)
    _slack.add_commands(commands)  # slack setup | users add|list|remove (handrail.cli._slack)
    _mcp.add_commands(commands)  # mcp, mcp init: the MCP gateway (handrail.cli._mcp)
    return parser


def run_command(argv: Sequence[str] | None = None) -> int:
    """Run the ``handrail`` command with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    errors = safe_console(stderr=True, highlight=False)
    try:
        try:
            args = _build_parser().parse_args(argv)
        except SystemExit as exc:  # --help and --version print, then ask to exit
            return exc.code if isinstance(exc.code, int) else EXIT_OK
        if args.command is None:
            raise UsageError("choose a command, e.g. demo, serve, tokens or inbox (see 'handrail --help')")
        if args.command == "demo":
            return _demo_command.run(args, errors)
        if args.command == "audit" and args.thread_id[:1] == ["verify"]:
            from handrail.cli import _audit

            return _audit.run(args, open_store, UsageError)
        if args.command in _service.COMMANDS:
            try:
                return _service.run(args, safe_console(highlight=False))
            except CommandError as exc:
                raise StoreError(str(exc)) from None
        if args.command in _policy.COMMANDS:
            return _policy.run(args, safe_console(highlight=False), UsageError)
        if args.command in _sweep.COMMANDS:
            return _sweep.run(args, safe_console(highlight=False), StoreError)
        if args.command in _slack.COMMANDS:
            return _slack.run(args, safe_console(highlight=False), StoreError)
        if args.command in _webhooks.COMMANDS:
            return _webhooks.run(args, safe_console(highlight=False), StoreError)
        if args.command in _mcp.COMMANDS:
            try:
                return _mcp.run(args, StoreError)
            except CommandError as exc:
                raise StoreError(str(exc)) from None
        if args.command in _review.COMMANDS or args.command in _grants.COMMANDS:
            runner = _review.run if args.command in _review.COMMANDS else _grants.run
            try:
                return runner(args, safe_console(highlight=False))
            except CommandError as exc:
                raise StoreError(str(exc)) from None
        raise UsageError(f"unknown command {args.command!r}")  # pragma: no cover - argparse refuses first
    except UsageError as exc:
        errors.print(f"handrail: error: {safe_markup(str(exc))}", soft_wrap=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        errors.print("\nInterrupted.")
        return EXIT_INTERRUPTED
    except EOFError:
        errors.print("\nInput ended before the review was finished.")
        return EXIT_FAILURE
    except (HandrailError, OSError, sqlite3.Error) as exc:
        errors.print(f"handrail: error: {safe_markup(one_line(exc))}", soft_wrap=True)
        return EXIT_FAILURE
