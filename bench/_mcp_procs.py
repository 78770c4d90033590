"""Processes, clients and the reviewer of ``bench/mcp.py`` (see its documentation).

Every process the benchmark starts is in a session of its own (``start_new_session``):
the HTTP upstream and gateways by :class:`Processes`, the stdio ones by the ``mcp``
SDK's ``stdio_client`` (which starts them so, and kills their group when it closes).
:func:`end_children` is the last resort on the way out: it ends whatever this process
started that is still running, by its process group id.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
HANDRAIL = str(Path(PYTHON).with_name("handrail"))
UPSTREAM = HERE / "_mcp_upstream.py"
DSN = os.environ.get("HANDRAIL_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
APPROVE = {"answer": {"decisions": [{"type": "approve"}]}}


def upstream_command() -> str:
    """The bench upstream over stdio, as an ``--upstream`` command line."""
    return f"{shlex.quote(PYTHON)} {shlex.quote(str(UPSTREAM))}"


def policy(folder: Path) -> Path:
    """The gateway's policy: ``echo`` is not reviewed, ``stamp`` is."""
    path = folder / "handrail.toml"
    path.write_text("[agents.mcp.interrupt_on]\necho = false\nstamp = true\n", encoding="utf-8")
    return path


# Stores ----------------------------------------------------------------------------------------
class Stores:
    """The store flags of each gateway: a SQLite file in the scratch folder, or a
    PostgreSQL schema of its own (dropped by :meth:`drop`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.schemas: list[str] = []

    def flags(self, store: str, name: str) -> list[str]:
        if store == "sqlite":
            return ["--db", str(self.folder / f"{name}.db")]
        schema = f"bench_mcp_{os.getpid()}_{name}".replace("-", "_")
        self.schemas.append(schema)
        return ["--postgres", DSN, "--schema", schema]

    def drop(self) -> None:
        if not self.schemas:
            return
        import psycopg

        with psycopg.connect(DSN, autocommit=True) as conn:
            for schema in self.schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        self.schemas.clear()


def make_token(flags: list[str], name: str, scope: str) -> str:
    """A token in a gateway's service tables (as ``handrail tokens create`` makes one)."""
    from handrail.server.db import ServerDB
    from handrail.server.tokens import TokenStore

    if flags[0] == "--db":
        db = ServerDB.open(db_path=flags[1])
    else:
        db = ServerDB.open(postgres=flags[1], schema=flags[3])
    try:
        _, token = TokenStore(db).create(name, [], scopes=[scope])
        return token
    finally:
        db.close()


# Processes -------------------------------------------------------------------------------------
class Processes:
    """The processes this benchmark starts itself, each the leader of its own group."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.running: list[subprocess.Popen[str]] = []

    def start(self, name: str, args: list[str], ready: str, timeout: float = 60.0) -> re.Match[str]:
        """Start ``args``; return the match of ``ready`` in its first stdout lines."""
        log = (self.folder / f"{name}.err").open("a")
        process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
        )
        log.close()
        self.running.append(process)
        assert process.stdout is not None
        deadline = time.monotonic() + timeout
        for line in process.stdout:
            found = re.search(ready, line)
            if found:
                threading.Thread(target=process.stdout.read, daemon=True).start()  # never blocks it
                return found
            if time.monotonic() > deadline:
                break
        process.wait(5)
        errors = (self.folder / f"{name}.err").read_text()[-3000:]
        raise SystemExit(f"{name} did not start ({process.returncode}):\n{errors}")

    def upstream_http(self) -> str:
        """The bench upstream over streamable HTTP; its MCP URL."""
        found = self.start("upstream-http", [PYTHON, str(UPSTREAM), "--http"], r"^PORT (\d+)")
        return f"http://127.0.0.1:{found.group(1)}/mcp"

    def gateway_http(self, name: str, upstream: str, flags: list[str], policy_file: Path) -> str:
        """``handrail mcp --http --port 0`` in front of ``upstream``; its base URL."""
        args = [HANDRAIL, "mcp", "--http", "--port", "0", "--upstream", f"bench={upstream}"]
        args += [*flags, "--policy", str(policy_file)]
        found = self.start(name, args, r"MCP at (http://127\.0\.0\.1:\d+)/mcp")
        return found.group(1)

    def stop(self) -> None:
        for process in self.running:
            if process.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        for process in self.running:
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.running.clear()


def children() -> list[tuple[int, str]]:
    """This process's children still running: (pid, command line)."""
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            if parent == me:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append((int(entry.name), command))
        except (OSError, ValueError, IndexError):
            continue
    return found


def end_children() -> None:
    """End what this process started and left running (its group, when it leads one)."""
    for pid, _ in children():
        with suppress(ProcessLookupError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGTERM)
            else:
                os.kill(pid, signal.SIGTERM)


def gateway_pids() -> dict[str, int]:
    """The running gateways this process started (directly or through the SDK), by port or
    store: for py-spy."""
    return {command: pid for pid, command in children() if " mcp " in command}


# Clients ---------------------------------------------------------------------------------------
@asynccontextmanager
async def stdio_client(command: str, args: list[str], errlog: Path) -> AsyncIterator[Any]:
    """The SDK's ``Client`` over stdio, launching ``command args`` as a desktop client does."""
    from mcp import Client, StdioServerParameters
    from mcp import stdio_client as transport

    params = StdioServerParameters(command=command, args=args, env=dict(os.environ))
    with errlog.open("a") as log:
        async with Client(transport(params, errlog=log)) as client:
            yield client


@asynccontextmanager
async def http_client(url: str, token: str | None) -> AsyncIterator[Any]:
    """The SDK's ``Client`` over streamable HTTP (``url``: the MCP endpoint)."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def review_url(errlog: Path, timeout: float = 60.0) -> str:
    """Where a stdio gateway's reviewer side listens (``--review-port``; it says so on stderr)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = errlog.read_text() if errlog.exists() else ""
        if "reviews at " in text:
            return text.split("reviews at ")[1].split("/inbox")[0]
        time.sleep(0.05)
    raise SystemExit(f"the stdio gateway did not say where reviews are: {errlog.read_text()[-2000:]}")


# The reviewer ----------------------------------------------------------------------------------
class Reviewer:
    """A reviewer on a gateway's live inbox (``GET /handrail/events``, server-sent events)
    who approves each review of ``stamp`` as soon as it is told of it.

    ``answers[text]``: (thread id, when it was told, when its POST returned), perf_counter
    seconds, for the call whose argument was ``text``.
    """

    def __init__(self, url: str, token: str) -> None:
        self.http = httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        self.answers: dict[str, tuple[str, float, float]] = {}
        self.listening = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.task = asyncio.create_task(self._listen())
        async with asyncio.timeout(30):
            await self.listening.wait()

    async def _listen(self) -> None:
        async with self.http.stream("GET", "/handrail/events") as stream:
            stream.raise_for_status()
            event = ""
            async for line in stream.aiter_lines():
                self.listening.set()
                if line.startswith("event:"):
                    event = line[6:].strip()
                    continue
                if not line.startswith("data:") or event != "review.requested":
                    continue
                told = time.perf_counter()
                data = json.loads(line[5:])
                (request,) = data["value"]["action_requests"]
                path = f"/handrail/threads/{data['thread_id']}/interrupts/{data['interrupt_id']}/answer"
                response = await self.http.post(path, json=APPROVE)
                response.raise_for_status()
                self.answers[request["args"]["text"]] = (data["thread_id"], told, time.perf_counter())

    async def trail(self, thread_id: str) -> dict[str, float]:
        """When each event of the thread's audit trail was stamped by the gateway as it
        wrote it (wall-clock seconds; the first of each kind)."""
        response = await self.http.get(f"/handrail/threads/{thread_id}/audit")
        response.raise_for_status()
        at: dict[str, float] = {}
        for entry in response.json():
            at.setdefault(entry["event"], datetime.fromisoformat(entry["at"]).timestamp())
        return at

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await self.http.aclose()
