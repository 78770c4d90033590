"""The feed's order and its damage: notices read in commit order, none missed, none twice.

PostgreSQL numbers rows before they commit, so the feed gives each committed row its
place when a reader *seals* it (``checkpoint/postgres/_feed.py``): these tests hold a
transaction open across reads, race readers against writers, and damage stored rows.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _stores import Location, build_agent, start

from handrail.errors import SerializationError


def _raw_postgres(location: Location) -> Any:
    import psycopg

    assert location.dsn is not None
    return psycopg.connect(location.dsn, autocommit=True)


def test_a_notice_that_commits_late_is_read_after_the_ones_before_it(postgres: str, tmp_path: Path) -> None:
    """An insert numbered first but committed last is not passed over by a reader that
    read the others meanwhile: it comes next, once committed."""
    from _stores import location_for

    with location_for("postgres", tmp_path, postgres) as location:
        saver = location.saver()
        agent = build_agent(saver, tmp_path / "tool.log")
        start(agent, "t0")
        seen = saver.read_feed()
        raw = _raw_postgres(location)
        raw.execute("BEGIN")
        raw.execute(
            f'INSERT INTO "{location.schema}".handrail_feed (thread_id, seq, kind, created_at, data) '
            "VALUES ('late', 1, 'run.finished', 1.0, '{}')"
        )  # numbered now, committed below
        start(agent, "t1")  # committed meanwhile
        middle = saver.read_feed(seen[-1].cursor)
        assert [e.thread_id for e in middle] == ["t1", "t1"]
        raw.execute("COMMIT")
        late = saver.read_feed(middle[-1].cursor)
        assert [e.thread_id for e in late] == ["late"]
        assert int(late[0].cursor) > int(middle[-1].cursor)
        raw.close()


def test_readers_racing_writers_see_every_notice_once_in_one_order(
    durable_location: Location, tmp_path: Path
) -> None:
    """Four writers and three readers at once: each reader reads every notice exactly once,
    all in the same order (readers seal the Postgres feed at the same time)."""
    location = durable_location
    writers = [build_agent(location.saver(), tmp_path / f"{n}.log") for n in range(4)]
    readers = [location.saver() for _ in range(3)]
    seen: list[list[str]] = [[] for _ in readers]

    def write(agent: Any, n: int) -> None:
        for k in range(6):
            start(agent, f"w{n}-{k}")

    def read(saver: Any, box: list[str]) -> None:
        # a reader that finds another one sealing reads what is placed so far, and the
        # rest on its next read: so it reads on until it has them all (or gives up)
        cursor, deadline = None, time.monotonic() + 120
        while len(box) < 48 and time.monotonic() < deadline:
            batch = saver.read_feed(cursor, limit=7)
            box += [f"{e.thread_id}:{e.kind}" for e in batch]
            cursor = batch[-1].cursor if batch else cursor
            if not batch:
                time.sleep(0.01)
        time.sleep(0.2)
        box += [f"{e.thread_id}:{e.kind}" for e in saver.read_feed(cursor)]  # and nothing more

    threads = [threading.Thread(target=write, args=(agent, n)) for n, agent in enumerate(writers)]
    threads += [
        threading.Thread(target=read, args=(saver, box)) for saver, box in zip(readers, seen, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads[: len(writers)]:
        thread.join(120)
    for thread in threads[len(writers) :]:
        thread.join(120)
    expected = {
        f"w{n}-{k}:{kind}"
        for n in range(4)
        for k in range(6)
        for kind in ("review.requested", "run.finished")
    }
    for box in seen:
        assert len(box) == len(expected) and set(box) == expected
    assert seen[0] == seen[1] == seen[2]


@pytest.mark.parametrize(
    "column, value",
    [("kind", "'review.exploded'"), ("seq", "-5"), ("created_at", "1e300"), ("thread_id", "''")],
)
def test_a_damaged_feed_row_fails_loudly(
    durable_location: Location, tmp_path: Path, column: str, value: str
) -> None:
    """Rule 10: a feed row out of range is a SerializationError naming it, never a notice."""
    location = durable_location
    saver = location.saver()
    start(build_agent(saver, tmp_path / "tool.log"), "t1")
    saver.read_feed()  # every row has its place
    if location.backend == "sqlite":
        with sqlite3.connect(location.path) as conn:
            conn.execute(f"UPDATE handrail_feed SET {column} = {value}")
    else:
        raw = _raw_postgres(location)
        raw.execute(f'UPDATE "{location.schema}".handrail_feed SET {column} = {value}')
        raw.close()
    with pytest.raises(SerializationError, match="feed's notice"):
        saver.read_feed()
