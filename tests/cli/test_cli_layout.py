"""What the review CLI prints in an 80-column terminal: ids and times whole (issue 25, item 7).

Rich squeezes a table into the terminal's width and shortens cells with "…": thread ids
were cut there (an id cut cannot be copied into the next command), and so were the times
of ``handrail audit`` and ``handrail tokens list``. Each command runs as a person runs it,
``python -m handrail ...`` on a real pseudo-terminal 80 columns wide.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_terminal_safety import run_in_terminal

from handrail import SqliteSaver

SERVER_TESTS = Path(__file__).resolve().parents[1] / "server"
LONG_ID = "customer-7f3a9c2e-refund-request-2026-05-02"  # 43 characters, as ids of real apps are
WHEN = rb"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Path]:
    """A store with a pending review on a thread with a long id, and an answered one."""
    sys.path.insert(0, str(SERVER_TESTS))
    try:
        import served_agent

        db = tmp_path / "h.db"
        with SqliteSaver(db) as saver:
            agent = served_agent.build(saver)
            agent.invoke({"messages": ["write notes.txt"]}, {"configurable": {"thread_id": LONG_ID}})
            done = {"configurable": {"thread_id": "answered-" + LONG_ID}}
            agent.invoke({"messages": ["write a.txt"]}, done)
            (item,) = agent.list_interrupts(thread_id="answered-" + LONG_ID).items
            agent.decide(
                item.thread_id,
                item.interrupt.id,
                {"decisions": [{"type": "reject", "message": "no"}]},
                reviewer={"id": "alice", "roles": []},
            )
        yield db
    finally:
        sys.path.remove(str(SERVER_TESTS))


def cli(argv: list[str], db: Path) -> bytes:
    flags = ["--db", str(db)] if argv[0] == "tokens" else ["--db", str(db), "--agent", "served_agent:agent"]
    code, out = run_in_terminal([*argv, *flags], SERVER_TESTS, "dumb", columns=80)
    assert code == 0, out
    assert max(len(line) for line in out.decode().splitlines()) <= 80, out.decode()
    return out


def test_inbox_and_threads_show_whole_thread_ids_at_80_columns(store: Path) -> None:
    inbox = cli(["inbox"], store)
    assert LONG_ID.encode() in inbox, inbox.decode()
    threads = cli(["threads"], store)
    assert LONG_ID.encode() in threads and b"answered-" + LONG_ID.encode() in threads, threads.decode()
    assert re.search(WHEN, threads), threads.decode()


def test_audit_shows_whole_times_and_thread_ids_at_80_columns(store: Path) -> None:
    one = cli(["audit", "answered-" + LONG_ID], store)
    assert len(re.findall(WHEN, one)) >= 3, one.decode()  # input, review requested, answered
    across = cli(["audit"], store)
    assert b"thread answered-" + LONG_ID.encode() in across and b"thread " + LONG_ID.encode() in across
    assert len(re.findall(WHEN, across)) >= 4, across.decode()


def test_tokens_list_shows_whole_times_at_80_columns(store: Path) -> None:
    cli(["tokens", "create", "--name", "alice-the-reviewer", "--role", "dba", "--role", "ops"], store)
    listing = cli(["tokens", "list"], store)
    assert re.search(rb"\d{4}-\d{2}-\d{2} \d{2}:\d{2}", listing), listing.decode()
    assert b"\xe2\x80\xa6" not in listing, listing.decode()  # nothing cut with "…"
