"""The ``handrail demo`` command: a scripted agent whose risky tool calls a person reviews.

The agent cleans up a small SQLite database. It reads the ``records`` table (never
reviewed), saves the rows older than 30 days to a CSV file (``write_file``: every
decision allowed) and deletes them (``execute_sql``: approve, edit or reject). Each review
request is drawn in the terminal and answered there; afterwards the demo shows what ran,
what did not, and the agent's final answer.

Everything the terminal does goes through two objects, so tests and other front ends can
drive the demo without a TTY: a rich :class:`~rich.console.Console` for output and an
:data:`~handrail.cli.terminal.Ask` function for input::

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

This module runs a demo session: the thread, the narration and the summary. The agent
itself (workspace, tools, review policy, scripted model) lives in ``handrail.cli._demo_agent``
and the review prompts in :mod:`handrail.cli.terminal`; the public names of both that a demo
caller needs are re-exported here.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from handrail.agent import Agent
from handrail.checkpoint import BaseCheckpointSaver, InMemorySaver
from handrail.cli._demo_agent import (
    TASK,
    DemoError,
    DemoWorkspace,
    build_demo_agent,
    default_workdirs,
    demo_middleware,
    make_demo_tools,
    scripted_demo_model,
    split_edit_notice,
)
from handrail.cli._demo_outcomes import ToolOutcome, outcomes_from_trail
from handrail.cli._demo_tidy import remove_finished_workdirs
from handrail.cli._safe_text import safe_markup, safe_text
from handrail.cli.terminal import (
    Ask,
    ReviewDeferred,
    TerminalReviewer,
    UnsupportedInterruptError,
    preview,
)
from handrail.errors import ConflictError
from handrail.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from handrail.models import ChatModel
from handrail.types import Command, GraphOutput, RunnableConfig

__all__ = [
    "DEMO_APP",
    "TASK",
    "DemoError",
    "DemoResult",
    "DemoThread",
    "DemoWorkspace",
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

DEMO_APP = "handrail-demo"
"""The ``"app"`` value in the metadata of every thread the demo starts."""


# Running the demo -------------------------------------------------------------------------------
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
    if workdir is None and record is None:
        remove_finished_workdirs(store, app=DEMO_APP)  # earlier demos' folders, once they are done
    workspace = DemoWorkspace.open(workdir, name=thread_id)
    policy = demo_middleware()
    agent = build_demo_agent(workspace, model=model, checkpointer=store, middleware=policy)
    config: RunnableConfig = {"configurable": {"thread_id": thread_id, "reviewer": "terminal"}}

    snapshot = agent.get_state(config)
    existing = list(snapshot.values.get("messages", []))
    console.print(f"[bold]handrail demo[/]  thread [cyan]{safe_markup(thread_id)}[/]")
    console.print(f"Working directory: {safe_markup(str(workspace.root))}")
    if existing:
        console.print("Continuing the conversation saved for this thread.")
        if not workspace.db_path.exists():
            console.print("[yellow]Its database was gone, so it starts again from the sample rows.[/]")
            workspace.seed()
        console.print(f"[bold]Task:[/] {safe_markup(_task_of(existing))}")
        _narrate(console, existing, 0)
        if snapshot.interrupts or not snapshot.next:  # waiting for a review, or finished
            output = GraphOutput(value=snapshot.values, interrupts=snapshot.interrupts)
        else:
            output = agent.invoke(None, config, version="v2")
    else:
        workspace.seed()
        console.print(f"[bold]Task:[/] {safe_markup(TASK)}\n")
        first: RunnableConfig = {
            **config,
            "metadata": {**(metadata or {}), "app": DEMO_APP, "workdir": str(workspace.root)},
        }
        output = agent.invoke({"messages": [HumanMessage(TASK)]}, first, version="v2")

    tools = agent.tools
    reviewer = TerminalReviewer(
        console,
        ask,
        auto_approve=auto_approve,
        allow_later=checkpointer is not None,
        check=lambda name, args: tools[name].validate_args(args) if name in tools else None,
    )
    shown = _narrate(console, output.value.get("messages", []), len(existing))
    waiting = False
    while output.interrupts:
        intr = output.interrupts[0]
        try:
            output = reviewer.settle(intr, partial(_resume, agent, config, intr.id))
        except ReviewDeferred:
            waiting = True
            break
        except UnsupportedInterruptError as exc:
            value = exc.interrupt.value
            raise DemoError(f"the run paused for something this demo cannot answer: {value!r}") from None
        except ConflictError as exc:
            console.print(f"[yellow]{safe_markup(str(exc))}[/]")
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
        outcomes=outcomes_from_trail(messages, agent.get_audit_trail(config)),
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
                console.print(f"[bold magenta]agent:[/] {safe_markup(message.text, newlines=True)}")
            names = ", ".join(call["name"] for call in message.tool_calls)
            console.print(f"[dim]  proposes: {safe_markup(names)}[/]")
        elif isinstance(message, ToolMessage):
            style = "red" if message.status == "error" else "green"
            edited, output = split_edit_notice(message.text)
            if message.status == "error" and output.startswith("User rejected"):
                reason = output.partition(" with reason: ")[2]
                output = f"rejected, reason: {reason}" if reason else "rejected, no reason given"
            summary = safe_markup(_result_summary(output, 70)) + (" [dim](edited call)[/]" if edited else "")
            console.print(f"  [{style}]{safe_markup(message.name or 'tool')}[/] -> {summary}")
    return len(messages)


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
            safe_text(outcome.name),
            safe_text(outcome.review),
            safe_text(_args_line(outcome.final_args or {})),
            safe_text(
                _result_summary(split_edit_notice(outcome.result)[1], 160),
                style="red" if outcome.status == "error" else "",
            ),
        )
    console.print(table if ran else "Nothing ran.")
    if skipped:
        console.print(Text("Not run", style="bold"))
        for outcome in skipped:
            why = safe_markup(_why_not_run(outcome))
            console.print(f"  [red]{safe_markup(outcome.name)}[/] ({safe_markup(outcome.review)}): {why}")
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
        answer = safe_markup(result.final_answer or "(no final answer)", newlines=True)
        console.print(Panel(answer, title="Final answer", title_align="left"))
    console.print(f"Files and database: {safe_markup(str(result.workspace.root))}")
    if not result.waiting and result.workspace.root.parent == default_workdirs().resolve():
        console.print("[dim](a temporary folder: the next new demo removes it, this thread being done)[/]")


def _why_not_run(outcome: ToolOutcome) -> str:
    """For the reviewer: their own words, not the sentence written for the model (with its call id)."""
    if outcome.review == "rejected":
        return f"reason: {outcome.message}" if outcome.message else "no reason given"
    if outcome.review == "answered" and outcome.message:
        return f"your reply: {outcome.message}"
    return outcome.result


def _args_line(args: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={preview(value, 100)}" for name, value in args.items()) or "(none)"


def _result_summary(text: str, width: int) -> str:
    """A short form of a tool result: a count for the row listings the demo's tools return."""
    try:
        value = json.loads(text)
    except ValueError:
        return preview(text, width)
    if isinstance(value, dict) and isinstance(value.get("rows"), list):
        shown, total = len(value["rows"]), value.get("total", len(value["rows"]))
        where = f" from {preview(value['table'], 40)}" if "table" in value else ""
        return f"{shown} of {total} rows{where}" if shown != total else f"{total} rows{where}"
    return preview(text, width)
