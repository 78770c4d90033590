"""An MCP server for the tests, built with the ``mcp`` SDK's ``MCPServer``.

Every real execution of a tool is appended, as one JSON line ``{"tool", "args", "pid"}``,
to the ledger file named by ``HANDRAIL_MCP_LEDGER``: the tests judge what ran by it.

    python upstream_server.py                # stdio
    python upstream_server.py --http         # streamable HTTP on 127.0.0.1, a free port;
                                             # prints "PORT <n>" once it listens
    python upstream_server.py --hostile      # tools with hostile names and descriptions
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import (
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    ToolAnnotations,
)
from pydantic import BaseModel, Field

LEDGER_ENV = "HANDRAIL_MCP_LEDGER"

server = MCPServer("notes", log_level="WARNING")


def record(tool: str, **args: Any) -> None:
    """Append one execution to the ledger (one short write: lines never interleave)."""
    line = json.dumps({"tool": tool, "args": args, "pid": os.getpid()}) + "\n"
    with open(os.environ[LEDGER_ENV], "a", encoding="utf-8") as ledger:
        ledger.write(line)


def written_notes() -> list[str]:
    try:
        with open(os.environ[LEDGER_ENV], encoding="utf-8") as ledger:
            entries = [json.loads(line) for line in ledger if line.strip()]
    except FileNotFoundError:
        return []
    return [e["args"]["text"] for e in entries if e["tool"] == "write_note"]


class NoteStats(BaseModel):
    count: int
    longest: str


def add_note_tools(app: MCPServer) -> None:
    @app.tool()
    def write_note(text: str) -> str:
        """Save a note.

        Args:
            text: What the note says.
        """
        record("write_note", text=text)
        return f"saved note {len(written_notes())}"

    @app.tool(annotations=ToolAnnotations(read_only_hint=True, title="Read the notes"))
    def read_notes() -> str:
        """Read every note saved so far."""
        record("read_notes")
        return "\n".join(written_notes()) or "(no notes)"

    @app.tool(
        title="Delete a note",
        annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True, open_world_hint=False),
    )
    def delete_note(note_id: Annotated[int, Field(ge=1, description="The note's number.")]) -> str:
        """Delete a note for good."""
        record("delete_note", note_id=note_id)
        return f"deleted note {note_id}"

    @app.tool()
    def note_stats(tag: str) -> NoteStats:
        """Count the notes (structured output)."""
        record("note_stats", tag=tag)
        notes = written_notes()
        return NoteStats(count=len(notes), longest=max(notes, key=len, default=""))

    @app.tool()
    def archive_note(note_id: int) -> CallToolResult:
        """Archive a note (the archive is always full: an isError result)."""
        record("archive_note", note_id=note_id)
        return CallToolResult(
            content=[TextContent(type="text", text=f"cannot archive note {note_id}: the archive is full")],
            is_error=True,
        )

    @app.tool()
    async def slow_note(seconds: float) -> str:
        """Take a while to answer."""
        record("slow_note", seconds=seconds)
        await anyio.sleep(seconds)
        return "done at last"

    @app.tool()
    def note_picture(note_id: int) -> CallToolResult:
        """A picture of a note, with a link and an attachment (blocks that are not text)."""
        record("note_picture", note_id=note_id)
        picture = "iVBORw0KGgo=" * 100_000  # about 900 kB once decoded
        return CallToolResult(
            content=[
                TextContent(type="text", text=f"note {note_id}:"),
                ImageContent(type="image", data=picture, mime_type="image/png"),
                ResourceLink(
                    type="resource_link", name="the note", uri=f"notes://{note_id}", mime_type="text/plain"
                ),
                EmbeddedResource(
                    type="resource",
                    resource=BlobResourceContents(
                        uri=f"notes://{note_id}/scan", mime_type="application/pdf", blob="JVBERi0=" * 10
                    ),
                ),
            ]
        )

    @app.tool()
    def crash_server() -> str:
        """Stop the server in the middle of the call."""
        record("crash_server")
        os._exit(3)

    @app.tool()
    def whoami(ctx: Context) -> str:
        """Say which test header the HTTP request carried."""
        record("whoami")
        headers = ctx.headers or {}
        return headers.get("x-handrail-test", "no header")


def add_hostile_tools(app: MCPServer) -> None:
    def noop() -> str:
        record("hostile")
        return "ok"

    for name in ("<img src=x onerror=alert(1)>", "bad\x1b[2Jname", "spaced name", "x" * 129, "evil\n"):
        app.add_tool(noop, name=name, description="refused for its name")
    huge = "<script>alert('hi')</script>\x07\u202eevil\u202c " + "A" * 1_000_000
    app.add_tool(noop, name="loud_tool", description=huge, title="\x1b[31mRed\x1b[0m title")

    def big_schema(
        value: Annotated[str, Field(description="padding " * 30_000)],
    ) -> str:
        record("big_schema")
        return value

    app.add_tool(big_schema, name="big_schema", description="Its schema is too large.")


def main() -> None:
    if "--hostile" in sys.argv:
        add_hostile_tools(server)
    else:
        add_note_tools(server)
    if "--http" not in sys.argv:
        server.run()
        return
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections wait in the backlog until uvicorn takes them
    port = sock.getsockname()[1]
    app = server.streamable_http_app(host="127.0.0.1")
    web = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    print(f"PORT {port}", flush=True)
    anyio.run(lambda: web.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
