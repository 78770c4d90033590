"""Helpers for the gateway tests: a ``handrail mcp`` process, its tokens, a reviewer over
the gateway's own HTTP API, and MCP clients of the official SDK."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
from _mcp_support import UPSTREAM, Ledger

HANDRAIL = str(Path(sys.executable).with_name("handrail"))

POLICY = """
[agents.mcp.interrupt_on]
read_notes = false
note_stats = false
whoami = false
write_note = true
delete_note = true
slow_note = true
crash_server = true
note_picture = true

[agents.mcp.interrupt_on.archive_note]
allowed_decisions = ["approve", "reject"]
expires_after = "2s"
"""


def upstream_spec(ledger: Ledger, *flags: str) -> str:
    """An ``--upstream`` command that runs the test server with the ledger's variable."""
    env = shutil.which("env") or "/usr/bin/env"
    return (
        f"{env} {next(iter(ledger.env))}={ledger.path} {sys.executable} {UPSTREAM} {' '.join(flags)}".strip()
    )


def write_policy(tmp_path: Path, text: str = POLICY) -> Path:
    path = tmp_path / "handrail.toml"
    path.write_text(text, encoding="utf-8")
    return path


def store_flags(tmp_path: Path, postgres: tuple[str, str] | None = None) -> list[str]:
    if postgres is not None:
        return ["--postgres", postgres[0], "--schema", postgres[1]]
    return ["--db", str(tmp_path / "gateway.db")]


def make_token(flags: list[str], name: str, *, scopes: tuple[str, ...], roles: tuple[str, ...] = ()) -> str:
    """A token in the gateway's service tables (as ``handrail tokens create`` makes it)."""
    from handrail.server.db import ServerDB
    from handrail.server.tokens import TokenStore

    if flags[0] == "--db":
        db = ServerDB.open(db_path=flags[1])
    else:
        db = ServerDB.open(postgres=flags[1], schema=flags[3])
    try:
        _, token = TokenStore(db).create(name, list(roles), scopes=list(scopes))
        return token
    finally:
        db.close()


class Gateway:
    """A ``handrail mcp --http`` process; ``url`` is its base (``/mcp``, ``/handrail/...``)."""

    def __init__(self, process: subprocess.Popen[str], url: str) -> None:
        self.process = process
        self.url = url

    @property
    def mcp_url(self) -> str:
        return self.url + "/mcp"

    def kill(self) -> None:
        """SIGKILL: no cleanup of any kind."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


@contextmanager
def http_gateway(
    tmp_path: Path, upstreams: list[str], flags: list[str], *, policy: Path | None, hold: float = 55.0
) -> Iterator[Gateway]:
    """Run ``handrail mcp --http --port 0`` (its own process group: a kill takes its upstreams)."""
    args = [HANDRAIL, "mcp", "--http", "--port", "0", "--hold", str(hold), *flags]
    for upstream in upstreams:
        args += ["--upstream", upstream]
    if policy is not None:
        args += ["--policy", str(policy)]
    errors = (tmp_path / "gateway.err").open("a")
    process = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=errors,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    gateway: Gateway | None = None
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if "MCP at " not in line:
            process.wait(timeout=10)
            raise RuntimeError(
                f"the gateway did not start: {line!r} {(tmp_path / 'gateway.err').read_text()}"
            )
        gateway = Gateway(process, line.split("MCP at ")[1].split("/mcp")[0])
        yield gateway
    finally:
        if gateway is not None:
            gateway.stop()
        elif process.poll() is None:
            process.kill()
            process.wait()
        errors.close()


class Reviewer:
    """A reviewer using the gateway's reviewer side (the service's HTTP API)."""

    def __init__(self, url: str, token: str) -> None:
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)

    def inbox(self) -> list[dict[str, Any]]:
        response = self.http.get("/handrail/inbox")
        response.raise_for_status()
        items: list[dict[str, Any]] = response.json()["items"]
        return items

    def review_of(self, tool: str, timeout: float = 20.0, **args: Any) -> dict[str, Any]:
        """Wait for the pending review of a call of ``tool`` whose arguments include ``args``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for item in self.inbox():
                for request in item["value"].get("action_requests", []):
                    if request["name"] == tool and all(request["args"].get(k) == v for k, v in args.items()):
                        return item
            time.sleep(0.05)
        raise AssertionError(f"no review of {tool} {args} appeared: {self.inbox()}")

    def answer(self, item: dict[str, Any], decision: dict[str, Any]) -> httpx.Response:
        path = f"/handrail/threads/{item['thread_id']}/interrupts/{item['interrupt_id']}/answer"
        return self.http.post(path, json={"answer": {"decisions": [decision]}})

    def audit(self, thread_id: str) -> list[dict[str, Any]]:
        response = self.http.get(f"/handrail/threads/{thread_id}/audit")
        response.raise_for_status()
        entries: list[dict[str, Any]] = response.json()
        return entries

    def close(self) -> None:
        self.http.close()


@asynccontextmanager
async def http_client(url: str, token: str | None) -> AsyncIterator[Any]:
    """The SDK's ``Client`` over streamable HTTP, with ``token`` as the bearer."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)) as http,
        Client(streamable_http_client(url + "/mcp", http_client=http)) as client,
    ):
        yield client


@asynccontextmanager
async def stdio_client_of(args: list[str], errlog: Path) -> AsyncIterator[Any]:
    """The SDK's ``Client`` over stdio, launching ``handrail mcp ARGS`` as a desktop client does."""
    from mcp import Client, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=HANDRAIL, args=["mcp", *args], env=dict(os.environ))
    with errlog.open("a") as log:
        async with Client(stdio_client(params, errlog=log)) as client:
            yield client


def review_url(errlog: Path, timeout: float = 30.0) -> str:
    """The reviewer side's URL a stdio gateway wrote on stderr (``--review-port``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = errlog.read_text() if errlog.exists() else ""
        if "reviews at " in text:
            return text.split("reviews at ")[1].split("/inbox")[0]
        time.sleep(0.05)
    raise AssertionError(f"the stdio gateway did not say where reviews are: {errlog.read_text()}")
