"""``handrail audit verify`` and ``verify_audit``: the head hash, an expected head, and ``--schema``.

A hash chain finds a record changed, removed or moved inside a thread's log, but not
records cut from its end: someone with write access to the database who deletes the last
events and lowers the thread's ``head_seq`` to match leaves a shorter chain that is just
as whole. The report names the hash of the last record (the head); an operator keeps it
elsewhere and passes it back (``--expect-head`` / ``expect_head=``), and then the cut is
found, with a message saying so, and exit code 1.

The same, against a real SQLite file and a real PostgreSQL schema (``--schema``), which
``audit verify`` used to ignore (it read the default schema: "no such thread", or "No
threads" and exit 0 on a tampered schema).
"""

from __future__ import annotations

import os
import re
import sqlite3
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from handrail import Command, SqliteSaver
from handrail.cli import main

PG_DSN = os.environ.get("HANDRAIL_TEST_POSTGRES_DSN") or "postgresql://postgres@127.0.0.1:5432/test"

AGENT_MODULE = textwrap.dedent(
    '''
    """A small reviewed agent for test_audit_verify_cli."""

    from handrail import HumanInTheLoopMiddleware, InMemorySaver, ScriptedModel, create_agent, tool


    @tool
    def pay(amount: int) -> str:
        """Pay."""
        return f"paid {amount}"


    def build(saver):
        turn = {"content": "", "tool_calls": [{"name": "pay", "args": {"amount": 5}}]}
        return create_agent(
            ScriptedModel([turn, {"content": "done"}]),
            [pay],
            middleware=[HumanInTheLoopMiddleware({"pay": True})],
            checkpointer=saver,
        )


    agent = build(InMemorySaver())
    '''
)

HEAD = re.compile(r"head: record (\d+), hash ([0-9a-f]{64})")


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


@pytest.fixture
def verify_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The module ``verify_agent`` (importable, and in the cwd for ``--agent``)."""
    (tmp_path / "verify_agent.py").write_text(AGENT_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import verify_agent as module

    yield module
    import sys

    sys.modules.pop("verify_agent", None)


def _fill(
    saver: Any, module: Any, *, finished: tuple[str, ...] = ("t1", "t2"), paused: tuple[str, ...] = ()
) -> None:
    for thread_id in finished:
        agent = module.build(saver)
        agent.invoke({"messages": "pay"}, _config(thread_id))
        agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), _config(thread_id))
    for thread_id in paused:
        module.build(saver).invoke({"messages": "pay"}, _config(thread_id))


class Backend:
    """One real store: the flags that name it, how to open a saver on it, and an attacker's SQL."""

    def __init__(
        self,
        flags: list[str],
        open_saver: Callable[[], Any],
        sql: Callable[[str, tuple[Any, ...]], list[Any]],
    ):
        self.flags = flags
        self.open_saver = open_saver
        self.sql = sql

    def cut_tail(self, thread_id: str, count: int) -> int:
        """Delete the last ``count`` events of a thread and lower its head to match, as someone
        with write access to the database would - its row sealed anew at that head, as
        handrail seals one (a seal finds damage, not a writer who computes it again); return
        the new head."""
        from handrail.checkpoint.seals import thread_digest, thread_seal

        events = self.sql(
            "SELECT seq, payload FROM {p}events WHERE thread_id = {ph} ORDER BY seq", (thread_id,)
        )
        head, payload = events[-count - 1]
        head_hash = bytes(payload)[1:33]
        self.sql(f"DELETE FROM {{p}}events WHERE thread_id = {{ph}} AND seq > {head}", (thread_id,))
        self.sql(f"DELETE FROM {{p}}readings WHERE thread_id = {{ph}} AND seq > {head}", (thread_id,))
        ((status, epoch, created, updated, metadata, pending),) = self.sql(
            "SELECT status, epoch, created_at, updated_at, CAST(metadata AS TEXT), pending_count "
            "FROM {p}threads WHERE thread_id = {ph}",
            (thread_id,),
        )
        digest = thread_digest(thread_id, head, head_hash, status, epoch, created, updated, pending)
        raw = metadata if isinstance(metadata, bytes) else metadata.encode()
        self.sql(
            "UPDATE {p}threads SET head_seq = {ph}, head_hash = {ph}, seal = {ph} WHERE thread_id = {ph}",
            (head, head_hash, thread_seal(digest, raw), thread_id),
        )
        return head


def _sqlite_backend(tmp_path: Path) -> Backend:
    db = tmp_path / "threads.db"

    def sql(statement: str, params: tuple[Any, ...]) -> list[Any]:
        with sqlite3.connect(db) as conn:
            return conn.execute(statement.format(p="handrail_", ph="?"), params).fetchall()

    return Backend(["--db", str(db)], lambda: SqliteSaver(db), sql)


def _postgres_backend(schema: str) -> Backend:
    import psycopg

    from handrail.checkpoint.postgres import PostgresSaver

    def sql(statement: str, params: tuple[Any, ...]) -> list[Any]:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            cursor = conn.execute(statement.format(p=f'"{schema}".handrail_', ph="%s"), params)
            return cursor.fetchall() if cursor.description else []

    def open_saver() -> Any:
        saver = PostgresSaver.from_conn_string(PG_DSN, schema=schema, pool_size=2)
        return _SetUp(saver)

    return Backend(["--postgres", PG_DSN, "--schema", schema], open_saver, sql)


class _SetUp:
    """A Postgres saver as a context manager that sets its schema up first."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager

    def __enter__(self) -> Any:
        saver = self.manager.__enter__()
        saver.setup()
        return saver

    def __exit__(self, *exc: Any) -> None:
        self.manager.__exit__(*exc)


def _postgres_or_skip() -> None:
    try:
        import psycopg

        with psycopg.connect(PG_DSN, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # ImportError or psycopg.Error
        if os.environ.get("HANDRAIL_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"HANDRAIL_REQUIRE_POSTGRES=1 but PostgreSQL at {PG_DSN} cannot be used: {exc}")
        pytest.skip(f"PostgreSQL at {PG_DSN} cannot be used: {exc}")


def _drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _schema_exists(schema: str) -> bool:
    import psycopg

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    return bool(row and row[0])


@pytest.fixture
def new_schema() -> Iterator[Callable[[], str]]:
    """Names of fresh PostgreSQL schemas, dropped afterwards."""
    _postgres_or_skip()
    made: list[str] = []

    def make() -> str:
        made.append(f"hr_verify_{uuid.uuid4().hex[:12]}")
        return made[-1]

    yield make
    for schema in made:
        _drop_schema(schema)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return _sqlite_backend(tmp_path)
    make: Callable[[], str] = request.getfixturevalue("new_schema")
    return _postgres_backend(make())


def _verify(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["audit", "verify", *argv])
    captured = capsys.readouterr()
    return code, " ".join((captured.out + captured.err).split())


def test_a_cut_tail_is_found_only_against_the_head_kept_elsewhere(
    backend: Backend, verify_agent: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with backend.open_saver() as saver:
        _fill(saver, verify_agent)
        report = verify_agent.build(saver).verify_audit(_config("t1"))
    assert report.ok and report.head_hash is not None and len(report.head_hash) == 64

    code, out = _verify(capsys, "t1", *backend.flags)
    assert code == 0, out
    found = HEAD.search(out)
    assert found is not None, out
    assert (int(found[1]), found[2]) == (report.head_seq, report.head_hash)
    kept = found[2]  # what an operator keeps where the database's writers cannot reach

    assert _verify(capsys, "t1", "--expect-head", kept.upper(), *backend.flags)[0] == 0

    new_head = backend.cut_tail("t1", 2)

    # The chain alone cannot see it: what is left is whole.
    code, out = _verify(capsys, "t1", *backend.flags)
    assert code == 0 and "intact t1" in out, out

    code, out = _verify(capsys, "t1", "--expect-head", kept, *backend.flags)
    assert code == 1, out
    assert f"BROKEN t1: record {new_head + 1}: the log does not end at the expected head {kept}" in out
    assert f"it ends at record {new_head}" in out and "Records were cut from its end" in out
    assert "0 of 1 thread intact" in out

    with backend.open_saver() as saver:
        agent = verify_agent.build(saver)
        cut = agent.verify_audit(_config("t1"), expect_head=kept)
        other = agent.verify_audit(_config("t2"), expect_head=kept)
    assert not cut.ok and cut.first_bad == new_head + 1 and cut.expected_head == kept
    assert cut.head_seq == new_head and cut.head_hash is not None and cut.head_hash != kept
    assert "does not end at the expected head" in (cut.reason or "")
    assert not other.ok  # another thread's head is no proof for this one


def test_a_log_that_grew_past_the_expected_head_is_told_apart(
    backend: Backend, verify_agent: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with backend.open_saver() as saver:
        _fill(saver, verify_agent, finished=(), paused=("t3",))
        before = verify_agent.build(saver).verify_audit(_config("t3"))
        agent = verify_agent.build(saver)
        agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), _config("t3"))
        after = agent.verify_audit(_config("t3"), expect_head=before.head_hash)
        same = agent.verify_audit(_config("t3"), expect_head=after.head_hash)
    assert not after.ok and after.first_bad == before.head_seq + 1
    assert "goes on past the expected head" in (after.reason or "")
    assert f"keep the new head {after.head_hash}" in (after.reason or "")
    assert same.ok and same.expected_head == after.head_hash

    assert before.head_hash is not None
    code, out = _verify(capsys, "t3", "--expect-head", before.head_hash, *backend.flags)
    assert code == 1 and "goes on past the expected head" in out, out
    code, out = _verify(capsys, "t3", "--expect-head", str(after.head_hash), *backend.flags)
    assert code == 0 and "as expected" in out, out


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["t1", "--expect-head", "abc"], "64 hexadecimal digits"),
        (["t1", "--expect-head", "z" * 64], "64 hexadecimal digits"),
        (["t1", "t2", "--expect-head", "a" * 64], "name exactly that thread"),
        (["--all", "--expect-head", "a" * 64], "name exactly that thread"),
        (["t1", "--schema", "s"], "--schema names a PostgreSQL schema"),
    ],
)
def test_mistakes_with_the_new_flags_exit_2(
    tmp_path: Path, verify_agent: Any, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    db = tmp_path / "threads.db"
    with SqliteSaver(db) as saver:
        _fill(saver, verify_agent)
    code, out = _verify(capsys, *argv, "--db", str(db))
    assert code == 2 and said in out, out


def test_verify_reads_the_schema_it_is_given(
    new_schema: Callable[[], str], verify_agent: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = new_schema()
    store = _postgres_backend(schema)
    with store.open_saver() as saver:
        _fill(saver, verify_agent)

    code, out = _verify(capsys, "t1", *store.flags)
    assert code == 0 and "intact t1" in out, out
    code, out = _verify(capsys, "--all", *store.flags)
    assert code == 0, out
    assert "2 of 2 threads intact in PostgreSQL" in out and f"schema '{schema}'" in out, out

    # The other audit commands read the same schema.
    assert main(["audit", "t1", *store.flags, "--agent", "verify_agent:agent", "--csv"]) == 0
    trail = capsys.readouterr().out
    assert ",answered," in trail and "paid 5" in trail

    # A changed record in that schema is found, and the exit code says so.
    store.sql(
        "UPDATE {p}events SET payload = set_byte(payload, length(payload) - 1, "
        "get_byte(payload, length(payload) - 1) # 1) WHERE thread_id = {ph} AND kind = 'tool_finished'",
        ("t2",),
    )
    code, out = _verify(capsys, "--all", *store.flags)
    assert code == 1 and "BROKEN t2: record" in out and "1 of 2 threads intact" in out, out


def test_an_empty_or_missing_store_is_not_a_success(
    new_schema: Callable[[], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = new_schema()
    code, out = _verify(capsys, "--all", "--postgres", PG_DSN, "--schema", missing)
    assert code == 1, out
    assert f"schema '{missing}'" in out and "holds no handrail store" in out, out
    assert not _schema_exists(missing)  # verifying created nothing

    empty = new_schema()
    with _postgres_backend(empty).open_saver():
        pass  # the tables, and no thread
    code, out = _verify(capsys, "--all", "--postgres", PG_DSN, "--schema", empty)
    assert code == 1 and "No threads in PostgreSQL" in out and f"schema '{empty}'" in out, out
    assert "nothing was verified" in out

    code, out = _verify(capsys, "--all", "--postgres", "postgresql://postgres@127.0.0.1:1/test")
    assert code == 1 and "cannot connect to PostgreSQL" in out, out

    db = tmp_path / "empty.db"
    with SqliteSaver(db):
        pass
    code, out = _verify(capsys, "--all", "--db", str(db))
    assert code == 1 and f"No threads in the SQLite file {db}" in out, out
