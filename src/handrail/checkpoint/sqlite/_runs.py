"""Run liveness on SQLite (SPEC rule 9): claims, leases, and which runs are alive.

A claimed run is a ``runs`` row pointing at its *owner*: one ``run_owners`` row per
saver per process, holding the process id, an identity of the host's pid space, and a
lease expiry. While the saver has claimed runs, a daemon thread renews the lease every
``lease_seconds / 3``. A run is alive when its owner's lease has not lapsed **and**,
when the owner shares this process's pid space (same host, boot and pid namespace:
the usual case, since a WAL database cannot be shared over a network), its process
still exists. So a killed process is seen dead as soon as it is gone; one that cannot
be checked (another container, a reused pid) is seen dead when its lease lapses.
Nothing a dead process left behind keeps a run alive. A claim (by ``claim_run`` or an
append) writes the saver's ``run_owners`` row only when the heartbeat has not renewed
it within the last ``lease_seconds / 3``, so a claim riding on an append usually costs
a read of the thread's runs and one ``INSERT`` in the append's transaction.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import uuid
from typing import Any

from handrail.checkpoint._records import MAX_NAME, MAX_TIME, damaged, host_identity, pid_exists
from handrail.checkpoint.sqlite._connections import _Connections, fetch_all, log
from handrail.errors import SerializationError

_RUNS_SQL = (
    "SELECT r.run_id, o.pid, o.host, o.expires_at FROM handrail_runs AS r "
    "LEFT JOIN handrail_run_owners AS o ON o.owner_id = r.owner_id WHERE r.thread_id = ?"
)


class _Runs(_Connections):
    """Claiming and releasing runs, renewing this saver's lease, telling live runs from dead."""

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self._owner_id = uuid.uuid4().hex
        # This saver's lease as last written (owner, time), so that a claim rewrites its
        # owner row only once a heartbeat period. Safe because it is set only after the
        # transaction that wrote the row has committed, a claim rewrites the row once it
        # is older than a third of the lease, and the heartbeat renews it every third
        # while runs are claimed: the row a claim relies on never lapses. Raced by
        # test_claims_write_the_lease_once_a_heartbeat_period and
        # test_a_claim_made_by_an_append_keeps_its_lease.
        self._renewed: tuple[str, float] = ("", 0.0)
        # The runs this process has claimed: the heartbeat renews the lease while there
        # are any. Only a hint for the heartbeat (the runs table is the truth): an append
        # that releases a run takes it out before committing and puts it back if the
        # append fails (``_forget_release``), so a run still claimed is never left
        # unrenewed. Raced by test_the_heartbeat_renews_the_lease.
        self._claimed: set[tuple[str, str]] = set()
        self._runs_lock = threading.Lock()
        self._heartbeat: threading.Thread | None = None

    def claim_run(self, thread_id: str, run_id: str) -> None:
        with self._transaction(write=True) as conn:
            renewed = self._claim(conn, thread_id, run_id)
        self._claimed_now(thread_id, run_id, renewed)

    def _claim(self, conn: sqlite3.Connection, thread_id: str, run_id: str) -> tuple[str, float] | None:
        """Claim a run in the open write transaction, forgetting the thread's dead runs.

        Returns ``(owner_id, time)`` when it renewed this saver's lease, for
        :meth:`_claimed_now` to note once the transaction has committed.
        """
        now = time.time()
        owner_id = self._owner_id
        renewed = None
        if self._renewed[0] != owner_id or self._renewed[1] < now - self.lease_seconds / 3:
            # the owner row: written once a heartbeat period (the heartbeat keeps it fresh
            # while runs are claimed), and a chance to forget the owners of dead processes
            self._renew_owner(conn, now)
            conn.execute(
                "DELETE FROM handrail_run_owners WHERE expires_at < ? AND owner_id NOT IN (SELECT owner_id "
                "FROM handrail_runs)",
                (now,),
            )
            renewed = (owner_id, now)
        rows = _runs_of(conn, thread_id)
        dead = [
            (thread_id, run) for run, *owner in rows if run != run_id and not self._owner_alive(now, *owner)
        ]
        if dead:
            conn.executemany("DELETE FROM handrail_runs WHERE thread_id = ? AND run_id = ?", dead)
        conn.execute(
            "INSERT INTO handrail_runs (thread_id, run_id, owner_id, claimed_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (thread_id, run_id) DO UPDATE SET owner_id = excluded.owner_id, "
            "claimed_at = excluded.claimed_at",
            (thread_id, run_id, owner_id, now),
        )
        return renewed

    def _claimed_now(self, thread_id: str, run_id: str, renewed: tuple[str, float] | None) -> None:
        """After a claim commits: remember it, and keep the lease renewed while runs are claimed."""
        with self._runs_lock:
            if renewed is not None:
                self._renewed = renewed
            self._claimed.add((thread_id, run_id))
            if self._heartbeat is None or not self._heartbeat.is_alive():
                self._heartbeat = threading.Thread(
                    target=self._renew_leases, name="handrail-sqlite-lease", daemon=True
                )
                self._heartbeat.start()

    def release_run(self, thread_id: str, run_id: str) -> None:
        with self._runs_lock:
            self._claimed.discard((thread_id, run_id))
        with self._transaction(write=True) as conn:
            conn.execute("DELETE FROM handrail_runs WHERE thread_id = ? AND run_id = ?", (thread_id, run_id))

    def runs_alive(self, thread_id: str) -> set[str]:
        now = time.time()
        with self._transaction(write=False) as conn:
            rows = _runs_of(conn, thread_id)
        return {run for run, *owner in rows if self._owner_alive(now, *owner)}

    @staticmethod
    def _owner_alive(now: float, pid: int | None, host: str | None, expires_at: float | None) -> bool:
        if pid is None or expires_at is None or expires_at <= now:
            return False
        return host != host_identity() or pid_exists(pid)

    def _renew_owner(self, conn: sqlite3.Connection, now: float) -> None:
        conn.execute(
            "INSERT INTO handrail_run_owners (owner_id, pid, host, expires_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (owner_id) DO UPDATE SET expires_at = excluded.expires_at",
            (self._owner_id, os.getpid(), host_identity(), now + self.lease_seconds),
        )

    def _renew_leases(self) -> None:
        """The heartbeat: renew this process's lease while it has claimed runs."""
        while not self._stop.wait(self.lease_seconds / 3):
            with self._runs_lock:
                if not self._claimed or os.getpid() != self._pid:
                    self._heartbeat = None
                    return
            try:
                now = time.time()
                with self._transaction(write=True) as conn:
                    self._renew_owner(conn, now)
                with self._runs_lock:
                    self._renewed = (self._owner_id, now)
            except Exception:
                log.warning("could not renew the run lease in %s", self.path, exc_info=True)

    def close(self) -> None:
        """Forget this process's runs, stop the lease heartbeat and close the connections."""
        if not self._closed and os.getpid() == self._pid:
            self._stop.set()
            try:
                with self._transaction(write=True) as conn:
                    conn.execute("DELETE FROM handrail_runs WHERE owner_id = ?", (self._owner_id,))
                    conn.execute("DELETE FROM handrail_run_owners WHERE owner_id = ?", (self._owner_id,))
            except (sqlite3.Error, SerializationError):  # a damaged file: closing still closes
                log.warning("could not release the runs of %s on close", self.path, exc_info=True)
        super().close()

    def _forked(self) -> None:
        super()._forked()
        self._owner_id = uuid.uuid4().hex
        self._claimed = set()
        self._heartbeat = None


def _runs_of(conn: sqlite3.Connection, thread_id: str) -> list[tuple[Any, ...]]:
    """The thread's runs with their owners (``run_id, pid, host, expires_at``), each checked.

    A run without an owner row (``LEFT JOIN``: its owner was forgotten) has ``None``s;
    anything else out of range is damage (SPEC rule 10), named by thread and run.
    """
    rows = fetch_all(conn, _RUNS_SQL, (thread_id,))
    for row in rows:
        check_run_row(thread_id, *row)
    return rows


def check_run_row(thread_id: str, run: Any, pid: Any, host: Any, expires_at: Any) -> None:
    """A run's row and its owner's, as read: anything out of range is damage (SPEC rule 10)."""
    if not isinstance(run, str) or not 0 < len(run) <= MAX_NAME:
        raise damaged(thread_id, "a run", f"its id is {run!r:.100}")
    if pid is None and host is None and expires_at is None:
        return
    if (
        type(pid) is not int
        or not 0 < pid < 2**31
        or not isinstance(host, str)
        or type(expires_at) not in (int, float)
        or not 0 <= expires_at < MAX_TIME
    ):
        raise damaged(thread_id, f"run {run!r}", "its owner's row (pid, host, lease) is out of range")
