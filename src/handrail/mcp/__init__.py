"""MCP servers' tools in handrail agents (SPEC §7).

``load_tools`` connects to MCP servers (a command over stdio, a URL over streamable
HTTP) with the official ``mcp`` SDK and returns their tools as handrail tools: the
servers' JSON schemas, descriptions and annotations kept, each call sent to the server's
``tools/call``. A review policy gates them as any other tool::

    from handrail.mcp import load_tools

    tools = await load_tools(command=["python", "notes_server.py"], name="notes")
    agent = create_agent(model, tools=tools,
                         middleware=[HumanInTheLoopMiddleware({"delete_note": True})],
                         checkpointer=saver)

Needs the ``mcp`` extra: ``pip install 'handrail[mcp]'``. The rules of each part are at
the top of its module: :mod:`~handrail.mcp.config` (servers, names, prefixes),
:mod:`~handrail.mcp._loading` (duplicates, closing),
:mod:`~handrail.mcp._tools` (schemas, annotations, idempotence),
:mod:`~handrail.mcp._results` (what the model sees), :mod:`~handrail.mcp._session`
(timeouts, crashes) and :mod:`~handrail.mcp._text` (names and text from a server).
"""

from __future__ import annotations

try:
    import mcp as _sdk  # noqa: F401 - the SDK must be there before anything else is loaded
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(f"handrail.mcp needs the MCP SDK: pip install 'handrail[mcp]' ({exc})") from exc

from handrail.mcp._loading import McpTools, load_tools, load_tools_sync
from handrail.mcp._session import McpCallError, McpConnectError, McpError
from handrail.mcp._tools import McpTool, SkippedTool
from handrail.mcp.config import McpServerConfig, ServerLike

__all__ = [
    "McpCallError",
    "McpConnectError",
    "McpError",
    "McpServerConfig",
    "McpTool",
    "McpTools",
    "ServerLike",
    "SkippedTool",
    "load_tools",
    "load_tools_sync",
]
