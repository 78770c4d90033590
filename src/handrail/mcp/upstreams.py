"""The gateway's upstream MCP servers: connected, listed, and each request routed to one.

The rules:

- Every upstream is connected and listed when the gateway starts; one that cannot be
  reached stops the start with an error naming it (a gateway with a missing upstream
  would hide tools a policy expects).
- With one upstream, names are the upstream's own: tools, prompts and resources pass
  through unchanged. With several, tool and prompt names take the upstream's name and
  ``_`` as a prefix (as ``load_tools(prefix=True)``), resource URIs stay as they are and
  a read goes to the upstream that listed the URI (or whose template matches it, else
  the first that answers).
- A tool whose name (prefix included) is not a valid handrail tool name, or whose input
  schema is not a usable object schema, is left out of ``tools/list`` and refused by
  ``tools/call``, with a warning on stderr: a gate cannot name it, so it is not offered.
  Two upstreams with a tool of one name cannot both be served: the start fails.
- What an upstream says is passed on as it said it (descriptions, annotations, output
  schemas, ``_meta``); the gateway only renames and, for gated tools, leaves out the
  output schema (``gateway.py``).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import mcp_types as types
from mcp import Client

from handrail.errors import ConfigurationError
from handrail.mcp._results import result_message
from handrail.mcp._session import Connection, McpCallError
from handrail.mcp._text import SERVER_NAME
from handrail.mcp._tools import McpTool, build_tools
from handrail.mcp.config import McpServerConfig
from handrail.messages import ToolMessage, new_id

__all__ = ["RESULT_KEY", "ForwardTool", "Route", "Upstreams"]

log = logging.getLogger("handrail.mcp")

RESULT_KEY = "mcp_result"
"""Where a forwarded call's ``ToolMessage.artifact`` keeps the upstream's result, as sent."""

_DESCRIPTION_LIMIT = 4000
_SCHEMA_LIMIT = 256 * 1024


class ForwardTool(McpTool):
    """An upstream's tool in the gateway's agent: a call runs on the gateway's own event
    loop, and its ``ToolMessage`` keeps the upstream's result whole (``artifact``). Its
    result ends the run (``return_direct``): the relay model has nothing to add."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.return_direct = True

    async def arun(self, values: Mapping[str, Any], runtime: Any = None) -> ToolMessage:
        """Forward the call to the upstream once; the result as the upstream sent it."""
        call_id = getattr(runtime, "tool_call_id", None) or new_id("call_")
        result = await self._connection.call(self.remote_name, dict(values), shown=self.name)
        message = result_message(result, call_id=call_id, name=self.name)
        message.artifact = {RESULT_KEY: result.model_dump(mode="json", by_alias=True, exclude_none=True)}
        return message

    def run(self, values: Mapping[str, Any], runtime: Any = None) -> ToolMessage:
        """Refused: the gateway's runs are async, on the loop that holds the sessions."""
        raise McpCallError(f"{self.name!r} is a gateway tool: it runs on the gateway's event loop only")


class Route(NamedTuple):
    """Where one name the gateway offers goes: the upstream and its own name there."""

    server: str
    connection: Connection
    remote: str


class Upstreams:
    """The upstream servers of one gateway, on the gateway's event loop.

    Example::

        upstreams = Upstreams({"notes": McpServerConfig(command=["python", "server.py"])})
        await upstreams.open()
        upstreams.tool_names           # ('write_note', 'read_notes', ...)
        await upstreams.close()
    """

    def __init__(
        self, servers: Mapping[str, McpServerConfig], *, timeout: float = 300.0, connect_timeout: float = 60.0
    ) -> None:
        if not servers:
            raise ConfigurationError("the gateway needs at least one upstream MCP server")
        for name in servers:
            if not SERVER_NAME.fullmatch(name):
                raise ConfigurationError(
                    f"upstream name {name!r} is not valid: use 1-64 letters, digits, '_' or '-'"
                )
        self.connections = {
            name: Connection(name, config, timeout=timeout, connect_timeout=connect_timeout)
            for name, config in servers.items()
        }
        self.prefixed = len(servers) > 1
        self.tools: dict[str, tuple[Route, types.Tool, ForwardTool]] = {}
        self.prompts: dict[str, tuple[Route, types.Prompt]] = {}
        self.resources: dict[str, Route] = {}
        self.templates: list[tuple[re.Pattern[str], Route, types.ResourceTemplate]] = []
        self.capabilities: dict[str, types.ServerCapabilities] = {}
        self.instructions: list[str] = []

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The names of the tools offered, in upstream then listing order."""
        return tuple(self.tools)

    def has(self, capability: str) -> bool:
        """Whether any upstream offers ``capability`` (``prompts``, ``resources``, ``completions``)."""
        return any(getattr(c, capability, None) is not None for c in self.capabilities.values())

    def prefix(self, server: str) -> str:
        """What goes before the names of ``server``'s tools and prompts."""
        return f"{server}_" if self.prefixed else ""

    async def open(self) -> None:
        """Connect to every upstream and list what it offers."""
        try:
            async with asyncio.TaskGroup() as group:
                listings = {name: group.create_task(c.open()) for name, c in self.connections.items()}
        except BaseExceptionGroup as failed:
            await self.close()
            first = failed.exceptions[0]
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            raise first from None
        for name, connection in self.connections.items():
            client = await connection.client("tools/list")
            self.capabilities[name] = client.server_capabilities
            if client.instructions:
                self.instructions.append(client.instructions)
            self._add_tools(name, connection, listings[name].result())
            await self._list_others(name, connection, client)

    def _add_tools(self, server: str, connection: Connection, listed: list[types.Tool]) -> None:
        made, skipped = build_tools(
            listed,
            server=server,
            prefix=self.prefix(server),
            connection=connection,
            background=None,
            owner=self,
            idempotent=frozenset(),
            description_limit=_DESCRIPTION_LIMIT,
            schema_limit=_SCHEMA_LIMIT,
            kind=ForwardTool,
        )
        for item in skipped:
            log.warning("upstream %r: tool %s is not offered: %s", item.server, item.name, item.reason)
        raw = {tool.name: tool for tool in listed}
        for tool in made:
            assert isinstance(tool, ForwardTool)
            if tool.name in self.tools:
                raise ConfigurationError(
                    f"upstreams {self.tools[tool.name][0].server!r} and {server!r} both offer a tool "
                    f"named {tool.name!r}"
                )
            self.tools[tool.name] = (Route(server, connection, tool.remote_name), raw[tool.remote_name], tool)

    async def _list_others(self, server: str, connection: Connection, client: Client) -> None:
        capabilities = self.capabilities[server]
        route = Route(server, connection, "")
        if capabilities.prompts is not None:
            for prompt in await _pages(client.list_prompts, "prompts"):
                shown = self.prefix(server) + prompt.name
                self.prompts.setdefault(shown, (route._replace(remote=prompt.name), prompt))
        if capabilities.resources is not None:
            for resource in await _pages(client.list_resources, "resources"):
                self.resources.setdefault(str(resource.uri), route._replace(remote=str(resource.uri)))
            for template in await _pages(client.list_resource_templates, "resource_templates"):
                pattern = re.escape(template.uri_template)
                pattern = re.sub(r"\\\{[^}]*\\\}", "[^/]+", pattern)
                self.templates.append((re.compile(pattern), route, template))

    # Listings, as the gateway offers them -----------------------------------------------
    def input_schema(self, name: str) -> dict[str, Any] | None:
        """The input schema of an offered tool (the SDK checks HTTP calls' headers by it)."""
        entry = self.tools.get(name)
        return entry[1].input_schema if entry is not None else None

    def listed_tools(self, *, gated: frozenset[str]) -> list[types.Tool]:
        """``tools/list``: each upstream tool under its offered name; a gated one without
        its output schema (a review's reply may carry none)."""
        listed: list[types.Tool] = []
        for name, (_, raw, _) in self.tools.items():
            changes: dict[str, Any] = {"name": name}
            if name in gated:
                changes["output_schema"] = None
            listed.append(raw.model_copy(update=changes))
        return listed

    def listed_prompts(self) -> list[types.Prompt]:
        """``prompts/list``, every upstream's, under the offered names."""
        return [prompt.model_copy(update={"name": name}) for name, (_, prompt) in self.prompts.items()]

    async def listed_resources(self) -> list[types.Resource]:
        """``resources/list``: every upstream's, asked again (resources come and go)."""
        found: list[types.Resource] = []
        for server, connection in self.connections.items():
            if self.capabilities[server].resources is None:
                continue
            client = await connection.client("resources/list")
            for resource in await _pages(client.list_resources, "resources"):
                self.resources.setdefault(str(resource.uri), Route(server, connection, str(resource.uri)))
                found.append(resource)
        return found

    def listed_templates(self) -> list[types.ResourceTemplate]:
        """``resources/templates/list``, every upstream's."""
        return [template for _, _, template in self.templates]

    # Requests, routed ------------------------------------------------------------------
    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Forward a ``tools/call`` of an offered tool, as it is (no review)."""
        route = self.tools[name][0]
        return await route.connection.call(route.remote, arguments, shown=name)

    async def get_prompt(self, name: str, arguments: dict[str, str] | None) -> types.GetPromptResult:
        """Forward ``prompts/get`` to the upstream that offers ``name``."""
        if name not in self.prompts:
            raise KeyError(name)
        route = self.prompts[name][0]
        client = await route.connection.client(f"prompt {name}")
        return await client.get_prompt(route.remote, arguments)

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        """Forward ``resources/read`` to the upstream that listed ``uri`` (or matches it)."""
        routes = [self.resources[uri]] if uri in self.resources else []
        routes += [route for pattern, route, _ in self.templates if pattern.fullmatch(uri)]
        routes += [
            Route(server, c, uri)
            for server, c in self.connections.items()
            if self.capabilities[server].resources is not None
        ]
        last: Exception | None = None
        for route in dict.fromkeys(routes):
            client = await route.connection.client(f"resource {uri}")
            try:
                return await client.read_resource(uri)
            except Exception as exc:  # try the next upstream; the last error is the answer
                last = exc
        raise last if last is not None else KeyError(uri)

    async def complete(
        self, ref: types.PromptReference | types.ResourceTemplateReference, argument: dict[str, str]
    ) -> types.CompleteResult:
        """Forward ``completion/complete`` to the upstream of the prompt or template."""
        if isinstance(ref, types.PromptReference):
            route = self.prompts[ref.name][0]
            ref = ref.model_copy(update={"name": route.remote})
        else:
            route = next(r for _, r, t in self.templates if t.uri_template == ref.uri)
        client = await route.connection.client("completion/complete")
        return await client.complete(ref, argument)

    async def close(self) -> None:
        """Close every session (stdio upstreams are stopped)."""
        await asyncio.gather(*(c.close() for c in self.connections.values()), return_exceptions=True)


async def _pages(fetch: Any, field: str) -> list[Any]:
    """Every item of a paginated listing (at most 100 pages)."""
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(100):
        page = await fetch(cursor=cursor)
        items.extend(getattr(page, field))
        cursor = page.next_cursor
        if cursor is None:
            break
    return items
