"""Shared fixtures: the SPEC §1 tools, a ledger of what ran, and an agent factory."""

from __future__ import annotations

from typing import Any

import pytest

from handrail import (
    Agent,
    AgentMiddleware,
    HumanInTheLoopMiddleware,
    InMemorySaver,
    ScriptedModel,
    create_agent,
    tool,
)
from handrail.checkpoint.base import BaseCheckpointSaver

from _support import SPEC_POLICY, AgentFactory, Ledger


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture
def spec_tools(ledger: Ledger) -> list[Any]:
    @tool
    def write_file(path: str, content: str) -> str:
        """Write text to a file.

        Args:
            path: Where to write.
            content: What to write.
        """
        ledger.calls.append(("write_file", {"path": path, "content": content}))
        return f"wrote {len(content)} bytes to {path}"

    @tool
    def execute_sql(query: str) -> str:
        """Run a SQL statement."""
        ledger.calls.append(("execute_sql", {"query": query}))
        return "3 rows affected"

    @tool
    def read_data(table: str, limit: int = 10) -> str:
        """Read rows from a table."""
        ledger.calls.append(("read_data", {"table": table, "limit": limit}))
        return f"{limit} rows from {table}"

    return [write_file, execute_sql, read_data]


@pytest.fixture
def make_agent(spec_tools: list[Any]) -> AgentFactory:
    """Build an agent over the SPEC tools with a scripted model."""

    def build(
        script: list[Any],
        *,
        policy: dict[str, Any] | None = None,
        mode: str = "batched",
        middleware: list[AgentMiddleware] | None = None,
        checkpointer: BaseCheckpointSaver | str | None = "memory",
        tools: list[Any] | None = None,
        **hitl: Any,
    ) -> Agent:
        saver = InMemorySaver() if checkpointer == "memory" else checkpointer
        stack = list(middleware or [])
        if policy is not False:
            stack.append(
                HumanInTheLoopMiddleware(
                    interrupt_on=policy if policy is not None else SPEC_POLICY,
                    interrupt_mode=mode,  # type: ignore[arg-type]
                    **hitl,
                )
            )
        return create_agent(
            ScriptedModel(script),
            tools=tools if tools is not None else spec_tools,
            middleware=stack,
            checkpointer=saver,  # type: ignore[arg-type]
        )

    return build


# The slow job: tests that drive Chromium, several processes or long fault runs. `make test`
# leaves them to `make test-slow` (CI runs both), which keeps `make test` within minutes.
SLOW_MODULES = frozenset(
    {
        "tests/server/web/test_browser.py",
        "tests/server/web/test_browser_policies.py",
        "tests/server/web/test_browser_grants.py",
        "tests/server/web/test_reviewer_day.py",
        "tests/server/test_workers.py",
        "tests/server/test_live_inbox.py",
        "tests/server/test_webhooks_processes.py",
        "tests/checkpoint/test_processes.py",
        "tests/checkpoint/test_fault_injection.py",
        "tests/checkpoint/test_sqlite_damaged_columns.py",
        "tests/checkpoint/test_postgres_damaged_columns.py",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath
    for item in items:
        if item.path.relative_to(root).as_posix() in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
