"""The agent the web inbox tests serve: a scripted model whose next call the user message names.

``handrail serve web_agent:agent`` (run from this folder) serves it. Every tool needs a
role, so a reviewer with none of them sees nothing to decide:

* ``execute_sql`` - role ``dba``; approve or reject;
* ``refund`` - role ``support``; every decision; typed arguments (an integer, an enum,
  a boolean, an optional note) for the edit form;
* ``write_file`` - roles ``support`` or ``dba``; every decision;
* ``archive`` - role ``support``; its argument model refuses paths outside ``/srv/``,
  a check the JSON schema cannot show (so the page passes it and the library refuses).

User messages: ``sql Q``, ``refund N`` (cents), ``write PATH CONTENT``, ``archive PATH``,
``two`` (one turn with a refund and a file write, reviewed together), ``big N`` (a file
write whose content is N characters, made here: a request that large could not be sent),
``emoji`` (a file write whose content holds an emoji sequence and an em dash).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, field_validator

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


@tool
def execute_sql(query: str) -> str:
    """Run a SQL statement."""
    RAN.append(("execute_sql", {"query": query}))
    return f"ran {query}"


@tool
def refund(
    payment_id: str,
    amount_cents: int,
    reason: Literal["duplicate", "fraud", "other"],
    notify: bool = True,
    note: str | None = None,
) -> str:
    """Refund a payment, in full or in part.

    Args:
        payment_id: The payment to refund.
        amount_cents: How much, in cents.
        reason: Why.
        notify: Whether to email the customer.
        note: A note for the ledger.
    """
    kind = type(amount_cents).__name__
    RAN.append(("refund", {"payment_id": payment_id, "amount_cents": amount_cents}))
    return f"refunded {amount_cents} cents ({kind}) on {payment_id}, reason {reason}, notify {notify}"


@tool
def write_file(path: str, content: str) -> str:
    """Write a file."""
    RAN.append(("write_file", {"path": path, "content": content}))
    return f"wrote {len(content)} bytes to {path}"


class ArchiveArgs(BaseModel):
    path: str

    @field_validator("path")
    @classmethod
    def under_srv(cls, value: str) -> str:
        if not value.startswith("/srv/"):
            raise ValueError("only files under /srv/ may be archived")
        return value


@tool(args_schema=ArchiveArgs)
def archive(path: str) -> str:
    """Move a file to the archive."""
    return f"archived {path}"


def next_turn(messages: list[Any]) -> AIMessage:
    last = messages[-1]
    if not isinstance(last, HumanMessage):
        return AIMessage(f"done: {last.text}")
    word, _, rest = last.text.partition(" ")
    if word == "refund":
        args = {"payment_id": "pay_8812", "amount_cents": int(rest), "reason": "duplicate"}
        return AIMessage("", tool_calls=[{"name": "refund", "args": args}])
    if word == "write":
        path, _, content = rest.partition(" ")
        return AIMessage("", tool_calls=[{"name": "write_file", "args": {"path": path, "content": content}}])
    if word == "archive":
        return AIMessage("", tool_calls=[{"name": "archive", "args": {"path": rest}}])
    if word == "big":
        content = ("0123456789abcdef" * (int(rest) // 16 + 1))[: int(rest)]
        return AIMessage(
            "", tool_calls=[{"name": "write_file", "args": {"path": "/tmp/big", "content": content}}]
        )
    if word == "emoji":
        content = "hello \U0001f469\u200d\U0001f4bb \u2014 \U0001f44d"
        return AIMessage(
            "", tool_calls=[{"name": "write_file", "args": {"path": "/tmp/emoji", "content": content}}]
        )
    if word == "two":
        refund_args = {"payment_id": "pay_1", "amount_cents": 700, "reason": "other"}
        calls = [
            {"name": "refund", "args": refund_args},
            {"name": "write_file", "args": {"path": "/tmp/ledger", "content": "refund pay_1"}},
        ]
        return AIMessage("", tool_calls=calls)
    return AIMessage("", tool_calls=[{"name": "execute_sql", "args": {"query": rest or last.text}}])


def build(checkpointer: Any = None) -> Any:
    """The agent, on ``checkpointer`` (``handrail serve`` gives it its store)."""
    policy = {
        "execute_sql": {"allowed_decisions": ["approve", "reject"], "reviewers": ["dba"]},
        "refund": {"allowed_decisions": ["approve", "edit", "reject", "respond"], "reviewers": ["support"]},
        "write_file": {
            "allowed_decisions": ["approve", "edit", "reject", "respond"],
            "reviewers": ["support", "dba"],
        },
        "archive": {"allowed_decisions": ["approve", "edit", "reject"], "reviewers": ["support"]},
    }
    return create_agent(
        ScriptedModel([next_turn] * 100_000),
        tools=[execute_sql, refund, write_file, archive],
        middleware=[HumanInTheLoopMiddleware(policy)],
        checkpointer=checkpointer or InMemorySaver(),
        name="web",
    )


agent = build()
