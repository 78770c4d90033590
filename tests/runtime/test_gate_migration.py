"""Threads stored before the gate (SPEC rules 19-21) keep working, and nothing runs unanswered.

``fixtures/threads_before_the_gate.db`` was written by handrail at 932aab4, which kept each
decision twice: as the answer event in the log and in the state's ``_hitl_decisions``.
Today's handrail reads decisions from the log only; the state's copy is ignored.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from handrail import (
    Command,
    HumanInTheLoopMiddleware,
    ScriptedModel,
    SqliteSaver,
    ToolMessage,
    create_agent,
    tool,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "threads_before_the_gate.db"
POLICY = {"write_file": True, "execute_sql": True, "refresh_cache": True}
ALICE = {"id": "alice", "roles": []}


@pytest.fixture
def agent(tmp_path: Path) -> Any:
    path = tmp_path / "threads.db"
    shutil.copy(FIXTURE, path)
    ran: list[tuple[str, dict[str, Any]]] = []

    @tool
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        ran.append(("write_file", {"path": path, "content": content}))
        return f"wrote {path}"

    @tool
    def execute_sql(query: str) -> str:
        """Run SQL."""
        ran.append(("execute_sql", {"query": query}))
        return "ok"

    @tool(idempotent=True)
    def refresh_cache(key: str) -> str:
        """Refresh a cache entry (safe to run again)."""
        ran.append(("refresh_cache", {"key": key}))
        return "refreshed"

    def build(mode: str = "batched") -> Any:
        built = create_agent(
            ScriptedModel([{"content": "done"}] * 3),
            tools=[write_file, execute_sql, refresh_cache],
            middleware=[HumanInTheLoopMiddleware(POLICY, interrupt_mode=mode)],  # type: ignore[arg-type]
            checkpointer=SqliteSaver(path),
        )
        built.ran = ran
        return built

    return build


def cfg(thread: str, **extra: Any) -> Any:
    return {"configurable": {"thread_id": thread, **extra}}


def results(agent: Any, thread: str) -> list[ToolMessage]:
    return [m for m in agent.get_state(cfg(thread)).values["messages"] if isinstance(m, ToolMessage)]


def test_a_pending_review_stays_pending_and_runs_once_answered(agent: Any) -> None:
    a = agent()
    (pending,) = a.get_state(cfg("pending")).interrupts
    a.invoke(None, cfg("pending"))
    assert a.ran == []
    a.invoke(
        Command(resume={pending.id: {"decisions": [{"type": "approve"}]}}), cfg("pending", reviewer=ALICE)
    )
    a.invoke(None, cfg("pending"))
    assert a.ran == [("write_file", {"path": "p", "content": "x"})]


def test_a_decided_edit_runs_the_edited_call_once(agent: Any) -> None:
    a = agent()
    a.invoke(None, cfg("decided-edit"))
    a.invoke(None, cfg("decided-edit"))
    assert a.ran == [("write_file", {"path": "q", "content": "y"})]
    (result,) = results(a, "decided-edit")
    assert "Executed instead: write_file" in str(result.content)


def test_a_decided_rejection_runs_nothing(agent: Any) -> None:
    a = agent()
    a.invoke(None, cfg("decided-reject"))
    assert a.ran == []
    (result,) = results(a, "decided-reject")
    assert result.status == "error" and "no" in str(result.content)


def test_a_decided_batch_runs_what_was_approved_only(agent: Any) -> None:
    a = agent()
    a.invoke(None, cfg("decided-mixed"))
    assert a.ran == [("write_file", {"path": "p", "content": "x"})]
    assert [m.status for m in results(a, "decided-mixed")] == ["success", "error"]


def test_a_per_call_thread_runs_the_answered_call_and_waits_for_the_other(agent: Any) -> None:
    a = agent("per_call")
    out = a.invoke(None, cfg("per-call"))
    assert a.ran == [("write_file", {"path": "p", "content": "x"})]
    (still,) = out["__interrupt__"]
    assert still.value["name"] == "execute_sql"
    a.invoke(Command(resume={still.id: {"type": "reject"}}), cfg("per-call", reviewer=ALICE))
    assert len(a.ran) == 1


def test_an_idempotent_call_that_died_runs_again_as_it_was_decided(agent: Any) -> None:
    """Rule 9: an idempotent tool runs again under the answer its start used (an edit)."""
    a = agent()
    a.invoke(None, cfg("crashed-idempotent"))
    a.invoke(None, cfg("crashed-idempotent"))
    assert a.ran == [("refresh_cache", {"key": "k2"})]
