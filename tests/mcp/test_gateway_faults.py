"""The MCP gateway when things break: killed mid-forward (rule 9, G4), an upstream that
crashes or hangs, hostile upstream names and text; over stdio as a desktop client
launches it; and on PostgreSQL. Judged by the upstream's ledger."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from _gateway_support import (
    Reviewer,
    http_client,
    http_gateway,
    make_token,
    review_url,
    stdio_client_of,
    store_flags,
    upstream_spec,
    write_policy,
)
from _mcp_support import Ledger, fresh_id, postgres_or_skip, wait_for


@pytest.fixture(params=["sqlite", "postgres"])
def flags(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    if request.param == "sqlite":
        yield store_flags(tmp_path)
        return
    dsn = postgres_or_skip()
    schema = f"hr_gw_{uuid.uuid4().hex[:10]}"
    yield store_flags(tmp_path, (dsn, schema))
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_a_gateway_killed_mid_forward_leaves_an_outcome_unknown_review_and_never_runs_it_twice(
    tmp_path: Path, ledger: Ledger, flags: list[str]
) -> None:
    seconds = 30 + fresh_id() / 1e6  # tells this call apart in the shared ledger
    policy = write_policy(tmp_path)
    upstream = [f"notes={upstream_spec(ledger)}"]
    with http_gateway(tmp_path, upstream, flags, policy=policy, hold=60) as gateway:
        agent = make_token(flags, "agent-1", scopes=("run",))
        reviewer = Reviewer(gateway.url, make_token(flags, "alice", scopes=("review",)))

        async def call() -> None:
            async with http_client(gateway.url, agent) as client:
                with anyio.move_on_after(60):
                    await client.call_tool("slow_note", {"seconds": seconds})

        async def main() -> None:
            task = asyncio.create_task(call())
            item = await asyncio.to_thread(reviewer.review_of, "slow_note", seconds=seconds)
            assert (await asyncio.to_thread(reviewer.answer, item, {"type": "approve"})).status_code == 202
            assert await asyncio.to_thread(
                wait_for, lambda: len(ledger.runs("slow_note", seconds=seconds)) == 1
            )
            gateway.kill()  # mid-forward: the upstream is sleeping in the call
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

        anyio.run(main)
        reviewer.close()
    with http_gateway(tmp_path, upstream, flags, policy=policy, hold=60) as again:
        reviewer = Reviewer(again.url, make_token(flags, "bob", scopes=("review",)))
        deadline = time.monotonic() + 30
        unknown: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not unknown:
            unknown = [i for i in reviewer.inbox() if i["kind"] == "outcome_unknown"]
            time.sleep(0.1)
        assert unknown, "the restarted gateway asks about the call the killed one left unfinished"
        assert unknown[0]["value"]["name"] == "slow_note" and unknown[0]["value"]["args"] == {
            "seconds": seconds
        }
        reject = {"type": "reject", "message": "it may have run; checked by hand"}
        path = f"/handrail/threads/{unknown[0]['thread_id']}/interrupts/{unknown[0]['interrupt_id']}/answer"
        assert reviewer.http.post(path, json={"answer": reject}).status_code == 202
        time.sleep(1.0)
        reviewer.close()
    assert len(ledger.runs("slow_note", seconds=seconds)) == 1


def test_an_upstream_that_crashes_or_hangs_gives_a_clear_tool_error_that_the_review_records(
    tmp_path: Path, ledger: Ledger
) -> None:
    flags = store_flags(tmp_path)
    hang = 20 + fresh_id() / 1e6
    with http_gateway(
        tmp_path,
        [f"notes={upstream_spec(ledger)}"],
        [*flags, "--timeout", "2"],
        policy=write_policy(tmp_path),
        hold=30,
    ) as gateway:
        agent = make_token(flags, "agent-1", scopes=("run",))
        reviewer = Reviewer(gateway.url, make_token(flags, "alice", scopes=("review",)))

        async def one(tool: str, args: dict[str, Any]) -> tuple[dict[str, Any], Any]:
            async with http_client(gateway.url, agent) as client:
                call = asyncio.create_task(client.call_tool(tool, args))
                item = await asyncio.to_thread(reviewer.review_of, tool, **args)
                assert (
                    await asyncio.to_thread(reviewer.answer, item, {"type": "approve"})
                ).status_code == 202
                return item, await call

        item, crashed = anyio.run(one, "crash_server", {})
        assert crashed.is_error and "closed the connection" in crashed.content[0].text
        trail = reviewer.audit(item["thread_id"])
        finished = [e for e in trail if e["event"] == "tool_finished"]
        assert finished and "closed the connection" in str(finished[-1]["result"])
        item, hung = anyio.run(one, "slow_note", {"seconds": hang})
        assert hung.is_error and "did not answer the call" in hung.content[0].text
        assert len(ledger.runs("slow_note", seconds=hang)) == 1
        # the upstream was started again after its crash: a later call works
        text = f"after crash {fresh_id()}"
        _, result = anyio.run(one, "write_note", {"text": text})
        assert not result.is_error and len(ledger.runs("write_note", text=text)) == 1
        reviewer.close()


def test_hostile_upstream_names_and_text_are_left_out_or_kept_as_text(tmp_path: Path, ledger: Ledger) -> None:
    flags = store_flags(tmp_path)
    with http_gateway(
        tmp_path, [f"bad={upstream_spec(ledger, '--hostile')}"], flags, policy=None, hold=30
    ) as gw:
        agent = make_token(flags, "agent-1", scopes=("run",))
        reviewer = Reviewer(gw.url, make_token(flags, "alice", scopes=("review",)))

        async def main() -> tuple[list[Any], Any, Any]:
            async with http_client(gw.url, agent) as client:
                listed = (await client.list_tools()).tools
                refused = await client.call_tool("<img src=x onerror=alert(1)>", {})
                call = asyncio.create_task(client.call_tool("loud_tool", {}))
                item = await asyncio.to_thread(reviewer.review_of, "loud_tool")
                assert (
                    await asyncio.to_thread(reviewer.answer, item, {"type": "approve"})
                ).status_code == 202
                return listed, refused, await call

        listed, refused, result = anyio.run(main)
        names = {tool.name for tool in listed}
        assert names == {"loud_tool", "big_schema", "handrail_await_review"}
        assert refused.is_error and "not offered" in refused.content[0].text
        assert not result.is_error and result.content[0].text == "ok"
        # the review pages show the call as text: the inbox page, escaped
        session = httpx.Client(base_url=gw.url, follow_redirects=True)
        page = session.get(
            "/inbox", headers={"Authorization": f"Bearer {reviewer.http.headers['Authorization'][7:]}"}
        )
        assert "<script>alert" not in page.text and "\x1b" not in page.text
        session.close()
        reviewer.close()
    assert "not offered" in (tmp_path / "gateway.err").read_text()


def test_over_stdio_a_desktop_client_launches_the_gateway_and_a_review_decides_its_call(
    tmp_path: Path, ledger: Ledger
) -> None:
    flags = store_flags(tmp_path)
    policy = write_policy(tmp_path)
    errlog = tmp_path / "stdio.err"
    args = [
        "--upstream",
        f"notes={upstream_spec(ledger)}",
        "--policy",
        str(policy),
        "--review-port",
        "0",
        "--hold",
        "30",
        *flags,
    ]
    approved, cancelled = f"stdio {fresh_id()}", f"stdio cancelled {fresh_id()}"

    async def main() -> tuple[Any, dict[str, Any], Reviewer]:
        async with stdio_client_of(args, errlog) as client:
            reviewer = Reviewer(review_url(errlog), make_token(flags, "alice", scopes=("review",)))
            call = asyncio.create_task(client.call_tool("write_note", {"text": approved}))
            item = await asyncio.to_thread(reviewer.review_of, "write_note", text=approved)
            assert (await asyncio.to_thread(reviewer.answer, item, {"type": "approve"})).status_code == 202
            result = await call
            gone = asyncio.create_task(client.call_tool("write_note", {"text": cancelled}))
            withdrawn = await asyncio.to_thread(reviewer.review_of, "write_note", text=cancelled)
            gone.cancel()
            await asyncio.gather(gone, return_exceptions=True)
            still = lambda: any(i["thread_id"] == withdrawn["thread_id"] for i in reviewer.inbox())  # noqa: E731
            assert await asyncio.to_thread(wait_for, lambda: not still(), 15)
            return result, withdrawn, reviewer

    result, withdrawn, reviewer = anyio.run(main)
    assert not result.is_error and result.content[0].text.startswith("saved note")
    assert len(ledger.runs("write_note", text=approved)) == 1
    assert ledger.runs("write_note", text=cancelled) == []
    assert withdrawn["metadata"]["mcp_session"].startswith("stdio-")
    reviewer.close()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ([], "name an upstream"),
        (["--upstream", "foo"], "takes NAME=COMMAND or NAME=URL"),
        (["--upstream", "bad name=cmd"], "is not valid"),
        (["--upstream", "x=/nonexistent/command"], "could not connect to MCP server 'x'"),
        (["--upstream", "x=cmd", "--header", "y=Authorization: z"], "not upstreams over HTTP"),
        (["--upstream", "x=cmd", "--policy", "/nonexistent/handrail.toml"], "cannot be read"),
        (["--upstream", "x=cmd", "--hold", "-1"], "--hold"),
        (["init"], "name an upstream"),
    ],
)
def test_the_mcp_command_refuses_bad_input_in_one_line(tmp_path: Path, args: list[str], said: str) -> None:
    import subprocess

    from _gateway_support import HANDRAIL

    done = subprocess.run(
        [HANDRAIL, "mcp", *args, *(["--db", str(tmp_path / "x.db")] if args and args[0] != "init" else [])],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1, done
    assert said in done.stderr and "Traceback" not in done.stderr and done.stdout == ""
