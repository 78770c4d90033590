"""The feed's notices an append carries: reviews asked, voted on and answered, a run's end.

A store writes these rows to its feed in the same transaction as the events that cause
them (``commit.py``, ``checkpoint/base.py``), so a review asked or answered through any
process or channel is seen by every reader once, in commit order, and a crash loses
none. ``handrail.notify.events`` says which notice is which notification event; this
module says what each notice holds:

``review.requested``  an interrupt raised in the append: what was asked (its id, kind,
                      tools and value), who may decide and until when (rules 12, 15)
``review.decided``    an answer in the append, with what it answered when that is known
``review.expired``    the same, for an answer given by the clock (channel ``expiry``)
``review.approved``   one approval of a review that counts them (rule 14), with how far
                      its count has come
``run.finished``      the run's last append: its status and the thread's
"""

from __future__ import annotations

from typing import Any

from handrail.checkpoint.base import Notice, ThreadRecord
from handrail.checkpoint.serde import dumps
from handrail.review.quorum import progress
from handrail.runtime._pending import InterruptRecord
from handrail.runtime.effects import Env
from handrail.runtime.events import Event, pack_payload, tools_named_by

__all__ = ["notices_of"]


def notices_of(
    env: Env, events: list[Event], record: ThreadRecord, *, last: bool, failed: bool
) -> list[Notice]:
    """The feed's rows for an append of ``events`` that leaves the thread's row ``record``.

    ``last``: the run's last append (``failed``: made as it stops on an error).
    """
    notices: list[Notice] = []
    fold = env.fold
    assert fold is not None
    agent = record.metadata.get("assistant_id") or env.spec.name  # the agent the thread is of
    for event in events:
        if event.kind == "interrupt":
            asked = fold.pending.get(event.data["id"])
            if asked is not None:
                notices.append(_notice("review.requested", env, {**_asked(env, asked), "agent": agent}))
        elif event.kind == "resume":
            expired = event.data.get("channel") == "expiry"
            for interrupt_id in event.data["answers"]:
                answered = {
                    "interrupt_id": interrupt_id,
                    "reviewer": event.data.get("reviewer"),
                    "channel": event.data.get("channel"),
                    "answer": event.data["answers"][interrupt_id],
                    "agent": agent,
                }
                asked = env.asked.pop(interrupt_id, None) or fold.pending.get(interrupt_id)
                if asked is not None:  # what was asked, so a notification names the tools
                    answered = {**_asked(env, asked), **answered}
                notices.append(_notice("review.expired" if expired else "review.decided", env, answered))
        elif event.kind == "approval":
            voted = {
                "interrupt_id": event.data["interrupt"],
                "reviewer": event.data.get("reviewer"),
                "channel": event.data.get("channel"),
                "agent": agent,
            }
            asked = fold.pending.get(voted["interrupt_id"])
            if asked is not None:  # what was asked, and how far its count has come (rule 14)
                counted = progress(asked.value, asked.terms, fold.votes.get(asked.id, ()))
                voted = {**_asked(env, asked), **voted, "approvals": [c.as_json() for c in counted]}
            notices.append(_notice("review.approved", env, voted))
    if last:
        ended: dict[str, Any] = {"run_id": env.run_id, "status": "error" if failed else "success"}
        ended["agent"] = agent
        notices.append(_notice("run.finished", env, {**ended, "thread_status": record.status}))
    return notices


def _notice(kind: str, env: Env, data: dict[str, Any]) -> Notice:
    # packed as an event's payload is (a review's notice holds its value, which can be large)
    return Notice(kind, pack_payload(dumps(data, where=f"a notice of thread {env.thread_id!r}")))


def _asked(env: Env, record: InterruptRecord) -> dict[str, Any]:
    tools = list(tools_named_by(record.value))
    roles = {tool: policy.reviewers for tool in tools if (policy := env.spec.policies.by_tool.get(tool))}
    asked = {"interrupt_id": record.id, "kind": record.kind, "tools": tools, "value": record.value}
    # who may decide, and until when: what a notification says (rules 12, 15)
    asked["reviewers"] = {tool: list(found) for tool, found in roles.items() if found is not None}
    expires = record.expires_at
    if expires is not None:
        asked["expires_at"] = expires
    return asked
