"""``handrail audit verify`` (SPEC rule 18): checks stored threads against their hash chains
and names the first record that does not match; exit 0 when intact, 1 when not, 2 for a
mistake on the command line."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from handrail import Command, HumanInTheLoopMiddleware, ScriptedModel, SqliteSaver, create_agent, tool
from handrail.cli import main

from _support import config, turn


def _store(path: Path) -> None:
    @tool
    def pay(amount: int) -> str:
        """Pay."""
        return f"paid {amount}"

    with SqliteSaver(path) as saver:
        for thread in ("t1", "t2"):
            agent = create_agent(
                ScriptedModel([turn({"name": "pay", "args": {"amount": 5}, "id": "p"}), {"content": "ok"}]),
                [pay],
                middleware=[HumanInTheLoopMiddleware({"pay": True})],
                checkpointer=saver,
            )
            agent.invoke({"messages": "pay"}, config(thread))
            agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config(thread))


def test_intact_threads_verify_and_a_changed_record_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "threads.db"
    _store(db)
    assert main(["audit", "verify", "--all", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "intact" in out and "t1" in out and "t2" in out and "2 of 2 threads intact" in out

    with sqlite3.connect(db) as conn:
        (seq,) = conn.execute(
            "SELECT seq FROM handrail_events WHERE thread_id = 't2' AND kind = 'tool_finished'"
        ).fetchone()
        conn.execute(
            "UPDATE handrail_events SET payload = CAST(REPLACE(CAST(payload AS TEXT), 'paid 5', 'paid 4') "
            "AS BLOB) WHERE thread_id = 't2' AND seq = ?",
            (seq,),
        )
    assert main(["audit", "verify", "t1", "t2", "--db", str(db)]) == 1
    out = capsys.readouterr().out
    assert "intact  t1" in out
    assert f"BROKEN t2: record {seq}: it does not match its hash" in " ".join(out.split())

    assert main(["audit", "verify", "nope", "--db", str(db)]) == 1
    assert "no such thread" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [["audit", "verify"], ["audit", "verify", "t1", "--all"], ["audit", "verify", "t1", "--url", "http://x"]],
)
def test_mistakes_on_the_command_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    db = tmp_path / "threads.db"
    _store(db)
    assert main([*argv, "--db", str(db)]) == 2
    assert "handrail: error:" in capsys.readouterr().err
