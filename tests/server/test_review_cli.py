"""The review CLI against a store and against a real service (rules 11 and 12 from a terminal)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import served_agent

from conftest import Backend, make_token
from handrail import SqliteSaver
from handrail.cli import main

HERE = Path(__file__).resolve().parent


@pytest.fixture
def store_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A SQLite store with two paused threads (SQL and a file write); flags to reach it."""
    monkeypatch.chdir(HERE)
    served_agent.RAN.clear()
    path = tmp_path / "h.db"
    with SqliteSaver(path) as saver:
        agent = served_agent.build(saver)
        agent.invoke({"messages": ["DELETE FROM logs"]}, {"configurable": {"thread_id": "sql-1"}})
        agent.invoke({"messages": ["write notes.txt"]}, {"configurable": {"thread_id": "file-1"}})
    return ["--db", str(path), "--agent", "served_agent:agent"]


def ids(store_flags: list[str], capsys: pytest.CaptureFixture[str], *roles: str) -> str:
    assert main(["inbox", *store_flags, "--reviewer", "alice", *(f"--role={r}" for r in roles)]) == 0
    return capsys.readouterr().out


def test_the_inbox_shows_what_the_reviewer_may_decide(
    store_flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Rule 12 through the CLI: roles filter the inbox."""
    as_dba = ids(store_flags, capsys, "dba")
    assert "sql-1" in as_dba and "file-1" in as_dba and "execute_sql" in as_dba
    as_nobody = ids(store_flags, capsys)
    assert "sql-1" not in as_nobody and "file-1" in as_nobody


def test_approve_by_id_prefix_records_the_cli_channel_and_runs(
    store_flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Rule 11: the answer is kept with the reviewer and channel cli; the agent runs it here."""
    with SqliteSaver(store_flags[1]) as saver:
        page = served_agent.build(saver).list_interrupts(tool="execute_sql")
    prefix = page.items[0].interrupt.id[:10]
    refused = main(["approve", prefix, *store_flags, "--reviewer", "bob", "--role", "ops"])
    assert refused == 1 and "no review" in capsys.readouterr().err  # bob's inbox never shows it
    assert main(["approve", prefix, *store_flags, "--reviewer", "alice", "--role", "dba"]) == 0
    out = capsys.readouterr().out
    assert "Recorded: approve by alice" in out and "done: ran DELETE FROM logs" in out
    assert served_agent.RAN == [("execute_sql", {"query": "DELETE FROM logs"})]
    assert main(["audit", "sql-1", *store_flags, "--csv"]) == 0
    csv = capsys.readouterr().out
    assert ",answered," in csv and ",cli," in csv and '""id"":""alice""' in csv
    assert main(["show", "sql-1", *store_flags]) == 0
    assert "done: ran DELETE FROM logs" in capsys.readouterr().out


def test_edit_reject_and_respond(store_flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with SqliteSaver(store_flags[1]) as saver:
        agent = served_agent.build(saver)
        file_review = agent.list_interrupts(tool="write_file").items[0].interrupt.id
        sql_review = agent.list_interrupts(tool="execute_sql").items[0].interrupt.id
    assert main(["edit", file_review, "--args", "[1]", *store_flags]) == 1
    assert "JSON object" in capsys.readouterr().err
    assert main(["edit", file_review, "--args", '{"path": "safe.txt", "content": "y"}', *store_flags]) == 0
    assert served_agent.RAN == [("write_file", {"path": "safe.txt", "content": "y"})]
    capsys.readouterr()
    assert main(["respond", sql_review, *store_flags, "--role", "dba"]) == 2  # --message is required
    assert main(["reject", sql_review, "-m", "not today", *store_flags, "--role", "dba"]) == 0
    assert "not today" in capsys.readouterr().out
    assert main(["approve", "ffff", *store_flags]) == 1
    assert "no review 'ffff'" in capsys.readouterr().err


def test_the_cli_needs_a_service_or_a_store(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HANDRAIL_URL", raising=False)
    assert main(["inbox"]) == 1
    assert "--url" in capsys.readouterr().err
    monkeypatch.setenv("HANDRAIL_URL", "http://127.0.0.1:9")
    assert main(["inbox"]) == 1
    assert "token" in capsys.readouterr().err


def test_the_cli_against_a_real_service(
    backend: Backend, served: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule 11: over a service the identity is the token's."""
    import httpx

    token = make_token(backend, "alice", "dba")
    headers = {"Authorization": f"Bearer {token}"}
    run = {"assistant_id": "sql", "input": {"messages": [{"role": "user", "content": "DROP TABLE x"}]}}
    httpx.post(f"{served}/runs/wait", json=run, headers=headers, timeout=60).raise_for_status()
    monkeypatch.setenv("HANDRAIL_URL", served)
    monkeypatch.setenv("HANDRAIL_TOKEN", token)
    assert main(["inbox"]) == 0
    listing = capsys.readouterr().out
    found = re.search(r"│ ([0-9a-f]{12}) ", listing)
    assert "execute_sql" in listing and found, listing
    interrupt_prefix = found.group(1)
    assert main(["approve", interrupt_prefix]) == 0
    assert "Recorded: approve by alice" in capsys.readouterr().out
    assert main(["inbox"]) == 0
    assert "Nothing waits" in capsys.readouterr().out
    assert main(["threads"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("HANDRAIL_TOKEN", make_token(backend, "bob", "ops"))
    assert main(["approve", interrupt_prefix]) == 1


@pytest.mark.parametrize(
    "editor, said",
    [
        ("true", "unchanged; nothing was sent"),  # quits without a change
        ("false", "exited with code 1; nothing was sent"),  # quits with an error
        ("truncate -s 0", "empty file; nothing was sent"),  # saves nothing
    ],
)
def test_quitting_the_editor_sends_nothing(
    store_flags: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    editor: str,
    said: str,
) -> None:
    """Issue 25: an editor that exits without a change, with an error or with an empty
    file is never an answer (it used to record an 'edit' with the same arguments, which ran)."""
    with SqliteSaver(store_flags[1]) as saver:
        agent = served_agent.build(saver)
        review = agent.list_interrupts(tool="write_file").items[0].interrupt.id
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", editor)
    assert main(["edit", review, "--editor", *store_flags]) == 1
    assert said in capsys.readouterr().err
    assert served_agent.RAN == []
    with SqliteSaver(store_flags[1]) as saver:
        still = [i.interrupt.id for i in served_agent.build(saver).list_interrupts(tool="write_file").items]
    assert review in still
