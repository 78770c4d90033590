"""What the human-in-the-loop middleware produces, in LangChain's form (SPEC rule 4).

LangChain v1's ``HumanInTheLoopMiddleware`` (langchain 1.5) prepends a fixed notice to the
result of an edited call, marks the ToolMessages that reject and respond decisions make
with ``additional_kwargs["lc_source"]`` / ``["lc_data"]``, and raises per-call interrupts
with ``type``, ``tool_call_id``, ``name``, ``args`` and ``description``. A model or UI
written against LangChain reads handrail's output the same way.
"""

from __future__ import annotations

from typing import Any

from handrail import Command, HumanInTheLoopMiddleware, InMemorySaver, ScriptedModel, create_agent, tool
from handrail.middleware.human_in_the_loop import DEFAULT_EDIT_NOTICE

# The text of LangChain's default edit notice (langchain/agents/middleware/human_in_the_loop.py).
LANGCHAIN_EDIT_NOTICE = (
    "Note: a human reviewer replaced this tool call before it ran. The call recorded in "
    "your message is the one you produced, not the one that executed. This was "
    "intentional and authorized. Do not re-issue your original call."
)


@tool
def send_email(to: str, body: str) -> str:
    """Send an email."""
    return f"Email sent to {to}."


def _agent(mode: str = "batched", n_calls: int = 1) -> Any:
    calls = [
        {"name": "send_email", "args": {"to": f"a{i}@x.org", "body": "Hi"}, "id": f"c{i}"}
        for i in range(n_calls)
    ]
    return create_agent(
        ScriptedModel([{"content": "", "tool_calls": calls}, {"content": "Done."}]),
        tools=[send_email],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"send_email": True}, interrupt_mode=mode)],
        checkpointer=InMemorySaver(),
    )


def test_default_edit_notice_is_langchains_word_for_word_and_laid_out_the_same() -> None:
    assert DEFAULT_EDIT_NOTICE == LANGCHAIN_EDIT_NOTICE
    agent = _agent()
    config: Any = {"configurable": {"thread_id": "edit"}}
    agent.invoke({"messages": ["mail"]}, config)
    edited = {
        "type": "edit",
        "edited_action": {"name": "send_email", "args": {"to": "b@x.org", "body": "Hi"}},
    }
    result = agent.invoke(Command(resume={"decisions": [edited]}), config)
    assert result["messages"][2].content == (
        f"{LANGCHAIN_EDIT_NOTICE} Executed instead: send_email with arguments "
        '{"to": "b@x.org", "body": "Hi"}.\n\nTool response:\nEmail sent to b@x.org.'
    )


def test_reject_and_respond_messages_carry_langchains_markers() -> None:
    agent = _agent(n_calls=3)
    config: Any = {"configurable": {"thread_id": "markers"}}
    agent.invoke({"messages": ["mail"]}, config)
    decisions = [{"type": "reject"}, {"type": "respond", "message": "Already sent."}, {"type": "approve"}]
    result = agent.invoke(Command(resume={"decisions": decisions}), config)
    rejected, responded, ran = result["messages"][2:5]
    assert rejected.additional_kwargs == {
        "lc_source": "hitl_interrupt_decision",
        "lc_data": {"decision": "reject"},
    }
    assert responded.additional_kwargs == {
        "lc_source": "hitl_interrupt_decision",
        "lc_data": {"decision": "respond"},
    }
    assert (rejected.status, responded.status) == ("error", "success")
    assert ran.additional_kwargs == {}
    # the markers are saved with the thread
    saved = agent.get_state(config).values["messages"][2]
    assert saved.additional_kwargs["lc_source"] == "hitl_interrupt_decision"


def test_per_call_interrupt_has_langchains_fields() -> None:
    agent = _agent(mode="per_call")
    config: Any = {"configurable": {"thread_id": "per-call"}}
    (pending,) = agent.invoke({"messages": ["mail"]}, config)["__interrupt__"]
    langchain_fields = {"type", "tool_call_id", "name", "args", "description"}
    assert langchain_fields <= set(pending.value)
    assert pending.value["type"] == "tool_approval" and pending.value["tool_call_id"] == "c0"
    # handrail adds one field: the decisions the reviewer may send
    assert set(pending.value) - langchain_fields == {"allowed_decisions"}
    result = agent.invoke(Command(resume={pending.id: {"type": "reject", "message": "no"}}), config)
    assert result["messages"][2].additional_kwargs["lc_data"] == {"decision": "reject"}
