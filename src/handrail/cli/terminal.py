"""Review requests in a terminal, with rich: render an interrupt, ask for a decision, validate and re-ask.

:class:`TerminalReviewer` answers the review requests of
:class:`~handrail.middleware.HumanInTheLoopMiddleware` for any agent and thread: a batch of
action requests (``action_requests`` with their ``review_configs``) or a single
``tool_approval`` / ``outcome_unknown`` request. For each tool call it draws a panel (the
description, the arguments, the decisions allowed), asks for a decision and, for an edit,
reads the new arguments (a JSON object merged onto the proposal, field by field, or the
whole JSON in ``$EDITOR``) and checks them at once, so a wrong edit is refused while the
proposal is kept and shown again. Then it hands the answer to a ``submit`` function; when
handrail still refuses an edit (:class:`~handrail.errors.InvalidDecisionError`, nothing
saved) it says why and asks for the edited calls again.

Everything the terminal does goes through two objects, so tests and other front ends can
drive it without a TTY: a rich :class:`~rich.console.Console` for output and an
:data:`Ask` function for input. With any agent that has a checkpointer::

    reviewer = TerminalReviewer(Console(), input)
    output = agent.invoke({"messages": [HumanMessage(task)]}, config, version="v2")
    while output.interrupts:
        intr = output.interrupts[0]
        output = reviewer.settle(
            intr, lambda answer: agent.invoke(Command(resume={intr.id: answer}), config, version="v2")
        )
    reviewer.verdicts  # {tool call id: Verdict(label="approved" | "edited" | ..., final_args=...)}

``handrail demo`` (:func:`handrail.cli.demo.run_demo`) reviews its thread this way.

Tool names, arguments, descriptions and messages come from the model and from tools, so
they are untrusted: everything this module prints from them goes through
:func:`~handrail.cli._safe_text.safe_text` or
:func:`~handrail.cli._safe_text.safe_markup` (``_safe_text.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from handrail._message_display import visible, visible_json
from handrail.cli._safe_text import safe_markup, safe_text
from handrail.cli._terminal_edit import (
    EditorUnavailableError,
    edit_in_editor,
    read_text_value,
    schema_problems,
)
from handrail.errors import HandrailError, InvalidDecisionError
from handrail.types import GraphOutput, Interrupt

__all__ = [
    "Ask",
    "ReviewDeferred",
    "TerminalReviewer",
    "UnsupportedInterruptError",
    "Verdict",
    "preview",
]

Ask = Callable[[str], str]
"""Reads one answer from the person: gets a plain-text prompt, returns what they typed."""

_DECISION_KEYS: dict[str, str] = {"approve": "a", "edit": "e", "reject": "r", "respond": "s"}
_LATER = "later"
_LATER_KEY = "l"
_OUTCOME_UNKNOWN_DECISIONS = ["approve", "respond", "reject"]


class ReviewDeferred(Exception):
    """The person chose to answer a review later; nothing of that review was sent.

    Raised by :class:`TerminalReviewer` (only when it offers "later"). The thread keeps
    the review pending; :func:`handrail.cli.demo.run_demo`, for one, catches it and returns a
    result with ``waiting=True``.
    """


class UnsupportedInterruptError(HandrailError):
    """The run paused for something that is not a tool review, so the terminal cannot answer it.

    ``interrupt`` is the interrupt in question; nothing was sent for it.
    """

    def __init__(self, message: str, *, interrupt: Interrupt) -> None:
        super().__init__(message)
        self.interrupt = interrupt


@dataclass(frozen=True, slots=True)
class _ReviewItem:
    name: str
    args: dict[str, Any]
    description: str
    tool_call_id: str
    allowed: list[str]
    schema: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class _Pending:
    """How to read one interrupt: its items, and whether it takes a list of decisions."""

    items: list[_ReviewItem]
    batched: bool


def _read_interrupt(intr: Interrupt) -> _Pending:
    value = intr.value
    if isinstance(value, Mapping) and "action_requests" in value:
        configs = list(value.get("review_configs", []))
        items = []
        for i, request in enumerate(value["action_requests"]):
            config = configs[i] if i < len(configs) else {}
            items.append(
                _ReviewItem(
                    name=str(request["name"]),
                    args=dict(request.get("args", {})),
                    description=str(request.get("description", "")),
                    tool_call_id=str(request.get("tool_call_id", "")),
                    allowed=list(config.get("allowed_decisions", ["approve", "reject"])),
                    schema=config.get("args_schema"),
                )
            )
        return _Pending(items, batched=True)
    if isinstance(value, Mapping) and value.get("type") in ("tool_approval", "outcome_unknown"):
        allowed = value.get("allowed_decisions", _OUTCOME_UNKNOWN_DECISIONS)
        item = _ReviewItem(
            name=str(value["name"]),
            args=dict(value.get("args", {})),
            description=str(value.get("description", "")),
            tool_call_id=str(value.get("tool_call_id", "")),
            allowed=list(allowed),
            schema=None,
        )
        return _Pending([item], batched=False)
    raise UnsupportedInterruptError(
        f"the run paused for something a terminal review cannot answer: {value!r}", interrupt=intr
    )


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the person decided for one tool call, once handrail accepted it.

    ``label`` is ``"approved"``, ``"edited"``, ``"rejected"`` or ``"answered"`` (the
    person replied in the tool's place). ``final_args`` are the arguments the call runs
    with: the proposed ones when approved, the edited ones when edited, None otherwise.
    """

    label: Literal["approved", "edited", "rejected", "answered"]
    final_args: dict[str, Any] | None


class TerminalReviewer:
    """Shows review requests on ``console`` and reads decisions through ``ask``.

    With ``auto_approve`` every call is approved without asking. With ``allow_later``
    the person may also answer "later" (``l``), which raises :class:`ReviewDeferred`
    before anything of that review is sent (when some of its calls were already answered,
    the person is told so and asked to confirm first). :attr:`verdicts` records a
    :class:`Verdict` for each tool call id, once handrail has accepted the decision.

    An edit starts from the proposed arguments: a JSON object replaces only the keys it
    names, Enter edits field by field, ``v`` opens ``$EDITOR`` on the whole JSON. Each
    edit is checked as it is entered, with ``check(tool_name, args)`` (which raises
    ``ValueError`` saying what is wrong) or else against the review's ``args_schema``; a
    refused edit is explained, the proposal stands, and the review is shown again.
    ``edit_text`` (default: the person's ``$EDITOR``) edits a text and returns it.
    """

    def __init__(
        self,
        console: Console,
        ask: Ask,
        *,
        auto_approve: bool = False,
        allow_later: bool = False,
        check: Callable[[str, dict[str, Any]], object] | None = None,
        edit_text: Callable[[str], str] | None = None,
    ) -> None:
        self.console = console
        self.ask = ask
        self.auto_approve = auto_approve
        self.allow_later = allow_later
        self.check = check
        self.edit_text = edit_text if edit_text is not None else edit_in_editor
        self.verdicts: dict[str, Verdict] = {}

    def settle(self, intr: Interrupt, submit: Callable[[Any], GraphOutput]) -> GraphOutput:
        """Answer ``intr``; when handrail refuses an edit, say why and ask again.

        ``submit`` sends the answer (the resume value for ``intr``) and returns the run's
        output. Raises :class:`ReviewDeferred` when the person answers "later", and
        :class:`UnsupportedInterruptError`, before asking anything, when ``intr`` is not a
        tool review. A Ctrl-C (``KeyboardInterrupt``) or the end of input (``EOFError``)
        is raised as it is, after saying that the answers given in this review were not sent.
        """
        pending = _read_interrupt(intr)
        decisions: list[dict[str, Any]] = []
        total = len(pending.items)
        try:
            for index, item in enumerate(pending.items, start=1):
                self._render(item, index, total)
                decisions.append(self._decide(item, index, total, answered=len(decisions)))
        except (ReviewDeferred, KeyboardInterrupt, EOFError):
            if decisions:
                self.console.print(
                    "The answers you gave in this review were not sent; the whole review is asked again "
                    "when you continue."
                )
            raise
        while True:
            try:
                output = submit({"decisions": decisions} if pending.batched else decisions[0])
            except InvalidDecisionError as exc:
                edited = [i for i, d in enumerate(decisions) if d["type"] == "edit"]
                if not edited:
                    raise
                self.console.print(f"[red]handrail refused the answer:[/] {safe_markup(exc)}")
                self.console.print("The proposals stand; decide the edited calls again.")
                for i in edited:
                    self._render(pending.items[i], i + 1, total)
                    decisions[i] = self._decide(pending.items[i], i + 1, total, answered=total - 1)
                continue
            for item, decision in zip(pending.items, decisions, strict=True):
                self.verdicts[item.tool_call_id] = _verdict(item, decision)
            return output

    def _render(self, item: _ReviewItem, index: int, total: int) -> None:
        parts: list[RenderableType] = []
        description = _without_default_args(item.description, item.name)
        if description:
            parts.append(safe_text(description, newlines=True))
        parts.append(Text("Arguments", style="bold"))
        parts.append(_json(item.args))
        for name, value in item.args.items():
            if isinstance(value, str) and "\n" in value.strip():
                # Multi-line text is hard to read as a JSON string; show it as it will be written.
                parts.append(Text.assemble(safe_text(name, style="bold"), (", as text:", "bold")))
                parts.append(
                    Panel(safe_text(value.rstrip("\n"), newlines=True), border_style="dim", expand=False)
                )
        parts.append(Text.assemble(("Allowed: ", "bold"), safe_text(", ".join(item.allowed))))
        title = f"Review {index} of {total}: [bold]{safe_markup(item.name)}[/]"
        self.console.print(Panel(Group(*parts), title=title, title_align="left", border_style="yellow"))

    def _decide(self, item: _ReviewItem, index: int, total: int, *, answered: int) -> dict[str, Any]:
        if self.auto_approve:
            if "approve" in item.allowed:
                self.console.print(f"[green]Approved[/] {safe_markup(item.name)} automatically.")
                return {"type": "approve"}
            self.console.print(f"[red]Rejected[/] {safe_markup(item.name)}: approving it is not allowed.")
            return {
                "type": "reject",
                "message": "Automatic mode may only approve, and approve is not allowed.",
            }
        while True:
            kind = self._choose(item, answered=answered, total=total)
            if kind == "approve":
                return {"type": "approve"}
            if kind == "reject":
                reason = self.ask("Reason for the agent (optional, Enter to skip):").strip()
                return {"type": "reject", "message": reason} if reason else {"type": "reject"}
            if kind == "respond":
                while True:
                    message = self.ask("Your reply, given to the agent instead of the tool's result:").strip()
                    if message:
                        return {"type": "respond", "message": message}
                    self.console.print("A reply cannot be empty.")
            args = self._edit_args(item)
            if args is None:  # refused or abandoned: the proposal stands, and is shown again
                self._render(item, index, total)
                continue
            if args == item.args:
                self.console.print("The arguments are unchanged, so the call is approved as proposed.")
                return {"type": "approve"}
            return {"type": "edit", "edited_action": {"name": item.name, "args": args}}

    def _choose(self, item: _ReviewItem, *, answered: int, total: int) -> str:
        keys = {_DECISION_KEYS.get(kind, kind): kind for kind in item.allowed}
        if self.allow_later:
            keys[_LATER_KEY] = _LATER
        menu = visible(", ".join(f"{kind} ({key})" for key, kind in keys.items()))
        while True:
            answer = self.ask(f"Decision for {visible(item.name)} - {menu}:").strip().lower()
            if answer in keys:
                answer = keys[answer]
            if answer == _LATER and self.allow_later:
                if answered and not self._later_confirmed(answered, total):
                    continue
                raise ReviewDeferred(item.name)
            if answer in item.allowed:
                return answer
            self.console.print(f"Please answer one of: {safe_markup(', '.join(keys))}.")

    def _later_confirmed(self, answered: int, total: int) -> bool:
        self.console.print(
            f"[yellow]You answered {answered} of the {total} calls in this review.[/] Later sends none of "
            f"{'it' if answered == 1 else 'them'}: the whole review is asked again when you continue."
        )
        return self.ask("Leave the whole review for later? (y/N):").strip().lower() in ("y", "yes")

    def _edit_args(self, item: _ReviewItem) -> dict[str, Any] | None:
        """The edited arguments, checked; None when the edit is refused or abandoned."""
        self.console.print(Text("Current arguments (as proposed)", style="bold"))
        self.console.print(_json(item.args))
        while True:
            raw = self.ask(
                "New arguments as a JSON object (the keys you give replace those shown, the others "
                "keep their proposed values), Enter to edit field by field, v to edit the whole JSON "
                "in $EDITOR, b to go back:"
            ).strip()
            if raw.lower() == "b":
                return None
            if not raw:
                args = self._edit_fields(item)
                break
            if raw.lower() == "v":
                edited = self._edit_in_editor(item.args)
                if edited is None:
                    continue
                args = edited
                break
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as exc:
                self.console.print(f"That is not valid JSON ({escape(exc.msg)}); try again.")
                continue
            if isinstance(value, dict):
                args = {**item.args, **value}
                break
            self.console.print('The arguments must be a JSON object, like {"query": "..."}.')
        problem = self._problem(item, args)
        if problem is not None:
            self.console.print(f"[red]handrail refused the answer:[/] {safe_markup(problem)}")
            self.console.print("The edit was not kept; the call stands as proposed.")
            return None
        self.console.print(Text("Edited arguments", style="bold"))
        self.console.print(_json(args))
        return args

    def _edit_in_editor(self, current: dict[str, Any]) -> dict[str, Any] | None:
        text = json.dumps(current, indent=2, ensure_ascii=False, default=str) + "\n"
        try:
            saved = self.edit_text(text)
        except EditorUnavailableError as exc:
            self.console.print(f"[yellow]{safe_markup(exc)}; nothing changed.[/]")
            return None
        if not saved.strip():
            self.console.print("The editor saved an empty file; nothing changed.")
            return None
        try:
            value = json.loads(saved)
        except json.JSONDecodeError as exc:
            self.console.print(f"What the editor saved is not valid JSON ({escape(exc.msg)}); try again.")
            return None
        if not isinstance(value, dict):
            self.console.print("What the editor saved is not a JSON object; try again.")
            return None
        if value == current:
            self.console.print("Nothing changed in the editor; no edit was made.")
            return None
        return value

    def _problem(self, item: _ReviewItem, args: dict[str, Any]) -> str | None:
        if self.check is not None:
            try:
                self.check(item.name, args)
            except ValueError as exc:
                return str(exc)
            return None
        problems = schema_problems(item.schema, args)
        if not problems:
            return None
        return f"arguments for {item.name!r} do not match its schema: " + "; ".join(problems)

    def _edit_fields(self, item: _ReviewItem) -> dict[str, Any]:
        current = item.args
        properties: dict[str, Any] = dict((item.schema or {}).get("properties", {}))
        edited = dict(current)
        if properties:
            for name in [name for name in current if name not in properties]:
                self.console.print(
                    f"Dropping {safe_markup(name)}: {safe_markup(item.name)} takes no such argument."
                )
                del edited[name]
        for name in properties or current:
            text = _is_text_field(properties.get(name), current.get(name))
            shown = _full(current[name]) if name in current else "not set"
            self.console.print(Text.assemble(safe_text(name, style="bold"), (" now: ", "bold"), shown))
            hint = ', or a "JSON string" for new lines (\\n)' if text else ""
            raw = self.ask(f"{visible(name)} (Enter keeps it{hint}):").strip()
            if raw:
                edited[name] = read_text_value(raw) if text else _loose(raw)
        return edited


def _verdict(item: _ReviewItem, decision: Mapping[str, Any]) -> Verdict:
    kind = decision["type"]
    if kind == "approve":
        return Verdict("approved", item.args)
    if kind == "edit":
        return Verdict("edited", dict(decision["edited_action"]["args"]))
    return Verdict("rejected" if kind == "reject" else "answered", None)


def _full(value: Any) -> str:
    return visible_json(json.dumps(value, ensure_ascii=False, default=str))


def _without_default_args(description: str, name: str) -> str:
    # The middleware's default description repeats the arguments, which the panel shows anyway.
    head, found, _ = description.partition(f"\n\nTool: {name}\nArgs: ")
    return head if found else description


def _json(value: Any) -> Syntax:
    text = visible_json(json.dumps(value, indent=2, ensure_ascii=False, default=str))
    return Syntax(text, "json", theme="ansi_dark", word_wrap=True, background_color="default")


def preview(value: Any, width: int = 60) -> str:
    """``value`` on one line of at most ``width`` characters (as JSON unless it is text),
    control and invisible characters shown as escapes (see :func:`safe_text`)."""
    text = value if isinstance(value, str) else _full(value)
    text = visible(" ".join(text.split()))
    return text if len(text) <= width else text[: width - 3] + "..."


def _is_text_field(schema: Mapping[str, Any] | None, current: Any) -> bool:
    if not schema:
        return isinstance(current, str)
    branches = [schema, *schema.get("anyOf", [])]
    return any(branch.get("type") == "string" for branch in branches)


def _loose(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw  # handrail's schema check will say what is wrong with it
