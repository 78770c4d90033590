"""Grants at the terminal (SPEC rule 16): ``handrail approve ID --grant ...``, ``handrail grants``.

``handrail approve ID --grant thread|agent [--for DURATION] [--uses N] [--exact]`` sends
an approval that carries a grant (``{"type": "approve", "grant": {"scope", "args",
"ttl", "uses"}}``): later calls of the tool - on this thread, or on every thread of the
agent; with any arguments, or only those approved with ``--exact`` - run without a
pause, for a time (``--for 1h``), a number of calls (``--uses 5``) or the first of both
to run out. The command then says what the grant covers, until when and for how many
calls, and its id to revoke it by.

``handrail grants list [--thread T] [--agent A] [--all]`` prints the grants in force (with
``--all`` the spent, lapsed and revoked ones too), newest first; ``handrail grants revoke
ID`` ends one (its id or a unique prefix): it covers no call that starts after. Over a
service (``--url``/``--token``) a reviewer sees and revokes the grants of tools their roles
decide and the grants they gave (``GET /handrail/grants``); on a store (``--db`` or
``--postgres`` with ``--agent MODULE:OBJ``) every grant the store keeps. With a service,
``grants list --agent`` names an assistant; with a store, ``--agent`` is the store's agent.

Every value that came from a model, a tool or a person is printed through
:func:`handrail.cli._safe_text.safe_text`.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

from handrail._duration import DurationError, parse_duration
from handrail._duration import span as _span
from handrail._message_display import visible
from handrail.cli._errors import CommandError
from handrail.cli._review_display import clock, id_column, one_line, text_column
from handrail.cli._safe_text import safe_text
from handrail.review.grants import MAX_GRANT_TTL, MAX_GRANT_USES, grant_id

__all__ = ["COMMANDS", "add_commands", "add_grant_flags", "grant_of", "print_given", "run"]

COMMANDS = frozenset({"grants"})
_ID = re.compile(r"[0-9a-f]{1,64}")


def add_grant_flags(parser: argparse.ArgumentParser) -> None:
    """``--grant``, ``--for``, ``--uses`` and ``--exact``, for ``handrail approve``."""
    group = parser.add_argument_group(
        "grant (SPEC rule 16)",
        "Approve, and let later calls of the same tool run without review: on this thread or for "
        "the agent, for a time and/or a number of calls (at least one of --for and --uses).",
    )
    group.add_argument(
        "--grant",
        choices=("thread", "agent"),
        help="thread: later calls on this thread; agent: on every thread of this agent",
    )
    group.add_argument(
        "--for", dest="grant_for", metavar="DURATION", help="how long the grant lasts: 30m, 1h, 2d, 1h30m"
    )
    group.add_argument("--uses", dest="grant_uses", type=int, metavar="N", help="how many calls it covers")
    group.add_argument(
        "--exact",
        dest="grant_exact",
        action="store_true",
        help="cover only calls with exactly the arguments approved (default: any arguments)",
    )
    parser.set_defaults(usage=parser.error)


def _usage(args: argparse.Namespace, message: str) -> Exception:
    usage = getattr(args, "usage", None)
    if usage is not None:
        usage(message)  # a usage error: exit code 2 (the parser's error() raises)
    return CommandError(message)


def grant_of(args: argparse.Namespace) -> dict[str, Any] | None:
    """The grant ``handrail approve``'s flags ask for (None: a plain approval); a flag that
    makes no sense is a usage error."""
    scope = getattr(args, "grant", None)
    duration = getattr(args, "grant_for", None)
    uses = getattr(args, "grant_uses", None)
    exact = bool(getattr(args, "grant_exact", False))
    if scope is None:
        if duration is not None or uses is not None or exact:
            raise _usage(args, "--for, --uses and --exact go with --grant thread|agent")
        return None
    if duration is None and uses is None:
        raise _usage(
            args,
            "--grant needs --for DURATION (like 30m, 1h, 2d), --uses N, or both: a grant without "
            "either would never end",
        )
    grant: dict[str, Any] = {"scope": scope}
    if exact:
        grant["args"] = "exact"
    if duration is not None:
        try:
            seconds = parse_duration(duration)
        except DurationError as exc:
            raise _usage(args, f"--for: {exc}") from None
        if seconds > MAX_GRANT_TTL:
            raise _usage(args, f"--for is at most {int(MAX_GRANT_TTL // 86400)}d, got {duration!r}")
        grant["ttl"] = seconds
    if uses is not None:
        if not 1 <= uses <= MAX_GRANT_USES:
            raise _usage(args, f"--uses takes a whole number from 1 to {MAX_GRANT_USES:,}, got {uses}")
        grant["uses"] = uses
    return grant


# What a grant covers, in words ------------------------------------------------------------------
def _now() -> float:
    from handrail.runtime.answering import now

    return now()


def _where(grant: dict[str, Any]) -> str:
    if grant.get("scope") == "agent":
        return f"on every thread of agent {grant['agent']}" if grant.get("agent") else "on every thread"
    return f"on thread {grant.get('thread_id')}"


def _which_args(grant: dict[str, Any]) -> str:
    if grant.get("exact_args"):
        return f"with exactly the arguments {one_line(grant.get('args'))}"
    return "with any arguments"


def _bounds(grant: dict[str, Any], at: float) -> str:
    """``until 2026-05-02 09:06:12 UTC (1 h from now) or for 5 calls, whichever ends first``."""
    parts = []
    expires = grant.get("expires_at")
    if isinstance(expires, (int, float)):
        parts.append(f"until {clock(expires)} UTC ({_span(max(0.0, expires - at))} from now)")
    left = grant.get("uses_left")
    if isinstance(left, int):
        parts.append(f"for {left} more call{'' if left == 1 else 's'}")
    return " or ".join(parts) + (", whichever ends first" if len(parts) > 1 else "")


def print_given(reviews: Any, item: dict[str, Any], console: Console) -> None:
    """After an approval that carried a grant: what each grant given covers, until when and for
    how many calls; a grant the store did not record is a CommandError (the approval stands)."""
    from handrail.cli._review_client import ReviewError

    wanted = {
        grant_id(item["thread_id"], item["interrupt_id"], str(r["tool_call_id"])): str(r.get("name"))
        for r in item.get("action_requests") or []
        if isinstance(r, dict) and isinstance(r.get("tool_call_id"), str)
    }
    try:
        found = {g["grant_id"]: g for g in reviews.grants(thread_id=item["thread_id"], active=False)}
    except ReviewError as exc:
        raise CommandError(f"the approval was recorded, but its grants could not be read: {exc}") from None
    at = _now()
    missing = []
    for gid, tool in wanted.items():
        grant = found.get(gid)
        if grant is None:
            missing.append(tool)
            continue
        console.print(
            Text.assemble(
                ("Granted: ", "bold"),
                "later calls of ",
                safe_text(grant["tool"]),
                " ",
                safe_text(_where(grant)),
                ", ",
                safe_text(_which_args(grant)),
                ", run without review ",
                safe_text(_bounds(grant, at)),
                ". Revoke it: handrail grants revoke ",
                safe_text(gid[:12]),
            ),
            soft_wrap=True,
        )
    if missing:
        raise CommandError(
            f"the approval was recorded, but no grant was given for {', '.join(missing)}: the review was "
            "asked under a policy that has since changed (a grant is given only under the policy it was "
            "asked under); approve a later call with --grant again"
        )


# handrail grants list | revoke --------------------------------------------------------------------
def add_commands(commands: Any) -> None:
    """Add ``handrail grants`` to the CLI's subcommands."""
    from handrail.cli._review import where_flags

    grants = commands.add_parser(
        "grants",
        help="the grants that let calls run without review (list, revoke)",
        description="Grants (SPEC rule 16): an approval given with --grant lets later calls of its tool "
        "run without review. 'handrail grants list' prints those in force that you may see, newest "
        "first; 'handrail grants revoke ID' ends one: it covers no call that starts after.",
    )
    actions = grants.add_subparsers(dest="grants_command", metavar="ACTION", title="actions")
    listing = actions.add_parser(
        "list",
        help="the grants in force (--all: spent, lapsed and revoked too)",
        description="Print the grants you may see, newest first: over a service those of tools your "
        "roles decide and those you gave; on a store every grant it keeps. Columns: the id (its first "
        "12 characters, enough to revoke it), the tool, the scope (thread or agent), the thread it was "
        "given on, the arguments it covers (exact or any), the calls and time it has left, who gave it "
        "and, with --all, who revoked it.",
    )
    listing.add_argument("--thread", metavar="THREAD", help="only grants given on this thread")
    listing.add_argument(
        "--all", action="store_true", help="include spent, lapsed and revoked grants (default: in force)"
    )
    where_flags(listing, agent_help="with a service: only this assistant's grants; with a store: its agent")
    revoke = actions.add_parser(
        "revoke",
        help="end a grant: it covers no call that starts after",
        description="Revoke a grant, named by its id or a unique prefix of it (as 'handrail grants list' "
        "prints it). Calls already running under it finish; revoking twice changes nothing.",
    )
    revoke.add_argument("grant_id", metavar="ID", help="a grant id, or a unique prefix of one")
    where_flags(revoke)
    for parser in (grants, listing, revoke):
        parser.set_defaults(usage=parser.error)


def run(args: argparse.Namespace, console: Console) -> int:
    """Run ``handrail grants ...``; return the exit code."""
    from handrail.cli._review_client import ReviewError, ServiceReviews, open_reviews
    from handrail.server.loading import LoadError

    if args.grants_command not in ("list", "revoke"):
        raise _usage(args, "choose an action: handrail grants list | handrail grants revoke ID")
    if args.grants_command == "revoke" and not _ID.fullmatch(args.grant_id):
        raise _usage(
            args,
            f"{visible(args.grant_id)!r} is not a grant id (hexadecimal digits, as 'grants list' prints it)",
        )
    try:
        with open_reviews(args) as reviews:
            if args.grants_command == "revoke":
                return _revoke(reviews, args.grant_id, console)
            agent = args.agent if isinstance(reviews, ServiceReviews) else None
            found = reviews.grants(thread_id=args.thread, agent=agent, active=not args.all)
            _print_list(found, args.all, console)
            return 0
    except (ReviewError, LoadError) as exc:
        raise CommandError(str(exc)) from None


def _print_list(grants: list[dict[str, Any]], every: bool, console: Console) -> None:
    if not grants:
        console.print(
            "No grant that you may see."
            if every
            else "No grant in force that you may see (--all: ended ones too)."
        )
        return
    at = _now()
    # Ids are never cut (a thread shows as a 12-character prefix, as 'handrail show' takes one);
    # the other cells wrap, so that the table fits 80 columns.
    table = Table(
        id_column("id"),
        Column("tool", overflow="fold"),
        Column("scope", overflow="fold"),
        id_column("thread"),
        text_column("args"),
        Column("uses left", overflow="fold"),
        Column("expires in", overflow="fold"),
        Column("given by", overflow="fold"),
        *([Column("revoked", overflow="fold")] if every else []),
        box=None,
        pad_edge=False,
        padding=(0, 2, 0, 0),
    )
    for g in grants:
        table.add_row(
            safe_text(g["grant_id"][:12]),
            safe_text(g["tool"]),
            safe_text(g["scope"]),
            safe_text(str(g["thread_id"])[:12]),
            safe_text(f"exact {_short(one_line(g.get('args')))}" if g.get("exact_args") else "any"),
            safe_text(_uses_left(g)),
            safe_text(_expires_in(g, at)),
            safe_text(_who(g.get("given_by"))),
            *([safe_text(_revoked(g))] if every else []),
        )
    console.print(table)
    count = len(grants)
    said = "" if every else " in force"
    console.print(f"{count} grant{'' if count == 1 else 's'}{said}.")


def _short(text: str, size: int = 60) -> str:
    """``text``, or its head and how long it is (the review's arguments are whole in its audit)."""
    return text if len(text) <= size else f"{text[:size]}… ({len(text):,} characters)"


def _who(reviewer: Any) -> str:
    if isinstance(reviewer, dict) and reviewer.get("id") is not None:
        return str(reviewer["id"])
    return "?" if reviewer is None else str(reviewer)


def _uses_left(grant: dict[str, Any]) -> str:
    uses, left = grant.get("uses"), grant.get("uses_left")
    if not isinstance(uses, int) or not isinstance(left, int):
        return "no limit"
    return "0 (spent)" if left == 0 else f"{left} of {uses}"


def _expires_in(grant: dict[str, Any], at: float) -> str:
    expires = grant.get("expires_at")
    if not isinstance(expires, (int, float)):
        return "no limit"
    return "lapsed" if expires <= at else _span(expires - at)


def _revoked(grant: dict[str, Any]) -> str:
    when = grant.get("revoked_at")
    if when is None:
        return ""
    return f"{_who(grant.get('revoked_by'))} {clock(when, seconds=False)}"


def _revoke(reviews: Any, prefix: str, console: Console) -> int:
    matches = [g for g in reviews.grants(active=False) if str(g["grant_id"]).startswith(prefix)]
    exact = [g for g in matches if g["grant_id"] == prefix]
    matches = exact or matches
    if not matches:
        raise CommandError(
            f"no grant {prefix!r} that you may see (see 'handrail grants list --all'); a service shows "
            "only the grants of tools your roles decide and those you gave"
        )
    if len(matches) > 1:
        raise CommandError(f"{prefix!r} names {len(matches)} grants; give more of the id")
    grant = matches[0]
    what = Text.assemble(
        safe_text(grant["tool"]),
        " ",
        safe_text(_where(grant)),
        " (given by ",
        safe_text(_who(grant.get("given_by"))),
        ")",
    )
    if grant.get("revoked_at") is not None:
        console.print(
            Text.assemble(
                "Grant ",
                safe_text(grant["grant_id"][:12]),
                " of ",
                what,
                " was already revoked by ",
                safe_text(_who(grant.get("revoked_by"))),
                " at ",
                safe_text(clock(grant["revoked_at"])),
                " UTC; nothing changed.",
            ),
            soft_wrap=True,
        )
        return 0
    revoked = reviews.revoke_grant(grant["grant_id"])
    console.print(
        Text.assemble(
            ("Revoked ", "bold"),
            "grant ",
            safe_text(revoked["grant_id"][:12]),
            " of ",
            what,
            ": it covers no call that starts from now.",
        ),
        soft_wrap=True,
    )
    return 0
