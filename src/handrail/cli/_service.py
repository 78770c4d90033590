"""The service's commands: ``handrail serve``, ``handrail worker``, ``handrail tokens ...``.

``_command.py`` adds them with :func:`add_commands` and runs them with :func:`run`.
:func:`load_agents` (the agents ``MODULE:AGENT`` and ``--agent NAME=MODULE:AGENT`` name,
with the policy of ``--policy``) serves ``handrail sweep`` too.
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import os
import re
import socket
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from handrail.cli._errors import CommandError
from handrail.cli._flags import add_policy_flag, add_store_flags, count_flag, duration_flag
from handrail.cli._review_display import clock, id_column, text_column, time_column
from handrail.cli._store import open_async_store, server_db

__all__ = ["COMMANDS", "add_commands", "load_agents", "masked_dsn", "run"]

COMMANDS = ("serve", "worker", "tokens")


def add_commands(commands: Any) -> None:
    """Add ``serve`` and ``tokens`` to the ``handrail`` command's subparsers."""
    serve = commands.add_parser(
        "serve",
        help="serve agents over HTTP: the LangGraph SDKs' API, the reviewers' inbox and its web pages",
        description="Start the review service (FastAPI on uvicorn). Every request needs a token: "
        "create one with 'handrail tokens create --name NAME --role ROLE'.",
    )
    serve.add_argument("target", metavar="MODULE:AGENT", nargs="?", help="the agent to serve, e.g. app:agent")
    serve.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="NAME=MODULE:AGENT",
        help="serve another agent as NAME",
    )
    add_store_flags(serve)
    add_policy_flag(serve)
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="the port (default: 8000; 0: any free port)")
    serve.add_argument(
        "--public-url",
        metavar="URL",
        help="where reviewers reach this service, for links in notifications (default: http://HOST:PORT)",
    )
    serve.add_argument(
        "--deliver-concurrency",
        type=count_flag,
        default=16,
        metavar="N",
        help="notification deliveries attempted at once here (default: 16; 0: leave it to handrail deliver)",
    )
    serve.add_argument(
        "--concurrency",
        type=count_flag,
        default=8,
        metavar="N",
        help="answered threads this service runs at once (default: 8; 0: leave them to 'handrail worker')",
    )
    serve.add_argument(
        "--rate-limit",
        type=_rate,
        default=None,
        metavar="N",
        help="at most N requests a second per credential, in bursts of up to N; more get a 429 "
        "(default: no limit)",
    )
    serve.add_argument(
        "--sweep-every",
        type=_sweep_every,
        default=30.0,
        metavar="DURATION",
        help="resolve reviews that expired unanswered this often (default: 30s; 'off': leave it to "
        "'handrail sweep')",
    )
    worker = commands.add_parser(
        "worker",
        help="run the answered reviews of agents, beside or instead of the service",
        description="Run the threads that reviewers answered (through the service, the CLI or "
        "agent.decide) for the agents named, on the store named: each thread by exactly one worker, "
        "and the runs of workers that died taken over (their unfinished tool calls become "
        "outcome_unknown reviews).",
    )
    worker.add_argument("target", metavar="MODULE:AGENT", nargs="?", help="the agent to host, e.g. app:agent")
    worker.add_argument(
        "--agent", action="append", default=[], metavar="NAME=MODULE:AGENT", help="host another agent as NAME"
    )
    add_store_flags(worker)
    add_policy_flag(worker)
    worker.add_argument(
        "--concurrency", type=count_flag, default=8, metavar="N", help="runs at once (default: 8)"
    )
    worker.add_argument(
        "--poll",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="how often to look for work nothing woke it for (default: 1)",
    )
    tokens = commands.add_parser("tokens", help="create, list and revoke the service's credentials")
    actions = tokens.add_subparsers(dest="tokens_command", metavar="ACTION", title="actions")
    create = actions.add_parser("create", help="create a token; it is printed once")
    create.add_argument(
        "--name", required=True, help="who the token is: the reviewer id recorded with answers"
    )
    create.add_argument("--role", action="append", default=[], help="a role the reviewer holds (repeatable)")
    create.add_argument(
        "--scope",
        action="append",
        default=[],
        choices=["run", "review", "admin"],
        help="what the token may do (repeatable): run (start threads and runs, read and cancel its "
        "own), review (the inbox, answers within its roles), admin (everything); default: review",
    )
    add_store_flags(create)
    listing = actions.add_parser("list", help="list the tokens (never the tokens themselves)")
    add_store_flags(listing)
    revoke = actions.add_parser("revoke", help="revoke a token by id, or every token of a name")
    revoke.add_argument("token", metavar="ID_OR_NAME")
    add_store_flags(revoke)
    link = actions.add_parser(
        "link",
        help="print a one-time link that signs a reviewer in to the web inbox",
        description="Print a link that signs NAME in to the web inbox once, as their newest live "
        "token (or the token with this id). It works once, for --minutes.",
    )
    link.add_argument("token", metavar="NAME_OR_ID")
    link.add_argument(
        "--url",
        default=None,
        help="where reviewers reach the service (default: $HANDRAIL_URL or http://127.0.0.1:8000)",
    )
    link.add_argument("--minutes", type=float, default=15.0, help="how long the link works (default: 15)")
    add_store_flags(link)


def run(args: argparse.Namespace, console: Console) -> int:
    """Run ``serve`` or ``tokens``; return the exit code."""
    from handrail.server.loading import LoadError

    try:
        if args.command == "serve":
            return _serve(args, console)
        if args.command == "worker":
            return _work(args, console)
        return _tokens(args, console)
    except LoadError as exc:
        raise CommandError(str(exc)) from None


def _tokens(args: argparse.Namespace, console: Console) -> int:
    from handrail.server.tokens import TokenStore

    if args.tokens_command is None:
        raise CommandError("choose an action: tokens create, tokens list, tokens revoke or tokens link")
    db = server_db(args)
    try:
        tokens = TokenStore(db)
        if args.tokens_command == "create":
            try:
                credential, token = tokens.create(args.name, args.role, args.scope or ["review"])
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            console.print(
                f"Created token {credential.id} for {escape(credential.name)} "
                f"(roles: {escape(', '.join(credential.roles) or 'none')}; "
                f"scopes: {', '.join(credential.scopes)})."
            )
            console.print("It is shown only this once; keep it secret:")
            console.print(token, soft_wrap=True, highlight=False)
            return 0
        if args.tokens_command == "list":
            # ids, scopes and times are never cut to fit 80 columns; names and roles wrap instead
            table = Table(
                id_column("id"),
                text_column("name"),
                text_column("roles"),
                id_column("scopes"),
                time_column("created (UTC)"),
                time_column("revoked"),
            )
            listed = tokens.all()
            for c in listed:
                table.add_row(
                    c.id,
                    escape(c.name),
                    escape(", ".join(c.roles)),
                    ", ".join(c.scopes) + (" *" if c.migrated_at is not None else ""),
                    clock(c.created_at, seconds=False),
                    clock(c.revoked_at, seconds=False) if c.revoked_at else "",
                )
            console.print(table)
            if any(c.migrated_at is not None and c.revoked_at is None for c in listed):
                console.print(
                    "* made before tokens had scopes: given run and review, what such tokens were used "
                    "for. Revoke it and create one with the --scope it needs (admin for deletion, state "
                    "updates and forks).",
                    soft_wrap=True,
                )
            return 0
        if args.tokens_command == "link":
            return _link(db, tokens, args, console)
        revoked = tokens.revoke(args.token)
        if not revoked:
            raise CommandError(f"no live token with id or name {args.token!r} (see 'handrail tokens list')")
        for c in revoked:
            console.print(f"Revoked token {c.id} of {escape(c.name)}.")
        return 0
    finally:
        db.close()


def _link(db: Any, tokens: Any, args: argparse.Namespace, console: Console) -> int:
    from handrail.server.sessions import SessionStore

    if not 0 < args.minutes < float("inf"):
        raise CommandError(f"--minutes must be a positive number of minutes, got {args.minutes:g}")
    credential = tokens.live(args.token)
    if credential is None:
        raise CommandError(
            f"no live token with name or id {args.token!r}: make one first with "
            f"'handrail tokens create --name {args.token} --role ROLE'"
        )
    base = args.url or os.environ.get("HANDRAIL_URL") or "http://127.0.0.1:8000"
    if not base.startswith(("http://", "https://")):
        raise CommandError(f"--url must start with http:// or https://, got {base!r}")
    try:
        link = SessionStore(db, tokens).link(credential, seconds=args.minutes * 60)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    roles = ", ".join(credential.roles) or "none"
    console.print(
        f"A one-time sign-in link for {escape(credential.name)} (roles: {escape(roles)}), "
        f"valid for {args.minutes:g} minutes; it works once:",
        soft_wrap=True,
    )
    console.print(link.url(base), soft_wrap=True, highlight=False, markup=False)
    return 0


def _serve(args: argparse.Namespace, console: Console) -> int:
    try:
        import uvicorn
    except ImportError:
        raise CommandError("handrail serve needs the server extra: pip install 'handrail[server]'") from None
    import asyncio

    from handrail.cli._reload import PolicyReload
    from handrail.notify.config import check_url, notify_settings
    from handrail.review.policy_file import load_policy_file
    from handrail.server.app import create_app

    code, agents, where = load_agents(args, "serve")
    names = list(agents)
    settings = notify_settings(load_policy_file(args.policy)) if args.policy is not None else None
    try:
        public_url = check_url(
            args.public_url
            or (settings.public_url if settings else None)
            or f"http://{args.host}:{args.port}",
            "--public-url",
        )
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    db = server_db(args)
    app = create_app(
        agents,
        db=db,
        worker_concurrency=args.concurrency,
        rate_limit=args.rate_limit,
        sweep_every=args.sweep_every,
        notifications=settings,
        public_url=public_url,
        deliver_concurrency=args.deliver_concurrency,
    )
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    reloading = PolicyReload(
        args.policy, code, console, app.state.service.use_agents, notify=app.state.service
    )
    reloading.arm()  # a SIGHUP before the loop runs waits for it (by default it would end the process)

    class Server(uvicorn.Server):
        async def serve(self, sockets: list[socket.socket] | None = None) -> None:
            reloading.install(asyncio.get_running_loop())  # SIGHUP reloads the policy, on this loop
            await super().serve(sockets)

    server = Server(config)
    flags = (
        f" --postgres {masked_dsn(args.postgres)}" if args.postgres else f" --db {args.db}" if args.db else ""
    )
    try:
        # Bound and listening before uvicorn starts, so the real port (for --port 0) can be printed.
        sock = socket.create_server((args.host, args.port), backlog=2048)
        # Accepted sockets inherit it: without it a kept-alive connection waits ~40 ms for
        # the client's delayed ACK between the response's header and body writes.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError as exc:
        raise CommandError(f"cannot listen on {args.host}:{args.port}: {exc}") from None
    port = sock.getsockname()[1]
    console.print(
        f"handrail serving {', '.join(names)} on http://{args.host}:{port} (threads in {where})",
        soft_wrap=True,
    )
    where_at = f"http://{args.host}:{port}"
    console.print(f"API: {where_at}/openapi.json · web inbox: {where_at}/inbox", soft_wrap=True)
    if args.policy is not None:
        console.print(
            f"Review policy: {args.policy}, for the agents it names (not the code's); "
            f"kill -HUP {os.getpid()} reloads it",
            soft_wrap=True,
        )
    if not _loopback(args.host):
        console.print(
            f"Warning: listening on {args.host}, beyond this machine, over plain HTTP: tokens and "
            "session cookies cross the network in the clear. Put TLS in front (a reverse proxy that "
            "terminates HTTPS) before reviewers use it.",
            soft_wrap=True,
        )
    console.print(
        f"Create a first credential: handrail tokens create --name NAME --role ROLE{flags}", soft_wrap=True
    )
    # What was loaded to get here (the modules, the app, the agents) stays for the whole
    # life of the process: out of the collector's full passes, which otherwise walk it all and
    # stall a request now and then (about 100 ms on a busy two-core machine, bench/service.py).
    gc.collect()
    gc.freeze()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        db.close()
    return 0


def load_agents(args: argparse.Namespace, verb: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The agents the flags name, on the store they name: as their code makes them (kept for
    a reload, ``_reload.py``) and as served, with the policy file's policy (``--policy``);
    and where the store is."""
    from handrail.cli._reload import with_policy
    from handrail.server.loading import load_agent, on_store, parse_agent_flag

    named = [parse_agent_flag(flag) for flag in args.agent]
    if args.target is not None:
        first = load_agent(args.target)
        named.insert(0, (first.name or "agent", args.target))
    if not named:
        raise CommandError(f"name an agent: handrail {verb} module:agent [--agent NAME=module:agent ...]")
    names = [name for name, _ in named]
    if len(set(names)) != len(names):
        raise CommandError(f"two agents have the same name: {names}")
    loaded = {name: load_agent(target) for name, target in named}
    # a bad policy file stops it here, before the store opens (a PolicyFileError names file, line and key)
    served = with_policy(args.policy, loaded) if args.policy is not None else loaded
    store, where = open_async_store(args)
    code = {name: on_store(agent, store) for name, agent in loaded.items()}
    if args.policy is None:
        return code, code, where
    return code, {name: on_store(agent, store) for name, agent in served.items()}, where


def _work(args: argparse.Namespace, console: Console) -> int:
    import asyncio
    import signal

    from handrail.cli._reload import PolicyReload
    from handrail.worker import Worker

    if not args.poll > 0:
        raise CommandError(f"--poll takes a number of seconds above 0, got {args.poll}")
    if args.concurrency < 1:
        raise CommandError("--concurrency takes a whole number of at least 1 for a worker")
    code, agents, where = load_agents(args, "worker")
    store = next(iter(agents.values())).checkpointer
    worker = Worker(agents, concurrency=args.concurrency, poll=args.poll)
    reloading = PolicyReload(args.policy, code, console, worker.use_agents)
    reloading.arm()

    async def main() -> None:
        await store.setup()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda: asyncio.ensure_future(worker.stop()))
        reloading.install(loop)  # SIGHUP reloads the policy file
        console.print(
            f"handrail worker for {', '.join(agents)} on {where} (pid {os.getpid()}): running answered "
            f"threads, {args.concurrency} at a time. Ctrl-C stops it (the runs going are let finish).",
            soft_wrap=True,
        )
        try:
            await worker.run()
        finally:
            await store.aclose()

    asyncio.run(main())
    console.print(f"handrail worker stopped after {worker.ran} run(s).")
    return 0


def _sweep_every(text: str) -> float | None:
    return None if text.strip().lower() in ("off", "0", "never") else duration_flag(text)


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of requests a second above 0, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"a number of requests a second above 0, got {text!r}")
    return value


def masked_dsn(dsn: str) -> str:
    """A PostgreSQL DSN as it may be printed: its password replaced by ``***``.

    Example::

        masked_dsn("postgresql://app:s3cret@db/handrail")   # 'postgresql://app:***@db/handrail'
    """
    masked = re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", dsn)  # URL form
    return re.sub(r"(\bpassword\s*=\s*)('[^']*'|\S+)", r"\1***", masked, flags=re.IGNORECASE)  # key=value


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
