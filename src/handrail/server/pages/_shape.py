"""What a review asks, read from an interrupt's value: its calls and the decisions each allows.

Four shapes reach the web inbox:

``batched``          a ``HITLRequest`` (``action_requests`` + ``review_configs``); answered
                     with ``{"decisions": [...]}``, one per call, in order;
``per_call``         ``{"type": "tool_approval", ...}``; answered with one decision;
``outcome_unknown``  a call that began and never ended (SPEC rule 9): approve (run it
                     again), respond (give its result) or reject; one decision;
``custom``           an ``interrupt(value)`` of the application's own; answered with any
                     value (the page offers text or JSON).

Each call's argument schema is the one its review config carries, else the agent's own
tool's schema, else none (then arguments are edited as JSON).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from handrail.agent import Agent

__all__ = ["DECISION_LABELS", "CallReview", "ReviewShape", "read_shape"]

DECISION_LABELS = {"approve": "Approve", "edit": "Edit", "reject": "Reject", "respond": "Respond"}
_OUTCOME_UNKNOWN = ("approve", "respond", "reject")


@dataclass(frozen=True, slots=True)
class CallReview:
    """One call under review: the tool, its arguments as proposed, the decisions allowed."""

    index: int
    name: str
    args: Any
    description: str
    tool_call_id: str | None
    allowed: tuple[str, ...]
    schema: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class ReviewShape:
    """The calls of one interrupt and how its answer is written."""

    kind: str
    calls: tuple[CallReview, ...]
    value: Any

    @property
    def tools(self) -> list[str]:
        """The tool names asked about, in order."""
        return [c.name for c in self.calls]

    def answer(self, decisions: list[dict[str, Any]]) -> Any:
        """The answer to send for one decision per call (in order)."""
        return {"decisions": decisions} if self.kind == "batched" else decisions[0]


def _schema(agent: Agent | None, name: str, config: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    schema = config.get("args_schema") if config else None
    if isinstance(schema, Mapping):
        return schema
    tool = agent.tools.get(name) if agent is not None else None
    found = getattr(tool, "json_schema", None)
    return found if isinstance(found, Mapping) else None


def read_shape(value: Any, agent: Agent | None = None) -> ReviewShape:
    """The review an interrupt's ``value`` asks for."""
    if not isinstance(value, Mapping):
        return ReviewShape("custom", (), value)
    requests = value.get("action_requests")
    if isinstance(requests, list):
        configs = value.get("review_configs")
        listed = configs if isinstance(configs, list) else []
        by_name = {str(c.get("action_name")): c for c in listed if isinstance(c, Mapping)}
        calls = []
        for index, request in enumerate(requests):
            if not isinstance(request, Mapping):
                continue
            name = str(request.get("name", ""))
            config = by_name.get(name)
            allowed = _allowed((config or {}).get("allowed_decisions"))
            calls.append(
                CallReview(
                    index,
                    name,
                    request.get("args"),
                    str(request.get("description") or ""),
                    _str_or_none(request.get("tool_call_id")),
                    allowed,
                    _schema(agent, name, config),
                )
            )
        return ReviewShape("batched", tuple(calls), value)
    kind = value.get("type")
    if kind in ("tool_approval", "outcome_unknown") and isinstance(value.get("name"), str):
        name = value["name"]
        per_call = kind == "tool_approval"
        allowed = _allowed(value.get("allowed_decisions")) if per_call else _OUTCOME_UNKNOWN
        call = CallReview(
            0,
            name,
            value.get("args"),
            str(value.get("description") or ""),
            _str_or_none(value.get("tool_call_id")),
            allowed,
            _schema(agent, name, None),
        )
        return ReviewShape("per_call" if kind == "tool_approval" else "outcome_unknown", (call,), value)
    return ReviewShape("custom", (), value)


def _allowed(decisions: Any) -> tuple[str, ...]:
    listed = decisions if isinstance(decisions, (list, tuple)) else ()
    return tuple(str(d) for d in listed if d in DECISION_LABELS)


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None
