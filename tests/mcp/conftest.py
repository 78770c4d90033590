"""Fixtures for the MCP tests: one ledger, and upstream servers shared by the session.

The shared tools are an ``McpTools`` (its sessions live on a loop of their own), so the
tests' event loops, sync and async, all use the same sessions. Tests tell their runs
apart by the arguments (``fresh_id()``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _mcp_support import Ledger, http_upstream, upstream_command

from handrail.mcp import McpTools, load_tools_sync


@pytest.fixture(scope="session")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Ledger:
    return Ledger(tmp_path_factory.mktemp("mcp") / "ledger.jsonl")


@pytest.fixture(scope="session")
def notes(ledger: Ledger) -> Iterator[McpTools]:
    """The upstream server's tools over stdio, named ``notes``."""
    with load_tools_sync(command=upstream_command(), env=ledger.env, name="notes") as tools:
        yield tools


@pytest.fixture(scope="session")
def http_url(ledger: Ledger) -> Iterator[str]:
    """The URL of the upstream server over streamable HTTP."""
    with http_upstream(ledger) as url:
        yield url
