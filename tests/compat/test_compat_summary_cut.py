"""The summary's cut never separates a tool call from its result, whatever the conversation."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from handrail import AIMessage, HumanMessage, ToolMessage
from handrail.messages import BaseMessage
from handrail.middleware._summarization import _safe_cutoff


@st.composite
def conversations(draw: st.DrawFn) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for turn in range(draw(st.integers(1, 8))):
        messages.append(HumanMessage(f"q{turn}"))
        for step in range(draw(st.integers(0, 3))):
            n = draw(st.integers(1, 3))
            ids = [f"c{turn}_{step}_{i}" for i in range(n)]
            messages.append(AIMessage("", tool_calls=[{"name": "t", "args": {}, "id": i} for i in ids]))
            messages += [ToolMessage("r", tool_call_id=i, name="t") for i in ids]
        messages.append(AIMessage(f"a{turn}"))
    return messages


@settings(max_examples=200, deadline=None)
@given(conversations(), st.data())
def test_every_kept_tool_result_keeps_the_call_that_asked_for_it(
    messages: list[BaseMessage], data: st.DataObject
) -> None:
    cutoff = _safe_cutoff(messages, data.draw(st.integers(0, len(messages))))
    kept = messages[cutoff:]
    kept_calls = {c["id"] for m in kept if isinstance(m, AIMessage) for c in m.tool_calls}
    assert all(m.tool_call_id in kept_calls for m in kept if isinstance(m, ToolMessage))
