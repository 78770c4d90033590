"""``handrail audit verify`` (SPEC rule 18): checks stored threads against their hash chains
and names the first record that does not match; exit 0 when intact, 1 when not, 2 for a
mistake on the command line. And ``handrail audit`` across threads, where a deleted thread
shows as the record its deletion left (SPEC rule 21)."""

from __future__ import annotations

import csv
import io
import sqlite3
from pathlib import Path

import orjson
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


# handrail audit, across threads: deletions (SPEC rule 21) -----------------------------------------
AGENT_MODULE = """
from handrail import ScriptedModel, create_agent

agent = create_agent(ScriptedModel([]), tools=[])
"""
WHO = {"id": "ops\x1b[2J\u202e", "roles": ["admin"]}  # a name with an escape sequence and a bidi override


def _deleted_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], str]:
    """The store of ``_store`` with t1 deleted by ``WHO``; the flags that reach it, and t1's head hash."""
    db = tmp_path / "threads.db"
    _store(db)
    (tmp_path / "audit_cli_agent.py").write_text(AGENT_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "250")  # one table line per entry, the head hash whole
    with SqliteSaver(db) as saver:
        agent = create_agent(ScriptedModel([]), [], checkpointer=saver)
        head = agent.verify_audit(config("t1")).head_hash
        assert head is not None and agent.delete_thread("t1", by=WHO)
    return ["--db", str(db), "--agent", "audit_cli_agent:agent"], head


def test_the_audit_across_threads_shows_who_deleted_a_thread_and_its_head(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    flags, head = _deleted_store(tmp_path, monkeypatch)
    assert main(["audit", *flags]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    (at,) = [i for i, line in enumerate(lines) if "thread_deleted" in line]
    line = lines[at]
    heading = [h for h in lines[:at] if h.startswith("thread ")][-1]  # each thread's id heads its entries
    assert heading == "thread t1" and f"head hash {head}" in line and "ended at record 11" in line
    assert "ops\\x1b[2J\\u202e" in line  # shown as escapes ...
    assert "\x1b" not in out and "\u202e" not in out  # ... never written raw
    assert "t2" in out and "answered" in out  # the live thread's entries, around it

    assert main(["audit", *flags, "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out, newline="")))
    (deleted,) = [row for row in rows if row["event"] == "thread_deleted"]
    assert deleted["thread_id"] == "t1" and deleted["seq"] == "11"
    assert orjson.loads(deleted["by"]) == WHO
    assert orjson.loads(deleted["value"]) == {"head_seq": 11, "head_hash": head, "metadata": {}}
    assert [row["at"] for row in rows] == sorted(row["at"] for row in rows)

    # the window: the deletion is the newest entry
    assert main(["audit", *flags, "--csv", "--since", deleted["at"]]) == 0
    assert [row["event"] for row in csv.DictReader(io.StringIO(capsys.readouterr().out))] == [
        "thread_deleted"
    ]
    assert main(["audit", *flags, "--csv", "--until", "2000-01-01", "--limit", "5"]) == 0
    assert list(csv.DictReader(io.StringIO(capsys.readouterr().out))) == []


@pytest.mark.parametrize(
    ("argv", "code", "said"),
    [
        (["audit", "t1", "--since", "0"], 1, "--since, --until and --limit pick entries across threads"),
        (["audit", "t1", "t2"], 1, "takes one thread id, or none"),
        (["audit", "--since", "soon\x1b[2J"], 2, "not a time: 'soon\\x1b[2J'"),
        (["audit", "--until", "nan"], 2, "not a time"),
        (["audit", "verify", "t1", "--since", "0"], 2, "--since, --until and --limit pick the audit trail"),
        (["audit", "--limit", "0"], 1, "limit must be an integer from 1"),
    ],
)
def test_mistakes_in_the_audit_across_threads(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    code: int,
    said: str,
) -> None:
    flags, _ = _deleted_store(tmp_path, monkeypatch)
    assert main([*argv, *flags]) == code
    err = capsys.readouterr().err
    assert said in " ".join(err.split()) and "\x1b" not in err


def test_verify_without_a_store_names_the_default_it_read_and_how_to_name_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25, item 7f: not "start a demo first", but which store was looked at, and how to
    name another."""
    monkeypatch.chdir(tmp_path)
    assert main(["audit", "verify", "--all"]) == 1
    said = capsys.readouterr().err
    default = str(tmp_path / "handrail.db")
    assert f"no handrail store at '{default}' (the default, as no --db or --postgres was given)" in said
    assert "--db FILE or --postgres DSN" in said and "demo" not in said
    assert main(["audit", "verify", "--all", "--db", "other.db"]) == 1
    said = capsys.readouterr().err
    assert f"no handrail store at '{tmp_path / 'other.db'}': name the store" in said and "default" not in said
