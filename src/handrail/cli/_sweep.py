"""``handrail sweep``: resolve the reviews that expired unanswered (SPEC rule 15).

One pass over the pending reviews of the agents named, on the store named (the flags of
``handrail worker``); ``--every 30s`` sweeps until interrupted. Each lapsed review
resolves by its policy's ``on_expiry``, once, whatever other sweepers run at once
(``handrail.sweep``); a worker then runs what the expiry decided. ``handrail serve``
sweeps by itself (``--sweep-every``): this command is for stores that no service sweeps,
or for cron.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from rich.console import Console

from handrail.cli._errors import CommandError
from handrail.cli._flags import add_policy_flag, add_store_flags, duration_flag

__all__ = ["COMMANDS", "add_commands", "run"]

COMMANDS = frozenset({"sweep"})


def add_commands(commands: Any) -> None:
    """Add ``handrail sweep`` to the CLI's subcommands."""
    sweep = commands.add_parser(
        "sweep",
        help="resolve reviews that expired unanswered, by their policies' on_expiry",
        description="Resolve the pending reviews of the agents named whose expires_after has passed, "
        "each once (any number of sweepers may run at once); a worker then runs what the expiry decided.",
    )
    sweep.add_argument("target", metavar="MODULE:AGENT", nargs="?", help="the agent whose reviews to sweep")
    sweep.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="NAME=MODULE:AGENT",
        help="sweep another agent as NAME",
    )
    add_store_flags(sweep)
    add_policy_flag(sweep)
    sweep.add_argument(
        "--every",
        type=duration_flag,
        metavar="DURATION",
        help="sweep again every DURATION (30s, 5m, ...) until interrupted (default: one pass)",
    )


def run(args: argparse.Namespace, console: Console, failure: type[Exception]) -> int:
    """Run ``handrail sweep``; return the exit code."""
    from handrail.cli._service import load_agents
    from handrail.server.loading import LoadError
    from handrail.sweep import asweep

    try:
        _, agents, where = load_agents(args, "sweep")
    except (LoadError, CommandError) as exc:
        raise failure(str(exc)) from None
    store = next(iter(agents.values())).checkpointer

    async def once() -> int:
        expired = await asweep(agents)
        for item in expired:
            console.print(
                f"expired: review {item.interrupt_id} of thread {item.thread_id} "
                f"(at {item.expired_at.isoformat(timespec='seconds')})",
                soft_wrap=True,
            )
        return len(expired)

    async def main() -> int:
        await store.setup()
        try:
            if args.every is None:
                count = await once()
                console.print(f"{count} expired review(s) resolved on {where}.", soft_wrap=True)
                return 0
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            console.print(
                f"handrail sweep for {', '.join(agents)} on {where}: every {args.every:g} s. "
                "Ctrl-C stops it.",
                soft_wrap=True,
            )
            while not stop.is_set():
                await once()
                try:
                    await asyncio.wait_for(stop.wait(), args.every)
                except TimeoutError:
                    pass
            return 0
        finally:
            await store.aclose()

    return asyncio.run(main())
