"""The values that cross handrail's public surface: interrupts, commands, outputs, snapshots."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict

__all__ = [
    "AuditEntry",
    "AuditVerification",
    "Command",
    "Configurable",
    "GraphOutput",
    "Interrupt",
    "Reviewer",
    "RunnableConfig",
    "StateSnapshot",
]


@dataclass(frozen=True, slots=True)
class Interrupt:
    """A pause waiting for an answer.

    ``value`` is what the pausing code asked (for the human-in-the-loop middleware a
    ``HITLRequest``); ``id`` is unique among the thread's pending interrupts and stable
    across reads, so an answer addressed to it can never land on a newer one.

    It hashes by its ``id``, so it may key a resume map: ``Command(resume={intr: answer})``
    is read as ``Command(resume={intr.id: answer})``.

    ``response_schema`` (LangGraph 1.2's field) is the JSON schema of the answers a
    per-call review takes - the decisions its tool allows, an edit's arguments following
    the tool's schema - and None for other interrupts. It describes; the answer is still
    checked in full (SPEC rule 5). Interrupts compare by ``value`` and ``id``.
    """

    value: Any
    id: str
    response_schema: dict[str, Any] | None = field(default=None, compare=False)

    def __hash__(self) -> int:
        return hash(self.id)


@dataclass(frozen=True, slots=True)
class Command:
    """Input that answers interrupts and/or updates state.

    ``resume`` is a bare value (answers the one pending interrupt) or a map
    ``{interrupt_id: value}`` (answers exactly those). ``update`` is a state update
    applied before the run continues.

    Example::

        agent.invoke(Command(resume={intr.id: {"decisions": [{"type": "approve"}]}}), config)
    """

    resume: Any = None
    update: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class GraphOutput:
    """The ``version="v2"`` result of ``invoke``: the state and the pending interrupts."""

    value: dict[str, Any]
    interrupts: tuple[Interrupt, ...] = ()


class Reviewer(TypedDict):
    """Who answers a review: an id and, optionally, roles."""

    id: str
    roles: NotRequired[list[str]]


class Configurable(TypedDict, total=False):
    """The ``config["configurable"]`` keys handrail reads."""

    thread_id: str
    checkpoint_id: str
    reviewer: str | Reviewer
    channel: str  # how answers arrive, recorded with them (rule 11): "python" unless a service says


class RunnableConfig(TypedDict, total=False):
    """The ``config`` argument: ``{"configurable": {"thread_id": ...}}``.

    ``metadata`` is merged into the thread's metadata (searchable with
    ``list_interrupts``); ``context`` is passed to middleware and tools as
    ``runtime.context``.
    """

    configurable: Configurable
    metadata: dict[str, Any]
    context: Any


class StateSnapshot(NamedTuple):
    """The state of a thread at one checkpoint, as ``get_state`` returns it.

    ``values`` is the state dict, ``next`` the steps due to run, ``config`` carries the
    ``checkpoint_id``, ``interrupts`` the interrupts pending at that point.
    """

    values: dict[str, Any]
    next: tuple[str, ...]
    config: RunnableConfig
    metadata: dict[str, Any]
    created_at: str | None
    parent_config: RunnableConfig | None
    interrupts: tuple[Interrupt, ...]


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One line of a thread's audit trail (``Agent.get_audit_trail``).

    ``event`` is what happened:

    * ``"review_requested"`` - an interrupt was raised: ``value`` is what was asked
      (for the human-in-the-loop middleware a ``HITLRequest``), ``kind`` is
      ``"interrupt"`` or ``"outcome_unknown"``;
    * ``"answered"`` - ``value`` is the answer given to ``interrupt_id``, ``reviewer``
      who gave it (from ``config["configurable"]["reviewer"]``, or the service's
      credential), ``channel`` how it arrived (``"python"``, ``"http"``, ``"cli"``; None
      for answers saved before channels were recorded);
    * ``"approval"`` - one approval of a review that needs several (SPEC rule 14), which
      stays pending: ``value`` is the vote as cast (an approval of a call that stands at
      an edit is saved as that edit), ``reviewer`` and ``channel`` as for an answer, and
      ``kind`` how far the review has come, ``"1 of 2"``. The ``"answered"`` entry that
      ends such a review has ``kind`` ``"quorum"``: its ``value`` is what the approvals
      decided, its ``reviewer`` who gave the last one;
    * an ``"answered"`` entry of ``kind`` ``"expired"`` (channel ``"expiry"``, no
      reviewer): nobody answered in time and the policy's ``on_expiry`` decided (rule 15);
    * an ``"answered"`` entry of ``kind`` ``"withdrawn"``: whoever asked took the review
      back (``Agent.withdraw``; the MCP gateway, when its client cancels): every call rejected;
    * ``"tool_started"`` - ``tool`` ran with ``args`` (what actually ran, after any edit,
      as the tool's schema read them: the values the tool got), ``proposed`` is the
      call as the model proposed it, ``value`` is ``{"run_id", "worker"}``: the run
      that ran it and its process (``host:pid``; None for runs saved before processes were named). ``kind`` is
      ``"planned"`` when the log holds only the step's plan for the call, saved before
      any call of the step acted, and no start of its own: its run died in it (a
      ``"run_abandoned"`` entry follows once another run found it dead) or is running it
      now; ``at`` is then the time of the plan;
    * ``"run_abandoned"`` - a run died with a call unfinished and another run took the
      thread over, asking about the call (the ``"review_requested"`` of kind
      ``"outcome_unknown"`` that follows, SPEC rule 9): ``value`` is ``{"run_id",
      "worker", "taken_over_by": {"run_id", "worker"}}``;
    * ``"tool_finished"`` - ``result`` is the ToolMessage the call ended with;
    * ``"run_failed"`` - a run stopped on an error after it had saved some of its work:
      ``value`` is ``{"run_id", "error"}``;
    * ``"run_cancelled"`` - a run was cancelled (``value`` as for ``"run_failed"``,
      ``by`` who cancelled it);
    * ``"input"``, ``"state_updated"``, ``"forked"`` - a change to the thread (SPEC rule
      21): new input (``value``: its metadata, if any), a state update (``value``: the
      keys it changed, ``kind``: the step it counts as, if any), a fork or a run from an
      earlier checkpoint (``value``: ``{"from_checkpoint"}``); ``by`` is who made it (the
      config's ``reviewer``, or the service's credential; None when nobody was named)
      and ``channel`` how it arrived;
    * ``"thread_deleted"`` - only in the audit across threads (``Agent.audit``): the
      thread was deleted with its whole log, and this record of the store is what is
      left of it (SPEC rule 21). ``by`` is who deleted it (None when nobody was named),
      ``at`` when, ``value`` is ``{"head_seq", "head_hash", "metadata"}``: the number
      of the deleted log's last record, the hash sealed into it (64 hex digits, as
      ``AuditVerification.head_hash`` gave it; None when that record had no seal) and
      the thread's metadata; ``seq`` is that head number too.
    """

    thread_id: str
    seq: int
    at: datetime
    event: Literal[
        "review_requested",
        "approval",
        "answered",
        "tool_started",
        "tool_finished",
        "run_failed",
        "input",
        "state_updated",
        "forked",
        "run_cancelled",
        "thread_deleted",
        "run_abandoned",
    ]
    interrupt_id: str | None = None
    kind: str | None = None
    value: Any = None
    reviewer: Any = None
    channel: str | None = None
    tool_call_id: str | None = None
    tool: str | None = None
    args: dict[str, Any] | None = None
    proposed: dict[str, Any] | None = None
    result: Any = None
    by: Any = None


@dataclass(frozen=True, slots=True)
class AuditVerification:
    """What :meth:`Agent.verify_audit` found when it checked a thread's log against its
    hash chain (SPEC rule 18).

    ``ok`` is true when every stored record matches; otherwise ``first_bad`` is the
    number of the first record that does not, and ``reason`` says how. ``records`` is
    how many records were read and ``head_seq`` the number of the thread's last record;
    ``unsealed`` how many were written before records had a hash (a store's migration
    seals them), which are chained but cannot be checked on their own. A pruned thread
    is checked from the anchors its snapshot keeps.

    ``head_hash`` (64 hex digits, or None when the chain is broken or the log empty) is
    the hash of the last record, which vouches for every record before it. The chain
    cannot see records cut from its own end; keep ``head_hash`` where the database's
    writers cannot change it and pass it back as ``expect_head`` to find a cut end, or a
    log whose hashes were all computed anew. ``expected_head`` is the head a caller
    expected (as :meth:`Agent.verify_audit` got it), None when it expected none; when the
    log does not end there, ``ok`` is false and ``reason`` says how it differs.

    Example::

        report = agent.verify_audit({"configurable": {"thread_id": "t1"}})
        if not report.ok:
            print(f"record {report.first_bad}: {report.reason}")
        kept = report.head_hash  # store it elsewhere; later:
        agent.verify_audit({"configurable": {"thread_id": "t1"}}, expect_head=kept)
    """

    thread_id: str
    ok: bool
    records: int
    head_seq: int
    first_bad: int | None = None
    reason: str | None = None
    unsealed: int = 0
    head_hash: str | None = None
    expected_head: str | None = None
