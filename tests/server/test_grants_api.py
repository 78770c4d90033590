"""Grants over HTTP (SPEC rule 16), on SQLite and PostgreSQL: given with an approval through
the answer endpoint, listed and revoked under ``/handrail/grants``; judged by what ran."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import served_agent

from conftest import Backend
from handrail.server.app import create_app


class Served:
    def __init__(self, backend: Backend) -> None:
        self.agent = served_agent.build(backend.saver())
        self.app = create_app({"sql": self.agent}, db=backend.server_db(), sweep_every=None)
        self.tokens = self.app.state.service.tokens

    def token(self, name: str, *roles: str, scopes: tuple[str, ...] = ("run", "review")) -> dict[str, str]:
        _, token = self.tokens.create(name, list(roles), list(scopes))
        return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def served(backend: Backend) -> AsyncIterator[Served]:
    served_agent.RAN.clear()
    yield Served(backend)


@pytest.fixture
async def client(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=served.app), base_url="http://handrail.test"
    ) as found:
        yield found


async def ask(client: httpx.AsyncClient, headers: dict[str, str], query: str) -> tuple[str, list[Any]]:
    thread = (await client.post("/threads", json={}, headers=headers)).json()["thread_id"]
    reply = await client.post(
        f"/threads/{thread}/runs/wait",
        json={"assistant_id": "sql", "input": {"messages": [{"role": "user", "content": query}]}},
        headers=headers,
    )
    assert reply.status_code == 200, reply.text
    return thread, reply.json().get("__interrupt__", [])


async def test_an_approval_with_a_grant_lets_later_calls_run_and_a_revoke_ends_it(
    served: Served, client: httpx.AsyncClient
) -> None:
    app, dba, ops = served.token("app"), served.token("dana", "dba"), served.token("olga", "ops")
    thread, (review,) = await ask(client, app, "VACUUM")
    grant = {"scope": "agent", "ttl": 3600}
    answered = await client.post(
        f"/handrail/threads/{thread}/interrupts/{review['id']}/answer?wait=true",
        json={"answer": {"decisions": [{"type": "approve", "grant": grant}]}},
        headers=dba,
    )
    assert answered.status_code == 200, answered.text
    _, asked = await ask(client, app, "ANALYZE")  # another thread of the agent: covered
    assert asked == []
    assert [q["query"] for _, q in served_agent.RAN] == ["VACUUM", "ANALYZE"]
    listed = (await client.get("/handrail/grants", headers=dba)).json()["items"]
    assert [(g["tool"], g["scope"], g["given_by"]["id"], g["in_force"]) for g in listed] == [
        ("execute_sql", "agent", "dana", True)
    ]
    grant_id = listed[0]["grant_id"]
    assert (await client.get("/handrail/grants", headers=ops)).json()["items"] == []  # not ops's tool
    refused = await client.post(f"/handrail/grants/{grant_id}/revoke", headers=ops)
    assert refused.status_code == 404, refused.text
    revoked = await client.post(f"/handrail/grants/{grant_id}/revoke", headers=dba)
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["revoked_by"]["id"] == "dana" and revoked.json()["in_force"] is False
    _, asked = await ask(client, app, "REINDEX")
    assert len(asked) == 1 and [q["query"] for _, q in served_agent.RAN] == ["VACUUM", "ANALYZE"]
    assert (await client.get("/handrail/grants", headers=dba)).json()["items"] == []
    every = (await client.get("/handrail/grants?active=false", headers=dba)).json()["items"]
    assert [g["revoked_at"] is not None for g in every] == [True]


async def test_a_grant_that_cannot_be_given_is_a_422_and_saves_nothing(
    served: Served, client: httpx.AsyncClient
) -> None:
    app, dba = served.token("app"), served.token("dana", "dba")
    thread, (review,) = await ask(client, app, "VACUUM")
    for grant, said in (
        ({"scope": "everywhere", "ttl": 60}, "scope"),
        ({"scope": "thread"}, "ttl"),
        ({"scope": "thread", "uses": 0}, "uses"),
        ({"scope": "thread", "uses": 1, "tools": ["*"]}, "unexpected"),
    ):
        reply = await client.post(
            f"/handrail/threads/{thread}/interrupts/{review['id']}/answer",
            json={"answer": {"decisions": [{"type": "approve", "grant": grant}]}},
            headers=dba,
        )
        assert reply.status_code == 422, reply.text
        assert said in reply.json()["detail"]
    assert served_agent.RAN == []
    assert (await client.get("/handrail/grants?active=false", headers=dba)).json()["items"] == []


async def test_the_grant_routes_need_a_credential_and_the_review_scope(
    served: Served, client: httpx.AsyncClient
) -> None:
    runner = served.token("app", scopes=("run",))
    assert (await client.get("/handrail/grants")).status_code == 401
    assert (await client.get("/handrail/grants", headers=runner)).status_code == 403
    assert (await client.post("/handrail/grants/abc/revoke", headers=runner)).status_code == 403
    dba = served.token("dana", "dba")
    assert (await client.post("/handrail/grants/not-hex!/revoke", headers=dba)).status_code == 400
    assert (await client.post("/handrail/grants/abc/revoke", headers=dba)).status_code == 404


async def test_a_reviewer_without_the_tools_role_cannot_grant_it_or_see_its_reviews(
    served: Served, client: httpx.AsyncClient
) -> None:
    """The doors of rule 16 with an ordinary credential: an approval carrying a grant from a
    reviewer whose roles do not decide the tool is a 403 and gives nothing; the inbox's
    thread filter shows them nothing of the thread; the ledger says nothing ran."""
    app, ops, dba = served.token("app"), served.token("olga", "ops"), served.token("dana", "dba")
    thread, (review,) = await ask(client, app, "DROP TABLE users")
    grant = {"scope": "agent", "ttl": 3600, "uses": 100}
    refused = await client.post(
        f"/handrail/threads/{thread}/interrupts/{review['id']}/answer?wait=true",
        json={"answer": {"decisions": [{"type": "approve", "grant": grant}]}},
        headers=ops,
    )
    assert refused.status_code == 403, refused.text
    looked = await client.get(f"/handrail/inbox?thread_id={thread}", headers=ops)
    assert looked.status_code == 200 and looked.json()["items"] == []
    _, asked = await ask(client, app, "DROP TABLE orders")  # no grant: asked like any other
    assert len(asked) == 1
    assert served_agent.RAN == []
    assert (await client.get("/handrail/grants?active=false", headers=dba)).json()["items"] == []
    assert [
        i["thread_id"]
        for i in (await client.get(f"/handrail/inbox?thread_id={thread}", headers=dba)).json()["items"]
    ] == [thread]
