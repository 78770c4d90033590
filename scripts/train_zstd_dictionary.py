"""How the Zstandard dictionary of storage format v2 was made (``runtime/events.py``).

Stored payloads are small JSON documents (a few hundred bytes to a few kB), too small
for a compressor to learn much from each on its own. A dictionary gives it the
strings and the symbol statistics that handrail's events share, so each payload
compresses better and faster (its entropy tables come ready-made).

The samples come from a made-up agent: three tools (``send_email``, ``read_data``,
``refund_payment``) reviewed by ``HumanInTheLoopMiddleware`` with every kind of
decision, and text drawn from the fixed word list below. Nothing of the benchmark's
workload (its tools, arguments or text) is in it, so the dictionary knows handrail's
record structure and ordinary English, not any particular agent.

The dictionary in ``events.py`` must never change: every payload written with marker
``0x04`` needs exactly those bytes to load. A better dictionary later is a new format
version with a new marker. This script is kept to show how v2 was made (the records
hold random ids, so a rerun trains a similar dictionary, not the same bytes)::

    .venv/bin/python scripts/train_zstd_dictionary.py        # prints the base64 of v2
"""

from __future__ import annotations

import base64
import random
from typing import Any

import zstandard

from handrail import Command, HumanInTheLoopMiddleware, InMemorySaver, ScriptedModel, create_agent, tool
from handrail.runtime.events import unpack_payload

DICTIONARY_BYTES = 4096
THREADS, TURNS = 30, 10

_WORD_TEXT = """
account action address agent agreement amount answer approve archive balance batch
before billing board budget build calendar call campaign change check client close
cluster code comment company confirm contract copy cost customer daily data date
deadline delete delivery deploy design detail draft due email employee error event
export feature file finance follow form friday grant group handle help history hold
import incident invoice issue item job label launch ledger limit list log manager
march meeting memo message migrate monday month note notice number office open order
owner page partner payment pending plan policy price priority process product project
quarter query queue quote read receipt record refund region release remind report
request review revenue risk role schedule screen search send server service session
share ship sign staff status store summary supplier support table task team thanks
ticket today total track transfer update upload urgent user vendor version week
welcome window workflow write year please could would should the a an and or of to in
for on with from by at as is are was will be this that these those our your their it
we you they he she not no yes all any each every more most some new old next last
"""
WORDS = _WORD_TEXT.split()


def _text(rng: random.Random, length: int) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < length:
        words.append(rng.choice(WORDS))
    return " ".join(words).capitalize() + "."


def samples(seed: int = 2) -> list[bytes]:
    """The JSON payloads of a made-up reviewed agent's threads, as handrail stores them."""
    rng = random.Random(seed)

    @tool
    def send_email(to: str, subject: str, body: str) -> str:
        """Send an email."""
        return f"Sent to {to}."

    @tool
    def read_data(table: str, limit: int = 10) -> str:
        """Read rows from a table."""
        return _text(rng, 80)

    @tool
    def refund_payment(order_id: str, amount: float) -> str:
        """Refund an order."""
        return f"Refunded {amount} on {order_id}."

    def arguments(name: str) -> dict[str, Any]:
        if name == "send_email":
            return {
                "to": f"{rng.choice(WORDS)}@example.com",
                "subject": _text(rng, 30),
                "body": _text(rng, rng.randrange(50, 400)),
            }
        if name == "read_data":
            return {"table": rng.choice(WORDS), "limit": rng.randrange(1, 100)}
        return {"order_id": f"ord-{rng.randrange(10**6)}", "amount": round(rng.uniform(1, 500), 2)}

    def answer(messages: list[Any]) -> dict[str, Any]:
        tools = ["send_email", "read_data", "refund_payment"]
        names = [rng.choice(tools) for _ in range(rng.randrange(1, 4))]
        calls = [{"name": name, "args": arguments(name)} for name in names]
        return {"content": _text(rng, rng.randrange(10, 120)), "tool_calls": calls}

    saver = InMemorySaver()
    agent = create_agent(
        ScriptedModel([answer] * (THREADS * (TURNS + 1))),
        [send_email, read_data, refund_payment],
        middleware=[
            HumanInTheLoopMiddleware({"send_email": True, "read_data": True, "refund_payment": True})
        ],
        checkpointer=saver,
    )
    out: list[bytes] = []
    for n in range(THREADS):
        config = {"configurable": {"thread_id": f"s{n}"}}
        result = agent.invoke({"messages": [{"role": "user", "content": _text(rng, 60)}]}, config)
        for _ in range(TURNS):
            (pending,) = result["__interrupt__"]
            decisions = []
            for request in pending.value["action_requests"]:
                kind = rng.choice(["approve", "approve", "edit", "reject", "respond"])
                decision: dict[str, Any] = {"type": kind}
                if kind == "edit":
                    decision["edited_action"] = {"name": request["name"], "args": arguments(request["name"])}
                elif kind in ("reject", "respond"):
                    decision["message"] = _text(rng, 50)
                decisions.append(decision)
            result = agent.invoke(Command(resume={pending.id: {"decisions": decisions}}), config)
        out += [unpack_payload(e.payload, f"s{n}", "record") for e in saver.read(f"s{n}").events]
    return out


def main() -> None:
    trained = zstandard.train_dictionary(DICTIONARY_BYTES, samples(), level=1, threads=1)
    encoded = base64.b64encode(trained.as_bytes()).decode()
    for start in range(0, len(encoded), 96):
        print(encoded[start : start + 96])


if __name__ == "__main__":
    main()
