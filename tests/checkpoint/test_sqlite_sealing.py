"""SPEC rule 18 for files of an older handrail: migration 4 seals every event in place.

A file made before records had a hash is opened: each event gets the hash it already has
in its chain, byte for byte what a new writer would have stored, its threads verify and
go on, and readings of that time are dropped (a cache; the next run saves another).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from _stores import approve, build_agent, config, start

from handrail import SqliteSaver
from handrail.checkpoint.integrity import is_sealed, unseal
from handrail.checkpoint.serde import dumps
from handrail.runtime import commit
from handrail.runtime.events import decode_event, pack_payload


def _rows(path: Path) -> dict[tuple[str, int], bytes]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT thread_id, seq, payload FROM handrail_events").fetchall()
    return {(thread, seq): bytes(payload) for thread, seq, payload in rows}


def _as_written_before_seals(path: Path) -> None:
    """Strip every seal, as the events of format v2 were stored, and go back to version 3.
    A snapshot of that time had no anchors: pruning then left none."""
    with sqlite3.connect(path) as conn:
        for thread, seq, kind, at, payload in conn.execute(
            "SELECT thread_id, seq, kind, created_at, payload FROM handrail_events"
        ).fetchall():
            body = unseal(bytes(payload))[1]
            if kind == "snapshot":
                from handrail.checkpoint.base import StoredEvent

                data = decode_event(StoredEvent(seq, kind, at, body), thread).data
                data.pop("anchors", None)
                body = pack_payload(dumps(data))
            conn.execute(
                "UPDATE handrail_events SET payload = ? WHERE thread_id = ? AND seq = ?", (body, thread, seq)
            )
        conn.execute("DELETE FROM handrail_schema_version WHERE version >= 4")
        conn.execute("DROP TABLE handrail_feed")  # version 5's, which that file did not have yet
        conn.execute("DROP TABLE handrail_deletions")  # and version 6's
        for table, column in (("threads", "head_hash"), ("threads", "seal"), ("pending", "seal")):
            conn.execute(f"ALTER TABLE handrail_{table} DROP COLUMN {column}")  # and version 7's


def test_migration_4_seals_the_events_of_an_older_file_and_its_threads_go_on(tmp_path: Path) -> None:
    path = tmp_path / "threads.db"
    original, commit.READING_EVERY = commit.READING_EVERY, 10
    try:
        with SqliteSaver(path) as saver:
            agent = build_agent(saver, tmp_path / "tool.log")
            for _ in range(3):
                agent.invoke(approve(start(agent, "done")), config("done"))  # saves a reading
            agent.invoke(approve(start(agent, "pruned")), config("pruned"))
            agent.invoke(approve(start(agent, "pruned")), config("pruned"))
            assert agent.prune_thread("pruned", keep_last=1) > 0
            paused = start(agent, "paused")
        sealed = _rows(path)
        _as_written_before_seals(path)
        assert not any(is_sealed(payload) for payload in _rows(path).values())

        with SqliteSaver(path) as saver:
            after = _rows(path)
            assert all(is_sealed(payload) for payload in after.values())
            unpruned = {key: value for key, value in sealed.items() if key[0] != "pruned"}
            assert {key: after[key] for key in unpruned} == unpruned  # the hashes a writer gave them
            assert saver.read("done", from_reading=True).reading is None  # readings of that time dropped
            agent = build_agent(saver, tmp_path / "tool.log")
            for thread in ("done", "pruned", "paused"):
                report = agent.verify_audit(config(thread))
                assert report.ok and report.unsealed == 0, report
            result = agent.invoke(approve(paused), config("paused"))
            assert result["messages"][-1].content == "done"
            agent.invoke(approve(start(agent, "pruned")), config("pruned"))
            assert agent.verify_audit(config("pruned")).ok
    finally:
        commit.READING_EVERY = original
