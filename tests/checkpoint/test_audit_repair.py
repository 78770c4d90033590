"""``handrail audit verify --repair``: rows derived from a log, damaged, rebuilt from it.

On SQLite and PostgreSQL (``--db`` / ``--postgres`` and ``--schema``), with the threads
of ``_damage.fill``: a thread row, a pending row and index rows are damaged; ``verify``
finds each (exit 1); ``verify --repair`` rebuilds them from the logs, saying what it
changed, and verifies (exit 0); every reader then returns what it did before the
damage (a rewritten thread row has a new epoch); a second repair changes nothing. A log
that lost its last record is not used to rebuild its row: the repair says so, and the
row stays as it was. The in-memory store's ``repair_thread`` does the same for its
kept objects.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from _damage import agent_on, baseline, fill
from _stores import PGBOUNCER, Location

from conftest import without_prepared_statements
from handrail import InMemorySaver
from handrail.cli import main
from handrail.errors import SerializationError
from handrail.runtime.repair import repair_thread


def _sql(location: Location, statement: str, params: tuple[Any, ...] = ()) -> None:
    """Run ``statement`` on the store's database, as someone with write access would
    (``{p}`` is the tables' prefix, ``?`` a parameter)."""
    if location.backend == "sqlite":
        import sqlite3

        with sqlite3.connect(location.path) as conn:
            conn.execute(statement.format(p="handrail_"), params)
        return
    import psycopg

    assert location.dsn is not None
    with psycopg.connect(location.dsn, autocommit=True) as conn:
        conn.execute(statement.format(p=f'"{location.schema}".handrail_').replace("?", "%s"), params)


@pytest.fixture
def store(durable_location: Location, monkeypatch: pytest.MonkeyPatch) -> Location:
    """Where the threads are; through PgBouncer (transaction pooling), the command line's
    connections prepare no statement, as the production guide tells its users."""
    if durable_location.backend == PGBOUNCER:
        without_prepared_statements(monkeypatch)
    return durable_location


def _flags(location: Location) -> list[str]:
    if location.backend == "sqlite":
        return ["--db", str(location.path)]
    assert location.dsn is not None
    return ["--postgres", location.dsn, "--schema", location.schema]


def _verify(capsys: pytest.CaptureFixture[str], location: Location, *argv: str) -> tuple[int, str]:
    code = main(["audit", "verify", *argv, *_flags(location)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _without_epochs(value: Any) -> Any:
    """What a reader returned, with every thread record's epoch left out (a repair that
    rewrites a thread row gives it a new one) and each pending review's payload decoded
    (a rewritten pending row holds its value encoded anew: other bytes, the same value)."""
    from handrail.checkpoint.base import PendingItem, PendingReview, ThreadRecord
    from handrail.runtime.events import decode_review

    if isinstance(value, PendingReview):
        return replace(value, payload=repr(decode_review(value.payload, "t", value.interrupt_id)).encode())
    if isinstance(value, ThreadRecord):
        return replace(value, epoch="", pending=tuple(_without_epochs(review) for review in value.pending))
    if isinstance(value, PendingItem):
        return replace(value, review=_without_epochs(value.review))
    if isinstance(value, list):
        return [_without_epochs(item) for item in value]
    return value


def test_verify_finds_damaged_rows_and_repair_rebuilds_them_from_the_logs(
    store: Location, capsys: pytest.CaptureFixture[str]
) -> None:
    saver = store.saver()
    fill(saver)
    before = {name: _without_epochs(value) for name, value in baseline(saver).items()}
    _sql(store, "UPDATE {p}threads SET status = 'idle' WHERE thread_id = 't'")
    _sql(store, "UPDATE {p}pending SET kind = 'outcome_unknown' WHERE thread_id = 'u'")
    _sql(
        store,
        "UPDATE {p}pending_tools SET tool = 'sql' WHERE thread_id = 't' AND tool = 'touch_file'",
    )
    if store.backend != "sqlite":
        _sql(store, """UPDATE {p}pending_metadata SET value = '"y"' WHERE thread_id = 't'""")

    code, out = _verify(capsys, store, "t", "u", "d")
    assert code == 1, out
    assert "BROKEN  t: thread record: it does not match its seal" in out, out
    assert "BROKEN  u: pending review" in out, out
    assert "intact  d" in out, out

    code, out = _verify(capsys, store, "--all", "--repair")
    assert code == 0, out
    assert "repaired t: thread row: status 'idle' -> 'interrupted'" in out, out
    assert "repaired u: pending review" in out and "kind 'outcome_unknown' -> 'interrupt'" in out, out
    assert "repaired t: tool index: row ('sql'" in out and "not the reviews', removed" in out, out
    assert "3 of 3 threads intact" in out, out
    assert "repaired d" not in out, out

    after = {name: _without_epochs(value) for name, value in baseline(saver).items()}
    assert after == before
    code, out = _verify(capsys, store, "--all", "--repair")
    assert code == 0 and "repaired" not in out, out
    # the threads go on: both reviews of t answered, t finishes
    agent = agent_on(saver)
    for item in agent.list_interrupts(thread_id="t").items:
        agent.invoke(
            __import__("handrail").Command(resume={item.interrupt.id: {"type": "approve"}}), item.config
        )
    assert agent.get_state(item.config).values["messages"][-1].content == "done"


def test_only_index_rows_damaged_is_found_by_verify_and_repaired(
    store: Location, capsys: pytest.CaptureFixture[str]
) -> None:
    saver = store.saver()
    fill(saver)
    _sql(
        store,
        "UPDATE {p}pending_tools SET tool = 'sql' WHERE thread_id = 'u' AND tool = 'write_file'",
    )
    code, out = _verify(capsys, store, "u")
    assert code == 1, out
    assert "DAMAGED u: its log is intact" in out and "tool index: row ('sql'" in out, out
    code, out = _verify(capsys, store, "u", "--repair")
    assert code == 0 and "repaired u: tool index" in out and "intact  u" in out, out
    assert [item.thread_id for item in agent_on(saver).list_interrupts(tool="write_file").items] == ["t", "u"]


def test_a_log_that_lost_its_last_record_is_not_used_to_rebuild_its_row(
    store: Location, capsys: pytest.CaptureFixture[str]
) -> None:
    saver = store.saver()
    fill(saver)
    head = saver.get_thread("t").head_seq  # type: ignore[union-attr]
    _sql(
        store,
        "UPDATE {p}events SET thread_id = 'elsewhere' WHERE thread_id = 't' AND seq = ?",
        (head,),
    )
    code, out = _verify(capsys, store, "t", "--repair")
    assert code == 1, out
    assert (
        "not repaired t: its row's head is record" in out and "records were lost from the log's end" in out
    ), out
    assert saver.get_thread("t").head_seq == head  # type: ignore[union-attr]


def test_the_memory_store_rebuilds_a_changed_record_from_its_log() -> None:
    saver = InMemorySaver()
    fill(saver)
    before = _without_epochs(saver.get_thread("t"))
    record = saver._records["t"]
    object.__setattr__(record.pending[1], "kind", "outcome_unknown")
    object.__setattr__(record, "status", "idle")
    with pytest.raises(SerializationError, match="thread 't', pending review"):
        saver.get_thread("t")
    assert repair_thread(saver, "t", dry_run=True)  # says what it would change, changes nothing
    with pytest.raises(SerializationError):
        saver.get_thread("t")
    changes = repair_thread(saver, "t")
    assert any("status 'idle' -> 'interrupted'" in line for line in changes), changes
    assert any("kind 'outcome_unknown' -> 'interrupt'" in line for line in changes), changes
    assert _without_epochs(saver.get_thread("t")) == before
    assert repair_thread(saver, "t") == []
