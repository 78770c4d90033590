"""The agent the review-policy display tests serve: ``execute_sql`` needs two approvals.

``handrail serve policy_agent:agent`` (run from this folder) serves it. Its policy is the
one the tests of rules 14-15 on the pages use::

    {"execute_sql": {"allowed_decisions": ["approve", "edit", "reject"],
                     "required_approvals": 2, "expires_after": 3600}}

and ``lookup`` is reviewed the plain way (one approval, no expiry), to show a review
without either. The user message is the query (``lookup X`` asks to run ``lookup``).

What ran is kept in :data:`RAN` and, when ``HANDRAIL_POLICY_LEDGER`` names a file, a
line of JSON per call in it: the ledger a test in another process reads.
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
    "execute_sql": {
        "allowed_decisions": ["approve", "edit", "reject"],
        "required_approvals": 2,
        "expires_after": 3600,
    },
    "lookup": {"allowed_decisions": ["approve", "reject"]},
}


def _ran(name: str, args: dict[str, Any]) -> None:
    RAN.append((name, args))
    ledger = os.environ.get("HANDRAIL_POLICY_LEDGER")
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


def next_turn(messages: list[Any]) -> AIMessage:
    last = messages[-1]
    if not isinstance(last, HumanMessage):
        return AIMessage(f"done: {last.text}")
    word, _, rest = last.text.partition(" ")
    if word == "lookup":
        return AIMessage("", tool_calls=[{"name": "lookup", "args": {"key": rest}}])
    return AIMessage("", tool_calls=[{"name": "execute_sql", "args": {"query": last.text}}])


def build(checkpointer: Any = None) -> Any:
    """The agent, on ``checkpointer`` (``handrail serve`` gives it its store)."""
    return create_agent(
        ScriptedModel([next_turn] * 100_000),
        tools=[execute_sql, lookup],
        middleware=[HumanInTheLoopMiddleware(POLICY)],
        checkpointer=checkpointer or InMemorySaver(),
        name="policy",
    )


agent = build()
