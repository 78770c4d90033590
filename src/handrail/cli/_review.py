"""The review CLI: ``handrail inbox | show | approve | reject | respond | edit | threads | audit``.

Each command talks to a service (``--url``/``--token``, or ``HANDRAIL_URL`` and
``HANDRAIL_TOKEN``) or directly to a store (``--db``/``--postgres`` with ``--agent
module:obj``; then ``--reviewer``/``--role`` say who answers, recorded with channel
``cli``). An interrupt is named by its id or any unique prefix of it, as the inbox shows.
``handrail audit THREAD`` prints one thread's trail; ``handrail audit`` (``--since``,
``--until``, ``--limit``) the trail across threads, where a deleted thread shows as the
record its deletion left: who, when, and the head hash of the deleted log (SPEC rule 21).

A review whose policy counts approvals shows how far they have come, "1 of 2 (alice)",
and one with an expiry its time left, "expires in 43 min" (rules 14-15), in ``handrail
inbox`` and ``handrail show``; an answer to such a review is a vote, and the command says
"Approval recorded: 1 of 2 (alice)" while the review waits for the others.

Thread ids, tool names, arguments, messages and reviewer names come from models, tools and
people: they are printed through :func:`handrail.cli._safe_text.safe_text` (control and invisible
formatting characters shown as escapes such as ``\\x1b`` or ``\\u202e``, never written raw;
rich markup in them kept as text).
"""

from __future__ import annotations

import argparse
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from handrail._message_display import reviewer_content, visible
from handrail.cli._errors import CommandError
from handrail.cli._grants import add_grant_flags, grant_of
from handrail.cli._review_answer import EDIT_RULE, answer
from handrail.cli._review_display import (
    FOLD_AT,
    action_of,
    approvals_text,
    clock,
    counted,
    expiry_text,
    fold,
    id_column,
    one_line,
    text_column,
    time_column,
)
from handrail.cli._safe_text import safe_markup, safe_text

__all__ = ["COMMANDS", "add_commands", "run", "where_flags"]

COMMANDS = ("inbox", "show", "approve", "reject", "respond", "edit", "threads", "audit")


def where_flags(parser: argparse.ArgumentParser, agent_help: str | None = None) -> None:
    """The flags that say where reviews are: a service, or a store and its agent."""
    parser.add_argument("--url", help="the service (default: $HANDRAIL_URL)")
    parser.add_argument("--token", help="the credential (default: $HANDRAIL_TOKEN)")
    parser.add_argument("--db", type=Path, metavar="PATH", help="a SQLite store, instead of a service")
    parser.add_argument("--postgres", metavar="DSN", help="a PostgreSQL store, instead of a service")
    parser.add_argument("--schema", metavar="NAME", help="the PostgreSQL schema of the store")
    parser.add_argument(
        "--agent", metavar="MODULE:OBJ", help=agent_help or "the agent of the store (with --db/--postgres)"
    )
    parser.add_argument("--reviewer", help="who answers, with a store (default: your user name)")
    parser.add_argument("--role", action="append", default=[], help="a role of the reviewer, with a store")


def add_commands(commands: Any) -> None:
    """Add the review commands to the ``handrail`` command's subparsers."""
    inbox = commands.add_parser("inbox", help="the reviews waiting for you, oldest first (or --order newest)")
    inbox.add_argument("--tool", help="only reviews of this tool")
    inbox.add_argument("--limit", type=int, default=20, help="how many (default: 20)")
    inbox.add_argument("--cursor", help="the next page, as the last page printed it")
    inbox.add_argument(
        "--order", choices=("oldest", "newest"), default="oldest", help="oldest (default) or newest first"
    )
    inbox.add_argument(
        "--full", action="store_true", help="print each call's arguments whole (default: folded to a line)"
    )
    where_flags(inbox)
    show = commands.add_parser(
        "show",
        help="a thread: its last messages and pending reviews",
        description="Print a thread's last messages and its pending reviews. THREAD is its id or a "
        f"unique prefix of it. A value longer than {FOLD_AT:,} characters is folded: its head, then how "
        "long it is; --full prints every value whole.",
    )
    show.add_argument("thread_id", metavar="THREAD", help="a thread id, or a unique prefix of one")
    show.add_argument("--full", action="store_true", help="print long values whole, not folded")
    where_flags(show)
    for name, what in (
        ("approve", "approve"),
        ("reject", "reject"),
        ("respond", "answer in the tool's place"),
        ("edit", "change the arguments, then run"),
    ):
        answer = commands.add_parser(
            name,
            help=f"{what}: every call of an interrupt",
            description=f"{what[0].upper()}{what[1:]}: every call of the interrupt INTERRUPT_ID (its id or a "
            "unique prefix, as 'handrail inbox' shows it). A review already answered, or one your roles "
            "may not decide, is refused with who answered it and when, or which roles decide it."
            + (f" {EDIT_RULE}" if name == "edit" else ""),
        )
        answer.add_argument(
            "interrupt_id", metavar="INTERRUPT_ID", help="an interrupt id, or a unique prefix of one"
        )
        if name in ("reject", "respond"):
            answer.add_argument(
                "--message", "-m", required=name == "respond", help="the reason or the result"
            )
        if name == "approve":
            add_grant_flags(answer)  # rule 16: --grant thread|agent --for 1h --uses 5 --exact
        if name == "edit":
            how = answer.add_mutually_exclusive_group(required=True)
            how.add_argument(
                "--args",
                metavar="JSON",
                help="a JSON object: the keys given replace those proposed, the others keep their "
                "proposed values",
            )
            how.add_argument(
                "--editor", action="store_true", help="edit the whole object of arguments in $EDITOR"
            )
        where_flags(answer)
    threads = commands.add_parser("threads", help="threads, most recently updated first")
    threads.add_argument("--status", choices=["idle", "busy", "interrupted"])
    threads.add_argument("--limit", type=int, default=20)
    where_flags(threads)
    audit = commands.add_parser(
        "audit",
        help="the audit trail across threads or of one (who answered what, when, what ran, who "
        "deleted what), or 'audit verify'",
        description="'handrail audit' prints the audit trail across threads, oldest first (--since, "
        "--until, --limit); a deleted thread shows there as the record its deletion left: who, when "
        "and the head hash of its log. 'handrail audit THREAD' prints one thread's trail. 'handrail "
        "audit verify THREAD ... | --all' checks stored logs against their hash chains (with --db, or "
        "--postgres and --schema) and names the first record that does not match; exit code 1 when one "
        "does not, or when --all finds no thread. Each intact thread is printed with its head hash: "
        "keep it elsewhere and pass it back with --expect-head, since a chain alone cannot see records "
        "cut from its end. It also checks each thread's row and pending reviews, which the inbox shows "
        "without reading the log; --repair rebuilds the damaged ones from the log and says what changed.",
    )
    audit.add_argument(
        "thread_id",
        nargs="*",
        metavar="THREAD",
        help="a thread id (none: across threads), or: verify THREAD ...",
    )
    audit.add_argument("--csv", action="store_true", help="print CSV")
    audit.add_argument(
        "--since",
        type=_moment,
        metavar="WHEN",
        help="across threads: entries at or after WHEN (ISO 8601, UTC unless it names a zone, or epoch "
        "seconds)",
    )
    audit.add_argument(
        "--until", type=_moment, metavar="WHEN", help="across threads: entries at or before WHEN"
    )
    audit.add_argument(
        "--limit", type=int, help="across threads: at most this many entries, the oldest (default: 1000)"
    )
    audit.add_argument("--all", action="store_true", help="with verify: check every thread in the store")
    audit.add_argument(
        "--expect-head",
        metavar="HASH",
        help="with verify and one thread: the head hash kept from an earlier verify; fail unless the "
        "log still ends there (a log cut at its end, or rewritten, is found only this way)",
    )
    audit.add_argument(
        "--repair",
        action="store_true",
        help="with verify: rebuild each thread's row, pending reviews and their index rows from its log "
        "where they are damaged (the log must pass its own checks), and say what changed",
    )
    where_flags(audit)


def _moment(text: str) -> float:
    """A time on the command line: ISO 8601 (UTC unless it names a zone) or epoch seconds."""
    try:
        seconds = float(text)
    except ValueError:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"not a time: '{visible(text)}' (give ISO 8601, e.g. 2026-12-01T09:00:00+00:00, or epoch "
                "seconds)"
            ) from None
        return (moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)).timestamp()
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"not a time: '{visible(text)}' (epoch seconds are finite, from 0)")
    return seconds


def run(args: argparse.Namespace, console: Console) -> int:
    """Run one review command; return the exit code."""
    from handrail.cli._review_client import ReviewError, open_reviews
    from handrail.server.loading import LoadError

    if args.command == "approve":
        grant_of(args)  # a flag that makes no sense is a usage error before anything is opened
    try:
        with open_reviews(args) as reviews:
            return _COMMANDS[args.command](reviews, args, console)
    except (ReviewError, LoadError) as exc:
        raise CommandError(str(exc)) from None


def _age(created: str) -> str:
    seconds = int((datetime.now(UTC) - datetime.fromisoformat(created)).total_seconds())
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _inbox(reviews: Any, args: argparse.Namespace, console: Console) -> int:
    page = reviews.inbox(
        tool=args.tool, limit=args.limit, cursor=args.cursor, order=args.order, full=args.full
    )
    if not page["items"]:
        console.print("Nothing waits for your review.")
        return 0
    # rules 14-15: a column for approvals counted and expiry, when a review on the page has either
    policies = any(counted(item) or item.get("expires_at") for item in page["items"])
    columns = [id_column("interrupt"), id_column("thread"), text_column("calls"), id_column("waiting")]
    table = Table(*columns, *([text_column("approvals / expiry")] if policies else []))
    for item in page["items"]:
        hint = f"handrail show {item['thread_id']} --full prints it whole"
        calls = Text("\n").join(
            Text.assemble(
                safe_text(r.get("name")), " ", safe_text(_value(r.get("args"), args.full, 80, hint))
            )
            for r in item["action_requests"]
        )
        policy = [*approvals_text(item), *filter(None, [expiry_text(item, at=False)])]
        table.add_row(
            safe_text(str(item["interrupt_id"])[:12]),
            safe_text(item["thread_id"]),
            calls,
            _age(item["created_at"]),
            *([Text("\n").join(safe_text(line) for line in policy)] if policies else []),
        )
    console.print(table)
    if page.get("next_cursor"):
        again = " --order newest" if args.order == "newest" else ""
        console.print(
            f"More: handrail inbox{again} --cursor {safe_markup(page['next_cursor'])}", soft_wrap=True
        )
    return 0


def _value(value: Any, full: bool, size: int, hint: str) -> str:
    """``value`` as one line of JSON (text as it is), folded past ``size`` characters unless ``full``."""
    text = value if isinstance(value, str) else one_line(value)
    return text if full else fold(text, size, hint)


def _short(value: Any, size: int = 80) -> str:
    """``value`` as one line of JSON, its hidden characters as JSON escapes (``\\u202e``),
    cut to ``size`` characters."""
    text = one_line(value)
    return text if len(text) <= size else text[: size - 1] + "…"


def _show(reviews: Any, args: argparse.Namespace, console: Console) -> int:
    thread_id = _thread(reviews, args.thread_id)
    state = reviews.state(thread_id)
    full, hint = args.full, f"handrail show {thread_id} --full prints it whole"

    def long(value: Any) -> str:
        return _value(value, full, FOLD_AT, hint)

    lines = [
        Text.assemble(
            safe_text(f"{m.get('type', '?')}: ", style="bold"),
            safe_text(long(reviewer_content(m)[0]), newlines=True)
            if m.get("content")
            else safe_text(long(m.get("tool_calls"))),
        )
        for m in state["values"].get("messages", [])[-6:]
    ]
    title = Text.assemble("thread ", safe_text(thread_id))
    console.print(Panel(Group(*lines) if lines else Text("(no messages)"), title=title))
    interrupts = state.get("interrupts", [])
    items = reviews.pending(thread_id) if interrupts else {}  # their approvals and expiry
    for interrupt in interrupts:
        value = interrupt["value"]
        requests = value.get("action_requests") or [value] if isinstance(value, dict) else []
        body = Group(
            *(
                Text.assemble(
                    safe_text(r.get("name")),
                    ": ",
                    safe_text(long(r.get("args"))),
                    "\n",
                    safe_text(long(r.get("description", "")), newlines=True),
                )
                for r in requests
            ),
            *_policy_lines(items.get(interrupt["id"]), long),
        )
        console.print(Panel(body, title=Text.assemble("pending review ", safe_text(interrupt["id"]))))
    return 0


def _policy_lines(item: dict[str, Any] | None, long: Any) -> list[Text]:
    """A pending review's approvals so far and expiry (rules 14-15), as ``handrail show`` prints them."""
    if item is None:
        return []
    out = []
    for text, a in zip(approvals_text(item), counted(item), strict=True):
        line = Text.assemble(("approvals: ", "bold"), safe_text(text))
        action = action_of(a)
        if a.get("edited"):
            line.append_text(Text.assemble("; they are for the edit ", safe_text(long(action.get("args")))))
        out.append(line)
    expiry = expiry_text(item)
    if expiry is not None:
        said = f"{expiry}: it can no longer be answered" if expiry.startswith("expired") else expiry
        out.append(Text.assemble(("expiry: ", "bold"), safe_text(said)))
    return out


def _thread(reviews: Any, prefix: str) -> str:
    """The thread ``prefix`` names: its whole id, or the one thread whose id starts with it."""
    found = reviews.thread_ids(prefix) if prefix else []
    if prefix in found:
        return prefix
    if not found:
        raise CommandError(f"no thread {visible(prefix)!r} (see 'handrail threads')")
    if len(found) > 1:
        named = ", ".join(visible(t) for t in found[:5]) + (", ..." if len(found) > 5 else "")
        raise CommandError(f"{visible(prefix)!r} names {len(found)} threads ({named}); give more of the id")
    return str(found[0])


def _threads(reviews: Any, args: argparse.Namespace, console: Console) -> int:
    table = Table(id_column("thread"), "status", time_column("updated (UTC)"))
    for thread in reviews.threads(args.status, args.limit):
        table.add_row(
            safe_text(thread["thread_id"]),
            safe_text(thread["status"]),
            safe_text(clock(thread["updated_at"])),
        )
    console.print(table)
    return 0


def _audit(reviews: Any, args: argparse.Namespace, console: Console) -> int:
    if len(args.thread_id) > 1 or args.all or args.expect_head or args.repair:
        raise CommandError(
            "'handrail audit' takes one thread id, or none for the trail across threads; --all, "
            "--expect-head and --repair go with 'handrail audit verify THREAD ... | --all'"
        )
    across = not args.thread_id
    if across:
        limit = 1000 if args.limit is None else args.limit
        entries = reviews.audit_across(since=args.since, until=args.until, limit=limit)
    elif args.since is not None or args.until is not None or args.limit is not None:
        raise CommandError(
            "--since, --until and --limit pick entries across threads: leave out the thread id, or them"
        )
    else:
        entries = reviews.audit(args.thread_id[0])
    if args.csv:
        from handrail.server.wire import audit_csv

        text = audit_csv(entries)
        # The CSV keeps the data exactly; only a terminal gets its hidden characters escaped.
        console.file.write(visible(text, newlines=True) if console.file.isatty() else text)
        return 0
    if not across:
        console.print(_audit_table(entries))
        return 0
    # Across threads, each thread's id heads the entries it has (in a row, oldest first): on a
    # line of its own, never cut to fit a column.
    start = 0
    for end in range(1, len(entries) + 1):
        if end == len(entries) or entries[end]["thread_id"] != entries[start]["thread_id"]:
            console.print(Text.assemble(("thread ", "bold"), safe_text(entries[start]["thread_id"])))
            console.print(_audit_table(entries[start:end]))
            start = end
    if not entries:
        console.print("No audit entries.")
    return 0


def _audit_table(entries: list[dict[str, Any]]) -> Table:
    table = Table(id_column("#"), time_column("when (UTC)"), "event", "who", "channel", text_column("what"))
    for e in entries:
        who = e.get("reviewer") or e.get("by")  # who answered, or who made a change
        table.add_row(
            safe_text(e["seq"]),
            safe_text(clock(e["at"])),
            safe_text(e["event"]),
            safe_text((who.get("id") if isinstance(who, dict) else who) or ""),
            safe_text(e.get("channel") or ""),
            safe_text(_what(e)),
        )
    return table


def _what(entry: dict[str, Any]) -> str:
    """The last column of an audit line: what was asked, answered or run; what a deletion left."""
    if entry["event"] == "thread_deleted":
        value = entry.get("value") or {}
        head = value.get("head_hash")
        sealed = f"head hash {head}" if head else "no head hash (its last record had no seal)"
        return f"the log ended at record {value.get('head_seq')}; {sealed}"
    if entry["event"] == "approval" or (entry["event"] == "answered" and entry.get("kind")):
        # rule 14: a vote, "1 of 2", and the answer the count made ("quorum"); rule 15: "expired"
        return f"{entry.get('kind') or ''}: {_short(entry.get('value'), 60)}"
    if entry["event"] in ("answered", "review_requested"):
        return _short(entry.get("value"), 70)
    return _short(entry.get("args") or reviewer_content(entry.get("result") or {})[0], 70)


_COMMANDS = {
    "inbox": _inbox,
    "show": _show,
    "approve": answer,
    "reject": answer,
    "respond": answer,
    "edit": answer,
    "threads": _threads,
    "audit": _audit,
}
