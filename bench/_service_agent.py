"""The agent bench/service.py serves: every turn proposes one reviewed SQL call, forever.

``handrail serve _service_agent:agent`` (from bench/) serves it; the library side of the
benchmark builds the same agent with :func:`build`.
"""

from __future__ import annotations

from typing import Any

from handrail import AIMessage, HumanInTheLoopMiddleware, InMemorySaver, ScriptedModel, create_agent


def execute_sql(query: str) -> str:
    """Run a SQL statement."""
    return "1 row affected"


def _turn(messages: list[Any]) -> AIMessage:
    return AIMessage(
        "", tool_calls=[{"name": "execute_sql", "args": {"query": f"UPDATE t SET n = {len(messages)}"}}]
    )


def build(checkpointer: Any = None) -> Any:
    """The benchmark agent on ``checkpointer``."""
    return create_agent(
        ScriptedModel([_turn] * 10_000_000),
        tools=[execute_sql],
        middleware=[HumanInTheLoopMiddleware({"execute_sql": {"allowed_decisions": ["approve", "reject"]}})],
        checkpointer=checkpointer or InMemorySaver(),
        name="bench",
    )


agent = build()
