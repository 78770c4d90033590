"""The agent ``handrail demo`` runs: its workspace, tools, review policy and scripted model.

The agent cleans up a small SQLite database (:class:`DemoWorkspace`). It reads the
``records`` table (``read_data``, never reviewed), saves the rows older than 30 days to a CSV
file (``write_file``: every decision allowed) and deletes them (``execute_sql``: approve,
edit or reject); :func:`demo_middleware` is that policy. :func:`scripted_demo_model` plays
the task without an API key, and :func:`build_demo_agent` puts the pieces together.

Private: :mod:`handrail.cli.demo` re-exports the public names and runs the agent in a terminal.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from handrail.agent import Agent, create_agent
from handrail.checkpoint import BaseCheckpointSaver, InMemorySaver
from handrail.errors import HandrailError
from handrail.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from handrail.middleware import HumanInTheLoopMiddleware
from handrail.models import ChatModel, ScriptedModel
from handrail.tools import Tool, tool

__all__ = [
    "DELETE_QUERY",
    "EDIT_NOTICE",
    "TASK",
    "DemoError",
    "DemoWorkspace",
    "build_demo_agent",
    "default_workdirs",
    "demo_middleware",
    "make_demo_tools",
    "scripted_demo_model",
    "split_edit_notice",
]

TASK = "Archive the records older than 30 days to old_records.csv, then delete them from the database."
"""What the person asks of the agent at the start of a demo thread."""
CUTOFF_DAYS = 30
REPORT_FILE = "old_records.csv"
EDIT_NOTICE = "Note: the reviewer edited this tool call before it ran."
"""The note the review policy puts first in the result of a tool call the reviewer edited."""
DELETE_QUERY = f"DELETE FROM records WHERE created_at < date('now', '-{CUTOFF_DAYS} days')"
"""The statement the scripted model proposes to ``execute_sql``."""
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


_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def default_workdirs() -> Path:
    """The one folder (in the system's temporary directory) that holds the demo's default workdirs."""
    return Path(tempfile.gettempdir()) / "handrail-demo"


class DemoError(HandrailError):
    """The demo cannot go on (for example, the run paused for something it cannot answer)."""


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
    def open(cls, workdir: Path | str | None = None, *, name: str | None = None) -> DemoWorkspace:
        """Use ``workdir`` (created if missing), or a new folder in :func:`default_workdirs`.

        The new folder is called ``name`` (a thread id) when that is a plain file name not
        yet taken, else it gets a fresh random name.
        """
        if workdir is None:
            parent = default_workdirs()
            parent.mkdir(parents=True, exist_ok=True)
            if name is not None and _PLAIN_NAME.fullmatch(name):
                try:
                    (parent / name).mkdir()
                    return cls((parent / name).resolve())
                except FileExistsError:
                    pass
            return cls(Path(tempfile.mkdtemp(prefix="demo-", dir=parent)).resolve())
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


def split_edit_notice(text: str) -> tuple[bool, str]:
    """Whether a tool result carries :data:`EDIT_NOTICE`, and the tool's own output after it."""
    if not text.startswith(EDIT_NOTICE):
        return False, text
    # The middleware writes the notice and what ran, then "Tool response:" and the output.
    return True, text.partition("\n\nTool response:\n")[2] or text


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
        edited, output = split_edit_notice(message.text)
        text = " ".join(output.split())
        name = f"{call['name']} (as edited by the reviewer)" if edited else call["name"]
        if message.status == "error" and text.startswith("User rejected"):
            # The reviewer's reason, if any; not the sentence handrail wrote for the model.
            reason = text.partition(" with reason: ")[2]
            why = f"Reason given: {reason}" if reason else "No reason was given."
            lines.append(f"- {name} was rejected, so I did not run it. {why}")
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
