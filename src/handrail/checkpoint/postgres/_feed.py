"""The Postgres feed of notices and queue of runs (what the review service and its workers read).

**The feed** is ``handrail_feed``: an append writes its notices there in its own
statement (``_write.py``), so a notice exists exactly when its events do. Rows are
inserted without a place in the feed (``pos`` NULL): identity numbers are taken before
commit, so they do not come in commit order, and a reader going on from the last number
it saw could pass a row that commits later. Instead a reader first *seals* the feed:
under a transaction-scoped advisory lock (one sealer at a time; the others just read),
it gives every committed row without a place the next places, in the order of their
ids, in one ``UPDATE``, from a sequence. A row committed later gets a later place; so
places are in commit order, and a reader that goes on from the last place it saw misses
nothing and sees nothing twice. The ``UPDATE`` runs in a statement after the lock is
taken, so its snapshot sees the places the previous sealer committed. Sealing costs a
reader one short statement, and nothing when every row has its place; an append pays
for one small index (the rows still without a place).

Readers poll the feed (the service: a few times a second); a notification for every
notice would cost each review cycle a ``NOTIFY`` (a lock taken at every such commit).

**The queue** is ``runs`` rows with the run id ``queued`` and no owner (``owner_key``
NULL): a thread with answers that nobody runs yet. Such a row, like that of a dead
owner, is not alive, so a claim on the thread drops it. Inserting one (an answer
recorded for a worker, rarer than a review cycle) fires ``pg_notify('handrail_queue',
<schema>)`` at its commit, so workers that ``LISTEN`` wake at once instead of polling.
:meth:`FeedSQL.claim_queued` takes one such thread in two statements of one transaction,
sent in one round trip (``BEGIN``, both, ``COMMIT``, in a pipeline): the first picks a
thread with a row that is not alive and none that is, locks its ``threads`` row ``FOR
UPDATE SKIP LOCKED`` (another claimer skips it rather than wait) and notes its id in a
transaction-local setting (``handrail.claim``: gone at the commit, so nothing is left on
a connection a pooler hands to another client); the second, with a new snapshot, reads
the id from that setting, checks again that no live run appeared meanwhile (a claim
committed just before the lock was taken), drops the waiting rows and claims the
caller's run. Two claimers of one thread are thus serialised by the row lock, and the
second sees the first's claim: never two runs from one queued thread. A thread found
busy that way (rare) is passed over by the next try, one more round trip. A third
statement in the same round trip reads the thread as a run starts from (the record,
the saved reading, the events after it: ``_read.py``), after the claim: the saver keeps
that read for the claimed run's first attempt (``_protocol.py``, ``claimed_read``), so a
worker that has never seen the thread claims and loads it in one round trip.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from handrail.checkpoint._records import MAX_TIME
from handrail.checkpoint.base import (
    NOTICE_KINDS,
    QUEUED_RUN,
    ClaimFilter,
    FeedEntry,
    ThreadRead,
    feed_position,
)
from handrail.checkpoint.postgres._base import BEGIN, COMMIT, Op, Query, Tables, _bare
from handrail.checkpoint.postgres._liveness import Flow, under_lock
from handrail.checkpoint.postgres._read import read_rows, read_sql
from handrail.errors import SerializationError

__all__ = ["QUEUE_CHANNEL", "FeedSQL", "feed_migration"]

QUEUE_CHANNEL = "handrail_queue"
"""The ``LISTEN`` channel of the queue: a thread was queued; the payload is the schema's name."""

_TRIES = 8  # threads a claim looks at before it gives up for now (each found busy when locked)
_SEAL_BATCH = 5000  # rows a sealer places at once (more wait for the next read)
_PICKED = "handrail.claim"  # the transaction-local setting that holds the thread a claim picked


def feed_migration(p: str) -> tuple[str, ...]:
    """Migration 5's statements: the feed, queued rows in ``runs`` and their trigger."""
    bare = _bare(p)
    return (
        f"""CREATE TABLE {p}feed (
            id         bigint GENERATED ALWAYS AS IDENTITY,
            pos        bigint,
            thread_id  text COLLATE "C" NOT NULL,
            seq        bigint NOT NULL,
            kind       text NOT NULL,
            created_at double precision NOT NULL,
            data       bytea NOT NULL
        )""",
        # places come from a sequence, so a place is never given twice, even once the rows
        # that had the last ones are trimmed (a sealer's rollback leaves a gap: harmless)
        f"CREATE SEQUENCE {p}feed_places",
        f"CREATE UNIQUE INDEX {bare}feed_by_place ON {p}feed (pos) WHERE pos IS NOT NULL",
        f"CREATE INDEX {bare}feed_unsealed ON {p}feed (id) WHERE pos IS NULL",
        # for trimming by age: BRIN, as rows come in time order and an append should not pay
        # for a B-tree's upkeep
        f"CREATE INDEX {bare}feed_by_time ON {p}feed USING brin (created_at)",
        # a queued thread's row has no owner; its insert wakes the workers that LISTEN
        f"ALTER TABLE {p}runs ALTER COLUMN owner_key DROP NOT NULL",
        f"""CREATE OR REPLACE FUNCTION {p}queue_notify() RETURNS trigger LANGUAGE plpgsql AS $notify$
        BEGIN
            PERFORM pg_notify('{QUEUE_CHANNEL}', TG_TABLE_SCHEMA);
            RETURN NULL;
        END
        $notify$""",
        f"CREATE TRIGGER {bare}queue_notify AFTER INSERT ON {p}runs "
        f"FOR EACH ROW WHEN (NEW.owner_key IS NULL) EXECUTE FUNCTION {p}queue_notify()",
    )


class FeedSQL(Tables):
    """Reading and trimming the feed; claiming queued threads."""

    def _seal(self) -> list[Query]:
        """Give the committed rows without a place theirs (see the module's documentation).

        The first statement tries the lock and notes in a transaction-local setting whether
        it got it; the second, with its own snapshot taken after that, places rows only then.
        """
        return [
            BEGIN,
            Query(
                "SELECT set_config('handrail.sealer', pg_try_advisory_xact_lock(%s)::text, true)",
                (self._feed_key,),
            ),
            Query(
                f"WITH todo AS (SELECT u.id, nextval('{self.feed}_places') AS place FROM (SELECT id "
                f"FROM {self.feed} WHERE pos IS NULL AND current_setting('handrail.sealer', true) = 'true' "
                f"ORDER BY id LIMIT {_SEAL_BATCH}) AS u) "
                f"UPDATE {self.feed} AS f SET pos = todo.place FROM todo WHERE f.id = todo.id"
            ),
            COMMIT,
        ]

    def listen(self) -> Op[None]:
        """Start listening for queued threads (on the saver's waiting connection)."""
        yield [Query(f"LISTEN {QUEUE_CHANNEL}", None)]

    def read_feed(self, after: str | None, limit: int) -> Op[list[FeedEntry]]:
        start = feed_position(after)
        *_, result = yield [
            *self._seal(),
            Query(
                f"SELECT pos, thread_id, seq, kind, created_at, data FROM {self.feed} "
                "WHERE pos > %s ORDER BY pos LIMIT %s",
                (start, max(int(limit), 0)),
            ),
        ]
        return [_entry(row) for row in result.rows]

    def feed_end(self) -> Op[str | None]:
        *_, result = yield [*self._seal(), Query(f"SELECT MAX(pos) FROM {self.feed}")]
        top = result.rows[0][0]
        return None if top is None else str(top)

    def trim_feed(self, before: float) -> Op[int]:
        (result,) = yield [Query(f"DELETE FROM {self.feed} WHERE created_at < %s", (before,))]
        return result.rowcount

    def claim_queued_flow(
        self, run_id: str, filter: ClaimFilter | None, thread_id: str | None
    ) -> Flow[tuple[str, ThreadRead] | None]:
        """``claim_queued`` as both savers perform it, under the liveness lock: the thread
        claimed and its read (see the module's documentation), or None."""
        if run_id == QUEUED_RUN:
            raise ValueError(f"{QUEUED_RUN!r} names a thread's queued row, not a run")

        def statement(key: int | None) -> Op[tuple[str, ThreadRead] | None]:
            assert key is not None  # claims=True: the flow asked for the key
            return self._claim_queued(run_id, key, filter, thread_id)

        return (yield from under_lock(statement, claims=True))

    def _claim_queued(
        self, run_id: str, owner_key: int, filter: ClaimFilter | None, thread_id: str | None
    ) -> Op[tuple[str, ThreadRead] | None]:
        waiting, live = f"NOT {self._alive('r.owner_key')}", self._alive("r.owner_key")
        where = [
            f"t.thread_id IN (SELECT r.thread_id FROM {self.runs} AS r WHERE {waiting})",
            f"NOT EXISTS (SELECT FROM {self.runs} AS r WHERE r.thread_id = t.thread_id AND {live})",
            "t.thread_id <> ALL (%(tried)s::text[])",
        ]
        params: dict[str, object] = {"tried": []}
        if thread_id is not None:
            where.append("t.thread_id = %(only)s")
            params["only"] = thread_id
        if filter is not None:
            where.append(
                "((jsonb_typeof(t.metadata -> %(key)s) = 'string' AND t.metadata ->> %(key)s = ANY "
                "(%(values)s::text[])) OR (%(missing)s AND NOT jsonb_exists(t.metadata, %(key)s)))"
            )
            params.update(key=filter.key, values=list(filter.values), missing=filter.or_missing)
        pick = Query(
            f"WITH picked AS (SELECT t.thread_id FROM {self.threads} AS t WHERE {' AND '.join(where)} "
            "ORDER BY t.updated_at, t.thread_id LIMIT 1 FOR UPDATE OF t SKIP LOCKED) "
            f"SELECT set_config('{_PICKED}', thread_id, true) FROM picked",
            params,
        )
        # the picked thread's id, as the pick set it (none picked: NULL, or '' once set before)
        thread = f"current_setting('{_PICKED}', true)"
        take_sql = (
            f"WITH waiting AS (SELECT FROM {self.runs} AS r WHERE r.thread_id = {thread} AND {waiting}), "
            f"busy AS (SELECT FROM {self.runs} AS r WHERE r.thread_id = {thread} AND {live}), "
            f"dropped AS (DELETE FROM {self.runs} AS r WHERE r.thread_id = {thread} "
            "AND EXISTS (SELECT FROM waiting) AND NOT EXISTS (SELECT FROM busy)) "
            f"INSERT INTO {self.runs} (thread_id, run_id, owner_key, claimed_at) "
            f"SELECT {thread}, %(claim)s, %(owner)s, %(now)s "
            f"WHERE EXISTS (SELECT FROM waiting) AND NOT EXISTS (SELECT FROM busy) AND {self._lock_held} "
            "ON CONFLICT (thread_id, run_id) DO UPDATE SET owner_key = excluded.owner_key RETURNING 1"
        )
        load = Query(read_sql(self, thread, 0, None, True), {"after": 0, "upto": None})
        tried: list[str] = []
        for _ in range(_TRIES):
            params["tried"] = list(tried)
            take = Query(take_sql, {"claim": run_id, "owner": owner_key, "now": time.time()})
            _, found, taken, loaded, _ = yield [BEGIN, pick, take, load, COMMIT]
            if not found.rows:
                return None
            picked = str(found.rows[0][0])
            if taken.rows:
                return picked, read_rows(picked, loaded.rows)
            tried.append(picked)  # a live run appeared before the lock: look at the next one
        return None


def _entry(row: Sequence[object]) -> FeedEntry:
    """A feed row, checked: anything out of range is damage (SPEC rule 10)."""
    place, thread_id, seq, kind, created_at, data = row
    if not isinstance(thread_id, str) or not thread_id:
        raise SerializationError(f"the feed's notice {place} names no thread")
    if (
        type(seq) is not int
        or seq < 0
        or kind not in NOTICE_KINDS
        or not isinstance(created_at, float)
        or not 0 <= created_at < MAX_TIME
        or not isinstance(data, bytes)
    ):
        raise SerializationError(
            f"the feed's notice {place} of thread {thread_id!r} is damaged (its seq, kind, time or data "
            "is out of range)",
            thread_id=thread_id,
        )
    return FeedEntry(str(place), thread_id, seq, kind, created_at, data)
