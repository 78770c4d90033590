"""The agent the service tests serve: a scripted model that asks to run SQL, then reports.

``handrail serve served_agent:agent`` (run from this folder) serves it; the tests also
build it in-process. ``execute_sql`` is reviewed by the ``dba`` role only; ``write_file``
by anyone. A user message ``"write NAME"`` makes it propose ``write_file`` instead, ``"block PATH"``
an unreviewed call that waits for a file (to kill a service in the middle of a tool), and
``"fail WHY"`` makes the model itself fail (a ``RuntimeError``: a run's own error).

Every real execution is recorded in ``RAN`` and, when ``HANDRAIL_TEST_LEDGER`` names a
file, as a JSON line there too: a test of a ``handrail serve`` process reads what ran.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from handrail import (
    AIMessage,
    HumanInTheLoopMiddleware,
    HumanMessage,
    InMemorySaver,
    ScriptedModel,
    create_agent,
)

RAN: list[tuple[str, dict[str, Any]]] = []


def ran(name: str, args: dict[str, Any]) -> None:
    """Record one real execution of a tool."""
    RAN.append((name, args))
    ledger = os.environ.get("HANDRAIL_TEST_LEDGER")
    if ledger:
        with open(ledger, "a") as file:
            file.write(json.dumps([name, args]) + "\n")


def execute_sql(query: str) -> str:
    """Run a SQL statement."""
    ran("execute_sql", {"query": query})
    return f"ran {query}"


def write_file(path: str, content: str) -> str:
    """Write a file."""
    ran("write_file", {"path": path, "content": content})
    return f"wrote {path}"


def block(path: str) -> str:
    """Mark that it started (PATH.started), then wait for PATH.go: a tool to kill a process in."""
    Path(path + ".started").write_text("started")
    deadline = time.monotonic() + 120
    while not Path(path + ".go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    ran("block", {"path": path})
    return f"unblocked {path}"


def next_turn(messages: list[Any]) -> AIMessage:
    last = messages[-1]
    if isinstance(last, HumanMessage):
        text = last.text
        if text.startswith("block "):
            return AIMessage("", tool_calls=[{"name": "block", "args": {"path": text[6:]}}])
        if text.startswith("fail "):
            raise RuntimeError(f"the model is down: {text[5:]}")
        if text.startswith("write "):
            return AIMessage(
                "", tool_calls=[{"name": "write_file", "args": {"path": text[6:], "content": "x"}}]
            )
        return AIMessage("", tool_calls=[{"name": "execute_sql", "args": {"query": text}}])
    return AIMessage(f"done: {last.text}")


def build(checkpointer: Any = None) -> Any:
    """The agent, on ``checkpointer`` (default: in memory; ``handrail serve`` gives its own)."""
    return create_agent(
        ScriptedModel([next_turn] * 100_000),
        tools=[execute_sql, write_file, block],
        middleware=[
            HumanInTheLoopMiddleware(
                {
                    "execute_sql": {"allowed_decisions": ["approve", "reject"], "reviewers": ["dba"]},
                    "write_file": True,
                }
            )
        ],
        checkpointer=checkpointer or InMemorySaver(),
        name="sql",
    )


agent = build()
