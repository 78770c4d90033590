"""A durable ``handrail demo``: threads kept in SQLite or PostgreSQL, left for later, resumed elsewhere.

The cross-process tests run the installed console script: the first process stops at a
review (the person answers "later", presses Ctrl-C, or input ends), a **new** process
continues it with ``--resume``, and the store's log shows each approved tool started
exactly once. The PostgreSQL tests read ``HANDRAIL_TEST_POSTGRES_DSN`` (default
``postgresql://postgres@127.0.0.1:5432/test``), use a fresh schema each, and skip when the
server cannot be reached, unless ``HANDRAIL_REQUIRE_POSTGRES=1``.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from test_cli import SCRIPT, Terminal

from handrail import SqliteSaver
from handrail.checkpoint.base import BaseCheckpointSaver
from handrail.cli import main
from handrail.cli.demo import DEMO_APP, DemoWorkspace, build_demo_agent, run_demo
from handrail.runtime.events import decode_event

ALL_IDS = [1, 2, 3, 4, 5, 6, 7, 8]
RECENT_IDS = [1, 2, 3, 4, 5]  # rows 6, 7 and 8 are older than 30 days
PG_ENV = "HANDRAIL_TEST_POSTGRES_DSN"
REQUIRE_ENV = "HANDRAIL_REQUIRE_POSTGRES"
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture(autouse=True)
def in_a_scratch_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in a scratch cwd (the default ./handrail.db lands there) with TMPDIR inside it."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return tmp_path


# Helpers ------------------------------------------------------------------------------------------
def run_script(
    *args: str, stdin: Any = subprocess.DEVNULL, input_text: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The console script in a new process, without a terminal (answers, if any, come from ``stdin``)."""
    if not SCRIPT.exists():
        pytest.skip(f"the console script is not installed at {SCRIPT}")
    if input_text is not None:
        stdin = None
    return subprocess.run(
        [str(SCRIPT), *args], stdin=stdin, input=input_text, capture_output=True, text=True, timeout=120
    )


def resume_command(shown: str | bytes) -> list[str]:
    """The arguments of the ``... demo --resume ...`` command the demo printed."""
    text = shown.decode(errors="replace") if isinstance(shown, bytes) else shown
    lines = [line.strip() for line in text.splitlines() if "demo --resume " in line]
    assert lines, f"the demo printed no --resume command:\n{text}"
    words = shlex.split(lines[-1])
    return words[words.index("demo") :]


def thread_of(command: list[str]) -> str:
    return command[command.index("--resume") + 1]


def remaining_ids(workdir: Path | str) -> list[int]:
    conn = sqlite3.connect(Path(workdir) / "demo.db")
    try:
        return [row[0] for row in conn.execute("SELECT id FROM records ORDER BY id")]
    finally:
        conn.close()


def tools_started(saver: BaseCheckpointSaver, thread_id: str) -> Counter[str]:
    """How many times each tool of the thread began to run, from the thread's own log."""
    read = saver.read(thread_id)
    return Counter(
        str(decode_event(event, thread_id).data["name"])
        for event in read.events
        if event.kind == "tool_started"
    )


def workdir_of(saver: BaseCheckpointSaver, thread_id: str) -> str:
    record = saver.get_thread(thread_id)
    assert record is not None, f"no thread {thread_id!r}"
    assert record.metadata["app"] == DEMO_APP
    return str(record.metadata["workdir"])


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err}"
    assert "Traceback" not in err
    assert lines[0].startswith("handrail: error: ")
    return lines[0]


# SQLite, across processes -------------------------------------------------------------------------
def test_later_at_a_review_then_resume_in_a_new_process_runs_each_approved_tool_once(tmp_path: Path) -> None:
    first = Terminal("demo")  # the defaults: ./handrail.db and a new temporary work directory
    first.read_until("Decision for write_file")
    first.type("l\n")
    assert first.wait() == 0
    assert b"Left for later" in first.seen
    command = resume_command(first.seen)
    db = str(tmp_path / "handrail.db")
    assert command == ["demo", "--resume", thread_of(command), "--db", db]  # absolute: works from anywhere
    thread_id = thread_of(command)
    with SqliteSaver(tmp_path / "handrail.db") as saver:
        workdir = workdir_of(saver, thread_id)
        assert remaining_ids(workdir) == ALL_IDS  # nothing gated ran
        assert tools_started(saver, thread_id) == {"read_data": 1}

    second = Terminal(*command)  # a new process finds the thread, and its work directory, again
    second.read_until("Continuing the conversation saved for this thread.")
    second.read_until("Decision for write_file")
    second.type("a\n")
    second.read_until("Decision for execute_sql")
    second.type("a\n")
    assert second.wait() == 0
    assert b"Deleted 3 rows." in second.seen
    assert b"Traceback" not in second.seen

    shown_again = run_script(*command, "--yes")  # a finished thread is only shown
    assert shown_again.returncode == 0, shown_again.stderr
    assert "Final answer" in shown_again.stdout
    assert remaining_ids(workdir) == RECENT_IDS
    assert (Path(workdir) / "old_records.csv").exists()
    with SqliteSaver(tmp_path / "handrail.db") as saver:
        assert tools_started(saver, thread_id) == {"read_data": 2, "write_file": 1, "execute_sql": 1}
        record = saver.get_thread(thread_id)
        assert record is not None and record.status == "idle" and not record.pending


def test_ctrl_c_at_a_review_prints_how_to_resume_and_a_new_process_finishes(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    first = Terminal("demo", "--db", "store/threads.db", "--workdir", "work")
    first.read_until("Decision for write_file")
    first.type("a\n")
    first.read_until("Decision for execute_sql")
    first.wait_until_reading()
    first.type("\x03")  # what the terminal sends for Ctrl-C
    assert first.wait() == 130
    assert b"Interrupted." in first.seen
    assert b"Traceback" not in first.seen
    command = resume_command(first.seen)
    thread_id = thread_of(command)
    db, work = str(tmp_path / "store" / "threads.db"), str(tmp_path / "work")
    assert command == ["demo", "--resume", thread_id, "--db", db, "--workdir", work]
    assert remaining_ids(tmp_path / "work") == ALL_IDS  # the review was cut short: nothing was sent

    second = run_script(*command, "--yes")  # --yes: every request is approved

    assert second.returncode == 0, second.stderr
    assert "Continuing the conversation saved for this thread." in second.stdout
    assert remaining_ids(tmp_path / "work") == RECENT_IDS
    with SqliteSaver(tmp_path / "store" / "threads.db") as saver:
        assert tools_started(saver, thread_id) == {"read_data": 2, "write_file": 1, "execute_sql": 1}


def test_input_ending_at_a_review_also_says_how_to_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class ClosedTerminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", ClosedTerminal(""))

    assert main(["demo", "--workdir", "work"]) == 1

    err = capsys.readouterr().err
    assert "Input ended before the review was finished." in err
    assert "Traceback" not in err
    command = resume_command(err)
    finished = run_script(*command, "--yes")
    assert finished.returncode == 0, finished.stderr
    assert remaining_ids(tmp_path / "work") == RECENT_IDS


def test_the_demo_run_twice_in_a_row_starts_a_new_thread_each_time(tmp_path: Path) -> None:
    runs = [run_script("demo"), run_script("demo")]

    assert [run.returncode for run in runs] == [0, 0], [run.stderr for run in runs]
    ids = [thread_of(resume_command(run.stdout)) for run in runs]
    assert ids[0] != ids[1]
    with SqliteSaver(tmp_path / "handrail.db") as saver:
        agent = build_demo_agent(DemoWorkspace(tmp_path), checkpointer=saver)
        assert sorted(t.thread_id for t in agent.list_threads(metadata={"app": DEMO_APP})) == sorted(ids)
        assert workdir_of(saver, ids[0]) != workdir_of(saver, ids[1])


def test_the_default_database_is_ignored_by_git() -> None:
    ignored = (Path(__file__).resolve().parents[2] / ".gitignore").read_text().splitlines()

    assert "handrail.db" in ignored
    assert "handrail.db-*" in ignored  # the WAL and shared-memory files next to it


# --list -------------------------------------------------------------------------------------------
def test_list_shows_the_demo_threads_waiting_for_review(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    quiet = Console(file=io.StringIO())
    with SqliteSaver(tmp_path / "threads.db") as saver:
        waiting = [
            run_demo(quiet, lambda prompt: "l", checkpointer=saver, workdir=tmp_path / f"w{i}").thread_id
            for i in range(2)
        ]
        run_demo(quiet, lambda prompt: "", checkpointer=saver, workdir=tmp_path / "done", auto_approve=True)

    assert main(["demo", "--list", "--db", "threads.db"]) == 0

    out = capsys.readouterr().out
    assert "2 demo threads waiting for review in threads.db" in out
    listed = re.findall(r"^\s+(demo-\w+)\s+since .*write_file, execute_sql$", out, flags=re.MULTILINE)
    assert listed == waiting
    assert f"demo --resume THREAD_ID --db {tmp_path / 'threads.db'}" in out


def test_list_with_nothing_waiting_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--yes", "--workdir", "w"]) == 0
    capsys.readouterr()

    assert main(["demo", "--list"]) == 0

    assert "No demo thread is waiting for review in handrail.db." in capsys.readouterr().out


# Errors: one line, exit 1 or 2, never a traceback ------------------------------------------------
def test_resume_of_an_unknown_thread_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--yes", "--workdir", "w"]) == 0
    capsys.readouterr()

    assert main(["demo", "--resume", "demo-nope"]) == 1

    line = one_error_line(capsys.readouterr().err)
    assert "no thread 'demo-nope' in handrail.db" in line
    assert "demo --list" in line


@pytest.mark.parametrize("argv", [["--resume", "demo-1"], ["--list"]])
def test_resume_or_list_without_the_database_file_is_one_line_and_creates_nothing(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", *argv, "--db", "missing.db"]) == 1

    line = one_error_line(capsys.readouterr().err)
    assert "no handrail database at 'missing.db'" in line
    assert not (tmp_path / "missing.db").exists()


@pytest.mark.parametrize("argv", [[], ["--resume", "demo-1"], ["--list"]])
def test_a_file_that_is_not_sqlite_is_refused_in_one_line(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.db").write_text("not a database, just notes\n" * 100)

    assert main(["demo", "--yes", "--db", "notes.db", *argv]) == 1

    line = one_error_line(capsys.readouterr().err)
    assert "'notes.db' is not a handrail database: it is not an SQLite file" in line
    assert (tmp_path / "notes.db").read_text().startswith("not a database")


def test_another_applications_sqlite_database_is_refused_and_left_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "app.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()

    assert main(["demo", "--yes", "--db", str(other)]) == 1

    assert "is not a handrail database (it holds other tables: customers)" in one_error_line(
        capsys.readouterr().err
    )
    conn = sqlite3.connect(other)
    try:
        assert [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == [
            "customers"
        ]
    finally:
        conn.close()


def test_a_thread_the_demo_did_not_start_is_not_resumed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from handrail import ScriptedModel, create_agent

    with SqliteSaver(tmp_path / "handrail.db") as saver:
        agent = create_agent(ScriptedModel([{"content": "Hi."}]), tools=[], checkpointer=saver)
        agent.invoke({"messages": ["Hello"]}, {"configurable": {"thread_id": "someone-elses"}})

    assert main(["demo", "--resume", "someone-elses"]) == 1

    assert "was not started by 'handrail demo'" in one_error_line(capsys.readouterr().err)


def test_a_directory_given_as_db_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "dir.db").mkdir()

    assert main(["demo", "--yes", "--db", "dir.db"]) == 2

    assert "--db 'dir.db' is a directory" in one_error_line(capsys.readouterr().err)


def test_an_unreachable_postgres_is_one_line_without_the_password(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("psycopg")

    # Port 1 on the loopback refuses at once: no server, no waiting.
    assert main(["demo", "--yes", "--postgres", "postgresql://postgres:s3cret@127.0.0.1:1/test"]) == 1

    line = one_error_line(capsys.readouterr().err)
    assert "cannot connect to PostgreSQL (postgresql://postgres:***@127.0.0.1:1/test)" in line
    assert "s3cret" not in line


def test_a_malformed_postgres_dsn_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("psycopg")

    assert main(["demo", "--yes", "--postgres", "no equals sign here"]) == 1

    assert "cannot connect to PostgreSQL" in one_error_line(capsys.readouterr().err)


def test_console_script_errors_are_one_line_without_a_traceback(tmp_path: Path) -> None:
    unknown = run_script("demo", "--resume", "demo-nope", "--db", "missing.db")
    clash = run_script("demo", "--db", "a.db", "--postgres", "postgresql://localhost/x")

    assert unknown.returncode == 1
    assert "no handrail database at 'missing.db'" in one_error_line(unknown.stderr)
    assert clash.returncode == 2
    assert "not allowed with argument --db" in one_error_line(clash.stderr)


# PostgreSQL -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def postgres_server() -> str:
    dsn = os.environ.get(PG_ENV) or DEFAULT_DSN
    problem: str | None = None
    try:
        import psycopg

        with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except ImportError:
        problem = "psycopg is not installed (pip install 'handrail[postgres]')"
    except Exception as exc:  # psycopg.Error, without importing psycopg when it is missing
        problem = f"PostgreSQL at {dsn} is not reachable ({exc})"
    if problem is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but the Postgres tests cannot run: {problem}", pytrace=False)
        pytest.skip(problem)
    return dsn


@pytest.fixture
def postgres(postgres_server: str) -> Iterator[tuple[str, str]]:
    """A DSN whose search path is a fresh schema (dropped afterwards), and that schema."""
    import psycopg

    schema = f"hr_demo_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    separator = "&" if "?" in postgres_server else "?"
    try:
        yield f"{postgres_server}{separator}options=-csearch_path%3D{schema}", schema
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_postgres_later_in_one_process_and_resume_in_another(postgres: tuple[str, str]) -> None:
    from handrail import PostgresSaver

    dsn, schema = postgres
    first = Terminal("demo", "--postgres", dsn)
    first.read_until("Decision for write_file")
    first.type("l\n")
    assert first.wait() == 0
    command = resume_command(first.seen)
    thread_id = thread_of(command)
    assert command == ["demo", "--resume", thread_id, "--postgres", dsn]

    listed = run_script("demo", "--list", "--postgres", dsn)
    assert listed.returncode == 0, listed.stderr
    assert thread_id in listed.stdout

    second = run_script(*command, "--yes")

    assert second.returncode == 0, second.stderr
    assert "Deleted 3 rows." in second.stdout
    with PostgresSaver.from_conn_string(postgres_server_of(dsn), schema=schema, pool_size=1) as saver:
        assert remaining_ids(workdir_of(saver, thread_id)) == RECENT_IDS
        assert tools_started(saver, thread_id) == {"read_data": 2, "write_file": 1, "execute_sql": 1}
        record = saver.get_thread(thread_id)
        assert record is not None and record.status == "idle"


def test_postgres_ctrl_c_then_resume_in_a_new_process(postgres: tuple[str, str]) -> None:
    from handrail import PostgresSaver

    dsn, schema = postgres
    first = Terminal("demo", "--postgres", dsn, "--workdir", "work")
    first.read_until("Decision for write_file")
    first.wait_until_reading()
    first.type("\x03")
    assert first.wait() == 130
    assert b"Traceback" not in first.seen
    command = resume_command(first.seen)

    second = run_script(*command, "--yes")

    assert second.returncode == 0, second.stderr
    assert remaining_ids("work") == RECENT_IDS
    with PostgresSaver.from_conn_string(postgres_server_of(dsn), schema=schema, pool_size=1) as saver:
        assert tools_started(saver, thread_of(command)) == {"read_data": 2, "write_file": 1, "execute_sql": 1}


def test_postgres_resume_of_an_unknown_thread_is_one_line(
    postgres: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    dsn, _ = postgres

    assert main(["demo", "--resume", "demo-nope", "--postgres", dsn]) == 1

    assert "no thread 'demo-nope' in PostgreSQL" in one_error_line(capsys.readouterr().err)


def postgres_server_of(dsn: str) -> str:
    """The DSN without the search-path option (the saver is told the schema instead)."""
    return re.sub(r"[?&]options=-csearch_path%3D\w+$", "", dsn)
