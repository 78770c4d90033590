"""How a review looks in Slack: the Block Kit message of a review, and its stamp once answered.

Everything a message shows comes from an event's payload (``handrail.notify.events``),
and much of that from a model or a tool: untrusted text. Each such text is first made
visible (control and invisible characters written as escapes, as the terminal and the
web inbox show them) and then escaped for Slack's mrkdwn (``&``, ``<``, ``>``), so it
cannot mention a person or a channel, link anywhere or fake formatting that closes the
code block it is shown in (a run of backticks is broken up). Long values are folded: a
string argument shows its head and how long it is, and a call's arguments are cut to
fit one Slack section; the review page shows them whole.

A review message is made of blocks with fixed ids: the title, one section per call (at
most :data:`MAX_CALLS`), the context (who may decide, until when), the stamp
(:data:`STAMP_BLOCK`, once there is an answer or a vote; its words are made in
``slack_stamps``), the decision buttons (:data:`DECIDE_BLOCK`: approve, reject, respond)
and the links (:data:`LINKS_BLOCK`: the review page, and edit, which needs the page's
form). A button's ``value`` names the thread and the review (:func:`button_value`); its
``action_id`` names the decision.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from handrail._message_display import visible, visible_json

__all__ = [
    "ACTION_PREFIX",
    "DECIDE_BLOCK",
    "LINKS_BLOCK",
    "MAX_CALLS",
    "STAMP_BLOCK",
    "ButtonTarget",
    "ReviewView",
    "answer_for",
    "button",
    "button_value",
    "escape",
    "link",
    "read_button_value",
    "review_blocks",
    "review_of",
    "review_text",
    "section",
    "stamped",
    "when",
]

ACTION_PREFIX = "handrail."
"""Every ``action_id`` of handrail's buttons starts so: ``handrail.approve``, ``handrail.open`` ..."""
DECIDE_BLOCK = "handrail.decide"
STAMP_BLOCK = "handrail.stamp"
EARLIER_BLOCK = "handrail.earlier"
LINKS_BLOCK = "handrail.links"
BUTTON_DECISIONS = ("approve", "reject", "respond")
"""The decisions a button gives; ``edit`` is a link to the review page (an edit needs its form)."""
MAX_CALLS = 10
"""The most calls of one review a message shows; the rest are named by count."""

_SECTION = 3000  # Slack's limit on a section's text
_ARGS = 2400  # the characters of one call's arguments shown, escaped
_VALUE = 300  # a string argument longer than this shows its head
_ITEMS = 50  # a list or an object of the arguments shows its first items
_LINE = 200  # a one-line text (a description, a name) is cut here
_URL = 3000  # Slack's limit on a button's url
_ID = 128  # the longest thread or interrupt id taken (the service's MAX_ID)
_FENCE = re.compile(r"`(?=`)")
_LABELS = {"approve": "Approve", "reject": "Reject…", "respond": "Respond…"}
_OUTCOME_LABELS = {"approve": "Run it again", "reject": "Reject…", "respond": "Give its result…"}


def escape(text: object, *, limit: int = _LINE, newlines: bool = False) -> str:
    """``text`` made visible, cut to ``limit`` characters (with ``…``) and escaped for mrkdwn."""
    shown = visible(str(text)[: limit + 1] if text is not None else "", newlines=newlines)
    if len(shown) > limit:
        shown = shown[: max(limit - 1, 0)] + "…"
    return _FENCE.sub("`\u200b", _mrkdwn(shown))  # a run of backticks opens no code block


def _mrkdwn(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _escaped_within(text: str, budget: int) -> tuple[str, bool]:
    """``text`` escaped for mrkdwn, as much of it as fits ``budget`` characters; whether it was cut."""
    out: list[str] = []
    used = 0
    for char in text:
        piece = _mrkdwn(char)
        if used + len(piece) > budget:
            return "".join(out), True
        out.append(piece)
        used += len(piece)
    return "".join(out), False


def when(seconds: float, *, date: bool = False) -> str:
    """An epoch second as ``10:42 UTC`` (``2026-12-04 10:42 UTC`` with ``date``)."""
    stamp = datetime.fromtimestamp(seconds, UTC)
    return stamp.strftime("%Y-%m-%d %H:%M UTC" if date else "%H:%M UTC")


# What a review is, read from a payload -----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Call:
    """One call under review: its tool, arguments, description and the decisions it allows."""

    name: str
    args: Any
    description: str
    allowed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReviewView:
    """What a message shows of one review: ``kind`` is ``batched`` (answered by one decision
    per call), ``single`` (a per-call review), ``outcome_unknown`` or ``custom`` (a question
    of the application's own: answered on the review page only)."""

    thread_id: str
    interrupt_id: str
    agent: str | None
    kind: str
    calls: tuple[Call, ...]
    reviewers: Mapping[str, Sequence[str]]
    expires_at: float | None
    review_url: str | None

    @property
    def decisions(self) -> tuple[str, ...]:
        """The decisions a button may give: those every call allows (none for a custom question)."""
        if not self.calls or self.kind == "custom":
            return ()
        return tuple(d for d in BUTTON_DECISIONS if all(d in call.allowed for call in self.calls))

    @property
    def editable(self) -> bool:
        """Whether some call may be edited (on the review page)."""
        return any("edit" in call.allowed for call in self.calls)


def review_of(data: Mapping[str, Any]) -> ReviewView:
    """The review a payload's ``data`` is about (anything malformed is left out, never raised)."""
    requests = data.get("action_requests")
    allowed = data.get("allowed_decisions")
    by_tool = allowed if isinstance(allowed, Mapping) else {}
    calls: list[Call] = []
    kind = "batched"
    decisions: tuple[str, ...]
    for request in requests if isinstance(requests, list) else ():
        if not isinstance(request, Mapping):
            continue
        name = request.get("name")
        if not isinstance(name, str):
            kind = "custom"
            continue
        shape = request.get("type")
        if shape == "outcome_unknown":
            kind, decisions = "outcome_unknown", ("approve", "respond", "reject")
        elif shape == "tool_approval":
            kind, decisions = "single", _strings(request.get("allowed_decisions"))
        else:
            decisions = _strings(by_tool.get(name))
        calls.append(Call(name, request.get("args"), str(request.get("description") or ""), decisions))
    reviewers = data.get("reviewers")
    links = data.get("links")
    review_url = links.get("review") if isinstance(links, Mapping) else None
    expires = data.get("expires_at")
    agent = data.get("agent")
    return ReviewView(
        thread_id=str(data.get("thread_id") or ""),
        interrupt_id=str(data.get("interrupt_id") or ""),
        agent=agent if isinstance(agent, str) else None,
        kind=kind if calls else "custom",
        calls=tuple(calls),
        reviewers={
            str(k): _strings(v) for k, v in (reviewers.items() if isinstance(reviewers, Mapping) else ())
        },
        expires_at=float(expires)
        if isinstance(expires, (int, float)) and not isinstance(expires, bool)
        else None,
        review_url=link(review_url),
    )


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value if isinstance(v, str)) if isinstance(value, (list, tuple)) else ()


def link(value: Any) -> str | None:
    """A link a button may carry: an http(s) URL of at most 3000 characters without spaces."""
    if not isinstance(value, str) or len(value) > _URL or not value.startswith(("https://", "http://")):
        return None
    return None if any(c.isspace() or ord(c) < 32 for c in value) else value


# Buttons ------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ButtonTarget:
    """What a button's value names: the thread, the review, how many calls it has and
    whether it is answered by a list of decisions (``batched``) or by one."""

    thread_id: str
    interrupt_id: str
    calls: int
    batched: bool


def button_value(view: ReviewView) -> str:
    """The compact JSON a decision button carries (at most a few hundred characters)."""
    value = {"t": view.thread_id, "i": view.interrupt_id, "n": len(view.calls), "b": view.kind == "batched"}
    return orjson.dumps(value).decode()


def read_button_value(text: Any) -> ButtonTarget | None:
    """The target a button's value names, or None when it is not one of handrail's."""
    if not isinstance(text, str) or len(text) > 2000:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    thread, interrupt, calls, batched = value.get("t"), value.get("i"), value.get("n"), value.get("b")
    ids = [i for i in (thread, interrupt) if isinstance(i, str) and 0 < len(i) <= _ID and i.isprintable()]
    if len(ids) != 2 or not isinstance(batched, bool) or type(calls) is not int or not 1 <= calls <= 1000:
        return None
    return ButtonTarget(ids[0], ids[1], calls, batched)


def answer_for(target: ButtonTarget, decision: str, message: str | None = None) -> Any:
    """The answer a button (and its modal's ``message``) gives: one decision for each call."""
    one: dict[str, Any] = {"type": decision}
    if message is not None and (message or decision == "respond"):
        one["message"] = message
    return {"decisions": [dict(one) for _ in range(target.calls)]} if target.batched else one


# The review message ------------------------------------------------------------------------------
def review_blocks(
    view: ReviewView, *, stamp: str | None = None, buttons: bool = True
) -> list[dict[str, Any]]:
    """The blocks of a review's message: the calls, who may decide, the stamp if any, and
    (with ``buttons``) one button per decision every call allows, besides the links."""
    blocks: list[dict[str, Any]] = [section(_title(view))]
    for number, call in enumerate(view.calls[:MAX_CALLS], start=1):
        blocks.append(section(_call_text(call, number if len(view.calls) > 1 else None)))
    hidden = len(view.calls) - MAX_CALLS
    if hidden > 0:
        blocks.append(_context(f"and {hidden} more call(s): the review page shows every one"))
    if view.kind == "custom":
        blocks.append(section("The agent asks a question of its own: answer it on the review page."))
    context = _who_may_decide(view)
    if context:
        blocks.append(_context(context))
    if stamp:
        blocks.append(_stamp_block(stamp))
    if buttons and view.decisions:
        labels = _OUTCOME_LABELS if view.kind == "outcome_unknown" else _LABELS
        value = button_value(view)
        decide = [
            button(labels[d], f"{ACTION_PREFIX}{d}", value=value, style=_STYLES.get(d))
            for d in view.decisions
        ]
        blocks.append({"type": "actions", "block_id": DECIDE_BLOCK, "elements": decide})
    links = []
    if view.review_url is not None:
        if buttons and view.editable:
            links.append(button("Edit on the review page", f"{ACTION_PREFIX}edit", url=view.review_url))
        links.append(button("Open in handrail", f"{ACTION_PREFIX}open", url=view.review_url))
    if links:
        blocks.append({"type": "actions", "block_id": LINKS_BLOCK, "elements": links})
    return blocks


_STYLES = {"approve": "primary", "reject": "danger"}


def review_text(view: ReviewView) -> str:
    """The message's plain text (what a notification shows)."""
    tools = ", ".join(dict.fromkeys(call.name for call in view.calls)) or "a question"
    return escape(f"Review requested: {tools}" + (f" (agent {view.agent})" if view.agent else ""))


def _title(view: ReviewView) -> str:
    agent = f"Agent *{escape(view.agent)}*" if view.agent else "An agent"
    if view.kind == "outcome_unknown":
        call = view.calls[0].name if view.calls else "a tool"
        return (
            f":warning: {agent} started *{escape(call)}* and never heard back: it may or may not have "
            "run. Run it again, give its result, or reject it."
        )
    if view.kind == "custom":
        return f":raised_hand: {agent} waits for an answer."
    names = list(dict.fromkeys(call.name for call in view.calls))
    tools = ", ".join(f"*{escape(name, limit=100)}*" for name in names[:5]) + (" …" if len(names) > 5 else "")
    return f":raised_hand: {agent} asks to run {tools}."


def _call_text(call: Call, number: int | None) -> str:
    head = f"*{number}. {escape(call.name, limit=100)}*" if number else f"*{escape(call.name, limit=100)}*"
    first_line = call.description.strip().splitlines()[0] if call.description.strip() else ""
    if first_line:
        head += f" — _{escape(first_line, limit=150)}_"
    return f"{head}\n{_args_block(call.args, min(_ARGS, _SECTION - len(head) - 100))}"


def _args_block(args: Any, budget: int = _ARGS) -> str:
    """A call's arguments as a code block of at most ``budget`` characters and a note: long
    strings folded, the whole cut to fit one section."""
    folded = _fold(args)
    try:
        text = orjson.dumps(
            folded, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str
        ).decode()
    except (TypeError, orjson.JSONEncodeError):
        text = repr(folded)
    escaped, cut = _escaped_within(visible_json(text[: budget + 1]), budget)
    if cut:
        escaped += "\n… [cut to fit Slack: the review page shows every argument]"
    # a run of backticks would close the code block: a zero-width space between them keeps it shut
    return "```\n" + _FENCE.sub("`\u200b", escaped) + "\n```"


def _fold(value: Any) -> Any:
    """``value`` with long strings cut to their head, and long lists and objects to their first items."""
    if isinstance(value, str):
        if len(value) <= _VALUE:
            return value
        return f"{value[:_VALUE]}… [folded: {len(value):,} characters in all]"
    if isinstance(value, Mapping):
        folded = {str(key): _fold(item) for key, item in list(value.items())[:_ITEMS]}
        if len(value) > _ITEMS:
            folded["…"] = f"[folded: {len(value):,} keys in all]"
        return folded
    if isinstance(value, (list, tuple)):
        items = [_fold(item) for item in value[:_ITEMS]]
        return [*items, f"… [folded: {len(value):,} items in all]"] if len(value) > _ITEMS else items
    return value


def _who_may_decide(view: ReviewView) -> str:
    parts = []
    roles = ", ".join(
        escape(r, limit=100) for r in sorted({r for found in view.reviewers.values() for r in found})
    )
    if view.calls and view.kind != "outcome_unknown":
        some = len(view.reviewers) < len({c.name for c in view.calls})
        parts.append(
            f"Who may decide: role {roles}" + (" (some calls: anyone)" if some else "")
            if roles
            else "Who may decide: any reviewer"
        )
    if view.expires_at is not None:
        parts.append(f"Expires {when(view.expires_at, date=True)}")
    if view.thread_id:
        parts.append(f"Thread {escape(view.thread_id, limit=_ID)}")
    return " · ".join(parts)


def section(text: str) -> dict[str, Any]:
    """A section block of mrkdwn ``text`` (already escaped), cut to Slack's limit."""
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:_SECTION]}}


def _context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text[:_SECTION]}]}


def _stamp_block(stamp: str) -> dict[str, Any]:
    return {"type": "section", "block_id": STAMP_BLOCK, "text": {"type": "mrkdwn", "text": stamp[:_SECTION]}}


def button(
    label: str, action_id: str, *, value: str | None = None, url: str | None = None, style: str | None = None
) -> dict[str, Any]:
    """A button: one that sends ``value`` to the interactivity endpoint, or a link to ``url``."""
    made: dict[str, Any] = {
        "type": "button",
        "text": {"type": "plain_text", "text": label},
        "action_id": action_id,
    }
    extra = {"value": value, "url": url, "style": style}
    made.update({key: item for key, item in extra.items() if item is not None})
    return made


def stamped(blocks: Iterable[Any], stamp: str, *, keep_buttons: bool) -> list[dict[str, Any]]:
    """A posted message's ``blocks`` with ``stamp`` in place of the earlier one (which stays
    below it, as a smaller line: the votes before a decision), and without the decision
    buttons unless ``keep_buttons`` (a review that still counts approvals)."""
    kept: list[dict[str, Any]] = []
    earlier = None
    for block in blocks:
        if not isinstance(block, dict) or block.get("block_id") == EARLIER_BLOCK:
            continue
        if block.get("block_id") == STAMP_BLOCK:
            text = block.get("text")
            earlier = text.get("text") if isinstance(text, dict) else None
            continue
        if block.get("block_id") == DECIDE_BLOCK and not keep_buttons:
            continue
        if block.get("block_id") == LINKS_BLOCK and not keep_buttons:
            block = {**block, "elements": [e for e in block.get("elements") or () if _not_edit(e)]}
        kept.append(block)
    at = next((n for n, b in enumerate(kept) if b.get("block_id") in (DECIDE_BLOCK, LINKS_BLOCK)), len(kept))
    if isinstance(earlier, str) and earlier and earlier != stamp:
        kept.insert(at, {**_context(earlier), "block_id": EARLIER_BLOCK})
    kept.insert(at, _stamp_block(stamp))
    return kept


def _not_edit(element: Any) -> bool:
    return not (isinstance(element, dict) and element.get("action_id") == f"{ACTION_PREFIX}edit")
