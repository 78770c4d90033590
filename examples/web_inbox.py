"""An agent to try the web inbox with: a support assistant whose refunds, emails and SQL are reviewed.

From the repository's folder (after ``make install``)::

    .venv/bin/handrail tokens create --db inbox.db --name alice --role support --role dba --scope run --scope review
    .venv/bin/handrail serve examples.web_inbox:agent --db inbox.db          # http://127.0.0.1:8000/inbox
    .venv/bin/python examples/web_inbox.py --token hr_...                    # conversations that pause

Then open http://127.0.0.1:8000/inbox and sign in with the token (or with the one-time
link ``.venv/bin/handrail tokens link alice --db inbox.db`` prints). The model is scripted: no API key.
Refunds and emails are reviewed by role ``support`` (every decision), SQL by ``dba``
(approve or reject).
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Literal

from handrail import (
    AIMessage,
    HumanInTheLoopMiddleware,
    HumanMessage,
    InMemorySaver,
    ScriptedModel,
    create_agent,
    tool,
)


@tool
def refund(
    payment_id: str,
    amount_cents: int,
    reason: Literal["duplicate", "fraud", "goodwill"],
    notify_customer: bool = True,
    note: str | None = None,
) -> str:
    """Refund a payment, in full or in part.

    Args:
        payment_id: The payment to refund.
        amount_cents: How much to give back, in cents.
        reason: Why the money goes back.
        notify_customer: Whether the customer gets an email about it.
        note: A note for the ledger.
    """
    return f"Refunded {amount_cents / 100:.2f} EUR on {payment_id} ({reason})."


@tool
def send_email(to: str, subject: str, body: str) -> str:
    """Send an email to a customer."""
    return f"Sent '{subject}' to {to}."


@tool
def execute_sql(query: str) -> str:
    """Run a SQL statement against the billing database."""
    return "3 rows affected."


CONVERSATIONS = [
    ("The invoice INV-8812 was charged twice.", {"team": "billing", "priority": "high"}),
    ("Tell ana@example.com the export is fixed.", {"team": "support"}),
    ("Clean up the test invoices.", {"team": "billing"}),
]


def _turn(messages: list[Any]) -> AIMessage:
    last = messages[-1]
    if not isinstance(last, HumanMessage):
        return AIMessage(f"Done: {last.text}")
    text = last.text
    if "charged twice" in text:
        refund_args = {"payment_id": "pay_8812", "amount_cents": 4900, "reason": "duplicate"}
        sql = {"query": "UPDATE invoices SET refunded = true WHERE id = 8812"}
        calls = [{"name": "refund", "args": refund_args}, {"name": "execute_sql", "args": sql}]
        return AIMessage("A double charge: I will refund the duplicate and mark it.", tool_calls=calls)
    if "@" in text:
        email = {
            "to": "ana@example.com",
            "subject": "Your nightly export is fixed",
            "body": "Hello Ana,\n\nthe export failed twice after a schema change; it is fixed and ran.\n",
        }
        return AIMessage("", tool_calls=[{"name": "send_email", "args": email}])
    sql = {"query": "DELETE FROM invoices WHERE customer_id IN (SELECT id FROM customers WHERE test)"}
    return AIMessage("", tool_calls=[{"name": "execute_sql", "args": sql}])


def build(checkpointer: Any = None) -> Any:
    """The agent (``handrail serve`` gives it the service's store)."""
    every = ["approve", "edit", "reject", "respond"]
    policy = {
        "refund": {"allowed_decisions": every, "reviewers": ["support"]},
        "send_email": {"allowed_decisions": every, "reviewers": ["support"]},
        "execute_sql": {"allowed_decisions": ["approve", "reject"], "reviewers": ["dba"]},
    }
    return create_agent(
        ScriptedModel([_turn] * 1_000_000),
        tools=[refund, send_email, execute_sql],
        middleware=[HumanInTheLoopMiddleware(policy)],
        checkpointer=checkpointer or InMemorySaver(),
        name="support",
    )


agent = build()


def start_conversations(url: str, token: str) -> list[str]:
    """Start the example conversations on the service at ``url``; each pauses for review."""
    import httpx

    threads = []
    with httpx.Client(base_url=url, headers={"x-api-key": token}, timeout=60) as http:
        for text, metadata in CONVERSATIONS:
            reply = http.post("/threads", json={"metadata": metadata})
            reply.raise_for_status()
            thread = reply.json()["thread_id"]
            run = {"assistant_id": "support", "input": {"messages": [{"role": "user", "content": text}]}}
            http.post(f"/threads/{thread}/runs/wait", json=run).raise_for_status()
            threads.append(thread)
    return threads


def main() -> None:
    parser = argparse.ArgumentParser(description="Start conversations that pause for review.")
    parser.add_argument("--url", default=os.environ.get("HANDRAIL_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--token", default=os.environ.get("HANDRAIL_TOKEN"), help="or $HANDRAIL_TOKEN")
    args = parser.parse_args()
    if not args.token:
        parser.error("give a token: --token hr_... (make one with 'handrail tokens create')")
    for thread in start_conversations(args.url, args.token):
        print(f"thread {thread} waits for review")
    print(f"Open {args.url}/inbox")


if __name__ == "__main__":
    main()
