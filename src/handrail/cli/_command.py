"""The ``handrail`` command.

Subcommands:

``handrail audit verify THREAD ... | --all``
    Check threads' stored logs against their hash chains (``_audit.py``).

``handrail demo``
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

A mistake on the command line ends with one line on stderr and exit code 2; a problem
found while running (an unknown thread, a store that cannot be opened) with one line
and exit code 1; Ctrl-C with a short message and exit code 130.

Everything is printed through :func:`handrail.cli.terminal.safe_console`: a control or
invisible formatting character in a value (a thread id, a tool's arguments, a model's
message, an error that quotes them) reaches the terminal as an escape such as ``\\x1b``
or ``\\u202e``, never raw.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import sqlite3
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

from rich.console import Console

from handrail import __version__
from handrail.checkpoint.base import BaseCheckpointSaver
from handrail.cli import _grants, _mcp, _policy, _review, _service, _slack, _sweep, _webhooks
from handrail.cli._sqlite_file import damaged_advice, is_damage, sqlite_file_problem
from handrail.cli.terminal import safe_console, safe_markup
from handrail.errors import HandrailError
from handrail.models.base import ChatModel

__all__ = ["DEFAULT_DB", "run_command"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")

DEFAULT_DB = Path("handrail.db")
"""Where ``handrail demo`` keeps its threads without ``--db`` or ``--postgres`` (relative to the cwd)."""


class UsageError(Exception):
    """The command line was wrong; the message is the one line to show."""


class StoreError(HandrailError):
    """The demo's store cannot be used (missing, not handrail's, unreachable); one line to show."""


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
            return _demo(args, errors)
        if args.command == "audit" and args.thread_id[:1] == ["verify"]:
            from handrail.cli import _audit

            return _audit.run(args, _open_store, UsageError)
        if args.command in _service.COMMANDS:
            try:
                return _service.run(args, safe_console(highlight=False))
            except _service.CommandError as exc:
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
            except _service.CommandError as exc:
                raise StoreError(str(exc)) from None
        if args.command in _review.COMMANDS or args.command in _grants.COMMANDS:
            runner = _review.run if args.command in _review.COMMANDS else _grants.run
            try:
                return runner(args, safe_console(highlight=False))
            except _review.CommandError as exc:
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
        errors.print(f"handrail: error: {safe_markup(_one_line(exc))}", soft_wrap=True)
        return EXIT_FAILURE


# handrail demo ----------------------------------------------------------------------------------
def _demo(args: argparse.Namespace, errors: Console) -> int:
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

    with _open_store(args, existing=not starting) as (saver, where):
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
                    f"no thread {thread_id!r} in {where} (see '{_program()} demo --list{_store_flags(args)}')"
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


@contextmanager
def _open_store(
    args: argparse.Namespace, *, existing: bool, tables_must_exist: bool = False
) -> Iterator[tuple[BaseCheckpointSaver, str]]:
    """The saver ``--db``/``--postgres`` (and ``--schema``, where the command has it) name,
    and how to name it in messages; closed afterwards.

    With ``existing`` (``--resume``, ``--list``, ``audit verify``) a missing SQLite file is
    an error rather than a new, empty store. With ``tables_must_exist`` (``audit verify``)
    a PostgreSQL database or schema without handrail's tables is an error too, rather than
    a store created empty.
    """
    schema: str | None = getattr(args, "schema", None)
    if args.postgres is not None:
        with _open_postgres(args.postgres, schema, tables_must_exist=tables_must_exist) as opened:
            yield opened
        return
    if schema is not None:
        raise UsageError("--schema names a PostgreSQL schema: use it with --postgres DSN")
    path: Path = args.db if args.db is not None else DEFAULT_DB
    _check_sqlite_file(
        path,
        existing=existing,
        flags=_store_flags(args),
        given=args.db is not None,
        reading=tables_must_exist,
    )
    from handrail.checkpoint.sqlite import SqliteSaver

    try:
        with SqliteSaver(path) as saver:
            yield saver, str(path)
    except sqlite3.DatabaseError as exc:
        if not is_damage(exc):
            raise
        raise StoreError(damaged_advice(path, _one_line(exc))) from None


def _check_sqlite_file(
    path: Path, *, existing: bool, flags: str, given: bool = True, reading: bool = False
) -> None:
    """Refuse a SQLite path that cannot be the store meant. ``given``: the path came from
    ``--db`` (not the default); ``reading``: a command that reads a store (``audit verify``),
    not the demo."""
    if path.is_dir():
        raise UsageError(f"--db {str(path)!r} is a directory; give the path of a file")
    if not path.parent.is_dir():
        raise UsageError(
            f"--db {str(path)!r}: the folder {str(path.parent)!r} does not exist; "
            "create it first, or give a path in a folder that exists"
        )
    if not path.exists():
        if existing and reading:
            where = f"{os.path.abspath(path)!r}" + (
                "" if given else " (the default, as no --db or --postgres was given)"
            )
            raise StoreError(
                f"no handrail store at {where}: name the store to read with --db FILE or --postgres DSN"
            )
        if existing:
            raise StoreError(
                f"no handrail database at {str(path)!r}: start a demo first with "
                f"'{_program()} demo{flags}', or pass the --db it used"
            )
        return
    problem = sqlite_file_problem(path)
    if problem is not None:
        raise StoreError(problem)


@contextmanager
def _open_postgres(
    dsn: str, schema: str | None = None, *, tables_must_exist: bool = False
) -> Iterator[tuple[BaseCheckpointSaver, str]]:
    try:
        import psycopg

        from handrail.checkpoint.postgres import PostgresSaver
    except ImportError:
        raise StoreError("--postgres needs psycopg 3: pip install 'handrail[postgres]'") from None
    if schema is not None and not _SCHEMA_NAME.fullmatch(schema):
        raise UsageError(
            f"--schema {schema!r} is not a plain SQL identifier (letters, digits, _ and $, "
            "not starting with a digit)"
        )
    where = f"PostgreSQL ({_safe_dsn(dsn)})"
    try:
        # A quick probe: the pool would retry an unreachable server for its whole timeout.
        with psycopg.connect(dsn, connect_timeout=10, autocommit=True) as conn:
            row = conn.execute("SELECT current_database(), current_schema()").fetchone()
            database, current = (str(row[0]), row[1]) if row is not None else ("?", None)
            shown = schema if schema is not None else current or "(none on the search_path)"
            where = f"{where}, database {database!r}, schema {shown!r}"
            if tables_must_exist and not _has_store(conn, schema):
                raise StoreError(
                    f"{where} holds no handrail store (it has no handrail_threads table), so there is "
                    "nothing to read: check --postgres and --schema"
                )
    except psycopg.Error as exc:
        raise StoreError(f"cannot connect to {where}: {_one_line(exc)}") from None
    try:
        with PostgresSaver.from_conn_string(dsn, schema=schema, pool_size=4) as saver:
            saver.setup()
            yield saver, where
    except psycopg.Error as exc:
        raise StoreError(f"{where}: {_one_line(exc)}") from None


def _has_store(conn: Any, schema: str | None) -> bool:
    """Whether the schema (the connection's own without one) holds handrail's tables."""
    # The schema is a plain identifier (checked by the caller), so it can be quoted as is.
    table = f'"{schema}".handrail_threads' if schema is not None else "handrail_threads"
    found = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
    return bool(found and found[0])


def _thread_saved(saver: BaseCheckpointSaver, thread_id: str) -> bool:
    try:
        return saver.get_thread(thread_id) is not None
    except Exception:  # the store itself may be what failed; then there is nothing to promise
        return False


def _store_flags(args: argparse.Namespace) -> str:
    """``--postgres`` as given, or ``--db`` with the SQLite file's absolute path, for a command to print."""
    if args.postgres is not None:
        return " " + shlex.join(["--postgres", args.postgres])
    # Absolute, so the printed command works from any folder.
    return " " + shlex.join(["--db", os.path.abspath(args.db if args.db is not None else DEFAULT_DB)])


def _resume_command(args: argparse.Namespace, thread_id: str) -> str:
    """The command that continues ``thread_id``, with the store and workdir flags given."""
    command = f"{_program()} demo --resume {shlex.quote(thread_id)}{_store_flags(args)}"
    if args.workdir is not None:
        command += " " + shlex.join(["--workdir", os.path.abspath(args.workdir)])
    return command


def _program() -> str:
    """How the person ran this command: ``handrail`` when it is on the PATH, else its absolute path."""
    invoked = sys.argv[0] if sys.argv else ""
    if Path(invoked).name == "__main__.py":  # python -m handrail
        return f"{shlex.quote(sys.executable)} -m handrail"
    if Path(invoked).name != "handrail":
        return "handrail"
    found = shutil.which("handrail")
    try:
        if found is not None and os.path.samefile(found, invoked):
            return "handrail"
    except OSError:
        pass
    return shlex.quote(os.path.abspath(invoked))


def _safe_dsn(dsn: str) -> str:
    """The DSN without its password, for messages."""
    dsn = re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)('[^']*'|[^\s&]+)", r"\1***", dsn, flags=re.IGNORECASE)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


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
        raise UsageError(f"--model {name!r}: {_one_line(exc)}") from None
    check = getattr(model, "check_credentials", None)
    if callable(check):
        check()
    return model
