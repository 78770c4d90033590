"""The TypeScript ``@modelcontextprotocol/sdk`` client under Node against ``handrail mcp``,
over streamable HTTP and over stdio, judged by the upstream's ledger.

``scripts/run_tests.py`` installs the pinned package (``npm ci``) into ``tests/mcp/js``
when it is missing; elsewhere the tests run when Node.js and the package are there, and
fail under CI (``CI=true``) when they are not. ``js/gateway_check.mjs`` prints one JSON
line per step; the reviewer answers over the gateway's HTTP API while Node waits.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _gateway_support import (
    HANDRAIL,
    Gateway,
    Reviewer,
    http_gateway,
    make_token,
    review_url,
    store_flags,
    upstream_spec,
    write_policy,
)
from _mcp_support import Ledger, fresh_id

JS = Path(__file__).resolve().parent / "js"
STEP = 60.0  # seconds Python waits for Node's next line


def node_or_skip() -> str:
    node = shutil.which("node")
    installed = (JS / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir()
    if node is None or not installed:
        why = "Node.js is missing" if node is None else f"run 'npm ci' in {JS} (make test does)"
        if os.environ.get("CI"):
            pytest.fail(f"the TypeScript MCP SDK tests must run in CI: {why}")
        pytest.skip(why)
    return node


class NodeClient:
    """``node gateway_check.mjs SPEC``, its stdout read line by line as JSON steps."""

    def __init__(self, node: str, spec: dict[str, Any], errlog: Path) -> None:
        self.errlog = errlog
        self._err = errlog.open("a")
        self.process = subprocess.Popen(
            [node, "gateway_check.mjs", json.dumps(spec)],
            cwd=JS,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next(self, event: str) -> dict[str, Any]:
        """The next step, which must be ``event``."""
        try:
            line = self.lines.get(timeout=STEP)
        except queue.Empty:
            raise AssertionError(
                f"Node said nothing for {STEP} s after {self.seen}: {self._errors()}"
            ) from None
        if line is None:
            raise AssertionError(f"Node ended before {event!r} after {self.seen}: {self._errors()}")
        step: dict[str, Any] = json.loads(line)
        self.seen.append(step)
        assert step["event"] == event, f"{step} (expected {event!r}); {self._errors()}"
        return step

    def finish(self) -> None:
        self.next("done")
        assert self.process.wait(timeout=30) == 0, self._errors()

    def _errors(self) -> str:
        return self.errlog.read_text() if self.errlog.exists() else ""

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._err.close()


class Setup:
    def __init__(self, gateway: Gateway, flags: list[str]) -> None:
        self.gateway = gateway
        self.agent_token = make_token(flags, "agent-js", scopes=("run",))
        self.reviewer = Reviewer(gateway.url, make_token(flags, "alice", scopes=("review",)))


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, ledger: Ledger) -> Iterator[Setup]:
    node_or_skip()  # before the gateway starts
    tmp_path = tmp_path_factory.mktemp("gateway-node")
    flags = store_flags(tmp_path)
    policy = write_policy(tmp_path)
    with http_gateway(tmp_path, [f"notes={upstream_spec(ledger)}"], flags, policy=policy, hold=30) as gateway:
        found = Setup(gateway, flags)
        yield found
        found.reviewer.close()


def http_client(setup: Setup, tmp_path: Path, *calls: tuple[str, dict[str, Any]]) -> NodeClient:
    spec = {
        "transport": "http",
        "url": setup.gateway.mcp_url,
        "token": setup.agent_token,
        "calls": [{"name": name, "arguments": args} for name, args in calls],
    }
    return NodeClient(node_or_skip(), spec, tmp_path / "node.err")


def answer(reviewer: Reviewer, tool: str, decision: dict[str, Any], **args: Any) -> dict[str, Any]:
    item = reviewer.review_of(tool, **args)
    response = reviewer.answer(item, decision)
    assert response.status_code == 202, response.text
    return item


def connected(client: NodeClient) -> list[str]:
    """The first two steps: connected to the gateway, and the names it lists."""
    assert client.next("connected")["server"]["name"] == "handrail-mcp-mcp"
    return [tool["name"] for tool in client.next("tools")["tools"]]


def test_http_lists_tools_and_an_approved_call_runs_once(
    setup: Setup, tmp_path: Path, ledger: Ledger
) -> None:
    text, tag = f"js approved {fresh_id()}", f"js{fresh_id()}"
    client = http_client(setup, tmp_path, ("note_stats", {"tag": tag}), ("write_note", {"text": text}))
    try:
        names = connected(client)
        assert {"write_note", "read_notes", "delete_note", "handrail_await_review"} <= set(names)
        client.next("calling")
        stats = client.next("result")  # not gated: forwarded at once, checked by the SDK's schema
        client.next("calling")
        item = answer(setup.reviewer, "write_note", {"type": "approve"}, text=text)
        result = client.next("result")
        client.finish()
    finally:
        client.close()
    assert not stats["isError"] and set(stats["structured"]) == {"count", "longest"}, stats
    assert len(ledger.runs("note_stats", tag=tag)) == 1
    assert not result["isError"] and result["texts"][0].startswith("saved note"), result
    assert result["progress"] >= 1  # the gateway reported progress while the review waited
    assert len(ledger.runs("write_note", text=text)) == 1
    assert item["metadata"]["mcp_client"] == "handrail-gateway-check 1.0.0"


def test_http_a_rejected_call_is_a_tool_error_with_the_message(
    setup: Setup, tmp_path: Path, ledger: Ledger
) -> None:
    note = fresh_id()
    client = http_client(setup, tmp_path, ("delete_note", {"note_id": note}))
    try:
        connected(client)
        client.next("calling")
        answer(setup.reviewer, "delete_note", {"type": "reject", "message": "keep it, js"}, note_id=note)
        result = client.next("result")
        client.finish()
    finally:
        client.close()
    assert result["isError"], result
    assert "keep it, js" in result["texts"][0] and "Rejected by alice" in result["texts"][0]
    assert result["review"]["status"] == "rejected"
    assert ledger.runs("delete_note", note_id=note) == []


def test_http_a_hold_that_runs_out_and_await_review_collects_the_approval(
    tmp_path: Path, ledger: Ledger
) -> None:
    node = node_or_skip()
    text = f"js later {fresh_id()}"
    flags = store_flags(tmp_path)
    upstreams = [f"notes={upstream_spec(ledger)}"]
    with http_gateway(tmp_path, upstreams, flags, policy=write_policy(tmp_path), hold=2) as gateway:
        setup = Setup(gateway, flags)
        spec = {
            "transport": "http",
            "url": gateway.mcp_url,
            "token": setup.agent_token,
            "calls": [{"name": "write_note", "arguments": {"text": text}}],
        }
        client = NodeClient(node, spec, tmp_path / "node.err")
        try:
            connected(client)
            client.next("calling")
            pending = client.next("result")
            review = client.next("pending")["review_id"]
            assert ledger.runs("write_note", text=text) == []
            item = answer(setup.reviewer, "write_note", {"type": "approve"}, text=text)
            result = client.next("result")
            while result["review"] is not None and result["review"]["status"] == "pending":
                assert client.next("pending")["review_id"] == review  # answered after a hold ran out
                result = client.next("result")
            client.finish()
        finally:
            client.close()
            setup.reviewer.close()
    assert pending["isError"] and pending["texts"][0].startswith("Review pending"), pending
    assert pending["review"] == {"review_id": review, "status": "pending"}
    assert "handrail_await_review" in pending["texts"][0]
    assert item["thread_id"] == review
    assert result["name"] == "handrail_await_review"
    assert not result["isError"] and result["texts"][0].startswith("saved note"), result
    assert len(ledger.runs("write_note", text=text)) == 1


def test_stdio_the_client_launches_the_gateway_and_gets_each_outcome(tmp_path: Path, ledger: Ledger) -> None:
    node = node_or_skip()
    text, note = f"js stdio {fresh_id()}", fresh_id()
    flags = store_flags(tmp_path)
    reviewer_token = make_token(flags, "alice", scopes=("review",))
    gateway_err = tmp_path / "gateway.err"
    args = ["mcp", "--upstream", f"notes={upstream_spec(ledger)}", *flags]
    args += ["--policy", str(write_policy(tmp_path)), "--review-port", "0", "--hold", "30"]
    spec = {
        "transport": "stdio",
        "command": HANDRAIL,
        "args": args,
        "stderr": str(gateway_err),
        "calls": [
            {"name": "write_note", "arguments": {"text": text}},
            {"name": "delete_note", "arguments": {"note_id": note}},
        ],
    }
    client = NodeClient(node, spec, tmp_path / "node.err")
    reviewer: Reviewer | None = None
    try:
        names = connected(client)
        assert {"write_note", "delete_note", "handrail_await_review"} <= set(names)
        reviewer = Reviewer(review_url(gateway_err), reviewer_token)
        client.next("calling")
        approved = answer(reviewer, "write_note", {"type": "approve"}, text=text)
        wrote = client.next("result")
        client.next("calling")
        answer(reviewer, "delete_note", {"type": "reject", "message": "not over stdio"}, note_id=note)
        deleted = client.next("result")
        client.finish()
    finally:
        client.close()
        if reviewer is not None:
            reviewer.close()
    assert not wrote["isError"] and wrote["texts"][0].startswith("saved note"), wrote
    assert len(ledger.runs("write_note", text=text)) == 1
    assert approved["metadata"]["mcp_client"] == "handrail-gateway-check 1.0.0"
    assert approved["metadata"]["mcp_session"].startswith("stdio-")
    assert deleted["isError"], deleted
    assert "not over stdio" in deleted["texts"][0] and "Rejected by alice" in deleted["texts"][0]
    assert ledger.runs("delete_note", note_id=note) == []
