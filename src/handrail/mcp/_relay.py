"""The gateway's model: it proposes exactly the call an MCP client made, then stops.

A gated ``tools/call`` becomes a thread of the gateway's agent (``handrail.mcp.gateway``):
its input is one :class:`~handrail.messages.HumanMessage` that says who called what and
carries the call itself under :data:`CALL_KEY`. The relay model answers that message
with one ``AIMessage`` holding that one tool call, with the client's arguments as sent,
so the review policy gates it as it gates any model's call; after the call's
``ToolMessage`` it answers with an empty message, which ends the run. It never invents
a call: a message without a call gets the empty answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from handrail.messages import AIMessage, BaseMessage, HumanMessage, ToolCall
from handrail.models.base import ChatModel, ToolSpec

__all__ = ["CALL_KEY", "RelayModel", "call_message"]

CALL_KEY = "handrail_mcp_call"
"""Where the input message keeps the client's call: ``{"name", "arguments", "id"}``."""


class RelayModel(ChatModel):
    """A model that proposes the call its input message carries, and nothing else.

    Example::

        message = call_message(name="write_note", arguments={"text": "hi"}, call_id="c1",
                               client="claude-code 1.2", server="notes")
        RelayModel().invoke([message]).tool_calls[0]["name"]      # 'write_note'
    """

    provider = "handrail"
    model_name = "mcp-relay"

    def invoke(
        self,
        messages: Sequence[BaseMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: Any = None,
        **settings: Any,
    ) -> AIMessage:
        """The carried call when the last message carries one; else an empty answer."""
        last = messages[-1] if messages else None
        call = last.additional_kwargs.get(CALL_KEY) if isinstance(last, HumanMessage) else None
        if not isinstance(call, Mapping):
            return AIMessage("")
        proposed = ToolCall(
            name=str(call["name"]), args=dict(call["arguments"]), id=str(call["id"]), type="tool_call"
        )
        return AIMessage("", tool_calls=[proposed])


def call_message(
    *, name: str, arguments: Mapping[str, Any], call_id: str, client: str, server: str
) -> HumanMessage:
    """The input message of a gated call: what reviewers read, and the call itself."""
    shown = orjson.dumps(dict(arguments), option=orjson.OPT_INDENT_2).decode()
    text = f"MCP client {client} called tool `{name}` of server {server!r} with:\n{shown}"
    carried = {"name": name, "arguments": dict(arguments), "id": call_id}
    return HumanMessage(text, additional_kwargs={CALL_KEY: carried})
