"""The inbox newest or oldest first over HTTP (``GET /handrail/inbox?order=newest``) and in the CLI.

Through httpx against the real app on SQLite and PostgreSQL; ``next_cursor`` continues the
order it was made in, and a cursor used with the other order is a problem, not a page.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import served_agent
from test_api import paused, problem

from conftest import Service
from handrail import SqliteSaver
from handrail.cli import main

HERE = Path(__file__).resolve().parent


async def _walk(client: httpx.AsyncClient, headers: dict[str, str], order: str) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        query = f"/handrail/inbox?limit=1&order={order}" + (f"&cursor={cursor}" if cursor else "")
        reply = await client.get(query, headers=headers)
        assert reply.status_code == 200, reply.text
        seen += [item["thread_id"] for item in reply.json()["items"]]
        cursor = reply.json()["next_cursor"]
        if cursor is None:
            return seen


async def test_the_inbox_pages_newest_first_and_oldest_first(
    service: Service, client: httpx.AsyncClient
) -> None:
    alice = service.token("alice", "dba")
    threads = [
        (await paused(client, alice, text))[0] for text in ("DELETE FROM a", "write b.txt", "DELETE FROM c")
    ]
    oldest = [i["thread_id"] for i in (await client.get("/handrail/inbox", headers=alice)).json()["items"]]
    assert oldest == threads
    newest = await client.get("/handrail/inbox?order=newest", headers=alice)
    assert [i["thread_id"] for i in newest.json()["items"]] == threads[::-1]
    assert await _walk(client, alice, "newest") == threads[::-1]
    assert await _walk(client, alice, "oldest") == threads
    bob = service.token("bob", "ops")  # rule 12 holds in either order: only the file write is bob's
    assert [
        i["thread_id"]
        for i in (await client.get("/handrail/inbox?order=newest", headers=bob)).json()["items"]
    ] == [threads[1]]


async def test_the_inbox_lists_one_threads_reviews(service: Service, client: httpx.AsyncClient) -> None:
    """``thread_id`` keeps the reviews of one thread (what ``handrail show`` asks for)."""
    alice = service.token("alice", "dba")
    threads = [(await paused(client, alice, text))[0] for text in ("DELETE FROM a", "DELETE FROM b")]
    for thread in threads:
        reply = await client.get(f"/handrail/inbox?thread_id={thread}", headers=alice)
        assert reply.status_code == 200, reply.text
        assert [i["thread_id"] for i in reply.json()["items"]] == [thread]
    nothing = await client.get("/handrail/inbox?thread_id=no-such-thread", headers=alice)
    assert nothing.status_code == 200 and nothing.json()["items"] == []


async def test_a_cursor_of_the_other_order_or_an_unknown_order_is_a_problem(
    service: Service, client: httpx.AsyncClient
) -> None:
    alice = service.token("alice", "dba")
    for text in ("DELETE FROM a", "DELETE FROM b"):
        await paused(client, alice, text)
    cursor = (await client.get("/handrail/inbox?limit=1&order=newest", headers=alice)).json()["next_cursor"]
    body = problem(await client.get(f"/handrail/inbox?limit=1&cursor={cursor}", headers=alice), 422)
    assert "pass order='newest'" in body["detail"]
    body = problem(await client.get("/handrail/inbox?order=sideways", headers=alice), 400)
    assert "order" in body["detail"]


def test_the_cli_lists_newest_first_and_names_the_order_in_its_next_page_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(HERE)
    path = tmp_path / "h.db"
    with SqliteSaver(path) as saver:
        agent = served_agent.build(saver)
        agent.invoke({"messages": ["DELETE FROM logs"]}, {"configurable": {"thread_id": "sql-1"}})
        agent.invoke({"messages": ["write notes.txt"]}, {"configurable": {"thread_id": "file-1"}})
    flags = ["--db", str(path), "--agent", "served_agent:agent", "--reviewer", "alice", "--role", "dba"]
    assert main(["inbox", "--order", "newest", "--limit", "1", *flags]) == 0
    out = capsys.readouterr().out
    assert "file-1" in out and "sql-1" not in out
    hint = out[out.index("More: handrail inbox --order newest --cursor ") :].split()
    assert main(["inbox", "--order", "newest", "--limit", "1", "--cursor", hint[6], *flags]) == 0
    out = capsys.readouterr().out
    assert "sql-1" in out and "file-1" not in out
