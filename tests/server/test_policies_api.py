"""Review policies over HTTP (SPEC rules 13-15), on SQLite and PostgreSQL.

The identity that started a run is the credential that sent its input; answers carry the
answering credential's identity. Judged by what ran (the tools' ledger), not the replies.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from conftest import Backend
from handrail import HumanInTheLoopMiddleware, ScriptedModel, create_agent
from handrail.runtime import answering
from handrail.server.app import create_app

RAN: list[dict[str, Any]] = []
APPROVE = {"answer": {"decisions": [{"type": "approve"}]}}


def execute_sql(query: str) -> str:
    """Run a SQL statement."""
    RAN.append({"query": query})
    return f"ran {query}"


def build(saver: Any) -> Any:
    def turn(messages: list[Any]) -> Any:
        from handrail import AIMessage, HumanMessage

        last = messages[-1]
        if isinstance(last, HumanMessage):
            return AIMessage("", tool_calls=[{"name": "execute_sql", "args": {"query": last.text}}])
        return AIMessage(f"done: {last.text}")

    policy = {
        "execute_sql": {
            "allowed_decisions": ["approve", "edit", "reject"],
            "reviewers": ["dba"],
            "required_approvals": 2,
            "allow_self_approval": False,
            "expires_after": 3600,
        }
    }
    return create_agent(
        ScriptedModel([turn] * 1000),
        tools=[execute_sql],
        middleware=[HumanInTheLoopMiddleware(policy)],
        checkpointer=saver,
        name="sql",
    )


class Served:
    def __init__(self, backend: Backend) -> None:
        self.agent = build(backend.saver())
        self.db = backend.server_db()
        self.app = create_app({"sql": self.agent}, db=self.db, sweep_every=None)
        self.tokens = self.app.state.service.tokens

    def token(self, name: str, *roles: str) -> dict[str, str]:
        _, token = self.tokens.create(name, list(roles), ["run", "review"])
        return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def served(backend: Backend) -> AsyncIterator[Served]:
    RAN.clear()
    yield Served(backend)


@pytest.fixture
async def client(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=served.app), base_url="http://handrail.test"
    ) as found:
        yield found


async def paused(client: httpx.AsyncClient, headers: dict[str, str], query: str) -> tuple[str, str]:
    thread = (await client.post("/threads", json={}, headers=headers)).json()["thread_id"]
    reply = await client.post(
        f"/threads/{thread}/runs/wait",
        json={"assistant_id": "sql", "input": {"messages": [{"role": "user", "content": query}]}},
        headers=headers,
    )
    assert reply.status_code == 200, reply.text
    return thread, reply.json()["__interrupt__"][0]["id"]


async def answer(
    client: httpx.AsyncClient, thread: str, interrupt: str, headers: dict[str, str], body: Any = APPROVE
) -> httpx.Response:
    return await client.post(
        f"/handrail/threads/{thread}/interrupts/{interrupt}/answer?wait=true", json=body, headers=headers
    )


async def test_the_starter_may_not_approve_over_http_and_two_others_must(
    served: Served, client: httpx.AsyncClient
) -> None:
    """Rules 13 and 14: the credential that started the run is refused (403, nothing saved);
    two other reviewers' approvals run the call once; the first one's reply says 1 of 2."""
    alice, bob, carol = served.token("alice", "dba"), served.token("bob", "dba"), served.token("carol", "dba")
    thread, interrupt = await paused(client, alice, "DELETE FROM logs")
    refused = await answer(client, thread, interrupt, alice)
    assert refused.status_code == 403, refused.text
    assert "started this run" in refused.json()["detail"] and "reject" in refused.json()["detail"]
    first = await answer(client, thread, interrupt, bob)
    assert first.status_code == 200, first.text
    assert first.json()["waiting"] is True
    assert (
        first.json()["approvals"][0]["approved_by"] == ["bob"] and first.json()["approvals"][0]["needed"] == 2
    )
    inbox = (await client.get("/handrail/inbox", headers=carol)).json()["items"]
    assert inbox[0]["approvals"][0]["approvals"] == 1 and inbox[0]["expires_at"] is not None
    again = await answer(client, thread, interrupt, bob)  # the same reviewer counts once
    assert again.json()["waiting"] is True and RAN == []
    second = await answer(client, thread, interrupt, carol)
    assert second.status_code == 200, second.text
    assert second.json()["waiting"] is False
    assert RAN == [{"query": "DELETE FROM logs"}]
    entries = (await client.get(f"/handrail/threads/{thread}/audit", headers=carol)).json()
    kinds = [(e["event"], e.get("kind")) for e in entries if e["event"] in ("approval", "answered")]
    assert kinds == [
        ("approval", "1 of 2"),
        ("approval", "1 of 2"),
        ("approval", "2 of 2"),
        ("answered", "quorum"),
    ]


async def test_the_starter_may_reject_its_own_call_over_http(
    served: Served, client: httpx.AsyncClient
) -> None:
    alice = served.token("alice", "dba")
    thread, interrupt = await paused(client, alice, "DROP TABLE users")
    rejected = await answer(client, thread, interrupt, alice, {"answer": {"decisions": [{"type": "reject"}]}})
    assert rejected.status_code == 200, rejected.text
    assert RAN == []


async def test_an_expired_review_is_a_409_naming_when_and_resolves_by_its_policy(
    served: Served, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule 15 over HTTP: after expiry an answer is a 409 with expired_at; the sweep resolves it
    with channel expiry; the call never runs (on_expiry reject)."""
    alice, bob = served.token("alice", "dba"), served.token("bob", "dba")
    thread, interrupt = await paused(client, alice, "TRUNCATE audit")
    monkeypatch.setattr(answering, "CLOCK", lambda: time.time() + 3601)
    late = await answer(client, thread, interrupt, bob)
    assert late.status_code == 409, late.text
    assert "expired" in late.json()["detail"] and late.json()["expired_at"]
    from handrail.sweep import asweep

    (expired,) = await asweep({"sql": served.agent})
    assert expired.interrupt_id == interrupt
    still = await answer(client, thread, interrupt, bob)
    assert still.status_code in (404, 409), still.text
    await served.agent.ainvoke(None, {"configurable": {"thread_id": thread}})
    assert RAN == []
    entries = (await client.get(f"/handrail/threads/{thread}/audit", headers=alice)).json()
    (answered,) = [e for e in entries if e["event"] == "answered"]
    assert answered["channel"] == "expiry" and answered["kind"] == "expired" and answered["reviewer"] is None
