"""Looking after threads: pruning, the audit trail and its verification, deletion.

The audit trail is each thread's log itself (``runtime/maintenance.py``), checked
against its hash chain (SPEC rule 18); pruning drops old checkpoints and keeps it whole;
deleting a thread leaves the store's record of the deletion (rule 21), the one entry
of the thread the audit across threads still shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from handrail.agent._callers import reviewer_of
from handrail.agent._work import Work
from handrail.agent.core import AgentCore
from handrail.checkpoint.base import BaseCheckpointSaver, ClaimFilter
from handrail.errors import ConfigurationError, InvalidInputError
from handrail.runtime import inbox, maintenance
from handrail.runtime.effects import Env
from handrail.types import AuditEntry, AuditVerification, RunnableConfig

__all__ = ["Maintenance"]


class Maintenance(AgentCore):
    """``prune_thread``, the audit, ``verify_audit`` and ``delete_thread``, with async twins."""

    def prune_thread(self, thread_id: str, *, keep_last: int = 20) -> int:
        """Drop old checkpoints of a thread, keeping its state and its whole audit trail.

        The newest ``keep_last`` checkpoints stay available to ``get_state_history`` and
        time travel; older ones are gone, and the oldest one kept holds the state at that
        point. Every review request, answer and tool run stays in ``get_audit_trail``.
        Safe while the thread runs elsewhere. Returns how many events were dropped.

        Example::

            agent.prune_thread("some_id", keep_last=20)
        """
        return self._pruning(thread_id, keep_last).run()

    async def aprune_thread(self, thread_id: str, *, keep_last: int = 20) -> int:
        """Async :meth:`prune_thread`."""
        return await self._pruning(thread_id, keep_last).arun()

    def _pruning(self, thread_id: str, keep_last: int) -> Work[int]:
        env, _ = self._reader({"configurable": {"thread_id": thread_id}})
        return Work(maintenance.prune(env, keep_last), env)

    def get_audit_trail(self, config: RunnableConfig) -> list[AuditEntry]:
        """Who was asked what, who answered what and when, and what actually ran.

        Read from the thread's log itself, oldest first; pruning never removes it.
        """
        return self._trail(config).run()

    async def aget_audit_trail(self, config: RunnableConfig) -> list[AuditEntry]:
        """Async :meth:`get_audit_trail`."""
        return await self._trail(config).arun()

    def _trail(self, config: RunnableConfig) -> Work[list[AuditEntry]]:
        env, _ = self._reader(config)
        return Work(maintenance.audit_trail(env), env)

    def audit(
        self,
        *,
        since: datetime | float | None = None,
        until: datetime | float | None = None,
        metadata: Mapping[str, Any] | None = None,
        limit: int = 1000,
        owners: ClaimFilter | None = None,
    ) -> list[AuditEntry]:
        """The audit trail across threads: every request, answer and tool run, oldest first.

        ``since``/``until`` (aware datetimes or epoch seconds) bound the entries' times,
        ``metadata`` picks the threads (a subset match), ``owners`` the agents they
        belong to (as in :meth:`list_interrupts`), ``limit`` caps the entries (the
        oldest are kept). Each thread updated since ``since`` is read from its log. A
        deleted thread has no log: the record its deletion left is its entry,
        ``event="thread_deleted"`` (who, when, the deleted log's head hash), filtered by
        the thread's metadata as it was.

        Example::

            for entry in agent.audit(since=datetime.now(UTC) - timedelta(days=1)):
                print(entry.at, entry.thread_id, entry.event, entry.reviewer)
        """
        return self._audit(since, until, metadata, limit, owners).run()

    async def aaudit(
        self,
        *,
        since: datetime | float | None = None,
        until: datetime | float | None = None,
        metadata: Mapping[str, Any] | None = None,
        limit: int = 1000,
        owners: ClaimFilter | None = None,
    ) -> list[AuditEntry]:
        """Async :meth:`audit`."""
        return await self._audit(since, until, metadata, limit, owners).arun()

    def _audit(
        self,
        since: datetime | float | None,
        until: datetime | float | None,
        metadata: Mapping[str, Any] | None,
        limit: int,
        owners: ClaimFilter | None,
    ) -> Work[list[AuditEntry]]:
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 100_000:
            raise InvalidInputError(f"limit must be an integer from 1 to 100000, got {limit!r}")
        window = inbox.thread_filter(metadata, None, since, until, 1, 0, owners)
        env = Env(self._spec, self._store_or_raise(), "")
        across = maintenance.audit_across(env, window, window.updated_after, window.updated_before, limit)
        return Work(across, env)

    def verify_audit(self, config: RunnableConfig, *, expect_head: str | None = None) -> AuditVerification:
        """Check a thread's whole log against its hash chain (SPEC rule 18).

        Every stored record carries a hash over its content and the hash of the record
        before it, so a record changed, copied from another row, removed or moved is
        found: the report names the first record that does not match, and how. Loading
        a thread checks the same chain and raises ``SerializationError``; this reports
        instead of raising.

        The report's ``head_hash`` vouches for the whole log. A chain cannot see records
        cut from its own end, so keep ``head_hash`` where the database's writers cannot
        change it, and pass it back as ``expect_head``: the report is then ``ok`` only if
        the log still ends at that head, and otherwise says whether the log goes on past
        it or does not hold it at all (cut at its end, or rewritten). A malformed
        ``expect_head`` raises ``InvalidInputError`` (a ``ValueError``).
        """
        return self._verification(config, expect_head).run()

    async def averify_audit(
        self, config: RunnableConfig, *, expect_head: str | None = None
    ) -> AuditVerification:
        """Async :meth:`verify_audit`."""
        return await self._verification(config, expect_head).arun()

    def _verification(self, config: RunnableConfig, expect_head: str | None) -> Work[AuditVerification]:
        from handrail.checkpoint.integrity import read_head

        expected = read_head(expect_head) if expect_head is not None else None
        env, _ = self._reader(config)
        return Work(maintenance.verify_audit(env, expected), env)

    def delete_thread(self, thread_id: str, *, by: Any = None) -> bool:
        """Delete a thread and its whole log; return whether it existed.

        The store keeps a record of the deletion (SPEC rule 21), written in the same
        transaction: ``by`` (who deletes it: a reviewer id or ``{"id", "roles"}``, as the
        config's ``reviewer``; None when nobody is named), the time, the number and hash
        of the deleted log's last record, and the thread's metadata. :meth:`audit` shows
        it as a ``"thread_deleted"`` entry; it is all that is left of the thread. A
        thread that does not exist leaves no record.

        Example::

            agent.delete_thread("ticket-17", by={"id": "ops", "roles": ["admin"]})
        """
        store, who = self._deleter(thread_id, by)
        return store.delete_thread(thread_id, by=who)

    async def adelete_thread(self, thread_id: str, *, by: Any = None) -> bool:
        """Async :meth:`delete_thread`."""
        store, who = self._deleter(thread_id, by)
        return await store.adelete_thread(thread_id, by=who)

    def _deleter(self, thread_id: str, by: Any) -> tuple[BaseCheckpointSaver, Any]:
        """The store, and ``by`` checked as a reviewer is."""
        store = self._store_or_raise()
        try:
            who = reviewer_of(by)
        except ConfigurationError as exc:
            raise InvalidInputError(f"by (who deletes the thread): {exc}") from None
        self._spec.cache.drop(thread_id)
        return store, who
