"""The MCP gateway (SPEC §7, ``handrail.mcp.gateway`` rules G1-G7) through the official
``mcp`` client over streamable HTTP, in front of the test upstream, judged by its ledger."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from _gateway_support import (
    Gateway,
    Reviewer,
    http_client,
    http_gateway,
    make_token,
    store_flags,
    upstream_spec,
    write_policy,
)
from _mcp_support import Ledger, fresh_id

HOLD = 4.0


class Setup:
    def __init__(self, gateway: Gateway, flags: list[str]) -> None:
        self.gateway = gateway
        self.url = gateway.url
        self.agent_token = make_token(flags, "agent-1", scopes=("run",))
        self.other_token = make_token(flags, "agent-2", scopes=("run",))
        self.review_token = make_token(flags, "alice", scopes=("review",))
        self.reviewer = Reviewer(gateway.url, self.review_token)
        self.admin = Reviewer(gateway.url, make_token(flags, "root", scopes=("admin",)))


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, ledger: Ledger) -> Iterator[Setup]:
    tmp_path = tmp_path_factory.mktemp("gateway")
    flags = store_flags(tmp_path)
    with http_gateway(
        tmp_path, [f"notes={upstream_spec(ledger)}"], flags, policy=write_policy(tmp_path), hold=HOLD
    ) as gw:
        found = Setup(gw, flags)
        yield found
        found.reviewer.close()
        found.admin.close()


async def decide_when_asked(
    reviewer: Reviewer, tool: str, decision: dict[str, Any], **args: Any
) -> dict[str, Any]:
    item = await asyncio.to_thread(reviewer.review_of, tool, **args)
    response = await asyncio.to_thread(reviewer.answer, item, decision)
    assert response.status_code == 202, response.text
    return item


async def decided_call(
    setup: Setup, tool: str, args: dict[str, Any], decision: dict[str, Any]
) -> tuple[Any, Any]:
    """Call ``tool``, answer its review with ``decision`` while the call is held: (review, result)."""
    async with http_client(setup.url, setup.agent_token) as client:
        call = asyncio.create_task(client.call_tool(tool, args))
        item = await decide_when_asked(setup.reviewer, tool, decision, **args)
        return item, await call


async def one_call(setup: Setup, tool: str, args: dict[str, Any], token: str | None = None) -> Any:
    """One call of ``tool`` in a session of its own."""
    async with http_client(setup.url, token or setup.agent_token) as client:
        return await client.call_tool(tool, args)


def test_tools_list_passes_the_upstream_tools_through_with_the_await_tool_added(setup: Setup) -> None:
    async def main() -> None:
        async with http_client(setup.url, setup.agent_token) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert {"write_note", "read_notes", "note_stats", "handrail_await_review"} <= set(listed)
        assert listed["read_notes"].annotations.read_only_hint is True
        assert listed["note_stats"].output_schema is not None  # ungated: as the upstream said
        assert listed["write_note"].description.startswith("Save a note")

    anyio.run(main)


def test_an_ungated_call_is_forwarded_at_once_with_its_structured_content(
    setup: Setup, ledger: Ledger
) -> None:
    tag = f"t{fresh_id()}"

    result = anyio.run(one_call, setup, "note_stats", {"tag": tag})
    assert not result.is_error and result.structured_content is not None
    assert set(result.structured_content) == {"count", "longest"}
    assert len(ledger.runs("note_stats", tag=tag)) == 1
    assert setup.reviewer.inbox() == [] or all(
        r["name"] != "note_stats" for i in setup.reviewer.inbox() for r in i["value"]["action_requests"]
    )


def test_an_approved_call_runs_once_and_returns_the_upstreams_result(setup: Setup, ledger: Ledger) -> None:
    text = f"approved {fresh_id()}"

    item, result = anyio.run(decided_call, setup, "write_note", {"text": text}, {"type": "approve"})
    assert not result.is_error
    assert result.content[0].text.startswith("saved note")
    assert len(ledger.runs("write_note", text=text)) == 1
    metadata = item["metadata"]
    assert metadata["assistant_id"] == "mcp" and metadata["mcp_tool"] == "write_note"
    assert metadata["mcp_client"].startswith("mcp")  # the SDK client's name
    trail = setup.reviewer.audit(item["thread_id"])
    started = [e for e in trail if e["event"] == "tool_started"]
    assert len(started) == 1 and started[0]["tool"] == "write_note"


def test_an_edit_forwards_the_edited_arguments_and_says_so_first(setup: Setup, ledger: Ledger) -> None:
    asked, edited = f"draft {fresh_id()}", f"final {fresh_id()}"
    decision = {"type": "edit", "edited_action": {"name": "write_note", "args": {"text": edited}}}

    _, result = anyio.run(decided_call, setup, "write_note", {"text": asked}, decision)
    assert not result.is_error
    assert "replaced this tool call" in result.content[0].text and edited in result.content[0].text
    assert result.content[1].text.startswith("saved note")
    assert ledger.runs("write_note", text=asked) == [] and len(ledger.runs("write_note", text=edited)) == 1


def test_a_reject_returns_a_tool_error_saying_who_rejected_and_why(setup: Setup, ledger: Ledger) -> None:
    note = fresh_id()
    decision = {"type": "reject", "message": "that note is still needed"}

    _, result = anyio.run(decided_call, setup, "delete_note", {"note_id": note}, decision)
    assert result.is_error
    text = result.content[0].text
    assert "that note is still needed" in text and "Rejected by alice via http" in text
    assert ledger.runs("delete_note", note_id=note) == []


def test_a_respond_returns_the_reviewers_message_as_the_result(setup: Setup, ledger: Ledger) -> None:
    note = fresh_id()
    decision = {"type": "respond", "message": f"note {note} is archived already"}

    _, result = anyio.run(decided_call, setup, "delete_note", {"note_id": note}, decision)
    assert not result.is_error and result.content[0].text == f"note {note} is archived already"
    assert ledger.runs("delete_note", note_id=note) == []


def test_an_expired_review_returns_a_tool_error_saying_it_expired(setup: Setup, ledger: Ledger) -> None:
    note = fresh_id()

    async def main() -> Any:
        async with http_client(setup.url, setup.agent_token) as client:
            result = await client.call_tool("archive_note", {"note_id": note})
            if result.is_error and "Review pending" in result.content[0].text:
                review = result.meta["handrail/review"]["review_id"]
                result = await client.call_tool("handrail_await_review", {"review_id": review})
            return result

    result = anyio.run(main)
    assert result.is_error and "expired before anyone answered it" in result.content[0].text
    assert result.meta["handrail/review"]["status"] == "expired"
    assert ledger.runs("archive_note", note_id=note) == []


def test_a_hold_that_runs_out_says_pending_and_await_review_collects_the_outcome(
    setup: Setup, ledger: Ledger
) -> None:
    text = f"later {fresh_id()}"
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async def main() -> tuple[Any, Any]:
        async with http_client(setup.url, setup.agent_token) as client:
            pending = await client.call_tool("write_note", {"text": text}, progress_callback=on_progress)
            review = pending.meta["handrail/review"]["review_id"]
            waiting = asyncio.create_task(client.call_tool("handrail_await_review", {"review_id": review}))
            await decide_when_asked(setup.reviewer, "write_note", {"type": "approve"}, text=text)
            return pending, await waiting

    pending, result = anyio.run(main)
    assert pending.is_error and "Review pending" in pending.content[0].text
    assert "handrail_await_review" in pending.content[0].text
    assert progress, "progress notifications while the review waited"
    assert not result.is_error and result.content[0].text.startswith("saved note")
    assert len(ledger.runs("write_note", text=text)) == 1


def test_an_approval_after_the_client_left_still_runs_once_and_waits_to_be_collected(
    setup: Setup, ledger: Ledger
) -> None:
    text = f"unattended {fresh_id()}"

    pending = anyio.run(one_call, setup, "write_note", {"text": text})
    review = pending.meta["handrail/review"]["review_id"]
    item = setup.reviewer.review_of("write_note", text=text)
    assert setup.reviewer.answer(item, {"type": "approve"}).status_code == 202
    from _mcp_support import wait_for

    assert wait_for(lambda: len(ledger.runs("write_note", text=text)) == 1)

    result = anyio.run(one_call, setup, "handrail_await_review", {"review_id": review})
    assert not result.is_error and result.content[0].text.startswith("saved note")
    assert len(ledger.runs("write_note", text=text)) == 1


def test_a_run_token_neither_answers_its_own_review_nor_collects_another_callers(
    setup: Setup, ledger: Ledger
) -> None:
    """The doors a ``run`` token has (``/mcp`` and the reviewer side): it cannot approve the
    call it asked for, and another caller's ``handrail_await_review`` learns nothing of it."""
    text = f"mine {fresh_id()}"
    pending = anyio.run(one_call, setup, "write_note", {"text": text})
    review = pending.meta["handrail/review"]["review_id"]
    item = setup.reviewer.review_of("write_note", text=text)
    path = f"/handrail/threads/{item['thread_id']}/interrupts/{item['interrupt_id']}/answer"
    self_approval = httpx.post(
        setup.url + path,
        json={"answer": {"decisions": [{"type": "approve"}]}},
        headers={"Authorization": f"Bearer {setup.agent_token}"},
    )
    assert self_approval.status_code in (403, 404), self_approval.text
    other = anyio.run(one_call, setup, "handrail_await_review", {"review_id": review}, setup.other_token)
    assert other.is_error and "There is no review" in other.content[0].text
    assert any(i["thread_id"] == item["thread_id"] for i in setup.reviewer.inbox())  # still pending
    reject = setup.reviewer.answer(item, {"type": "reject", "message": "not now"})
    assert reject.status_code == 202
    mine = anyio.run(one_call, setup, "handrail_await_review", {"review_id": review})
    assert mine.is_error and "not now" in mine.content[0].text
    assert ledger.runs("write_note", text=text) == []


def test_a_cancelled_call_withdraws_its_review_which_is_recorded_and_never_runs(
    setup: Setup, ledger: Ledger
) -> None:
    text = f"cancelled {fresh_id()}"

    async def main() -> dict[str, Any]:
        async with http_client(setup.url, setup.agent_token) as client:
            call = asyncio.create_task(client.call_tool("write_note", {"text": text}))
            item = await asyncio.to_thread(setup.reviewer.review_of, "write_note", text=text)
            call.cancel()  # the SDK sends notifications/cancelled for the request
            await asyncio.gather(call, return_exceptions=True)
            return item

    item = anyio.run(main)
    from _mcp_support import wait_for

    def answered() -> list[dict[str, Any]]:
        return [e for e in setup.admin.audit(item["thread_id"]) if e["event"] == "answered"]

    assert wait_for(lambda: bool(answered()), timeout=15)
    [entry] = answered()
    assert entry["kind"] == "withdrawn" and entry["channel"] == "mcp"
    assert entry["reviewer"]["id"] == "agent-1"
    late = setup.reviewer.answer(item, {"type": "approve"})
    assert late.status_code == 409, late.text
    assert wait_for(lambda: any(e["event"] == "tool_finished" for e in setup.admin.audit(item["thread_id"])))
    assert ledger.runs("write_note", text=text) == []


def test_two_clients_at_once_each_get_their_own_outcome(setup: Setup, ledger: Ledger) -> None:
    first, second = f"one {fresh_id()}", f"two {fresh_id()}"

    async def main() -> tuple[Any, Any]:
        async with (
            http_client(setup.url, setup.agent_token) as a,
            http_client(setup.url, setup.other_token) as b,
        ):
            one = asyncio.create_task(a.call_tool("write_note", {"text": first}))
            two = asyncio.create_task(b.call_tool("write_note", {"text": second}))
            await decide_when_asked(
                setup.reviewer, "write_note", {"type": "reject", "message": "no"}, text=first
            )
            await decide_when_asked(setup.reviewer, "write_note", {"type": "approve"}, text=second)
            return await one, await two

    one, two = anyio.run(main)
    assert one.is_error and "Rejected by alice" in one.content[0].text
    assert not two.is_error and two.content[0].text.startswith("saved note")
    assert ledger.runs("write_note", text=first) == [] and len(ledger.runs("write_note", text=second)) == 1


def test_a_call_that_fails_its_schema_is_refused_before_any_review(setup: Setup, ledger: Ledger) -> None:
    result = anyio.run(one_call, setup, "delete_note", {"note_id": "not a number"})
    assert result.is_error and "not sent for review" in result.content[0].text
    assert all(
        r["args"].get("note_id") != "not a number"
        for i in setup.reviewer.inbox()
        for r in i["value"]["action_requests"]
    )


def test_await_review_answers_only_for_this_gateways_reviews(setup: Setup) -> None:
    async def main() -> list[Any]:
        async with http_client(setup.url, setup.agent_token) as client:
            return [
                await client.call_tool("handrail_await_review", {"review_id": value})
                for value in ("mcp-0000", "../etc/passwd", "x" * 500)
            ]

    for result in anyio.run(main):
        assert result.is_error


def test_mcp_endpoint_needs_a_token_of_scope_run(setup: Setup) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {"accept": "application/json, text/event-stream"}
    assert httpx.post(setup.url + "/mcp", json=body, headers=headers).status_code == 401
    bad = {**headers, "Authorization": "Bearer hr_0000000000000000_" + "a" * 43}
    assert httpx.post(setup.url + "/mcp", json=body, headers=bad).status_code == 401
    review_only = {**headers, "Authorization": f"Bearer {setup.review_token}"}
    assert httpx.post(setup.url + "/mcp", json=body, headers=review_only).status_code == 403


def test_policy_file_and_init(tmp_path: Path, ledger: Ledger) -> None:
    import subprocess

    from _gateway_support import HANDRAIL

    out = tmp_path / "policy.toml"
    done = subprocess.run(
        [HANDRAIL, "mcp", "init", "--upstream", f"notes={upstream_spec(ledger)}", "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert '"read_notes" = false' in text and '"write_note" = true' in text and '"delete_note" = true' in text
    again = subprocess.run(
        [HANDRAIL, "mcp", "init", "--upstream", f"notes={upstream_spec(ledger)}", "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode != 0 and "exists" in again.stderr
    from handrail.review.policy_file import load_policy_file

    assert load_policy_file(out).for_agent(
        "mcp",
        tools=[
            "read_notes",
            "write_note",
            "delete_note",
            "note_stats",
            "archive_note",
            "slow_note",
            "note_picture",
            "crash_server",
            "whoami",
        ],
    )


def test_docs_mcp_gateway_examples_parse_as_the_gateway_reads_them(tmp_path: Path) -> None:
    """docs/mcp.md's client configuration is a valid ``handrail mcp`` command line, and its
    policy file loads for the gateway's agent."""
    import json
    import re

    from handrail.cli._command import _build_parser
    from handrail.review.policy_file import load_policy_file

    text = (Path(__file__).resolve().parents[2] / "docs" / "mcp.md").read_text()
    gateway = text[text.index("## The gateway (handrail mcp)") :]
    config = json.loads(re.search(r"```json\n(.*?)```", gateway, re.S).group(1))  # type: ignore[union-attr]
    server = config["mcpServers"]["files"]
    assert server["command"] == "handrail"
    args = _build_parser().parse_args(server["args"])
    assert args.command == "mcp" and args.review_port == 8765 and args.upstream[0].startswith("fs=npx")
    policy = tmp_path / "handrail.toml"
    policy.write_text(re.search(r"```toml\n(.*?)```", gateway, re.S).group(1))  # type: ignore[union-attr]
    tools = ["read_text_file", "list_directory", "write_file", "move_file", "edit_file"]
    review = load_policy_file(policy).for_agent("mcp", tools=tools)
    assert review["interrupt_on"]["write_file"] is True and review["interrupt_on"]["read_text_file"] is False
    assert review["interrupt_on"]["edit_file"]["reviewers"] == ["maintainers"]
