"""Helpers for the MCP tests: the upstream server's command, its ledger, an HTTP upstream,
and the savers of the three backends."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from handrail import HumanInTheLoopMiddleware, ScriptedModel, create_agent
from handrail.agent import Agent

UPSTREAM = Path(__file__).resolve().with_name("upstream_server.py")  # run, never imported here
LEDGER_ENV = "HANDRAIL_MCP_LEDGER"
PG_DSN = os.environ.get("HANDRAIL_TEST_POSTGRES_DSN") or "postgresql://postgres@127.0.0.1:5432/test"

_ids = itertools.count(1000)


def fresh_id() -> int:
    """A note number no other test of this process uses (the ledger is shared)."""
    return next(_ids)


def upstream_command(*flags: str) -> list[str]:
    return [sys.executable, str(UPSTREAM), *flags]


class Ledger:
    """What the upstream servers really ran, read from their ledger file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def env(self) -> dict[str, str]:
        return {LEDGER_ENV: str(self.path)}

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.path.open(encoding="utf-8") as file:
            return [json.loads(line) for line in file if line.strip()]

    def runs(self, tool: str, **args: Any) -> list[dict[str, Any]]:
        """The executions of ``tool`` whose arguments include ``args``."""
        return [
            entry
            for entry in self.entries()
            if entry["tool"] == tool and all(entry["args"].get(k) == v for k, v in args.items())
        ]


@contextmanager
def http_upstream(ledger: Ledger) -> Iterator[str]:
    """Run the upstream server over streamable HTTP; yield its URL."""
    process = subprocess.Popen(
        upstream_command("--http"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **ledger.env},
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"the HTTP upstream did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def gated_agent(tools: Any, script: list[Any], saver: Any, policy: dict[str, Any] | None = None) -> Agent:
    """An agent over ``tools`` with a scripted model; ``delete_note`` is reviewed."""
    return create_agent(
        ScriptedModel([*script, *[{"content": "done"}] * 3]),
        tools=tools,
        middleware=[HumanInTheLoopMiddleware(policy if policy is not None else {"delete_note": True})],
        checkpointer=saver,
    )


def postgres_or_skip() -> str:
    try:
        import psycopg

        with psycopg.connect(PG_DSN, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        if os.environ.get("HANDRAIL_REQUIRE_POSTGRES"):
            raise
        pytest.skip(f"PostgreSQL at {PG_DSN} is not reachable ({exc})")
    return PG_DSN


@contextmanager
def saver_for(backend: str, tmp_path: Path) -> Iterator[Any]:
    """A new saver of ``backend``; a PostgreSQL one in a schema of its own, dropped after."""
    if backend == "memory":
        from handrail import InMemorySaver

        yield InMemorySaver()
    elif backend == "sqlite":
        from handrail.checkpoint.sqlite import SqliteSaver

        saver = SqliteSaver(tmp_path / "threads.db")
        try:
            yield saver
        finally:
            saver.close()
    else:
        from handrail.checkpoint.postgres import PostgresSaver

        dsn = postgres_or_skip()
        schema = f"hr_mcp_{uuid.uuid4().hex[:12]}"
        saver = PostgresSaver.from_conn_string(dsn, schema=schema, pool_size=2)
        try:
            saver.setup()
            yield saver
        finally:
            saver.close()
            import psycopg

            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def wait_for(predicate: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())
