"""The Postgres write path: appends, pruning, and what the saver remembers of them.

**An append is one statement, one round trip**: data-modifying CTEs that move the
thread row from the expected head to the new one (``UPDATE ... WHERE head_seq =
expected AND epoch = record's``, or ``INSERT ... ON CONFLICT`` for a new thread) and,
if it moved, replace the pending rows and insert the events, the saved reading, the run
claim and release; if it did not move, the statement calls ``handrail_conflict()``,
which raises (SQLSTATE ``HR409``, with the head and epoch it found), so nothing is saved
and no second query is needed. A second writer with the same expected head finds no row
to move once the first commits, or collides on the ``(thread_id, seq)`` key: either way
it gets :class:`~handrail.errors.ConflictError` (SPEC rule 8). Every append returns once
the server has committed it (or refused it); none is left for a later call to confirm.
An append that adds grants (``grants.py``) wraps that statement and one ``INSERT`` per
grant in ``BEGIN``/``COMMIT``, still one round trip.

The only state the saver keeps between appends is
:class:`~handrail.checkpoint.postgres._cleared.Cleared`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import orjson
import psycopg
import psycopg.errors

from handrail.checkpoint._records import conflict, encode_metadata, encode_tools, epoch_conflict
from handrail.checkpoint.base import NOTICE_KINDS, QUEUED_RUN, Notice, StoredEvent, ThreadRecord
from handrail.checkpoint.postgres._base import BEGIN, COMMIT, CONFLICT_STATE, Op, Query
from handrail.checkpoint.postgres._cleared import Cleared
from handrail.checkpoint.postgres._grants import GrantSQL, grant_error
from handrail.checkpoint.postgres._liveness import Flow, under_lock
from handrail.checkpoint.postgres._read import page_key
from handrail.checkpoint.postgres._schema import INDEXED_SQL
from handrail.checkpoint.seals import head_after, record_digest, review_seals
from handrail.errors import ConflictError, SerializationError

__all__ = ["WriteSQL", "append_error", "append_flow"]

# An append lists up to _LISTED_EVENTS events, and _LISTED_REVIEWS pending reviews, in
# VALUES, one parameter per field: psycopg dumps a scalar in C but an array through its
# Python list dumper (several times slower), and the server reads VALUES rows without
# unpacking arrays. Longer batches (rare) come in arrays, so that appends have few shapes
# of SQL (each one is prepared and planned apart, on each connection). psycopg parses a
# statement once, and caches it, only if it has at most _CACHED_PARAMS parameters (and
# fewer than 4096 bytes): parsing it on every call costs more than dumping the arrays.
# Listed events always fit (9 parameters, 4 for a claim and release, 4 per event); the
# reviews are listed only if they fit too.
_LISTED_EVENTS = 8
_LISTED_REVIEWS = 4
_CACHED_PARAMS = 50
_IN_ARRAYS = -1  # an append's shape: its events (or reviews) in arrays, however many
_EVENT_KEYS = tuple((f"e{n}s", f"e{n}k", f"e{n}t", f"e{n}p") for n in range(_LISTED_EVENTS))
_REVIEW_FIELDS = 7  # interrupt id, kind, tools, created_at, payload, page key, seal
_REVIEW_KEYS = tuple(tuple(f"r{n}{field}" for field in "iklapgs") for n in range(_LISTED_REVIEWS))
# Notices (a handful an append at most) are listed too, their kinds written into the SQL.
_LISTED_NOTICES = 4
_NOTICE_KEYS = tuple(f"n{n}" for n in range(_LISTED_NOTICES))


class WriteSQL(GrantSQL):
    """Appends (pruning: ``_prune.py``; deleting a thread, and the record it leaves: ``_deletions.py``)."""

    def append(
        self,
        thread_id: str,
        events: Sequence[StoredEvent],
        expected_seq: int,
        record: ThreadRecord,
        *,
        claim: tuple[str, int] | None = None,
        release: str | None = None,
        durable: bool = True,
        reading: StoredEvent | None = None,
        clear: int = 2,
        notices: Sequence[Notice] = (),
        queue: bool = False,
        grants: Sequence[tuple[Any, ...]] = (),
    ) -> Op[None]:
        """One statement: move the head (or conflict), then write everything else.

        ``claim`` is ``(run_id, owner_key)``: the run is claimed, then ``release`` released.
        ``reading`` takes the place of the thread's saved reading. ``clear`` is what the
        thread may hold at ``expected_seq``: 2, pending reviews with their tool and
        metadata rows; 1, reviews and tool rows but no metadata rows (its metadata was
        empty); 0, no review. The saver knows it from its own last append (if another
        writer moved the thread since, the head check fails), so the statement leaves
        out the deletes that would find nothing.
        ``durable=False``: the statement sets ``synchronous_commit`` off for its own
        transaction, so its commit does not wait for the WAL flush (the server keeps it
        if our process dies; WAL order makes the next durable commit flush it too).
        ``notices`` go to the feed and ``queue`` leaves the thread queued (``_feed.py``).
        ``grants``: the rows of new grants (``grants.py``), added in the same transaction.

        The thread row and the pending rows are sealed to the head hash (``seals.py``): the
        last event's; an append without events first reads the row's, and moves the row
        only if it still holds it. The server finishes the thread row's seal over its
        metadata as ``jsonb`` gives it back.
        """
        head_hash = head_after(events, None)
        if not events and expected_seq > 0:
            (found,) = yield [
                Query(f"SELECT head_hash FROM {self.threads} WHERE thread_id = %s", (thread_id,))
            ]
            head_hash = bytes(found.rows[0][0]) if found.rows and found.rows[0][0] is not None else None
        params: dict[str, Any] = {
            "thread": thread_id,
            "expected": expected_seq,
            "epoch": record.epoch,
            "head": record.head_seq,
            "status": record.status,
            "created": record.created_at,
            "updated": record.updated_at,
            "metadata": encode_metadata(record.metadata, thread_id).decode(),
            "count": len(record.pending),
            "head_hash": head_hash,
            "digest": record_digest(record, head_hash, thread_id),
        }
        claiming = 0  # 1: claim a run, 2: claim and release the same run
        if claim is not None:
            params.update(claim=claim[0], owner=claim[1], now=time.time())
            claiming = 2 if claim[0] == release else 1
        if release is not None:
            params["release"] = release
        if reading is not None:
            params.update(reading_seq=reading.seq, reading_at=reading.created_at, reading=reading.payload)
        if notices or queue:
            params["noticed_at"] = time.time()
        listed_notices: tuple[str, ...] | int = tuple(n.kind for n in notices)  # or in arrays, if many
        if len(notices) > _LISTED_NOTICES:
            listed_notices = _IN_ARRAYS
            params.update(notice_kinds=[n.kind for n in notices], notice_data=[n.data for n in notices])
        else:
            for key, notice in zip(_NOTICE_KEYS, notices, strict=False):
                params[key] = notice.data
        listed_events = len(events) if len(events) <= _LISTED_EVENTS else _IN_ARRAYS
        if listed_events != _IN_ARRAYS:
            for (seq, kind, at, payload), event in zip(_EVENT_KEYS, events, strict=False):
                params[seq] = event.seq
                params[kind] = event.kind
                params[at] = event.created_at
                params[payload] = event.payload
        else:
            params.update(
                seqs=[e.seq for e in events],
                kinds=[e.kind for e in events],
                times=[e.created_at for e in events],
                payloads=[e.payload for e in events],
            )
        reviews = record.pending
        listed_reviews = len(reviews)  # or in arrays, past psycopg's cache (see _CACHED_PARAMS)
        seals = review_seals(record, head_hash, thread_id) if reviews else ()
        if len(reviews) > _LISTED_REVIEWS or len(params) + _REVIEW_FIELDS * len(reviews) > _CACHED_PARAMS:
            listed_reviews = _IN_ARRAYS
            params.update(
                ids=[r.interrupt_id for r in reviews],
                review_kinds=[r.kind for r in reviews],
                tools=[orjson.dumps(encode_tools(r.tools)).decode() for r in reviews],
                review_times=[r.created_at for r in reviews],
                review_payloads=[r.payload for r in reviews],
                review_keys=[page_key(r.created_at, thread_id, r.interrupt_id) for r in reviews],
                review_seals=list(seals),
            )
        else:
            for (interrupt, kind, tools, at, payload, key, sealed), review, seal in zip(
                _REVIEW_KEYS, reviews, seals, strict=False
            ):
                params[interrupt] = review.interrupt_id
                params[kind] = review.kind
                params[tools] = orjson.dumps(encode_tools(review.tools)).decode()
                params[at] = review.created_at
                params[payload] = review.payload
                params[key] = page_key(review.created_at, thread_id, review.interrupt_id)
                params[sealed] = seal
        shape = (
            expected_seq == 0,
            listed_events,
            listed_reviews,
            claiming + 3 * (release is not None),
            durable,
            reading is not None,
            2 if expected_seq == 0 else clear,
            bool(record.metadata),
            listed_notices,
            queue,
        )
        sql = self._append_sql.get(shape)
        if sql is None:
            sql = self._append_sql[shape] = self._build_append(
                new=expected_seq == 0,
                events=listed_events,
                pending=listed_reviews,
                claim=claiming,
                release=release is not None,
                durable=durable,
                reading=reading is not None,
                clear=2 if expected_seq == 0 else clear,
                tag=bool(record.metadata),
                notices=listed_notices,
                queue=queue,
            )
        if grants:
            yield [BEGIN, Query(sql, params), *self.grant_inserts(grants), COMMIT]
        else:
            yield [Query(sql, params)]

    def _build_append(
        self,
        *,
        new: bool,
        events: int,
        pending: int,
        claim: int,
        release: bool,
        durable: bool = True,
        reading: bool = False,
        clear: int = 2,
        tag: bool = True,
        notices: tuple[str, ...] | int = (),
        queue: bool = False,
    ) -> str:
        """The SQL of an append: data-modifying CTEs, each done only if the head moved.

        One statement is one transaction and one round trip, with no BEGIN or COMMIT:
        if the head did not move, the main query calls ``handrail_conflict()``, which
        raises, and the statement saves nothing. Old pending rows are deleted before
        the new ones are inserted (a CTE that reads another waits for it to finish).
        ``events`` and ``pending`` are how many rows are listed in VALUES (0: none), or
        ``_IN_ARRAYS``: any number, in array parameters.
        """
        p = self.prefix
        # the row's seal: the digest of its other columns, then its metadata as jsonb gives it back
        seal = "sha256(%(digest)b || convert_to(%(metadata)s::jsonb::text, 'UTF8'))"
        row = (
            "head_seq = %(head)s, status = %(status)s, created_at = %(created)s, updated_at = %(updated)s, "
            "metadata = %(metadata)s::jsonb, pending_count = %(count)s, head_hash = %(head_hash)b, "
            f"seal = {seal}"
        )
        returned = "metadata" if pending and tag else "1"  # tagged reads it; others look for a row
        if new:  # a new thread, or one still at event 0
            moved = (
                f"INSERT INTO {self.threads} AS t (thread_id, epoch, head_seq, status, created_at, "
                "updated_at, metadata, pending_count, head_hash, seal) VALUES (%(thread)s, %(epoch)s, "
                "%(head)s, %(status)s, %(created)s, %(updated)s, %(metadata)s::jsonb, %(count)s, "
                f"%(head_hash)b, {seal}) ON CONFLICT (thread_id) DO UPDATE SET epoch = excluded.epoch, {row} "
                f"WHERE t.head_seq = 0 RETURNING {returned}"
            )
        else:
            # without events, the head hash the seals were made for must still be the row's
            same_hash = " AND head_hash IS NOT DISTINCT FROM %(head_hash)b" if not events else ""
            moved = (
                f"UPDATE {self.threads} SET {row} WHERE thread_id = %(thread)s AND head_seq = %(expected)s "
                f"AND epoch = %(epoch)s{same_hash} RETURNING {returned}"
            )
        go = "EXISTS (SELECT FROM moved)"
        # A review's tool and metadata rows come and go with its pending row, so a thread
        # that had no pending row has none of those either: most appends (no review was
        # pending) skip two index scans, which would find only the dead entries of past
        # reviews (until a vacuum).
        had = "EXISTS (SELECT FROM cleared)"
        ctes = [f"moved AS ({moved})"]
        deletes: dict[str, str] = {}
        if clear:
            deletes["cleared"] = (
                f"DELETE FROM {self.pending} WHERE thread_id = %(thread)s AND {go} RETURNING 1"
            )
            deletes["cleared_tools"] = (
                f"DELETE FROM {self.pending_tools} WHERE thread_id = %(thread)s AND {had} RETURNING 1"
            )
        if clear == 2:
            deletes["cleared_metadata"] = (
                f"DELETE FROM {self.pending_metadata} WHERE thread_id = %(thread)s AND {had} RETURNING 1"
            )
        ctes += [f"{name} AS ({sql})" for name, sql in deletes.items()]

        # a CTE that reads another waits for it to finish: the new rows go in after the deletes
        def after(cte: str) -> str:
            return f"(SELECT count(*) FROM {cte}) >= 0 AND " if cte in deletes else ""

        if events:
            if events == _IN_ARRAYS:
                source = (
                    "unnest(%(seqs)s::bigint[], %(kinds)s::text[], %(times)s::double precision[], "
                    "%(payloads)b::bytea[])"
                )
            else:
                source = _values(
                    [
                        (f"%({seq})s", f"%({kind})s", f"%({at})s", f"%({payload})b")
                        for seq, kind, at, payload in _EVENT_KEYS[:events]
                    ],
                    ("bigint", "text", "double precision", "bytea"),
                )
            ctes.append(
                f"logged AS (INSERT INTO {self.events} (thread_id, seq, kind, created_at, payload) "
                f"SELECT %(thread)s, e.* FROM {source} AS e WHERE {go})"
            )
        if pending:
            if pending == _IN_ARRAYS:
                reviews = (
                    "unnest(%(ids)s::text[], %(review_kinds)s::text[], %(tools)s::jsonb[], "
                    "%(review_times)s::double precision[], %(review_payloads)b::bytea[], "
                    "%(review_seals)b::bytea[]) WITH ORDINALITY"
                )
                keys = "unnest(%(ids)s::text[], %(review_keys)b::bytea[])"
            else:
                listed = _REVIEW_KEYS[:pending]
                reviews = _values(  # and each one's position, counted from 1 as ORDINALITY does
                    [
                        (
                            f"%({interrupt})s",
                            f"%({kind})s",
                            f"%({tools})s",
                            f"%({at})s",
                            f"%({payload})b",
                            f"%({sealed})b",
                            str(n),
                        )
                        for n, (interrupt, kind, tools, at, payload, _, sealed) in enumerate(listed, start=1)
                    ],
                    ("text", "text", "jsonb", "double precision", "bytea", "bytea", "bigint"),
                )
                keys = _values(
                    [(f"%({fields[0]})s", f"%({fields[5]})b") for fields in listed], ("text", "bytea")
                )
            ctes += [
                f"added AS (INSERT INTO {self.pending} (thread_id, interrupt_id, position, kind, tools, "
                "created_at, payload, seal) SELECT %(thread)s, r.interrupt_id, r.n - 1, r.kind, "
                "ARRAY(SELECT jsonb_array_elements_text(r.tools)), r.created_at, r.payload, r.seal "
                f"FROM {reviews} AS r (interrupt_id, kind, tools, created_at, payload, seal, n) "
                f"WHERE {after('cleared')}{go} "
                "RETURNING id, interrupt_id, tools, created_at)",
                # each added review with its page key (read twice, so computed once)
                "keyed AS (SELECT a.*, k.page_key FROM added AS a "
                f"JOIN {keys} AS k (interrupt_id, page_key) ON k.interrupt_id = a.interrupt_id)",
                f"tooled AS (INSERT INTO {self.pending_tools} "
                "(tool, created_at, thread_id, interrupt_id, pending_id, page_key) "
                "SELECT DISTINCT t.tool, a.created_at, %(thread)s, a.interrupt_id, a.id, a.page_key "
                "FROM keyed AS a CROSS JOIN unnest(a.tools) AS t (tool) "
                f"WHERE {after('cleared_tools')}TRUE)",
            ]
            if tag:  # the thread has metadata: its indexed entries go with each review
                ctes.append(
                    f"tagged AS (INSERT INTO {self.pending_metadata} "
                    "(key, value, page_key, thread_id, pending_id) "
                    "SELECT e.key, e.value, a.page_key, %(thread)s, a.id "
                    "FROM keyed AS a CROSS JOIN moved AS m "
                    f"CROSS JOIN jsonb_each(m.metadata) AS e WHERE {after('cleared_metadata')}{INDEXED_SQL})"
                )
        if claim:
            keep = "ARRAY[%(claim)s, %(release)s]" if release else "ARRAY[%(claim)s]"
            ctes.append(
                f"dead AS (DELETE FROM {self.runs} AS r WHERE r.thread_id = %(thread)s "
                f"AND r.run_id <> ALL ({keep}::text[]) AND NOT {self._alive('r.owner_key')} AND {go})"
            )
        if claim == 1:
            ctes.append(
                f"claimed AS (INSERT INTO {self.runs} (thread_id, run_id, owner_key, claimed_at) "
                f"SELECT %(thread)s, %(claim)s, %(owner)s, %(now)s WHERE {go} AND {self._lock_held} "
                "ON CONFLICT (thread_id, run_id) DO UPDATE SET owner_key = excluded.owner_key)"
            )
        if release:
            ctes.append(
                f"released AS (DELETE FROM {self.runs} WHERE thread_id = %(thread)s "
                f"AND run_id = %(release)s AND {go})"
            )
        if reading:
            ctes.append(
                f"kept AS (INSERT INTO {self.readings} (thread_id, seq, created_at, payload) "
                f"SELECT %(thread)s, %(reading_seq)s, %(reading_at)s, %(reading)b WHERE {go} "
                "ON CONFLICT (thread_id) DO UPDATE SET seq = excluded.seq, created_at = excluded.created_at, "
                "payload = excluded.payload)"
            )
        if notices:
            if notices == _IN_ARRAYS:
                told = "unnest(%(notice_kinds)s::text[], %(notice_data)b::bytea[])"
            else:
                assert isinstance(notices, tuple)
                kinds = [_literal(kind) for kind in notices]
                told = _values(
                    [(kind, f"%({key})b") for kind, key in zip(kinds, _NOTICE_KEYS, strict=False)],
                    ("text", "bytea"),
                )
            ctes.append(
                f"noticed AS (INSERT INTO {self.feed} (thread_id, seq, kind, created_at, data) "
                f"SELECT %(thread)s, %(head)s, n.kind, %(noticed_at)s, n.data FROM {told} AS n (kind, data) "
                f"WHERE {go})"
            )
        if queue:
            ctes.append(
                f"queued AS (INSERT INTO {self.runs} (thread_id, run_id, owner_key, claimed_at) "
                f"SELECT %(thread)s, '{QUEUED_RUN}', NULL, %(noticed_at)s WHERE {go} "
                "ON CONFLICT (thread_id, run_id) DO NOTHING)"
            )
        conflict = f"{p}conflict(%(thread)s, %(expected)s, %(epoch)s)"
        if durable:
            return "WITH " + ", ".join(ctes) + f" SELECT {conflict} WHERE NOT {go}"
        # evaluated in every case: the setting lasts until this statement's commit
        relax = "set_config('synchronous_commit', 'off', true) IS NOT NULL"
        return "WITH " + ", ".join(ctes) + f" SELECT CASE WHEN {go} THEN {relax} ELSE {conflict} END"

    def conflict_error(self, detail: str | None, thread_id: str, expected_seq: int) -> ConflictError:
        """The ConflictError for what ``handrail_conflict()`` found (its DETAIL)."""
        try:
            head, epoch, _, wanted = orjson.loads(detail or "")
        except (ValueError, TypeError):
            return conflict(thread_id, expected_seq, None)
        if head is None:
            head = 0
        if head != expected_seq:
            return conflict(thread_id, expected_seq, head)
        if expected_seq > 0 and epoch != wanted:
            return epoch_conflict(thread_id)
        return conflict(thread_id, expected_seq, None)  # it moved and came back meanwhile


def _literal(kind: str) -> str:
    """A notice's kind as an SQL literal: only the known kinds (they hold no quote)."""
    if kind not in NOTICE_KINDS:
        raise ValueError(f"unknown notice kind {kind!r}; known: {sorted(NOTICE_KINDS)}")
    return f"'{kind}'"


def _values(rows: Sequence[Sequence[str]], types: Sequence[str]) -> str:
    """A VALUES list of SQL expressions (parameters), the first row's cast to ``types``.

    The other rows need no casts: a VALUES list gives a column the first row's type.
    """
    first, *rest = rows
    listed = [", ".join(f"{field}::{kind}" for field, kind in zip(first, types, strict=True))]
    listed += [", ".join(row) for row in rest]
    return "(VALUES (" + "), (".join(listed) + "))"


def append_flow(
    queries: WriteSQL,
    cleared: Cleared,
    thread_id: str,
    events: Sequence[StoredEvent],
    expected_seq: int,
    record: ThreadRecord,
    *,
    claim: str | None,
    release: str | None,
    durable: bool,
    reading: StoredEvent | None,
    notices: Sequence[Notice] = (),
    queue: bool = False,
    grants: Sequence[tuple[Any, ...]] = (),
) -> Flow[None]:
    """An append as both savers perform it: one statement, under the liveness lock if it
    claims a run; its error in the caller's terms; what the saver remembers of it."""

    def statement(key: int | None) -> Op[None]:
        return queries.append(
            thread_id,
            events,
            expected_seq,
            record,
            claim=(claim, key) if claim is not None and key is not None else None,
            release=release,
            durable=durable,
            reading=reading,
            clear=cleared.rows_at(thread_id, expected_seq, record.epoch),
            notices=notices,
            queue=queue,
            grants=grants,
        )

    try:
        yield from under_lock(statement, claims=claim is not None)
    except psycopg.Error as exc:
        cleared.forget(thread_id)
        raise append_error(queries, exc, thread_id, expected_seq) from None
    except BaseException:
        cleared.forget(thread_id)
        raise
    cleared.appended(thread_id, record)


def append_error(queries: WriteSQL, exc: psycopg.Error, thread_id: str, expected_seq: int) -> Exception:
    """What a failed append means for the caller."""
    if exc.sqlstate == CONFLICT_STATE:  # handrail_conflict(): a stale head or epoch
        return queries.conflict_error(exc.diag.message_detail, thread_id, expected_seq)
    taken = grant_error(exc)  # a new grant's id was taken
    if taken is not None:
        return taken
    if isinstance(exc, psycopg.errors.UniqueViolation):  # another writer's events
        return conflict(thread_id, expected_seq, None)
    if isinstance(exc, psycopg.DataError):
        return _unstorable(thread_id, exc)
    return exc


def _unstorable(thread_id: str, exc: psycopg.DataError) -> SerializationError:
    # e.g. a NUL character, which PostgreSQL text and jsonb cannot hold
    reason = str(exc).splitlines()[0]
    return SerializationError(
        f"cannot store thread {thread_id!r} in PostgreSQL: {reason}", thread_id=thread_id
    )
