"""The outbox: the store's feed plus a delivery state per endpoint (SPEC rule 17).

The rules this module keeps:

- **Nothing is lost.** The feed's notices are written in the same transaction as the
  events that cause them (the store does that). Each endpoint keeps a cursor into the
  feed: the notices after it are still to be turned into deliveries. Turning them
  (:meth:`Outbox.expand`) inserts the deliveries and moves the cursor in one
  transaction; two deliverers that turn the same notices at once insert the same rows,
  and the second insert of a delivery is ignored (its id is a digest of endpoint,
  notice and event, and ids are unique). So every event becomes one delivery per
  endpoint that takes it.
  The service does not trim notices an endpoint has not turned yet.
- **One attempt at a time.** A deliverer claims due deliveries in one statement
  (``FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite's one writer), for a lease of
  :data:`LEASE` seconds, and counts the attempt as it claims. Many deliverers may run:
  a delivery is attempted by one of them at a time, and by another only once the lease
  of one that died ran out (at least once; the same ``webhook-id``).
- **Bounded retries.** A failed attempt is tried again after an exponential backoff with
  jitter (:func:`backoff`), until ``retry_for`` seconds after the delivery was made (or
  last retried by hand); then it is ``failed``. :meth:`Outbox.retry` sends a failed one
  again, with the same id.
- A removed endpoint receives nothing more; its deliveries stay in the log, which keeps
  what was delivered or failed for a week (``Deliverer(retention=...)``), then drops it.
- **The deliverer's writes need not wait for the disk** (``ServerDB.open(relaxed=True)``):
  each can be made again. A crash of the machine that loses a turn of the feed loses the
  cursor's move with it (the notices are turned again); one that loses a claim or an
  attempt's result sends that delivery again (at least once). Endpoints are added and
  removed through a connection that waits.

Tables (the service's own, beside its tokens: ``handrail.server.db``):
``handrail_server_endpoints`` and ``handrail_server_deliveries``, their schema and
statements in ``handrail.notify._outbox_tables``.
"""

from __future__ import annotations

import hashlib
import random
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from handrail.notify._outbox_tables import (
    ADVANCE,
    CLAIM,
    DELIVERY_COLUMNS,
    ENDPOINT_COLUMNS,
    FINISH,
    INSERT,
    READ_COLUMNS,
    SCHEMA,
    delivery_of,
    endpoint_of,
    to_json,
)
from handrail.notify.channels import CHANNEL_KINDS, Delivery, Endpoint, Sent
from handrail.notify.events import Event
from handrail.server.db import ServerDB

__all__ = ["LEASE", "RETRY_FOR", "NotFailedError", "Outbox", "Turn", "backoff"]

LEASE = 60.0
"""Seconds a deliverer holds a claimed delivery before another may attempt it."""

RETRY_FOR = 24 * 3600.0
"""Seconds a delivery is retried before it is marked failed (the default)."""

_ERROR_CHARS = 500  # the longest last_error kept


class NotFailedError(ValueError):
    """A delivery sent again by hand that is not failed (pending or delivered already)."""


def backoff(
    attempts: int, *, base: float = 2.0, cap: float = 3600.0, rng: random.Random | None = None
) -> float:
    """Seconds to wait after the ``attempts``-th failed attempt: ``base`` doubled each time,
    at most ``cap``, with half of it random (so many failed deliveries do not all come back
    at once)."""
    delay = min(cap, base * 2.0 ** max(attempts - 1, 0))
    return delay / 2 + (rng or random).uniform(0, delay / 2)


def message_id(endpoint_id: str, cursor: int, event: str) -> str:
    """The id of the delivery of the notice at ``cursor`` as ``event`` to ``endpoint_id``:
    the same each time it is computed, so a second insert is ignored."""
    digest = hashlib.sha256(f"{endpoint_id}\x00{cursor}\x00{event}".encode()).hexdigest()
    return f"msg_{digest[:32]}"


class Outbox:
    """Endpoints and their deliveries, in the service's tables.

    Example::

        outbox = Outbox(ServerDB.open(db_path="handrail.db"))
        endpoint = outbox.add_endpoint("webhook", "https://example.com/hook",
                                       ["review.requested"], start_after=store.feed_end())
        outbox.deliveries(endpoint.id)     # the delivery log, newest first
    """

    def __init__(self, db: ServerDB) -> None:
        self.db = db
        for statement in SCHEMA:
            db.execute(statement)
        self._postgres = db._postgres

    # Endpoints ---------------------------------------------------------------------------
    def add_endpoint(
        self,
        kind: str,
        target: str,
        events: Sequence[str],
        *,
        start_after: str | None,
        secret: str | None = None,
        options: Mapping[str, Any] | None = None,
        id: str | None = None,
        source: str = "api",
    ) -> Endpoint:
        """Add an endpoint that receives ``events`` from the notice after ``start_after``
        (the feed's end now: ``store.feed_end()``) on. A webhook gets a new secret unless
        ``secret`` is given. ``id`` and ``source="file"``: an endpoint of a policy file,
        replaced in place when the file changes (its cursor stays)."""
        if kind not in CHANNEL_KINDS:
            raise ValueError(f"unknown kind of endpoint {kind!r}; the kinds are {', '.join(CHANNEL_KINDS)}")
        now = time.time()
        key = id or f"ep_{secrets.token_hex(8)}"
        if kind == "webhook" and secret is None:
            secret = new_secret()
        kept = [[secret, None]] if secret else []
        row = (key, kind, target, to_json(list(events)), to_json(kept), to_json(dict(options or {})), source)
        cursor = int(start_after) if start_after is not None else 0
        if id is not None:
            changed = self.db.execute(
                "UPDATE handrail_server_endpoints SET kind = ?, target = ?, events = ?, secrets = ?, "
                "options = ?, source = ?, removed_at = NULL WHERE id = ?",
                (*row[1:], key),
            )
            if changed:
                found = self.endpoint(key)
                assert found is not None
                return found
        self.db.execute(
            f"INSERT INTO handrail_server_endpoints ({ENDPOINT_COLUMNS}, feed_cursor) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*row, now, cursor),
        )
        made = self.endpoint(key)
        assert made is not None
        return made

    def endpoints(self, *, kind: str | None = None) -> list[Endpoint]:
        """The endpoints in use (not removed), oldest first."""
        rows = self.db.query(
            f"SELECT {ENDPOINT_COLUMNS} FROM handrail_server_endpoints WHERE removed_at IS NULL "
            "ORDER BY created_at, id"
        )
        found = [endpoint_of(row) for row in rows]
        return [e for e in found if kind is None or e.kind == kind]

    def endpoint(self, endpoint_id: str) -> Endpoint | None:
        """The endpoint ``endpoint_id`` if it is in use."""
        rows = self.db.query(
            f"SELECT {ENDPOINT_COLUMNS} FROM handrail_server_endpoints WHERE id = ? AND removed_at IS NULL",
            (endpoint_id,),
        )
        return endpoint_of(rows[0]) if rows else None

    def remove_endpoint(self, endpoint_id: str) -> bool:
        """Stop sending to ``endpoint_id`` (its delivery log stays); whether it was in use."""
        return bool(
            self.db.execute(
                "UPDATE handrail_server_endpoints SET removed_at = ? WHERE id = ? AND removed_at IS NULL",
                (time.time(), endpoint_id),
            )
        )

    def keep_file_endpoints(self, ids: Iterable[str]) -> list[str]:
        """Remove the policy file's endpoints that are not in ``ids`` (the file changed); which."""
        keep = set(ids)
        gone = [e.id for e in self.endpoints() if e.source == "file" and e.id not in keep]
        for endpoint_id in gone:
            self.remove_endpoint(endpoint_id)
        return gone

    def rotate_secret(self, endpoint_id: str, *, keep_old_for: float, secret: str | None = None) -> Endpoint:
        """Give a webhook endpoint a new secret; the old ones still sign for ``keep_old_for``
        seconds (both signatures are sent meanwhile), so receivers can switch."""
        endpoint = self.endpoint(endpoint_id)
        if endpoint is None:
            raise KeyError(endpoint_id)
        now = time.time()
        retire = now + max(keep_old_for, 0.0)
        # every older secret retires by then at the latest (one that retires sooner keeps its time)
        retiring = [(s, retire if r is None else min(r, retire)) for s, r in endpoint.secrets]
        kept = [[s, r] for s, r in retiring if r > now]
        fresh = secret or new_secret()
        self.db.execute(
            "UPDATE handrail_server_endpoints SET secrets = ? WHERE id = ?",
            (to_json([[fresh, None], *kept]), endpoint_id),
        )
        found = self.endpoint(endpoint_id)
        assert found is not None
        return found

    def cursors(self) -> dict[str, int]:
        """Each endpoint in use's cursor: the feed's notices after it are still to expand."""
        rows = self.db.query("SELECT id, feed_cursor FROM handrail_server_endpoints WHERE removed_at IS NULL")
        return {str(row[0]): int(row[1]) for row in rows}

    # Deliveries --------------------------------------------------------------------------
    def turn(
        self,
        owner: str,
        *,
        attempts: Sequence[tuple[Delivery, Sent]] = (),
        made: Mapping[str, tuple[Sequence[tuple[int, Event]], int]] | None = None,
        claim: int = 0,
        lease: float = LEASE,
        only: str | None = None,
        retry_for: float = RETRY_FOR,
        base: float = 2.0,
    ) -> Turn:
        """A deliverer's round, in one transaction (so one wait for the disk, and on SQLite
        one turn with the write lock): record ``attempts`` (as :meth:`finish`), expand
        ``made`` (as :meth:`expand`), then claim up to ``claim`` due deliveries (as
        :meth:`claim`). A round with nothing to record or expand and nothing due writes
        nothing."""
        now = time.time()
        finishing = [_finished(delivery, sent, owner, now, retry_for, base) for delivery, sent in attempts]
        expanding = _expansions(made or {}, now)
        if claim > 0 and not finishing and not expanding and not self._due(now, only):
            return Turn([], 0, [])
        claimed: list[Delivery] = []
        with self.db.transaction() as tx:
            tx.execute_many(FINISH, [statement for statement, _status in finishing])
            added = tx.execute_many(INSERT, [params for sql, params in expanding if sql is INSERT])
            tx.execute_many(ADVANCE, [params for sql, params in expanding if sql is ADVANCE])
            if claim > 0:
                picked = " AND d.id = ?" if only is not None else ""
                lock = " FOR UPDATE OF d SKIP LOCKED" if self._postgres else ""
                # a claimed delivery is due again when its lease runs out: if its deliverer
                # dies, the next claim after that takes it (the same id: at least once)
                rows = tx.query(
                    CLAIM.format(picked=picked, lock=lock),
                    (owner, now + lease, now, *((only,) if only is not None else ()), int(claim)),
                )
                claimed = sorted((delivery_of(row) for row in rows), key=lambda d: (d.due_at, d.created_at))
        return Turn([status for _, status in finishing], added, claimed)

    def _due(self, now: float, only: str | None) -> bool:
        # a read: a round with nothing due takes no write lock (SQLite has one writer)
        picked, params = (" AND id = ?", (now, only)) if only is not None else ("", (now,))
        return bool(
            self.db.query(
                f"SELECT 1 FROM handrail_server_deliveries WHERE status = 'pending' AND due_at <= ?{picked} "
                "LIMIT 1",
                params,
            )
        )

    def expand(self, made: Mapping[str, tuple[Sequence[tuple[int, Event]], int]]) -> int:
        """For each endpoint id, record a delivery for each of its ``(cursor, event)`` and
        move its cursor to its ``up_to`` (never back): ``{endpoint_id: (made, up_to)}``, all
        in one transaction. Returns how many deliveries were new."""
        return self.turn("", made=made).added

    def claim(
        self, owner: str, *, limit: int = 20, lease: float = LEASE, only: str | None = None
    ) -> list[Delivery]:
        """Claim up to ``limit`` due deliveries of endpoints in use for ``owner``, counting
        the attempt; each is this owner's for ``lease`` seconds. ``only``: that delivery,
        if it is due."""
        return self.turn(owner, claim=max(int(limit), 0), lease=lease, only=only).claimed

    def finish(
        self,
        attempts: Sequence[tuple[Delivery, Sent]],
        owner: str,
        *,
        retry_for: float = RETRY_FOR,
        base: float = 2.0,
    ) -> list[str]:
        """Record how ``owner``'s attempts went, in one transaction; the status each is left
        in: ``delivered``, ``pending`` (due again after :func:`backoff`) or ``failed`` (its
        retry time ran out, or ``Sent.retry`` is False). An attempt whose lease another
        deliverer took over meanwhile changes nothing."""
        return self.turn(owner, attempts=attempts, retry_for=retry_for, base=base).statuses

    def add_test(self, endpoint_id: str, event: Event) -> Delivery:
        """Queue a one-off delivery of ``event`` (``handrail webhooks test``) to ``endpoint_id``."""
        now = time.time()
        key = f"msg_{secrets.token_hex(16)}"
        self.db.execute(
            f"INSERT INTO handrail_server_deliveries ({DELIVERY_COLUMNS}, window_from) "
            "VALUES (?, ?, ?, ?, NULL, ?, 'pending', 0, ?, ?, NULL, NULL, NULL, NULL, ?)",
            (key, endpoint_id, event.type, event.thread_id, event.body.decode(), now, now, now),
        )
        found = self.delivery(key)
        assert found is not None
        return found

    def retry(self, delivery_id: str) -> Delivery:
        """Send a failed delivery again, with the same id: due now, retried for another
        ``retry_for``. ``KeyError`` when there is no such delivery; :class:`NotFailedError`
        when it is not failed."""
        found = self.delivery(delivery_id)
        if found is None:
            raise KeyError(delivery_id)
        if found.status != "failed":
            raise NotFailedError(
                f"delivery {delivery_id} is {found.status}; only a failed delivery is retried by hand"
            )
        now = time.time()
        self.db.execute(
            "UPDATE handrail_server_deliveries SET status = 'pending', due_at = ?, window_from = ? "
            "WHERE id = ? AND status = 'failed'",
            (now, now, delivery_id),
        )
        again = self.delivery(delivery_id)
        assert again is not None
        return again

    def prune(self, before: float) -> int:
        """Drop the log's delivered and failed deliveries made before ``before`` (epoch
        seconds); how many. Pending ones stay, however old."""
        return self.db.execute(
            "DELETE FROM handrail_server_deliveries WHERE status <> 'pending' AND created_at < ?", (before,)
        )

    def delivery(self, delivery_id: str) -> Delivery | None:
        """One delivery by its id."""
        rows = self.db.query(
            f"SELECT {READ_COLUMNS} FROM handrail_server_deliveries WHERE id = ?", (delivery_id,)
        )
        return delivery_of(rows[0]) if rows else None

    def deliveries(
        self, endpoint_id: str | None = None, *, status: str | None = None, limit: int = 50
    ) -> list[Delivery]:
        """The delivery log, newest first: of one endpoint or all, of one status or any."""
        where, params = ["1 = 1"], []
        if endpoint_id is not None:
            where.append("endpoint_id = ?")
            params.append(endpoint_id)
        if status is not None:
            where.append("status = ?")
            params.append(status)
        rows = self.db.query(
            f"SELECT {READ_COLUMNS} FROM handrail_server_deliveries WHERE {' AND '.join(where)} "
            "ORDER BY created_at DESC, id LIMIT ?",
            (*params, max(int(limit), 0)),
        )
        return [delivery_of(row) for row in rows]

    def receipt(self, endpoint_id: str, interrupt_id: str, event: str) -> Mapping[str, Any] | None:
        """The receipt of the delivered ``event`` about ``interrupt_id`` to ``endpoint_id``."""
        rows = self.db.query(
            "SELECT receipt FROM handrail_server_deliveries WHERE endpoint_id = ? AND interrupt_id = ? "
            "AND event = ? AND receipt IS NOT NULL ORDER BY created_at LIMIT 1",
            (endpoint_id, interrupt_id, event),
        )
        if not rows:
            return None
        found = orjson.loads(rows[0][0])
        return found if isinstance(found, dict) else None


@dataclass(frozen=True, slots=True)
class Turn:
    """What :meth:`Outbox.turn` did: each attempt's status, deliveries new, those claimed."""

    statuses: list[str]
    added: int
    claimed: list[Delivery]


def _finished(
    delivery: Delivery, sent: Sent, owner: str, now: float, retry_for: float, base: float
) -> tuple[tuple[Any, ...], str]:
    """The ``FINISH`` parameters of one attempt, and the status it leaves the delivery in."""
    error = (sent.error or "")[:_ERROR_CHARS] or None
    receipt = to_json(dict(sent.receipt)) if sent.receipt is not None else None
    if sent.ok:
        status, due = "delivered", now
    else:
        due = now + backoff(delivery.attempts, base=base)
        status = "pending" if sent.retry and due <= delivery.window_from + retry_for else "failed"
    delivered = now if sent.ok else None
    return (status, due, error, sent.code, delivered, receipt, delivery.id, owner), status


def _expansions(
    made: Mapping[str, tuple[Sequence[tuple[int, Event]], int]], now: float
) -> list[tuple[str, tuple[Any, ...]]]:
    statements: list[tuple[str, tuple[Any, ...]]] = []
    for endpoint_id, (events, up_to) in made.items():
        for cursor, event in events:
            key = message_id(endpoint_id, cursor, event.type)
            row = (key, endpoint_id, event.type, event.thread_id, event.interrupt_id, event.body.decode())
            statements.append((INSERT, (*row, now, now, now)))
        statements.append((ADVANCE, (up_to, endpoint_id, up_to)))
    return statements


def new_secret() -> str:
    """A new signing secret: ``whsec_`` and 32 random bytes in base64 (Standard Webhooks)."""
    import base64

    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
