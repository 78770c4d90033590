"""The upstream MCP server of ``bench/mcp.py``: two tools that echo, nothing written anywhere.

Built with the ``mcp`` SDK's ``MCPServer``, as the tests' upstream is. ``echo`` is the
tool the benchmark's policy leaves ungated, ``stamp`` the one it gates; both return the
text they are given, so a call costs the transport and the SDK, and nothing else.

    python _mcp_upstream.py            # stdio
    python _mcp_upstream.py --http     # streamable HTTP on 127.0.0.1, a free port;
                                       # prints "PORT <n>" once it listens
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

# bench/mcp.py would shadow the SDK's package: this folder is not looked in for imports.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import anyio  # noqa: E402
from mcp.server.mcpserver import MCPServer  # noqa: E402

server = MCPServer("bench", log_level="WARNING")


@server.tool()
def echo(text: str) -> str:
    """Return the text (the ungated tool)."""
    return text


@server.tool()
def stamp(text: str) -> str:
    """Return the text (the gated tool)."""
    return text


def main() -> None:
    if "--http" not in sys.argv:
        server.run()
        return
    import uvicorn

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted sockets inherit it (as in ``handrail serve``): without it a kept-alive
    # connection waits ~40 ms for the client's delayed ACK before a response's last write.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    app = server.streamable_http_app(host="127.0.0.1")
    web = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    print(f"PORT {port}", flush=True)
    anyio.run(lambda: web.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
