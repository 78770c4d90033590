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
    said = capsys.readouterr().err  # bob's inbox never shows it; he hears which role decides it
    assert refused == 1 and "you may not decide review" in said and "it needs role 'dba'" in said, said
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
    assert main(["show", "file-1", *store_flags]) == 0  # the tool's own result, not the model's notice
    shown = " ".join(capsys.readouterr().out.split())
    assert "tool: Note: a human reviewer" not in shown and "tool: wrote safe.txt" in shown, shown
    assert main(["audit", "file-1", *store_flags]) == 0
    assert "a human reviewer replaced" not in capsys.readouterr().out
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
    recorded = capsys.readouterr().out
    assert "Recorded: approve by alice" in recorded
    thread = re.search(r"on thread (\S+)\.", recorded)
    assert thread, recorded
    # Issue 25, item 7d: the CLI says it is the CLI, and the audit keeps channel cli (not http)
    assert main(["audit", thread.group(1), "--csv"]) == 0
    answered = [line for line in capsys.readouterr().out.splitlines() if ",answered," in line]
    assert len(answered) == 1 and ",cli," in answered[0], answered
    # Issue 25, item 7b: answering it again names who answered, how and when
    assert main(["approve", interrupt_prefix]) == 1
    said = capsys.readouterr().err
    assert "was already approved by alice at 20" in said and "through cli" in said, said
    assert "no review" not in said
    assert main(["inbox"]) == 0
    assert "Nothing waits" in capsys.readouterr().out
    # a channel the service does not know from a client is not taken: the answer stays "http"
    other = httpx.post(f"{served}/runs/wait", json=run, headers=headers, timeout=60).json()
    (pending,) = other["__interrupt__"]
    thread_id = httpx.post(f"{served}/threads/search", json={}, headers=headers, timeout=60).json()[0]
    answered_over_http = httpx.post(
        f"{served}/handrail/threads/{thread_id['thread_id']}/interrupts/{pending['id']}/answer",
        json={"answer": {"decisions": [{"type": "reject"}]}},
        headers={**headers, "X-Handrail-Channel": "slack"},
        timeout=60,
    )
    assert answered_over_http.status_code == 202 and answered_over_http.json()["channel"] == "http"
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


def test_edit_args_replaces_the_keys_given_and_keeps_the_others(
    store_flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 25, item 5: 'edit --args' with some of the fields was refused ("content: Field
    required"); the keys given replace those proposed, the others keep their values, and the
    result is checked by the library as any edit. --help says so."""
    with SqliteSaver(store_flags[1]) as saver:
        review = served_agent.build(saver).list_interrupts(tool="write_file").items[0].interrupt.id
    assert main(["edit", "--help"]) == 0
    assert "the others keep their proposed values" in " ".join(capsys.readouterr().out.split())
    assert main(["edit", review, "--args", '{"path": "notes.txt"}', *store_flags]) == 1
    assert "unchanged; nothing was sent" in capsys.readouterr().err  # the same as proposed
    assert main(["edit", review, "--args", '{"colour": "red"}', *store_flags]) == 1
    assert "colour" in capsys.readouterr().err and served_agent.RAN == []  # the library refuses it
    assert main(["edit", review, "--args", '{"path": "safe.txt"}', *store_flags]) == 0
    assert served_agent.RAN == [("write_file", {"path": "safe.txt", "content": "x"})]


def test_answering_an_answered_review_names_who_how_and_when(
    store_flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 25, item 7b: not "no review waits for you", but who answered it, how and when."""
    with SqliteSaver(store_flags[1]) as saver:
        review = served_agent.build(saver).list_interrupts(tool="execute_sql").items[0].interrupt.id
    assert main(["reject", review[:8], "-m", "no", *store_flags, "--reviewer", "alice", "--role", "dba"]) == 0
    capsys.readouterr()
    assert main(["approve", review[:8], *store_flags, "--reviewer", "bob", "--role", "dba"]) == 1
    said = capsys.readouterr().err
    assert f"review {review[:12]} on thread 'sql-1' was already rejected by alice at 20" in said, said
    assert "through cli; nothing was sent" in said
    assert served_agent.RAN == []


def test_show_takes_a_unique_prefix_of_a_thread_id(
    store_flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 25, item 7a: 'handrail show PREFIX' names a thread as interrupt prefixes name reviews."""
    assert main(["show", "sql", *store_flags]) == 0
    assert "thread sql-1" in capsys.readouterr().out
    with SqliteSaver(store_flags[1]) as saver:
        served_agent.build(saver).invoke({"messages": ["SELECT 1"]}, {"configurable": {"thread_id": "sql-2"}})
    assert main(["show", "sql", *store_flags]) == 1
    assert "'sql' names 2 threads" in capsys.readouterr().err
    assert main(["show", "sql-1", *store_flags]) == 0  # a whole id is never ambiguous
    assert main(["show", "nope", *store_flags]) == 1
    assert "no thread 'nope'" in capsys.readouterr().err


def test_long_values_are_folded_and_full_prints_them_whole(
    store_flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 25, item 3: 'handrail show' printed 1.17 MB for a review with a 1 MB argument."""
    big = "b" * (1 << 20)
    with SqliteSaver(store_flags[1]) as saver:
        agent = served_agent.build(saver)
        agent.invoke({"messages": ["write " + big]}, {"configurable": {"thread_id": "big-1"}})
    capsys.readouterr()
    assert main(["show", "big-1", *store_flags]) == 0
    folded = capsys.readouterr().out
    assert len(folded) < 30_000, len(folded)
    flat = re.sub(r"[\s│]+", " ", folded)  # the panel's lines joined again
    said = re.findall(r"… \((1,04\d,\d{3}) characters; handrail show big-1 --full prints it whole\)", flat)
    assert len(said) == 4, flat[-3000:]  # the message, the call, the review's arguments and description
    assert main(["inbox", *store_flags]) == 0
    listing = capsys.readouterr().out
    assert len(listing) < 10_000 and "big-1" in listing
    assert main(["show", "big-1", "--full", *store_flags]) == 0
    whole = capsys.readouterr().out
    assert re.sub(r"[\s│]+", "", whole).count(big) >= 2  # the message and the argument, whole
