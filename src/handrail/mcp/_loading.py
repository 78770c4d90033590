"""``load_tools``: the tools of one or more MCP servers, as handrail tools.

The rules:

- What to connect to is read and checked first (:mod:`handrail.mcp.config`); the servers
  are then started and listed at once; if one fails, the others are closed again and
  the error names it.
- Tool names are the servers' own, with their prefix (``prefix=True``: ``fs_read_file``).
  Two servers with a tool of the same name are an error unless prefixed: a tool name is
  what a review policy, an answer and the audit name, so it is never guessed.
- ``idempotent=[...]`` names (as the agent sees them) the tools that may safely run again
  after a crash (SPEC rule 9). Nothing a server says makes a tool idempotent.
- The returned :class:`McpTools` is a sequence of tools that holds the sessions open: on
  an event loop of its own (:mod:`handrail.mcp._session`), so the tools work from sync and
  async code, any thread, any loop. ``close()``, ``aclose()``, ``with`` and ``async with``
  close the sessions (and stop stdio servers); so do garbage collection of the last
  reference (to the object or any of its tools) and the end of the interpreter.
- ``load_tools`` and ``load_tools_sync`` differ only in how they wait for the same work.
"""

from __future__ import annotations

import asyncio
import logging
import os
import weakref
from collections.abc import Collection, Iterator, Mapping, Sequence
from types import TracebackType
from typing import overload

from handrail.errors import ConfigurationError
from handrail.mcp._session import Background, Connection, McpConnectError
from handrail.mcp._tools import McpTool, SkippedTool, build_tools
from handrail.mcp.config import (
    DEFAULT_DESCRIPTION_LIMIT,
    DEFAULT_SCHEMA_LIMIT,
    DEFAULT_TIMEOUT,
    Plan,
    ServerLike,
    read_plan,
)

__all__ = ["McpTools", "ServerLike", "load_tools", "load_tools_sync"]

log = logging.getLogger("handrail.mcp")

_CLOSE_WAIT = 30.0


class _Hub:
    """The background loop and the connections: what the tools keep alive."""

    def __init__(self, background: Background, connections: dict[str, Connection]) -> None:
        self.background = background
        self.connections = connections
        self.finalizer = weakref.finalize(self, _shut, background, list(connections.values()))


class McpTools(Sequence[McpTool]):
    """The tools ``load_tools`` made, in server then listing order, with their sessions.

    Pass it (or a selection of it) as ``tools=`` to ``create_agent``. It is also where the
    sessions are closed: ``close()``, ``await aclose()``, or use it in ``with`` /
    ``async with``. ``skipped`` lists the tools a server offered that were left out, and
    why (an invalid name or schema).

    Example::

        tools = await load_tools(command=["python", "notes_server.py"], name="notes")
        async with tools:
            agent = create_agent(model, tools=tools, middleware=[...], checkpointer=saver)
            ...
    """

    def __init__(self, hub: _Hub, tools: list[McpTool], skipped: list[SkippedTool]) -> None:
        self._hub = hub
        self._tools = tuple(tools)
        self.skipped: tuple[SkippedTool, ...] = tuple(skipped)

    @overload
    def __getitem__(self, index: int) -> McpTool: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[McpTool]: ...
    def __getitem__(self, index: int | slice) -> McpTool | Sequence[McpTool]:
        return self._tools[index]

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[McpTool]:
        return iter(self._tools)

    def __repr__(self) -> str:
        state = ", closed" if self.closed else ""
        return f"McpTools({list(self.names)!r}, servers={list(self.servers)!r}{state})"

    @property
    def names(self) -> tuple[str, ...]:
        """The tools' names, as the agent sees them."""
        return tuple(t.name for t in self._tools)

    @property
    def servers(self) -> tuple[str, ...]:
        """The servers' names."""
        return tuple(self._hub.connections)

    @property
    def closed(self) -> bool:
        return not self._hub.finalizer.alive

    def by_name(self, name: str) -> McpTool:
        """The tool called ``name`` (a ``KeyError`` lists the names there are)."""
        for candidate in self._tools:
            if candidate.name == name:
                return candidate
        raise KeyError(f"no MCP tool is named {name!r}; there are {list(self.names)}")

    def close(self) -> None:
        """Close the sessions and stop stdio servers; calling a tool afterwards is an error."""
        self._hub.finalizer()

    async def aclose(self) -> None:
        """:meth:`close`, awaited without blocking the event loop."""
        await asyncio.to_thread(self._hub.finalizer)

    def __enter__(self) -> McpTools:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> McpTools:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


async def load_tools(
    *,
    command: Sequence[str] | None = None,
    url: str | None = None,
    headers: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    name: str | None = None,
    servers: Mapping[str, ServerLike] | None = None,
    prefix: bool | str = False,
    idempotent: Collection[str] = (),
    timeout: float = DEFAULT_TIMEOUT,
    connect_timeout: float = DEFAULT_TIMEOUT,
    description_limit: int = DEFAULT_DESCRIPTION_LIMIT,
    schema_limit: int = DEFAULT_SCHEMA_LIMIT,
) -> McpTools:
    """Connect to MCP servers and return their tools as handrail tools.

    One server: ``command=["python", "server.py"]`` (with ``env``, ``cwd``) or
    ``url="https://host/mcp"`` (with ``headers``), named ``name``. Several:
    ``servers={"fs": [...], "gh": "https://..."}`` (see :data:`ServerLike`).
    ``prefix=True`` names tools ``{server}_{tool}``. ``idempotent`` lists the tools that
    may run again after a crash (rule 9). ``timeout`` bounds every call (seconds),
    ``connect_timeout`` the start of each server; ``description_limit`` (characters) and
    ``schema_limit`` (bytes of JSON) bound what a server may describe.

    Raises :class:`~handrail.mcp.McpConnectError` when a server cannot be started,
    reached or listed, and :class:`~handrail.errors.ConfigurationError` for two tools of
    one name or an unknown name in ``idempotent``.

    Example::

        tools = await load_tools(servers={"fs": ["npx", "-y", "@modelcontextprotocol/server-filesystem",
                                                 "/data"],
                                          "gh": {"url": "https://host/mcp", "headers": auth}},
                                 prefix=True)
        tools.names   # ('fs_read_file', ..., 'gh_create_issue', ...)
    """
    plan = read_plan(locals())  # the arguments, as given (one reading for both forms)
    background = Background()
    try:
        return await asyncio.wrap_future(background.submit(_open(plan, background)))
    except BaseException:
        background.stop()
        raise


def load_tools_sync(
    *,
    command: Sequence[str] | None = None,
    url: str | None = None,
    headers: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    name: str | None = None,
    servers: Mapping[str, ServerLike] | None = None,
    prefix: bool | str = False,
    idempotent: Collection[str] = (),
    timeout: float = DEFAULT_TIMEOUT,
    connect_timeout: float = DEFAULT_TIMEOUT,
    description_limit: int = DEFAULT_DESCRIPTION_LIMIT,
    schema_limit: int = DEFAULT_SCHEMA_LIMIT,
) -> McpTools:
    """:func:`load_tools` for sync code: the same arguments, the same tools.

    Example::

        with load_tools_sync(command=["python", "notes_server.py"], name="notes") as tools:
            agent = create_agent(model, tools=tools, checkpointer=InMemorySaver())
            agent.invoke({"messages": ["Note: buy milk"]}, config)
    """
    plan = read_plan(locals())  # the arguments, as given (one reading for both forms)
    background = Background()
    try:
        return background.submit(_open(plan, background)).result()
    except BaseException:
        background.stop()
        raise


async def _open(plan: Plan, background: Background) -> McpTools:
    """On the background loop: connect to every server, list and convert their tools."""
    connections = {
        name: Connection(name, config, timeout=plan.timeout, connect_timeout=plan.connect_timeout)
        for name, config, _ in plan.servers
    }
    try:
        try:
            async with asyncio.TaskGroup() as group:
                listings = [group.create_task(c.open()) for c in connections.values()]
        except BaseExceptionGroup as group_error:
            raise _first(group_error) from None
        hub = _Hub(background, connections)
        tools: list[McpTool] = []
        skipped: list[SkippedTool] = []
        owners: dict[str, str] = {}
        for (name, _, prefix), listing in zip(plan.servers, listings, strict=True):
            made, left_out = build_tools(
                listing.result(),
                server=name,
                prefix=prefix,
                connection=connections[name],
                background=background,
                owner=hub,
                idempotent=plan.idempotent,
                description_limit=plan.description_limit,
                schema_limit=plan.schema_limit,
            )
            for made_tool in made:
                if made_tool.name in owners:
                    raise ConfigurationError(
                        f"MCP servers {owners[made_tool.name]!r} and {name!r} both have a tool named "
                        f"{made_tool.name!r}: pass prefix=True to name them by server "
                        f"({owners[made_tool.name]}_{made_tool.name}, {name}_{made_tool.name})"
                    )
                owners[made_tool.name] = name
            tools.extend(made)
            skipped.extend(left_out)
        unknown = sorted(plan.idempotent - set(owners))
        if unknown:
            raise ConfigurationError(
                f"idempotent= names {unknown}, which no MCP server here has; the tools are {sorted(owners)}"
            )
    except BaseException:
        await asyncio.gather(*(c.close() for c in connections.values()), return_exceptions=True)
        raise
    for item in skipped:
        log.warning("MCP server %r: tool %s left out: %s", item.server, item.name, item.reason)
    return McpTools(hub, tools, skipped)


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error to raise for a failed group of connections: the only one, or all in one."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        item = pending.pop(0)
        if isinstance(item, BaseExceptionGroup):
            pending.extend(item.exceptions)
        else:
            leaves.append(item)
    if len(leaves) == 1 or not all(isinstance(leaf, Exception) for leaf in leaves):
        return leaves[0]
    return McpConnectError("; ".join(str(leaf) for leaf in leaves))


def _shut(background: Background, connections: list[Connection]) -> None:
    """Close every connection and stop the loop (once: a ``weakref.finalize`` callback)."""
    if background.stopped:
        return

    async def close_all() -> None:
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)

    if _on_loop(background):
        task = background.loop.create_task(close_all())  # called on the loop itself (by the GC)
        task.add_done_callback(lambda _: background.stop())
        return
    try:
        background.submit(close_all()).result(timeout=_CLOSE_WAIT)
    except Exception as exc:  # a timeout included: the loop's end cancels what is left
        log.warning("MCP sessions did not close cleanly: %r", exc)
    finally:
        background.stop()


def _on_loop(background: Background) -> bool:
    try:
        return asyncio.get_running_loop() is background.loop
    except RuntimeError:
        return False
