"""What deleting a thread leaves (SPEC rule 21), on every backend.

A deletion removes the thread and its whole log and, in the same transaction, writes a
record: who deleted it, when, the number and hash of the log's last record (the head hash
``verify_audit`` reported), the thread's metadata. The record is there exactly when the
thread is gone; the audit across threads shows it among the other entries, in time
order, under the same filters; and a damaged record fails loudly, naming itself.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _stores import Location, Store, approve, build_agent, config, start
from test_store_owners import OWNERS
from test_store_protocol import ev, grow, keys, review

from handrail.checkpoint.base import Append, DeletionRecord, StoredEvent, ThreadRecord
from handrail.checkpoint.integrity import GENESIS, seal
from handrail.errors import ConflictError, InvalidInputError, SerializationError

OPS = {"id": "ops", "roles": ["admin"]}


def _sealed(thread_id: str, count: int) -> tuple[list[StoredEvent], list[str]]:
    """``count`` events sealed in one chain, and each one's hash (in hex)."""
    events, hashes, prev = [], [], GENESIS
    for seq in range(1, count + 1):
        payload, prev = seal(prev, thread_id, seq, "step", 1.0 + seq, b'{"n": %d}' % seq)
        events.append(StoredEvent(seq, "step", 1.0 + seq, payload))
        hashes.append(prev.hex())
    return events, hashes


def _record(thread_id: str, head: int, metadata: dict[str, Any] | None = None) -> ThreadRecord:
    return ThreadRecord(thread_id, head, "idle", "epoch-1", 1.0, 2.0, metadata or {})


# Through the library ----------------------------------------------------------------------------
def test_a_deletion_keeps_the_head_hash_verify_audit_gave(location: Location, tmp_path: Path) -> None:
    agent = build_agent(location.saver(), tmp_path / "tool.log")
    result = agent.invoke({"messages": ["write_file:t"]}, {**config("t"), "metadata": {"team": "x"}})
    agent.invoke(approve(result["__interrupt__"][0].id), config("t"))
    report = agent.verify_audit(config("t"))
    assert report.ok and report.head_hash is not None
    metadata = dict(agent.list_threads()[0].metadata)

    before = time.time()
    assert agent.delete_thread("t", by=OPS) is True
    after = time.time()

    (record,) = location.saver().list_deletions()
    assert record == DeletionRecord("t", record.deleted_at, OPS, report.head_seq, report.head_hash, metadata)
    assert before <= record.deleted_at <= after
    assert record.metadata["team"] == "x"
    # the log is gone; a second delete finds nothing and leaves nothing
    assert location.saver().get_thread("t") is None
    assert "no such thread" in (agent.verify_audit(config("t")).reason or "")
    assert agent.delete_thread("t", by=OPS) is False
    assert location.saver().list_deletions() == [record]
    # the audit across threads still shows it: its only trace
    (entry,) = agent.audit()
    assert (entry.event, entry.thread_id, entry.by, entry.seq) == (
        "thread_deleted",
        "t",
        OPS,
        report.head_seq,
    )
    assert entry.value == {"head_seq": report.head_seq, "head_hash": report.head_hash, "metadata": metadata}
    assert entry.at.timestamp() == record.deleted_at  # to the microsecond, both ways


async def test_the_async_library_records_who_deleted(location: Location, tmp_path: Path) -> None:
    agent = build_agent(location.saver(), tmp_path / "tool.log")
    start(agent, "t")
    head = (await agent.averify_audit(config("t"))).head_hash
    assert await agent.adelete_thread("t", by="ann") is True
    assert await agent.adelete_thread("t", by="ann") is False
    (entry,) = await agent.aaudit()
    assert entry.by == "ann" and entry.value["head_hash"] == head


def test_nobody_named_is_recorded_as_none_and_a_bad_by_is_refused(location: Location, tmp_path: Path) -> None:
    agent = build_agent(location.saver(), tmp_path / "tool.log")
    start(agent, "t")
    for bad in (5, {"id": ""}, {"id": "x", "roles": "admin"}, {"id": "x", "team": "y"}):
        with pytest.raises(InvalidInputError, match=r"by \(who deletes the thread\)"):
            agent.delete_thread("t", by=bad)
    assert location.saver().get_thread("t") is not None  # nothing was deleted
    assert agent.delete_thread("t") is True
    (record,) = location.saver().list_deletions()
    assert record.by is None


# The store protocol -----------------------------------------------------------------------------
async def test_the_record_names_the_last_record_and_its_seal(store: Store) -> None:
    events, hashes = _sealed("t", 4)
    await store.append("t", Append(events, expected_seq=0, record=_record("t", 4, {"team": "x"})))
    await grow(store, "plain", 2, metadata={"team": "y"})  # records written without a seal
    await store.append("empty", Append([], expected_seq=0, record=_record("empty", 0)))

    assert await store.delete_thread("t", by=OPS) is True
    assert await store.delete_thread("plain") is True
    assert await store.delete_thread("empty", by="cron") is True
    assert await store.delete_thread("never") is False

    found = await store.list_deletions()
    assert sorted((d.thread_id, d.by, d.head_seq, d.head_hash, dict(d.metadata)) for d in found) == [
        ("empty", "cron", 0, None, {}),
        ("plain", None, 2, None, {"team": "y"}),
        ("t", OPS, 4, hashes[-1], {"team": "x"}),
    ]
    assert [(d.deleted_at, d.thread_id) for d in found] == sorted((d.deleted_at, d.thread_id) for d in found)


async def test_the_record_is_there_exactly_when_the_thread_is_gone(store: Store) -> None:
    await grow(store, "t", 3, status="interrupted", pending=(review("i"),))
    await grow(store, "keep", 1, pending=(review("k"),))
    # a ``by`` that cannot be stored is refused before anything is deleted
    with pytest.raises(SerializationError, match=r"who deleted thread 't'"):
        await store.delete_thread("t", by={"a", "set"})
    assert (await store.get_thread("t")) is not None and len((await store.read("t")).events) == 3
    assert await store.list_deletions() == []

    assert await store.delete_thread("t", by="ann") is True
    assert await store.get_thread("t") is None and (await store.read("t")).events == []
    assert keys(await store.list_pending()) == [("keep", "k")]
    assert [d.thread_id for d in await store.list_deletions()] == ["t"]
    # made again and deleted again: one record each time
    await store.append("t", Append([ev(1)], expected_seq=0, record=_record("t", 1)))
    assert await store.delete_thread("t", by="bob") is True
    assert [(d.thread_id, d.by, d.head_seq) for d in await store.list_deletions()] == [
        ("t", "ann", 3),
        ("t", "bob", 1),
    ]


async def test_deletions_are_listed_by_time_metadata_and_owners(store: Store) -> None:
    threads = {
        "s1": {"assistant_id": "strict", "team": "x"},
        "l1": {"assistant_id": "lax", "team": "y"},
        "u1": {"team": "x"},
        "n1": {"assistant_id": 5, "team": "x"},
        "s2": {"assistant_id": "strict"},
    }
    for thread, metadata in threads.items():
        await grow(store, thread, 2, metadata=metadata)
    for thread in threads:
        assert await store.delete_thread(thread, by=thread.upper())
        await asyncio.sleep(0.002)  # distinct times on any clock
    found = await store.list_deletions()
    assert [d.thread_id for d in found] == list(threads)
    at = [d.deleted_at for d in found]
    # since and until both included, as the audit's window
    assert await store.list_deletions(since=at[1]) == found[1:]
    assert await store.list_deletions(until=at[2]) == found[:3]
    assert await store.list_deletions(since=at[1], until=at[3]) == found[1:4]
    assert await store.list_deletions(since=at[-1] + 1) == []
    assert await store.list_deletions(limit=2) == found[:2]
    assert await store.list_deletions(limit=0) == []
    assert await store.list_deletions(metadata={"team": "x"}) == [found[0], found[2], found[3]]
    assert await store.list_deletions(metadata={"team": "x"}, limit=1, since=at[1]) == [found[2]]
    for name, owners in OWNERS.items():
        expected = [d for d in found if owners.matches(threads[d.thread_id])]
        assert await store.list_deletions(owners=owners) == expected, name
    strict = OWNERS["one"]
    assert await store.list_deletions(owners=strict, metadata={"team": "x"}) == [found[0]]


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "postgres-pgbouncer"], indirect=True)
async def test_a_failed_record_deletes_nothing(store: Store) -> None:
    """The record and the deletion share one transaction: when the record cannot be
    written (a trigger refuses it here), the thread keeps every row."""
    await grow(store, "t", 3, status="interrupted", pending=(review("i"),))
    _refuse_records(store.location, True)
    try:
        with pytest.raises(Exception, match="refused by the test"):
            await store.delete_thread("t", by="ann")
    finally:
        _refuse_records(store.location, False)
    assert (await store.get_thread("t")) is not None
    assert len((await store.read("t")).events) == 3
    assert keys(await store.list_pending()) == [("t", "i")]
    assert await store.list_deletions() == []
    assert await store.delete_thread("t", by="ann") is True
    assert [d.by for d in await store.list_deletions()] == ["ann"]


def _refuse_records(location: Location, refuse: bool) -> None:
    if location.backend == "sqlite":
        import sqlite3

        with sqlite3.connect(location.path) as conn:
            if refuse:
                conn.execute(
                    "CREATE TRIGGER refuse_deletions BEFORE INSERT ON handrail_deletions "
                    "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
                )
            else:
                conn.execute("DROP TRIGGER refuse_deletions")
        return
    import psycopg

    schema = f'"{location.schema}"'
    assert location.dsn is not None
    with psycopg.connect(location.dsn, autocommit=True) as conn:
        if refuse:
            conn.execute(
                f"CREATE FUNCTION {schema}.refuse() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$"
            )
            conn.execute(
                f"CREATE TRIGGER refuse BEFORE INSERT ON {schema}.handrail_deletions "
                f"FOR EACH ROW EXECUTE FUNCTION {schema}.refuse()"
            )
        else:
            conn.execute(f"DROP FUNCTION {schema}.refuse() CASCADE")


def test_a_deletion_racing_appends_records_the_head_it_removed(location: Location) -> None:
    """Appends go on while another saver deletes the thread: the record names the last
    append that got in (its number and hash), and every later one is refused."""
    events, hashes = _sealed("t", 400)
    writer, deleter = location.saver(), location.saver()
    writer.append("t", Append(events[:1], expected_seq=0, record=_record("t", 1)))
    appended = [1]
    going = threading.Event()

    def append_until_refused() -> None:
        for event in events[1:]:
            try:
                writer.append(
                    "t", Append([event], expected_seq=event.seq - 1, record=_record("t", event.seq))
                )
            except ConflictError:
                return
            appended.append(event.seq)
            if event.seq == 20:
                going.set()
        going.set()

    worker = threading.Thread(target=append_until_refused)
    worker.start()
    going.wait(30)
    assert deleter.delete_thread("t", by="racer") is True
    worker.join(30)
    (record,) = deleter.list_deletions()
    last = appended[-1]
    assert (record.head_seq, record.head_hash) == (last, hashes[last - 1])
    assert writer.read("t").events == [] and writer.get_thread("t") is None


# Damage (SPEC rule 10) ---------------------------------------------------------------------------
DAMAGE = [
    ("thread_id", "''", "the thread id is not a string"),
    ("deleted_at", "-1", "a time is -1"),
    ("deleted_by", """'{"__hr__": "pickle"}'""", "by: "),
    ("head_seq", "-1", "head_seq is -1"),
    ("head_hash", "'zz'", "its head hash is 'zz', not 64 hex digits"),
    ("metadata", "'[1]'", "metadata is a list, not an object"),
]


@pytest.mark.parametrize(("column", "value", "reason"), DAMAGE, ids=[d[0] for d in DAMAGE])
def test_a_damaged_deletion_record_fails_loudly(
    durable_location: Location, tmp_path: Path, column: str, value: str, reason: str
) -> None:
    saver = durable_location.saver()
    agent = build_agent(saver, tmp_path / "tool.log")
    start(agent, "t")
    agent.delete_thread("t", by=OPS)
    _damage(durable_location, f"UPDATE {{t}}deletions SET {column} = {value}")
    thread = "''" if column == "thread_id" else "'t'"
    for read in (saver.list_deletions, agent.audit):
        with pytest.raises(
            SerializationError, match=rf"cannot load thread {thread}, deletion record \d+"
        ) as caught:
            read()
        assert reason in str(caught.value) and caught.value.thread_id is not None


def _damage(location: Location, sql: str) -> None:
    if location.backend == "sqlite":
        import sqlite3

        with sqlite3.connect(location.path) as conn:
            conn.execute(sql.replace("{t}", "handrail_"))
        return
    import psycopg

    assert location.dsn is not None
    with psycopg.connect(location.dsn, autocommit=True) as conn:
        conn.execute(sql.replace("{t}", f'"{location.schema}".handrail_'))


# The audit across threads -----------------------------------------------------------------------
def test_the_audit_across_threads_shows_a_deletion_in_time_order(location: Location, tmp_path: Path) -> None:
    agent = build_agent(location.saver(), tmp_path / "tool.log")
    bound = {
        "a": {"assistant_id": "strict", "team": "x"},
        "b": {"assistant_id": "lax", "team": "y"},
        "c": {"assistant_id": "strict", "team": "y"},
    }

    def begin(thread: str) -> None:
        agent.invoke({"messages": [f"write_file:{thread}"]}, {**config(thread), "metadata": bound[thread]})

    begin("a")
    begin("b")
    head = agent.verify_audit(config("a")).head_hash
    assert agent.delete_thread("a", by=OPS)
    begin("c")

    trail = agent.audit()
    assert [(e.thread_id, e.event) for e in trail] == [
        ("b", "input"),
        ("b", "review_requested"),
        ("a", "thread_deleted"),
        ("c", "input"),
        ("c", "review_requested"),
    ]
    deleted = trail[2]
    assert deleted.by == OPS and deleted.value["head_hash"] == head
    assert deleted.value["metadata"]["assistant_id"] == "strict"
    # the window, both ends included, as for every other entry
    assert agent.audit(since=deleted.at) == trail[2:]
    assert agent.audit(until=deleted.at) == trail[:3]
    assert agent.audit(since=deleted.at, until=deleted.at) == [deleted]
    assert agent.audit(limit=3) == trail[:3]
    # the deleted thread's metadata, as it was, picks it
    assert agent.audit(metadata={"team": "x"}) == [deleted]
    assert [e.thread_id for e in agent.audit(metadata={"team": "y"})] == ["b", "b", "c", "c"]
    assert [e.thread_id for e in agent.audit(owners=OWNERS["one"])] == ["a", "c", "c"]
    assert [e.thread_id for e in agent.audit(owners=OWNERS["two"])] == ["b", "b"]
