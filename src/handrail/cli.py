"""The ``handrail`` command.

Subcommands:

``handrail demo``
    A scripted agent (no API key needed) wants to write a file, run a ``DELETE`` and read
    data; you review its risky calls in the terminal. ``--yes`` approves everything,
    ``--workdir DIR`` chooses where its files and database go, ``--model provider:name``
    (with ``--base-url URL`` for a local OpenAI-compatible server) lets a real model
    drive the same tools.

A mistake on the command line ends with one line on stderr and a non-zero exit code,
Ctrl-C with a short message and exit code 130.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from rich.console import Console
from rich.markup import escape

from handrail import __version__
from handrail.errors import HandrailError
from handrail.models.base import ChatModel

__all__ = ["main"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """The command line was wrong; the message is the one line to show."""


class _Parser(argparse.ArgumentParser):
    """An argument parser that reports mistakes in one line instead of usage and exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="handrail",
        description="Put a person between an AI agent and the tools it calls.",
    )
    parser.add_argument("--version", action="version", version=f"handrail {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    demo = commands.add_parser(
        "demo",
        help="review a scripted agent's tool calls in the terminal",
        description=(
            "Run a scripted agent that saves old records to a file, deletes them from a small "
            "SQLite database and reads what is left. You approve, edit, reject or answer each "
            "risky call. No API key is needed."
        ),
    )
    demo.add_argument("--yes", "-y", action="store_true", help="approve every request without asking")
    demo.add_argument(
        "--workdir",
        type=Path,
        metavar="DIR",
        help="where the demo writes its files and database (default: a new temporary directory)",
    )
    demo.add_argument(
        "--model",
        metavar="PROVIDER:NAME",
        help="let a real model drive the agent, e.g. openai:gpt-4o-mini or anthropic:claude-sonnet-4-5 "
        "(needs its API key; default: the scripted model)",
    )
    demo.add_argument(
        "--base-url",
        metavar="URL",
        help="the API root of an OpenAI-compatible server (vLLM, Ollama, LM Studio, llama.cpp), with --model",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``handrail`` command with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    errors = Console(stderr=True, highlight=False)
    try:
        try:
            args = _build_parser().parse_args(argv)
        except SystemExit as exc:  # --help and --version print, then ask to exit
            return exc.code if isinstance(exc.code, int) else EXIT_OK
        if args.command is None:
            raise UsageError("choose a command: demo (see 'handrail --help')")
        if args.command == "demo":
            return _demo(args)
        raise UsageError(f"unknown command {args.command!r}")  # pragma: no cover - argparse refuses first
    except UsageError as exc:
        errors.print(f"handrail: error: {escape(str(exc))}", soft_wrap=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        errors.print("\nInterrupted.")
        return EXIT_INTERRUPTED
    except EOFError:
        errors.print("\nInput ended before the review was finished.")
        return EXIT_FAILURE
    except (HandrailError, OSError, sqlite3.Error) as exc:
        errors.print(f"handrail: error: {escape(str(exc) or type(exc).__name__)}", soft_wrap=True)
        return EXIT_FAILURE


def _demo(args: argparse.Namespace) -> int:
    # Imported here so `handrail --help` stays fast and does not build the agent machinery.
    from handrail.demo import run_demo

    workdir: Path | None = args.workdir
    if workdir is not None and workdir.exists() and not workdir.is_dir():
        raise UsageError(f"--workdir {str(workdir)!r} is not a directory")
    model = _demo_model(args.model, args.base_url)
    console = Console(highlight=False)
    auto_approve = bool(args.yes)
    if not auto_approve and not sys.stdin.isatty():
        console.print("[yellow]stdin is not a terminal, so every request is approved (as with --yes).[/]")
        auto_approve = True

    def ask(prompt: str) -> str:
        return console.input(f"[bold cyan]?[/] {escape(prompt)} ")

    if model is not None:
        console.print(f"Model: [cyan]{escape(args.model)}[/] (a real model may not follow the script)")
    run_demo(console, ask, workdir=workdir, auto_approve=auto_approve, model=model)
    return EXIT_OK


def _demo_model(name: str | None, base_url: str | None) -> ChatModel | None:
    """The model for ``--model``, checked before anything runs (a missing key is said up front)."""
    if name is None:
        if base_url is not None:
            raise UsageError("--base-url needs --model, e.g. --model openai:qwen3:8b")
        return None
    from handrail.models import init_chat_model

    options = {"base_url": base_url} if base_url else {}
    model = init_chat_model(name, **options)
    check = getattr(model, "check_credentials", None)
    if callable(check):
        check()
    return model


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
