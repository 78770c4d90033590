"""``handrail audit verify``: check threads' logs against their hash chains (SPEC rule 18).

The ``audit`` parser is the review CLI's (``review_cli.py``); ``audit verify`` comes here.

::

    handrail audit verify THREAD [THREAD ...] [--db PATH | --postgres DSN]
    handrail audit verify --all [--db PATH | --postgres DSN]

Each thread gets one line: how many records match, or the first record that does not
and how. The exit code is 0 when every thread checked is intact, 1 when one is not (or
the store cannot be read), 2 for a mistake on the command line.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.markup import escape

from handrail.checkpoint.base import BaseCheckpointSaver, ThreadFilter
from handrail.types import AuditVerification

__all__ = ["run", "verify_thread"]

_PAGE = 500


def run(args: argparse.Namespace, open_store: Any, usage_error: type[Exception]) -> int:
    """Run ``handrail audit ...``; ``open_store`` opens the saver ``--db``/``--postgres`` name."""
    threads = args.thread_id[1:]  # after the word "verify"
    if bool(threads) == bool(args.all):
        raise usage_error("name the threads to check, or pass --all (not both)")
    if args.url or args.token:
        raise usage_error("audit verify reads a store: give --db PATH or --postgres DSN, not a service")
    console = Console(highlight=False)
    failed = 0
    checked = 0
    with open_store(args, existing=True) as (saver, where):
        for thread_id in threads or _every_thread(saver):
            report = verify_thread(saver, thread_id)
            checked += 1
            failed += not report.ok
            console.print(_line(report), soft_wrap=True)
    if args.all and not checked:
        console.print(f"No threads in {escape(where)}.", soft_wrap=True)
    elif checked > 1:
        console.print(f"{checked - failed} of {checked} threads intact.")
    return 1 if failed else 0


def verify_thread(saver: BaseCheckpointSaver, thread_id: str) -> AuditVerification:
    """Check one thread of a store, without an agent (the chain needs none)."""
    from handrail.errors import SerializationError
    from handrail.runtime.maintenance import verification_of

    try:
        read = saver.read(thread_id)
    except SerializationError as exc:  # the store itself found a damaged row
        reason = str(exc).split(": ", 1)[1] if ": " in str(exc) else str(exc)
        return AuditVerification(thread_id, False, 0, 0, exc.seq if exc.seq is not None else 0, reason)
    return verification_of(thread_id, read)


def _every_thread(saver: BaseCheckpointSaver) -> Iterator[str]:
    offset = 0
    while True:
        page = saver.list_threads(ThreadFilter(limit=_PAGE, offset=offset))
        yield from (record.thread_id for record in page)
        if len(page) < _PAGE:
            return
        offset += _PAGE


def _line(report: AuditVerification) -> str:
    name = escape(report.thread_id)
    if report.ok:
        extra = f" ({report.unsealed} written before records were hashed)" if report.unsealed else ""
        return f"[green]intact[/]  {name}: {report.records} records match{extra}"
    if report.first_bad is None:
        return f"[red]missing[/] {name}: {escape(report.reason or '')}"
    return f"[red]BROKEN[/]  {name}: record {report.first_bad}: {escape(report.reason or '')}"
