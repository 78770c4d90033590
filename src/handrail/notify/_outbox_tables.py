"""The outbox's two tables: their schema, the statements run on them, their rows read back.

``handrail_server_endpoints`` holds one row per endpoint (its kind, target, events,
signing secrets, options, where it came from, and its cursor into the store's feed);
``handrail_server_deliveries`` one row per delivery (what it carries, its status, its
attempts, when it is due, who holds its lease, how it went). The rules they serve are
``handrail.notify.outbox``'s. The SQL is written once for SQLite and PostgreSQL (``?``
placeholders; ``ServerDB`` adapts them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from handrail.notify.channels import Delivery, Endpoint

__all__ = [
    "ADVANCE",
    "CLAIM",
    "DELIVERY_COLUMNS",
    "ENDPOINT_COLUMNS",
    "FINISH",
    "INSERT",
    "READ_COLUMNS",
    "SCHEMA",
    "delivery_of",
    "endpoint_of",
    "to_json",
]

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS handrail_server_endpoints (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        target TEXT NOT NULL,
        events TEXT NOT NULL,
        secrets TEXT NOT NULL,
        options TEXT NOT NULL,
        source TEXT NOT NULL,
        feed_cursor BIGINT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        removed_at DOUBLE PRECISION
    )""",
    """CREATE TABLE IF NOT EXISTS handrail_server_deliveries (
        id TEXT PRIMARY KEY,
        endpoint_id TEXT NOT NULL,
        event TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        interrupt_id TEXT,
        body TEXT NOT NULL,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        window_from DOUBLE PRECISION NOT NULL,
        due_at DOUBLE PRECISION NOT NULL,
        claimed_by TEXT,
        last_error TEXT,
        response_code INTEGER,
        delivered_at DOUBLE PRECISION,
        receipt TEXT
    )""",
    """CREATE INDEX IF NOT EXISTS handrail_server_deliveries_due
        ON handrail_server_deliveries (status, due_at)""",
    """CREATE INDEX IF NOT EXISTS handrail_server_deliveries_by_endpoint
        ON handrail_server_deliveries (endpoint_id, created_at)""",
    """CREATE INDEX IF NOT EXISTS handrail_server_deliveries_by_review
        ON handrail_server_deliveries (endpoint_id, interrupt_id)""",
)
"""The tables and their indexes, made if missing (``Outbox(db)`` runs them)."""
ENDPOINT_COLUMNS = "id, kind, target, events, secrets, options, source, created_at"
"""The columns of an endpoint's row, in the order :func:`endpoint_of` reads them."""
DELIVERY_COLUMNS = (
    "id, endpoint_id, event, thread_id, interrupt_id, body, status, attempts, created_at, due_at, "
    "last_error, response_code, delivered_at, receipt"
)
"""The columns of a delivery's row that :data:`INSERT` writes (``window_from`` apart)."""
READ_COLUMNS = DELIVERY_COLUMNS + ", window_from"
"""The columns of a delivery's row, in the order :func:`delivery_of` reads them."""
INSERT = (
    f"INSERT INTO handrail_server_deliveries ({DELIVERY_COLUMNS}, window_from) "
    "VALUES (?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, NULL, NULL, NULL, NULL, ?) ON CONFLICT (id) DO NOTHING"
)
"""A new pending delivery; one whose id is there already is ignored (the same notice turned twice)."""
CLAIM = (
    "UPDATE handrail_server_deliveries SET claimed_by = ?, due_at = ?, attempts = attempts + 1 "
    "WHERE id IN (SELECT d.id FROM handrail_server_deliveries AS d "
    "JOIN handrail_server_endpoints AS e ON e.id = d.endpoint_id AND e.removed_at IS NULL "
    "WHERE d.status = 'pending' AND d.due_at <= ?{picked} "
    "ORDER BY d.due_at, d.created_at LIMIT ?{lock}) RETURNING " + READ_COLUMNS
)
"""Claim due deliveries of endpoints in use, counting the attempt (``{picked}``: one delivery
only; ``{lock}``: PostgreSQL's ``FOR UPDATE ... SKIP LOCKED``)."""
ADVANCE = "UPDATE handrail_server_endpoints SET feed_cursor = ? WHERE id = ? AND feed_cursor < ?"
"""Move an endpoint's cursor into the feed on, never back."""
FINISH = (
    "UPDATE handrail_server_deliveries SET status = ?, due_at = ?, claimed_by = NULL, last_error = ?, "
    "response_code = ?, delivered_at = ?, receipt = COALESCE(?, receipt) "
    "WHERE id = ? AND claimed_by = ? AND status = 'pending'"
)
"""Record how an attempt went; an attempt whose lease another deliverer took over changes nothing."""


def to_json(value: Any) -> str:
    """``value`` as the JSON text a column holds."""
    return orjson.dumps(value).decode()


def endpoint_of(row: Sequence[Any]) -> Endpoint:
    """The endpoint of a row of :data:`ENDPOINT_COLUMNS`."""
    key, kind, target, events, kept, options, source, created_at = row
    return Endpoint(
        str(key),
        str(kind),
        str(target),
        tuple(orjson.loads(events)),
        tuple((str(s), None if r is None else float(r)) for s, r in orjson.loads(kept)),
        orjson.loads(options),
        str(source),
        float(created_at),
    )


def delivery_of(row: Sequence[Any]) -> Delivery:
    """The delivery of a row of :data:`READ_COLUMNS`."""
    key, endpoint_id, event, thread_id, interrupt_id, body, status, attempts = row[:8]
    created_at, due_at, error, code, delivered_at, receipt, window_from = row[8:]
    return Delivery(
        str(key),
        str(endpoint_id),
        str(event),
        str(thread_id),
        None if interrupt_id is None else str(interrupt_id),
        str(body).encode(),
        str(status),
        int(attempts),
        float(created_at),
        float(due_at),
        error,
        None if code is None else int(code),
        None if delivered_at is None else float(delivered_at),
        orjson.loads(receipt) if receipt else None,
        float(window_from),
    )
