"""``handrail demo``: its flags, and the session around :func:`handrail.cli.demo.run_demo`.

A scripted agent (no API key needed) wants to write a file, run a ``DELETE`` and read
data; you review its risky calls in the terminal. Threads are kept in SQLite
(``./handrail.db``, or ``--db PATH``) or PostgreSQL (``--postgres DSN``), so a review
can wait: answer "later" (``l``) or press Ctrl-C at a review, and the demo prints the
command that continues it, ``handrail demo --resume THREAD_ID --db /abs/path``, in this
process or any other sharing the store. ``--list`` shows the demo threads waiting for
review. Without a terminal nothing is approved: lines piped in are the answers, and
when they end the reviews wait. ``--yes`` approves everything, ``--workdir DIR``
chooses where its files and database go, ``--model provider:name`` (with ``--base-url
URL`` for a local OpenAI-compatible server) lets a real model drive the same tools.
``python -m handrail`` runs the same command.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rich.console import Console

from handrail.checkpoint.base import BaseCheckpointSaver
from handrail.cli._errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, StoreError, UsageError, one_line
from handrail.cli._safe_text import safe_console, safe_markup
from handrail.cli._store import DEFAULT_DB, open_store, program, store_flags
from handrail.models.base import ChatModel

__all__ = ["add_commands", "run"]


def add_commands(commands: Any) -> None:
    """Add ``demo`` to the ``handrail`` command's subparsers."""
    demo = commands.add_parser(
        "demo",
        help="review a scripted agent's tool calls in the terminal",
        description=(
            "Run a scripted agent that saves old records to a file, deletes them from a small "
            "SQLite database and reads what is left. You approve, edit, reject or answer each "
            "risky call, or leave it for later: the thread is saved, and --resume continues it "
            "in any process that shares the store. No API key is needed."
        ),
    )
    demo.add_argument(
        "--yes",
        "-y",
        action="store_true",
        help="approve every request without asking (without it and without a terminal, nothing is "
        "approved: lines on stdin are the answers, and when they end the reviews wait)",
    )
    demo.add_argument(
        "--workdir",
        type=Path,
        metavar="DIR",
        help="where the demo writes its files and its sample database (default: a new folder in "
        "TMPDIR/handrail-demo, removed by a later demo once its thread is finished; a resumed thread "
        "uses the one it started in)",
    )
    store = demo.add_mutually_exclusive_group()
    store.add_argument(
        "--db",
        type=Path,
        metavar="PATH",
        help=f"the SQLite file that keeps the demo's threads (default: ./{DEFAULT_DB})",
    )
    store.add_argument(
        "--postgres",
        metavar="DSN",
        help="keep the threads in PostgreSQL instead, e.g. postgresql://user@host/dbname "
        "(needs the postgres extra)",
    )
    which = demo.add_mutually_exclusive_group()
    which.add_argument(
        "--resume",
        metavar="THREAD_ID",
        help="continue a demo thread saved earlier: its pending reviews first, then the rest",
    )
    which.add_argument(
        "--list",
        action="store_true",
        help="list the demo threads waiting for review in the store, then exit",
    )
    demo.add_argument(
        "--model",
        metavar="PROVIDER:NAME",
        help="let a real model drive the agent, e.g. openai:gpt-4o-mini or anthropic:claude-sonnet-4-5 "
        "(needs its API key; default: the scripted model, or the model a resumed thread started with)",
    )
    demo.add_argument(
        "--base-url",
        metavar="URL",
        help="the API root of an OpenAI-compatible server (vLLM, Ollama, LM Studio, llama.cpp), with --model",
    )


def run(args: argparse.Namespace, errors: Console) -> int:
    """Run ``handrail demo`` as ``args`` say; ``errors`` is the console of stderr. The exit code."""
    # Imported here so `handrail --help` stays fast and does not build the agent machinery.
    from handrail.cli import demo

    workdir: Path | None = args.workdir
    if workdir is not None and workdir.exists() and not workdir.is_dir():
        raise UsageError(f"--workdir {str(workdir)!r} is not a directory")
    if args.resume is not None and not args.resume.strip():
        raise UsageError("--resume needs a thread id (see 'handrail demo --list')")
    console = safe_console(highlight=False)
    starting = args.resume is None and not args.list
    # A new run checks its model before anything is created: a missing key is said up front.
    model = _demo_model(args.model, args.base_url) if starting else None
    model_name: str | None = args.model

    with open_store(args, existing=not starting) as (saver, where):
        if args.list:
            return _list_waiting(console, args, saver, where)
        metadata: dict[str, Any] = {}
        if starting:
            thread_id = demo.new_thread_id()
            if args.model is not None:
                metadata = {"model": args.model, **({"base_url": args.base_url} if args.base_url else {})}
        else:
            thread_id = args.resume
            found = demo.find_demo_thread(saver, thread_id)
            if found is None:
                raise StoreError(
                    f"no thread {thread_id!r} in {where} (see '{program()} demo --list{store_flags(args)}')"
                )
            if not found.is_demo:
                raise StoreError(f"thread {thread_id!r} in {where} was not started by 'handrail demo'")
            # Without --model the thread goes on with the model it started with.
            model_name = args.model or found.model
            model = _demo_model(model_name, args.base_url or (None if args.model else found.base_url))

        auto_approve = bool(args.yes)
        ask = _terminal_ask(console) if auto_approve or sys.stdin.isatty() else _piped_ask(console)

        if model is not None:
            shown = safe_markup(str(model_name))
            console.print(f"Model: [cyan]{shown}[/] (a real model may not follow the script)")
        try:
            result = demo.run_demo(
                console,
                ask,
                checkpointer=saver,
                model=model,
                thread_id=thread_id,
                workdir=workdir,
                auto_approve=auto_approve,
                metadata=metadata,
            )
        except (KeyboardInterrupt, EOFError) as exc:
            if isinstance(exc, KeyboardInterrupt):
                errors.print("\nInterrupted.")
            else:
                errors.print("\nInput ended before the review was finished.")
            if _thread_saved(saver, thread_id):
                errors.print(f"The thread is saved in {safe_markup(where)}. To continue it:", soft_wrap=True)
                errors.print(f"  {safe_markup(_resume_command(args, thread_id))}", soft_wrap=True)
            return EXIT_INTERRUPTED if isinstance(exc, KeyboardInterrupt) else EXIT_FAILURE

        saved = f"thread [cyan]{safe_markup(thread_id)}[/] in {safe_markup(where)}"
        if result.waiting:
            console.print(f"Left for later: {saved}.", soft_wrap=True)
            console.print("To continue it, here or in any other terminal:")
        else:
            console.print(f"Saved as {saved}. To see it again:", soft_wrap=True)
        console.print(f"  {safe_markup(_resume_command(args, thread_id))}", soft_wrap=True)
        return EXIT_OK


def _terminal_ask(console: Console) -> Callable[[str], str]:
    def ask(prompt: str) -> str:
        return console.input(f"[bold cyan]?[/] {safe_markup(prompt)} ")

    return ask


def _piped_ask(console: Console) -> Callable[[str], str]:
    """Answers read from a stdin that is not a terminal, one a line; its end leaves the review waiting.

    Never approves on its own: a review is for a person, and only ``--yes`` approves everything.
    """
    from handrail.cli.terminal import ReviewDeferred

    console.print(
        "[yellow]stdin is not a terminal: each of its lines answers one question. When it ends, the "
        "reviews not answered wait in the store (--yes approves everything).[/]"
    )

    def ask(prompt: str) -> str:
        console.print(f"[bold cyan]?[/] {safe_markup(prompt)} ", end="")
        line = sys.stdin.readline()
        if not line:
            console.print()
            console.print("[yellow]Input ended, so this review waits for an answer.[/]")
            raise ReviewDeferred("input ended")
        answer = line.rstrip("\r\n")
        console.print(safe_markup(answer), highlight=False)
        return answer

    return ask


def _list_waiting(console: Console, args: argparse.Namespace, saver: BaseCheckpointSaver, where: str) -> int:
    from handrail.cli.demo import waiting_demo_threads

    waiting = waiting_demo_threads(saver)
    if not waiting:
        console.print(f"No demo thread is waiting for review in {safe_markup(where)}.", soft_wrap=True)
        return EXIT_OK
    count = f"{len(waiting)} demo thread{'s' if len(waiting) != 1 else ''}"
    console.print(f"{count} waiting for review in {safe_markup(where)}:", soft_wrap=True)
    for thread in waiting:
        since = thread.since.strftime("%Y-%m-%d %H:%M UTC")
        tools = safe_markup(", ".join(thread.tools))
        console.print(f"  [cyan]{safe_markup(thread.thread_id)}[/]  since {since}  {tools}", soft_wrap=True)
    console.print("To continue one:", soft_wrap=True)
    console.print(f"  {safe_markup(_resume_command(args, 'THREAD_ID'))}", soft_wrap=True)
    return EXIT_OK


def _thread_saved(saver: BaseCheckpointSaver, thread_id: str) -> bool:
    try:
        return saver.get_thread(thread_id) is not None
    except Exception:  # the store itself may be what failed; then there is nothing to promise
        return False


def _resume_command(args: argparse.Namespace, thread_id: str) -> str:
    """The command that continues ``thread_id``, with the store and workdir flags given."""
    command = f"{program()} demo --resume {shlex.quote(thread_id)}{store_flags(args)}"
    if args.workdir is not None:
        command += " " + shlex.join(["--workdir", os.path.abspath(args.workdir)])
    return command


def _demo_model(name: str | None, base_url: str | None) -> ChatModel | None:
    """The model for ``--model``, checked before anything runs (a missing key is said up front)."""
    if name is None:
        if base_url is not None:
            raise UsageError("--base-url needs --model, e.g. --model openai:qwen3:8b")
        return None
    from handrail.models import init_chat_model

    provider = name.partition(":")[0]
    if provider.strip().lower() == "scripted":
        raise UsageError(
            f"--model {name!r}: the demo plays its own script without --model; "
            "--model is for a real model, e.g. openai:gpt-4o-mini"
        )
    if base_url is not None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise UsageError(
                f"--base-url {base_url!r} is not an http(s) URL; give the API root, e.g. http://localhost:11434/v1"
            )
    options = {"base_url": base_url} if base_url else {}
    try:
        model = init_chat_model(name, **options)
    except ValueError as exc:
        raise UsageError(f"--model {name!r}: {one_line(exc)}") from None
    check = getattr(model, "check_credentials", None)
    if callable(check):
        check()
    return model
