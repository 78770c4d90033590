"""An agent whose one request makes two tool calls in turn: ``execute_sql``, then (given its
result) ``write_file`` of a report. Both are reviewed in its code; its name is ``sql``.

``handrail worker chained_agent:agent`` (from this folder) runs an answered ``execute_sql``
and then meets the ``write_file`` call under the worker's own policy: what the policy
reload tests of the worker judge. The tools are ``served_agent``'s, so every execution is
a line of the ``HANDRAIL_TEST_LEDGER`` file too.
"""

from __future__ import annotations

from typing import Any

from served_agent import execute_sql, write_file

from handrail import (
    AIMessage,
    HumanInTheLoopMiddleware,
    HumanMessage,
    InMemorySaver,
    ScriptedModel,
    ToolMessage,
    create_agent,
)


def next_turn(messages: list[Any]) -> AIMessage:
    last = messages[-1]
    if isinstance(last, HumanMessage):
        return AIMessage("", tool_calls=[{"name": "execute_sql", "args": {"query": last.text}}])
    if isinstance(last, ToolMessage) and last.name == "execute_sql":
        report = {"path": "report.txt", "content": last.text}
        return AIMessage("", tool_calls=[{"name": "write_file", "args": report}])
    return AIMessage(f"done: {last.text}")


def build(checkpointer: Any = None) -> Any:
    """The agent, on ``checkpointer`` (default: in memory; ``handrail worker`` gives its own)."""
    return create_agent(
        ScriptedModel([next_turn] * 100_000),
        tools=[execute_sql, write_file],
        middleware=[HumanInTheLoopMiddleware({"execute_sql": True, "write_file": True})],
        checkpointer=checkpointer or InMemorySaver(),
        name="sql",
    )


agent = build()
