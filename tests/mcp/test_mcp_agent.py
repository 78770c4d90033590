"""MCP tools in gated agents: a review policy holds them like any tool, and an approved call
reaches the server once (on memory, SQLite and PostgreSQL; resumed by a new agent with
new sessions, or by a new process), a rejected one never. The upstream server's ledger
says what really ran."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _mcp_support import Ledger, fresh_id, gated_agent, saver_for, upstream_command

from handrail import Command, ToolMessage
from handrail.errors import AlreadyAnsweredError, InvalidDecisionError
from handrail.mcp import McpTools, load_tools, load_tools_sync

from _support import call, config, turn

APPROVE = {"decisions": [{"type": "approve"}]}
REJECT = {"decisions": [{"type": "reject", "message": "keep that note"}]}
BACKENDS = ["memory", "sqlite", "postgres"]


def tool_results(out: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in out["messages"] if isinstance(m, ToolMessage)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_approved_mcp_call_runs_once_when_a_new_agent_with_new_sessions_resumes(
    backend: str, tmp_path: Path, notes: McpTools, ledger: Ledger
) -> None:
    note = fresh_id()
    with saver_for(backend, tmp_path) as saver:
        agent = gated_agent(notes, [turn(call("delete_note", "c1", note_id=note))], saver)
        out = agent.invoke({"messages": ["delete it"]}, config("t-approve"))
        (pending,) = out["__interrupt__"]
        assert pending.value["action_requests"][0]["name"] == "delete_note"
        assert pending.value["action_requests"][0]["args"] == {"note_id": note}
        assert ledger.runs("delete_note", note_id=note) == []  # held: nothing reached the server

        with load_tools_sync(command=upstream_command(), env=ledger.env, name="notes") as fresh:
            resumed = gated_agent(fresh, [], saver)
            out = resumed.invoke(Command(resume={pending.id: APPROVE}), config("t-approve"))
            with pytest.raises(AlreadyAnsweredError):  # a second answer runs nothing (rule 20)
                resumed.invoke(Command(resume={pending.id: APPROVE}), config("t-approve"))

    runs = ledger.runs("delete_note", note_id=note)
    assert len(runs) == 1
    (message,) = tool_results(out)
    assert (message.content, message.status, message.tool_call_id) == (
        f"deleted note {note}",
        "success",
        "c1",
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rejected_mcp_call_never_reaches_the_server(
    backend: str, tmp_path: Path, notes: McpTools, ledger: Ledger
) -> None:
    note = fresh_id()
    with saver_for(backend, tmp_path) as saver:
        agent = gated_agent(notes, [turn(call("delete_note", "c1", note_id=note))], saver)
        (pending,) = agent.invoke({"messages": ["delete it"]}, config("t-reject"))["__interrupt__"]
        out = agent.invoke(Command(resume={pending.id: REJECT}), config("t-reject"))

    assert ledger.runs("delete_note", note_id=note) == []
    (message,) = tool_results(out)
    assert message.status == "error" and "keep that note" in str(message.content)


def test_an_edit_sends_the_edited_arguments_checked_against_the_servers_schema(
    notes: McpTools, ledger: Ledger
) -> None:
    proposed, edited = fresh_id(), fresh_id()
    agent = gated_agent(notes, [turn(call("delete_note", "c1", note_id=proposed))], _memory())
    (pending,) = agent.invoke({"messages": ["delete it"]}, config())["__interrupt__"]

    def edit(note_id: Any) -> dict[str, Any]:
        action = {"name": "delete_note", "args": {"note_id": note_id}}
        return {"decisions": [{"type": "edit", "edited_action": action}]}

    with pytest.raises(InvalidDecisionError, match="note_id"):  # the server's schema says minimum 1
        agent.invoke(Command(resume={pending.id: edit(0)}), config())
    out = agent.invoke(Command(resume={pending.id: edit(edited)}), config())

    assert ledger.runs("delete_note", note_id=proposed) == []
    assert len(ledger.runs("delete_note", note_id=edited)) == 1
    assert f"deleted note {edited}" in str(tool_results(out)[0].content)


def test_the_web_inbox_edit_form_gets_the_servers_input_schema(notes: McpTools) -> None:
    from handrail.server.pages._shape import read_shape

    agent = gated_agent(notes, [turn(call("delete_note", "c1", note_id=fresh_id()))], _memory())
    (pending,) = agent.invoke({"messages": ["delete it"]}, config())["__interrupt__"]
    (review,) = read_shape(pending.value, agent).calls
    assert review.schema == notes.by_name("delete_note").json_schema
    assert review.schema["properties"]["note_id"]["minimum"] == 1


def test_interrupt_on_gates_mcp_tools_like_any_other_and_leaves_the_rest_alone(
    notes: McpTools, ledger: Ledger
) -> None:
    """read_notes is marked readOnlyHint by the server; the policy, not the hint, decides."""
    text, note = f"note {fresh_id()}", fresh_id()
    script = [turn(call("write_note", "c1", text=text)), turn(call("delete_note", "c2", note_id=note))]
    policy = {"delete_note": True, "write_note": False, "read_notes": True}
    agent = gated_agent(notes, script, _memory(), policy)
    out = agent.invoke({"messages": ["go"]}, config())
    assert len(ledger.runs("write_note", text=text)) == 1  # not gated: it ran at once
    assert [r["name"] for r in out["__interrupt__"][0].value["action_requests"]] == ["delete_note"]
    assert ledger.runs("delete_note", note_id=note) == []

    read = gated_agent(notes, [turn(call("read_notes", "c3"))], _memory(), policy)
    assert read.invoke({"messages": ["read"]}, config())["__interrupt__"]  # gated despite the hint


async def test_an_async_agent_over_http_tools_pauses_and_runs_the_approved_call_once(
    http_url: str, ledger: Ledger
) -> None:
    note = fresh_id()
    async with await load_tools(url=http_url, name="web") as tools:
        agent = gated_agent(tools, [turn(call("delete_note", "c1", note_id=note))], _memory())
        out = await agent.ainvoke({"messages": ["delete it"]}, config())
        assert ledger.runs("delete_note", note_id=note) == []
        out = await agent.ainvoke(Command(resume={out["__interrupt__"][0].id: APPROVE}), config())
    assert len(ledger.runs("delete_note", note_id=note)) == 1
    assert tool_results(out)[0].content == f"deleted note {note}"


def test_a_new_process_with_new_sessions_resumes_and_runs_the_approved_call_once(
    tmp_path: Path, notes: McpTools, ledger: Ledger
) -> None:
    from handrail.checkpoint.sqlite import SqliteSaver

    note, db = fresh_id(), tmp_path / "threads.db"
    saver = SqliteSaver(db)
    try:
        agent = gated_agent(notes, [turn(call("delete_note", "c1", note_id=note))], saver)
        (pending,) = agent.invoke({"messages": ["delete it"]}, config("t-process"))["__interrupt__"]
    finally:
        saver.close()
    assert ledger.runs("delete_note", note_id=note) == []

    helper = Path(__file__).with_name("resume_agent.py")
    done = subprocess.run(
        [sys.executable, str(helper), str(db), "t-process", pending.id, str(ledger.path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [f"deleted note {note}"]
    assert len(ledger.runs("delete_note", note_id=note)) == 1


def _memory() -> Any:
    from handrail import InMemorySaver

    return InMemorySaver()


def test_a_policy_file_gates_mcp_tools_by_their_prefixed_names(tmp_path: Path, ledger: Ledger) -> None:
    """docs/mcp.md says a policy file names MCP tools as any tool, prefix included, with its
    allowed decisions: judged by what reached the server."""
    from handrail import InMemorySaver, ScriptedModel, create_agent

    first, second = fresh_id(), fresh_id()
    path = tmp_path / "handrail.toml"
    path.write_text(
        '[agents.notes.interrupt_on]\nn_delete_note = { allowed_decisions = ["approve", "reject"] }\n'
    )
    with load_tools_sync(command=upstream_command(), env=ledger.env, name="n", prefix=True) as tools:
        script = [turn(call("n_delete_note", "a", note_id=first), call("n_delete_note", "b", note_id=second))]
        agent = create_agent(
            ScriptedModel([*script, {"content": "done"}]),
            tools=tools,
            checkpointer=InMemorySaver(),
            name="notes",
            policy_file=path,
        )
        (pending,) = agent.invoke({"messages": ["delete both"]}, config("t-file"))["__interrupt__"]
        assert [r["name"] for r in pending.value["action_requests"]] == ["n_delete_note", "n_delete_note"]
        assert ledger.runs("delete_note", note_id=first) == ledger.runs("delete_note", note_id=second) == []
        edit = {"type": "edit", "edited_action": {"name": "n_delete_note", "args": {"note_id": "other"}}}
        with pytest.raises(InvalidDecisionError):  # the file allows approve and reject only
            agent.invoke(Command(resume={pending.id: {"decisions": [edit, edit]}}), config("t-file"))
        answer = {"decisions": [{"type": "approve"}, {"type": "reject", "message": "not that one"}]}
        agent.invoke(Command(resume={pending.id: answer}), config("t-file"))
    assert len(ledger.runs("delete_note", note_id=first)) == 1
    assert ledger.runs("delete_note", note_id=second) == []
