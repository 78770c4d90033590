"""Grants at the terminal (SPEC rule 16), on a store and through a service.

``handrail approve ID --grant thread|agent [--for D] [--uses N] [--exact]`` sends an
approval that carries a grant and says what it covers, until when and for how many
calls; ``handrail grants list`` and ``handrail grants revoke`` show and end grants.
Judged by what ran (the agent's ledger, ``grant_agent.RAN``) as well as by what is
printed. The agent is ``tests/server/web/grant_agent.py``: ``execute_sql`` (role dba,
grantable), ``lookup`` (anyone), ``wire_money`` (``grantable: False``), ``drop_table``
(two approvals). The service runs in this process (uvicorn in a thread).
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from handrail import SqliteSaver
from handrail.cli import main

WEB_TESTS = Path(__file__).resolve().parents[1] / "server" / "web"
PG_DSN = os.environ.get("HANDRAIL_TEST_POSTGRES_DSN") or "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture
def grant_agent(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The ``grant_agent`` module (``--agent grant_agent:agent`` finds it from its folder)."""
    monkeypatch.chdir(WEB_TESTS)
    monkeypatch.syspath_prepend(str(WEB_TESTS))
    monkeypatch.setenv("COLUMNS", "240")  # a table's cells on one line each
    monkeypatch.delenv("HANDRAIL_URL", raising=False)
    monkeypatch.delenv("HANDRAIL_TOKEN", raising=False)
    import grant_agent

    grant_agent.RAN.clear()
    yield grant_agent
    grant_agent.RAN.clear()


def words(text: str) -> str:
    return " ".join(text.split())


class Cli:
    """The commands as one reviewer runs them, on a store or a service."""

    def __init__(self, capsys: pytest.CaptureFixture[str], flags: list[str]) -> None:
        self.capsys = capsys
        self.flags = flags

    def __call__(self, *argv: str, code: int = 0) -> str:
        got = main([*argv, *self.flags])
        out, err = self.capsys.readouterr()
        assert got == code, (argv, out, err)
        assert "Traceback" not in out + err
        return words(out if code == 0 else err)

    def review_id(self, thread: str) -> str:
        found = re.search(r"\b([0-9a-f]{12}) │ " + re.escape(thread) + r" ", self("inbox"))
        assert found, self("inbox")
        return found.group(1)


class Store:
    """A store of ``grant_agent`` (SQLite, or PostgreSQL with ``schema``), and the agent on it
    to start runs."""

    def __init__(self, path: Path, module: Any, schema: str | None = None) -> None:
        self.path = path
        self.module = module
        self.schema = schema

    @contextmanager
    def saver(self) -> Iterator[Any]:
        if self.schema is None:
            with SqliteSaver(self.path) as saver:
                yield saver
            return
        from handrail.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(PG_DSN, schema=self.schema, pool_size=2) as saver:
            saver.setup()
            yield saver

    @property
    def flags(self) -> list[str]:
        if self.schema is None:
            return ["--db", str(self.path)]
        return ["--postgres", PG_DSN, "--schema", self.schema]

    def run(self, thread: str, text: str) -> bool:
        """Send ``text`` on ``thread``; whether it paused for a review."""
        with self.saver() as saver:
            config = {"configurable": {"thread_id": thread}}
            result = self.module.build(saver).invoke({"messages": [text]}, config)
        return bool(result.get("__interrupt__"))

    def grants(self, active: bool = False) -> list[Any]:
        with self.saver() as saver:
            return list(self.module.build(saver).list_grants(active=active))

    def cli(self, capsys: pytest.CaptureFixture[str], who: str, *roles: str) -> Cli:
        flags = [*self.flags, "--agent", "grant_agent:agent", "--reviewer", who]
        return Cli(capsys, [*flags, *(f for r in roles for f in ("--role", r))])


@pytest.fixture
def store(tmp_path: Path, grant_agent: Any) -> Store:
    return Store(tmp_path / "h.db", grant_agent)


def _postgres_schema() -> str:
    try:
        import psycopg

        with psycopg.connect(PG_DSN, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # ImportError or psycopg.Error
        if os.environ.get("HANDRAIL_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"HANDRAIL_REQUIRE_POSTGRES=1 but PostgreSQL at {PG_DSN} cannot be used: {exc}")
        pytest.skip(f"PostgreSQL at {PG_DSN} cannot be used: {exc}")
    return f"hr_grants_{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["sqlite", "postgres"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path, grant_agent: Any) -> Iterator[Store]:
    """The store of the test, on SQLite and on PostgreSQL (a schema of its own, dropped after)."""
    if request.param == "sqlite":
        yield Store(tmp_path / "h.db", grant_agent)
        return
    schema = _postgres_schema()
    try:
        yield Store(tmp_path / "unused.db", grant_agent, schema)
    finally:
        import psycopg

        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


UNTIL = r"until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(59 min from now\)"


# On a store ------------------------------------------------------------------------------------
def test_a_grant_on_a_store_covers_later_calls_on_the_thread_until_revoked(
    any_store: Store, capsys: pytest.CaptureFixture[str], grant_agent: Any
) -> None:
    store = any_store
    assert store.run("sql-1", "sql VACUUM")
    dana = store.cli(capsys, "dana", "dba")
    said = dana("approve", dana.review_id("sql-1"), "--grant", "thread", "--for", "1h", "--uses", "5")
    assert "Recorded: approve by dana on thread sql-1." in said and "done: ran VACUUM" in said, said
    (grant,) = store.grants()
    assert re.search(
        r"Granted: later calls of execute_sql on thread sql-1, with any arguments, run without review "
        rf"{UNTIL} or for 5 more calls, whichever ends first\. Revoke it: handrail grants revoke "
        + grant.grant_id[:12],
        said,
    ), said
    assert (grant.scope, grant.uses, grant.args_digest, grant.given_by["id"]) == ("thread", 5, None, "dana")

    assert not store.run("sql-1", "sql ANALYZE")  # covered: no review
    assert store.run("sql-2", "sql REINDEX")  # another thread: asked
    assert grant_agent.RAN == [("execute_sql", {"query": "VACUUM"}), ("execute_sql", {"query": "ANALYZE"})]

    listed = dana("grants", "list")
    for column in ("id", "tool", "scope", "thread", "args", "uses left", "expires in", "given by"):
        assert column in listed, column
    assert re.search(rf"{grant.grant_id[:12]} execute_sql thread sql-1 any 4 of 5 59 min dana", listed), (
        listed
    )
    assert "1 grant in force." in listed and "revoked" not in listed
    assert "sql-1" in dana("grants", "list", "--thread", "sql-1")
    assert "No grant in force that you may see" in dana("grants", "list", "--thread", "sql-2")

    revoked = dana("grants", "revoke", grant.grant_id[:6])
    assert revoked == (
        f"Revoked grant {grant.grant_id[:12]} of execute_sql on thread sql-1 (given by dana): it covers no "
        "call that starts from now."
    )
    again = dana("grants", "revoke", grant.grant_id)
    assert re.search(r"was already revoked by dana at \S+ \S+ UTC; nothing changed\.", again), again
    assert store.run("sql-1", "sql CHECKPOINT")  # asked again
    assert len(grant_agent.RAN) == 2
    assert "No grant in force that you may see (--all: ended ones too)." in dana("grants", "list")
    every = dana("grants", "list", "--all")
    assert re.search(
        rf"{grant.grant_id[:12]} execute_sql thread sql-1 any 4 of 5 59 min dana dana \d{{4}}-", every
    )
    assert "1 grant." in every


def test_a_grant_for_the_agent_with_exact_arguments_and_one_call(
    store: Store, capsys: pytest.CaptureFixture[str], grant_agent: Any
) -> None:
    assert store.run("a-1", "lookup k1")
    olga = store.cli(capsys, "olga")  # lookup takes any reviewer
    said = olga("approve", olga.review_id("a-1"), "--grant", "agent", "--uses", "1", "--exact")
    assert (
        "Granted: later calls of lookup on every thread of agent grants, with exactly the arguments "
        '{"key":"k1"}, run without review for 1 more call. Revoke it:' in said
    ), said
    assert store.run("a-2", "lookup k2")  # other arguments: asked
    assert not store.run("a-3", "lookup k1")  # another thread, the same arguments: covered
    assert store.run("a-4", "lookup k1")  # its one use is spent
    assert grant_agent.RAN == [("lookup", {"key": "k1"}), ("lookup", {"key": "k1"})]
    every = olga("grants", "list", "--all")
    assert 'lookup agent a-1 exact {"key":"k1"} 0 (spent) no limit olga' in every, every


def test_flags_that_make_no_sense_are_usage_errors(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    assert store.run("sql-1", "sql VACUUM")
    dana = store.cli(capsys, "dana", "dba")
    review = dana.review_id("sql-1")
    for argv, said in (
        (["--for", "1h"], "--for, --uses and --exact go with --grant thread|agent"),
        (["--exact"], "--for, --uses and --exact go with --grant thread|agent"),
        (["--grant", "thread"], "--grant needs --for DURATION (like 30m, 1h, 2d), --uses N, or both"),
        (["--grant", "thread", "--for", "soon"], "--for: cannot read the duration 'soon'"),
        (["--grant", "thread", "--for", "400d"], "--for is at most 366d"),
        (["--grant", "thread", "--uses", "0"], "--uses takes a whole number from 1 to 1,000,000, got 0"),
        (["--grant", "everywhere", "--uses", "1"], "invalid choice: 'everywhere'"),
        (["--grant", "thread", "--uses", "many"], "invalid int value: 'many'"),
    ):
        err = dana("approve", review, *argv, code=2)
        assert said in err and "(see 'handrail approve --help')" in err, (argv, err)
    assert "unrecognized arguments: --grant" in dana("reject", review, "--grant", "thread", code=2)
    assert "is not a grant id" in dana("grants", "revoke", "zz!", code=2)
    assert main(["grants"]) == 2 and "choose an action" in capsys.readouterr().err
    assert store.grants() == [] and dana.review_id("sql-1") == review  # nothing was answered


def test_a_review_that_may_not_grant_is_refused_and_nothing_is_saved(
    store: Store, capsys: pytest.CaptureFixture[str], grant_agent: Any
) -> None:
    assert store.run("w-1", "wire 500")
    assert store.run("d-1", "drop logs")
    dana = store.cli(capsys, "dana", "dba")
    err = dana("approve", dana.review_id("w-1"), "--grant", "thread", "--for", "1h", code=1)
    assert (
        "tool 'wire_money' is not grantable (its policy has grantable: False): approve without a grant" in err
    )
    assert "nothing was saved" in err
    err = dana("approve", dana.review_id("d-1"), "--grant", "agent", "--uses", "3", code=1)
    assert "a review that needs several approvals cannot grant" in err, err
    assert store.grants() == [] and grant_agent.RAN == []
    inbox = dana("inbox")
    assert "w-1" in inbox and "d-1" in inbox  # both still wait
    assert "no grant 'abc' that you may see" in dana("grants", "revoke", "abc", code=1)


def test_a_prefix_that_names_several_grants_is_refused(
    store: Store, capsys: pytest.CaptureFixture[str], grant_agent: Any
) -> None:
    olga = store.cli(capsys, "olga")
    firsts: dict[str, int] = {}
    for n in range(17):  # 17 grants: two of them share their first hex digit
        assert store.run(f"t-{n}", f"lookup k{n}")
        olga("approve", olga.review_id(f"t-{n}"), "--grant", "thread", "--uses", "1")
        ids = [g.grant_id for g in store.grants()]
        firsts = {i[0]: sum(1 for j in ids if j[0] == i[0]) for i in ids}
        if max(firsts.values()) > 1:
            break
    shared = next(c for c, n in firsts.items() if n > 1)
    assert "give more of the id" in olga("grants", "revoke", shared, code=1)


# Through a service -----------------------------------------------------------------------------
class Served:
    """``create_app`` serving ``grant_agent`` over HTTP from a thread of this process."""

    def __init__(self, tmp_path: Path, module: Any) -> None:
        import uvicorn

        from handrail.server import ServerDB, create_app

        self.saver = SqliteSaver(tmp_path / "h.db")
        self.agent = module.build(self.saver)
        self.db = ServerDB.open(db_path=tmp_path / "h.db")
        self.app = create_app({"grants": self.agent}, db=self.db, sweep_every=None)
        self.server = uvicorn.Server(uvicorn.Config(self.app, port=0, log_level="error", lifespan="on"))
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the service did not start"
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}"

    def token(self, name: str, *roles: str) -> str:
        return str(self.app.state.service.tokens.create(name, list(roles), ["run", "review"])[1])

    def run(self, token: str, text: str, thread: str | None = None) -> tuple[str, bool]:
        headers = {"x-api-key": token}
        if thread is None:
            thread = httpx.post(f"{self.url}/threads", json={}, headers=headers, timeout=30).json()[
                "thread_id"
            ]
        body = {"assistant_id": "grants", "input": {"messages": [{"role": "user", "content": text}]}}
        reply = httpx.post(f"{self.url}/threads/{thread}/runs/wait", json=body, headers=headers, timeout=30)
        assert reply.status_code == 200, reply.text
        return str(thread), bool(reply.json().get("__interrupt__"))

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.db.close()
        self.saver.close()


@pytest.fixture
def served(tmp_path: Path, grant_agent: Any) -> Iterator[Served]:
    found = Served(tmp_path, grant_agent)
    try:
        yield found
    finally:
        found.close()


def test_through_a_service_a_grant_is_given_listed_by_role_and_revoked(
    served: Served, capsys: pytest.CaptureFixture[str], grant_agent: Any
) -> None:
    tokens = {
        "dana": served.token("dana", "dba"),
        "olga": served.token("olga", "ops"),
        "app": served.token("app"),
    }
    dana, olga = (Cli(capsys, ["--url", served.url, "--token", tokens[n]]) for n in ("dana", "olga"))
    thread, asked = served.run(tokens["app"], "sql VACUUM")
    assert asked
    said = dana("approve", dana.review_id(thread), "--grant", "thread", "--for", "1h")
    assert f"Recorded: approve by dana on thread {thread}." in said and "done: ran VACUUM" in said, said
    (grant,) = served.agent.list_grants()
    assert re.search(
        rf"Granted: later calls of execute_sql on thread {thread}, with any arguments, run without review "
        rf"{UNTIL}\. Revoke it: handrail grants revoke {grant.grant_id[:12]}",
        said,
    ), said
    assert served.run(tokens["app"], "sql ANALYZE", thread)[1] is False  # covered
    trail = dana("audit", thread)
    assert re.search(r"tool_started │ dana │ grant │", trail), trail  # the audit names the grant's giver

    listed = dana("grants", "list")
    assert re.search(
        rf"{grant.grant_id[:12]} execute_sql thread {thread[:12]} any no limit 59 min dana", listed
    )
    assert grant.grant_id[:12] in dana("grants", "list", "--agent", "grants")
    unknown = dana("grants", "list", "--agent", "nope", code=1)
    assert "nope" in unknown, unknown
    assert "no assistant 'nope'" in unknown, unknown
    assert "No grant in force that you may see" in olga("grants", "list")  # not ops's tool
    err = olga("grants", "revoke", grant.grant_id[:12], code=1)
    assert f"no grant '{grant.grant_id[:12]}' that you may see" in err, err
    assert served.agent.list_grants()[0].revoked_at is None

    revoked = dana("grants", "revoke", grant.grant_id[:12])
    assert revoked.startswith(f"Revoked grant {grant.grant_id[:12]} of execute_sql on thread {thread}"), (
        revoked
    )
    assert served.run(tokens["app"], "sql CHECKPOINT", thread)[1] is True  # asked again
    assert grant_agent.RAN == [("execute_sql", {"query": "VACUUM"}), ("execute_sql", {"query": "ANALYZE"})]
    assert "revoked" in dana("grants", "list", "--all")

    other, _ = served.run(tokens["app"], "wire 100")
    err = dana("approve", dana.review_id(other), "--grant", "agent", "--uses", "2", code=1)
    assert "tool 'wire_money' is not grantable" in err and "nothing was saved" in err, err


def test_the_list_fits_80_columns_and_never_cuts_an_id(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = "customer-7f3a9c2e-refund-request-2026-05-02"
    assert store.run(thread, "sql VACUUM <b>x</b> " + "y" * 80)
    dana = store.cli(capsys, "dana", "dba")
    dana("approve", dana.review_id(thread), "--grant", "agent", "--for", "8h", "--exact")
    (grant,) = store.grants()
    store.cli(capsys, "dana", "dba")("grants", "revoke", grant.grant_id[:12])
    monkeypatch.setenv("COLUMNS", "80")
    main(["grants", "list", "--all", *store.flags, "--agent", "grant_agent:agent"])
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80, out
    # the row's first line: whole ids (of the thread, its first 12 characters, as 'show' takes a prefix)
    first = next(line for line in out.splitlines() if line.startswith(grant.grant_id[:12] + "  "))
    assert f"  {thread[:12]}  " in first, out
    assert "<b>x<" in out and "yyyy…" in out and "(108" in out, out  # markup as text; a long value folded
