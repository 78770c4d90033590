"""The scripted workload both systems run, turn by turn (no handrail, no LangChain here).

Both workload modules (``_workload_handrail.py`` in handrail's venv, ``_workload_langgraph.py``
in the reference venv) import this file, so the model's answers, the tool results and
the reviewer's decisions are the same bytes on both sides.

A turn is one model answer with two tool calls, ``write_file`` with about 200 bytes of
text and ``execute_sql``; both are reviewed in one batched interrupt; the resume
answers with a rotating mix of approve, edit and reject; the tool results go back to
the model, which answers the next turn. The model knows which turn it is on from the
length of the conversation: one user message, then three messages a turn (the answer
and two tool results), so it needs no per-thread state and any number of threads can
share it.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

USER_PROMPT = (
    "Go through the open maintenance tickets one by one: write a short note for each "
    "to the notes folder and update its row in the jobs table."
)
FINAL_ANSWER = "All tickets are handled: every note is written and the jobs table is up to date."

_TEAMS = ("billing", "search", "payments", "identity", "mobile", "data platform", "support tools")
_SUBJECTS = (
    "The nightly export",
    "Customer 4411's invoice run",
    "The staging replica",
    "Our EU cache cluster",
    "The onboarding email job",
    "Ticket backlog triage",
    "The March pricing update",
    "The fraud-score model",
    "Warehouse sync for Lyon",
    "The mobile release train",
)
_EVENTS = (
    "failed twice after the schema change",
    "finished 40 minutes late because of lock contention",
    "was rolled back after error rates doubled",
    "is blocked on a missing API key",
    "completed, but 12 rows were skipped",
    "needs a second review before it ships",
    "ran out of disk on the worker",
    "was paused at the customer's request",
    "was retried and is healthy again",
    "reported stale totals for three accounts",
)
_ACTIONS = (
    "We agreed to move it behind a feature flag.",
    "Next step: add an alert on the queue depth.",
    "Owner will confirm with finance by Friday.",
    "A fix is in review; no data was lost.",
    "We will rerun it tonight with a smaller batch.",
    "Support has informed the two affected customers.",
    "The runbook now lists the manual override.",
    "Keep an eye on memory during the next deploy.",
)
_TABLES = ("jobs", "tickets", "invoices", "exports", "accounts")


def _note(rng: random.Random, turn: int) -> str:
    """About 200 bytes of meeting-note prose, different for every turn."""
    parts = [f"Ticket #{1000 + turn} ({rng.choice(_TEAMS)}):"]
    while sum(len(p) + 1 for p in parts) < 185:
        if len(parts) % 2:
            parts.append(f"{rng.choice(_SUBJECTS)} {rng.choice(_EVENTS)}.")
        else:
            parts.append(rng.choice(_ACTIONS))
    text = " ".join(parts)
    if len(text) > 230:  # cut at a word boundary near 200 bytes
        text = text[:215].rsplit(" ", 1)[0] + "..."
    return text


def _query(rng: random.Random, turn: int) -> str:
    table = rng.choice(_TABLES)
    kind = turn % 3
    if kind == 0:
        return f"UPDATE {table} SET status = 'done', updated_at = now() WHERE ticket_id = {1000 + turn}"
    if kind == 1:
        return f"DELETE FROM {table} WHERE ticket_id = {1000 + turn} AND status = 'duplicate'"
    return (
        f"INSERT INTO {table}_audit (ticket_id, note_path, reviewed) "
        f"VALUES ({1000 + turn}, 'notes/ticket-{1000 + turn}.md', true)"
    )


@functools.cache
def _texts(turn: int) -> tuple[str, str]:
    """The note and the query of turn ``turn``: made once per process (the random draws
    are the harness's cost, not either system's), the same strings every time."""
    rng = random.Random(turn * 7919 + 17)
    note = _note(rng, turn)
    return note, _query(rng, turn)


def turn_answer(turn: int) -> dict[str, Any]:
    """The model's answer on turn ``turn`` (0-based): a sentence and two tool calls.

    A new dict every call (a system may change what it is given), with the same text.
    """
    note, query = _texts(turn)
    path = f"notes/ticket-{1000 + turn}.md"
    return {
        "content": f"Ticket #{1000 + turn}: saving the note to {path} and updating the table.",
        "tool_calls": [
            {"name": "write_file", "args": {"path": path, "content": note}, "id": f"call_{turn}_write"},
            {"name": "execute_sql", "args": {"query": query}, "id": f"call_{turn}_sql"},
        ],
    }


def answer_for(message_count: int, turns: int | None) -> dict[str, Any]:
    """The answer to a conversation of ``message_count`` messages (the model's whole logic)."""
    turn = (message_count - 1) // 3
    if turns is not None and turn >= turns:
        return {"content": FINAL_ANSWER, "tool_calls": []}
    return turn_answer(turn)


def decisions_for(turn: int) -> dict[str, Any]:
    """The reviewer's answer to turn ``turn``: approve, edit and reject in rotation."""
    answer = turn_answer(turn)
    write_args = answer["tool_calls"][0]["args"]
    sql_args = answer["tool_calls"][1]["args"]
    approve = {"type": "approve"}
    edit_write = {
        "type": "edit",
        "edited_action": {
            "name": "write_file",
            "args": {
                "path": write_args["path"].replace("notes/", "notes/reviewed/"),
                "content": "[edited by reviewer] " + write_args["content"][:180],
            },
        },
    }
    edit_sql = {
        "type": "edit",
        "edited_action": {"name": "execute_sql", "args": {"query": sql_args["query"] + " AND region = 'eu'"}},
    }
    reject_sql = {"type": "reject", "message": "Not during business hours; schedule it for tonight."}
    reject_write = {"type": "reject", "message": "This note repeats the previous one; skip it."}
    rotation = (
        [approve, approve],
        [edit_write, approve],
        [approve, reject_sql],
        [reject_write, edit_sql],
    )
    return {"decisions": rotation[turn % len(rotation)]}


def write_file_result(path: str, content: str) -> str:
    return f"Wrote {len(content.encode())} bytes to {path}."


def execute_sql_result(query: str) -> str:
    verb = query.split(" ", 1)[0].upper()
    return f"{verb} ok: 1 row affected."


async def write_file_async(path: str, content: str) -> str:
    """Write text to a file."""
    return write_file_result(path, content)


async def execute_sql_async(query: str) -> str:
    """Run a SQL statement against the main database."""
    return execute_sql_result(query)


def neutral_size(messages: Sequence[Mapping[str, Any]]) -> int:
    """Bytes of the conversation as compact JSON in one neutral shape.

    Each side turns its own messages into ``{"type", "content", "id", "tool_calls",
    "tool_call_id", "name", "status"}`` dicts, so the reference size does not depend on
    either system's serialiser.
    """
    return len(json.dumps(list(messages), separators=(",", ":"), ensure_ascii=False).encode())


def neutral_message(message: Any) -> dict[str, Any]:
    """One message (handrail's or LangChain's: they share these attributes) as a plain dict."""
    out: dict[str, Any] = {"type": message.type, "content": message.content, "id": message.id}
    calls = getattr(message, "tool_calls", None)
    if calls:
        out["tool_calls"] = [{"name": c["name"], "args": c["args"], "id": c["id"]} for c in calls]
    if message.type == "tool":
        out["tool_call_id"] = message.tool_call_id
        out["name"] = message.name
        out["status"] = message.status
    return out
