"""The ``handrail`` command: ``main()`` in process, and the installed console script.

Every test runs in its own temporary directory (so the demo's default ``./handrail.db``
lands there), with ``TMPDIR`` pointing into it (so do the demo's default work directories).
The durable side of the demo (``--db``, ``--postgres``, ``--resume``, ``--list``) is
tested in ``test_demo_durable.py``.
"""

from __future__ import annotations

import io
import os
import select
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

import handrail.cli.demo
from handrail import __version__
from handrail.cli import main

SCRIPT = Path(sys.executable).parent / "handrail"


@pytest.fixture(autouse=True)
def in_a_scratch_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in a scratch cwd, with temporary directories inside it too (child processes inherit both)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return tmp_path


def remaining_ids(workdir: Path) -> list[int]:
    conn = sqlite3.connect(workdir / "demo.db")
    try:
        return [row[0] for row in conn.execute("SELECT id FROM records ORDER BY id")]
    finally:
        conn.close()


def run_script(*args: str, stdin: Any = subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
    if not SCRIPT.exists():
        pytest.skip(f"the console script is not installed at {SCRIPT}")
    return subprocess.run([str(SCRIPT), *args], stdin=stdin, capture_output=True, text=True, timeout=120)


def test_demo_with_yes_approves_everything_and_exits_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--yes", "--workdir", str(tmp_path)]) == 0

    shown = capsys.readouterr().out
    assert "Approved execute_sql automatically." in shown
    assert "Final answer" in shown
    assert remaining_ids(tmp_path) == [1, 2, 3, 4, 5]


def test_demo_without_a_terminal_approves_nothing_and_leaves_the_reviews_waiting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))

    assert main(["demo", "--workdir", str(tmp_path)]) == 0

    shown = capsys.readouterr().out
    assert "stdin is not a terminal" in shown
    assert "Left for later" in shown and "demo --resume demo-" in shown
    assert remaining_ids(tmp_path) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_demo_creates_a_missing_workdir(tmp_path: Path) -> None:
    workdir = tmp_path / "new" / "dir"

    assert main(["demo", "--yes", "--workdir", str(workdir)]) == 0

    assert (workdir / "old_records.csv").exists()


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0

    assert capsys.readouterr().out.strip() == f"handrail {__version__}"


def test_help_lists_the_demo_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0

    assert "demo" in capsys.readouterr().out


def test_demo_help_describes_its_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--help"]) == 0

    shown = capsys.readouterr().out
    for flag in ("--yes", "--workdir", "--db", "--postgres", "--resume", "--list", "--model"):
        assert flag in shown


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["demo", "--bogus"], "unrecognized arguments: --bogus"),
        (["demo", "--workdir"], "argument --workdir: expected one argument"),
        (["demo", "--db", "a.db", "--postgres", "postgresql://x"], "not allowed with argument --db"),
        (["demo", "--resume", "demo-1", "--list"], "not allowed with argument --resume"),
        (["demo", "--resume", " "], "--resume needs a thread id"),
        (["launch"], "invalid choice: 'launch'"),
        ([], "choose a command"),
    ],
)
def test_a_command_line_mistake_is_one_line_on_stderr_and_exit_two(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2

    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("handrail")
    assert "error:" in lines[0]
    assert expected in lines[0]


def test_a_file_given_as_workdir_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    not_a_dir = tmp_path / "notes.txt"
    not_a_dir.write_text("hello")

    assert main(["demo", "--yes", "--workdir", str(not_a_dir)]) == 2

    err = capsys.readouterr().err.strip()
    assert err == f"handrail: error: --workdir {str(not_a_dir)!r} is not a directory"


def test_ctrl_c_stops_with_a_short_message_and_exit_130(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(handrail.cli.demo, "run_demo", interrupted)

    assert main(["demo", "--yes", "--workdir", str(tmp_path)]) == 130

    err = capsys.readouterr().err
    assert "Interrupted" in err
    assert "Traceback" not in err


def test_input_ending_mid_review_stops_with_a_message_and_exit_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def input_closed(*args: Any, **kwargs: Any) -> None:
        raise EOFError

    monkeypatch.setattr(handrail.cli.demo, "run_demo", input_closed)

    assert main(["demo", "--workdir", str(tmp_path)]) == 1

    assert "Input ended" in capsys.readouterr().err


def test_console_script_runs_the_demo_with_yes(tmp_path: Path) -> None:
    done = run_script("demo", "--yes", "--workdir", str(tmp_path))

    assert done.returncode == 0, done.stderr
    assert "Final answer" in done.stdout
    assert remaining_ids(tmp_path) == [1, 2, 3, 4, 5]


def test_console_script_demo_in_a_non_interactive_shell_approves_nothing(tmp_path: Path) -> None:
    done = run_script("demo", "--workdir", str(tmp_path))

    assert done.returncode == 0, done.stderr
    assert "stdin is not a terminal" in done.stdout
    assert "Left for later" in done.stdout
    assert remaining_ids(tmp_path) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert not (tmp_path / "old_records.csv").exists()


def test_console_script_bad_flag_exits_nonzero_without_a_traceback() -> None:
    done = run_script("demo", "--bogus")

    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "handrail: error: unrecognized arguments: --bogus (see 'handrail --help')"
    ]


def test_console_script_version() -> None:
    done = run_script("--version")

    assert done.returncode == 0
    assert done.stdout.strip() == f"handrail {__version__}"


class Terminal:
    """The console script on a pseudo-terminal, so it sees a TTY as a person's shell would."""

    def __init__(self, *args: str) -> None:
        if not SCRIPT.exists():
            pytest.skip(f"the console script is not installed at {SCRIPT}")
        pty = pytest.importorskip("pty")
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: become the script, and never return into pytest
            try:
                os.execv(str(SCRIPT), [str(SCRIPT), *args])
            finally:
                os._exit(127)
        self.seen = b""

    def read_until(self, text: str) -> None:
        while text.encode() not in self.seen:
            # A generous safety net so a broken prompt fails the test instead of hanging it.
            ready, _, _ = select.select([self.fd], [], [], 60)
            assert ready, f"no {text!r} on the terminal; it shows:\n{self.seen.decode(errors='replace')}"
            self.seen += os.read(self.fd, 4096)

    def wait_until_reading(self) -> None:
        """Wait until the child sleeps in its read of the terminal.

        A Ctrl-C that lands after the prompt is printed but before ``input()`` starts its
        read is only noticed once the read returns; a person cannot type that fast, a test can.
        """
        stat = Path(f"/proc/{self.pid}/stat")
        if not stat.exists():
            pytest.skip("needs /proc to tell when the demo waits for input")
        for _ in range(100_000):
            if stat.read_text().rsplit(")", 1)[1].split()[0] == "S":
                return
            select.select([], [], [], 0.001)
        raise AssertionError("the demo never started waiting for input")

    def type(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def wait(self) -> int:
        try:
            while chunk := os.read(self.fd, 4096):
                self.seen += chunk
        except OSError:  # the child closed the terminal
            pass
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status)


def test_console_script_on_a_terminal_asks_and_applies_the_answers(tmp_path: Path) -> None:
    term = Terminal("demo", "--workdir", str(tmp_path))
    term.read_until("Decision for write_file")
    term.type("a\n")
    term.read_until("Decision for execute_sql")
    term.type("r\n")
    term.read_until("Reason for the agent")
    term.type("keep them\n")

    assert term.wait() == 0
    assert b"execute_sql was rejected" in term.seen
    assert remaining_ids(tmp_path) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_console_script_ctrl_c_at_a_prompt_exits_130_with_a_short_message(tmp_path: Path) -> None:
    term = Terminal("demo", "--workdir", str(tmp_path))
    term.read_until("Decision for write_file")
    term.wait_until_reading()
    term.type("\x03")  # what the terminal sends for Ctrl-C

    assert term.wait() == 130
    assert b"Interrupted." in term.seen
    assert b"demo --resume demo-" in term.seen  # how to continue (test_demo_durable.py does)
    assert b"Traceback" not in term.seen
    assert remaining_ids(tmp_path) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_the_menu_on_a_terminal_offers_later(tmp_path: Path) -> None:
    term = Terminal("demo", "--workdir", str(tmp_path))
    term.read_until("Decision for write_file")
    term.read_until("later (l)")
    term.type("l\n")

    assert term.wait() == 0
    assert b"Left for later" in term.seen
