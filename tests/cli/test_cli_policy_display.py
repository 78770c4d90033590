"""The review CLI shows review policies (SPEC rules 14-15), on a store and through a service.

``handrail inbox`` and ``handrail show`` say how far a review's approvals have come,
"1 of 2 (alice)", the edit they are for, and the time left, "expires in 59 min"; an
answer that is one vote of two prints "Approval recorded: 1 of 2 (alice)", not that it was
decided; an answer to an expired review is refused with when it expired. The agent is
``tests/server/web/policy_agent.py`` (``execute_sql`` needs two approvals and expires after
an hour). Time moves by ``handrail.runtime.answering.CLOCK``, never by sleeping; the
service runs in this process (uvicorn in a thread) so the same clock judges both sides.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from handrail import SqliteSaver
from handrail.cli import main
from handrail.runtime import answering

WEB_TESTS = Path(__file__).resolve().parents[1] / "server" / "web"
HOUR = 3600


@pytest.fixture
def policy_agent(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The ``policy_agent`` module (``--agent policy_agent:agent`` finds it from its folder)."""
    monkeypatch.chdir(WEB_TESTS)
    monkeypatch.syspath_prepend(str(WEB_TESTS))
    monkeypatch.setenv("COLUMNS", "240")  # a table's cells on one line each (80 columns: test_cli_layout)
    import policy_agent

    policy_agent.RAN.clear()
    yield policy_agent
    policy_agent.RAN.clear()


@pytest.fixture
def store(tmp_path: Path, policy_agent: Any) -> Path:
    """A SQLite store with one paused review of ``execute_sql`` on thread ``sql-1``."""
    path = tmp_path / "h.db"
    with SqliteSaver(path) as saver:
        agent = policy_agent.build(saver)
        agent.invoke({"messages": ["DELETE FROM logs"]}, {"configurable": {"thread_id": "sql-1"}})
    return path


def later(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Move the clock expiry is judged by ``seconds`` ahead."""
    monkeypatch.setattr(answering, "CLOCK", lambda: time.time() + seconds)


def words(text: str) -> str:
    """What was printed, one space between words (a table's cells wrap at the terminal's width)."""
    return " ".join(text.split())


class Cli:
    """The review commands, as one reviewer runs them, on a store or a service."""

    def __init__(self, capsys: pytest.CaptureFixture[str], flags: list[str]) -> None:
        self.capsys = capsys
        self.flags = flags

    def __call__(self, *argv: str, code: int = 0) -> str:
        got = main([*argv, *self.flags])
        out, err = self.capsys.readouterr()
        assert got == code, (argv, out, err)
        return words(out if code == 0 else err)

    def review_id(self) -> str:
        found = re.search(r"\b([0-9a-f]{12})\b", self("inbox"))
        assert found, self("inbox")
        return found.group(1)


def on_store(store: Path, capsys: pytest.CaptureFixture[str], who: str) -> Cli:
    return Cli(capsys, ["--db", str(store), "--agent", "policy_agent:agent", "--reviewer", who])


# On a store ------------------------------------------------------------------------------------
def test_a_vote_prints_approval_recorded_and_the_second_runs_the_call_once(
    store: Path, capsys: pytest.CaptureFixture[str], policy_agent: Any
) -> None:
    alice, bob = on_store(store, capsys, "alice"), on_store(store, capsys, "bob")
    inbox = alice("inbox")
    assert "approvals / expiry" in inbox and "0 of 2" in inbox and "expires in 59 min" in inbox, inbox
    review = alice.review_id()

    voted = alice("approve", review)
    assert "Approval recorded: 1 of 2 (alice) on thread sql-1" in voted, voted
    assert "Nothing ran yet: it runs once 1 more reviewer approves it." in voted
    assert "Recorded:" not in voted and "decided" not in voted
    assert policy_agent.RAN == []
    assert "1 of 2 (alice)" in bob("inbox")
    shown = bob("show", "sql-1")
    assert "approvals: 1 of 2 (alice)" in shown, shown
    assert re.search(r"expiry: expires in 59 min \(\d{4}-\d\d-\d\d \d\d:\d\d UTC\)", shown), shown

    again = alice("approve", review)  # the same reviewer counts once
    assert "Approval recorded: 1 of 2 (alice)" in again and policy_agent.RAN == []
    done = bob("approve", review)
    assert "Recorded: approve by bob on thread sql-1: 2 of 2 approvals (alice, bob)." in done, done
    assert "done: ran DELETE FROM logs" in done
    assert policy_agent.RAN == [("execute_sql", {"query": "DELETE FROM logs"})]
    assert "Nothing waits for your review." in bob("inbox")
    audit = bob("audit", "sql-1")
    assert re.search(r"approval │ alice │ cli │ 1 of 2: ", audit) and re.search(
        r"approval │ bob │ cli │ 2 of 2: ", audit
    )
    assert re.search(r"answered │ bob │ cli │ quorum: ", audit), audit


def test_an_edit_is_a_new_action_and_the_cli_shows_what_the_approvals_are_for(
    store: Path, capsys: pytest.CaptureFixture[str], policy_agent: Any
) -> None:
    alice, bob = on_store(store, capsys, "alice"), on_store(store, capsys, "bob")
    review = alice.review_id()
    edited = alice("edit", review, "--args", '{"query": "DELETE FROM logs LIMIT 10"}')
    assert "Approval recorded: 1 of 2 (alice) for an edit on thread sql-1" in edited, edited
    assert 'The approvals of execute_sql are for the edit {"query":"DELETE FROM logs LIMIT 10"}' in edited
    assert "1 of 2 (alice) for an edit" in bob("inbox")
    shown = bob("show", "sql-1")
    assert (
        'approvals: 1 of 2 (alice) for an edit; they are for the edit {"query":"DELETE FROM logs LIMIT 10"}'
        in shown
    )
    bob("approve", review)  # an approval of the call as it stands: the edit
    assert policy_agent.RAN == [("execute_sql", {"query": "DELETE FROM logs LIMIT 10"})]


def test_time_left_follows_the_clock_and_an_expired_review_is_refused(
    store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, policy_agent: Any
) -> None:
    alice = on_store(store, capsys, "alice")
    review = alice.review_id()
    later(monkeypatch, 17 * 60)
    assert "expires in 42 min" in alice("inbox")
    later(monkeypatch, HOUR + 60)
    inbox = alice("inbox")
    assert "0 of 2" in inbox and re.search(r"expired at \d{4}-\d\d-\d\d \d\d:\d\d UTC", inbox), inbox
    shown = alice("show", "sql-1")
    assert re.search(r"expiry: expired at \d{4}-\d\d-\d\d \d\d:\d\d UTC: it can no longer be answered", shown)
    refused = alice("approve", review, code=1)
    assert re.search(
        rf"review {review} on thread 'sql-1' expired unanswered at \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC "
        r"and can no longer be answered; nothing was sent",
        refused,
    ), refused
    with SqliteSaver(store) as saver:
        agent = policy_agent.build(saver)
        trail = agent.get_audit_trail({"configurable": {"thread_id": "sql-1"}})
        assert [e for e in trail if e.event in ("answered", "approval")] == []
        assert agent.expire("sql-1") != []  # the expiry resolves it: rejected, nothing ran
    refused = alice("approve", review, code=1)  # once resolved, found in the audit and refused the same
    assert "expired unanswered at" in refused and "nothing was sent" in refused, refused
    assert policy_agent.RAN == []


# Through a service -----------------------------------------------------------------------------
class Served:
    """``create_app`` serving ``policy_agent`` over HTTP from a thread of this process."""

    def __init__(self, tmp_path: Path, policy_agent: Any) -> None:
        import uvicorn

        from handrail.server import ServerDB, create_app

        self.saver = SqliteSaver(tmp_path / "h.db")
        self.agent = policy_agent.build(self.saver)
        self.db = ServerDB.open(db_path=tmp_path / "h.db")
        self.app = create_app({"policy": self.agent}, db=self.db, sweep_every=None)
        self.server = uvicorn.Server(uvicorn.Config(self.app, port=0, log_level="error", lifespan="on"))
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the service did not start"
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}"

    def token(self, name: str) -> str:
        return str(self.app.state.service.tokens.create(name, [], ["run", "review"])[1])

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.db.close()
        self.saver.close()


@pytest.fixture
def served(tmp_path: Path, policy_agent: Any) -> Iterator[Served]:
    found = Served(tmp_path, policy_agent)
    try:
        yield found
    finally:
        found.close()


def test_through_a_service_the_cli_shows_the_count_and_the_time_left(
    served: Served, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, policy_agent: Any
) -> None:
    import httpx

    monkeypatch.delenv("HANDRAIL_URL", raising=False)
    monkeypatch.delenv("HANDRAIL_TOKEN", raising=False)
    tokens = {name: served.token(name) for name in ("alice", "bob", "carol")}
    alice, bob, carol = (Cli(capsys, ["--url", served.url, "--token", tokens[n]]) for n in tokens)
    headers = {"x-api-key": tokens["carol"]}
    for query in ("DELETE FROM logs", "DROP TABLE users"):
        thread = httpx.post(f"{served.url}/threads", json={}, headers=headers, timeout=30).json()["thread_id"]
        body = {"assistant_id": "policy", "input": {"messages": [{"role": "user", "content": query}]}}
        reply = httpx.post(f"{served.url}/threads/{thread}/runs/wait", json=body, headers=headers, timeout=30)
        assert reply.status_code == 200, reply.text
        if query.startswith("DELETE"):
            delete = thread

    inbox = alice("inbox")
    assert inbox.count("0 of 2") == 2 and inbox.count("expires in 59 min") == 2, inbox
    items = httpx.get(f"{served.url}/handrail/inbox", headers=headers, timeout=30).json()["items"]
    review = next(i["interrupt_id"] for i in items if i["thread_id"] == delete)[:12]

    voted = alice("approve", review)
    assert f"Approval recorded: 1 of 2 (alice) on thread {delete}" in voted, voted
    assert "Nothing ran yet" in voted and policy_agent.RAN == []
    shown = bob("show", delete)
    assert "approvals: 1 of 2 (alice)" in shown and "expiry: expires in 59 min (" in shown, shown
    assert "1 of 2 (alice)" in carol("inbox")
    done = bob("approve", review)
    assert "Recorded: approve by bob" in done and "done: ran DELETE FROM logs" in done, done
    assert policy_agent.RAN == [("execute_sql", {"query": "DELETE FROM logs"})]

    later(monkeypatch, HOUR + 60)  # the other review: past its expiry, by the clock both sides read
    inbox = alice("inbox")
    assert "0 of 2" in inbox and re.search(r"expired at \d{4}-\d\d-\d\d \d\d:\d\d UTC", inbox), inbox
    other = re.search(r"\b([0-9a-f]{12})\b", inbox)
    assert other
    refused = alice("approve", other.group(1), code=1)
    assert "expired unanswered at" in refused and "can no longer be answered; nothing was sent" in refused
    assert policy_agent.RAN == [("execute_sql", {"query": "DELETE FROM logs"})]


def test_the_display_helpers() -> None:
    from handrail.cli._review_display import approvals_text, expiry_text, time_left

    item = {
        "approvals": [
            {"needed": 2, "approved_by": ["alice"], "action": {"name": "a", "args": {}}, "edited": True},
            {
                "needed": 3,
                "approved_by": [],
                "action": {"name": "b", "args": {}},
                "decided": {"type": "reject"},
            },
            {"needed": 1, "approved_by": [], "action": {"name": "c", "args": {}}},
        ],
        "expires_at": "2026-12-04T17:47:06+00:00",
    }
    assert approvals_text(item) == ["a: 1 of 2 (alice) for an edit", "b: 0 of 3, rejected"]
    at = 1796406426.0  # 2026-12-04T17:47:06Z
    assert expiry_text(item, now=at - 43 * 60 - 30) == "expires in 43 min (2026-12-04 17:47 UTC)"
    assert expiry_text(item, at=False, now=at - 30) == "expires in 30 s"
    assert expiry_text(item, now=at) == "expired at 2026-12-04 17:47 UTC"
    assert expiry_text({"expires_at": None}) is None and approvals_text({}) == []
    assert time_left(2 * HOUR + 60) == "expires in 2 h 1 min" and time_left(-1) == "expired"
