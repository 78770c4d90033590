"""Hostile input gets a 4xx problem that says what was wrong, never a 500, and saves nothing
damaged (SPEC §5.3: no client input gives a 500; bounded by construction). Issue 23's
findings, each on SQLite and on PostgreSQL: page sizes, JSON depth, ids and NUL, message
ids, values the store cannot keep, and a run's own error.
"""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import quote

import httpx
import orjson
import pytest
from test_api import paused, problem, user

from conftest import Service
from handrail.checkpoint.base import ThreadFilter
from handrail.server._limits import MAX_DEPTH, MAX_OFFSET

JSON = {"content-type": "application/json"}


def nested(levels: int, leaf: Any = "x") -> Any:
    """``leaf`` inside ``levels`` objects: ``nested(2) == {"a": {"a": "x"}}``."""
    value = leaf
    for _ in range(levels):
        value = {"a": value}
    return value


def thread_rows(service: Service) -> int:
    """How many threads the store holds (those created, run or not: ``_service.py`` rule S1)."""
    return len(service.agent.checkpointer.list_threads(ThreadFilter(limit=100_000)))


async def test_assistants_search_refuses_pages_it_cannot_give(
    service: Service, client: httpx.AsyncClient
) -> None:
    alice = service.token("alice")
    for body in (
        {"limit": -1},
        {"limit": 0},
        {"limit": 1001},
        {"limit": {}},
        {"limit": "all"},
        {"limit": True},
        {"offset": "abc"},
        {"offset": -1},
        {"offset": 10**30},
    ):
        detail = problem(await client.post("/assistants/search", json=body, headers=alice), 400)["detail"]
        assert next(iter(body)) in detail, detail
    for raw in (b'{"limit": 1e400}', b'{"limit": NaN}', b'{"offset": Infinity}'):
        detail = problem(await client.post("/assistants/search", content=raw, headers={**alice, **JSON}), 400)
        assert "not JSON handrail can read" in detail["detail"]
    found = await client.post("/assistants/search", json={"limit": 1, "offset": 0}, headers=alice)
    assert [a["assistant_id"] for a in found.json()] == ["sql"]
    assert (await client.post("/assistants/search", json={"offset": 1}, headers=alice)).json() == []


async def test_threads_search_refuses_offsets_beyond_what_a_store_can_count(
    service: Service, client: httpx.AsyncClient
) -> None:
    """sqlite3 raised OverflowError past 2**63 - 1; both stores now get a bounded offset."""
    alice = service.token("alice", "dba")
    thread_id, _ = await paused(client, alice)
    for offset in (10**30, 2**63, MAX_OFFSET + 1, -1, 1.5):
        detail = problem(await client.post("/threads/search", json={"offset": offset}, headers=alice), 400)
        assert "offset" in detail["detail"]
    for limit in (0, 1001, "10", None):
        problem(await client.post("/threads/search", json={"limit": limit}, headers=alice), 400)
    assert (await client.post("/threads/search", json={"offset": MAX_OFFSET}, headers=alice)).json() == []
    found = await client.post("/threads/search", json={"limit": 1000, "offset": 0}, headers=alice)
    assert [t["thread_id"] for t in found.json()] == [thread_id]
    history = f"/threads/{thread_id}/history"
    for body in ({"limit": 10**30}, {"limit": -1}, {"before": {"checkpoint_id": {}}}, {"before": 7}):
        problem(await client.post(history, json=body, headers=alice), 400)
    assert len((await client.post(history, json={"limit": 2}, headers=alice)).json()) == 2


async def test_json_nested_too_deep_is_refused_wherever_it_comes_in(
    service: Service, client: httpx.AsyncClient
) -> None:
    """400 deep used to be a 500 (the store's serialiser stops at 254) in thread metadata, run
    metadata, search filters, ``?metadata=`` and message content; now each is a 400."""
    alice = service.token("alice", "dba", scopes=("run", "review", "admin"))
    thread_id, interrupt_id = await paused(client, alice)
    deep = nested(400)
    bodies = [
        ("/threads", {"metadata": {"x": deep}}),
        ("/threads/search", {"metadata": {"x": deep}}),
        ("/runs/wait", {"assistant_id": "sql", "input": user("q"), "metadata": {"x": deep}}),
        ("/runs/wait", {"assistant_id": "sql", "input": user("q"), "config": {"metadata": {"x": deep}}}),
        ("/runs/wait", {"assistant_id": "sql", "input": {"messages": [{"role": "user", "content": [deep]}]}}),
        (f"/threads/{thread_id}/runs/wait", {"assistant_id": "sql", "command": {"resume": deep}}),
        (f"/handrail/threads/{thread_id}/interrupts/{interrupt_id}/answer", {"answer": deep}),
    ]
    rows = thread_rows(service)
    for path, body in bodies:
        detail = problem(await client.post(path, json=body, headers=alice), 400)["detail"]
        assert f"nested at most {MAX_DEPTH} deep" in detail, (path, detail)
    for path in ("/handrail/inbox", "/handrail/audit"):
        reply = await client.get(path, params={"metadata": json.dumps({"x": deep})}, headers=alice)
        assert f"nested at most {MAX_DEPTH} deep" in problem(reply, 400)["detail"]
    assert thread_rows(service) == rows
    state = await client.get(f"/threads/{thread_id}/state", headers=alice)
    assert state.json()["interrupts"][0]["id"] == interrupt_id  # the paused thread is untouched

    # At the limit it is taken, and what was saved loads again.
    at_limit = await client.post("/threads", json={"metadata": {"x": nested(MAX_DEPTH - 2)}}, headers=alice)
    assert at_limit.status_code == 200, at_limit.text
    problem(
        await client.post("/threads", json={"metadata": {"x": nested(MAX_DEPTH - 1)}}, headers=alice), 400
    )
    content = [nested(MAX_DEPTH - 5)]  # body, input, messages, the message and content: 5 more
    ran = await client.post(
        "/runs/wait",
        json={"assistant_id": "sql", "input": {"messages": [{"role": "user", "content": content}]}},
        headers=alice,
    )
    assert ran.status_code == 200, ran.text
    assert ran.json()["messages"][0]["content"] == content
    created = at_limit.json()["thread_id"]
    assert (await client.get(f"/threads/{created}", headers=alice)).json()["metadata"]["x"] == nested(
        MAX_DEPTH - 2
    )


async def test_a_message_id_that_is_not_a_string_is_a_422_and_nothing_is_saved(
    service: Service, client: httpx.AsyncClient
) -> None:
    """A stateless run with ``"id": {}`` used to save its input and leave a thread that no
    longer loaded; the library's coercion took any id. Now it is refused before anything
    is saved, on every kind of run."""
    alice = service.token("alice", "dba")
    thread_id = (await client.post("/threads", json={}, headers=alice)).json()["thread_id"]
    rows = thread_rows(service)
    bad_messages = [
        {"role": "user", "content": "hi", "id": {}},
        {"role": "user", "content": "hi", "id": 7},
        {"role": "user", "content": "hi", "name": ["x"]},
        {"role": "user", "content": "hi", "additional_kwargs": "x"},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "execute_sql", "args": {}, "id": {}}]},
    ]
    for message in bad_messages:
        body = {"assistant_id": "sql", "input": {"messages": [message]}}
        for path in (
            "/runs/wait",
            "/runs/stream",
            f"/threads/{thread_id}/runs",
            f"/threads/{thread_id}/runs/wait",
        ):
            detail = problem(await client.post(path, json=body, headers=alice), 422)["detail"]
            assert "must be" in detail and "input['messages'][0]" in detail, detail
    assert thread_rows(service) == rows  # no stateless thread was made
    thread = await client.get(f"/threads/{thread_id}", headers=alice)
    assert thread.status_code == 200 and not thread.json()["values"].get("messages")
    ok = await client.post(
        f"/threads/{thread_id}/runs/wait",
        json={"assistant_id": "sql", "input": {"messages": [{"role": "user", "content": "q", "id": "m-1"}]}},
        headers=alice,
    )
    assert ok.status_code == 200 and ok.json()["messages"][0]["id"] == "m-1"


async def test_nul_is_refused_before_it_reaches_the_store(
    service: Service, client: httpx.AsyncClient
) -> None:
    """PostgreSQL's text and jsonb cannot hold a NUL: a thread id or a metadata value with one
    was a 500 there. Every way in is a 400 now, on both stores; message content keeps it."""
    alice = service.token("alice", "dba", scopes=("run", "review", "admin"))
    thread_id, interrupt_id = await paused(client, alice)
    rows = thread_rows(service)
    problem(await client.post("/threads", json={"thread_id": "a\x00b"}, headers=alice), 400)
    for url in (
        "/threads/a%00b",
        "/threads/a%00b/state",
        f"/threads/{thread_id}/state/1%00",
        "/handrail/inbox?tool=a%00b",
        "/handrail/inbox?agent=%00",
        "/handrail/inbox?cursor=%00",
        "/handrail/audit?agent=a%00",
        "/handrail/threads/a%00b/audit",
        "/handrail/events?after=1%00",
    ):
        assert "NUL" in problem(await client.get(url, headers=alice), 400)["detail"], url
    answer = f"/handrail/threads/{thread_id}/interrupts/{interrupt_id}%00/answer"
    problem(
        await client.post(answer, json={"answer": {"decisions": [{"type": "approve"}]}}, headers=alice), 400
    )
    for metadata in ({"team": "a\x00b"}, {"a\x00": 1}, {"team": {"deep": ["x\x00"]}}):
        for path, body in (
            ("/threads", {"metadata": metadata}),
            ("/threads/search", {"metadata": metadata}),
            ("/assistants/search", {"metadata": metadata}),
            ("/runs/wait", {"assistant_id": "sql", "input": user("q"), "metadata": metadata}),
            ("/runs/wait", {"assistant_id": "sql", "input": user("q"), "config": {"metadata": metadata}}),
        ):
            assert "NUL" in problem(await client.post(path, json=body, headers=alice), 400)["detail"], path
        for path in ("/handrail/inbox", "/handrail/audit"):
            reply = await client.get(
                path, params={"metadata": orjson.dumps(metadata).decode()}, headers=alice
            )
            assert "NUL" in problem(reply, 400)["detail"]
    signin = await client.post(
        "/inbox/signin", content=b"token=a%00b", headers={"content-type": "application/x-www-form-urlencoded"}
    )
    # under /inbox every error is a page of the inbox (issue 25 item 3), with the same words
    assert signin.status_code == 400 and signin.headers["content-type"].startswith("text/html")
    assert "NUL" in signin.text
    assert thread_rows(service) == rows
    if service.backend.kind == "postgres":  # and were one to get through: a 422, not a 500
        import psycopg

        assert psycopg.DataError in service.app.exception_handlers
    text = "keeps\x00its NUL"
    kept = await client.post("/runs/wait", json={"assistant_id": "sql", "input": user(text)}, headers=alice)
    assert kept.status_code == 200 and kept.json()["messages"][0]["content"] == text


@pytest.mark.parametrize("bad", ["a\nb", "a\rb", "a/b", "a b", "", ".", "..", "-x", "é", "x" * 129, "a\x00b"])
async def test_a_new_threads_id_is_of_the_documented_charset(
    service: Service, client: httpx.AsyncClient, bad: str
) -> None:
    """CR/LF in a thread id broke the answers' headers, and ``/`` made it unreachable."""
    alice = service.token("alice", "dba")
    rows = thread_rows(service)
    detail = problem(await client.post("/threads", json={"thread_id": bad}, headers=alice), 400)["detail"]
    assert "letters, digits and . _ : @ ~ + = -" in detail
    run = {"assistant_id": "sql", "if_not_exists": "create", "input": user("q")}
    if bad and "/" not in bad and len(bad) <= 128 and bad not in (".", ".."):
        path = f"/threads/{quote(bad, safe='')}/runs/wait"
        problem(await client.post(path, json=run, headers=alice), 400)
    assert thread_rows(service) == rows


async def test_ids_of_the_charset_work_and_lookups_are_bounded(
    service: Service, client: httpx.AsyncClient
) -> None:
    alice = service.token("alice", "dba")
    for good in (str(uuid.uuid4()), "T-1", "ticket:42@team.example~v1+2=3", "_x", "x" * 128):
        reply = await client.post("/threads", json={"thread_id": good}, headers=alice)
        assert reply.status_code == 200, reply.text
        assert (await client.get(f"/threads/{good}", headers=alice)).json()["thread_id"] == good
    made = await client.post(
        "/threads/made:by-run/runs/wait",
        json={"assistant_id": "sql", "if_not_exists": "create", "input": user("q")},
        headers=alice,
    )
    assert made.status_code == 200 and made.headers["content-location"].startswith(
        "/threads/made:by-run/runs/"
    )
    for url in ("/threads/a%0Ab", "/threads/" + "x" * 129, "/threads/a%0Db/state", "/threads/t/runs/a%0A"):
        assert "path." in problem(await client.get(url, headers=alice), 400)["detail"], url
    assert (await client.get("/threads/a%2Fb", headers=alice)).status_code == 404


async def test_values_the_store_cannot_keep_are_the_clients_mistake(
    service: Service, client: httpx.AsyncClient
) -> None:
    """A key the store reserves, a lone surrogate, a number no double holds: 4xx, not a 500."""
    alice = service.token("alice", "dba")
    rows = thread_rows(service)
    reserved = {"x": {"__hr__": "y"}}
    problem(await client.post("/threads/search", json={"metadata": reserved}, headers=alice), 422)
    for body in (
        {"assistant_id": "sql", "input": user("q"), "metadata": reserved},
        {
            "assistant_id": "sql",
            "input": {"messages": [{"role": "user", "content": [{"__hr__": 1, "type": "x"}]}]},
        },
    ):
        assert "__hr__" in problem(await client.post("/runs/wait", json=body, headers=alice), 422)["detail"]
    for raw in (
        b'{"metadata": {"x": "\\ud800"}}',
        b'{"metadata": {"x": "\\udc00"}}',
        b'{"metadata": {"x": 1e400}}',
        b'{"metadata": {"x": NaN}}',
        b'{"metadata": {"x": "a"}',
    ):
        problem(await client.post("/threads", content=raw, headers={**alice, **JSON}), 400)
    # the second stateless run's thread, created and not run (its input was refused); the
    # first one's metadata was refused before its thread was made (service.py rule S1)
    assert thread_rows(service) == rows + 1


async def test_a_failing_model_is_answered_as_langgraphs_server_does_never_a_500(
    service: Service, client: httpx.AsyncClient
) -> None:
    """A run's own error (the model or a tool failed) is not the client's mistake, and not a
    500 with its text: ``runs.wait`` and ``runs.join`` answer 200 with ``__error__``, as
    LangGraph's server does, the run's status is ``error`` and a stream ends with an
    ``error`` event. A client's mistake found during a run stays its 4xx."""
    alice = service.token("alice", "dba")
    failing = {"assistant_id": "sql", "input": user("fail boom")}
    expected = {"__error__": {"error": "RuntimeError", "message": "the model is down: boom"}}
    stateless = await client.post("/runs/wait", json=failing, headers=alice)
    assert stateless.status_code == 200 and stateless.json() == expected
    thread_id = (await client.post("/threads", json={}, headers=alice)).json()["thread_id"]
    waited = await client.post(f"/threads/{thread_id}/runs/wait", json=failing, headers=alice)
    assert waited.status_code == 200 and waited.json() == expected
    go_on = {"assistant_id": "sql"}  # no input: the failed run goes on, and its model fails again
    run = (await client.post(f"/threads/{thread_id}/runs", json=go_on, headers=alice)).json()
    joined = await client.get(f"/threads/{thread_id}/runs/{run['run_id']}/join", headers=alice)
    assert joined.status_code == 200 and joined.json() == expected
    record = await client.get(f"/threads/{thread_id}/runs/{run['run_id']}", headers=alice)
    assert record.json()["status"] == "error"
    streamed = await client.post(
        f"/threads/{thread_id}/runs/stream", json={**go_on, "stream_mode": "values"}, headers=alice
    )
    assert streamed.status_code == 200
    assert "event: error" in streamed.text and "the model is down" in streamed.text
    late = await client.get(f"/threads/{thread_id}/runs/{run['run_id']}/stream", headers=alice)
    events = [line for line in late.text.splitlines() if line.startswith("event:")]
    assert events == ["event: metadata", "event: error"]
    assert (await client.get(f"/threads/{thread_id}", headers=alice)).status_code == 200
    # New input on a thread whose run failed midway is the client's to fix: the library's 409.
    more = await client.post(f"/threads/{thread_id}/runs/wait", json=failing, headers=alice)
    assert "invoke(None, config)" in problem(more, 409)["detail"]


def test_store_errors_from_a_clients_values_map_to_4xx_and_damage_does_not() -> None:
    """``problems.client_problem``: what the store refuses to keep of a request is a 422 (the
    checks above refuse it earlier; this is the last line), a record it cannot load is not
    the client's doing (a 500, logged)."""
    import psycopg

    from handrail.errors import SerializationError
    from handrail.server._problems import client_problem

    refused = client_problem(psycopg.errors.UntranslatableCharacter("unsupported Unicode escape sequence"))
    assert (
        refused is not None and refused.status == 422 and "cannot be stored in PostgreSQL" in refused.detail
    )
    stored = client_problem(SerializationError("cannot store the metadata filter: Recursion limit reached"))
    assert stored is not None and stored.status == 422
    assert client_problem(SerializationError("cannot load thread 't', record 1: damaged input event")) is None
    assert client_problem(RuntimeError("the model is down")) is None
