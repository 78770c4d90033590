"""SPEC rule 18 for schemas of an older handrail: migration 4 seals every event in place
on PostgreSQL, as it does on SQLite (test_sqlite_sealing.py)."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
from _stores import approve, build_agent, config, drop_schema, start

from handrail import PostgresSaver
from handrail.checkpoint.integrity import is_sealed, unseal


def _rows(dsn: str, schema: str) -> dict[tuple[str, int], bytes]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(f'SELECT thread_id, seq, payload FROM "{schema}".handrail_events').fetchall()
    return {(thread, seq): bytes(payload) for thread, seq, payload in rows}


def test_migration_4_seals_the_events_of_an_older_schema_and_its_threads_go_on(
    postgres_server: str, tmp_path: Path
) -> None:
    dsn, schema = postgres_server, f"hr_test_{uuid.uuid4().hex[:16]}"
    try:
        with PostgresSaver.from_conn_string(dsn, schema=schema, pool_size=2) as saver:
            saver.setup()
            agent = build_agent(saver, tmp_path / "tool.log")
            agent.invoke(approve(start(agent, "done")), config("done"))
            paused = start(agent, "paused")
        sealed = _rows(dsn, schema)
        with psycopg.connect(dsn, autocommit=True) as conn:  # as format v2 stored them, at version 3
            for (thread, seq), payload in sealed.items():
                conn.execute(
                    f'UPDATE "{schema}".handrail_events SET payload = %s WHERE thread_id = %s AND seq = %s',
                    (unseal(payload)[1], thread, seq),
                )
            conn.execute(f'DELETE FROM "{schema}".handrail_schema_version WHERE version >= 4')
            # and without what version 5 added
            conn.execute(f'DROP TABLE "{schema}".handrail_feed')
            conn.execute(f'DROP SEQUENCE "{schema}".handrail_feed_places')
            conn.execute(f'DROP TRIGGER handrail_queue_notify ON "{schema}".handrail_runs')
            conn.execute(f'DROP FUNCTION "{schema}".handrail_queue_notify()')
            conn.execute(f'ALTER TABLE "{schema}".handrail_runs ALTER COLUMN owner_key SET NOT NULL')
            conn.execute(f'DROP TABLE "{schema}".handrail_deletions')  # and what version 6 added
            for table, column in (("threads", "head_hash"), ("threads", "seal"), ("pending", "seal")):
                conn.execute(f'ALTER TABLE "{schema}".handrail_{table} DROP COLUMN {column}')  # and 7's
        assert not any(is_sealed(payload) for payload in _rows(dsn, schema).values())

        with PostgresSaver.from_conn_string(dsn, schema=schema, pool_size=2) as saver:
            saver.setup()
            assert _rows(dsn, schema) == sealed  # each event got the hash a writer gave it
            agent = build_agent(saver, tmp_path / "tool.log")
            assert agent.verify_audit(config("done")).ok and agent.verify_audit(config("paused")).ok
            assert agent.invoke(approve(paused), config("paused"))["messages"][-1].content == "done"
    finally:
        drop_schema(dsn, schema)
