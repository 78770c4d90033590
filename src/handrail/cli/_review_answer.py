"""The review CLI's answers: ``handrail approve | reject | respond | edit INTERRUPT_ID``.

An interrupt is named by its id or a unique prefix of it, as the inbox shows it. A review
that is not in the reviewer's inbox is looked for further (every review of the store, or
the threads a service lets the token read) and the answer is sent anyway, so the reviewer
hears why it cannot be given: who answered it already, how and when (SPEC rule 8), or
which roles may decide it (rule 12), or when it expired (rule 15). Nothing of a refused
answer is saved.

``approve --grant ...`` sends an approval that carries a grant (rule 16) and then says
what the grant covers (``handrail.cli._grants``).

An answer to a review whose policy counts approvals (rule 14) is a vote: while the
review waits for more, the command prints "Approval recorded: 1 of 2 (alice)" - who
approved so far, and the edit the approvals are for - not that it was decided.

``edit --args`` merges: the keys given replace those proposed, the others keep their
proposed values; ``edit --editor`` edits the whole object. Either way the library
validates the result as any edit (rule 5).

Private to :mod:`handrail.cli._review`.
"""

from __future__ import annotations

import argparse
from typing import Any

import orjson
from rich.console import Console
from rich.text import Text

from handrail._message_display import visible
from handrail.cli._errors import CommandError
from handrail.cli._review_display import action_of, approvals_text, clock, counted
from handrail.cli._safe_text import safe_markup, safe_text
from handrail.cli._terminal_edit import EditorUnavailableError, edit_in_editor

__all__ = ["EDIT_RULE", "answer"]

EDIT_RULE = (
    "--args takes a JSON object: the keys you give replace those proposed, the others keep their "
    "proposed values (to drop a key, use --editor, which edits the whole object). handrail then "
    "checks the edited arguments as it checks any edit, against the tool's own schema."
)


def answer(reviews: Any, args: argparse.Namespace, console: Console) -> int:
    """Answer one interrupt as ``args`` say (approve, reject, respond or edit); print the outcome."""
    from handrail.cli._review_client import ReviewError

    item = _find(reviews, args.interrupt_id)
    decision = _decision(args, item)
    batched = isinstance(item["value"], dict) and "action_requests" in item["value"]
    calls = max(len(item["action_requests"]), 1)
    sent = {"decisions": [decision] * calls} if batched else decision
    try:
        result = reviews.answer(item["thread_id"], item["interrupt_id"], sent)
    except ReviewError as exc:
        raise CommandError(_refusal(reviews, item, exc)) from None
    who = (result.get("reviewer") or {}).get("id", "?")
    if result.get("waiting"):  # a vote (rule 14): the review waits for the other approvals
        _print_vote(console, result, item)
        return 0
    approving = args.command in ("approve", "edit")
    count = _count_reached(reviews, item) if approving and counted(item) else None
    console.print(
        f"Recorded: {args.command} by {safe_markup(who)} on thread {safe_markup(item['thread_id'])}"
        + (f": {safe_markup(count)}." if count else "."),
        soft_wrap=True,
    )
    values = result.get("values") or {}
    if values.get("__interrupt__"):
        console.print(
            f"The run paused again: {len(values['__interrupt__'])} new review(s) (see 'handrail inbox')."
        )
    elif values.get("messages"):
        ended = values["messages"][-1].get("content", "")
        console.print(Text.assemble("The run ended: ", safe_text(ended, newlines=True)))
    if "grant" in decision:  # what the grant covers, until when, for how many calls (rule 16)
        from handrail.cli._grants import print_given

        print_given(reviews, item, console)
    return 0


def _print_vote(console: Console, result: dict[str, Any], item: dict[str, Any]) -> None:
    """What a vote recorded: ``Approval recorded: 1 of 2 (alice)``, what it waits for, any edit."""
    counts = counted(result)
    said = "; ".join(approvals_text(result)) or "counted"
    console.print(
        Text.assemble(
            "Approval recorded: ",
            safe_text(said),
            " on thread ",
            safe_text(item["thread_id"]),
            ". Nothing ran yet: ",
            safe_text(_still(counts)),
        ),
        soft_wrap=True,
    )
    for a in counts:
        action = action_of(a)
        if a.get("edited") and a.get("decided") is None:
            console.print(
                Text.assemble(
                    "The approvals of ",
                    safe_text(action.get("name")),
                    " are for the edit ",
                    safe_text(_one_line(action.get("args"))),
                ),
                soft_wrap=True,
            )


def _count_reached(reviews: Any, item: dict[str, Any]) -> str | None:
    """How far the approvals of a review that counts them came, from its thread's audit:
    ``2 of 2 approvals (alice, bob)`` (None when the audit cannot be read or has none)."""
    from handrail.cli._review_client import ReviewError

    try:
        entries = reviews.audit(item["thread_id"])
    except ReviewError:
        return None
    votes = [
        e for e in entries if e.get("event") == "approval" and e.get("interrupt_id") == item["interrupt_id"]
    ]
    if not votes or not votes[-1].get("kind"):
        return None
    who = [r.get("id") for r in (v.get("reviewer") for v in votes) if isinstance(r, dict) and r.get("id")]
    named = f" ({', '.join(dict.fromkeys(str(w) for w in who))})" if who else ""
    return f"{visible(str(votes[-1]['kind']))} approvals{visible(named)}"


def _still(counts: list[dict[str, Any]]) -> str:
    """``it runs once 1 more reviewer approves it.``"""
    missing = max(
        (a["needed"] - len(a.get("approved_by") or []) for a in counts if a.get("decided") is None), default=0
    )
    if missing <= 0:
        return "the review waits for its other calls."
    return f"it runs once {missing} more {'reviewer approves' if missing == 1 else 'reviewers approve'} it."


def _one_line(value: Any) -> str:
    from handrail.cli._review_display import one_line

    return one_line(value)


def _find(reviews: Any, prefix: str) -> dict[str, Any]:
    matches: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = reviews.inbox(tool=None, limit=200, cursor=cursor, full=True)  # edits need values whole
        matches += [item for item in page["items"] if item["interrupt_id"].startswith(prefix)]
        cursor = page.get("next_cursor")
        if not cursor:
            break
    if not matches:
        # Not in the inbox: answered already, or not this reviewer's to decide. Found, the
        # answer goes anyway, and the refusal says which (nothing of it is saved).
        matches = reviews.locate(prefix) if prefix else []
        if not matches:
            raise CommandError(
                f"no review {visible(prefix)!r} waits for you, and none was found that was answered "
                "or that others decide; a service shows no review outside your roles or in a thread "
                "you may not read (see 'handrail inbox')"
            )
    if len(matches) > 1:
        raise CommandError(f"{visible(prefix)!r} names {len(matches)} reviews; give more of the id")
    return matches[0]


def _refusal(reviews: Any, item: dict[str, Any], exc: Any) -> str:
    """What to say when the answer to ``item`` was refused (``exc``, a ``ReviewError``)."""
    problem = exc.problem
    review = f"review {visible(item['interrupt_id'][:12])} on thread {visible(item['thread_id'])!r}"
    if exc.status == 409 and problem.get("expired_at"):  # rule 15
        return (
            f"{review} expired unanswered at {clock(problem['expired_at'])} UTC and can no longer be "
            "answered; nothing was sent"
        )
    if exc.status == 409 and problem.get("answered_at"):
        who = problem.get("answered_by")
        by = f"by {visible(who)}" if who else "by a caller who gave no reviewer"
        through = f" through {visible(problem['channel'])}" if problem.get("channel") else ""
        how = _how_answered(reviews, item)
        return (
            f"{review} was already {how or 'answered'} {by} at {clock(problem['answered_at'])} UTC"
            f"{through}; nothing was sent"
        )
    if exc.status == 422:  # refused as the library refuses it (rule 5; a grant it may not give, rule 16)
        return visible(_detail(exc))
    if exc.status == 403 and "roles" in problem:
        # The library's words name the reviewer, their roles and the roles that decide the tool.
        reason = _detail(exc).removeprefix(f"interrupt {item['interrupt_id']}: ")
        return f"you may not decide {review}: {visible(reason)}"
    return visible(str(exc))


def _detail(exc: Any) -> str:
    detail = exc.problem.get("detail")
    return str(detail) if detail else str(exc)


_PAST = {"approve": "approved", "reject": "rejected", "respond": "answered", "edit": "edited"}


def _how_answered(reviews: Any, item: dict[str, Any]) -> str | None:
    """How the review was answered (``approved``, ``rejected`` ...), if its thread's audit says."""
    from handrail.cli._review_client import ReviewError

    try:
        entries = reviews.audit(item["thread_id"])
    except ReviewError:  # a thread this reviewer may not read: who and when must do
        return None
    for entry in entries:
        if entry.get("event") == "answered" and entry.get("interrupt_id") == item["interrupt_id"]:
            value = entry.get("value")
            decisions = value.get("decisions") if isinstance(value, dict) else None
            kinds = [d.get("type") for d in decisions or [value] if isinstance(d, dict)]
            words = sorted({_PAST.get(str(k), str(k)) for k in kinds if k})
            return " and ".join(visible(w) for w in words) or None
    return None


def _decision(args: argparse.Namespace, item: dict[str, Any]) -> dict[str, Any]:
    if args.command == "approve":
        from handrail.cli._grants import grant_of

        grant = grant_of(args)  # rule 16: an approval may carry a grant
        return {"type": "approve", "grant": grant} if grant is not None else {"type": "approve"}
    if args.command in ("reject", "respond"):
        decision = {"type": args.command}
        if args.message:
            decision["message"] = args.message
        return decision
    requests = item["action_requests"]
    if len(requests) > 1:
        raise CommandError("edit changes one call; this review asks about several (answer them from Python)")
    request = requests[0] if requests else {"name": "", "args": {}}
    args_value = _edited_args(args, request)
    return {"type": "edit", "edited_action": {"name": request["name"], "args": args_value}}


def _edited_args(args: argparse.Namespace, request: dict[str, Any]) -> Any:
    given = request.get("args")
    proposed: dict[str, Any] = given if isinstance(given, dict) else {}
    if not args.editor:
        text = args.args
    else:
        # An editor that fails, or that saves nothing new, sends nothing: quitting it is
        # never an answer (issue 25), least of all an approval in disguise.
        shown = orjson.dumps(proposed, option=orjson.OPT_INDENT_2).decode() + "\n"
        try:
            text = edit_in_editor(shown)
        except EditorUnavailableError as exc:
            raise CommandError(f"{exc}; nothing was sent") from None
        if not text.strip():
            raise CommandError("the editor saved an empty file; nothing was sent")
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise CommandError(f"the arguments are not JSON ({exc}); nothing was sent") from None
    if not isinstance(value, dict):
        raise CommandError("the arguments must be a JSON object; nothing was sent")
    if not args.editor:  # the keys given replace those proposed; the others stay (EDIT_RULE)
        value = {**proposed, **value}
    if value == proposed:
        raise CommandError(
            "the arguments are unchanged; nothing was sent (to run the call as proposed: handrail approve)"
        )
    return value
