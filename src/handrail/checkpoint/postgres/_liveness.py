"""Postgres run liveness (SPEC rule 9): advisory locks that die with their connection.

Each saver holds an advisory lock on a random 62-bit key: on a pool, on a connection of
its own, in a transaction left open for the life of that connection (so that a pooler
in transaction mode, PgBouncer, keeps one server connection with it and closes that one
when the client goes); on the one connection it was given, a session lock. A claimed run
is a ``runs`` row naming that key, and a run is alive while some session holds the lock
on its key. The server releases a lock when its connection ends, and a dead process
cannot keep a connection: a killed process's kernel closes it at once, so its runs are
dead for every other process within moments, without leases or clocks; a host that
vanishes is noticed by TCP keepalives (about 30 seconds, set on the liveness connection).
A claim (by ``claim_run`` or an append) names the key without asking first; its
statement checks that a session holds the lock, and raises (SQLSTATE ``HR410``, via
``handrail_fail``) when none does, saving nothing. So if the saver's own connection
dropped, its next claim fails once, the saver connects, takes its key again, re-claims
its runs and retries; in between, its runs look dead.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg

from handrail.checkpoint.postgres._base import BEGIN, LOST_LOCK_STATE, Op, Query, Tables

__all__ = ["NEED_OWNER", "Flow", "LivenessSQL", "LockAgain", "new_key", "under_lock"]

T = TypeVar("T")


class _NeedOwner:
    """A flow's request for this saver's liveness key and lock holder (locking on first use)."""


NEED_OWNER = _NeedOwner()


@dataclass(frozen=True, slots=True)
class LockAgain:
    """A flow's request: the lock ``seen`` is gone; take it again (unless done meanwhile)."""

    seen: tuple[int, object]


Flow = Generator[Any, Any, T]
"""What a saver performs: yields an :data:`Op` (answered with its value, or its error
thrown in), :data:`NEED_OWNER` (answered with ``(key, holder)``) or :class:`LockAgain`.
Written once here; the saver's core (``core.py``) performs it, sync or async."""


def under_lock(make: Callable[[int | None], Op[T]], *, claims: bool) -> Flow[T]:
    """Run ``make(key)``, an operation that claims a run with this saver's key if ``claims``.

    A claim names the key without asking the server first whether its lock is still held:
    the claim's own statement checks, and when no session holds the lock (the liveness
    connection was lost) it fails (``HR410``), saving nothing. Then the saver takes the
    lock again, re-claims its runs, and the operation runs once more.
    """
    for attempt in range(2):
        owner = (yield NEED_OWNER) if claims else None
        try:
            value: T = yield make(None if owner is None else owner[0])
            return value
        except psycopg.Error as exc:
            if exc.sqlstate != LOST_LOCK_STATE or owner is None or attempt > 0:
                raise
        yield LockAgain(owner)
    raise AssertionError("unreachable")  # pragma: no cover


class LivenessSQL(Tables):
    """Taking the liveness lock, claiming, releasing and checking runs."""

    def take_lock(self, prefer: int | None, *, hold: bool = False) -> Op[int]:
        """Take a liveness lock on a free key (``prefer`` first, then random ones); the key.

        ``hold=False``: a session lock, on the saver's only connection. ``hold=True``, on
        the saver's liveness connection: the lock belongs to a transaction this operation
        leaves open for the life of the connection. A pooler in transaction mode (PgBouncer)
        keeps a server connection with its client while the client's transaction is open
        and closes it when the client goes mid-transaction, so the lock lives exactly as
        long as the client's connection, through a pooler or not (a session lock would stay
        on the pooler's server connection, with other clients). The transaction reads
        nothing, so it holds back no vacuum; the server's idle-in-transaction timeout is
        turned off for it, and its TCP keepalives set (see :data:`_KEEPALIVES`).
        """
        if hold:
            yield [BEGIN, Query("SET LOCAL idle_in_transaction_session_timeout = 0"), Query(_KEEPALIVES)]
        take = "SELECT pg_try_advisory_xact_lock(%s)" if hold else "SELECT pg_try_advisory_lock(%s)"
        key = prefer if prefer is not None else new_key()
        while True:
            (result,) = yield [Query(take, (key,))]
            if result.rows[0][0]:
                return key
            key = new_key()

    def claim_run(self, thread_id: str, run_id: str, owner_key: int) -> Op[None]:
        yield [
            Query(
                self._claim_sql,
                {"thread": thread_id, "claim": run_id, "owner": owner_key, "now": time.time()},
            )
        ]

    def claim_flow(self, thread_id: str, run_id: str) -> Flow[None]:
        """``claim_run`` as both savers perform it: under the liveness lock (:func:`under_lock`)."""

        def statement(key: int | None) -> Op[None]:
            assert key is not None  # claims=True: the flow asked for the key
            return self.claim_run(thread_id, run_id, key)

        yield from under_lock(statement, claims=True)

    def reclaim_runs(self, runs: Sequence[tuple[str, str]], owner_key: int) -> Op[None]:
        if runs:
            yield [
                Query(
                    f"INSERT INTO {self.runs} (thread_id, run_id, owner_key, claimed_at) "
                    "SELECT *, %s, %s FROM unnest(%s::text[], %s::text[]) "
                    "ON CONFLICT (thread_id, run_id) DO UPDATE SET owner_key = excluded.owner_key",
                    (owner_key, time.time(), [thread for thread, _ in runs], [run for _, run in runs]),
                )
            ]

    def release_run(self, thread_id: str, run_id: str) -> Op[None]:
        yield [Query(self._release_sql, (thread_id, run_id))]

    def unlock(self, key: int) -> Op[None]:
        """Release the session lock on ``key`` (the liveness lock on the saver's one connection)."""
        yield [Query("SELECT pg_advisory_unlock(%s)", (key,))]

    def forget_owner(self, owner_key: int) -> Op[None]:
        yield [Query(f"DELETE FROM {self.runs} WHERE owner_key = %s", (owner_key,))]

    def runs_alive(self, thread_id: str) -> Op[set[str]]:
        (result,) = yield [
            Query(
                f"SELECT r.run_id FROM {self.runs} AS r "
                f"WHERE r.thread_id = %s AND {self._alive('r.owner_key')}",
                (thread_id,),
            )
        ]
        return {row[0] for row in result.rows}


# The server probes a silent client after 15 s, every 5 s, 3 times: a liveness session
# whose host vanished (power, network) is ended, and its lock freed, within ~30 s. Set for
# the liveness transaction (``is_local``): behind a pooler, the server connection is not ours.
_KEEPALIVES = (
    "SELECT set_config('tcp_keepalives_idle', '15', true), "
    "set_config('tcp_keepalives_interval', '5', true), set_config('tcp_keepalives_count', '3', true)"
)


def new_key() -> int:
    """A random liveness key: positive, 62 bits."""
    return secrets.randbits(62) + 1
