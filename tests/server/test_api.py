"""The service's API through httpx against the real app, on SQLite and PostgreSQL (SPEC §5.3).

Rules 11 and 12 over HTTP: identity from the credential, roles enforced, deny by
default; problem details for every error, never a 500 from client input.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import served_agent

from conftest import Service

APPROVE = {"decisions": [{"type": "approve"}]}


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


async def paused(
    client: httpx.AsyncClient, headers: dict[str, str], text: str = "DELETE FROM logs"
) -> tuple[str, str]:
    """A new thread paused on its first review: (thread id, interrupt id)."""
    thread = (await client.post("/threads", json={"metadata": {"team": "data"}}, headers=headers)).json()
    reply = await client.post(
        f"/threads/{thread['thread_id']}/runs/wait",
        json={"assistant_id": "sql", "input": user(text)},
        headers=headers,
    )
    assert reply.status_code == 200, reply.text
    return thread["thread_id"], reply.json()["__interrupt__"][0]["id"]


def problem(reply: httpx.Response, status: int) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"].startswith("application/problem+json")
    body = reply.json()
    assert body["status"] == status and body["detail"]
    return body


async def test_every_request_needs_a_valid_credential(service: Service, client: httpx.AsyncClient) -> None:
    """Rule 12: deny is the default - no token, a bad token, a revoked token: 401."""
    problem(await client.post("/threads", json={}), 401)
    problem(await client.get("/handrail/inbox", headers={"Authorization": "Bearer nope"}), 401)
    headers = service.token("alice", "dba")
    assert (await client.get("/handrail/inbox", headers=headers)).status_code == 200
    service.tokens.revoke("alice")
    problem(await client.get("/handrail/inbox", headers=headers), 401)
    _, token = service.tokens.create("carol", [])
    assert (await client.get("/handrail/inbox", headers={"x-api-key": token})).status_code == 200


async def test_a_token_revoked_by_another_process_is_refused_within_a_second(
    service: Service, client: httpx.AsyncClient, monkeypatch: Any
) -> None:
    """A service trusts a token it verified for REMEMBER_SECONDS; revoked elsewhere (the
    tokens command, another service), it is refused once that time has passed."""
    import time

    from handrail.server import tokens as module
    from handrail.server.tokens import REMEMBER_SECONDS, TokenStore

    headers = service.token("erin", "dba")
    assert (await client.get("/handrail/inbox", headers=headers)).status_code == 200
    TokenStore(service.db).revoke("erin")  # as 'handrail tokens revoke' would, from elsewhere
    later = time.monotonic() + REMEMBER_SECONDS + 0.01
    monkeypatch.setattr(module, "_clock", lambda: later)
    problem(await client.get("/handrail/inbox", headers=headers), 401)


async def test_tokens_are_stored_hashed(service: Service) -> None:
    """Credentials: the token itself is never stored."""
    _, token = service.tokens.create("dana", ["ops"])
    rows = service.db.query("SELECT * FROM handrail_server_tokens")
    assert token not in repr(rows) and token[20:] not in repr(rows)


async def test_a_review_cycle_with_identities_from_the_credential(
    service: Service, client: httpx.AsyncClient
) -> None:
    """Rule 11: the answer is recorded with the token's identity, the time and channel http."""
    alice = service.token("alice", "dba")
    thread_id, interrupt_id = await paused(client, alice)
    reply = await client.post(
        f"/handrail/threads/{thread_id}/interrupts/{interrupt_id}/answer?wait=true",
        json={"answer": APPROVE, "reviewer": {"id": "mallory", "roles": ["dba"]}},  # forged: ignored
        headers=alice,
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["reviewer"] == {"id": "alice", "roles": ["dba"]}
    assert reply.json()["values"]["messages"][-1]["content"] == "done: ran DELETE FROM logs"
    trail = (await client.get(f"/handrail/threads/{thread_id}/audit", headers=alice)).json()
    (answered,) = [e for e in trail if e["event"] == "answered"]
    assert answered["reviewer"] == {"id": "alice", "roles": ["dba"]} and answered["channel"] == "http"
    assert answered["at"]
    csv = (await client.get(f"/handrail/threads/{thread_id}/audit?format=csv", headers=alice)).text
    assert csv.startswith("thread_id,seq,at,event") and ",http," in csv
    assert served_agent.RAN == [("execute_sql", {"query": "DELETE FROM logs"})]


async def test_a_wrong_role_gets_403_and_nothing_is_saved(
    service: Service, client: httpx.AsyncClient
) -> None:
    """Rule 12 over HTTP, through both ways in: handrail's answer path and runs with command.resume."""
    alice, bob = service.token("alice", "dba"), service.token("bob", "ops")
    thread_id, interrupt_id = await paused(client, alice)
    before = (await client.get(f"/handrail/threads/{thread_id}/audit", headers=alice)).json()
    body = problem(
        await client.post(
            f"/handrail/threads/{thread_id}/interrupts/{interrupt_id}/answer",
            json={"answer": APPROVE},
            headers=bob,
        ),
        403,
    )
    assert "'dba'" in body["detail"] and body["interrupt_id"] == interrupt_id
    problem(
        await client.post(
            f"/threads/{thread_id}/runs/wait",
            json={"assistant_id": "sql", "command": {"resume": {interrupt_id: APPROVE}}},
            headers=bob,
        ),
        403,
    )
    assert (await client.get(f"/handrail/threads/{thread_id}/audit", headers=alice)).json() == before
    assert served_agent.RAN == []
    reply = await client.post(
        f"/threads/{thread_id}/runs/wait",
        json={"assistant_id": "sql", "command": {"resume": {interrupt_id: APPROVE}}},
        headers=alice,
    )
    assert reply.status_code == 200 and "__interrupt__" not in reply.json()
    assert served_agent.RAN == [("execute_sql", {"query": "DELETE FROM logs"})]


async def test_the_inbox_lists_only_what_the_caller_may_decide(
    service: Service, client: httpx.AsyncClient
) -> None:
    """Rule 12: another reviewer's reviews never show, whatever filter is asked for."""
    alice, bob = service.token("alice", "dba"), service.token("bob", "ops")
    sql_thread, _ = await paused(client, alice)
    file_thread, _ = await paused(client, alice, "write notes.txt")
    alice_sees = (await client.get("/handrail/inbox", headers=alice)).json()["items"]
    bob_sees = (await client.get("/handrail/inbox", headers=bob)).json()["items"]
    assert {i["thread_id"] for i in alice_sees} == {sql_thread, file_thread}
    assert [i["thread_id"] for i in bob_sees] == [file_thread]
    assert (await client.get("/handrail/inbox?tool=execute_sql", headers=bob)).json()["items"] == []
    item = alice_sees[0]
    assert item["action_requests"][0]["name"] == "execute_sql"
    assert item["review_configs"][0]["allowed_decisions"] == ["approve", "reject"]
    assert item["review_configs"][0]["args_schema"]["properties"]["query"]["type"] == "string"
    assert item["last_messages"][0]["content"] == "DELETE FROM logs"
    assert item["metadata"]["team"] == "data"
    page = (await client.get("/handrail/inbox?limit=1", headers=alice)).json()
    rest = (await client.get(f"/handrail/inbox?limit=1&cursor={page['next_cursor']}", headers=alice)).json()
    assert [i["thread_id"] for i in page["items"] + rest["items"]] == [i["thread_id"] for i in alice_sees]
    filtered = await client.get('/handrail/inbox?metadata={"team": "other"}', headers=alice)
    assert filtered.json()["items"] == []


async def test_a_second_answer_is_409_naming_who_and_when(
    service: Service, client: httpx.AsyncClient
) -> None:
    """Rule 8 over HTTP: the loser hears who answered first and when; the tool runs once."""
    alice, dana = service.token("alice", "dba"), service.token("dana", "dba")
    thread_id, interrupt_id = await paused(client, alice)
    path = f"/handrail/threads/{thread_id}/interrupts/{interrupt_id}/answer"
    assert (
        await client.post(path + "?wait=true", json={"answer": APPROVE}, headers=alice)
    ).status_code == 200
    body = problem(await client.post(path, json={"answer": APPROVE}, headers=dana), 409)
    assert (
        body["answered_by"] == "alice"
        and body["answered_at"] in body["detail"]
        and "'alice'" in body["detail"]
    )
    assert served_agent.RAN == [("execute_sql", {"query": "DELETE FROM logs"})]


async def test_answers_refused_by_rule_5_are_422_with_the_library_message(
    service: Service, client: httpx.AsyncClient
) -> None:
    alice = service.token("alice", "dba")
    thread_id, interrupt_id = await paused(client, alice)
    path = f"/handrail/threads/{thread_id}/interrupts/{interrupt_id}/answer"
    body = problem(
        await client.post(path, json={"answer": {"decisions": [{"type": "edit"}]}}, headers=alice), 422
    )
    assert "allows only ['approve', 'reject']" in body["detail"]
    body = problem(await client.post(path, json={"answer": {"decisions": []}}, headers=alice), 422)
    assert "expected 1 decision" in body["detail"]
    assert (
        await client.post(path + "?wait=true", json={"answer": APPROVE}, headers=alice)
    ).status_code == 200


async def test_unknown_and_foreign_interrupt_ids_are_404(service: Service, client: httpx.AsyncClient) -> None:
    alice = service.token("alice", "dba")
    _first, first_interrupt = await paused(client, alice)
    second, _ = await paused(client, alice)
    problem(
        await client.post(
            f"/handrail/threads/{second}/interrupts/{first_interrupt}/answer",
            json={"answer": APPROVE},
            headers=alice,
        ),
        404,
    )
    problem(
        await client.post(
            f"/handrail/threads/nope/interrupts/{first_interrupt}/answer",
            json={"answer": APPROVE},
            headers=alice,
        ),
        404,
    )
    problem(await client.get("/threads/nope", headers=alice), 404)
    problem(await client.get("/threads/nope/state", headers=alice), 404)


async def test_a_stale_resume_after_a_newer_interrupt_is_refused(
    service: Service, client: httpx.AsyncClient
) -> None:
    """Rule 8: an answer addressed to an old interrupt never lands on the newer one."""
    alice = service.token("alice", "dba")
    thread_id, old = await paused(client, alice)
    answer_path = f"/handrail/threads/{thread_id}/interrupts/{old}/answer?wait=true"
    await client.post(answer_path, json={"answer": APPROVE}, headers=alice)
    reply = await client.post(
        f"/threads/{thread_id}/runs/wait",
        json={"assistant_id": "sql", "input": user("DROP TABLE t")},
        headers=alice,
    )
    newer = reply.json()["__interrupt__"][0]["id"]
    assert newer != old
    stale = await client.post(
        f"/threads/{thread_id}/runs/wait",
        json={"assistant_id": "sql", "command": {"resume": {old: APPROVE}}},
        headers=alice,
    )
    problem(stale, 409)
    assert [name for name, _ in served_agent.RAN] == ["execute_sql"]


async def test_bad_requests_get_problem_details_never_a_500(
    service: Service, client: httpx.AsyncClient
) -> None:
    alice = service.token("alice", "dba")
    headers = {**alice, "content-type": "application/json"}
    thread_id, interrupt_id = await paused(client, alice)
    problem(await client.post("/threads", content=b"{not json", headers=headers), 400)
    answer_path = f"/handrail/threads/{thread_id}/interrupts/{interrupt_id}/answer"
    problem(await client.post(answer_path, content=b"[1, 2", headers=headers), 400)
    problem(await client.post("/threads", content=b"{" + b" " * 2_000_000 + b"}", headers=headers), 413)
    runs = f"/threads/{thread_id}/runs"
    body = problem(
        await client.post(runs + "/wait", json={"assistant_id": "sql", "webhook": "x"}, headers=alice), 422
    )
    assert "webhook" in body["detail"]
    debug = {"assistant_id": "sql", "input": user("x"), "stream_mode": ["debug"]}
    body = problem(await client.post(runs + "/stream", json=debug, headers=alice), 422)
    assert "debug" in body["detail"]
    problem(
        await client.post("/runs/wait", json={"assistant_id": "nope", "input": user("x")}, headers=alice), 404
    )
    new_input = {"assistant_id": "sql", "input": user("x")}
    problem(await client.post(runs + "/wait", json=new_input, headers=alice), 409)  # still waiting for review
    problem(await client.get("/handrail/inbox?limit=0", headers=alice), 400)
    problem(await client.get("/handrail/inbox?metadata=[", headers=alice), 400)
    problem(await client.get("/handrail/inbox?cursor=zzz", headers=alice), 422)
    problem(await client.get("/no/such/path", headers=alice), 404)


async def test_markup_and_control_characters_come_back_as_data(
    service: Service, client: httpx.AsyncClient
) -> None:
    alice = service.token("alice", "dba")
    nasty = "<script>alert(1)</script>\x00\x1b[31m\u2028"
    thread_id, _interrupt_id = await paused(client, alice, nasty)
    reply = await client.get("/handrail/inbox", headers=alice)
    assert reply.headers["content-type"] == "application/json"
    assert reply.json()["items"][0]["action_requests"][0]["args"]["query"] == nasty
    assert "<script>" not in reply.text.replace("\\u003c", "<") or reply.json()  # JSON text, parsed as data
    state = await client.get(f"/threads/{thread_id}/state", headers=alice)
    assert state.json()["values"]["messages"][0]["content"] == nasty


async def test_threads_search_state_history_and_delete(service: Service, client: httpx.AsyncClient) -> None:
    alice = service.token("alice", "dba")
    thread_id, interrupt_id = await paused(client, alice)
    found = (await client.post("/threads/search", json={"status": "interrupted"}, headers=alice)).json()
    assert [t["thread_id"] for t in found] == [thread_id]
    assert found[0]["status"] == "interrupted" and found[0]["interrupts"]
    assert (await client.post("/threads/search", json={"metadata": {"team": "data"}}, headers=alice)).json()
    assert (
        await client.post("/threads/search", json={"metadata": {"team": "x"}}, headers=alice)
    ).json() == []
    state = (await client.get(f"/threads/{thread_id}/state", headers=alice)).json()
    assert state["interrupts"][0]["id"] == interrupt_id and state["next"] == [
        "HumanInTheLoopMiddleware.after_model"
    ]
    assert state["tasks"][0]["interrupts"][0]["id"] == interrupt_id
    history = (await client.post(f"/threads/{thread_id}/history", json={"limit": 5}, headers=alice)).json()
    assert history[0]["checkpoint"]["checkpoint_id"] == state["checkpoint"]["checkpoint_id"]
    assert problem(await client.delete(f"/threads/{thread_id}", headers=alice), 403)["scope"] == "admin"
    admin = service.token("root", scopes=("admin",))
    assert (await client.delete(f"/threads/{thread_id}", headers=admin)).status_code == 204
    problem(await client.get(f"/threads/{thread_id}", headers=alice), 404)


async def test_runs_stream_sends_langgraph_events(service: Service, client: httpx.AsyncClient) -> None:
    alice = service.token("alice", "dba")
    thread_id = (await client.post("/threads", json={}, headers=alice)).json()["thread_id"]
    async with client.stream(
        "POST",
        f"/threads/{thread_id}/runs/stream",
        json={"assistant_id": "sql", "input": user("SELECT 1"), "stream_mode": ["updates", "values"]},
        headers=alice,
    ) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        text = (await reply.aread()).decode()
    events = [block.split("\n") for block in text.strip().split("\n\n")]
    names = [lines[0].removeprefix("event: ") for lines in events]
    assert names[0] == "metadata" and "updates" in names and "values" in names
    data = [orjson.loads(lines[1].removeprefix("data: ")) for lines in events]
    interrupts = [d for n, d in zip(names, data, strict=True) if n == "updates" and "__interrupt__" in d]
    assert (
        interrupts
        and interrupts[0]["__interrupt__"][0]["value"]["action_requests"][0]["name"] == "execute_sql"
    )


async def test_background_runs_join_and_cancel(service: Service, client: httpx.AsyncClient) -> None:
    alice = service.token("alice", "dba")
    thread_id = (await client.post("/threads", json={}, headers=alice)).json()["thread_id"]
    run = (
        await client.post(
            f"/threads/{thread_id}/runs", json={"assistant_id": "sql", "input": user("q")}, headers=alice
        )
    ).json()
    assert run["status"] in ("pending", "running") and run["thread_id"] == thread_id
    joined = await client.get(f"/threads/{thread_id}/runs/{run['run_id']}/join", headers=alice)
    assert joined.json()["__interrupt__"]
    assert (await client.get(f"/threads/{thread_id}/runs/{run['run_id']}", headers=alice)).json()[
        "status"
    ] == "success"
    cancel = await client.post(f"/threads/{thread_id}/runs/{run['run_id']}/cancel", headers=alice)
    assert cancel.status_code in (202, 204)
    problem(await client.get(f"/threads/{thread_id}/runs/nope", headers=alice), 404)


async def test_the_audit_trail_across_threads_in_json_and_csv(
    service: Service, client: httpx.AsyncClient
) -> None:
    """SPEC §5.1: one trail over every thread (and the library's agent.audit), oldest first,
    bounded by time and thread metadata."""
    alice = service.token("alice", "dba")
    answered = []
    for _ in range(2):
        thread_id, interrupt_id = await paused(client, alice)
        path = f"/handrail/threads/{thread_id}/interrupts/{interrupt_id}/answer?wait=true"
        assert (await client.post(path, json={"answer": APPROVE}, headers=alice)).status_code == 200
        answered.append(thread_id)
    assert problem(await client.get("/handrail/audit", headers=alice), 403)["scope"] == "admin"
    alice = service.token("alice", "dba", scopes=("admin",))  # the audit across threads is an admin's
    trail = (await client.get("/handrail/audit", headers=alice)).json()
    assert {e["thread_id"] for e in trail} == set(answered)
    assert [e["at"] for e in trail] == sorted(e["at"] for e in trail)
    events = [e for e in trail if e["thread_id"] == answered[0]]
    assert [e["event"] for e in events] == [
        "input",
        "review_requested",
        "answered",
        "tool_started",
        "tool_finished",
    ]
    assert events[0]["by"] == {"id": "alice", "roles": ["dba"]} and events[0]["channel"] == "http"  # rule 21
    library = await service.agent.aaudit()
    assert [(e.thread_id, e.seq) for e in library] == [(e["thread_id"], e["seq"]) for e in trail]
    assert (await client.get("/handrail/audit", params={"since": 4e9}, headers=alice)).json() == []
    one = (await client.get("/handrail/audit", params={"limit": 3}, headers=alice)).json()
    assert one == trail[:3]
    import csv
    import io

    rows = list(
        csv.DictReader(io.StringIO((await client.get("/handrail/audit?format=csv", headers=alice)).text))
    )
    assert [(r["thread_id"], int(r["seq"])) for r in rows] == [(e["thread_id"], e["seq"]) for e in trail]
    assert (await client.get("/handrail/audit", params={"agent": "nobody"}, headers=alice)).status_code == 404
    assert (await client.get("/handrail/audit", params={"limit": 0}, headers=alice)).status_code == 400
    assert (await client.get("/handrail/audit")).status_code == 401


async def test_a_thread_made_without_an_assistant_belongs_to_its_first_run(backend: Any) -> None:
    """As on LangGraph's server: threads.create() names no graph; the first run binds it."""
    from handrail.server import create_app

    store = backend.saver()
    app = create_app(
        {"sql": served_agent.build(store), "other": served_agent.build(store)}, db=backend.server_db()
    )
    alice = {
        "Authorization": "Bearer " + app.state.service.tokens.create("alice", ["dba"], ["run", "review"])[1]
    }
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://handrail.test") as http:
        thread = (await http.post("/threads", json={}, headers=alice)).json()["thread_id"]
        run = {"assistant_id": "other", "input": user("SELECT 1")}
        assert (await http.post(f"/threads/{thread}/runs/wait", json=run, headers=alice)).status_code == 200
        again = {**run, "assistant_id": "sql"}
        reply = await http.post(f"/threads/{thread}/runs/wait", json=again, headers=alice)
        assert reply.status_code == 422 and "belongs to assistant 'other'" in reply.text
        named = (await http.post("/threads", json={"metadata": {"graph_id": "sql"}}, headers=alice)).json()
        reply = await http.post(f"/threads/{named['thread_id']}/runs/wait", json=run, headers=alice)
        assert reply.status_code == 422 and "belongs to assistant 'sql'" in reply.text
