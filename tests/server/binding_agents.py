"""Two agents with the same tools for the binding tests (SPEC rule 21): ``strict`` and ``lax``.

``strict`` has ``execute_sql`` reviewed by the ``dba`` role; ``lax`` reviews nothing. A
thread of ``strict`` continued as ``lax`` would run SQL nobody approved: the tests judge
that by the ledger the tools write (what actually ran), never by a reply.
``handrail serve binding_agents:strict --agent lax=binding_agents:lax`` (from this folder)
serves both; with ``HANDRAIL_BINDING_LEDGER`` naming a file, each execution is also a
JSON line there, for a test to read what a service process ran.
"""

from __future__ import annotations

import json
import os
from typing import Any

from handrail import (
    AIMessage,
    HumanInTheLoopMiddleware,
    HumanMessage,
    InMemorySaver,
    ScriptedModel,
    create_agent,
)

LEDGER: list[tuple[str, str]] = []
"""Every execution in this process: (tool, query)."""


def execute_sql(query: str) -> str:
    """Run a SQL statement."""
    LEDGER.append(("execute_sql", query))
    path = os.environ.get("HANDRAIL_BINDING_LEDGER")
    if path:
        with open(path, "a") as file:
            file.write(json.dumps(["execute_sql", query]) + "\n")
    return f"ran {query}"


def ledger_file(path: str) -> list[tuple[str, str]]:
    """What a process wrote to its ledger file."""
    try:
        with open(path) as file:
            return [tuple(json.loads(line)) for line in file if line.strip()]  # type: ignore[misc]
    except FileNotFoundError:
        return []


def next_turn(messages: list[Any]) -> AIMessage:
    """Each user message is a statement to run; after a tool's result, report it."""
    last = messages[-1]
    if isinstance(last, HumanMessage):
        return AIMessage("", tool_calls=[{"name": "execute_sql", "args": {"query": last.text}}])
    return AIMessage(f"done: {last.text}")


def build(kind: str, checkpointer: Any = None, *, name: str | None = "") -> Any:
    """``kind`` is ``strict`` (SQL reviewed by a dba) or ``lax`` (nothing reviewed).

    ``name``: the agent's own name (default: ``kind``; None: an unnamed agent).
    """
    middleware = []
    if kind == "strict":
        policy = {"execute_sql": {"allowed_decisions": ["approve", "reject"], "reviewers": ["dba"]}}
        middleware.append(HumanInTheLoopMiddleware(policy))
    return create_agent(
        ScriptedModel([next_turn] * 100_000),
        tools=[execute_sql],
        middleware=middleware,
        checkpointer=checkpointer or InMemorySaver(),
        name=kind if name == "" else name,
    )


strict = build("strict")
lax = build("lax")
