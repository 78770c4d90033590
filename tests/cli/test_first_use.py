"""First use of ``handrail demo``, as a new user meets it: issue 13's defects, each through the real command.

The terminal tests run the installed console script on a pseudo-terminal (``Terminal``
from ``test_cli.py``: ``pty.fork``, keys typed, the screen read back), so they see what a
person sees. The rest run it as a subprocess, with no terminal.
"""

from __future__ import annotations

import os
import re
import select
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from test_cli import SCRIPT, Terminal
from test_demo_durable import remaining_ids, resume_command, run_script, thread_of, tools_started

from handrail import SqliteSaver

ALL_IDS = [1, 2, 3, 4, 5, 6, 7, 8]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
SIXTY_DAYS = "DELETE FROM records WHERE created_at < date('now', '-60 days')"


@pytest.fixture(autouse=True)
def in_a_scratch_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch cwd and TMPDIR, and a wide terminal so table cells are not wrapped mid-word."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setenv("COLUMNS", "220")
    return tmp_path


def screen(term: Terminal) -> str:
    """What the terminal shows, without its colour codes."""
    return ANSI.sub("", term.seen.decode(errors="replace")).replace("\r\n", "\n")


def read_after(term: Terminal, marker: str, text: str) -> None:
    """Read the terminal until ``text`` shows after the last ``marker``."""
    while text not in screen(term).rpartition(marker)[2]:
        ready, _, _ = select.select([term.fd], [], [], 60)  # a safety net, not a timing
        assert ready, f"no {text!r} after {marker!r}; the terminal shows:\n{screen(term)}"
        term.seen += os.read(term.fd, 4096)


# 1. Replaying a thread shows what ran, from the audit trail -------------------------------------
def test_replaying_a_finished_thread_shows_the_edited_arguments_and_the_reviews(tmp_path: Path) -> None:
    first = Terminal("demo", "--db", "threads.db", "--workdir", "work")
    first.read_until("Decision for write_file")
    first.type("a\n")
    first.read_until("Decision for execute_sql")
    first.type("e\n")
    first.read_until("New arguments as a JSON object")
    first.type(f'{{"query": "{SIXTY_DAYS}"}}\n')
    assert first.wait() == 0
    assert "Deleted 2 rows." in screen(first)

    replay = Terminal(*resume_command(first.seen))  # what the demo printed, in a new process
    assert replay.wait() == 0

    shown = screen(replay)
    (sql_row,) = [line for line in shown.splitlines() if "│ execute_sql" in line]
    assert "edited" in sql_row and "-60 days" in sql_row and "Deleted 2 rows." in sql_row
    (file_row,) = [line for line in shown.splitlines() if "│ write_file" in line]
    assert "approved" in file_row
    assert "unknown" not in shown


# 2. Without a terminal nothing is approved; piped answers are answers ---------------------------
def test_with_stdin_at_its_end_the_reviews_wait_and_nothing_runs(tmp_path: Path) -> None:
    done = run_script("demo", "--db", "threads.db", "--workdir", "work")

    assert done.returncode == 0, done.stderr
    assert "approved" not in done.stdout.split("What ran")[-1]
    assert "Input ended, so this review waits for an answer." in done.stdout
    command = resume_command(done.stdout)
    assert remaining_ids(tmp_path / "work") == ALL_IDS
    assert not (tmp_path / "work" / "old_records.csv").exists()
    with SqliteSaver(tmp_path / "threads.db") as saver:
        record = saver.get_thread(thread_of(command))
        assert record is not None and record.status == "interrupted" and record.pending
        assert tools_started(saver, thread_of(command)) == {"read_data": 1}


def test_piped_answers_are_read_as_answers(tmp_path: Path) -> None:
    done = run_script("demo", "--workdir", "work", stdin=None, input_text="a\nr\nnot today\n")

    assert done.returncode == 0, done.stderr
    assert "execute_sql was rejected" in done.stdout
    assert "not today" in done.stdout
    assert remaining_ids(tmp_path / "work") == ALL_IDS  # the DELETE was rejected
    assert (tmp_path / "work" / "old_records.csv").exists()  # the write was approved


# 3. Edits: checked as they are entered, the proposal kept, $EDITOR, new lines --------------------
def test_an_edit_of_the_wrong_type_is_refused_at_once_and_the_proposal_is_kept(tmp_path: Path) -> None:
    term = Terminal("demo", "--workdir", "work")
    term.read_until("Decision for write_file")
    term.type("a\n")
    term.read_until("Decision for execute_sql")
    term.type("e\n")
    term.read_until("New arguments as a JSON object")
    term.type('{"query": 42}\n')
    term.read_until("The edit was not kept")
    read_after(term, "The edit was not kept", "Decision for execute_sql")  # asked again, nothing sent

    shown = screen(term).split("The edit was not kept")
    assert "handrail refused the answer" in shown[0] and "query" in shown[0]
    assert "Review 2 of 2: execute_sql" in shown[1]  # the review is shown again ...
    assert "-30 days" in shown[1]  # ... with the model's proposal
    term.type("r\n")
    term.read_until("Reason for the agent")
    term.type("\n")
    assert term.wait() == 0
    assert remaining_ids(tmp_path / "work") == ALL_IDS


def test_a_partial_json_edit_changes_only_the_keys_it_names(tmp_path: Path) -> None:
    term = Terminal("demo", "--workdir", "work")
    term.read_until("Decision for write_file")
    term.type("e\n")
    term.read_until("New arguments as a JSON object")
    term.type('{"path": "archived_records.csv"}\n')
    term.read_until("Decision for execute_sql")
    term.type("r\n")
    term.read_until("Reason for the agent")
    term.type("\n")
    assert term.wait() == 0

    archived = (tmp_path / "work" / "archived_records.csv").read_text()
    assert archived.startswith("id,title,created_at\n") and archived.count("\n") == 4  # the proposed content


def test_field_by_field_a_quoted_value_can_hold_new_lines_and_values_are_shown_whole(tmp_path: Path) -> None:
    term = Terminal("demo", "--workdir", "work")
    term.read_until("Decision for write_file")
    term.type("e\n")
    term.read_until("New arguments as a JSON object")
    term.type("\n")  # field by field
    term.read_until("path (Enter keeps it")
    term.type("\n")
    term.read_until("content (Enter keeps it")
    term.type('"first line\\nsecond line"\n')
    term.read_until("Decision for execute_sql")
    term.type("r\n")
    term.read_until("Reason for the agent")
    term.type("\n")
    assert term.wait() == 0

    shown = screen(term)
    assert "8,Old password reset log," in shown.split("content (Enter keeps it")[0].split("content now:")[-1]
    assert (tmp_path / "work" / "old_records.csv").read_text() == "first line\nsecond line"


def test_v_edits_the_whole_json_in_the_editor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDITOR", shlex.join(["sed", "-i", "s/-30 days/-60 days/"]))
    monkeypatch.delenv("VISUAL", raising=False)
    term = Terminal("demo", "--workdir", "work")
    term.read_until("Decision for write_file")
    term.type("a\n")
    term.read_until("Decision for execute_sql")
    term.type("e\n")
    term.read_until("$EDITOR")
    term.type("v\n")
    assert term.wait() == 0

    assert "Deleted 2 rows." in screen(term)
    assert remaining_ids(tmp_path / "work") == [1, 2, 3, 4, 5, 6]


# 4. "Later" and Ctrl-C say what becomes of the answers already given ----------------------------
def test_later_after_a_first_answer_warns_before_and_can_be_taken_back(tmp_path: Path) -> None:
    term = Terminal("demo", "--workdir", "work")
    term.read_until("Decision for write_file")
    term.type("a\n")
    term.read_until("Decision for execute_sql")
    term.type("l\n")
    term.read_until("Leave the whole review for later? (y/N)")
    assert "Later sends none of it" in screen(term)
    term.type("n\n")
    read_after(term, "(y/N)", "Decision for execute_sql")
    term.wait_until_reading()
    term.type("\x03")  # Ctrl-C instead

    assert term.wait() == 130
    assert "The answers you gave in this review were not sent" in screen(term)
    assert not (tmp_path / "work" / "old_records.csv").exists()


# 6. Paths, models and base URLs are checked before anything is saved ---------------------------
def test_a_db_in_a_missing_folder_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    done = run_script("demo", "--yes", "--db", "no/such/folder/threads.db")

    assert done.returncode == 2
    assert "the folder 'no/such/folder' does not exist" in done.stderr
    assert not (tmp_path / "no").exists()


def test_the_printed_resume_command_works_from_another_folder(tmp_path: Path) -> None:
    first = run_script("demo", "--workdir", "work")  # stdin at its end: the review waits
    command = resume_command(first.stdout)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    done = subprocess.run(
        [str(SCRIPT), *command, "--yes"], cwd=elsewhere, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr
    assert "Deleted 3 rows." in done.stdout
    assert not (elsewhere / "handrail.db").exists()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--model", "openai:"], "--model 'openai:'"),
        (["--model", "scripted:foo"], "the demo plays its own script"),
        (["--model", "openai:gpt-4o-mini", "--base-url", "notaurl"], "is not an http(s) URL"),
    ],
)
def test_bad_model_flags_fail_before_a_thread_is_saved(flags: list[str], said: str, tmp_path: Path) -> None:
    done = run_script("demo", "--yes", "--db", "threads.db", *flags)

    assert done.returncode == 2, done.stdout
    assert said in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    if (tmp_path / "threads.db").exists():
        conn = sqlite3.connect(tmp_path / "threads.db")
        try:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            assert not any(conn.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchall() for t in tables)
        finally:
            conn.close()


# 7. python -m handrail ----------------------------------------------------------------------------
def test_python_dash_m_handrail_runs_the_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "handrail", "demo", "--yes"], capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr
    assert f"{sys.executable} -m handrail demo --resume demo-" in done.stdout


# 5. A damaged database file is named, called damaged, and what to do is said --------------------
def _damage_a_table_page(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        (root,) = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'handrail_threads'"
        ).fetchone()
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    finally:
        conn.close()
    with db.open("r+b") as file:
        file.seek((root - 1) * page_size)
        file.write(b"\x0d" + b"\xff" * 7)  # a leaf page whose header points nowhere


def _damage_the_page_size(db: Path) -> None:
    with db.open("r+b") as file:
        file.seek(16)  # the header's page size: 7 is no power of two
        file.write(b"\x00\x07")


def _garble_the_schema_record(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute("UPDATE handrail_schema_version SET version = 9552 WHERE version = 2")
        conn.commit()
    finally:
        conn.close()


@pytest.mark.parametrize("damage", [_damage_a_table_page, _damage_the_page_size, _garble_the_schema_record])
def test_a_damaged_database_file_is_named_and_the_way_out_is_said(damage: object, tmp_path: Path) -> None:
    made = run_script("demo", "--yes", "--db", "threads.db", "--workdir", "work")
    assert made.returncode == 0, made.stderr
    damage(tmp_path / "threads.db")  # type: ignore[operator]

    for argv in (["demo", "--yes"], ["demo", "--list"]):
        done = run_script(*argv, "--db", "threads.db")

        assert done.returncode == 1, done.stdout
        (line,) = done.stderr.strip().splitlines()
        assert "'threads.db' is a damaged SQLite database" in line
        assert "Restore it from a backup" in line and "sqlite3 threads.db .recover" in line
        assert "newer than this handrail" not in line and "not an SQLite file" not in line


# 13. A reject with no reason is shown to the reviewer in their terms, without the call id ---------
def test_a_reject_without_a_reason_shows_no_model_facing_sentence(tmp_path: Path) -> None:
    term = Terminal("demo", "--workdir", "work")
    term.read_until("Decision for write_file")
    term.type("a\n")
    term.read_until("Decision for execute_sql")
    term.type("r\n")
    term.read_until("Reason for the agent")
    term.type("\n")
    assert term.wait() == 0

    shown = screen(term)
    assert "execute_sql (rejected): no reason given" in shown
    assert "call_" not in shown and "Do not retry" not in shown
    assert remaining_ids(tmp_path / "work") == ALL_IDS


# 13. The demo's working folders do not pile up in the temporary directory --------------------------
def test_finished_demos_working_folders_are_removed_when_the_next_one_starts(tmp_path: Path) -> None:
    waiting = run_script("demo")  # no answers: it waits, and keeps its folder
    finished = [run_script("demo", "--yes") for _ in range(3)]
    assert all(run.returncode == 0 for run in [waiting, *finished])

    scratch = tmp_path / "tmp"
    assert [p.name for p in scratch.iterdir()] == ["handrail-demo"]  # one folder in TMPDIR, not one a run
    kept = sorted(p.name for p in (scratch / "handrail-demo").iterdir())
    assert kept == sorted(
        [thread_of(resume_command(waiting.stdout)), thread_of(resume_command(finished[-1].stdout))]
    )
    again = run_script(*resume_command(waiting.stdout), "--yes")  # the waiting thread still has its files
    assert again.returncode == 0 and "Deleted 3 rows." in again.stdout


# 7. make demo installs only what the demo needs ----------------------------------------------------
def test_make_demo_installs_the_core_and_the_cli_extra_and_make_test_the_dev_tools(tmp_path: Path) -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    root = Path(__file__).resolve().parents[2]
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(root / name, tmp_path / name)  # a fresh clone: no .venv yet

    def plan(target: str) -> str:
        done = subprocess.run([make, "-n", target], cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    demo = plan("demo")
    assert "pip install --quiet -e '.[cli]'\n" in demo and "[dev]" not in demo
    assert "handrail demo" in demo
    assert "'.[dev]'" in plan("test")
