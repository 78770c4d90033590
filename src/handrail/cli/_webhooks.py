"""``handrail webhooks`` and ``handrail deliver``: notification endpoints and their deliverer.

``handrail webhooks add URL --events review.requested,review.decided [--secret whsec_...]``
adds a webhook (its secret is printed once); ``list``, ``remove ID``, ``rotate ID``,
``test ID`` (sends a ``handrail.test`` delivery now and says how it went),
``deliveries [--endpoint ID] [--status failed]`` (the log) and ``retry DELIVERY_ID``.
They work on the service's database (``--db`` / ``--postgres``), like ``handrail tokens``.

``handrail deliver`` runs a deliverer without a service: for a service started with
``--deliver-concurrency 0``, or beside one for more throughput (any number may run).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from handrail.cli._flags import add_policy_flag, add_store_flags, count_flag, duration_flag
from handrail.cli._review_display import clock, id_column, text_column
from handrail.cli._store import open_async_store, server_db

__all__ = ["COMMANDS", "add_commands", "run"]

COMMANDS = frozenset({"webhooks", "deliver"})


def add_commands(commands: Any) -> None:
    """Add ``handrail webhooks ...`` and ``handrail deliver`` to the CLI's subcommands."""
    from handrail.notify.events import EVENT_TYPES

    hooks = commands.add_parser(
        "webhooks",
        help="notification endpoints: add, list, remove, rotate, test; the delivery log",
        description="Manage the endpoints notifications are delivered to, and read their delivery log.",
    )
    actions = hooks.add_subparsers(dest="webhooks_command", metavar="ACTION")
    add = actions.add_parser("add", help="add a webhook endpoint (its signing secret is printed once)")
    add.add_argument("url", help="where deliveries are POSTed (http:// or https://)")
    add.add_argument(
        "--events",
        default="review.requested,review.decided,review.expired,review.outcome_unknown",
        help=f"comma-separated events, or * (of {', '.join(EVENT_TYPES)}; default: the review events)",
    )
    add.add_argument("--secret", metavar="WHSEC", help="the signing secret (default: a new one)")
    actions.add_parser("list", help="the endpoints in use")
    remove = actions.add_parser("remove", help="stop sending to an endpoint (its log stays)")
    remove.add_argument("endpoint_id")
    rotate = actions.add_parser("rotate", help="a new signing secret; the old one signs too for a while")
    rotate.add_argument("endpoint_id")
    rotate.add_argument(
        "--keep-old-for", type=duration_flag, default=86400.0, metavar="DURATION", help="default: 24h"
    )
    test = actions.add_parser("test", help="send a handrail.test delivery now and say how it went")
    test.add_argument("endpoint_id")
    test.add_argument(
        "--public-url", default="http://127.0.0.1:8000", help="the service's address, for links"
    )
    log = actions.add_parser("deliveries", help="the delivery log, newest first")
    log.add_argument("--endpoint", metavar="ID", help="only this endpoint's")
    log.add_argument("--status", choices=("pending", "delivered", "failed"), help="only of this status")
    log.add_argument("--limit", type=count_flag, default=50, metavar="N")
    retry = actions.add_parser("retry", help="send a failed delivery again (the same webhook-id)")
    retry.add_argument("delivery_id")
    for parser in (hooks, add, remove, rotate, test, log, retry, actions.choices["list"]):
        add_store_flags(parser)

    deliver = commands.add_parser(
        "deliver",
        help="deliver notifications (webhooks, Slack, email) without a service",
        description="Turn the store's feed into deliveries and send them, retrying with backoff, until "
        "interrupted. Any number may run against one database; each delivery is attempted by one at a time.",
    )
    add_store_flags(deliver)
    add_policy_flag(deliver)
    deliver.add_argument(
        "--public-url", default="http://127.0.0.1:8000", help="the service's address (links)"
    )
    deliver.add_argument("--concurrency", type=count_flag, default=16, metavar="N", help="attempts at once")
    deliver.add_argument(
        "--poll", type=float, default=0.5, metavar="SECONDS", help="wait between empty rounds"
    )
    deliver.add_argument(
        "--lease",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long an attempt is this deliverer's before another may make it again (default: 60)",
    )


def run(args: argparse.Namespace, console: Console, failure: type[Exception]) -> int:
    """Run ``handrail webhooks ...`` or ``handrail deliver``; the exit code."""
    if args.command == "deliver":
        return _deliver(args, console, failure)
    if args.webhooks_command is None:
        raise failure("choose an action: webhooks add, list, remove, rotate, test, deliveries or retry")
    from handrail.notify.outbox import Outbox

    db = server_db(args)
    try:
        return _webhooks(args, Outbox(db), console, failure)
    finally:
        db.close()


def _webhooks(args: argparse.Namespace, outbox: Any, console: Console, failure: type[Exception]) -> int:
    from handrail.notify.config import check_url
    from handrail.notify.events import check_event_types
    from handrail.notify.outbox import NotFailedError
    from handrail.notify.webhooks import check_secret

    action = args.webhooks_command
    if action == "add":
        try:
            url = check_url(args.url, "the URL")
            events = check_event_types(args.events, "--events")
            secret = check_secret(args.secret) if args.secret is not None else None
        except ValueError as exc:
            raise failure(str(exc)) from None
        made = outbox.add_endpoint("webhook", url, events, start_after=_feed_end(args), secret=secret)
        console.print(f"Added webhook {made.id} for {escape(url)} ({', '.join(events)}).", soft_wrap=True)
        console.print("Its signing secret, shown only this once:")
        console.print(made.secrets[0][0], soft_wrap=True, highlight=False)
        return 0
    if action == "list":
        table = Table(id_column("id"), id_column("kind"), text_column("target"), text_column("events"))
        for e in outbox.endpoints():
            source = " (policy file)" if e.source == "file" else ""
            table.add_row(e.id, e.kind, escape(e.target or "-") + source, ", ".join(e.events))
        console.print(table)
        return 0
    if action == "deliveries":
        return _log(outbox.deliveries(args.endpoint, status=args.status, limit=args.limit), console)
    if action == "retry":
        try:
            again = outbox.retry(args.delivery_id)
        except KeyError:
            raise failure(f"no delivery {args.delivery_id!r} (see 'handrail webhooks deliveries')") from None
        except NotFailedError as exc:
            raise failure(str(exc)) from None
        console.print(f"Delivery {again.id} will be sent again by the next deliverer round.")
        return 0
    endpoint = outbox.endpoint(args.endpoint_id)
    if endpoint is None:
        raise failure(f"no endpoint {args.endpoint_id!r} (see 'handrail webhooks list')")
    if action == "test":
        return _test(args, outbox, endpoint, console, failure)
    if endpoint.source == "file":
        raise failure(f"endpoint {endpoint.id} comes from the policy file: change it there")
    if action == "remove":
        outbox.remove_endpoint(endpoint.id)
        console.print(f"Removed endpoint {endpoint.id}; its delivery log stays.")
        return 0
    if endpoint.kind != "webhook":
        raise failure(f"endpoint {endpoint.id} is a {endpoint.kind} endpoint; only webhooks have secrets")
    rotated = outbox.rotate_secret(endpoint.id, keep_old_for=args.keep_old_for)
    console.print(
        f"New signing secret for {endpoint.id}; the old one still signs for {args.keep_old_for:g} s:"
    )
    console.print(rotated.secrets[0][0], soft_wrap=True, highlight=False)
    return 0


def _feed_end(args: argparse.Namespace) -> str | None:

    store, _ = open_async_store(args)

    async def end() -> str | None:
        try:
            await store.setup()
            found: str | None = await store.afeed_end()
            return found
        finally:
            await store.aclose()

    return asyncio.run(end())


def _test(
    args: argparse.Namespace, outbox: Any, endpoint: Any, console: Console, failure: type[Exception]
) -> int:
    from handrail.notify.deliverer import Deliverer, default_channels
    from handrail.notify.events import example_event

    made = outbox.add_test(endpoint.id, example_event(args.public_url, endpoint.id))

    async def send() -> Any:
        deliverer = Deliverer(outbox, None, public_url=args.public_url, channels=default_channels(outbox.db))
        try:
            return await deliverer.attempt(made.id)
        finally:
            await deliverer.close()

    sent = asyncio.run(send())
    if sent is None or sent.status != "delivered":
        why = (sent.last_error if sent is not None else None) or "it was not attempted"
        raise failure(f"test delivery {made.id} to {endpoint.id} failed: {why}")
    console.print(f"Delivered {made.id} to {endpoint.id} (HTTP {sent.response_code}).")
    return 0


def _log(deliveries: list[Any], console: Console) -> int:
    # one delivery a line (ids are never cut), its error or thread on the next
    for d in deliveries:
        tries = f"{d.attempts} attempt{'s' if d.attempts != 1 else ''}"
        code = f", HTTP {d.response_code}" if d.response_code is not None else ""
        made = clock(d.created_at, seconds=True)
        console.print(
            f"{d.id}  {d.event} -> {d.endpoint_id}  {d.status} ({tries}{code})  {made}",
            soft_wrap=True,
            highlight=False,
        )
        if d.last_error and d.status != "delivered":
            console.print(f"    last error: {escape(d.last_error)}", soft_wrap=True, highlight=False)
        elif d.thread_id:
            console.print(f"    thread {escape(d.thread_id)}", soft_wrap=True, highlight=False)
    if not deliveries:
        console.print("No deliveries yet.")
    return 0


def _deliver(args: argparse.Namespace, console: Console, failure: type[Exception]) -> int:
    from handrail.notify.config import apply_settings, check_url, notify_settings
    from handrail.notify.deliverer import Deliverer, default_channels
    from handrail.notify.outbox import Outbox
    from handrail.review.policy_file import load_policy_file

    if not args.poll > 0:
        raise failure(f"--poll takes a number of seconds above 0, got {args.poll}")
    if not args.lease >= 1:
        raise failure(f"--lease takes a number of seconds of at least 1, got {args.lease}")
    settings = notify_settings(load_policy_file(args.policy)) if args.policy is not None else None
    try:
        public_url = check_url((settings.public_url if settings else None) or args.public_url, "--public-url")
    except ValueError as exc:
        raise failure(str(exc)) from None
    store, where = open_async_store(args)
    db = server_db(args)
    outbox = Outbox(db)

    async def main() -> int:
        await store.setup()
        if settings is not None:
            await asyncio.to_thread(apply_settings, outbox, settings, await store.afeed_end(), db)
        deliverer = Deliverer(
            Outbox(db.another(relaxed=True)),
            store,
            public_url=public_url,
            channels=default_channels(db),
            concurrency=args.concurrency,
            poll=args.poll,
            lease=args.lease,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        console.print(
            f"handrail deliver on {where} (pid {os.getpid()}): {len(outbox.endpoints())} endpoint(s), "
            f"{args.concurrency} attempts at a time. Ctrl-C stops it.",
            soft_wrap=True,
        )
        try:
            await deliverer.run(stop)
        finally:
            await store.aclose()
        return 0

    try:
        return asyncio.run(main())
    finally:
        db.close()
