"""Grants as the stores keep them (SPEC rule 16), on every backend, sync and async.

A grant is born with an append (``grants=GrantChange(new=...)``), in its transaction: a
record no grant could be, or an id taken already, is refused with ``ValueError`` and
nothing of the append is saved. ``spend_grants`` takes one use of each grant named, all
or none: a revoked, lapsed, used-up or unknown grant raises ``GrantSpentError`` naming
the thread and the grant, and nothing is spent. Racing for the last uses, exactly as many
callers win as there were uses, from threads and from processes. ``list_grants`` lists
newest first, filtered as ``grants.grant_matches`` says (checked against ``grants.page``,
the reference); ``revoke_grant`` revokes once. A thread's deletion leaves its grants; a
database of the previous schema version is upgraded in place; a damaged row raises
``SerializationError`` naming the grant.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import threading
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from _stores import Location, Store
from test_store_protocol import ev, grow, rec

from handrail.checkpoint.base import Append
from handrail.checkpoint.grants import GrantChange, GrantFilter, GrantRecord, page
from handrail.errors import ConflictError, GrantSpentError, SerializationError


def grant(
    grant_id: str,
    *,
    agent: str = "bot",
    tool: str = "write_file",
    scope: Any = "thread",
    thread_id: str = "t",
    args_digest: str | None = None,
    args: Any = None,
    expires_at: float | None = None,
    uses: int | None = 3,
    used: int = 0,
    given_by: Any = None,
    given_at: float = 100.0,
) -> GrantRecord:
    return GrantRecord(
        grant_id=grant_id,
        agent=agent,
        tool=tool,
        scope=scope,
        thread_id=thread_id,
        args_digest=args_digest,
        args=args,
        expires_at=expires_at,
        uses=uses,
        used=used,
        given_by={"id": "ann", "roles": ["lead"]} if given_by is None else given_by,
        given_at=given_at,
        interrupt_id=f"i-{grant_id}",
        tool_call_id=f"call-{grant_id}",
    )


async def give(store: Store, thread_id: str, *grants: GrantRecord) -> None:
    """One append on ``thread_id`` (at its head) that carries ``grants``."""
    await grow(store, thread_id, 1)
    current = await store.get_thread(thread_id)
    assert current is not None
    await store.append(
        thread_id,
        Append(
            [ev(current.head_seq + 1)],
            expected_seq=current.head_seq,
            record=rec(thread_id, current.head_seq + 1),
            grants=GrantChange(new=grants),
        ),
    )


async def listed(store: Store, filter: GrantFilter | None = None, **options: Any) -> list[GrantRecord]:
    found: list[GrantRecord] = await store._call("list_grants", filter or GrantFilter(**options))
    return found


async def spend(store: Store, *grant_ids: str, thread_id: str = "t", at: float = 150.0) -> None:
    await store._call("spend_grants", list(grant_ids), thread_id=thread_id, at=at)


async def revoke(store: Store, grant_id: str, **options: Any) -> GrantRecord | None:
    found: GrantRecord | None = await store._call("revoke_grant", grant_id, **options)
    return found


async def by_id(store: Store) -> dict[str, GrantRecord]:
    return {g.grant_id: g for g in await listed(store, limit=10_000)}


# Adding and listing ----------------------------------------------------------------------------
async def test_grants_born_with_an_append_come_back_exactly(store: Store) -> None:
    odd = {"path": "/tmp/ä ✓", "lines": [1, 2.5, None, True], "nested": {"z": 1, "a": {"deep": "x"}}}
    one = grant("g1", args=odd, args_digest="d" * 64, expires_at=500.25, uses=None)
    two = grant("g2", scope="agent", given_by="bob", given_at=101.0, uses=7, used=2)
    await grow(store, "t", 2)
    await store.append(
        "t", Append([ev(3)], expected_seq=2, record=rec("t", 3), grants=GrantChange(new=[one, two]))
    )
    assert await listed(store) == [two, one]  # newest first
    assert (await store.get_thread("t")) == rec("t", 3)
    assert [e.seq for e in (await store.read("t")).events] == [1, 2, 3]


async def test_an_append_without_events_may_carry_grants(store: Store) -> None:
    await grow(store, "t", 1)
    await store.append(
        "t", Append([], expected_seq=1, record=rec("t", 1, status="running"), grants=GrantChange())
    )
    await store.append(
        "t", Append([], expected_seq=1, record=rec("t", 1), grants=GrantChange(new=[grant("g1")]))
    )
    assert [g.grant_id for g in await listed(store)] == ["g1"]
    assert await store.get_thread("t") == rec("t", 1)


async def test_the_list_is_newest_first_and_paged(store: Store) -> None:
    records = [grant(f"g{n}", given_at=100.0 + n // 2) for n in range(7)]  # pairs given at once
    await give(store, "t", *records[:4])
    await give(store, "t", *records[4:])
    expected = sorted(records, key=lambda g: (g.given_at, g.grant_id), reverse=True)
    assert await listed(store) == expected
    assert await listed(store, limit=3) == expected[:3]
    assert await listed(store, limit=3, offset=3) == expected[3:6]
    assert await listed(store, limit=3, offset=6) == expected[6:]
    assert await listed(store, limit=3, offset=9) == []
    assert await listed(store, limit=0) == []


async def test_filters_list_what_grant_matches_says(store: Store) -> None:
    """Each field of GrantFilter, alone and together, against the reference ``page``."""
    records = [
        grant("a1", agent="bot", tool="write_file", thread_id="t1", given_at=101.0),
        grant("a2", agent="bot", tool="sql", thread_id="t1", scope="agent", given_at=102.0),
        grant("a3", agent="bot", tool="write_file", thread_id="t2", given_at=103.0),
        grant("a4", agent="bot", tool="write_file", thread_id="t2", scope="agent", given_at=104.0),
        grant("b1", agent="other", tool="write_file", thread_id="t3", scope="agent", given_at=105.0),
        grant("b2", agent="other", tool="sql", thread_id="t3", given_at=106.0),
        # by time: lapses at 200 (in force before, not at 200 or after)
        grant("x1", agent="bot", tool="sql", thread_id="t1", expires_at=200.0, uses=None, given_at=107.0),
        # by uses: one left, then none
        grant("x2", agent="bot", tool="write_file", thread_id="t2", uses=2, used=1, given_at=108.0),
        grant("x3", agent="bot", tool="sql", thread_id="t2", scope="agent", uses=1, used=1, given_at=109.0),
        # both bounds
        grant("x4", agent="other", tool="sql", thread_id="t3", expires_at=300.0, uses=5, given_at=110.0),
    ]
    await give(store, "t1", *records[:3])
    await give(store, "t2", *records[3:7])
    await give(store, "t3", *records[7:])
    assert (await revoke(store, "a3", by="ops", at=120.0)) is not None
    current = list((await by_id(store)).values())
    filters = [
        GrantFilter(),
        GrantFilter(agent="bot"),
        GrantFilter(agent="other"),
        GrantFilter(agent="nobody"),
        GrantFilter(tool="sql"),
        GrantFilter(tool="write_file"),
        GrantFilter(thread_id="t1"),
        GrantFilter(thread_id="t2"),
        GrantFilter(covering="t1"),
        GrantFilter(covering="t2"),
        GrantFilter(covering="elsewhere"),
        GrantFilter(active_at=150.0),
        GrantFilter(active_at=199.999),
        GrantFilter(active_at=200.0),
        GrantFilter(active_at=1000.0),
        GrantFilter(agent="bot", tool="sql", covering="t1", active_at=150.0),
        GrantFilter(agent="bot", tool="sql", covering="t1", active_at=250.0),
        GrantFilter(agent="bot", covering="t2", active_at=150.0),
        GrantFilter(agent="other", tool="sql", thread_id="t3", active_at=299.0),
        GrantFilter(agent="bot", active_at=150.0, limit=2, offset=1),
    ]
    for filter in filters:
        assert await listed(store, filter) == page(current, filter), filter
    # a few by hand, so that the reference itself is pinned
    assert [g.grant_id for g in await listed(store, covering="t1")] == ["x3", "x1", "b1", "a4", "a2", "a1"]
    active = await listed(store, active_at=150.0)
    assert [g.grant_id for g in active] == ["x4", "x2", "x1", "b2", "b1", "a4", "a2", "a1"]  # a3 revoked
    assert "x1" not in {g.grant_id for g in await listed(store, active_at=200.0)}  # lapsed at its expiry


async def test_active_at_follows_the_uses_spent(store: Store) -> None:
    await give(store, "t", grant("g", uses=2))
    assert [g.uses_left for g in await listed(store, active_at=150.0)] == [2]
    await spend(store, "g")
    assert [g.uses_left for g in await listed(store, active_at=150.0)] == [1]
    await spend(store, "g")
    assert await listed(store, active_at=150.0) == []
    (spent,) = await listed(store)
    assert (spent.used, spent.uses_left, spent.in_force(150.0)) == (2, 0, False)


# Spending ------------------------------------------------------------------------------------
async def test_uses_are_spent_until_none_is_left(store: Store) -> None:
    await give(store, "t", grant("g", uses=3))
    for used in (1, 2, 3):
        await spend(store, "g", thread_id="t")
        assert (await by_id(store))["g"].used == used
    with pytest.raises(GrantSpentError) as caught:
        await spend(store, "g", thread_id="t2")
    error = caught.value
    assert isinstance(error, ConflictError)
    assert (error.thread_id, error.grant_id) == ("t2", "g")
    assert "'t2'" in str(error) and "g" in str(error) and "no use left" in str(error)
    assert "nothing was spent" in str(error)
    assert (await by_id(store))["g"].used == 3


async def test_a_grant_bounded_by_time_only_is_spent_until_it_lapses(store: Store) -> None:
    await give(store, "t", grant("g", expires_at=200.0, uses=None))
    for _ in range(5):
        await spend(store, "g", at=199.5)
    assert (await by_id(store))["g"].used == 5
    with pytest.raises(GrantSpentError, match="lapsed"):
        await spend(store, "g", at=200.0)  # lapsed at its expiry, not after
    assert (await by_id(store))["g"].used == 5


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("revoked", "was revoked"),
        ("lapsed", "lapsed"),
        ("unknown", "no such grant"),
        ("used up", "no use left"),
    ],
)
async def test_a_spend_that_cannot_be_made_spends_nothing(store: Store, case: str, reason: str) -> None:
    await give(store, "t", grant("ok", uses=5), grant("bad", uses=1, expires_at=200.0))
    if case == "revoked":
        await revoke(store, "bad", by="ops", at=120.0)
    elif case == "used up":
        await spend(store, "bad")
    before = await by_id(store)
    thread_before, events_before = await store.get_thread("t"), (await store.read("t")).events
    missing = "nobody" if case == "unknown" else "bad"
    at = 250.0 if case == "lapsed" else 150.0
    with pytest.raises(GrantSpentError, match=reason) as caught:
        await spend(store, "ok", missing, "ok", thread_id="t", at=at)  # all or none
    assert (caught.value.grant_id, caught.value.thread_id) == (missing, "t")
    assert missing in str(caught.value) and "nothing was spent" in str(caught.value)
    assert await by_id(store) == before
    assert await store.get_thread("t") == thread_before
    assert (await store.read("t")).events == events_before
    await spend(store, "ok", "ok", at=at)  # the grant in force is still spendable
    assert (await by_id(store))["ok"].used == before["ok"].used + 2


async def test_one_spend_may_take_several_uses_of_one_grant(store: Store) -> None:
    await give(store, "t", grant("g", uses=3), grant("h", uses=1))
    await spend(store, "g", "h", "g")
    found = await by_id(store)
    assert (found["g"].used, found["h"].used) == (2, 1)
    with pytest.raises(GrantSpentError, match="no use left"):
        await spend(store, "g", "g")  # one use left, two asked: none taken
    assert (await by_id(store))["g"].used == 2
    await spend(store)  # nothing asked, nothing done


async def test_many_callers_racing_for_the_last_uses_get_exactly_that_many(store: Store) -> None:
    """8 callers, on 8 threads of the store, race for a grant with 3 uses: 3 win."""
    await give(store, "t0", grant("g", scope="agent", thread_id="t0", uses=3))
    callers = 8

    async def attempt(n: int) -> bool:
        try:
            await spend(store, "g", thread_id=f"t{n}")
        except GrantSpentError as exc:
            assert exc.grant_id == "g" and exc.thread_id == f"t{n}"
            return False
        return True

    if store.is_async:
        outcomes = list(await asyncio.gather(*(attempt(n) for n in range(callers))))
    else:
        barrier = threading.Barrier(callers)
        outcomes = [False] * callers

        def worker(n: int) -> None:
            barrier.wait()
            outcomes[n] = asyncio.run(attempt(n))

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(callers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sum(outcomes) == 3
    assert (await by_id(store))["g"].used == 3


_SPENDER = """
import json, sys
from _stores import open_saver
from handrail.errors import GrantSpentError

saver = open_saver(json.loads(sys.argv[1]))
print("ready", flush=True)
sys.stdin.readline()  # "go"
try:
    saver.spend_grants(["g"], thread_id=sys.argv[2], at=150.0)
    print("won", flush=True)
except GrantSpentError:
    print("refused", flush=True)
saver.close()
"""


def test_processes_racing_for_the_last_uses_get_exactly_that_many(durable_location: Location) -> None:
    """6 processes, each with a saver of its own, race for a grant with 2 uses: 2 win."""
    saver = durable_location.saver()
    saver.append(
        "t", Append([ev(1)], expected_seq=0, record=rec("t", 1), grants=GrantChange(new=[grant("g", uses=2)]))
    )
    here = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
    spec = json.dumps(durable_location.spec)
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _SPENDER, spec, f"p{n}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for n in range(6)
    ]
    try:
        for process in processes:
            assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        for process in processes:  # all at once
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        outcomes = [process.communicate(timeout=60)[0].strip() for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    assert all(process.returncode == 0 for process in processes)
    assert sorted(outcomes) == ["refused"] * 4 + ["won"] * 2
    (record,) = saver.list_grants(GrantFilter())
    assert record.used == 2


# Refusals at birth -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        (grant("b", scope="forever"), "scope"),
        (grant("b", expires_at=None, uses=None), "expiry"),
        (grant("b", uses=0), "at least 1"),
        (grant("b", expires_at=float("inf")), "finite"),
        (grant("b", used=-1), "negative"),
    ],
)
async def test_a_record_no_grant_could_be_is_refused_and_the_append_saves_nothing(
    store: Store, bad: GrantRecord, problem: str
) -> None:
    await give(store, "t", grant("old"))
    before, events = await store.get_thread("t"), (await store.read("t")).events
    assert before is not None
    with pytest.raises(ValueError, match=problem):
        await store.append(
            "t",
            Append(
                [ev(before.head_seq + 1)],
                expected_seq=before.head_seq,
                record=rec("t", before.head_seq + 1),
                grants=GrantChange(new=[grant("fine"), bad]),
            ),
        )
    assert await store.get_thread("t") == before
    assert (await store.read("t")).events == events
    assert [g.grant_id for g in await listed(store)] == ["old"]


async def test_an_id_taken_already_is_refused_and_the_append_saves_nothing(store: Store) -> None:
    await give(store, "t", grant("g", uses=9))
    await spend(store, "g")
    before, events, kept = await store.get_thread("t"), (await store.read("t")).events, await by_id(store)
    assert before is not None
    for new in ([grant("fresh"), grant("g", uses=1)], [grant("twice"), grant("twice")]):
        with pytest.raises(ValueError, match="exists already"):
            await store.append(
                "t",
                Append(
                    [ev(before.head_seq + 1)],
                    expected_seq=before.head_seq,
                    record=rec("t", before.head_seq + 1, status="running"),
                    grants=GrantChange(new=new),
                ),
            )
        assert await store.get_thread("t") == before
        assert (await store.read("t")).events == events
        assert await by_id(store) == kept  # the grant kept its uses; the fresh one was not added
    await give(store, "t", grant("fresh"))  # the thread goes on
    assert set(await by_id(store)) == {"g", "fresh"}


async def test_a_stale_append_adds_no_grant(store: Store) -> None:
    await grow(store, "t", 2)
    with pytest.raises(ConflictError):
        await store.append(
            "t", Append([ev(2)], expected_seq=1, record=rec("t", 2), grants=GrantChange([grant("g")]))
        )
    assert await listed(store) == []


async def test_arguments_that_cannot_be_stored_are_refused_before_anything(store: Store) -> None:
    """A durable store refuses what it cannot write; memory keeps objects as they are (the
    runtime never gives it such arguments: answers are checked as JSON first)."""
    await grow(store, "t", 1)
    if store.location.backend == "memory":
        await store.append(
            "t",
            Append(
                [ev(2)], expected_seq=1, record=rec("t", 2), grants=GrantChange([grant("g", args={1, 2})])
            ),
        )
        assert [g.args for g in await listed(store)] == [{1, 2}]
        return
    with pytest.raises(SerializationError, match="arguments of grant"):
        await store.append(
            "t",
            Append(
                [ev(2)], expected_seq=1, record=rec("t", 2), grants=GrantChange([grant("g", args={1, 2})])
            ),
        )
    assert (await store.get_thread("t")) == rec("t", 1)
    assert await listed(store) == []


# Revoking ----------------------------------------------------------------------------------------
async def test_a_grant_is_revoked_once(store: Store) -> None:
    record = grant("g", uses=4)
    await give(store, "t", record)
    await spend(store, "g")
    revoked = await revoke(store, "g", by={"id": "ops", "roles": ["admin"]}, at=130.5)
    assert revoked == replace(record, used=1, revoked_at=130.5, revoked_by={"id": "ops", "roles": ["admin"]})
    assert await revoke(store, "g", by="someone else", at=140.0) == revoked  # as it was
    assert await listed(store) == [revoked]
    assert await listed(store, active_at=125.0) == []  # revoked: covers nothing, whenever asked
    with pytest.raises(GrantSpentError, match="was revoked"):
        await spend(store, "g")
    assert await revoke(store, "nobody", by="ops") is None
    assert await listed(store) == [revoked]


async def test_a_revocation_without_a_time_is_now(store: Store) -> None:
    import time

    await give(store, "t", grant("g"))
    before = time.time()
    revoked = await revoke(store, "g")
    assert revoked is not None and revoked.revoked_by is None
    assert revoked.revoked_at is not None and before <= revoked.revoked_at <= time.time()


# Threads come and go; grants stay ----------------------------------------------------------------
async def test_deleting_a_thread_leaves_its_grants(store: Store) -> None:
    await give(store, "t", grant("mine", scope="thread"), grant("agents", scope="agent", uses=2))
    assert await store.delete_thread("t") is True
    assert await store.get_thread("t") is None
    assert {g.grant_id for g in await listed(store)} == {"mine", "agents"}
    await spend(store, "agents", thread_id="t9")
    assert [g.grant_id for g in await listed(store, covering="t9", active_at=150.0)] == ["agents"]


# Schema versions ---------------------------------------------------------------------------------
def _previous(saver_class: type) -> type:
    class Previous(saver_class):  # type: ignore[misc, valid-type]
        def schema_migrations(self) -> tuple[Any, ...]:
            return tuple(super().schema_migrations())[:-1]

    return Previous


def test_a_database_of_the_previous_version_is_upgraded_in_place(durable_location: Location) -> None:
    """Version 8 adds the table of grants to a database of version 7, keeping what it holds."""
    spec = durable_location.spec
    if spec["kind"] == "sqlite":
        from handrail.checkpoint.sqlite import SqliteSaver

        old = _previous(SqliteSaver)(spec["path"])
    else:
        from handrail.checkpoint.postgres import PostgresSaver

        options = {"prepare_threshold": spec["prepare_threshold"]} if "prepare_threshold" in spec else {}
        old = _previous(PostgresSaver).from_conn_string(spec["dsn"], schema=spec["schema"], **options)
    with old:
        versions = [m.version for m in old.schema_migrations()]
        old.append("t", Append([ev(1), ev(2)], expected_seq=0, record=rec("t", 2, metadata={"team": "x"})))
        assert _tables(durable_location, "grants") == 0
    assert versions == list(range(1, 8))
    saver = durable_location.saver()  # opens at the current version: migrates
    assert saver.schema_migrations()[-1].version == 8
    assert _versions(durable_location) == list(range(1, 9))
    assert _tables(durable_location, "grants") == 1
    assert saver.get_thread("t") == rec("t", 2, metadata={"team": "x"})
    assert [e.seq for e in saver.read("t").events] == [1, 2]
    saver.append(
        "t", Append([ev(3)], expected_seq=2, record=rec("t", 3), grants=GrantChange([grant("g", uses=1)]))
    )
    saver.spend_grants(["g"], thread_id="t", at=150.0)
    assert [(g.grant_id, g.used) for g in saver.list_grants(GrantFilter())] == [("g", 1)]
    durable_location.saver().close()  # opened again: nothing more to do
    assert _versions(durable_location) == list(range(1, 9))


def _tables(location: Location, name: str) -> int:
    if location.backend == "sqlite":
        with closing(sqlite3.connect(location.path)) as conn:
            (count,) = conn.execute(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", (f"handrail_{name}",)
            ).fetchone()
        return int(count)
    import psycopg

    with psycopg.connect(str(location.dsn), autocommit=True, prepare_threshold=None) as conn:
        row = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
            (location.schema, f"handrail_{name}"),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _versions(location: Location) -> list[int]:
    if location.backend == "sqlite":
        with closing(sqlite3.connect(location.path)) as conn:
            return [
                v for (v,) in conn.execute("SELECT version FROM handrail_schema_version ORDER BY version")
            ]
    import psycopg

    with psycopg.connect(str(location.dsn), autocommit=True, prepare_threshold=None) as conn:
        rows = conn.execute(
            f'SELECT version FROM "{location.schema}".handrail_schema_version ORDER BY version'
        ).fetchall()
    return [int(v) for (v,) in rows]


# Damage ------------------------------------------------------------------------------------------
_SQLITE_DAMAGE = [
    ("given_at", "'soon'", "time"),
    ("args", "x'7b6e6f'", "args"),
    ("scope", "'forever'", "scope"),
    ("used", "-1", "uses taken"),
    ("uses", "'many'", "number of uses"),
    ("given_by", "42", "given_by"),
    ("agent", "x'ff'", "agent"),
    ("revoked_at", "'later'", "time"),
]
_POSTGRES_DAMAGE = [
    ("args", "'{no'", "args"),
    ("scope", "'forever'", "scope"),
    ("used", "-1", "uses taken"),
    ("uses", "0", "number of uses"),
    ("given_at", "'nan'", "time"),
    ("given_by", "'[1,'", "given_by"),
]


def test_a_damaged_grant_row_is_refused_naming_the_grant(durable_location: Location) -> None:
    """Every kind of damage this backend's columns can hold, one after another."""
    saver = durable_location.saver()
    cases = _SQLITE_DAMAGE if durable_location.backend == "sqlite" else _POSTGRES_DAMAGE
    saver.append(
        "t", Append([ev(1)], expected_seq=0, record=rec("t", 1), grants=GrantChange([grant("fine")]))
    )
    for i, (column, value, said) in enumerate(cases):
        hurt = f"hurt{i}"
        saver.append(
            "t",
            Append(
                [ev(i + 2)], expected_seq=i + 1, record=rec("t", i + 2), grants=GrantChange([grant(hurt)])
            ),
        )
        _sql(durable_location, "UPDATE {table} SET " + f"{column} = {value} WHERE grant_id = '{hurt}'")
        for call in (
            lambda: saver.list_grants(GrantFilter()),
            lambda hurt=hurt: saver.revoke_grant(hurt, by="ops"),
        ):
            with pytest.raises(SerializationError) as caught:
                call()
            assert f"grant '{hurt}'" in str(caught.value) and said in str(caught.value), str(caught.value)
        assert [g.grant_id for g in saver.list_grants(GrantFilter(thread_id="nowhere"))] == []
        _sql(durable_location, "DELETE FROM {table} WHERE " + f"grant_id = '{hurt}'")
    assert [g.grant_id for g in saver.list_grants(GrantFilter())] == ["fine"]


def _sql(location: Location, statement: str) -> None:
    """Run one statement on the grants table of ``location``'s database, behind the store."""
    if location.backend == "sqlite":
        with closing(sqlite3.connect(location.path)) as conn, conn:
            conn.execute(statement.replace("{table}", "handrail_grants"))
        return
    import psycopg

    with psycopg.connect(str(location.dsn), autocommit=True, prepare_threshold=None) as conn:
        conn.execute(statement.replace("{table}", f'"{location.schema}".handrail_grants').encode())
