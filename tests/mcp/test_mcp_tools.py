"""An MCP server's tools as handrail tools: schemas, descriptions, annotations, results,
several servers, the sync and async forms, and servers that fail, hang or are hostile."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import mcp_types as types
import pytest
from _mcp_support import Ledger, fresh_id, gated_agent, upstream_command

from handrail import Tool, ToolMessage
from handrail.errors import ConfigurationError
from handrail.mcp import (
    McpCallError,
    McpConnectError,
    McpServerConfig,
    McpTool,
    McpTools,
    load_tools,
    load_tools_sync,
)
from handrail.mcp._results import result_message
from handrail.mcp._tools import build_tools
from handrail.tools import ToolArgumentsError

from _support import call, turn

NOTE_TOOLS = (
    "write_note",
    "read_notes",
    "delete_note",
    "note_stats",
    "archive_note",
    "slow_note",
    "note_picture",
    "crash_server",
    "whoami",
)


# What the server lists ------------------------------------------------------------------
def test_the_tools_keep_the_servers_names_schemas_descriptions_and_annotations(notes: McpTools) -> None:
    assert notes.names == NOTE_TOOLS and notes.servers == ("notes",) and notes.skipped == ()
    delete = notes.by_name("delete_note")
    assert isinstance(delete, Tool) and isinstance(delete, McpTool)
    assert (delete.server, delete.remote_name) == ("notes", "delete_note")
    assert delete.description == "Delete a note for good."
    schema = {
        "type": "object",
        "properties": {
            "note_id": {
                "description": "The note's number.",
                "minimum": 1,
                "title": "Note Id",
                "type": "integer",
            }
        },
        "required": ["note_id"],
    }
    assert delete.json_schema == schema
    assert delete.spec() == {
        "name": "delete_note",
        "description": "Delete a note for good.",
        "parameters": schema,
    }
    assert delete.metadata["mcp"] == {
        "server": "notes",
        "name": "delete_note",
        "title": "Delete a note",
        "annotations": {"destructiveHint": True, "idempotentHint": True, "openWorldHint": False},
    }
    assert notes.by_name("read_notes").metadata["mcp"]["annotations"] == {
        "title": "Read the notes",
        "readOnlyHint": True,
    }
    assert notes.by_name("write_note").description.startswith("Save a note.")


def test_idempotent_hint_never_makes_a_tool_idempotent_only_the_user_does(
    notes: McpTools, http_url: str
) -> None:
    """SPEC rule 9: the server's idempotentHint is a hint from an untrusted server."""
    assert notes.by_name("delete_note").metadata["mcp"]["annotations"]["idempotentHint"] is True
    assert not any(t.idempotent for t in notes)
    with load_tools_sync(url=http_url, idempotent=["write_note"]) as marked:
        assert [t.name for t in marked if t.idempotent] == ["write_note"]
    with pytest.raises(ConfigurationError, match=r"idempotent= names \['delete_notes'\]"):
        load_tools_sync(url=http_url, idempotent=["delete_notes"])


# Calls and results ------------------------------------------------------------------------
def test_a_call_sends_tools_call_once_and_returns_the_servers_text(notes: McpTools, ledger: Ledger) -> None:
    text = f"buy milk {fresh_id()}"
    message = notes.by_name("write_note").invoke({"text": text})
    assert isinstance(message, ToolMessage) and message.status == "success"
    assert message.content.startswith("saved note ")
    assert len(ledger.runs("write_note", text=text)) == 1


def test_arguments_are_checked_against_the_servers_schema_before_anything_is_sent(
    notes: McpTools, ledger: Ledger
) -> None:
    delete = notes.by_name("delete_note")
    before = len(ledger.entries())
    with pytest.raises(ToolArgumentsError, match="note_id: 0 is less than the minimum of 1"):
        delete.invoke({"note_id": 0})
    with pytest.raises(ToolArgumentsError, match="'note_id' is a required property"):
        delete.invoke({})
    with pytest.raises(ToolArgumentsError, match="note_id: 'seven' is not of type 'integer'"):
        delete.invoke({"note_id": "seven"})
    with pytest.raises(ToolArgumentsError, match="arguments must be an object"):
        delete.validate_args(["note_id", 3])
    assert len(ledger.entries()) == before


def test_structured_content_is_the_artifact_and_the_text_what_the_model_reads(notes: McpTools) -> None:
    message = notes.by_name("note_stats").invoke({"tag": "x"})
    assert set(message.artifact) == {"count", "longest"} and isinstance(message.artifact["count"], int)
    assert '"count"' in message.content  # the server's text block (the JSON of its result)


def test_results_become_messages_by_the_documented_rules() -> None:
    structured_only = types.CallToolResult(content=[], structured_content={"rows": 3, "ok": True})
    assert result_message(structured_only, call_id="c", name="t").content == '{"rows":3,"ok":true}'
    texts = types.CallToolResult(content=[types.TextContent(text="one"), types.TextContent(text="two")])
    assert result_message(texts, call_id="c", name="t").content == "one\ntwo"
    embedded = types.CallToolResult(
        content=[
            types.EmbeddedResource(
                resource=types.TextResourceContents(uri="file:///a.txt", mime_type="text/plain", text="hello")
            ),
            types.AudioContent(data="AAAA" * 500, mime_type="audio/wav"),
        ]
    )
    assert result_message(embedded, call_id="c", name="t").content == (
        "[resource file:///a.txt (text/plain):]\nhello\n[audio: audio/wav, 1.5 kB, not shown]"
    )
    silent_error = types.CallToolResult(content=[], is_error=True)
    message = result_message(silent_error, call_id="c", name="t")
    assert message.status == "error" and "reported an error" in message.content


def test_an_is_error_result_is_an_error_tool_message_with_the_servers_text(
    notes: McpTools, ledger: Ledger
) -> None:
    note = fresh_id()
    message = notes.by_name("archive_note").invoke({"note_id": note})
    assert message.status == "error"
    assert message.content == f"cannot archive note {note}: the archive is full"
    assert len(ledger.runs("archive_note", note_id=note)) == 1


def test_blocks_that_are_not_text_are_summarised_never_copied(notes: McpTools) -> None:
    message = notes.by_name("note_picture").invoke({"note_id": 7})
    assert message.content.splitlines() == [
        "note 7:",
        "[image: image/png, 900.0 kB, not shown]",
        "[resource link: the note <notes://7> (text/plain)]",
        "[resource notes://7/scan (application/pdf): 59 bytes of binary data, not shown]",
    ]


# Transports, forms, several servers ------------------------------------------------------
async def test_tools_over_streamable_http_send_the_headers_given(http_url: str, ledger: Ledger) -> None:
    text = f"over http {fresh_id()}"
    tools = await load_tools(url=http_url, headers={"X-Handrail-Test": "hello"}, name="web")
    try:
        assert tools.names == NOTE_TOOLS and tools.servers == ("web",)
        assert (await tools.by_name("whoami").ainvoke({})).content == "hello"
        assert (await tools.by_name("write_note").ainvoke({"text": text})).status == "success"
    finally:
        await tools.aclose()
    assert tools.closed and len(ledger.runs("write_note", text=text)) == 1
    with pytest.raises(McpCallError, match=r"MCP server 'web' is closed.*'write_note' was not sent"):
        await tools.by_name("write_note").ainvoke({"text": text})
    assert len(ledger.runs("write_note", text=text)) == 1


async def test_the_async_form_over_stdio_and_the_sync_form_make_the_same_tools(ledger: Ledger) -> None:
    async with await load_tools(command=upstream_command(), env=ledger.env, name="notes") as tools:
        assert [t.spec() for t in tools] == [t.spec() for t in _sync_specs(ledger)]
        text = f"async {fresh_id()}"
        assert (await tools.by_name("write_note").ainvoke({"text": text})).status == "success"
        assert tools.by_name("write_note").invoke({"text": text}).status == "success"  # sync, same session
    assert len(ledger.runs("write_note", text=text)) == 2
    assert tools.closed


def _sync_specs(ledger: Ledger) -> list[Tool]:
    with load_tools_sync(command=upstream_command(), env=ledger.env) as tools:
        assert not tools.closed and len(tools) == len(NOTE_TOOLS) and tools[0].name == "write_note"
        assert [t.name for t in tools[1:3]] == ["read_notes", "delete_note"]
        assert "McpTools(['write_note'" in repr(tools)
        return list(tools)


def test_several_servers_are_prefixed_on_request_and_a_shared_name_is_an_error_without(
    http_url: str, ledger: Ledger
) -> None:
    servers: dict[str, Any] = {
        "local": {"command": upstream_command(), "env": ledger.env},
        "web": http_url,
    }
    with load_tools_sync(servers=servers, prefix=True) as tools:
        assert tools.servers == ("local", "web")
        assert tools.names == tuple(f"local_{n}" for n in NOTE_TOOLS) + tuple(f"web_{n}" for n in NOTE_TOOLS)
        text = f"prefixed {fresh_id()}"
        message = tools.by_name("web_write_note").invoke({"text": text})
        assert message.name == "web_write_note" and len(ledger.runs("write_note", text=text)) == 1
        assert tools.by_name("local_delete_note").remote_name == "delete_note"
    with pytest.raises(
        ConfigurationError, match=r"'local' and 'web' both have a tool named 'write_note'.*prefix=True"
    ):
        load_tools_sync(servers=servers)


def test_a_string_prefix_names_one_servers_tools(http_url: str) -> None:
    with load_tools_sync(url=http_url, prefix="notes") as tools:
        assert tools.names[0] == "notes_write_note" and tools[0].remote_name == "write_note"


# Servers that fail -------------------------------------------------------------------------
def test_a_server_that_crashes_mid_call_gives_a_clear_error_and_the_next_call_starts_it_again(
    ledger: Ledger,
) -> None:
    with load_tools_sync(command=upstream_command(), env=ledger.env, name="fragile") as tools:
        agent = gated_agent(tools, [turn(call("crash_server", "c1"))], None, policy={})
        (message,) = [
            m for m in agent.invoke({"messages": ["crash"]})["messages"] if isinstance(m, ToolMessage)
        ]
        assert message.status == "error"
        assert (
            "MCP server 'fragile' closed the connection during the call to 'crash_server'" in message.content
        )
        text = f"after the crash {fresh_id()}"
        assert tools.by_name("write_note").invoke({"text": text}).status == "success"
    crashed, after = ledger.runs("crash_server")[-1], ledger.runs("write_note", text=text)
    assert len(after) == 1 and after[0]["pid"] != crashed["pid"]  # a new server process


def test_a_server_that_hangs_gives_a_clear_error_after_the_timeout(ledger: Ledger) -> None:
    with load_tools_sync(command=upstream_command(), env=ledger.env, name="sleepy", timeout=0.5) as tools:
        agent = gated_agent(tools, [turn(call("slow_note", "c1", seconds=30))], None, policy={})
        started = time.monotonic()
        out = agent.invoke({"messages": ["wait"]})
        assert time.monotonic() - started < 5
        (message,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
        assert message.status == "error"
        assert "MCP server 'sleepy' did not answer the call to 'slow_note' within 0.5 s" in message.content
        assert "may or may not have run" in message.content
        assert tools.by_name("read_notes").invoke({}).status == "success"  # the session is still there


def test_a_server_that_cannot_start_or_never_answers_is_a_connect_error() -> None:
    with pytest.raises(McpConnectError, match="could not connect to MCP server 'gone'"):
        load_tools_sync(command=[sys.executable, "-c", "raise SystemExit(2)"], name="gone")
    with pytest.raises(McpConnectError, match="MCP server 'missing'"):
        load_tools_sync(command=["/nonexistent/mcp-server"], name="missing")
    started = time.monotonic()
    with pytest.raises(McpConnectError, match=r"MCP server 'mute' .* did not connect within 0\.5 s"):
        load_tools_sync(
            command=[sys.executable, "-c", "import sys; sys.stdin.read()"], name="mute", connect_timeout=0.5
        )
    assert time.monotonic() - started < 10


# What a server may not do ----------------------------------------------------------------
def test_hostile_names_are_refused_and_hostile_descriptions_cleaned_and_bounded(
    ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="handrail.mcp"):
        tools = load_tools_sync(command=upstream_command("--hostile"), env=ledger.env, name="hostile")
    with tools:
        assert tools.names == ("loud_tool",)
        refused = {skipped.name: skipped.reason for skipped in tools.skipped}
        assert set(refused) == {
            "'<img src=x onerror=alert(1)>'",
            "'bad\\x1b[2Jname'",
            "'spaced name'",
            "'" + "x" * 80 + "…'",
            "'evil\\n'",
            "'big_schema'",
        }
        assert all(
            "not a valid tool name" in reason for name, reason in refused.items() if name != "'big_schema'"
        )
        assert "over the limit of 100000 (schema_limit)" in refused["'big_schema'"]
        loud = tools.by_name("loud_tool")
        assert loud.description.startswith("<script>alert('hi')</script>evil ")  # HTML stays text
        assert loud.description.endswith("more characters cut]") and len(loud.description) < 4200
        assert not any(ch in loud.description for ch in "\x07\x1b\u202e\u202c")
        assert loud.metadata["mcp"]["title"] == "[31mRed[0m title"
    assert sum("left out" in record.getMessage() for record in caplog.records) == 6


def _listed(name: str, schema: Any = None, description: str = "") -> types.Tool:
    return types.Tool(name=name, description=description, input_schema=schema or {"type": "object"})


def test_what_a_listing_may_not_hold_is_left_out_with_the_reason() -> None:
    listed = [
        _listed("twice"),
        _listed("twice"),
        _listed("no_object", {"type": "string"}),
        _listed("bad_schema", {"type": "object", "properties": {"a": {"type": 12}}}),
        _listed("y" * 125),  # fits alone, not with the prefix
        _listed("fine"),
    ]
    made, skipped = build_tools(
        listed,
        server="s",
        prefix="srv_",
        connection=None,  # type: ignore[arg-type]
        background=None,  # type: ignore[arg-type]
        owner=None,
        idempotent=frozenset({"srv_fine"}),
        description_limit=10,
        schema_limit=1000,
    )
    assert [t.name for t in made] == ["srv_twice", "srv_fine"] and made[1].idempotent
    assert [s.reason for s in skipped] == [
        "the server lists two tools of this name",
        "its inputSchema is not a JSON schema of type 'object'",
        "its inputSchema is not a valid JSON schema: 12 is not valid under any of the given schemas",
        "its name is not a valid tool name (1 to 128 letters, digits, '_', '-', '.' or ':', prefix included)",
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "needs command=.*url=.*servers="),
        ({"command": ["x"], "url": "http://h/mcp"}, "either command"),
        ({"url": "ftp://h/mcp"}, "must start with http"),
        ({"command": "python server.py"}, "non-empty list of strings"),
        ({"command": ["x"], "headers": {"a": "b"}}, "headers are for an MCP server reached by url"),
        ({"url": "http://h/mcp", "env": {"A": "b"}}, "env and cwd are for an MCP server started"),
        ({"command": ["x"], "name": "bad name"}, "server name 'bad name' is not valid"),
        ({"servers": {"a": ["x"]}, "prefix": "p"}, "prefix is True"),
        ({"servers": {"a": ["x"]}, "url": "http://h/mcp"}, "got servers= and url"),
        ({"servers": {"a": 3}}, "MCP server 'a': expected a command"),
        ({"servers": {"a": {"command": ["x"], "port": 1}}}, "MCP server 'a': .*port"),
        ({"servers": {}}, "non-empty mapping"),
        ({"command": ["x"], "timeout": 0}, "timeout must be a positive number"),
        ({"command": ["x"], "description_limit": 0.5}, "description_limit must be a positive whole"),
        ({"command": ["x"], "idempotent": "write_note"}, "a list of tool names"),
    ],
)
def test_arguments_that_cannot_work_are_refused_before_anything_starts(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_tools_sync(**options)


def test_a_server_config_hides_its_headers_and_environment() -> None:
    config = McpServerConfig(url="https://h/mcp", headers={"Authorization": "Bearer secret"})
    assert "secret" not in repr(config) and "secret" not in config.describe()
    assert McpServerConfig(command=["a", "b"], env={"TOKEN": "secret"}).command == ("a", "b")
    assert "secret" not in repr(McpServerConfig(command=["a"], env={"TOKEN": "secret"}))


def test_by_name_lists_the_names_there_are(notes: McpTools) -> None:
    with pytest.raises(KeyError, match="no MCP tool is named 'nope'; there are \\['write_note'"):
        notes.by_name("nope")


def test_the_shared_tools_work_from_any_event_loop(notes: McpTools) -> None:
    """The sessions live on the tools' own loop: a test's loop, or none, makes no difference."""
    import asyncio

    async def read() -> ToolMessage:
        message: ToolMessage = await notes.by_name("read_notes").ainvoke({})
        return message

    assert asyncio.run(read()).status == "success"
    assert asyncio.run(read()).status == "success"
