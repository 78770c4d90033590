"""Postgres reads and the reviewers' inbox.

A read returns the record and the events from one statement, so from one snapshot.
The inbox walks one index in page order and stops after a page: ``pending`` without a
tool or metadata filter; otherwise ``pending_tools`` and one ``pending_metadata`` alias
per filtered entry, joined on the page key, so that the planner walks the most
selective and merges the others. ``pending_metadata`` holds the entries whose value is
a number, a boolean, null or a string of at most 200 bytes (keys too); a filter on
another value (a list, an object, a long string) is compared on the thread's row.
Metadata filters compare JSON values (``true`` is not ``1``, as it is in Python). An
owners filter (the agents a process hosts) is compared on the thread's row, except one
that names a single agent: that one is a metadata entry like any other.
"""

from __future__ import annotations

import base64
import itertools
import math
import struct
import time
from collections.abc import Mapping
from typing import Any

import orjson

from handrail.checkpoint._derived import (
    pending_from_row,
    thread_from_row,
    thread_metadata,
    with_pending,
    without_thread,
)
from handrail.checkpoint._records import damaged, event_from_row
from handrail.checkpoint.base import (
    ClaimFilter,
    PendingFilter,
    PendingItem,
    PendingReview,
    ThreadFilter,
    ThreadRead,
    ThreadRecord,
)
from handrail.checkpoint.postgres._base import INDEXED_BYTES, Op, Query, Row, Tables
from handrail.checkpoint.serde import dumps

__all__ = ["ReadSQL", "page_key", "read_rows", "read_sql"]


class ReadSQL(Tables):
    """Reading threads, listing threads, and the inbox."""

    def read(
        self, thread_id: str, after_seq: int, upto_seq: int | None, from_reading: bool = False
    ) -> Op[ThreadRead]:
        # one statement, so one snapshot: the record, the saved reading and the events of one instant
        sql = read_sql(self, "%(thread)s", after_seq, upto_seq, from_reading)
        (result,) = yield [Query(sql, {"thread": thread_id, "after": after_seq, "upto": upto_seq})]
        return read_rows(thread_id, result.rows)

    def get_thread(self, thread_id: str) -> Op[ThreadRecord | None]:
        (result,) = yield [Query(self.record_select + " WHERE t.thread_id = %s", (thread_id,))]
        if result.rows:
            return _record(result.rows[0])
        # no row: a thread that does not exist has no log either (else the row was damaged)
        (logged,) = yield [Query(f"SELECT 1 FROM {self.events} WHERE thread_id = %s LIMIT 1", (thread_id,))]
        if logged.rows:
            raise damaged(thread_id, "thread record", "it is missing, yet the thread has records")
        return None

    def list_threads(self, filter: ThreadFilter) -> Op[list[ThreadRecord]]:
        where: list[str] = []
        params: list[Any] = []
        if filter.status is not None:
            where.append("t.status = %s")
            params.append(filter.status)
        if filter.updated_after is not None:
            where.append("t.updated_at > %s")
            params.append(filter.updated_after)
        if filter.updated_before is not None:
            where.append("t.updated_at < %s")
            params.append(filter.updated_before)
        if filter.metadata:
            where += _metadata_clauses(filter.metadata, params)
        if filter.owners is not None:
            exact = _exact_owner(filter.owners, filter.metadata)
            if exact is not None:  # one name: containment, which the GIN index answers
                where += _metadata_clauses(dict([exact]), params)
            else:
                where.append(_owners_clause(filter.owners, params))
        sql = self.record_select + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY t.updated_at DESC, t.thread_id LIMIT %s OFFSET %s"
        params += [max(filter.limit, 0), max(filter.offset, 0)]
        (result,) = yield [Query(sql, params)]
        return [_record(row) for row in result.rows]

    def pending_query(self, filter: PendingFilter, now: float) -> Query:
        """The inbox query: an index range in ``(created_at, thread_id, interrupt_id)`` order.

        Without a tool or metadata filter it walks ``pending`` in that order. Otherwise
        each filter that an index answers joins in on the *page key* (the same order as
        one column): ``pending_tools`` for the tool, one ``pending_metadata`` alias per
        indexed metadata entry; the planner walks the most selective one in page order
        and merges or looks up the others, and stops after a page. Metadata entries no
        index holds (lists, objects, long strings) are compared on the thread's row.
        Newest first walks the same indexes backwards (the key comparison and the ORDER BY
        flip together).
        """
        newest = filter.order == "newest"
        past, direction = ("<", " DESC") if newest else (">", "")
        where: list[str] = []
        params: list[Any] = []  # the WHERE clause's
        join_params: list[Any] = []  # the FROM clause's, which come first
        indexes: list[tuple[str, str, str, list[Any]]] = []  # alias, table, condition, its params
        if filter.tool is not None:
            indexes.append(("o", self.pending_tools, "o.tool = %s", [filter.tool]))
        indexed, owners = _walked_entries(filter)
        for key, value in indexed:
            m = f"m{len(indexes)}"
            condition = f"{m}.key = %s AND {m}.value = %s::jsonb"
            indexes.append((m, self.pending_metadata, condition, [key, value]))
        if indexes:
            first, table, condition, values = indexes[0]
            parts = [f"{table} AS {first}"]
            where.append(condition)
            params += values
            for alias, table, condition, values in indexes[1:]:
                parts.append(
                    f"JOIN {table} AS {alias} ON {alias}.page_key = {first}.page_key AND {condition}"
                )
                join_params += values
            # joined to pending on one column: the planner misjudges a two-column join as one row
            source = " ".join(parts) + f" JOIN {self.pending} AS p ON p.id = {first}.pending_id"
            order = f"{first}.page_key{direction}"
            led = f", {first}.page_key"  # the index row that led to each review: checked against it
            for alias, *_ in indexes:  # the bounds on every index, for whichever the planner walks
                if filter.thread_id is not None:
                    where.append(f"{alias}.thread_id = %s")
                    params.append(filter.thread_id)
                if filter.older_than is not None:  # created_at <= x: below the next float's keys
                    where.append(f"{alias}.page_key < %s")
                    params.append(page_key(math.nextafter(now - filter.older_than, math.inf), "", "")[:8])
                if filter.after is not None:
                    where.append(f"{alias}.page_key {past} %s")
                    params.append(page_key(*filter.after))
        else:
            source = f"{self.pending} AS p"
            order = f"p.created_at{direction}, p.thread_id{direction}, p.interrupt_id{direction}"
            led = ""
            if filter.thread_id is not None:
                where.append("p.thread_id = %s")
                params.append(filter.thread_id)
            if filter.older_than is not None:
                where.append("p.created_at <= %s")
                params.append(now - filter.older_than)
            if filter.after is not None:
                where.append(f"(p.created_at, p.thread_id, p.interrupt_id) {past} (%s, %s, %s)")
                params += list(filter.after)
        if filter.kind is not None:
            where.append("p.kind = %s")
            params.append(filter.kind)
        unindexed = {k: v for k, v in (filter.metadata or {}).items() if str(k) not in dict(indexed)}
        if unindexed:
            where += _metadata_clauses(unindexed, params)
        if owners is not None:  # on the thread's row: the walk in page order stays as it is
            where.append(_owners_clause(owners, params))
        sql = (
            f"SELECT {_INBOX_COLUMNS}{led} FROM {source} "
            # a review whose thread has no row (damage) comes too, to be refused
            f"LEFT JOIN {self.threads} AS t ON t.thread_id = p.thread_id"
            + (" WHERE " + " AND ".join(where) if where else "")
            + f" ORDER BY {order} LIMIT %s"
        )
        params.append(max(filter.limit, 0))
        return Query(sql, join_params + params)

    def list_pending(self, filter: PendingFilter) -> Op[list[PendingItem]]:
        """The inbox's page; each review on it checked (its seal, chained to its thread's
        row, which is checked too), and the index rows that led to it, if any did
        (``seals.py``, rule 4: the same page key, the tool and metadata entries its own)."""
        (result,) = yield [self.pending_query(filter, time.time())]
        entries, _ = _walked_entries(filter)
        threads: dict[str, tuple[dict[str, Any], bytes | None]] = {}
        items = []
        for row in result.rows:
            pending, thread = row[:8], row[8:18]
            thread_id = thread[0]
            if thread_id is None:
                raise without_thread(pending[0], pending[1])
            known = threads.get(thread_id)
            if known is None:
                known = threads[thread_id] = thread_metadata(thread)
            metadata, head_hash = known
            review = pending_from_row(
                thread_id, *pending[1:6], head_hash=head_hash, position=pending[6], seal=pending[7]
            )
            if len(row) > 18 and not _led_by(row[18], review, thread_id, metadata, filter.tool, entries):
                raise damaged(
                    thread_id,
                    f"pending review {review.interrupt_id!r}",
                    "the index row (tool or metadata) that led to it is not its own (damaged)",
                )
            items.append(PendingItem(thread_id=thread_id, review=review, metadata=metadata))
        return items


def read_sql(tables: Tables, thread: str, after_seq: int, upto_seq: int | None, from_reading: bool) -> str:
    """The statement of a read of the thread whose id is the SQL expression ``thread``
    (a parameter, or the setting a claim left: ``_feed.py``): its rows make a
    :class:`ThreadRead` (:func:`read_rows`). Its parameters: ``after`` and ``upto``."""
    upto = " AND e.seq <= %(upto)s" if upto_seq is not None else ""
    after = "%(after)s"
    saved = ""
    nulls = ", ".join(["NULL"] * _RECORD_WIDTH)  # in place of the record's columns
    if from_reading and not after_seq and upto_seq is None:
        after = f"COALESCE((SELECT r.seq FROM {tables.readings} AS r WHERE r.thread_id = {thread}), 0)"
        saved = (
            f"UNION ALL SELECT 2, {nulls}, r.seq, 'reading', "
            f"r.created_at, r.payload FROM {tables.readings} AS r WHERE r.thread_id = {thread} "
        )
    return (
        f"SELECT 0, {tables.record_columns}, NULL::bigint, NULL::text, NULL::double precision, "
        f"NULL::bytea FROM {tables.threads} AS t WHERE t.thread_id = {thread} {saved}UNION ALL "
        f"(SELECT 1, {nulls}, e.seq, e.kind, e.created_at, "
        f"e.payload FROM {tables.events} AS e WHERE e.thread_id = {thread} AND e.seq > {after}{upto} "
        "ORDER BY e.seq)"
    )


def read_rows(thread_id: str, rows: list[Row]) -> ThreadRead:
    """A read's rows (:func:`read_sql`) as the record, the saved reading and the events."""
    record = reading = None
    events = []
    start = 1 + _RECORD_WIDTH
    for row in rows:
        if row[0] == 0:
            record = _record(row[1:start])
        elif row[0] == 2:
            reading = event_from_row(thread_id, *row[start:])
        else:
            events.append(event_from_row(thread_id, *row[start:]))
    if any(a.seq >= b.seq for a, b in itertools.pairwise(events)):
        events.sort(key=lambda event: event.seq)  # the rows came in another order
    return ThreadRead(record=record, events=events, reading=reading)


_INBOX_COLUMNS = (
    "p.thread_id, p.interrupt_id, p.kind, p.tools, p.created_at, p.payload, p.position, p.seal, "
    "t.thread_id, t.head_seq, t.status, t.epoch, t.created_at, t.updated_at, t.metadata::text, "
    "t.pending_count, t.head_hash, t.seal"
)  # a review of the inbox and its thread's row (checked: the metadata shown is the thread's)


def _led_by(
    key: Any,
    review: PendingReview,
    thread_id: str,
    metadata: Mapping[str, Any],
    tool: str | None,
    entries: list[tuple[str, str]],
) -> bool:
    """Whether the index rows that led the inbox to ``review`` (joined on the page key
    ``key``) are its own: the review's page key, a tool it is about, and metadata entries
    its thread has (``seals.py``, rule 4)."""
    if key != page_key(review.created_at, thread_id, review.interrupt_id):
        return False
    if tool is not None and tool not in review.tools:
        return False
    missing = object()
    return all(_same_scalar(metadata.get(k, missing), orjson.loads(v)) for k, v in entries)


def _same_scalar(found: Any, wanted: Any) -> bool:
    """JSON equality of two scalars as ``jsonb`` has it: ``true`` is not ``1``, ``1`` is ``1.0``."""
    if isinstance(found, bool) or isinstance(wanted, bool):
        return type(found) is type(wanted) and found == wanted
    if found is None or wanted is None:
        return found is None and wanted is None
    if isinstance(found, (int, float)) and isinstance(wanted, (int, float)):
        return found == wanted
    return isinstance(found, str) and isinstance(wanted, str) and found == wanted


def page_key(created_at: float, thread_id: str, interrupt_id: str) -> bytes:
    """The page key of a pending review, as ``handrail_page_key()`` computes it in SQL.

    Byte order is the inbox's ``(created_at, thread_id, interrupt_id)`` order: the
    float's bits (``-0.0`` made ``0.0``) turned order-preserving (the sign bit flipped
    for a positive number, every bit for a negative one), then the ids in UTF-8 (whose
    byte order is code point order), split by a NUL, which text cannot hold.
    """
    (bits,) = _INT64.unpack(_FLOAT64.pack(created_at + 0.0))
    return _INT64.pack(bits ^ -(2**63) if bits >= 0 else ~bits) + (
        thread_id.encode() + b"\x00" + interrupt_id.encode()
    )


_FLOAT64 = struct.Struct(">d")
_INT64 = struct.Struct(">q")


def _walked_entries(filter: PendingFilter) -> tuple[list[tuple[str, str]], ClaimFilter | None]:
    """The metadata entries whose index the inbox walks, as (key, JSON): the filter's that
    ``pending_metadata`` indexes, and an owners filter that names one agent; then the
    owners filter left to compare on the thread's row (None: none, or walked)."""
    indexed = _indexed_entries(filter.metadata)
    owners = filter.owners
    exact = None if owners is None else _exact_owner(owners, filter.metadata)
    if exact is not None and _indexed(*exact):  # one name: walked like a metadata entry
        indexed.append((exact[0], dumps(exact[1], where="the owners filter").decode()))
        owners = None
    return indexed, owners


def _indexed_entries(metadata: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The entries of a metadata filter that ``pending_metadata`` indexes, as (key, JSON)."""
    entries = []
    for key, value in (metadata or {}).items():
        text = dumps(value, where="the metadata filter").decode()
        if _indexed(str(key), orjson.loads(text)):
            entries.append((str(key), text))
    return entries


def _indexed(key: str, value: Any) -> bool:
    """The rule of ``_INDEXED_SQL``, in Python (on the JSON value)."""
    try:
        if len(key.encode()) > INDEXED_BYTES:
            return False
        if value is None or isinstance(value, (bool, int, float)):
            return True
        return isinstance(value, str) and len(value.encode()) <= INDEXED_BYTES
    except UnicodeEncodeError:  # a lone surrogate: never stored, so never indexed
        return False


def _exact_owner(owners: ClaimFilter, metadata: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """The one (key, name) an owners filter stands for, when it is a plain equality.

    Only for a single name, not ``or_missing``, on a key the metadata filter does not
    name as well: then the filter is the metadata entry ``{key: name}`` (a JSON string
    equals only a string), and the indexes of metadata filters answer it.
    """
    if owners.or_missing or len(owners.values) != 1 or owners.key in (metadata or {}):
        return None
    return owners.key, owners.values[0]


def _owners_clause(owners: ClaimFilter, params: list[Any]) -> str:
    """``ClaimFilter.matches`` on the thread's row, in one expression.

    ``t.metadata -> key`` is the JSON value (SQL NULL when the key is missing), and jsonb
    equality is exact: a name (a JSON string) equals only that string. ``array_position``
    compares with ``IS NOT DISTINCT FROM``, so a NULL in the array stands for "missing".
    The planner cannot see into the call and takes most rows to pass, so the inbox keeps
    walking its index in page order and stops after a page (it filters the threads it
    meets), rather than reading every thread to sort their reviews.
    """
    names: list[str | None] = [orjson.dumps(name).decode() for name in owners.values]
    if owners.or_missing:
        names.append(None)
    params += [names, owners.key]
    return "array_position(%s::jsonb[], t.metadata -> %s) IS NOT NULL"


def _metadata_clauses(metadata: Any, params: list[Any]) -> list[str]:
    # ``@>`` lets the GIN index narrow the rows; the per-key equality makes the match
    # exact (containment alone would also accept a longer list or a larger object).
    clauses = ["t.metadata @> %s::jsonb"]
    params.append(dumps(dict(metadata), where="the metadata filter").decode())
    for key, value in metadata.items():
        clauses.append("t.metadata -> %s = %s::jsonb")
        params += [str(key), dumps(value, where="the metadata filter").decode()]
    return clauses


_RECORD_WIDTH = 11  # the columns of ``Tables.record_columns``


def _record(row: Row) -> ThreadRecord:
    """A thread's record from the columns of ``Tables.record_columns``, each checked."""
    reviews, count = row[7], row[8]
    record = thread_from_row((*row[:7], *row[8:]))
    rows: list[tuple[Any, ...]] = []
    if reviews is not None:
        thread_id = record.thread_id
        try:
            for interrupt_id, kind, tools, created_at, payload, position, sealed in orjson.loads(reviews):
                found = base64.b64decode(sealed) if sealed is not None else None
                rows.append(
                    (interrupt_id, kind, tools, created_at, base64.b64decode(payload), position, found)
                )
        except (ValueError, TypeError) as exc:
            raise damaged(thread_id, "thread record", f"its pending reviews cannot be read ({exc})") from None
    return with_pending(record, count, rows)
