"""The ``handrail demo`` command: a scripted agent whose risky tool calls a person reviews.

The agent cleans up a small SQLite database. It reads the ``records`` table (never
reviewed), saves the rows older than 30 days to a CSV file (``write_file``: every
decision allowed) and deletes them (``execute_sql``: approve, edit or reject). Each review
request is drawn in the terminal and answered there; afterwards the demo shows what ran,
what did not, and the agent's final answer.

Everything the terminal does goes through two objects, so tests and other front ends can
drive the demo without a TTY: a rich :class:`~rich.console.Console` for output and an
:data:`Ask` function for input::

    answers = iter(["a", "r", "keep them for the audit"])
    result = run_demo(Console(file=io.StringIO()), lambda prompt: next(answers))
    result.final_answer

The model, the checkpointer and the thread id are parameters, so the same loop serves a
real model or a thread resumed from a durable store. A thread started here records its
working directory in the thread's metadata (``config["metadata"]``), so a later session,
in any process sharing the store, finds the files again; with a checkpointer of the
caller's, the person may also answer "later" at a review and come back to it::

    with SqliteSaver("handrail.db") as saver:
        first = run_demo(console, ask, checkpointer=saver)          # "l" at a review
        if first.waiting:                                           # ... any time later:
            run_demo(console, ask, checkpointer=saver, thread_id=first.thread_id)
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, Literal

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from handrail.agent import Agent, create_agent
from handrail.checkpoint import BaseCheckpointSaver, InMemorySaver
from handrail.errors import ConflictError, HandrailError, InvalidDecisionError
from handrail.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from handrail.middleware import HumanInTheLoopMiddleware
from handrail.models import ChatModel, ScriptedModel
from handrail.tools import Tool, tool
from handrail.types import Command, GraphOutput, Interrupt, RunnableConfig

__all__ = [
    "DEMO_APP",
    "TASK",
    "Ask",
    "DemoError",
    "DemoResult",
    "DemoThread",
    "DemoWorkspace",
    "ReviewDeferred",
    "TerminalReviewer",
    "ToolOutcome",
    "WaitingThread",
    "build_demo_agent",
    "demo_middleware",
    "find_demo_thread",
    "make_demo_tools",
    "new_thread_id",
    "run_demo",
    "scripted_demo_model",
    "waiting_demo_threads",
]

Ask = Callable[[str], str]
"""Reads one answer from the person: gets a plain-text prompt, returns what they typed."""

TASK = "Archive the records older than 30 days to old_records.csv, then delete them from the database."
CUTOFF_DAYS = 30
REPORT_FILE = "old_records.csv"
EDIT_NOTICE = "Note: the reviewer edited this tool call before it ran."
DELETE_QUERY = f"DELETE FROM records WHERE created_at < date('now', '-{CUTOFF_DAYS} days')"
SYSTEM_PROMPT = (
    "You look after a small SQLite database whose table `records` has the columns id, title and "
    "created_at (an ISO date). Use read_data to look at rows, write_file to save files in the "
    "working directory and execute_sql to change data. A person reviews risky calls."
)

_SAMPLE_RECORDS: tuple[tuple[str, int], ...] = (
    ("Invoice 1041 paid", 2),
    ("Support ticket 88 closed", 6),
    ("Weekly backup verified", 11),
    ("Invoice 1029 paid", 19),
    ("New customer: Birch & Co", 27),
    ("Quarterly report sent", 41),
    ("Trial account expired", 63),
    ("Old password reset log", 95),
)
"""(title, age in days): three of the eight rows are older than the 30-day cutoff."""

DEMO_APP = "handrail-demo"
"""The ``"app"`` value in the metadata of every thread the demo starts."""

_DECISION_KEYS: dict[str, str] = {"approve": "a", "edit": "e", "reject": "r", "respond": "s"}
_LATER = "later"
_LATER_KEY = "l"
_OUTCOME_UNKNOWN_DECISIONS = ["approve", "respond", "reject"]


class DemoError(HandrailError):
    """The demo cannot go on (for example, the run paused for something it cannot answer)."""


class ReviewDeferred(Exception):
    """The person chose to answer a review later; nothing of that review was sent.

    Raised by :class:`TerminalReviewer` (only when it offers "later"); :func:`run_demo`
    catches it and returns a result with ``waiting=True``.
    """


# The workspace: a directory with a seeded SQLite database ------------------------------------
@dataclass(frozen=True, slots=True)
class DemoWorkspace:
    """The directory the demo's tools work in, holding ``demo.db``."""

    root: Path

    @property
    def db_path(self) -> Path:
        """The SQLite database file."""
        return self.root / "demo.db"

    @classmethod
    def open(cls, workdir: Path | str | None = None) -> DemoWorkspace:
        """Use ``workdir`` (created if missing) or a fresh temporary directory."""
        if workdir is None:
            return cls(Path(tempfile.mkdtemp(prefix="handrail-demo-")).resolve())
        root = Path(workdir).expanduser()
        if root.exists() and not root.is_dir():
            raise DemoError(f"{str(root)!r} exists and is not a directory")
        root.mkdir(parents=True, exist_ok=True)
        return cls(root.resolve())

    def seed(self, today: date | None = None) -> None:
        """(Re)create the ``records`` table with the sample rows, dated relative to ``today``."""
        today = today or datetime.now(UTC).date()
        with _connect(self.db_path) as conn:
            conn.execute("DROP TABLE IF EXISTS records")
            conn.execute(
                "CREATE TABLE records (id INTEGER PRIMARY KEY, title TEXT NOT NULL, created_at TEXT NOT NULL)"
            )
            conn.executemany(
                "INSERT INTO records (title, created_at) VALUES (?, ?)",
                [(title, (today - timedelta(days=age)).isoformat()) for title, age in _SAMPLE_RECORDS],
            )

    def record_ids(self) -> list[int]:
        """The ids left in ``records`` (for checking what a run changed)."""
        with _connect(self.db_path) as conn:
            return [int(row[0]) for row in conn.execute("SELECT id FROM records ORDER BY id")]


@contextmanager
def _connect(path: Path) -> Iterator[sqlite3.Connection]:
    # One short-lived connection per call: tools may run in worker threads.
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        with conn:  # commits on success, rolls back on error
            yield conn
    finally:
        conn.close()


# The tools and the policy ----------------------------------------------------------------------
def make_demo_tools(workspace: DemoWorkspace) -> list[Tool]:
    """The three real tools, bound to ``workspace``."""

    @tool
    def write_file(path: str, content: str) -> str:
        """Write a text file in the working directory.

        Args:
            path: File name, relative to the working directory.
            content: The text to write.
        """
        target = (workspace.root / path).resolve()
        if not target.is_relative_to(workspace.root):
            raise ValueError(f"{path!r} is outside the working directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return f"Wrote {len(content.encode())} bytes to {target.relative_to(workspace.root)}."

    @tool
    def execute_sql(query: str) -> str:
        """Run one SQL statement on the database and commit it.

        Args:
            query: The SQL statement.
        """
        with _connect(workspace.db_path) as conn:
            cursor = conn.execute(query)
            if cursor.description is not None:
                rows = [dict(row) for row in cursor.fetchmany(50)]
                return json.dumps({"rows": rows}, ensure_ascii=False)
            verb = {"DELETE": "Deleted", "UPDATE": "Updated", "INSERT": "Inserted"}.get(
                query.split(None, 1)[0].upper() if query.strip() else "", "Changed"
            )
            count = cursor.rowcount
            return f"{verb} {count} row{'' if count == 1 else 's'}."

    @tool
    def read_data(table: str, limit: int = 50) -> str:
        """Read rows from a table of the database.

        Args:
            table: The table's name.
            limit: At most this many rows.
        """
        with _connect(workspace.db_path) as conn:
            known = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if table not in known:
                raise ValueError(f"no table {table!r}; tables: {sorted(known)}")
            total = conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
            rows = [dict(row) for row in conn.execute(f'SELECT * FROM "{table}" LIMIT ?', (limit,))]
        return json.dumps({"table": table, "total": total, "rows": rows}, ensure_ascii=False)

    return [write_file, execute_sql, read_data]


def demo_middleware() -> HumanInTheLoopMiddleware:
    """The demo's review policy: files need review, SQL needs a DBA's eye, reads are free."""
    return HumanInTheLoopMiddleware(
        interrupt_on={
            "write_file": True,
            "execute_sql": {
                "allowed_decisions": ["approve", "edit", "reject"],
                "description": "SQL can change or delete data for good: check the statement before it runs.",
            },
            "read_data": False,
        },
        description_prefix="Tool execution pending approval",
        edit_notice=EDIT_NOTICE,
    )


def build_demo_agent(
    workspace: DemoWorkspace,
    *,
    model: ChatModel | str | None = None,
    checkpointer: BaseCheckpointSaver | None = None,
    middleware: HumanInTheLoopMiddleware | None = None,
) -> Agent:
    """The demo agent: the tools over ``workspace``, the review policy, a checkpointer.

    ``model`` defaults to :func:`scripted_demo_model`; pass a ChatModel or a
    ``"provider:model"`` string to let a real model drive the same tools. ``middleware``
    defaults to :func:`demo_middleware`; ``checkpointer`` to a fresh ``InMemorySaver``.
    """
    return create_agent(
        model if model is not None else scripted_demo_model(),
        make_demo_tools(workspace),
        system_prompt=SYSTEM_PROMPT,
        middleware=[middleware if middleware is not None else demo_middleware()],
        checkpointer=checkpointer if checkpointer is not None else InMemorySaver(),
        name="demo",
    )


# The scripted model ---------------------------------------------------------------------------
def scripted_demo_model() -> ScriptedModel:
    """A model that plays the clean-up task without an API key.

    Every response is the same stateless function of the conversation, so the script
    also works for a thread resumed in a new process.
    """
    return ScriptedModel([_next_step] * 8)


def _next_step(messages: list[BaseMessage]) -> dict[str, Any]:
    start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
    turn = messages[start + 1 :]
    step = sum(1 for m in turn if isinstance(m, AIMessage))
    if step == 0:
        return _call("Let me look at the records table first.", ("read_data", {"table": "records"}))
    if step == 1:
        old = _old_rows(_last_read(turn))
        if not old:
            return {"content": f"No record is older than {CUTOFF_DAYS} days; there is nothing to do."}
        return _call(
            f"{len(old)} records are older than {CUTOFF_DAYS} days. I will save them to {REPORT_FILE} "
            "and then delete them.",
            ("write_file", {"path": REPORT_FILE, "content": _to_csv(old)}),
            ("execute_sql", {"query": DELETE_QUERY}),
        )
    if step == 2:
        return _call("Let me check what is left.", ("read_data", {"table": "records"}))
    return {"content": _final_answer(turn)}


def _call(content: str, *calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"content": content, "tool_calls": [{"name": name, "args": args} for name, args in calls]}


def _last_read(turn: Sequence[BaseMessage]) -> dict[str, Any]:
    for message in reversed(turn):
        if isinstance(message, ToolMessage) and message.name == "read_data" and message.status == "success":
            try:
                value = json.loads(message.text)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return {"total": 0, "rows": []}


def _old_rows(read: Mapping[str, Any]) -> list[dict[str, Any]]:
    cutoff = (datetime.now(UTC).date() - timedelta(days=CUTOFF_DAYS)).isoformat()
    return [row for row in read.get("rows", []) if str(row.get("created_at", "")) < cutoff]


def _split_edit_notice(text: str) -> tuple[bool, str]:
    """Whether a tool result carries the edit notice, and the tool's own output after it."""
    if not text.startswith(EDIT_NOTICE):
        return False, text
    # The middleware writes the notice, a "Ran instead: ..." line, a blank line, then the output.
    return True, text.partition("\n\n")[2] or text


def _to_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=["id", "title", "created_at"], lineterminator="\n")
    writer.writeheader()
    writer.writerows({key: row.get(key) for key in ("id", "title", "created_at")} for row in rows)
    return buffer.getvalue()


def _final_answer(turn: Sequence[BaseMessage]) -> str:
    acting = next(
        (m for m in turn if isinstance(m, AIMessage) and any(c["name"] != "read_data" for c in m.tool_calls)),
        None,
    )
    results = {m.tool_call_id: m for m in turn if isinstance(m, ToolMessage)}
    lines = ["Here is what happened:"]
    for call in acting.tool_calls if acting else []:
        message = results.get(str(call["id"]))
        if message is None:
            continue
        edited, output = _split_edit_notice(message.text)
        text = " ".join(output.split())
        name = f"{call['name']} (as edited by the reviewer)" if edited else call["name"]
        if message.status == "error" and text.startswith("User rejected"):
            lines.append(f"- {name} was rejected, so I did not run it. {text}")
        elif message.status == "error":
            lines.append(f"- {name} failed: {text}")
        else:
            lines.append(f"- {name}: {text}")
    read = _last_read(turn)
    lines.append(
        f"The records table now holds {read.get('total', 0)} rows, {len(_old_rows(read))} of them "
        f"older than {CUTOFF_DAYS} days."
    )
    return "\n".join(lines)


# Reviewing in the terminal ----------------------------------------------------------------------
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
    raise DemoError(f"the run paused for something this demo cannot answer: {value!r}")


@dataclass(frozen=True, slots=True)
class _Verdict:
    label: Literal["approved", "edited", "rejected", "answered"]
    final_args: dict[str, Any] | None


class TerminalReviewer:
    """Shows review requests on ``console`` and reads decisions through ``ask``.

    With ``auto_approve`` every call is approved without asking. With ``allow_later``
    the person may also answer "later" (``l``), which raises :class:`ReviewDeferred`
    before anything of that review is sent. :attr:`verdicts` records what was decided for
    each tool call id, once handrail has accepted it.
    """

    def __init__(
        self, console: Console, ask: Ask, *, auto_approve: bool = False, allow_later: bool = False
    ) -> None:
        self.console = console
        self.ask = ask
        self.auto_approve = auto_approve
        self.allow_later = allow_later
        self.verdicts: dict[str, _Verdict] = {}

    def settle(self, intr: Interrupt, submit: Callable[[Any], GraphOutput]) -> GraphOutput:
        """Answer ``intr``; when handrail refuses an edit, say why and ask again.

        Raises :class:`ReviewDeferred` when the person answers "later".
        """
        pending = _read_interrupt(intr)
        decisions: list[dict[str, Any]] = []
        for index, item in enumerate(pending.items, start=1):
            self._render(item, index, len(pending.items))
            try:
                decisions.append(self._decide(item))
            except ReviewDeferred:
                if decisions:
                    self.console.print(
                        "The answers you gave in this review were not sent; it is asked again, "
                        "whole, when you continue."
                    )
                raise
        while True:
            try:
                output = submit({"decisions": decisions} if pending.batched else decisions[0])
            except InvalidDecisionError as exc:
                edited = [i for i, d in enumerate(decisions) if d["type"] == "edit"]
                if not edited:
                    raise
                self.console.print(f"[red]handrail refused the answer:[/] {escape(str(exc))}")
                self.console.print("Let's try that again.")
                for i in edited:
                    previous = decisions[i]["edited_action"]["args"]
                    decisions[i] = self._decide(pending.items[i], start_args=previous)
                continue
            for item, decision in zip(pending.items, decisions, strict=True):
                self.verdicts[item.tool_call_id] = _verdict(item, decision)
            return output

    def _render(self, item: _ReviewItem, index: int, total: int) -> None:
        parts: list[RenderableType] = []
        description = _without_default_args(item.description, item.name)
        if description:
            parts.append(Text(description))
        parts.append(Text("Arguments", style="bold"))
        parts.append(_json(item.args))
        for name, value in item.args.items():
            if isinstance(value, str) and "\n" in value.strip():
                # Multi-line text is hard to read as a JSON string; show it as it will be written.
                parts.append(Text(f"{name}, as text:", style="bold"))
                parts.append(Panel(Text(value.rstrip("\n")), border_style="dim", expand=False))
        parts.append(Text.assemble(("Allowed: ", "bold"), ", ".join(item.allowed)))
        title = f"Review {index} of {total}: [bold]{escape(item.name)}[/]"
        self.console.print(Panel(Group(*parts), title=title, title_align="left", border_style="yellow"))

    def _decide(self, item: _ReviewItem, start_args: dict[str, Any] | None = None) -> dict[str, Any]:
        if self.auto_approve:
            if "approve" in item.allowed:
                self.console.print(f"[green]Approved[/] {escape(item.name)} automatically.")
                return {"type": "approve"}
            self.console.print(f"[red]Rejected[/] {escape(item.name)}: approving it is not allowed.")
            return {
                "type": "reject",
                "message": "Automatic mode may only approve, and approve is not allowed.",
            }
        kind = self._choose(item)
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
        args = self._edit_args(item, start_args if start_args is not None else item.args)
        if args == item.args:
            self.console.print("The arguments are unchanged, so the call is approved as proposed.")
            return {"type": "approve"}
        return {"type": "edit", "edited_action": {"name": item.name, "args": args}}

    def _choose(self, item: _ReviewItem) -> str:
        keys = {_DECISION_KEYS.get(kind, kind): kind for kind in item.allowed}
        if self.allow_later:
            keys[_LATER_KEY] = _LATER
        menu = ", ".join(f"{kind} ({key})" for key, kind in keys.items())
        while True:
            answer = self.ask(f"Decision for {item.name} - {menu}:").strip().lower()
            if answer in keys:
                answer = keys[answer]
            if answer == _LATER and self.allow_later:
                raise ReviewDeferred(item.name)
            if answer in item.allowed:
                return answer
            self.console.print(f"Please answer one of: {', '.join(keys)}.")

    def _edit_args(self, item: _ReviewItem, current: dict[str, Any]) -> dict[str, Any]:
        self.console.print(Text("Current arguments", style="bold"))
        self.console.print(_json(current))
        while True:
            raw = self.ask("New arguments as a JSON object, or Enter to edit field by field:").strip()
            if not raw:
                args = self._edit_fields(item, current)
                break
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as exc:
                self.console.print(f"That is not valid JSON ({escape(exc.msg)}); try again.")
                continue
            if isinstance(value, dict):
                args = value
                break
            self.console.print('The arguments must be a JSON object, like {"query": "..."}.')
        self.console.print(Text("Edited arguments", style="bold"))
        self.console.print(_json(args))
        return args

    def _edit_fields(self, item: _ReviewItem, current: dict[str, Any]) -> dict[str, Any]:
        properties: dict[str, Any] = dict((item.schema or {}).get("properties", {}))
        edited = dict(current)
        if properties:
            for name in [name for name in current if name not in properties]:
                self.console.print(f"Dropping {escape(name)}: {escape(item.name)} takes no such argument.")
                del edited[name]
        for name in properties or current:
            shown = _preview(current[name]) if name in current else "not set"
            raw = self.ask(f"{name} [{shown}] (Enter keeps it):").strip()
            if raw:
                edited[name] = raw if _is_text_field(properties.get(name), current.get(name)) else _loose(raw)
        return edited


def _verdict(item: _ReviewItem, decision: Mapping[str, Any]) -> _Verdict:
    kind = decision["type"]
    if kind == "approve":
        return _Verdict("approved", item.args)
    if kind == "edit":
        return _Verdict("edited", dict(decision["edited_action"]["args"]))
    return _Verdict("rejected" if kind == "reject" else "answered", None)


def _without_default_args(description: str, name: str) -> str:
    # The middleware's default description repeats the arguments, which the panel shows anyway.
    head, found, _ = description.partition(f"\n\nTool: {name}\nArgs: ")
    return head if found else description


def _json(value: Any) -> Syntax:
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return Syntax(text, "json", theme="ansi_dark", word_wrap=True, background_color="default")


def _preview(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _args_line(args: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={_preview(value, 100)}" for name, value in args.items()) or "(none)"


def _result_summary(text: str, width: int) -> str:
    """A short form of a tool result: a count for the row listings the demo's tools return."""
    try:
        value = json.loads(text)
    except ValueError:
        return _preview(text, width)
    if isinstance(value, dict) and isinstance(value.get("rows"), list):
        shown, total = len(value["rows"]), value.get("total", len(value["rows"]))
        where = f" from {value['table']}" if "table" in value else ""
        return f"{shown} of {total} rows{where}" if shown != total else f"{total} rows{where}"
    return _preview(text, width)


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


# Running the demo -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """One tool call of the run and what became of it.

    ``review`` is ``"approved"``, ``"edited"``, ``"rejected"``, ``"answered"`` (the person
    replied in the tool's place), ``"not reviewed"`` or ``"unknown"`` (decided in an
    earlier session). ``final_args`` are the arguments it ran with, None if it did not run.
    """

    name: str
    proposed_args: dict[str, Any]
    final_args: dict[str, Any] | None
    review: str
    result: str
    status: str

    @property
    def ran(self) -> bool:
        """Whether the tool was executed."""
        return self.final_args is not None


@dataclass(frozen=True, slots=True)
class DemoResult:
    """What a demo run did: its thread, directory, tool calls and final answer.

    ``waiting`` is true when the run stopped before the end (the person answered "later",
    or another session holds the thread): continue it with the same ``thread_id``.
    """

    thread_id: str
    workspace: DemoWorkspace
    outcomes: list[ToolOutcome]
    final_answer: str
    messages: list[BaseMessage] = field(repr=False)
    waiting: bool = False


def new_thread_id() -> str:
    """A fresh id for a demo thread, like ``demo-3f9a1c07``."""
    return f"demo-{uuid.uuid4().hex[:8]}"


def run_demo(
    console: Console,
    ask: Ask,
    *,
    checkpointer: BaseCheckpointSaver | None = None,
    model: ChatModel | str | None = None,
    thread_id: str | None = None,
    workdir: Path | str | None = None,
    auto_approve: bool = False,
    metadata: Mapping[str, Any] | None = None,
) -> DemoResult:
    """Run the demo agent, answering its review requests through ``console`` and ``ask``.

    A ``thread_id`` that already has a conversation in ``checkpointer`` is continued
    (pending reviews first) in the working directory saved with the thread, unless
    ``workdir`` names another; its files are left as they are. Otherwise the database is
    seeded afresh, the task starts from the beginning, and the thread's metadata records
    ``{"app": DEMO_APP, "workdir": ...}`` plus ``metadata``.

    When the caller passes a ``checkpointer`` (so the thread outlives this call) the
    person may answer "later" at a review: the run stops there and the result has
    ``waiting=True``. A Ctrl-C at a prompt raises ``KeyboardInterrupt`` with the review
    saved just the same.
    """
    store = checkpointer if checkpointer is not None else InMemorySaver()
    thread_id = thread_id or new_thread_id()
    record = store.get_thread(thread_id)
    if workdir is None and record is not None:
        saved = record.metadata.get("workdir")
        workdir = saved if isinstance(saved, str) and saved else None
    workspace = DemoWorkspace.open(workdir)
    policy = demo_middleware()
    agent = build_demo_agent(workspace, model=model, checkpointer=store, middleware=policy)
    config: RunnableConfig = {"configurable": {"thread_id": thread_id, "reviewer": "terminal"}}

    snapshot = agent.get_state(config)
    existing = list(snapshot.values.get("messages", []))
    console.print(f"[bold]handrail demo[/]  thread [cyan]{escape(thread_id)}[/]")
    console.print(f"Working directory: {escape(str(workspace.root))}")
    if existing:
        console.print("Continuing the conversation saved for this thread.")
        if not workspace.db_path.exists():
            console.print("[yellow]Its database was gone, so it starts again from the sample rows.[/]")
            workspace.seed()
        console.print(f"[bold]Task:[/] {escape(_task_of(existing))}")
        _narrate(console, existing, 0)
        if snapshot.interrupts or not snapshot.next:  # waiting for a review, or finished
            output = GraphOutput(value=snapshot.values, interrupts=snapshot.interrupts)
        else:
            output = agent.invoke(None, config, version="v2")
    else:
        workspace.seed()
        console.print(f"[bold]Task:[/] {escape(TASK)}\n")
        first: RunnableConfig = {
            **config,
            "metadata": {**(metadata or {}), "app": DEMO_APP, "workdir": str(workspace.root)},
        }
        output = agent.invoke({"messages": [HumanMessage(TASK)]}, first, version="v2")

    reviewer = TerminalReviewer(console, ask, auto_approve=auto_approve, allow_later=checkpointer is not None)
    shown = _narrate(console, output.value.get("messages", []), len(existing))
    waiting = False
    while output.interrupts:
        intr = output.interrupts[0]
        try:
            output = reviewer.settle(intr, partial(_resume, agent, config, intr.id))
        except ReviewDeferred:
            waiting = True
            break
        except ConflictError as exc:
            console.print(f"[yellow]{escape(str(exc))}[/]")
            console.print("Another session got there first; this is the thread as it stands now.")
            snapshot = agent.get_state(config)
            output = GraphOutput(value=snapshot.values, interrupts=snapshot.interrupts)
            if not snapshot.interrupts and snapshot.next:  # the other session is still running it
                waiting = True
        shown = _narrate(console, output.value.get("messages", []), shown)

    messages: list[BaseMessage] = list(output.value.get("messages", []))
    result = DemoResult(
        thread_id=thread_id,
        workspace=workspace,
        outcomes=_outcomes(messages, reviewer.verdicts, gated=set(policy.policies)),
        final_answer="" if waiting else _final_text(messages),
        messages=messages,
        waiting=waiting,
    )
    _summarise(console, result)
    return result


def find_demo_thread(checkpointer: BaseCheckpointSaver, thread_id: str) -> DemoThread | None:
    """What the store knows of ``thread_id`` (one indexed read), or None if it has no such thread."""
    record = checkpointer.get_thread(thread_id)
    if record is None:
        return None
    meta = record.metadata

    def text(key: str) -> str | None:
        value = meta.get(key)
        return value if isinstance(value, str) and value else None

    workdir = text("workdir")
    return DemoThread(
        thread_id=thread_id,
        is_demo=meta.get("app") == DEMO_APP,
        status=record.status,
        waiting_reviews=len(record.pending),
        workdir=Path(workdir) if workdir else None,
        model=text("model"),
        base_url=text("base_url"),
    )


def waiting_demo_threads(checkpointer: BaseCheckpointSaver) -> list[WaitingThread]:
    """The demo threads in ``checkpointer`` with reviews pending, longest waiting first.

    Read from the reviewers' inbox (``agent.list_interrupts``), filtered on the metadata
    every demo thread carries.
    """
    agent = build_demo_agent(DemoWorkspace(Path.cwd()), checkpointer=checkpointer)
    found: dict[str, WaitingThread] = {}
    cursor: str | None = None
    while True:
        page = agent.list_interrupts(metadata={"app": DEMO_APP}, limit=200, cursor=cursor)
        for item in page.items:
            seen = found.get(item.thread_id)
            tools = tuple(dict.fromkeys([*(seen.tools if seen else ()), *item.tools]))
            workdir = item.metadata.get("workdir")
            found[item.thread_id] = WaitingThread(
                thread_id=item.thread_id,
                since=min(item.created_at, seen.since) if seen else item.created_at,
                tools=tools,
                workdir=workdir if isinstance(workdir, str) else None,
            )
        if page.next_cursor is None:
            return sorted(found.values(), key=lambda t: (t.since, t.thread_id))
        cursor = page.next_cursor


@dataclass(frozen=True, slots=True)
class DemoThread:
    """A thread of the store as the demo sees it (see :func:`find_demo_thread`).

    ``is_demo`` tells whether the demo started it; ``workdir``, ``model`` and
    ``base_url`` come from its metadata (None when not recorded).
    """

    thread_id: str
    is_demo: bool
    status: str
    waiting_reviews: int
    workdir: Path | None
    model: str | None
    base_url: str | None


@dataclass(frozen=True, slots=True)
class WaitingThread:
    """A demo thread with reviews pending (see :func:`waiting_demo_threads`)."""

    thread_id: str
    since: datetime
    tools: tuple[str, ...]
    workdir: str | None


def _task_of(messages: Sequence[BaseMessage]) -> str:
    first = next((m for m in messages if isinstance(m, HumanMessage)), None)
    return first.text if first is not None else TASK


def _resume(agent: Agent, config: RunnableConfig, interrupt_id: str, value: Any) -> GraphOutput:
    output: GraphOutput = agent.invoke(Command(resume={interrupt_id: value}), config, version="v2")
    return output


def _narrate(console: Console, messages: Sequence[BaseMessage], start: int) -> int:
    """Print the messages from ``start`` on; return how many have been shown."""
    for message in messages[start:]:
        if isinstance(message, AIMessage) and message.tool_calls:
            if message.text:
                console.print(f"[bold magenta]agent:[/] {escape(message.text)}")
            names = ", ".join(call["name"] for call in message.tool_calls)
            console.print(f"[dim]  proposes: {escape(names)}[/]")
        elif isinstance(message, ToolMessage):
            style = "red" if message.status == "error" else "green"
            edited, output = _split_edit_notice(message.text)
            summary = escape(_result_summary(output, 70)) + (" [dim](edited call)[/]" if edited else "")
            console.print(f"  [{style}]{escape(message.name or 'tool')}[/] -> {summary}")
    return len(messages)


def _outcomes(
    messages: Sequence[BaseMessage], verdicts: Mapping[str, _Verdict], *, gated: set[str]
) -> list[ToolOutcome]:
    results = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    outcomes = []
    for message in messages:
        if not isinstance(message, AIMessage):
            continue
        for call in message.tool_calls:
            reply = results.get(str(call["id"]))
            if reply is None:
                continue
            verdict = verdicts.get(str(call["id"]))
            if verdict is not None:
                review: str = verdict.label
                final_args = verdict.final_args
            elif call["name"] not in gated:
                review, final_args = "not reviewed", call["args"]
            else:
                rejected = reply.status == "error" and reply.text.startswith("User rejected")
                review, final_args = "unknown", None if rejected else call["args"]
            outcomes.append(
                ToolOutcome(call["name"], call["args"], final_args, review, reply.text, reply.status)
            )
    return outcomes


def _final_text(messages: Sequence[BaseMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, AIMessage) and not message.tool_calls:
            return message.text
    return ""


def _summarise(console: Console, result: DemoResult) -> None:
    ran = [o for o in result.outcomes if o.ran]
    skipped = [o for o in result.outcomes if not o.ran]
    console.print()
    title = "What ran so far" if result.waiting else "What ran"
    table = Table(title=title, title_justify="left", expand=True)
    table.add_column("Tool", style="bold", no_wrap=True)
    table.add_column("Review", no_wrap=True)
    table.add_column("Arguments it ran with", ratio=3)
    table.add_column("Result", ratio=2)
    for outcome in ran:
        table.add_row(
            outcome.name,
            outcome.review,
            _args_line(outcome.final_args or {}),
            Text(
                _result_summary(_split_edit_notice(outcome.result)[1], 160),
                style="red" if outcome.status == "error" else "",
            ),
        )
    console.print(table if ran else "Nothing ran.")
    if skipped:
        console.print(Text("Not run", style="bold"))
        for outcome in skipped:
            console.print(f"  [red]{escape(outcome.name)}[/] ({outcome.review}): {escape(outcome.result)}")
    if result.waiting:
        console.print(
            Panel(
                "The thread is saved and waits for review: nothing more runs until it is answered.",
                title="Waiting",
                title_align="left",
                border_style="yellow",
            )
        )
    else:
        answer = escape(result.final_answer or "(no final answer)")
        console.print(Panel(answer, title="Final answer", title_align="left"))
    console.print(f"Files and database: {escape(str(result.workspace.root))}")
