"""Values from models, tools and reviewers reach a terminal escaped, never raw.

A tool's arguments, a model's message, a thread id or a reviewer's name may hold ANSI
escape sequences (colours, screen clears), an OSC 52 clipboard write, C1 controls,
bidirectional overrides (U+202E shows ``invoice\\u202efdp.exe`` as ``invoiceexe.pdf``) or
zero-width characters. ``handrail show | inbox | audit | threads | audit verify`` and
``handrail demo`` must show each as a visible escape (``\\x1b``, ``\\u202e``), and rich
markup in a value as text.

The commands run as a person runs them: ``python -m handrail ...`` in a real
pseudo-terminal (so rich writes for a terminal), on a SQLite store prepared with such
values. With ``TERM=dumb`` rich writes no escape sequence of its own, so then any ESC
byte at all came from the data; with ``TERM=xterm-256color`` rich styles its output, and
the sequences the data holds must still be absent.
"""

from __future__ import annotations

import fcntl
import io
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import textwrap
import time
from pathlib import Path

import pytest
from rich.console import Console

from handrail import AIMessage, Command, Interrupt, SqliteSaver, tool
from handrail.models import ScriptedModel

ANSI = "\x1b[31;1mPWNED\x1b[0m"
OSC52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"
C1_CSI = "\x9b2J"
RLO = "\u202e"
ZWSP = "\u200b"
MARKUP = "[bold red]fake[/]"
HOSTILE = f"{ANSI} {OSC52} {C1_CSI} invoice{RLO}fdp.exe zero{ZWSP}width {MARKUP}"
REVIEWER = f"mallory{OSC52}{RLO}nimda"
PENDING = f"pending-{RLO}-thread"
DONE = "done-\x1b[7m-thread"

# Raw sequences that came from the data: none may reach the terminal.
RAW = [
    b"\x1b[31;1m",
    b"\x1b[7m-thread",
    b"\x1b]",  # OSC (52 here); rich writes none without links
    b"\x07",
    "\x9b".encode(),
    RLO.encode(),
    ZWSP.encode(),
]

AGENT_MODULE = textwrap.dedent(
    f'''
    """An agent whose model and tools hand out hostile text (for test_terminal_safety)."""

    from handrail import HumanInTheLoopMiddleware, InMemorySaver, ScriptedModel, create_agent, tool

    HOSTILE = {HOSTILE!r}


    @tool
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        return "wrote " + path + " " + HOSTILE


    def build(saver):
        args = {{"path": HOSTILE, "content": HOSTILE + "\\nmore"}}
        turn = {{
            "content": "I will write it. " + HOSTILE + "\\nsecond line",
            "tool_calls": [{{"name": "write_file", "args": args}}],
        }}
        return create_agent(
            ScriptedModel([turn, {{"content": "finished " + HOSTILE}}]),
            [write_file],
            middleware=[HumanInTheLoopMiddleware({{"write_file": {{
                "allowed_decisions": ["approve", "reject", "respond"],
                "description": "Check this: " + HOSTILE,
            }}}})],
            checkpointer=saver,
        )


    agent = build(InMemorySaver())
    '''
)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A SQLite store with a paused thread and an answered one, hostile text everywhere."""
    (tmp_path / "hostile_agent.py").write_text(AGENT_MODULE)
    sys.path.insert(0, str(tmp_path))
    try:
        import hostile_agent

        db = tmp_path / "h.db"
        with SqliteSaver(db) as saver:
            hostile_agent.build(saver).invoke(
                {"messages": [HOSTILE]}, {"configurable": {"thread_id": PENDING}}
            )
            agent = hostile_agent.build(saver)
            who = {"thread_id": DONE, "reviewer": {"id": REVIEWER, "roles": []}}
            agent.invoke({"messages": [HOSTILE]}, {"configurable": who})
            agent.invoke(
                Command(resume={"decisions": [{"type": "reject", "message": "no: " + HOSTILE}]}),
                {"configurable": who},
            )
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("hostile_agent", None)
    return db


def run_in_terminal(
    argv: list[str],
    cwd: Path,
    term: str,
    answers: dict[bytes, bytes] | None = None,
    *,
    columns: int = 400,
) -> tuple[int, bytes]:
    """Run ``python -m handrail ARGV`` on a pseudo-terminal ``columns`` wide; its exit code and
    every byte it wrote.

    ``answers`` maps a prompt (bytes the program writes) to what is typed when it appears.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE")}
    env.update(TERM=term, COLUMNS=str(columns), LINES="50", PYTHONIOENCODING="utf-8")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "handrail", *argv], stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env
    )
    os.close(slave)
    pending = dict(answers or {})
    out = b""
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
            for prompt in [p for p in pending if p in out]:
                os.write(master, pending.pop(prompt))
        else:
            process.kill()
            pytest.fail(f"handrail {argv} did not finish; it wrote: {out!r}")
    finally:
        os.close(master)
    return process.wait(timeout=30), out


def assert_escaped(out: bytes, term: str) -> None:
    """No raw sequence of the data reached the terminal; their visible escapes did."""
    for raw in RAW:
        assert raw not in out, f"raw {raw!r} reached the terminal:\n{out!r}"
    if term == "dumb":
        assert b"\x1b" not in out, f"an escape sequence reached a dumb terminal:\n{out!r}"
    assert b"\\u202e" in out, out
    assert b"\\x1b" in out or b"\\u001b" in out, out


TERMS = ["dumb", "xterm-256color"]


@pytest.mark.parametrize("term", TERMS)
def test_show_prints_messages_arguments_and_descriptions_escaped(store: Path, term: str) -> None:
    flags = ["--db", str(store), "--agent", "hostile_agent:agent"]
    code, out = run_in_terminal(["show", PENDING, *flags], store.parent, term)
    assert code == 0, out
    assert_escaped(out, term)
    assert b"I will write it." in out and b"Check this:" in out
    assert MARKUP.encode() in out  # markup in a value is text, not style
    if term == "dumb":
        assert b"pending-\\u202e-thread" in out
        assert (
            b"\\x1b[31;1mPWNED\\x1b[0m \\x1b]52;c;ZWNobyBwd25lZA==\\x07 \\x9b2J invoice\\u202efdp.exe" in out
        )
        assert b"zero\\u200bwidth" in out
        assert b"second line" in out and b"\\nsecond line" not in out  # a message keeps its own lines


@pytest.mark.parametrize("term", TERMS)
def test_inbox_threads_and_audit_print_values_escaped(store: Path, term: str) -> None:
    flags = ["--db", str(store), "--agent", "hostile_agent:agent"]
    for argv in (["inbox", *flags], ["threads", *flags], ["audit", DONE, *flags]):
        code, out = run_in_terminal(argv, store.parent, term)
        assert code == 0, (argv, out)
        if argv[0] == "threads":  # thread ids only
            assert_escaped(out, term)
            if term == "dumb":
                assert b"pending-\\u202e-thread" in out and b"done-\\x1b[7m-thread" in out, out
            continue
        assert_escaped(out, term)
        if argv[0] == "audit" and term == "dumb":
            assert b"mallory\\x1b]52;c;ZWNobyBwd25lZA==\\x07\\u202enimda" in out, out


@pytest.mark.parametrize("term", TERMS)
def test_audit_csv_on_a_terminal_is_escaped(store: Path, term: str) -> None:
    flags = ["--db", str(store), "--agent", "hostile_agent:agent"]
    code, out = run_in_terminal(["audit", DONE, "--csv", *flags], store.parent, term)
    assert code == 0, out
    assert_escaped(out, term)


def test_audit_verify_prints_thread_ids_escaped(store: Path) -> None:
    code, out = run_in_terminal(["audit", "verify", "--all", "--db", str(store)], store.parent, "dumb")
    assert code == 0, out
    assert b"done-\\x1b[7m-thread" in out and b"pending-\\u202e-thread" in out
    assert b"\x1b" not in out and RLO.encode() not in out


@pytest.mark.parametrize("term", TERMS)
def test_the_demo_narrates_and_reviews_escaped(tmp_path: Path, term: str) -> None:
    """A demo thread whose model wrote hostile text, resumed with ``handrail demo --resume``."""
    from handrail.cli.demo import run_demo

    db = tmp_path / "demo.db"
    turn = {
        "content": "Saving. " + HOSTILE,
        "tool_calls": [{"name": "write_file", "args": {"path": f"notes{RLO}txt.exe", "content": HOSTILE}}],
    }
    with SqliteSaver(db) as saver:
        first = run_demo(
            Console(file=io.StringIO()),
            lambda prompt: "l",
            checkpointer=saver,
            model=ScriptedModel([turn]),
            workdir=tmp_path / "work",
        )
    assert first.waiting
    code, out = run_in_terminal(
        ["demo", "--resume", first.thread_id, "--db", str(db)],
        tmp_path,
        term,
        answers={b"Decision for write_file": b"l\n"},
    )
    assert code == 0, out
    assert b"Left for later" in out, out
    assert_escaped(out, term)
    assert MARKUP.encode() in out
    if term == "dumb":
        assert b"notes\\u202etxt.exe" in out


# In process: the rule itself, and the library's own printers -------------------------------------


def test_the_terminal_rule_covers_every_character_the_web_pages_mark() -> None:
    from handrail._message_display import TERMINAL_HIDDEN, visible

    markup = pytest.importorskip("handrail.server.pages._markup")
    missed = [
        f"U+{code:04X}"
        for code in range(0x110000)
        if not 0xD800 <= code <= 0xDFFF
        and markup.HIDDEN.fullmatch(chr(code))
        and not TERMINAL_HIDDEN.fullmatch(chr(code))
    ]
    assert missed == []
    for char in "\x1b\x9b\x9d\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c":
        assert TERMINAL_HIDDEN.fullmatch(char), hex(ord(char))
    for char in "\u200b\u200c\u200d\u2060\ufeff\x7f\x00\r":
        assert TERMINAL_HIDDEN.fullmatch(char), hex(ord(char))
    assert visible("a\tb\nc", newlines=True) == "a\tb\nc"
    assert visible("a\tb\nc\r") == "a\\tb\\nc\\r"
    assert visible("é, 日本, emoji 🙂") == "é, 日本, emoji 🙂"  # ordinary text is left alone


def test_pretty_print_shows_hostile_text_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    AIMessage(
        HOSTILE, tool_calls=[{"name": "write_file", "args": {"path": HOSTILE}, "id": "c1"}]
    ).pretty_print()
    out = capsys.readouterr().out
    assert "\x1b" not in out and RLO not in out and ZWSP not in out and "\x9b" not in out
    assert "\\x1b[31;1mPWNED" in out and "invoice\\u202efdp.exe" in out


def test_a_terminal_review_on_a_plain_console_escapes_what_it_shows() -> None:
    """TerminalReviewer escapes on its own, whatever console a program gives it."""
    from handrail.cli.terminal import TerminalReviewer

    @tool
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        return path

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, color_system="truecolor", width=200)
    prompts: list[str] = []

    def ask(prompt: str) -> str:
        prompts.append(prompt)
        return "a"

    value = {
        "action_requests": [
            {
                "name": f"write{RLO}_file",
                "args": {"path": HOSTILE, "content": HOSTILE + "\nline two"},
                "description": "Check: " + HOSTILE,
                "tool_call_id": "c1",
            }
        ],
        "review_configs": [{"action_name": "write_file", "allowed_decisions": ["approve", "reject"]}],
    }
    TerminalReviewer(console, ask).settle(Interrupt(value, "i1"), lambda answer: answer)
    out = buffer.getvalue()
    for raw in ("\x1b[31;1m", "\x1b]52", "\x9b", RLO, ZWSP):
        assert raw not in out, raw
        assert all(raw not in prompt for prompt in prompts)
    assert "\\u202e" in out and MARKUP in out


def test_safe_console_escapes_whatever_is_printed_on_it() -> None:
    from rich.table import Table

    from handrail.cli._safe_text import safe_console

    buffer = io.StringIO()
    console = safe_console(file=buffer, force_terminal=True, width=200, highlight=False)
    table = Table("x")
    table.add_row("cell " + ANSI)
    console.print(table)
    console.print("[bold]styled[/] " + OSC52.replace("[", "\\["))
    out = buffer.getvalue()
    assert "\x1b[31;1m" not in out and "\x1b]52" not in out
    assert "\\x1b[31;1mPWNED" in out and "\\x1b]52;c;" in out
    assert "\x1b[1mstyled" in out  # the console's own styles still reach the terminal


def test_the_demos_editor_that_changes_nothing_makes_no_edit() -> None:
    """Issue 25: leaving the editor without a change (or with an empty file) is no edit;
    the reviewer is asked again and may decide otherwise."""
    from handrail.cli.terminal import TerminalReviewer

    buffer = io.StringIO()
    console = Console(file=buffer, width=200)
    answers = iter(["e", "v", "v", "b", "r", ""])
    saved = iter(['{\n  "path": "a"\n}\n', "   \n"])  # the same arguments, then an empty file
    value = {
        "action_requests": [
            {"name": "write_file", "args": {"path": "a"}, "description": "d", "tool_call_id": "c1"}
        ],
        "review_configs": [{"action_name": "write_file", "allowed_decisions": ["approve", "edit", "reject"]}],
    }
    reviewer = TerminalReviewer(console, lambda prompt: next(answers), edit_text=lambda text: next(saved))
    answer = reviewer.settle(Interrupt(value, "i1"), lambda answer: answer)
    assert answer == {"decisions": [{"type": "reject"}]}
    out = buffer.getvalue()
    assert "Nothing changed in the editor" in out and "empty file" in out
