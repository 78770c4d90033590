"""Who may do what on the service (SPEC §5.3, access; rule 21): the one place that says.

Every route asks this module before it reads or changes anything; a refusal is a 403
problem that names the scope it needed (``scope`` in the body), and nothing is saved.

Rule A1 - Deny by default. A request without a valid credential is a 401 (``_auth.py``);
    a credential holds scopes (``tokens.py``): ``run``, ``review``, ``admin`` (which
    holds the other two).
Rule A2 - ``run``: create threads and runs and send input to the threads it started,
    read them and cancel their runs. The thread's starter is recorded when it is created
    (its ``owner`` metadata: the credential's name, which no client input sets or
    changes: :func:`claim_owner`).
Rule A3 - ``review``: the inbox, answers within its roles (the gate decides those:
    ``handrail.review``), and reading the threads it may decide (a pending review its
    roles may answer) or has decided (an answer it gave is in the thread's log).
Rule A4 - ``admin``: every thread, state updates (``command.update``), runs from a
    ``checkpoint_id`` (forks and replays), cancelling any run, deleting threads, the audit
    across every thread. No scope lifts the gate: an admin answers as a reviewer, with
    its roles (SPEC rules 19-20).
Rule A5 - Listings show each caller only what it may read: ``threads/search`` keeps the
    threads A2-A4 let it read; the inbox, the reviews its roles may decide.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from handrail.agent import Agent
from handrail.checkpoint.base import ThreadRecord
from handrail.runtime.events import decode_review
from handrail.server._problems import Problem
from handrail.server.tokens import Credential

__all__ = ["OWNER_KEY", "Access", "claim_owner", "require"]

OWNER_KEY = "owner"
"""The thread metadata key that names who started a thread (rule A2)."""

_READ = (
    "needs the 'admin' scope, the 'run' scope on a thread this credential started, or the "
    "'review' scope with a review of the thread its roles may decide or an answer it gave"
)


def require(credential: Credential, scope: str, doing: str) -> None:
    """Refuse ``doing`` with a 403 naming ``scope`` unless the credential holds it."""
    if not credential.has(scope):
        held = ", ".join(credential.scopes) or "none"
        raise Problem(
            403,
            f"{doing} needs the {scope!r} scope; this credential ({credential.name}) has {held}",
            scope=scope,
        )


def claim_owner(credential: Credential, metadata: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``metadata`` with its ``owner`` set to the credential's name (rule A2); a client that
    names another owner is refused with a 422."""
    named = metadata.get(OWNER_KEY)
    if named is not None and named != credential.name:
        raise Problem(
            422,
            f"{where} names {OWNER_KEY} {str(named)[:100]!r}: a thread's owner is the credential "
            f"that starts it ({credential.name!r}), set by the service; leave it out",
        )
    return {**metadata, OWNER_KEY: credential.name}


class Access:
    """What one service process knows about who may read which thread.

    A reviewer who answered on a thread stays one who has decided it, so a yes is
    remembered (for :data:`REMEMBER` seconds, and at most 10,000 of them).
    """

    REMEMBER = 300.0

    def __init__(self) -> None:
        self._decided: OrderedDict[tuple[str, str], float] = OrderedDict()

    async def may_read(
        self, credential: Credential, thread_id: str, agent: Agent, record: ThreadRecord | None = None
    ) -> bool:
        """Whether the credential may read the thread (rules A2-A4); ``record``: the thread's,
        when the caller has read it (else it is read here)."""
        if credential.has("admin"):
            return True
        if record is None:
            store = agent.checkpointer
            record = await store.aget_thread(thread_id) if store is not None else None
        metadata = record.metadata if record is not None else {}
        if credential.has("run") and metadata.get(OWNER_KEY) == credential.name:
            return True
        if not credential.has("review") or record is None:
            return False
        for review in record.pending:
            value = decode_review(review.payload, thread_id, review.interrupt_id, review.kind)
            if agent.may_decide(value, credential.reviewer):
                return True
        return await self._has_decided(credential, thread_id, agent)

    async def check_read(
        self, credential: Credential, thread_id: str, agent: Agent, record: ThreadRecord | None = None
    ) -> None:
        """Refuse with a 403 unless the credential may read the thread."""
        if not await self.may_read(credential, thread_id, agent, record):
            raise Problem(403, f"reading thread {thread_id!r} {_READ}", scope="admin")

    async def check_owner(
        self, credential: Credential, thread_id: str, agent: Agent, doing: str, metadata: Mapping[str, Any]
    ) -> None:
        """Refuse ``doing`` on a thread unless the credential started it (``run``) or is an admin."""
        if credential.has("admin"):
            return
        require(credential, "run", doing)
        if metadata.get(OWNER_KEY) != credential.name:
            raise Problem(
                403,
                f"{doing} on thread {thread_id!r}, which this credential did not start, needs the "
                "'admin' scope",
                scope="admin",
            )

    async def _has_decided(self, credential: Credential, thread_id: str, agent: Agent) -> bool:
        key = (thread_id, credential.name)
        now = time.monotonic()
        if self._decided.get(key, 0.0) > now:
            return True
        trail = await agent.aget_audit_trail({"configurable": {"thread_id": thread_id}})
        who = credential.name
        decided = any(
            entry.event == "answered"
            and isinstance(entry.reviewer, Mapping)
            and entry.reviewer.get("id") == who
            for entry in trail
        )
        if decided:
            self._decided[key] = now + self.REMEMBER
            self._decided.move_to_end(key)
            if len(self._decided) > 10_000:
                self._decided.popitem(last=False)
        return decided

    def forget(self, thread_id: str) -> None:
        """Forget what is remembered of a thread (it was deleted)."""
        for key in [k for k in self._decided if k[0] == thread_id]:
            del self._decided[key]
