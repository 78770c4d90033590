"""The real ``langgraph-sdk`` Python client against a real ``handrail serve`` process (SPEC §5.3).

The process is started as a user would (``handrail serve served_agent:agent --db ...
--port 0``), its first credential made with ``handrail tokens create``; the client is
LangGraph's own, unchanged, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import httpx
import pytest

from conftest import Backend, make_token

# langgraph_sdk is imported inside the tests: it imports langchain_core, and another test
# checks that handrail itself never does.


async def test_the_python_sdk_runs_a_review_cycle(backend: Backend, served: str) -> None:
    from langgraph_sdk import get_client

    alice = get_client(url=served, api_key=make_token(backend, "alice", "dba"))
    (assistant,) = await alice.assistants.search()
    assert assistant["assistant_id"] == "sql"
    assert (await alice.assistants.get("sql"))["graph_id"] == "sql"
    thread = await alice.threads.create(metadata={"ticket": "T-1"})
    result = await alice.runs.wait(
        thread["thread_id"], "sql", input={"messages": [{"role": "user", "content": "DELETE FROM logs"}]}
    )
    assert isinstance(result, dict)
    interrupt = result["__interrupt__"][0]
    assert interrupt["value"]["action_requests"][0]["args"] == {"query": "DELETE FROM logs"}
    state = await alice.threads.get_state(thread["thread_id"])
    assert state["interrupts"][0]["id"] == interrupt["id"]
    waiting = await alice.threads.search(status="interrupted", metadata={"ticket": "T-1"})
    assert [t["thread_id"] for t in waiting] == [thread["thread_id"]]

    bob = get_client(url=served, api_key=make_token(backend, "bob", "ops"))
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await bob.runs.wait(
            thread["thread_id"],
            "sql",
            command={"resume": {interrupt["id"]: {"decisions": [{"type": "approve"}]}}},
        )
    assert refused.value.response.status_code == 403

    parts = [
        part
        async for part in alice.runs.stream(
            thread["thread_id"],
            "sql",
            command={"resume": {interrupt["id"]: {"decisions": [{"type": "approve"}]}}},
            stream_mode=["updates", "messages-tuple"],
        )
    ]
    events = [p.event for p in parts]
    assert events[0] == "metadata" and "updates" in events and "messages" in events
    final = await alice.threads.get_state(thread["thread_id"])
    assert final["values"]["messages"][-1]["content"] == "done: ran DELETE FROM logs"
    history = await alice.threads.get_history(thread["thread_id"], limit=3)
    assert (
        len(history) == 3
        and history[0]["checkpoint"]["checkpoint_id"] == final["checkpoint"]["checkpoint_id"]
    )

    run = await alice.runs.create(
        thread["thread_id"], "sql", input={"messages": [{"role": "user", "content": "write notes.txt"}]}
    )
    joined = await alice.runs.join(thread["thread_id"], run["run_id"])
    assert joined["__interrupt__"][0]["value"]["action_requests"][0]["name"] == "write_file"
    with pytest.raises(httpx.HTTPStatusError) as refused:  # deleting is an admin's
        await alice.threads.delete(thread["thread_id"])
    assert refused.value.response.status_code == 403
    root = get_client(url=served, api_key=make_token(backend, "root", scopes=("admin",)))
    await root.threads.delete(thread["thread_id"])
    with pytest.raises(httpx.HTTPStatusError) as gone:
        await alice.threads.get(thread["thread_id"])
    assert gone.value.response.status_code == 404


def test_the_sync_sdk_client_and_a_missing_credential(backend: Backend, served: str) -> None:
    from langgraph_sdk import get_sync_client

    anonymous = get_sync_client(url=served, api_key=None, headers={})
    with pytest.raises(httpx.HTTPStatusError) as refused:
        anonymous.threads.create()
    assert refused.value.response.status_code == 401
    client = get_sync_client(url=served, api_key=make_token(backend, "carol", "dba"))
    result = client.runs.wait(None, "sql", input={"messages": [{"role": "user", "content": "SELECT 1"}]})
    assert isinstance(result, dict) and result["__interrupt__"]
