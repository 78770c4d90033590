"""Connections to MCP servers, held open on an event loop of their own.

The rules:

- Every :class:`~handrail.mcp.McpTools` owns one :class:`Background`: an event loop in a
  daemon thread. Its sessions are opened, used and closed there, whatever calls the
  tools (a sync ``invoke``, an async ``ainvoke``, another thread, another event loop).
  One implementation serves the sync and the async forms: each hands a coroutine to the
  loop and waits for it, blocking or awaiting.
- Each server's session lives in one task (:meth:`Connection._hold`) that enters the SDK's
  ``Client`` and leaves it when asked to close, so the SDK's task groups are entered and
  left in the same task.
- Connecting is bounded by ``connect_timeout`` and every call by ``timeout``: a server
  that hangs gives an :class:`McpCallError` naming the server and the tool, never a wait
  without end. A call that timed out may or may not have run on the server; the message
  says so.
- A server that closes the connection (a stdio server that crashed) fails the calls in
  flight with an :class:`McpCallError`; the next call connects again (starting a stdio
  server anew). A call is never sent twice by this module.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import sys
import threading
from collections.abc import Coroutine
from contextlib import AsyncExitStack
from typing import Any, TextIO, TypeVar

import mcp_types as types
import pydantic
from mcp import Client, MCPError, StdioServerParameters, stdio_client

from handrail.errors import HandrailError
from handrail.mcp._text import clean_text
from handrail.mcp.config import McpServerConfig

__all__ = ["Background", "Connection", "McpCallError", "McpConnectError", "McpError"]

log = logging.getLogger("handrail.mcp")

T = TypeVar("T")

_PAGE_CAP = 100  # tools/list pages read before a server is taken to be paging without end
_CLOSE_GRACE = 15.0  # seconds a session gets to close (the SDK bounds a stdio shutdown)
_MESSAGE_LIMIT = 500  # characters of a server's error message kept in ours


class McpError(HandrailError):
    """Something went wrong between handrail and an MCP server."""


class McpConnectError(McpError, ConnectionError):
    """An MCP server could not be started, reached or listed."""


class McpCallError(McpError):
    """A ``tools/call`` that got no usable result: the server hung, crashed, refused the
    request or sent a result that is not valid. The message names the server and the tool.

    A tool that raises this gives the call an error ``ToolMessage`` (as any failing tool).
    """


class Background:
    """An event loop in a daemon thread: where one ``McpTools``' sessions live.

    Example::

        background = Background()
        answer = background.submit(some_coroutine()).result()
        background.stop()
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        self._stopped = False
        self._thread = threading.Thread(target=self._main, name="handrail-mcp", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    @property
    def stopped(self) -> bool:
        return self._stopped

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the loop; raises :class:`McpError` once the loop has stopped."""
        with self._lock:
            if self._stopped:
                coro.close()
                raise McpError("these MCP tools are closed: load them again to call them")
            return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self, timeout: float = _CLOSE_GRACE) -> None:
        """Stop the loop (its remaining tasks are cancelled) and wait for the thread."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)


class Connection:
    """One MCP server's session: opened, used and closed on the :class:`Background` loop.

    Example (on the background loop)::

        connection = Connection("notes", McpServerConfig(command=["python", "server.py"]),
                                timeout=60, connect_timeout=60)
        listed = await connection.open()
        result = await connection.call("write_note", {"text": "hi"}, shown="write_note")
        await connection.close()
    """

    def __init__(self, name: str, config: McpServerConfig, *, timeout: float, connect_timeout: float) -> None:
        self.name = name
        self.config = config
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._client: Client | None = None
        self._holder: asyncio.Task[None] | None = None
        self._closing: asyncio.Event | None = None
        self._stale = False  # the session ended: the next call connects again
        self._closed = False
        self._lock = asyncio.Lock()

    async def open(self) -> list[types.Tool]:
        """Connect and list the server's tools (every page)."""
        client = await self._connect()
        tools: list[types.Tool] = []
        cursor: str | None = None
        try:
            async with asyncio.timeout(self.timeout):
                for _ in range(_PAGE_CAP):
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if cursor is None:
                        return tools
        except TimeoutError:
            raise McpConnectError(
                f"MCP server {self.name!r} did not list its tools within {self.timeout:g} s"
            ) from None
        except Exception as exc:
            raise McpConnectError(
                f"MCP server {self.name!r} could not list its tools: {_reason(exc)}"
            ) from exc
        raise McpConnectError(f"MCP server {self.name!r} listed more than {_PAGE_CAP} pages of tools")

    async def call(self, remote: str, arguments: dict[str, Any], *, shown: str) -> types.CallToolResult:
        """Send one ``tools/call`` for tool ``remote`` (called ``shown`` in the agent)."""
        where = f"MCP server {self.name!r}"
        client = await self._ready(shown)
        try:
            async with asyncio.timeout(self.timeout):
                return await client.call_tool(remote, arguments, read_timeout_seconds=self.timeout)
        except TimeoutError:
            raise McpCallError(self._timed_out(shown)) from None
        except MCPError as exc:
            if exc.code == types.REQUEST_TIMEOUT:
                raise McpCallError(self._timed_out(shown)) from None
            if exc.code == types.CONNECTION_CLOSED:
                self._mark_stale(client)
                raise McpCallError(
                    f"{where} closed the connection during the call to {shown!r} (the server stopped "
                    "or crashed); the call may or may not have run. The next call connects again."
                ) from None
            raise McpCallError(
                f"{where} refused the call to {shown!r}: {_clean(exc.message)} (error {exc.code})"
            ) from None
        except (RuntimeError, pydantic.ValidationError) as exc:
            if self._client is client and not self._stale:  # the session is fine: the result is not
                raise McpCallError(
                    f"{where} sent a result for {shown!r} that is not valid: {_reason(exc)}"
                ) from None
            raise McpCallError(f"the call to {shown!r} on {where} failed: {_reason(exc)}") from None
        except Exception as exc:
            self._mark_stale(client)
            raise McpCallError(f"the call to {shown!r} on {where} failed: {_reason(exc)}") from None

    async def client(self, shown: str) -> Client:
        """The open session (connecting again after a crash), for a request named ``shown``."""
        return await self._ready(shown)

    def _timed_out(self, shown: str) -> str:
        return (
            f"MCP server {self.name!r} did not answer the call to {shown!r} within {self.timeout:g} s; "
            "the call may or may not have run on the server."
        )

    async def close(self) -> None:
        """Close the session (a stdio server is stopped); calls after this fail."""
        self._closed = True
        await self._drop()

    async def _ready(self, shown: str) -> Client:
        async with self._lock:
            if self._closed:
                raise McpCallError(f"MCP server {self.name!r} is closed: the call to {shown!r} was not sent")
            if self._client is not None and not self._stale:
                return self._client
            try:
                return await self._connect()
            except McpConnectError as exc:
                raise McpCallError(f"{exc}; the call to {shown!r} was not sent") from None

    def _mark_stale(self, client: Client) -> None:
        if self._client is client:
            self._stale = True

    async def _connect(self) -> Client:
        await self._drop()
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Client] = loop.create_future()
        closing = asyncio.Event()
        holder = loop.create_task(self._hold(ready, closing), name=f"handrail-mcp {self.name}")
        try:
            async with asyncio.timeout(self.connect_timeout):
                client = await asyncio.shield(ready)
        except BaseException as exc:
            closing.set()
            holder.cancel()
            await asyncio.wait({holder}, timeout=_CLOSE_GRACE)
            if ready.done() and not ready.cancelled():
                ready.exception()  # read, so asyncio does not report it as never retrieved
            if isinstance(exc, TimeoutError):
                raise McpConnectError(
                    f"MCP server {self.name!r} ({self.config.describe()}) did not connect within "
                    f"{self.connect_timeout:g} s"
                ) from None
            if isinstance(exc, Exception):
                raise McpConnectError(
                    f"could not connect to MCP server {self.name!r} ({self.config.describe()}): "
                    f"{_reason(exc)}"
                ) from exc
            raise
        self._client, self._holder, self._closing, self._stale = client, holder, closing, False
        holder.add_done_callback(lambda _: self._mark_stale(client))
        return client

    async def _drop(self) -> None:
        holder, closing = self._holder, self._closing
        self._client = self._holder = self._closing = None
        if holder is None or closing is None:
            return
        closing.set()
        done, _ = await asyncio.wait({holder}, timeout=_CLOSE_GRACE)
        if not done:
            holder.cancel()
            await asyncio.wait({holder}, timeout=_CLOSE_GRACE)

    async def _hold(self, ready: asyncio.Future[Client], closing: asyncio.Event) -> None:
        """Enter the session, hand it over, and keep it until ``closing`` is set."""
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(await self._client_for(stack))
                if not ready.done():
                    ready.set_result(client)
                await closing.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.debug("MCP server %r: the session ended: %r", self.name, exc)
        finally:
            if not ready.done():
                ready.cancel()

    async def _client_for(self, stack: AsyncExitStack) -> Client:
        config = self.config
        if config.command is not None:
            command = list(config.command)
            params = StdioServerParameters(
                command=command[0],
                args=command[1:],
                env=dict(config.env) if config.env is not None else None,
                cwd=os.fspath(config.cwd) if config.cwd is not None else None,
            )
            return Client(stdio_client(params, errlog=_errlog()), cache=None)
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers=dict(config.headers or {}), timeout=httpx2.Timeout(30.0, read=300.0))
        )
        assert config.url is not None
        return Client(streamable_http_client(config.url, http_client=http), cache=None)


def _clean(message: str) -> str:
    return clean_text(message, _MESSAGE_LIMIT).replace("\n", " ")


def _reason(exc: BaseException) -> str:
    """An exception, in one short line (an exception group by its first leaf)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = _clean(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


_devnull: TextIO | None = None


def _errlog() -> TextIO:
    """Where a stdio server's stderr goes: this process's stderr when it is a real file
    (under pytest's ``capsys`` it is not), else the original stderr, else nowhere."""
    global _devnull
    for stream in (sys.stderr, sys.__stderr__):
        if stream is None:
            continue
        try:
            stream.fileno()
        except (AttributeError, OSError, ValueError):
            continue
        return stream
    if _devnull is None:
        _devnull = open(os.devnull, "w")  # noqa: SIM115 - kept open for every later server
    return _devnull
