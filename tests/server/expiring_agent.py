"""An agent whose SQL reviews expire one second after they are asked (SPEC rule 15).

``handrail sweep expiring_agent:agent`` (run from this folder) sweeps its threads; the
tests build it in-process on the same store. Reviews expire into ``on_expiry="approve"``,
so each resolution shows in the ledger once a worker runs it.
"""

from __future__ import annotations

from typing import Any

from handrail import (
    AIMessage,
    HumanInTheLoopMiddleware,
    HumanMessage,
    InMemorySaver,
    ScriptedModel,
    create_agent,
)

RAN: list[str] = []


def execute_sql(query: str) -> str:
    """Run a SQL statement."""
    RAN.append(query)
    return f"ran {query}"


def next_turn(messages: list[Any]) -> AIMessage:
    last = messages[-1]
    if isinstance(last, HumanMessage):
        return AIMessage("", tool_calls=[{"name": "execute_sql", "args": {"query": last.text}}])
    return AIMessage(f"done: {last.text}")


def build(checkpointer: Any = None) -> Any:
    """The agent, on ``checkpointer`` (default: in memory; ``handrail sweep`` gives its own)."""
    policy = {"allowed_decisions": ["approve", "reject"], "expires_after": 1, "on_expiry": "approve"}
    return create_agent(
        ScriptedModel([next_turn] * 100_000),
        tools=[execute_sql],
        middleware=[HumanInTheLoopMiddleware({"execute_sql": policy})],
        checkpointer=checkpointer or InMemorySaver(),
        name="expiring",
    )


agent = build()
