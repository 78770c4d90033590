"""What the gateway answers an MCP client for a gated call, read from the call's thread.

The rules:

- An approved call that ran answers with the upstream's result as the upstream sent it
  (content, structured content, ``isError``, ``_meta``), kept whole in the ToolMessage's
  artifact (``upstreams.ForwardTool``). After an edit, a text block first says what ran
  instead (the edit notice the model of an agent would read).
- A call that ran and failed in the gateway (the upstream crashed, hung or refused)
  answers with an error result carrying the ToolMessage's text.
- A respond answers with the reviewer's message as a successful text result.
- A reject answers with an error result: the rejection, who rejected it and through
  which channel. An expiry and a withdrawal say so, and that the tool did not run.
- While the review waits, the answer is an error result (``isError``: it needs no
  structured content, whatever ``tools/list`` said) that says the review is pending and
  names :data:`AWAIT_TOOL` and the review id to collect the outcome with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mcp_types as types

from handrail.mcp.upstreams import RESULT_KEY
from handrail.messages import ToolMessage
from handrail.review.policy import EDIT_MARK
from handrail.types import AuditEntry

__all__ = ["AWAIT_TOOL", "await_tool", "error_result", "pending_result", "reply_for"]

AWAIT_TOOL = "handrail_await_review"
"""The tool the gateway adds: it waits for a pending review's outcome and returns it."""

REVIEW_META = "handrail/review"
"""The ``_meta`` key of the gateway's own replies: ``{"review_id", "status"}``."""


def error_result(
    text: str, *, review_id: str | None = None, status: str | None = None
) -> types.CallToolResult:
    """An ``isError`` result with one text block (and the review it is about, if any)."""
    meta = {REVIEW_META: {"review_id": review_id, "status": status}} if review_id else None
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], is_error=True, _meta=meta
    )


def pending_result(review_id: str, tool: str, waited: float) -> types.CallToolResult:
    """The reply when the hold ran out: pending, and how to collect the outcome."""
    return error_result(
        f"Review pending: the call to `{tool}` is waiting for a person to review it (review "
        f"{review_id}; waited {waited:.0f} s). It has not run yet. To wait for the outcome, call the "
        f'tool `{AWAIT_TOOL}` with {{"review_id": "{review_id}"}}. Do not call `{tool}` again: that '
        "would ask for a second review.",
        review_id=review_id,
        status="pending",
    )


def await_tool() -> types.Tool:
    """The ``tools/list`` entry of :data:`AWAIT_TOOL`."""
    return types.Tool(
        name=AWAIT_TOOL,
        title="Wait for a review",
        description=(
            "Wait for the outcome of a tool call that is waiting for a person's review, and return "
            "that outcome: the tool's result once approved, or why it did not run. Give the review_id "
            "from the 'Review pending' reply. It waits a bounded time, then says the review is still "
            "pending; call it again to keep waiting."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "review_id": {"type": "string", "description": "The review id of the pending call."}
            },
            "required": ["review_id"],
            "additionalProperties": False,
        },
        annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    )


def reply_for(message: ToolMessage, review_id: str, trail: list[AuditEntry]) -> types.CallToolResult:
    """The reply for the call's ``ToolMessage`` (``trail``: the thread's audit trail)."""
    artifact = message.artifact
    if isinstance(artifact, Mapping) and isinstance(artifact.get(RESULT_KEY), Mapping):
        result = types.CallToolResult.model_validate(artifact[RESULT_KEY])
        notice = _edit_notice(message)
        if notice:
            notice_block = types.TextContent(type="text", text=notice)
            result = result.model_copy(update={"content": [notice_block, *result.content]})
        return result
    answer = next((e for e in reversed(trail) if e.event == "answered"), None)
    decision = _decision(answer)
    text = message.text
    if message.status != "error" and decision == "respond":
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])
    if message.status != "error":  # a result without the upstream's (a rule-9 respond, say)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])
    if answer is not None and decision == "reject" and answer.kind not in ("expired", "withdrawn"):
        who = _who(answer.reviewer)
        via = f" via {answer.channel}" if answer.channel else ""
        text = f"{text}\n(Rejected by {who}{via}, review {review_id}.)"
        return error_result(text, review_id=review_id, status="rejected")
    if answer is not None and answer.kind == "expired":
        return error_result(text, review_id=review_id, status="expired")
    if answer is not None and answer.kind == "withdrawn":
        return error_result(text, review_id=review_id, status="withdrawn")
    return error_result(text, review_id=review_id, status="failed")


def _edit_notice(message: ToolMessage) -> str:
    mark = message.additional_kwargs.get(EDIT_MARK)
    if not isinstance(mark, Mapping):
        return ""
    content = message.content
    if isinstance(content, str) and isinstance(mark.get("chars"), int):
        return content[: mark["chars"]].strip()
    if isinstance(content, list) and content:
        first = content[0]
        return (
            first
            if isinstance(first, str)
            else str(first.get("text", ""))
            if isinstance(first, Mapping)
            else ""
        )
    return ""


def _decision(answer: AuditEntry | None) -> str | None:
    if answer is None:
        return None
    value: Any = answer.value
    if isinstance(value, Mapping) and isinstance(value.get("decisions"), list) and value["decisions"]:
        value = value["decisions"][0]
    kind = value.get("type") if isinstance(value, Mapping) else None
    return kind if isinstance(kind, str) else None


def _who(reviewer: Any) -> str:
    if isinstance(reviewer, Mapping) and isinstance(reviewer.get("id"), str):
        return str(reviewer["id"])
    if isinstance(reviewer, str):
        return reviewer
    return "a reviewer"
