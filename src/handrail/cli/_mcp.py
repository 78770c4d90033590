"""``handrail mcp``: the MCP gateway (``handrail.mcp.gateway``), and ``handrail mcp init``.

``handrail mcp --upstream fs="npx -y @modelcontextprotocol/server-filesystem /data"
--upstream gh=https://host/mcp [--policy handrail.toml] [--db FILE | --postgres DSN]``
serves over stdio (the client launches it); ``--http --port 8765`` over streamable HTTP
at ``/mcp`` (a token of scope ``run`` as the bearer), with the reviewer side (API and web
inbox) on the same port. ``--review-port`` gives a stdio gateway its reviewer side.

``handrail mcp init --upstream ...`` writes a policy file that reviews every tool not
marked ``readOnlyHint`` by its server, for the user to read and edit.

Over stdio, stdout is the MCP wire: everything this command says goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import socket
import sys
from pathlib import Path
from typing import Any

from handrail.cli._flags import add_store_flags
from handrail.cli._store import open_async_store, server_db

__all__ = ["COMMANDS", "add_commands", "run"]

COMMANDS = frozenset({"mcp"})


def add_commands(commands: Any) -> None:
    """Add ``handrail mcp`` and ``handrail mcp init`` to the CLI's subcommands."""
    gateway = commands.add_parser(
        "mcp",
        help="an MCP server in front of MCP servers: gated tool calls become reviews",
        description=(
            "Serve the upstream MCP servers' tools to any MCP client, with the calls the policy "
            "gates held for a person's review (stdio by default; --http for streamable HTTP)."
        ),
    )
    _upstream_flags(gateway)
    gateway.add_argument(
        "--policy", type=Path, metavar="FILE", help="the policy file (default: review every tool)"
    )
    gateway.add_argument(
        "--name", default="mcp", help="the gateway's agent name in the store and policy (default: mcp)"
    )
    gateway.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp instead of stdio")
    gateway.add_argument("--host", default="127.0.0.1", help="the address for --http (default: 127.0.0.1)")
    gateway.add_argument("--port", type=int, default=8765, help="the port for --http (default: 8765; 0: any)")
    gateway.add_argument(
        "--review-port",
        type=int,
        metavar="PORT",
        help="stdio: also serve the reviewer side on 127.0.0.1:PORT",
    )
    gateway.add_argument(
        "--hold",
        type=float,
        default=55.0,
        help="seconds a gated call waits before 'review pending' (default: 55)",
    )
    gateway.add_argument("--public-url", metavar="URL", help="where reviewers reach the reviewer side")
    add_store_flags(gateway)
    steps = gateway.add_subparsers(dest="mcp_command", metavar="ACTION")
    init = steps.add_parser("init", help="write a policy file from the upstreams' tool annotations")
    _upstream_flags(init)
    init.add_argument("--name", default="mcp", help="the gateway's agent name (default: mcp)")
    init.add_argument("--output", type=Path, default=Path("handrail.toml"), help="default: handrail.toml")
    init.add_argument("--force", action="store_true", help="replace the file if it exists")


def _upstream_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--upstream",
        action="append",
        default=[],
        metavar="NAME=COMMAND|URL",
        help="an upstream MCP server: a command line (stdio) or an http(s) URL (repeatable)",
    )
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME=HEADER: VALUE",
        help="an HTTP header for the upstream NAME, e.g. gh='Authorization: Bearer ...' (repeatable)",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds an upstream call may take")


def run(args: argparse.Namespace, failure: type[Exception]) -> int:
    """Run ``handrail mcp`` or ``handrail mcp init``; a failure is raised as ``failure``."""
    try:
        from handrail.mcp.config import McpServerConfig
    except ImportError as exc:
        raise failure(str(exc)) from None
    servers = _servers(args, failure, McpServerConfig)
    if args.mcp_command == "init":
        return _init(args, servers, failure)
    return _serve(args, servers, failure)


def _servers(args: argparse.Namespace, failure: type[Exception], config: Any) -> dict[str, Any]:
    if not args.upstream:
        raise failure('name an upstream: --upstream NAME="command args" or --upstream NAME=https://host/mcp')
    headers: dict[str, dict[str, str]] = {}
    for flag in args.header:
        name, _, header = flag.partition("=")
        key, colon, value = header.partition(":")
        if not name or not colon or not key.strip():
            raise failure(f"--header takes NAME='Header: value', got {flag!r}")
        headers.setdefault(name, {})[key.strip()] = value.strip()
    servers: dict[str, Any] = {}
    for flag in args.upstream:
        name, sep, spec = flag.partition("=")
        if not sep or not name or not spec.strip():
            raise failure(f"--upstream takes NAME=COMMAND or NAME=URL, got {flag!r}")
        if name in servers:
            raise failure(f"two upstreams are named {name!r}")
        try:
            if spec.startswith(("http://", "https://")):
                servers[name] = config(url=spec, headers=headers.pop(name, None))
            else:
                servers[name] = config(command=shlex.split(spec))
        except ValueError as exc:
            raise failure(f"upstream {name!r}: {exc}") from None
    if headers:
        raise failure(f"--header names {sorted(headers)}, which are not upstreams over HTTP")
    return servers


def _init(args: argparse.Namespace, servers: dict[str, Any], failure: type[Exception]) -> int:
    from handrail.mcp.upstreams import Upstreams

    if args.output.exists() and not args.force:
        raise failure(f"{args.output} exists: edit it, or pass --force to replace it")
    upstreams = Upstreams(servers, timeout=args.timeout)

    async def listing() -> list[tuple[str, bool, str]]:
        await upstreams.open()
        try:
            found = []
            for name, (_, raw, _) in upstreams.tools.items():
                read_only = bool(raw.annotations is not None and raw.annotations.read_only_hint)
                found.append(
                    (name, read_only, raw.title or (raw.annotations.title if raw.annotations else "") or "")
                )
            return found
        finally:
            await upstreams.close()

    try:
        tools = asyncio.run(listing())
    except Exception as exc:
        raise failure(str(exc)) from None
    lines = [
        "# The MCP gateway's review policy, written by 'handrail mcp init' from the upstreams' tool",
        "# annotations: every tool not marked readOnlyHint is reviewed. Annotations are hints from the",
        "# servers, not promises: read each line, and gate what you do not trust.",
        f"# Use: handrail mcp --policy {args.output} --upstream ...",
        "",
        f"[agents.{args.name}.interrupt_on]",
    ]
    for name, read_only, title in tools:
        note = "  # readOnlyHint" if read_only else ""
        if title:
            note += f"{'  #' if not note else ';'} {_comment(title)}"
        lines.append(f'"{name}" = {"false" if read_only else "true"}{note}')
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    reviewed = sum(1 for _, read_only, _ in tools if not read_only)
    print(f"wrote {args.output}: {reviewed} of {len(tools)} tools reviewed", file=sys.stderr)
    return 0


def _comment(text: str) -> str:
    return "".join(ch if ch.isprintable() else " " for ch in text)[:80]


def _serve(args: argparse.Namespace, servers: dict[str, Any], failure: type[Exception]) -> int:
    from handrail.mcp.gateway import Gateway
    from handrail.mcp.upstreams import Upstreams

    if not args.hold >= 0:
        raise failure(f"--hold is a number of seconds, 0 or more; got {args.hold}")
    if args.policy is not None:
        from handrail.review.policy_file import load_policy_file

        load_policy_file(args.policy)  # a bad file stops it here, naming file, line and key
    store, where = open_async_store(args)
    db = server_db(args)
    gateway = Gateway(
        Upstreams(servers, timeout=args.timeout),
        store,
        policy_file=args.policy,
        name=args.name,
        hold=args.hold,
    )
    sock = None
    port = args.port if args.http else args.review_port
    if port is not None:
        host = args.host if args.http else "127.0.0.1"
        try:
            sock = socket.create_server((host, port), backlog=2048)
            # accepted sockets inherit it: else each response's last write waits ~40 ms for a delayed ACK
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            raise failure(f"cannot listen on {host}:{port}: {exc}") from None
        port = sock.getsockname()[1]
    public_url = args.public_url or (
        f"http://{args.host if args.http else '127.0.0.1'}:{port}" if port else ""
    )
    try:
        asyncio.run(_main(args, gateway, db, sock, public_url, where))
    finally:
        if sock is not None:
            sock.close()
        db.close()
    return 0


async def _main(
    args: argparse.Namespace, gateway: Any, db: Any, sock: Any, public_url: str, where: str
) -> None:
    from handrail.mcp.serving import http_app, run_stdio

    await gateway.open()
    counts = f"{len(gateway.upstreams.tools)} tools, {len(gateway.gated)} reviewed"
    say = f"handrail mcp: {counts} (threads in {where})"
    try:
        if not args.http:
            if sock is not None:
                say += f"; reviews at {public_url}/inbox"
            print(say, file=sys.stderr, flush=True)
            await run_stdio(gateway, db, public_url=public_url or "http://127.0.0.1", review_sock=sock)
            return
        import uvicorn

        app = http_app(gateway, db, host=args.host, public_url=public_url)
        print(f"{say}; MCP at {public_url}/mcp; reviews at {public_url}/inbox", flush=True)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        await server.serve(sockets=[sock])
    finally:
        await gateway.close()
