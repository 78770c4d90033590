"""A fold's stored form: the saved reading of a thread, and the snapshot pruning leaves.

``_fold.py`` gives events their meaning; this module writes a fold down and reads it
back, so that a thread can start from it instead of folding its whole log
(``reading.py`` chooses where a load starts, ``commit.py`` when a run saves a reading).

* :func:`to_snapshot` is everything a reading holds, as JSON-able data; pruning puts it
  in a ``snapshot`` event (``maintenance.py``), where a reading of the log starts
  (:func:`from_snapshot`).
* :func:`to_reading` adds where the fold is in the log (head, checkpoint, chain hash);
  :func:`saved_reading` seals it on its own, as the store keeps it beside the log, and
  :func:`restore_reading` checks it and gives the fold back exactly as folding the log
  gives it - or None for a reading saved by an older version, when the log is read
  instead.

Damage raises :class:`~handrail.errors.SerializationError` naming the thread and the
record (SPEC rule 10).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from handrail.checkpoint.base import StoredEvent
from handrail.checkpoint.integrity import GENESIS, link, seal, unseal
from handrail.checkpoint.serde import dumps, loads
from handrail.errors import SerializationError
from handrail.messages import ToolMessage
from handrail.review import Answer
from handrail.runtime._fold import Reducer, ThreadFold, as_next
from handrail.runtime._pending import InterruptRecord, StartedTool
from handrail.runtime.events import Event, pack_payload, unpack_payload

if TYPE_CHECKING:
    from handrail.runtime.spec import AgentSpec

__all__ = ["from_reading", "from_snapshot", "restore_reading", "saved_reading", "to_reading", "to_snapshot"]


def to_snapshot(fold: ThreadFold) -> dict[str, Any]:
    """Everything a reading holds, as JSON-able data for a ``snapshot`` event."""

    def record(r: InterruptRecord) -> dict[str, Any]:
        return {
            "id": r.id,
            "step": r.step,
            "task": r.task,
            "index": r.index,
            "kind": r.kind,
            "value": r.value,
            "source": r.source,
            "seq": r.seq,
            "created_at": r.created_at,
            **({"terms": r.terms} if r.terms is not None else {}),
        }

    return {
        "values": fold.values,
        "next": list(fold.next),
        "metadata": fold.metadata,
        "created_at": fold.created_at,
        "checkpoints": fold.checkpoint_count,
        "last_step": fold.last_step,
        "pending": [r.id for r in fold.pending.values()],
        "step_interrupts": [record(r) for r in fold.step_interrupts.values()],
        "answers": fold.answers,
        "answered_ids": sorted(fold.answered_ids),
        "superseded_ids": sorted(fold.superseded_ids),
        "task_results": list(fold.task_results.values()),
        "started": [
            {
                "task": s.task,
                "name": s.name,
                "args": s.args,
                "run_id": s.run_id,
                "idempotent": s.idempotent,
                "seq": s.seq,
            }
            for s in fold.started.values()
        ],
        "decided": [answer._asdict() for answer in fold.decided.values()],
        "used": [answer._asdict() for answer in fold.used.values()],
        **(
            {"votes": {key: [list(v) for v in votes] for key, votes in fold.votes.items()}}
            if fold.votes
            else {}
        ),
        **({"started_by": fold.started_by} if fold.started_by is not None else {}),
    }


def to_reading(fold: ThreadFold) -> dict[str, Any]:
    """The whole reading, as JSON-able data: a saved reading of the thread (see
    :func:`from_reading`), which a new process loads instead of folding the log."""
    return {
        **to_snapshot(fold),
        "head_seq": fold.head_seq,
        "updated_at": fold.updated_at,
        "base_seq": fold.base_seq,
        "chain": fold.chain.hex(),
        "checkpoint": [
            fold.checkpoint_seq,
            fold.parent_checkpoint_seq,
            fold.checkpoint_at,
            fold.checkpoint_kind,
            fold.checkpoint_writes,
        ],
    }


def saved_reading(fold: ThreadFold) -> StoredEvent:
    """The stored form of a fold: the thread's saved reading at its head, sealed on its own
    (it holds the chain's hash at its event: ``checkpoint/integrity.py``, rule 4)."""
    raw = dumps(to_reading(fold), where=f"the state of thread {fold.thread_id!r}")
    payload, _ = seal(GENESIS, fold.thread_id, fold.head_seq, "reading", fold.updated_at, pack_payload(raw))
    return StoredEvent(seq=fold.head_seq, kind="reading", created_at=fold.updated_at, payload=payload)


def restore_reading(spec: AgentSpec, thread_id: str, stored: StoredEvent) -> ThreadFold | None:
    """The fold a saved reading holds, or None for a reading saved before readings were
    sealed (the log is read instead). SPEC rule 10: damage raises, naming the thread and event."""
    what = f"saved reading at record {stored.seq}"
    digest, body = unseal(stored.payload)
    if digest is not None:
        try:
            expected = link(GENESIS, thread_id, stored.seq, "reading", stored.created_at, body)
        except (OverflowError, TypeError, UnicodeEncodeError) as exc:
            raise SerializationError(
                f"cannot load thread {thread_id!r}, {what}: a column cannot be hashed ({exc})",
                thread_id=thread_id,
                seq=stored.seq,
            ) from None
        if digest != expected:
            raise SerializationError(
                f"cannot load thread {thread_id!r}, {what}: it does not match its hash (damaged)",
                thread_id=thread_id,
                seq=stored.seq,
            )
    raw = unpack_payload(body, thread_id, what, stored.seq)
    data = loads(raw, thread_id=thread_id, seq=stored.seq, record=what)
    if digest is None:  # saved before readings were sealed: checked, then not trusted
        from_reading(thread_id, spec.reducers, data, stored.seq, sealed=False)
        return None
    if isinstance(data, dict) and "decided" not in data:
        return None  # saved before answers were bound to calls (rule 19): the log has them
    return from_reading(thread_id, spec.reducers, data, stored.seq, sealed=True)


def from_reading(
    thread_id: str, reducers: Mapping[str, Reducer], data: Any, seq: int, *, sealed: bool = True
) -> ThreadFold:
    """The fold :func:`to_reading` saved at event ``seq``, exactly as folding the log gives it.

    ``sealed``: the reading was stored with a hash, and holds the chain's (a reading
    saved before that has none to give).
    """
    fold = _restore(thread_id, reducers, data, seq, "saved reading")
    try:
        if int(data["head_seq"]) != seq:
            raise ValueError(f"it holds the reading at event {data['head_seq']}")
        checkpoint_seq, parent, at, kind, writes = data["checkpoint"]
        if writes is not None and not isinstance(writes, dict):
            raise TypeError("checkpoint writes must be an object")
        fold.checkpoint_seq, fold.parent_checkpoint_seq = int(checkpoint_seq), int(parent)
        fold.checkpoint_at, fold.checkpoint_kind, fold.checkpoint_writes = float(at), str(kind), writes
        fold.updated_at = float(data["updated_at"])
        fold.base_seq = int(data["base_seq"])
        if sealed:
            fold.chain = bytes.fromhex(data["chain"])
            if len(fold.chain) != len(GENESIS):
                raise ValueError("its chain hash has the wrong length")
            fold.chain_sealed = True
    except (KeyError, TypeError, ValueError) as exc:
        raise SerializationError(
            f"cannot load thread {thread_id!r}, saved reading at record {seq}: damaged "
            f"({type(exc).__name__}: {exc})",
            thread_id=thread_id,
            seq=seq,
        ) from None
    fold.reading_seq = seq
    return fold


def from_snapshot(thread_id: str, reducers: Mapping[str, Reducer], event: Event) -> ThreadFold:
    """The reading a ``snapshot`` event holds, positioned at that event."""
    state = event.data.get("state") if isinstance(event.data, dict) else None
    fold = _restore(thread_id, reducers, state, event.seq, "record")
    fold.head_seq = fold.checkpoint_seq = fold.base_seq = event.seq
    fold.updated_at = fold.checkpoint_at = event.created_at
    fold.checkpoint_kind = "snapshot"
    return fold


def _restore(thread_id: str, reducers: Mapping[str, Reducer], state: Any, seq: int, what: str) -> ThreadFold:
    """A fold holding the state of :func:`to_snapshot` (``what`` names it in errors)."""
    fold = ThreadFold(thread_id, reducers)
    try:
        if not isinstance(state, dict):
            raise TypeError("the state must be an object")
        fold.restore_values(dict(state["values"]))
        fold.next = as_next(state["next"])
        fold.metadata = dict(state["metadata"])
        fold.created_at = float(state["created_at"])
        fold.checkpoint_count = int(state["checkpoints"])
        fold.last_step = state.get("last_step")
        interrupts = [
            InterruptRecord(**{**r, "index": int(r["index"]), "seq": int(r["seq"])})
            for r in state["step_interrupts"]
        ]
        fold.step_interrupts = {r.id: r for r in interrupts}
        fold.pending = {i: fold.step_interrupts[i] for i in state["pending"]}
        fold.answers = dict(state["answers"])
        fold.answered_ids = set(state["answered_ids"])
        fold.superseded_ids = set(state["superseded_ids"])
        results = state["task_results"]
        if not all(isinstance(m, ToolMessage) for m in results):
            raise TypeError("the snapshot's tool results must be ToolMessages")
        fold.task_results = {m.tool_call_id: m for m in results}
        fold.started = {s["task"]: StartedTool(**s) for s in state["started"]}
        # a snapshot made before answers were bound to calls holds none: those calls are asked again
        fold.decided = _answers(state.get("decided", ()))
        fold.used = _answers(state.get("used", ()))
        fold.votes = _votes(state.get("votes", {}), fold.pending)
        started_by = state.get("started_by")
        if started_by is not None and not isinstance(started_by, str):
            raise TypeError("started_by must be a string")
        fold.started_by = started_by
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        label = f"record {seq}: damaged snapshot" if what == "record" else f"{what} at record {seq}: damaged"
        raise SerializationError(
            f"cannot load thread {thread_id!r}, {label} ({type(exc).__name__}: {exc})",
            thread_id=thread_id,
            seq=seq,
        ) from None
    fold.head_seq = seq
    return fold


def _answers(raw: Any) -> dict[str, Answer]:
    if not isinstance(raw, list):
        raise TypeError("answers must be a list")
    answers = [Answer(**item) for item in raw]
    for answer in answers:
        if not isinstance(answer.call_id, str) or not isinstance(answer.decision, dict):
            raise TypeError("an answer needs a call id and a decision")
    return {answer.call_id: answer for answer in answers}


def _votes(raw: Any, pending: Mapping[str, InterruptRecord]) -> dict[str, list[tuple[Any, Any]]]:
    if not isinstance(raw, dict):
        raise TypeError("votes must be an object")
    out: dict[str, list[tuple[Any, Any]]] = {}
    for interrupt_id, votes in raw.items():
        if interrupt_id not in pending or not isinstance(votes, list):
            raise ValueError(f"votes for interrupt {interrupt_id!r}, which is not pending")
        out[interrupt_id] = [(answer, reviewer) for answer, reviewer in votes]
    return out
