"""``handrail audit verify``: check threads' logs against their hash chains (SPEC rule 18).

The ``audit`` parser is the review CLI's (``_review.py``); ``audit verify`` comes here.

::

    handrail audit verify THREAD [THREAD ...] [--db PATH | --postgres DSN [--schema NAME]]
    handrail audit verify --all [--db PATH | --postgres DSN [--schema NAME]]
    handrail audit verify THREAD --expect-head HASH [--db PATH | --postgres DSN [--schema NAME]]
    handrail audit verify THREAD ... | --all --repair [--db PATH | --postgres DSN [--schema NAME]]

Each thread gets one line: how many records match and the hash of its last record (its
head), or the first record that does not match and how. A last line names the store
that was read (file, or database and schema). The head hash vouches for the whole log; a
chain cannot see records cut from its own end, so an operator keeps the head somewhere
the database's writers cannot reach and passes it back with ``--expect-head``: the
thread then passes only if its log still ends there.

The thread's row and its pending reviews are read and checked with its log (their
seals, ``checkpoint/seals.py``; the row's head against the log's end). ``--repair``
first rebuilds, from the log, the rows of each thread that are damaged - the row, the
pending reviews, their index rows (``runtime/repair.py``) - printing one line per
change, then verifies the thread as above. A log that fails its own checks is never
used to rebuild anything: the thread is reported as it is.

The exit code is 0 when every thread checked is intact (after its repair, with
``--repair``), 1 when one is not, when the store cannot be read, or when ``--all``
finds no thread at all (nothing was vouched for), and 2 for a mistake on the command
line.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from typing import Any

from handrail.checkpoint.base import BaseCheckpointSaver, ThreadFilter
from handrail.cli._safe_text import safe_console, safe_markup
from handrail.types import AuditVerification

__all__ = ["run", "verify_thread"]

_PAGE = 500


def run(args: argparse.Namespace, open_store: Any, usage_error: type[Exception]) -> int:
    """Run ``handrail audit verify ...``; ``open_store`` opens the saver ``--db``/``--postgres``
    (with ``--schema``) name, refusing a PostgreSQL database or schema without a store."""
    from handrail.checkpoint.integrity import read_head
    from handrail.errors import InvalidInputError

    threads = args.thread_id[1:]  # after the word "verify"
    if bool(threads) == bool(args.all):
        raise usage_error("name the threads to check, or pass --all (not both)")
    if args.url or args.token:
        raise usage_error("audit verify reads a store: give --db PATH or --postgres DSN, not a service")
    if args.csv:
        raise usage_error("--csv prints an audit trail, not a verification: leave it out")
    if args.since is not None or args.until is not None or args.limit is not None:
        raise usage_error(
            "--since, --until and --limit pick the audit trail across threads, not a verification"
        )
    expected: str | None = None
    if args.expect_head is not None:
        if len(threads) != 1:
            raise usage_error("--expect-head HASH is the head of one thread: name exactly that thread")
        try:
            expected = read_head(args.expect_head)
        except InvalidInputError as exc:
            raise usage_error(f"--expect-head: {exc}") from None
    console = safe_console(highlight=False)
    failed = 0
    checked = 0
    repair = bool(getattr(args, "repair", False))
    with open_store(args, existing=True, tables_must_exist=True) as (saver, where):
        if args.postgres is None:
            where = f"the SQLite file {os.path.abspath(where)}"
        listing: list[str] = []
        for thread_id in threads or _every_thread(saver, repair, console, listing):
            if repair:
                _repair(saver, thread_id, console)
            report = verify_thread(saver, thread_id, expect_head=expected)
            damage = _rows_to_repair(saver, thread_id) if report.ok else []
            checked += 1
            failed += not report.ok or bool(damage)
            console.print(_line(report) if not damage else _damaged_rows(report, damage), soft_wrap=True)
        if listing:  # the list of threads could not be read past a damaged row
            console.print(f"[red]BROKEN[/]  {listing[0]}", soft_wrap=True)
            return 1
    if not checked:
        console.print(
            f"[red]No threads[/] in {safe_markup(where)}: nothing was verified. If threads were "
            "expected here, check --db, or --postgres and --schema, and whether they were deleted.",
            soft_wrap=True,
        )
        return 1
    threads_word = "thread" if checked == 1 else "threads"
    summary = f"{checked - failed} of {checked} {threads_word} intact in {safe_markup(where)}."
    console.print(summary, soft_wrap=True)
    return 1 if failed else 0


def verify_thread(
    saver: BaseCheckpointSaver, thread_id: str, *, expect_head: str | None = None
) -> AuditVerification:
    """Check one thread of a store, without an agent (the chain needs none); with
    ``expect_head`` (a head hash as ``read_head`` gives it), also that the log ends there."""
    from handrail.errors import SerializationError
    from handrail.runtime.maintenance import verification_of

    try:
        read = saver.read(thread_id)
    except SerializationError as exc:  # the store itself found a damaged row
        text, named = str(exc), f"cannot load thread {thread_id!r}, "
        if exc.seq is None and text.startswith(named):  # a row beside the log: name it
            reason = text[len(named) :]
        else:
            reason = text.split(": ", 1)[1] if ": " in text else text
        first_bad = exc.seq if exc.seq is not None else 0
        return AuditVerification(thread_id, False, 0, 0, first_bad, reason, expected_head=expect_head)
    return verification_of(thread_id, read, expect_head=expect_head)


def _rows_to_repair(saver: BaseCheckpointSaver, thread_id: str) -> list[str]:
    """What a repair would change in the rows derived from an intact log (a dry run); none
    for a store that cannot tell."""
    from handrail.errors import SerializationError
    from handrail.runtime.repair import repair_thread

    try:
        return repair_thread(saver, thread_id, dry_run=True)
    except (SerializationError, NotImplementedError):
        return []


def _damaged_rows(report: AuditVerification, damage: list[str]) -> str:
    name = safe_markup(report.thread_id)
    found = "; ".join(safe_markup(line) for line in damage)
    return (
        f"[red]DAMAGED[/] {name}: its log is intact ({report.records} records match), but rows derived "
        f"from it are not ({found}); --repair rebuilds them from the log"
    )


def _repair(saver: BaseCheckpointSaver, thread_id: str, console: Any) -> None:
    """Rebuild the thread's damaged derived rows from its log, printing what changed."""
    from handrail.errors import SerializationError
    from handrail.runtime.repair import repair_thread

    name = safe_markup(thread_id)
    try:
        changes = repair_thread(saver, thread_id)
    except SerializationError as exc:  # the log fails its checks, or must not be rebuilt from
        text = str(exc)
        for prefix in (f"cannot load thread {thread_id!r}, ", f"cannot repair thread {thread_id!r}: "):
            text = text.removeprefix(prefix)
        console.print(f"[red]not repaired[/] {name}: {safe_markup(text)}", soft_wrap=True)
        return
    except NotImplementedError as exc:
        console.print(f"[red]not repaired[/] {name}: {safe_markup(str(exc))}", soft_wrap=True)
        return
    for change in changes:
        console.print(f"[yellow]repaired[/] {name}: {safe_markup(change)}", soft_wrap=True)


def _every_thread(saver: BaseCheckpointSaver, repair: bool, console: Any, broken: list[str]) -> Iterator[str]:
    """Every thread's id, page by page. A page with a damaged row stops the listing (its
    reason is left in ``broken``) unless ``repair``: then that thread is repaired (once)
    and the listing starts again."""
    from handrail.errors import SerializationError

    offset = 0
    repaired: set[str] = set()
    seen: set[str] = set()
    while True:
        try:
            page = saver.list_threads(ThreadFilter(limit=_PAGE, offset=offset))
        except SerializationError as exc:
            thread_id = exc.thread_id
            if not repair or thread_id is None or thread_id in repaired:
                broken.append(f"{safe_markup(str(exc))} (threads after it in the list were not read)")
                return
            repaired.add(thread_id)
            _repair(saver, thread_id, console)
            offset = 0
            continue
        for record in page:
            if record.thread_id not in seen:  # a listing started again gives the first ones again
                seen.add(record.thread_id)
                yield record.thread_id
        if len(page) < _PAGE:
            return
        offset += _PAGE


def _line(report: AuditVerification) -> str:
    name = safe_markup(report.thread_id)
    if report.ok:
        extra = f" ({report.unsealed} written before records were hashed)" if report.unsealed else ""
        head = f"; head: record {report.head_seq}, hash {report.head_hash}" if report.head_hash else ""
        expected = ", as expected" if report.expected_head is not None else ""
        return f"[green]intact[/]  {name}: {report.records} records match{extra}{head}{expected}"
    reason = safe_markup(report.reason or "")
    if report.first_bad is None:
        return f"[red]missing[/] {name}: {reason}"
    if report.first_bad == 0:  # no record of the log: a row beside it
        return f"[red]BROKEN[/]  {name}: {reason}"
    return f"[red]BROKEN[/]  {name}: record {report.first_bad}: {reason}"
