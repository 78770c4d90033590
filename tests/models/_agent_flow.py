"""One reviewed run, driven four ways (invoke, stream, ainvoke, astream), for every adapter.

The model proposes ``write_file`` (reviewed) and ``read_data`` (not reviewed) in one
turn; the run pauses; the reviewer edits the write; the run resumes, both tools run, and
the model answers. Tests queue the provider replies and check what the server received.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from handrail import (
    Agent,
    AIMessageChunk,
    ChatModel,
    Command,
    HumanInTheLoopMiddleware,
    InMemorySaver,
    Interrupt,
    Tool,
    create_agent,
    tool,
)

USER_TEXT = "Save a note and read the users table"
SYSTEM_PROMPT = "You are careful with files."
EDITED_ARGS = {"path": "b.txt", "content": "hello"}
EDIT = {"type": "edit", "edited_action": {"name": "write_file", "args": EDITED_ARGS}}
FINAL_TEXT = "Saved the note to b.txt and read 3 users."


def make_tools(ran: list[tuple[str, dict[str, Any]]]) -> list[Tool]:
    @tool
    def write_file(path: str, content: str) -> str:
        """Write text to a file.

        Args:
            path: Where to write.
            content: What to write.
        """
        ran.append(("write_file", {"path": path, "content": content}))
        return f"wrote {len(content)} bytes to {path}"

    @tool
    def read_data(table: str) -> str:
        """Read rows from a table."""
        ran.append(("read_data", {"table": table}))
        return f"3 rows from {table}"

    return [write_file, read_data]


def reviewed_agent(model: ChatModel | Any, tools: list[Any]) -> Agent:
    return create_agent(
        model,
        tools,
        system_prompt=SYSTEM_PROMPT,
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"write_file": True, "read_data": False})],
        checkpointer=InMemorySaver(),
    )


@dataclass
class Outcome:
    interrupts: list[Interrupt]
    final: dict[str, Any]
    tokens: list[AIMessageChunk] = field(default_factory=list)
    metadata: list[dict[str, Any]] = field(default_factory=list)


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def _inputs() -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": USER_TEXT}]}


def _resume(interrupts: list[Interrupt]) -> Command:
    assert len(interrupts) == 1, interrupts
    return Command(resume={interrupts[0].id: {"decisions": [EDIT]}})


def run_sync(agent: Agent, how: str, thread_id: str = "thread-1") -> Outcome:
    """Pause, edit, resume, finish through ``invoke`` or ``stream(["messages", "updates"])``."""
    config = _config(thread_id)
    if how == "invoke":
        first = agent.invoke(_inputs(), config)
        interrupts = list(first["__interrupt__"])
        final = agent.invoke(_resume(interrupts), config)
        return Outcome(interrupts, final)
    outcome = Outcome([], {})
    for payload in (_inputs(), None):
        if payload is None:
            payload = _resume(outcome.interrupts)
        for mode, chunk in agent.stream(payload, config, stream_mode=["messages", "updates"]):
            _collect(outcome, mode, chunk)
    outcome.final = agent.get_state(config).values
    return outcome


async def run_async(agent: Agent, how: str, thread_id: str = "thread-1") -> Outcome:
    """:func:`run_sync` through ``ainvoke`` or ``astream``."""
    config = _config(thread_id)
    if how == "ainvoke":
        first = await agent.ainvoke(_inputs(), config)
        interrupts = list(first["__interrupt__"])
        final = await agent.ainvoke(_resume(interrupts), config)
        return Outcome(interrupts, final)
    outcome = Outcome([], {})
    for payload in (_inputs(), None):
        if payload is None:
            payload = _resume(outcome.interrupts)
        async for mode, chunk in agent.astream(payload, config, stream_mode=["messages", "updates"]):
            _collect(outcome, mode, chunk)
    outcome.final = (await agent.aget_state(config)).values
    return outcome


def _collect(outcome: Outcome, mode: str, chunk: Any) -> None:
    if mode == "messages":
        token, metadata = chunk
        outcome.tokens.append(token)
        outcome.metadata.append(metadata)
    elif mode == "updates" and "__interrupt__" in chunk:
        outcome.interrupts.extend(chunk["__interrupt__"])


def check_outcome(outcome: Outcome, ran: list[tuple[str, dict[str, Any]]]) -> None:
    """What every adapter's reviewed run must end with."""
    (interrupt,) = outcome.interrupts
    requests = interrupt.value["action_requests"]
    assert [r["name"] for r in requests] == ["write_file"]
    assert requests[0]["args"] == {"path": "a.txt", "content": "hi"}
    assert ran == [("write_file", EDITED_ARGS), ("read_data", {"table": "users"})]
    messages = outcome.final["messages"]
    assert [m.type for m in messages] == ["human", "ai", "tool", "tool", "ai"]
    assert messages[-1].text == FINAL_TEXT
    # the AI message keeps the model's own proposal; the result says what ran instead
    assert messages[1].tool_calls[0]["args"] == {"path": "a.txt", "content": "hi"}
    assert "b.txt" in messages[2].text
    assert messages[3].text == "3 rows from users"
    assert "__interrupt__" not in outcome.final
