"""The reviewer's side of the Agent: answers recorded without running them, grants, who may decide.

An answer is an event; running it is a worker's job (DESIGN, SPEC §5.1). ``decide``,
``expire`` and ``withdraw`` each make a *record-only* run: the answers are checked as a
resume is and saved, and nothing else runs; ``invoke(None, config)`` or a worker
(``run_claimed``) then runs what they allow. Grants (SPEC rule 16) are read and revoked
on the agent's store; who may answer what (rule 12) is the gate's
(:mod:`handrail.review`), asked under this agent's policies.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from functools import partial
from typing import Any

from handrail import review
from handrail.agent._callers import reviewer_of
from handrail.agent._work import Work
from handrail.agent.core import AgentCore
from handrail.checkpoint.grants import GrantFilter, GrantRecord
from handrail.decisions import Decision
from handrail.errors import ConfigurationError, ConflictError, InvalidInputError
from handrail.runtime import answering, loop
from handrail.runtime.effects import Effect
from handrail.types import Command, RunnableConfig

__all__ = ["Reviews"]


class Reviews(AgentCore):
    """``decide``, ``expire``, ``withdraw``, the grants and who may decide, with async twins."""

    # Answers without running them (SPEC §5.1) -----------------------------------------------
    def decide(
        self, thread_id: str, interrupt_id: str, answer: Any, *, reviewer: Any, channel: str = "python"
    ) -> Decision:
        """Record ``reviewer``'s answer to one interrupt, without running anything.

        The answer is checked as a resume is (rule 5) and against the policy's
        ``reviewers`` roles (rule 12: :class:`~handrail.errors.NotAllowedError`, a
        ``PermissionError``), then saved with the reviewer, the channel and the time
        (rule 11). ``agent.invoke(None, config)`` (or the service's worker) then runs it.
        An interrupt answered first by someone else raises
        :class:`~handrail.errors.AlreadyAnsweredError`, naming who and when.

        Example::

            agent.decide("some_id", item.interrupt.id, {"decisions": [{"type": "approve"}]},
                         reviewer={"id": "alice", "roles": ["dba"]})
            agent.invoke(None, {"configurable": {"thread_id": "some_id"}})
        """
        return self._decision(thread_id, interrupt_id, answer, reviewer, channel).run()

    async def adecide(
        self, thread_id: str, interrupt_id: str, answer: Any, *, reviewer: Any, channel: str = "python"
    ) -> Decision:
        """Async :meth:`decide`."""
        return await self._decision(thread_id, interrupt_id, answer, reviewer, channel).arun()

    def _decision(
        self, thread_id: str, interrupt_id: str, answer: Any, reviewer: Any, channel: str
    ) -> Work[Decision]:
        if reviewer is None:
            raise ConfigurationError("decide needs a reviewer: a string id or {'id': str, 'roles': [...]}")
        if not isinstance(interrupt_id, str) or not interrupt_id:
            raise InvalidInputError(f"interrupt_id must be a non-empty string, got {interrupt_id!r}")
        if not isinstance(channel, str) or not channel:
            raise InvalidInputError(f"channel must be a non-empty string, got {channel!r}")
        config: RunnableConfig = {"configurable": {"thread_id": thread_id, "reviewer": reviewer}}
        env, request = self._prepare_run(Command(resume={interrupt_id: answer}), config, frozenset())
        request = request._replace(channel=channel, record_only=True)
        decided = partial(_decided, thread_id=thread_id, request=request, interrupt_id=interrupt_id)
        return self._run(env, request).then(decided)

    def expire(self, thread_id: str, *, now: float | None = None) -> list[str]:
        """Resolve the reviews of ``thread_id`` whose expiry has passed (SPEC rule 15), by
        their policies' ``on_expiry``, without running anything; returns their ids.

        The resolution is an answer with channel ``expiry`` and no reviewer; the thread is
        then queued for a worker, or ``invoke(None, config)`` runs it (which also resolves
        what has expired). ``now`` (seconds since the epoch) judges expiry at another time
        than the clock's. A decision recorded first wins: its review is not expired
        (rule 8). Sweeping many threads: :func:`handrail.sweep.sweep`.
        """
        return self._expiry(thread_id, now).run()

    async def aexpire(self, thread_id: str, *, now: float | None = None) -> list[str]:
        """Async :meth:`expire`."""
        return await self._expiry(thread_id, now).arun()

    def _expiry(self, thread_id: str, now: float | None) -> Work[list[str]]:
        config: RunnableConfig = {"configurable": {"thread_id": thread_id, "channel": "expiry"}}
        env, request = self._prepare_run(None, config, frozenset())
        run = self._run(env, request._replace(record_only=True, now=now))
        return Work(_expired(run), env)

    def withdraw(
        self,
        thread_id: str,
        *,
        reason: str,
        interrupt_ids: Sequence[str] = (),
        by: Any = None,
        channel: str = "withdrawn",
    ) -> list[str]:
        """Take back pending reviews of ``thread_id`` (all of them, or ``interrupt_ids``):
        every call they hold is rejected with ``reason``, recorded with ``by`` and
        ``channel``, without running anything; returns the ids withdrawn (none when they
        were answered first). For whoever asked, not for reviewers: it can only reject.
        The MCP gateway withdraws the review of a call its client cancelled.

        Example::

            agent.withdraw("some_id", reason="the client cancelled the call")
        """
        return self._withdrawal(thread_id, reason, interrupt_ids, by, channel).run()

    async def awithdraw(
        self,
        thread_id: str,
        *,
        reason: str,
        interrupt_ids: Sequence[str] = (),
        by: Any = None,
        channel: str = "withdrawn",
    ) -> list[str]:
        """Async :meth:`withdraw`."""
        return await self._withdrawal(thread_id, reason, interrupt_ids, by, channel).arun()

    def _withdrawal(
        self, thread_id: str, reason: str, interrupt_ids: Sequence[str], by: Any, channel: str
    ) -> Work[list[str]]:
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidInputError("withdraw needs a reason: a non-empty string")
        if isinstance(interrupt_ids, str) or not all(isinstance(i, str) for i in interrupt_ids):
            raise InvalidInputError("interrupt_ids must be a list of interrupt ids")
        withdrawal = answering.Withdrawal(reason, tuple(interrupt_ids), by, channel)
        config: RunnableConfig = {"configurable": {"thread_id": thread_id, "channel": channel}}
        env, request = self._prepare_run(withdrawal, config, frozenset())
        return self._run(env, request._replace(record_only=True)).then(_recorded)

    # Grants (SPEC rule 16) -----------------------------------------------------------------
    def list_grants(
        self,
        *,
        thread_id: str | None = None,
        agent: str | None = None,
        tool: str | None = None,
        active: bool = True,
        limit: int = 100,
        offset: int = 0,
    ) -> list[GrantRecord]:
        """Grants on this agent's store, newest first: given on ``thread_id``, for ``agent``
        (an assistant id) or ``tool``; with ``active`` (the default) only those in force
        now. A grant is given by an approval that carries one (``{"type": "approve",
        "grant": {"scope": "thread", "ttl": 3600}}``) and lets later calls of its tool run
        without a pause.

        Example::

            for grant in agent.list_grants(thread_id="t1"):
                print(grant.grant_id, grant.tool, grant.uses_left, grant.given_by)
        """
        store = self._store_or_raise()
        return store.list_grants(_grant_filter(thread_id, agent, tool, active, limit, offset))

    async def alist_grants(
        self,
        *,
        thread_id: str | None = None,
        agent: str | None = None,
        tool: str | None = None,
        active: bool = True,
        limit: int = 100,
        offset: int = 0,
    ) -> list[GrantRecord]:
        """Async :meth:`list_grants`."""
        store = self._store_or_raise()
        return await store.alist_grants(_grant_filter(thread_id, agent, tool, active, limit, offset))

    def revoke_grant(self, grant_id: str, *, by: Any = None) -> GrantRecord:
        """Revoke a grant: it covers no call that starts after (a call already planned under
        it runs). ``by`` is who revoked it, for the record. Revoking twice changes nothing.
        An unknown id raises :class:`~handrail.errors.InvalidInputError`."""
        found = self._store_or_raise().revoke_grant(_grant_id(grant_id), by=reviewer_of(by))
        return _revoked(found, grant_id)

    async def arevoke_grant(self, grant_id: str, *, by: Any = None) -> GrantRecord:
        """Async :meth:`revoke_grant`."""
        found = await self._store_or_raise().arevoke_grant(_grant_id(grant_id), by=reviewer_of(by))
        return _revoked(found, grant_id)

    # Who may decide (SPEC rule 12) ------------------------------------------------------------
    def may_decide(self, value: Any, reviewer: Any) -> bool:
        """Whether ``reviewer`` may answer a review whose value is ``value`` (an
        ``Interrupt``'s ``value``), under this agent's policies: what every channel and the
        inbox ask (``handrail.review.may_answer``).

        Example::

            agent.may_decide(interrupt.value, {"id": "bob", "roles": ["ops"]})   # False for a DBA's tool
        """
        return review.may_answer(self._spec.policies, value, reviewer)

    def refusal(self, value: Any, reviewer: Any) -> str | None:
        """Why ``reviewer`` may not answer a review with ``value``, or None if they may."""
        return review.refusal(self._spec.policies, value, reviewer)

    def roles_for(self, value: Any) -> list[str]:
        """The roles that may decide a review with ``value`` (empty: any reviewer)."""
        return sorted({r for _, roles in review.roles_required(self._spec.policies, value) for r in roles})


def _decided(
    result: loop.RunResult, *, thread_id: str, request: loop.RunRequest, interrupt_id: str
) -> Decision:
    answer = result.answers.get(interrupt_id)
    approvals = result.approvals.get(interrupt_id, ())
    return Decision(thread_id, interrupt_id, answer, request.reviewer, request.channel, approvals)


def _recorded(result: loop.RunResult) -> list[str]:
    return sorted(result.recorded)


def _expired(run: Work[loop.RunResult]) -> Generator[Effect, Any, list[str]]:
    try:
        return _recorded((yield from run.steps))
    except ConflictError:
        return []  # being run elsewhere: that run resolves it, or the next sweep


def _revoked(found: GrantRecord | None, grant_id: str) -> GrantRecord:
    if found is None:
        raise InvalidInputError(f"there is no grant {grant_id!r}")
    return found


def _grant_filter(
    thread_id: str | None, agent: str | None, tool: str | None, active: bool, limit: int, offset: int
) -> GrantFilter:
    if not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise InvalidInputError(f"limit must be an integer from 1 to 1000, got {limit!r}")
    if not isinstance(offset, int) or offset < 0:
        raise InvalidInputError(f"offset must be a non-negative integer, got {offset!r}")
    for name, value in (("thread_id", thread_id), ("agent", agent), ("tool", tool)):
        if value is not None and not isinstance(value, str):
            raise InvalidInputError(f"{name} must be a string, got {type(value).__name__}")
    at = answering.now() if active else None
    return GrantFilter(agent=agent, tool=tool, thread_id=thread_id, active_at=at, limit=limit, offset=offset)


def _grant_id(grant_id: Any) -> str:
    if not isinstance(grant_id, str) or not grant_id or len(grant_id) > 64:
        raise InvalidInputError(f"a grant id is a string of up to 64 characters, got {grant_id!r}")
    return grant_id
