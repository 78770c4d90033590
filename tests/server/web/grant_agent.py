"""The agent the grant tests serve (SPEC rule 16): the CLI's, the pages' and the browser's.

``handrail serve grant_agent:agent`` (run from this folder) serves it; the tests also
build it on a store. Its policy::

    execute_sql  role dba; approve, edit or reject; grantable
    lookup       anyone; approve or reject; grantable
    wire_money   role dba; approve or reject; grantable: False
    drop_table   role dba; approve or reject; two approvals (so it grants nothing)

The user message names the call: ``sql Q`` (``execute_sql`` with ``query`` Q), ``lookup
K``, ``wire N`` (cents), ``drop T``; once the tool ran, the model says ``done: ...``.

What ran is kept in :data:`RAN` and, when ``HANDRAIL_GRANT_LEDGER`` names a file, as a
line of JSON per call there: the ledger a test of a ``handrail serve`` process reads.
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
    tool,
)

RAN: list[tuple[str, dict[str, Any]]] = []
POLICY: dict[str, Any] = {
    "execute_sql": {"allowed_decisions": ["approve", "edit", "reject"], "reviewers": ["dba"]},
    "lookup": {"allowed_decisions": ["approve", "reject"]},
    "wire_money": {"allowed_decisions": ["approve", "reject"], "reviewers": ["dba"], "grantable": False},
    "drop_table": {"allowed_decisions": ["approve", "reject"], "reviewers": ["dba"], "required_approvals": 2},
}


def _ran(name: str, args: dict[str, Any]) -> None:
    RAN.append((name, args))
    ledger = os.environ.get("HANDRAIL_GRANT_LEDGER")
    if ledger:
        with open(ledger, "a", encoding="utf-8") as out:
            out.write(json.dumps({"tool": name, "args": args}) + "\n")


@tool
def execute_sql(query: str) -> str:
    """Run a SQL statement."""
    _ran("execute_sql", {"query": query})
    return f"ran {query}"


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    _ran("lookup", {"key": key})
    return f"found {key}"


@tool
def wire_money(amount_cents: int) -> str:
    """Send money."""
    _ran("wire_money", {"amount_cents": amount_cents})
    return f"sent {amount_cents}"


@tool
def drop_table(name: str) -> str:
    """Drop a table."""
    _ran("drop_table", {"name": name})
    return f"dropped {name}"


def next_turn(messages: list[Any]) -> AIMessage:
    last = messages[-1]
    if not isinstance(last, HumanMessage):
        return AIMessage(f"done: {last.text}")
    word, _, rest = last.text.partition(" ")
    if word == "lookup":
        return AIMessage("", tool_calls=[{"name": "lookup", "args": {"key": rest}}])
    if word == "wire":
        return AIMessage("", tool_calls=[{"name": "wire_money", "args": {"amount_cents": int(rest)}}])
    if word == "drop":
        return AIMessage("", tool_calls=[{"name": "drop_table", "args": {"name": rest}}])
    return AIMessage("", tool_calls=[{"name": "execute_sql", "args": {"query": rest}}])


def build(checkpointer: Any = None) -> Any:
    """The agent, on ``checkpointer`` (``handrail serve`` gives it its store)."""
    return create_agent(
        ScriptedModel([next_turn] * 100_000),
        tools=[execute_sql, lookup, wire_money, drop_table],
        middleware=[HumanInTheLoopMiddleware(POLICY)],
        checkpointer=checkpointer or InMemorySaver(),
        name="grants",
    )


agent = build()
