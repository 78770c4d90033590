"""Helpers shared by the tests (importable as ``_support``; fixtures live in conftest)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from handrail import Agent


class Ledger:
    """Records every tool execution, so tests can say exactly what ran."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


SPEC_POLICY: dict[str, Any] = {
    "write_file": True,
    "execute_sql": {
        "allowed_decisions": ["approve", "reject"],
        "description": "SQL execution needs DBA approval",
    },
    "read_data": False,
}


def call(name: str, call_id: str | None = None, **args: Any) -> dict[str, Any]:
    """A scripted tool call."""
    out: dict[str, Any] = {"name": name, "args": args}
    if call_id is not None:
        out["id"] = call_id
    return out


def turn(*calls: dict[str, Any], content: str = "") -> dict[str, Any]:
    """A scripted model turn that proposes ``calls``."""
    return {"content": content, "tool_calls": list(calls)}


AgentFactory = Callable[..., Agent]


def config(thread_id: str = "t1", **configurable: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, **configurable}}


def events_of(agent: Agent, thread_id: str = "t1") -> list[tuple[int, str, bytes]]:
    """The raw stored log of a thread: used to show that a refused input saved nothing."""
    store = agent.checkpointer
    assert store is not None
    read = store.read(thread_id)
    return [(e.seq, e.kind, e.payload) for e in read.events]


def resealed(thread_id: str, rows: list[Any]) -> list[Any]:
    """Stored ``rows`` sealed again in order, as a writer with a bug would have stored them:
    their hashes match, whatever they hold (tests of rule 10 past rule 18's check)."""
    from dataclasses import replace

    from handrail.checkpoint.integrity import GENESIS, seal, unseal

    out, prev = [], GENESIS
    for row in rows:
        payload, prev = seal(prev, thread_id, row.seq, row.kind, row.created_at, unseal(row.payload)[1])
        out.append(replace(row, payload=payload))
    return out
