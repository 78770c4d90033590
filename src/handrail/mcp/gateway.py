"""``handrail mcp``: an MCP server in front of MCP servers, whose gated calls are reviews.

The rules (SPEC §7, rules 9 and 19-20 where the call runs):

G1 - Everything but ``tools/call`` passes through (``upstreams.py``): lists, prompts,
     resources and completions are the upstreams' own.
G2 - A ``tools/call`` of a tool the policy does not gate is forwarded at once and its
     result returned as the upstream sent it; nothing is stored.
G3 - A call of a gated tool is checked against the tool's input schema, then becomes a
     thread of the gateway's agent (``assistant_id``: the gateway's name; metadata: the
     MCP client, session, upstream and tool), whose relay model proposes exactly that
     call (``_relay.py``). The agent's review policy asks for a review, as for any agent:
     the inbox, the web pages, the review CLI, Slack, notifications and the audit show it.
G4 - The call is forwarded only by the gateway's agent, in a run of its thread: under an
     answer the gate reads from the log where the tool runs (rules 19-20), with
     ``tool_started`` saved before it is sent, once. A gateway killed while forwarding
     leaves the call unfinished; the next run of the thread (another gateway, or this
     one restarted) asks about it as an ``outcome_unknown`` review (rule 9).
G5 - The client's request is held while the review waits, at most ``hold`` seconds, with
     a progress notification every ``progress_every`` seconds when the client gave a
     progress token. Then the reply says the review is pending and names
     ``handrail_await_review``, which holds again and returns the outcome
     (``_replies.py``). An answer given after the hold still runs: its result waits in
     the thread for ``handrail_await_review``.
G6 - A client that cancels its request withdraws the review (``Agent.withdraw``): it is
     recorded, rejected, and never run. A review already answered is not withdrawn.
G7 - The gateway's threads are its own: its worker and sweeper take only threads bound
     to its name (never threads bound to no agent), and ``handrail_await_review``
     answers only for them, and only to the identity that made the call (over HTTP).
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from handrail import __version__
from handrail.agent import Agent, create_agent
from handrail.checkpoint.base import BaseCheckpointSaver
from handrail.errors import ConfigurationError, HandrailError
from handrail.mcp._relay import RelayModel, call_message
from handrail.mcp._replies import AWAIT_TOOL, await_tool, error_result, pending_result, reply_for
from handrail.mcp._session import McpCallError
from handrail.mcp._text import clean_text
from handrail.mcp.upstreams import Upstreams
from handrail.messages import ToolMessage
from handrail.middleware import HumanInTheLoopMiddleware
from handrail.review.policy_file import load_policy_file
from handrail.tools import ToolArgumentsError
from handrail.worker import ASSISTANT_KEY

__all__ = ["Gateway"]

log = logging.getLogger("handrail.mcp.gateway")

CANCELLED = "the MCP client cancelled the call"


class Gateway:
    """The gateway: upstreams, the agent whose threads are its reviews, and the MCP server.

    ``policy_file``: a policy file with a table for ``name`` (``handrail mcp init`` writes
    one); without it every tool is reviewed. ``hold``: seconds a gated call's request is
    held before the reply says the review is pending.

    Example::

        gateway = Gateway(Upstreams({"notes": McpServerConfig(command=[...])}), store)
        await gateway.open()
        server = gateway.mcp_server()      # serve it over stdio or streamable HTTP
    """

    def __init__(
        self,
        upstreams: Upstreams,
        store: BaseCheckpointSaver,
        *,
        policy_file: str | os.PathLike[str] | None = None,
        name: str = "mcp",
        hold: float = 55.0,
        progress_every: float = 5.0,
        poll: float = 1.0,
    ) -> None:
        if not hold >= 0 or not progress_every > 0 or not poll > 0:
            raise ConfigurationError("hold must be 0 or more seconds; progress_every and poll above 0")
        self.upstreams = upstreams
        self.store = store
        self.policy_file = Path(policy_file) if policy_file is not None else None
        self.name = name
        self.hold = float(hold)
        self.progress_every = float(progress_every)
        self.poll = float(poll)
        self.gated: frozenset[str] = frozenset()
        self._agent: Agent | None = None
        self._done: dict[str, asyncio.Event] = {}  # thread id -> set when a run of it ends here
        self.connection_id = uuid.uuid4().hex[:12]  # names a stdio session (one client a process)

    @property
    def agent(self) -> Agent:
        """The agent whose threads are the gateway's reviews (after :meth:`open`)."""
        if self._agent is None:
            raise RuntimeError("the gateway is not open: await gateway.open() first")
        return self._agent

    async def open(self) -> None:
        """Connect to the upstreams and build the agent and its policy."""
        await self.upstreams.open()
        names = self.upstreams.tool_names
        if AWAIT_TOOL in names:
            await self.upstreams.close()
            raise ConfigurationError(
                f"an upstream offers a tool named {AWAIT_TOOL!r}, which the gateway adds"
            )
        if self.policy_file is not None:
            review = load_policy_file(self.policy_file).for_agent(self.name, tools=names)
        else:
            review = {"interrupt_on": dict.fromkeys(names, True)}
        interrupt_on = review["interrupt_on"]
        self.gated = frozenset(tool for tool, config in interrupt_on.items() if config not in (False, None))
        unnamed = [tool for tool in names if tool not in interrupt_on]
        if unnamed:
            log.warning("the policy does not name %s: not reviewed", ", ".join(unnamed))
        tools = [entry[2] for entry in self.upstreams.tools.values()]
        self._agent = create_agent(
            RelayModel(),
            tools,
            middleware=[HumanInTheLoopMiddleware(**review)],
            checkpointer=self.store,
            name=self.name,
        )

    def finished(self, thread_id: str) -> None:
        """A run of ``thread_id`` ended in this process (a worker's listener)."""
        event = self._done.get(thread_id)
        if event is not None:
            event.set()

    async def close(self) -> None:
        """Close the upstream sessions."""
        await self.upstreams.close()

    # The MCP server ----------------------------------------------------------------------
    def mcp_server(self) -> Server[Any]:
        """The MCP server (the SDK's low-level ``Server``) that answers clients."""
        up = self.upstreams
        handlers: dict[str, Any] = {"on_list_tools": self._list_tools, "on_call_tool": self._call_tool}
        if up.has("prompts"):
            handlers |= {"on_list_prompts": self._list_prompts, "on_get_prompt": self._get_prompt}
        if up.has("resources"):
            handlers |= {
                "on_list_resources": self._list_resources,
                "on_list_resource_templates": self._list_templates,
                "on_read_resource": self._read_resource,
            }
        if up.has("completions"):
            handlers["on_completion"] = self._complete
        return Server(
            f"handrail-mcp-{self.name}",
            version=__version__,
            instructions="\n\n".join(up.instructions) or None,
            get_tool_input_schema=self._input_schema,
            **handlers,
        )

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        if name == AWAIT_TOOL and self.gated:
            return dict(await_tool().input_schema)
        return self.upstreams.input_schema(name)

    async def _list_tools(self, ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
        tools = self.upstreams.listed_tools(gated=self.gated)
        if self.gated:
            tools.append(await_tool())
        return types.ListToolsResult(tools=tools)

    async def _list_prompts(self, ctx: ServerRequestContext[Any], params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=self.upstreams.listed_prompts())

    async def _get_prompt(
        self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        try:
            return await self.upstreams.get_prompt(params.name, params.arguments)
        except KeyError:
            raise MCPError(
                types.INVALID_PARAMS, f"no prompt named {clean_text(params.name, 200)!r}"
            ) from None

    async def _list_resources(self, ctx: ServerRequestContext[Any], params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=await self.upstreams.listed_resources())

    async def _list_templates(
        self, ctx: ServerRequestContext[Any], params: Any
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=self.upstreams.listed_templates())

    async def _read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        try:
            return await self.upstreams.read_resource(str(params.uri))
        except KeyError:
            raise MCPError(
                types.INVALID_PARAMS, f"no resource {clean_text(str(params.uri), 300)!r}"
            ) from None

    async def _complete(
        self, ctx: ServerRequestContext[Any], params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        try:
            return await self.upstreams.complete(params.ref, {params.argument.name: params.argument.value})
        except (KeyError, StopIteration):
            raise MCPError(types.INVALID_PARAMS, "nothing to complete for that reference") from None

    # tools/call ----------------------------------------------------------------------------
    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name, arguments = params.name, dict(params.arguments or {})
        if name == AWAIT_TOOL and self.gated:
            return await self._await_review(ctx, arguments)
        if name not in self.upstreams.tools:
            return error_result(f"Unknown tool: {clean_text(name, 200)!r} is not offered here.")
        if name not in self.gated:  # G2
            try:
                return await self.upstreams.call(name, arguments)
            except McpCallError as exc:
                return error_result(str(exc))
        return await self._review(ctx, name, arguments)

    async def _review(
        self, ctx: ServerRequestContext[Any], name: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        """G3: the call as a thread of the agent; its reply once decided, or pending."""
        route, _, tool = self.upstreams.tools[name]
        try:
            tool.validate_args(arguments)
        except ToolArgumentsError as exc:
            return error_result(f"{exc} The call was not sent for review.")
        review_id = "mcp-" + uuid.uuid4().hex
        who = caller_of(ctx)
        client = client_of(ctx)
        configurable: dict[str, Any] = {"thread_id": review_id, "channel": "mcp"}
        if who is not None:
            configurable["reviewer"] = who
        metadata = {"mcp_client": client, "mcp_upstream": route.server, "mcp_tool": name}
        if who is not None:
            metadata["mcp_caller"] = who["id"]  # only this identity collects the outcome (G7)
        session = session_of(ctx) if ctx.request is not None else f"stdio-{self.connection_id}"
        if session is not None:
            metadata["mcp_session"] = session
        config: dict[str, Any] = {"configurable": configurable, "metadata": metadata}
        message = call_message(
            name=name,
            arguments=arguments,
            call_id="call_" + review_id[4:],
            client=client,
            server=route.server,
        )
        self._done[review_id] = asyncio.Event()
        try:
            await self.agent.ainvoke({"messages": [message]}, config)  # type: ignore[arg-type]
            return await self._hold(ctx, review_id, name, who)
        finally:
            self._done.pop(review_id, None)

    async def _await_review(
        self, ctx: ServerRequestContext[Any], arguments: dict[str, Any]
    ) -> types.CallToolResult:
        """``handrail_await_review``: hold again for a review of this gateway's (G7)."""
        review_id = arguments.get("review_id")
        if not isinstance(review_id, str) or not review_id.startswith("mcp-") or len(review_id) > 100:
            return error_result(
                f'{AWAIT_TOOL} needs {{"review_id": "mcp-..."}} from a "Review pending" reply.'
            )
        record = await self.store.aget_thread(review_id)
        metadata = record.metadata if record is not None else {}
        caller = caller_of(ctx)
        mine = metadata.get("mcp_caller") in (None, caller["id"] if caller is not None else None)
        if metadata.get(ASSISTANT_KEY) != self.name or "mcp_tool" not in metadata or not mine:
            # the same words for another caller's review: its existence is not told either
            return error_result(f"There is no review {clean_text(review_id, 100)!r} at this gateway.")
        self._done.setdefault(review_id, asyncio.Event())
        try:
            return await self._hold(ctx, review_id, str(metadata["mcp_tool"]), caller)
        finally:
            self._done.pop(review_id, None)

    async def _hold(
        self, ctx: ServerRequestContext[Any], review_id: str, name: str, who: Any
    ) -> types.CallToolResult:
        """G5 and G6: wait for the outcome, with progress; withdraw when cancelled."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        next_progress = started
        done = self._done.setdefault(review_id, asyncio.Event())
        try:
            while True:
                reply = await self._reply(review_id)
                if reply is not None:
                    return reply
                now = loop.time()
                if now - started >= self.hold:
                    return pending_result(review_id, name, now - started)
                if now >= next_progress:
                    await ctx.session.report_progress(
                        now - started,
                        self.hold,
                        f"waiting for a person to review the call to {name} ({review_id})",
                    )
                    next_progress = now + self.progress_every
                wait = min(self.hold - (now - started), next_progress - now, self.poll)
                try:
                    async with asyncio.timeout(max(wait, 0.0)):
                        await done.wait()
                except TimeoutError:
                    pass
                done.clear()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._withdraw(review_id, who)
            raise

    async def _withdraw(self, review_id: str, who: Any) -> None:
        try:
            withdrawn = await self.agent.awithdraw(review_id, reason=CANCELLED, by=who, channel="mcp")
        except HandrailError as exc:  # answered and running, say: it is no longer the client's to take back
            log.info("review %s was not withdrawn: %s", review_id, exc)
            return
        if withdrawn:
            log.info("review %s withdrawn: %s", review_id, CANCELLED)

    async def _reply(self, review_id: str) -> types.CallToolResult | None:
        """The reply for the review's call once it has a result; None while it waits."""
        config: Any = {"configurable": {"thread_id": review_id}}
        state = await self.agent.aget_state(config)
        call_id = "call_" + review_id[4:]
        for message in reversed(state.values.get("messages", [])):
            if isinstance(message, ToolMessage) and message.tool_call_id == call_id:
                trail = [] if message.artifact is not None else await self.agent.aget_audit_trail(config)
                return reply_for(message, review_id, trail)
        return None


def caller_of(ctx: ServerRequestContext[Any]) -> Any:
    """Who is calling over HTTP: the bearer token's identity (``http.py``); None on stdio."""
    request = ctx.request
    state = getattr(request, "state", None)
    credential = getattr(state, "handrail_credential", None) if state is not None else None
    return credential.reviewer if credential is not None else None


def client_of(ctx: ServerRequestContext[Any]) -> str:
    """The MCP client's name and version, as it gave them (cleaned), or ``"unknown"``."""
    params = ctx.session.client_params
    info = params.client_info if params is not None else None
    if info is None:
        return "unknown"
    return clean_text(f"{info.name} {info.version}".strip(), 120)


def session_of(ctx: ServerRequestContext[Any]) -> str | None:
    """The streamable HTTP session id, when the request came over HTTP in a session (the
    2026-07-28 protocol has none: each request stands alone)."""
    headers: Mapping[str, str] | None = getattr(ctx.request, "headers", None)
    if headers is None:
        return None
    value = headers.get("mcp-session-id")
    return clean_text(value, 100) if value else None
