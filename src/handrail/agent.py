"""create_agent and the Agent facade.

The facade is thin: it checks the arguments, builds an :class:`~handrail.runtime.effects.Env`
and hands the work to the run loop, driven synchronously or asynchronously.
"""

from __future__ import annotations

import contextvars
import os
import queue
import threading
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from handrail import review
from handrail.checkpoint.base import (
    BaseCheckpointSaver,
    ClaimFilter,
    PendingOrder,
    ThreadFilter,
    ThreadRecord,
)
from handrail.checkpoint.grants import GrantFilter, GrantRecord
from handrail.checkpoint.memory import InMemorySaver
from handrail.decisions import Decision, name_first_answer
from handrail.errors import ConfigurationError, ConflictError, InvalidInputError
from handrail.messages import SystemMessage
from handrail.middleware.types import AgentMiddleware
from handrail.models import init_chat_model
from handrail.models.base import ChatModel
from handrail.runtime import answering, inbox, loop, maintenance, reading
from handrail.runtime.effects import Env, drive_async, drive_sync
from handrail.runtime.inbox import InterruptPage, PendingInterrupt
from handrail.runtime.older_stores import takes
from handrail.runtime.spec import AgentSpec
from handrail.tools import Tool, coerce_tool
from handrail.types import (
    AuditEntry,
    AuditVerification,
    Command,
    GraphOutput,
    Interrupt,
    RunnableConfig,
    StateSnapshot,
)

__all__ = ["Agent", "InterruptPage", "PendingInterrupt", "create_agent"]

StreamMode = Literal["values", "updates", "messages", "custom"]
STREAM_MODES: tuple[str, ...] = ("values", "updates", "messages", "custom")
Version = Literal["v1", "v2"]


def create_agent(
    model: str | ChatModel,
    tools: Sequence[Any] | None = None,
    *,
    system_prompt: str | SystemMessage | None = None,
    middleware: Sequence[AgentMiddleware] = (),
    checkpointer: BaseCheckpointSaver | None = None,
    name: str | None = None,
    response_format: Any = None,
    state_schema: type | None = None,
    context_schema: type | None = None,
    store: Any = None,
    debug: bool = False,
    policy_file: str | os.PathLike[str] | None = None,
) -> Agent:
    """Build an agent: a model that calls tools in a loop, with middleware around it.

    Example::

        agent = create_agent(
            model="openai:gpt-5.4",
            tools=[write_file, execute_sql, read_data],
            middleware=[HumanInTheLoopMiddleware(interrupt_on={"write_file": True})],
            checkpointer=InMemorySaver(),
        )

    ``model`` is a :class:`~handrail.models.ChatModel` or a ``"provider:model"`` string.
    ``tools`` are plain functions, ``@tool`` functions or :class:`~handrail.Tool`
    objects. A checkpointer is needed for any pause (SPEC rule 7). Duplicate tool or
    middleware names raise :class:`~handrail.errors.ConfigurationError`.

    As in LangChain: ``response_format`` (a schema, ``ToolStrategy`` or
    ``ProviderStrategy``) makes the final answer structured, in
    ``state["structured_response"]``; ``state_schema`` adds state keys;
    ``context_schema`` types ``invoke(..., context=...)``, which hooks and tools read
    as ``runtime.context``; ``store`` is what they see as ``runtime.store``.

    ``policy_file`` (``handrail.toml``, or a ``pyproject.toml`` with ``[tool.handrail]``)
    gives the review policy instead of a ``HumanInTheLoopMiddleware`` in ``middleware``:
    the file's table for this agent's ``name`` (or its only agent) becomes that
    middleware, after the others. A problem in the file, or a tool it names that the
    agent does not have, raises :class:`~handrail.review.policy_file.PolicyFileError`
    (see docs/policies.md).
    """
    from handrail import _compat_agent

    chat_model = _coerce_model(model)
    middleware_list = _compat_agent.extra_middleware(state_schema, response_format) + list(middleware)
    names: set[str] = set()
    for item in middleware_list:
        if not isinstance(item, AgentMiddleware):
            raise ConfigurationError(
                f"middleware must be AgentMiddleware instances, got {type(item).__name__}"
            )
        if item.name in names:
            raise ConfigurationError(
                f"two middleware are named {item.name!r}; give one a different name "
                "(set its `name` attribute)"
            )
        names.add(item.name)
    tool_map: dict[str, Tool] = {}
    for candidate in [*(tools or ()), *(t for m in middleware_list for t in m.tools)]:
        resolved = coerce_tool(candidate)
        if resolved.name in tool_map:
            raise ConfigurationError(f"two tools are named {resolved.name!r}; tool names must be unique")
        tool_map[resolved.name] = resolved
    if checkpointer is not None and not isinstance(checkpointer, BaseCheckpointSaver):
        raise ConfigurationError(
            f"checkpointer must be a saver such as InMemorySaver(), got {type(checkpointer).__name__}"
        )
    if isinstance(system_prompt, SystemMessage):
        system_prompt = system_prompt.text
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise ConfigurationError("system_prompt must be a string or a SystemMessage")
    if policy_file is not None:
        from handrail.review.policy_file import sole_review_middleware

        middleware_list.append(sole_review_middleware(policy_file, name, middleware_list, tool_map))
    for item in middleware_list:
        item.bind(tool_map)
    spec = AgentSpec(
        name=name,
        model=chat_model,
        tools=tool_map,
        middleware=middleware_list,
        system_prompt=system_prompt,
        store=checkpointer,
        long_term_store=store,
        context_schema=context_schema,
        response_format=_compat_agent.resolve_response_format(response_format, chat_model),
    )
    return Agent(spec)


def _coerce_model(model: Any) -> ChatModel:
    if isinstance(model, ChatModel):
        return model
    if isinstance(model, str):
        return init_chat_model(model)
    adapter = getattr(model, "__handrail_model__", None)
    if callable(adapter):
        result = adapter()
        if isinstance(result, ChatModel):
            return result
    if callable(getattr(model, "bind_tools", None)) and callable(getattr(model, "invoke", None)):
        from handrail.models.langchain import from_langchain_model  # a LangChain chat model

        return from_langchain_model(model)
    raise ConfigurationError(
        f"model must be a ChatModel or a 'provider:model' string, got {type(model).__name__}"
    )


class Agent:
    """A runnable agent: ``invoke``, ``stream``, state, history and the inbox.

    Every method has an async twin (``ainvoke``, ``astream``, ``aget_state``, ...).
    """

    def __init__(self, spec: AgentSpec) -> None:
        self._spec = spec
        self._bound_config: dict[str, Any] = {}

    def with_config(self, config: RunnableConfig | None = None, **kwargs: Any) -> Agent:
        """A copy of the agent whose runs use ``config`` (and ``kwargs``) as defaults.

        The caller's config is merged over it (``configurable`` and ``metadata`` key by
        key). Example: ``agent.with_config({"recursion_limit": 50})``.
        """
        from handrail import _compat_agent

        bound = Agent(self._spec)
        bound._bound_config = _compat_agent.merge_configs(
            _compat_agent.merge_configs(self._bound_config, config), kwargs
        )
        return bound

    def with_policy_file(self, policy_file: str | os.PathLike[str], *, name: str | None = None) -> Agent:
        """The same agent under the review policy a policy file gives it (``handrail serve
        --policy``): the file's table for ``name`` (default: the agent's name, or the
        file's only agent) replaces the agent's ``HumanInTheLoopMiddleware``, if it has
        one. Raises :class:`~handrail.review.policy_file.PolicyFileError` as
        ``create_agent(..., policy_file=...)`` does.
        """
        from dataclasses import replace

        from handrail.review.policy_file import review_replaced
        from handrail.runtime.spec import FoldCache

        middleware = review_replaced(
            policy_file, name or self._spec.name, self._spec.middleware, self._spec.tools
        )
        moved = Agent(replace(self._spec, middleware=middleware, cache=FoldCache()))
        moved._bound_config = self._bound_config
        return moved

    def with_checkpointer(self, checkpointer: BaseCheckpointSaver) -> Agent:
        """The same agent keeping its threads in ``checkpointer`` (with a cache of its own).

        Example: ``handrail serve`` runs every served agent on the store its flags name,
        ``agent.with_checkpointer(AsyncPostgresSaver.from_conn_string(dsn))``.
        """
        if not isinstance(checkpointer, BaseCheckpointSaver):
            raise ConfigurationError(
                f"checkpointer must be a saver such as InMemorySaver(), got {type(checkpointer).__name__}"
            )
        from dataclasses import replace

        from handrail.runtime.spec import FoldCache

        moved = Agent(replace(self._spec, store=checkpointer, cache=FoldCache()))
        moved._bound_config = self._bound_config
        return moved

    def get_graph(self, config: RunnableConfig | None = None, *, xray: Any = False) -> Any:
        """The agent's steps as a graph: ``agent.get_graph().draw_mermaid()``."""
        from handrail.graph import agent_graph

        return agent_graph(self._spec)

    @property
    def name(self) -> str | None:
        """The agent's name (also set on its AI messages)."""
        return self._spec.name

    @property
    def checkpointer(self) -> BaseCheckpointSaver | None:
        """The store the agent saves its threads in."""
        return self._spec.store

    @property
    def tools(self) -> dict[str, Tool]:
        """The agent's tools by name."""
        return dict(self._spec.tools)

    @property
    def model(self) -> ChatModel:
        """The chat model."""
        return self._spec.model

    # Runs ---------------------------------------------------------------------------------
    def invoke(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        context: Any = None,
        version: Version = "v1",
        **kwargs: Any,
    ) -> Any:
        """Run until the agent finishes or pauses; return the state (v1) or a GraphOutput (v2).

        ``input`` is ``{"messages": [...]}``, a :class:`~handrail.Command`, or None to
        continue the thread from where it stands. When paused, the v1 state holds
        ``"__interrupt__"``: the pending :class:`~handrail.Interrupt` list. ``context`` is
        what hooks and tools read as ``runtime.context``.
        """
        _check_version(version)
        env, request = self._prepare_run(input, config, frozenset(), context, kwargs)
        return _output(self._run_sync(env, request), version)

    async def ainvoke(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        context: Any = None,
        version: Version = "v1",
        **kwargs: Any,
    ) -> Any:
        """Async :meth:`invoke`."""
        _check_version(version)
        env, request = self._prepare_run(input, config, frozenset(), context, kwargs)
        return _output(await self._run_async(env, request), version)

    def stream(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        stream_mode: StreamMode | Sequence[StreamMode] = "values",
        version: Version = "v1",
        context: Any = None,
        **kwargs: Any,
    ) -> Iterator[Any]:
        """Run and yield progress as it happens.

        Modes: ``"values"`` (the state after each step), ``"updates"`` (``{step: update}``;
        at a pause ``{"__interrupt__": (...)}``), ``"messages"`` (``(token_chunk,
        metadata)`` as the model streams), ``"custom"`` (what tools send through
        ``get_stream_writer()``). With a list of modes, v1 yields ``(mode, chunk)``; v2
        always yields ``{"type", "ns", "data"}``.
        """
        _check_version(version)
        modes, single = _parse_modes(stream_mode)
        env, request = self._prepare_run(input, config, modes, context, kwargs)
        chunks: queue.Queue[tuple[str, Any]] = queue.Queue()
        cancelled = threading.Event()

        def emit(mode: str, chunk: Any) -> None:
            if cancelled.is_set():
                raise _StreamClosed()
            chunks.put((mode, chunk))

        env.emit = emit

        def work() -> None:
            try:
                self._run_sync(env, request)
                chunks.put((_DONE, None))
            except BaseException as exc:  # handed to the consumer's thread
                chunks.put((_FAILED, exc))

        worker = threading.Thread(target=contextvars.copy_context().run, args=(work,), daemon=True)
        worker.start()
        try:
            while True:
                mode, chunk = chunks.get()
                if mode == _DONE:
                    return
                if mode == _FAILED:
                    if isinstance(chunk, _StreamClosed):
                        return
                    raise chunk
                yield _format(mode, chunk, single, version)
        finally:
            # Stop the run at its next chunk and wait, so the thread is quiet when we return.
            cancelled.set()
            worker.join()

    async def astream(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        stream_mode: StreamMode | Sequence[StreamMode] = "values",
        version: Version = "v1",
        context: Any = None,
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        """Async :meth:`stream`."""
        import asyncio

        _check_version(version)
        modes, single = _parse_modes(stream_mode)
        env, request = self._prepare_run(input, config, modes, context, kwargs)
        chunks: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        env.emit = lambda mode, chunk: chunks.put_nowait((mode, chunk))

        async def work() -> None:
            try:
                await self._run_async(env, request)
                chunks.put_nowait((_DONE, None))
            except BaseException as exc:
                chunks.put_nowait((_FAILED, exc))

        task = asyncio.ensure_future(work())
        try:
            while True:
                mode, chunk = await chunks.get()
                if mode == _DONE:
                    return
                if mode == _FAILED:
                    raise chunk
                yield _format(mode, chunk, single, version)
        finally:
            if not task.done():
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass

    # Answers without running them (SPEC §5.1) -----------------------------------------------
    def decide(
        self, thread_id: str, interrupt_id: str, answer: Any, *, reviewer: Any, channel: str = "python"
    ) -> Decision:
        """Record ``reviewer``'s answer to one interrupt, without running anything.

        The answer is checked as a resume is (rule 5) and against the policy's
        ``reviewers`` roles (rule 12: :class:`~handrail.errors.NotAllowedError`, a
        ``PermissionError``), then saved with the reviewer, the channel and the time
        (rule 11). ``agent.invoke(None, config)`` (or the service's worker) then runs it.
        An interrupt answered first by someone else raises
        :class:`~handrail.errors.AlreadyAnsweredError`, naming who and when.

        Example::

            agent.decide("some_id", item.interrupt.id, {"decisions": [{"type": "approve"}]},
                         reviewer={"id": "alice", "roles": ["dba"]})
            agent.invoke(None, {"configurable": {"thread_id": "some_id"}})
        """
        env, request = self._decision_run(thread_id, interrupt_id, answer, reviewer, channel)
        return _decision(thread_id, self._run_sync(env, request), request, interrupt_id)

    async def adecide(
        self, thread_id: str, interrupt_id: str, answer: Any, *, reviewer: Any, channel: str = "python"
    ) -> Decision:
        """Async :meth:`decide`."""
        env, request = self._decision_run(thread_id, interrupt_id, answer, reviewer, channel)
        return _decision(thread_id, await self._run_async(env, request), request, interrupt_id)

    def expire(self, thread_id: str, *, now: float | None = None) -> list[str]:
        """Resolve the reviews of ``thread_id`` whose expiry has passed (SPEC rule 15), by
        their policies' ``on_expiry``, without running anything; returns their ids.

        The resolution is an answer with channel ``expiry`` and no reviewer; the thread is
        then queued for a worker, or ``invoke(None, config)`` runs it (which also resolves
        what has expired). ``now`` (seconds since the epoch) judges expiry at another time
        than the clock's. A decision recorded first wins: its review is not expired
        (rule 8). Sweeping many threads: :func:`handrail.sweep.sweep`.
        """
        env, request = self._expiry_run(thread_id, now)
        try:
            return sorted(self._run_sync(env, request).recorded)
        except ConflictError:
            return []  # being run elsewhere: that run resolves it, or the next sweep

    async def aexpire(self, thread_id: str, *, now: float | None = None) -> list[str]:
        """Async :meth:`expire`."""
        env, request = self._expiry_run(thread_id, now)
        try:
            return sorted((await self._run_async(env, request)).recorded)
        except ConflictError:
            return []

    def withdraw(
        self,
        thread_id: str,
        *,
        reason: str,
        interrupt_ids: Sequence[str] = (),
        by: Any = None,
        channel: str = "withdrawn",
    ) -> list[str]:
        """Take back pending reviews of ``thread_id`` (all of them, or ``interrupt_ids``):
        every call they hold is rejected with ``reason``, recorded with ``by`` and
        ``channel``, without running anything; returns the ids withdrawn (none when they
        were answered first). For whoever asked, not for reviewers: it can only reject.
        The MCP gateway withdraws the review of a call its client cancelled.

        Example::

            agent.withdraw("some_id", reason="the client cancelled the call")
        """
        env, request = self._withdrawal_run(thread_id, reason, interrupt_ids, by, channel)
        return sorted(self._run_sync(env, request).recorded)

    async def awithdraw(
        self,
        thread_id: str,
        *,
        reason: str,
        interrupt_ids: Sequence[str] = (),
        by: Any = None,
        channel: str = "withdrawn",
    ) -> list[str]:
        """Async :meth:`withdraw`."""
        env, request = self._withdrawal_run(thread_id, reason, interrupt_ids, by, channel)
        return sorted((await self._run_async(env, request)).recorded)

    def _withdrawal_run(
        self, thread_id: str, reason: str, interrupt_ids: Sequence[str], by: Any, channel: str
    ) -> tuple[Env, loop.RunRequest]:
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidInputError("withdraw needs a reason: a non-empty string")
        if isinstance(interrupt_ids, str) or not all(isinstance(i, str) for i in interrupt_ids):
            raise InvalidInputError("interrupt_ids must be a list of interrupt ids")
        withdrawal = answering.Withdrawal(reason, tuple(interrupt_ids), by, channel)
        config: RunnableConfig = {"configurable": {"thread_id": thread_id, "channel": channel}}
        env, request = self._prepare_run(withdrawal, config, frozenset())
        return env, request._replace(record_only=True)

    def _expiry_run(self, thread_id: str, now: float | None) -> tuple[Env, loop.RunRequest]:
        config: RunnableConfig = {"configurable": {"thread_id": thread_id, "channel": "expiry"}}
        env, request = self._prepare_run(None, config, frozenset())
        return env, request._replace(record_only=True, now=now)

    # Grants (SPEC rule 16) -----------------------------------------------------------------
    def list_grants(
        self,
        *,
        thread_id: str | None = None,
        agent: str | None = None,
        tool: str | None = None,
        active: bool = True,
        limit: int = 100,
        offset: int = 0,
    ) -> list[GrantRecord]:
        """Grants on this agent's store, newest first: given on ``thread_id``, for ``agent``
        (an assistant id) or ``tool``; with ``active`` (the default) only those in force
        now. A grant is given by an approval that carries one (``{"type": "approve",
        "grant": {"scope": "thread", "ttl": 3600}}``) and lets later calls of its tool run
        without a pause.

        Example::

            for grant in agent.list_grants(thread_id="t1"):
                print(grant.grant_id, grant.tool, grant.uses_left, grant.given_by)
        """
        store = self._store_or_raise()
        return store.list_grants(_grant_filter(thread_id, agent, tool, active, limit, offset))

    async def alist_grants(
        self,
        *,
        thread_id: str | None = None,
        agent: str | None = None,
        tool: str | None = None,
        active: bool = True,
        limit: int = 100,
        offset: int = 0,
    ) -> list[GrantRecord]:
        """Async :meth:`list_grants`."""
        store = self._store_or_raise()
        return await store.alist_grants(_grant_filter(thread_id, agent, tool, active, limit, offset))

    def revoke_grant(self, grant_id: str, *, by: Any = None) -> GrantRecord:
        """Revoke a grant: it covers no call that starts after (a call already planned under
        it runs). ``by`` is who revoked it, for the record. Revoking twice changes nothing.
        An unknown id raises :class:`~handrail.errors.InvalidInputError`."""
        found = self._store_or_raise().revoke_grant(_grant_id(grant_id), by=_reviewer(by))
        if found is None:
            raise InvalidInputError(f"there is no grant {grant_id!r}")
        return found

    async def arevoke_grant(self, grant_id: str, *, by: Any = None) -> GrantRecord:
        """Async :meth:`revoke_grant`."""
        found = await self._store_or_raise().arevoke_grant(_grant_id(grant_id), by=_reviewer(by))
        if found is None:
            raise InvalidInputError(f"there is no grant {grant_id!r}")
        return found

    def run_claimed(self, thread_id: str, run_id: str) -> loop.RunResult:
        """Run what is due on ``thread_id`` as ``run_id``, a run the caller claimed on the store
        (``claim_queued``: a worker, ``handrail.worker``); the claim ends with the run.

        The run reads the thread first (no cached reading): a claimed run is never retried
        under a run id of its own.
        """
        return self._run_sync(*self._claimed_run(thread_id, run_id))

    async def arun_claimed(self, thread_id: str, run_id: str) -> loop.RunResult:
        """Async :meth:`run_claimed`."""
        return await self._run_async(*self._claimed_run(thread_id, run_id))

    # Who may decide (SPEC rule 12) ------------------------------------------------------------
    def may_decide(self, value: Any, reviewer: Any) -> bool:
        """Whether ``reviewer`` may answer a review whose value is ``value`` (an
        ``Interrupt``'s ``value``), under this agent's policies: what every channel and the
        inbox ask (``handrail.review.may_answer``).

        Example::

            agent.may_decide(interrupt.value, {"id": "bob", "roles": ["ops"]})   # False for a DBA's tool
        """
        return review.may_answer(self._spec.policies, value, reviewer)

    def refusal(self, value: Any, reviewer: Any) -> str | None:
        """Why ``reviewer`` may not answer a review with ``value``, or None if they may."""
        return review.refusal(self._spec.policies, value, reviewer)

    def roles_for(self, value: Any) -> list[str]:
        """The roles that may decide a review with ``value`` (empty: any reviewer)."""
        return sorted({r for _, roles in review.roles_required(self._spec.policies, value) for r in roles})

    def _claimed_run(self, thread_id: str, run_id: str) -> tuple[Env, loop.RunRequest]:
        env, request = self._prepare_run(None, {"configurable": {"thread_id": thread_id}}, frozenset())
        env.run_id, env.claimed, env.trust_cache = run_id, True, False
        return env, request

    def _decision_run(
        self, thread_id: str, interrupt_id: str, answer: Any, reviewer: Any, channel: str
    ) -> tuple[Env, loop.RunRequest]:
        if reviewer is None:
            raise ConfigurationError("decide needs a reviewer: a string id or {'id': str, 'roles': [...]}")
        if not isinstance(interrupt_id, str) or not interrupt_id:
            raise InvalidInputError(f"interrupt_id must be a non-empty string, got {interrupt_id!r}")
        if not isinstance(channel, str) or not channel:
            raise InvalidInputError(f"channel must be a non-empty string, got {channel!r}")
        config: RunnableConfig = {"configurable": {"thread_id": thread_id, "reviewer": reviewer}}
        env, request = self._prepare_run(Command(resume={interrupt_id: answer}), config, frozenset())
        return env, request._replace(channel=channel, record_only=True)

    def _prepare_run(
        self,
        input: Any,
        config: RunnableConfig | None,
        modes: frozenset[str],
        context: Any = None,
        options: Mapping[str, Any] | None = None,
    ) -> tuple[Env, loop.RunRequest]:
        from handrail import _compat_agent

        config = _compat_agent.run_config(self, config, options or {})
        context = _compat_agent.coerce_context(self._spec.context_schema, context)
        store, thread_id, configurable, can_pause, why = self._resolve(config, for_run=True)
        reviewer = _identity(configurable)
        metadata = (config or {}).get("metadata")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise ConfigurationError("config['metadata'] must be a dict")
        checkpoint_id = configurable.get("checkpoint_id")
        if checkpoint_id is not None and not isinstance(checkpoint_id, str):
            raise ConfigurationError("config['configurable']['checkpoint_id'] must be a string")
        channel = configurable.get("channel", "python")
        if not isinstance(channel, str) or not channel:
            raise ConfigurationError("config['configurable']['channel'] must be a non-empty string")
        request = loop.RunRequest(
            input=input,
            config=config or {},
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
            reviewer=reviewer,
            metadata=metadata,
            can_pause=can_pause,
            why_cannot_pause=why,
            context=context,
            channel=channel,
        )
        return Env(self._spec, store, thread_id, modes=modes), request

    def _run_sync(self, env: Env, request: loop.RunRequest) -> loop.RunResult:
        for attempt in range(1, _ATTEMPTS + 1):
            again = False
            try:
                result: loop.RunResult = drive_sync(loop.run(env, request), env)
                again = _stale(env)
                if not again:
                    return result
            except ConflictError as exc:
                again = attempt < _ATTEMPTS and _again(env)
                if not again:
                    trail = self.get_audit_trail(request.config) if exc.interrupt_ids else []
                    raise _named(exc, trail) from None
            except Exception:
                again = _stale(env)
                if not again:
                    raise
            finally:
                self._finish(env)
                if env.claimed and not again:
                    env.store.release_run(env.thread_id, env.run_id)
            env = _fresh(env)  # read again, and run again: nothing of the last attempt was saved or done
        raise AssertionError("unreachable")  # pragma: no cover

    async def _run_async(self, env: Env, request: loop.RunRequest) -> loop.RunResult:
        import asyncio

        for attempt in range(1, _ATTEMPTS + 1):
            again = False
            try:
                result: loop.RunResult = await drive_async(loop.run(env, request), env)
                again = _stale(env)
                if not again:
                    return result
            except ConflictError as exc:
                again = attempt < _ATTEMPTS and _again(env)
                if not again:
                    trail = await self.aget_audit_trail(request.config) if exc.interrupt_ids else []
                    raise _named(exc, trail) from None
            except Exception:
                again = _stale(env)
                if not again:
                    raise
            finally:
                self._finish(env)
                if env.claimed and not again:
                    await env.store.arelease_run(env.thread_id, env.run_id)
            env = _fresh(env)
            await asyncio.sleep(0)  # let the writer that won go on
        raise AssertionError("unreachable")  # pragma: no cover

    def _finish(self, env: Env) -> None:
        if env.optimistic and env.appends == 0:
            self._spec.cache.drop(env.thread_id)  # never trust a reading nothing confirmed
        else:
            self._remember(env)

    def _remember(self, env: Env) -> None:
        # Only a reading that matches the store is worth keeping (nothing failed, nothing unsaved).
        if env.fold is not None and not env.broken and not env.buffer and self._spec.store is not None:
            self._spec.cache.put(env.fold)

    def _resolve(
        self, config: RunnableConfig | None, *, for_run: bool = False
    ) -> tuple[BaseCheckpointSaver, str, Mapping[str, Any], bool, str]:
        if config is None:
            config = {}
        if not isinstance(config, Mapping):
            raise ConfigurationError(
                "config must be a dict like {'configurable': {'thread_id': ...}}, got "
                f"{type(config).__name__}"
            )
        configurable = config.get("configurable") or {}
        if not isinstance(configurable, Mapping):
            raise ConfigurationError("config['configurable'] must be a dict")
        thread_id = configurable.get("thread_id")
        if thread_id is not None:
            if isinstance(thread_id, (int, uuid.UUID)) and not isinstance(thread_id, bool):
                thread_id = str(thread_id)
            if not isinstance(thread_id, str) or not thread_id:
                raise ConfigurationError(f"thread_id must be a non-empty string, got {thread_id!r}")
        store = self._spec.store
        if store is None:
            if not for_run:
                raise ConfigurationError(
                    "this agent has no checkpointer, so it keeps no threads: pass "
                    "checkpointer=InMemorySaver() (or another saver) to create_agent"
                )
            return (
                InMemorySaver(),
                thread_id or uuid.uuid4().hex,
                configurable,
                False,
                "the agent has no checkpointer",
            )
        if thread_id is None:
            raise ConfigurationError(
                "the agent has a checkpointer, so every call needs a thread: pass "
                "config={'configurable': {'thread_id': '...'}}"
            )
        return store, thread_id, configurable, True, ""

    def _reader(self, config: RunnableConfig | None) -> tuple[Env, Mapping[str, Any]]:
        store, thread_id, configurable, _, _ = self._resolve(config)
        return Env(self._spec, store, thread_id), configurable

    # State ----------------------------------------------------------------------------------
    def get_state(self, config: RunnableConfig) -> StateSnapshot:
        """The thread's state now, or at ``config["configurable"]["checkpoint_id"]``.

        ``interrupts`` holds only the pending interrupts; ``next`` the steps due.
        """
        env, configurable = self._reader(config)
        result: StateSnapshot = drive_sync(reading.snapshot(env, configurable.get("checkpoint_id")), env)
        return result

    async def aget_state(self, config: RunnableConfig) -> StateSnapshot:
        """Async :meth:`get_state`."""
        env, configurable = self._reader(config)
        result: StateSnapshot = await drive_async(
            reading.snapshot(env, configurable.get("checkpoint_id")), env
        )
        return result

    def get_state_history(
        self, config: RunnableConfig, *, before: RunnableConfig | None = None, limit: int | None = None
    ) -> Iterator[StateSnapshot]:
        """Every checkpoint of the thread, newest first."""
        env, _ = self._reader(config)
        yield from drive_sync(reading.history(env, before=_checkpoint_of(before), limit=limit), env)

    async def aget_state_history(
        self, config: RunnableConfig, *, before: RunnableConfig | None = None, limit: int | None = None
    ) -> AsyncIterator[StateSnapshot]:
        """Async :meth:`get_state_history`."""
        env, _ = self._reader(config)
        for item in await drive_async(reading.history(env, before=_checkpoint_of(before), limit=limit), env):
            yield item

    def update_state(
        self, config: RunnableConfig, values: dict[str, Any] | None, as_node: str | None = None
    ) -> RunnableConfig:
        """Change the thread's state by hand; return the config of the new checkpoint.

        With ``as_node`` the update counts as that step's output and the steps after it
        are due next. Pending interrupts are superseded: the paused step asks again,
        with new ids, when the thread continues.
        """
        env, configurable = self._reader(config)
        try:
            result: RunnableConfig = drive_sync(
                loop.update_state(
                    env, configurable.get("checkpoint_id"), values, as_node, *_caller(configurable)
                ),
                env,
            )
            return result
        finally:
            if env.broken:
                self._spec.cache.drop(env.thread_id)

    async def aupdate_state(
        self, config: RunnableConfig, values: dict[str, Any] | None, as_node: str | None = None
    ) -> RunnableConfig:
        """Async :meth:`update_state`."""
        env, configurable = self._reader(config)
        try:
            result: RunnableConfig = await drive_async(
                loop.update_state(
                    env, configurable.get("checkpoint_id"), values, as_node, *_caller(configurable)
                ),
                env,
            )
            return result
        finally:
            if env.broken:
                self._spec.cache.drop(env.thread_id)

    # Threads and the inbox ----------------------------------------------------------------------
    def list_interrupts(
        self,
        *,
        tool: str | None = None,
        thread_id: str | None = None,
        older_than: float | timedelta | None = None,
        metadata: Mapping[str, Any] | None = None,
        kind: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        reviewer: Any = None,
        order: PendingOrder = "oldest",
        owners: ClaimFilter | None = None,
    ) -> InterruptPage:
        """Pending interrupts across all threads, oldest first: the reviewers' inbox.

        Filter by ``tool`` name, ``thread_id``, ``older_than`` (seconds or a timedelta),
        thread ``metadata`` (a subset match) and ``kind`` (``"interrupt"`` or
        ``"outcome_unknown"``). With ``reviewer`` (``{"id", "roles"}``), only what that
        reviewer may decide (SPEC rule 12). ``order="newest"`` lists the newest first.
        Pages hold ``limit`` items; pass ``next_cursor`` on, with the same ``order``.
        ``owners`` (a :class:`~handrail.checkpoint.base.ClaimFilter`) keeps only the
        threads of some agents: ``ClaimFilter("assistant_id", ("sql",), or_missing=True)``
        lists the threads bound to ``sql`` and those bound to no agent (SPEC rule 21).

        Example::

            page = agent.list_interrupts(order="newest", limit=20)
            more = agent.list_interrupts(order="newest", limit=20, cursor=page.next_cursor)
        """
        store = self._store_or_raise()
        filter = inbox.pending_filter(
            tool, thread_id, older_than, metadata, kind, limit, cursor, order, owners=owners
        )
        env = Env(self._spec, store, "")
        page: InterruptPage = drive_sync(inbox.listing(env, filter, _reviewer(reviewer)), env)
        return page

    async def alist_interrupts(
        self,
        *,
        tool: str | None = None,
        thread_id: str | None = None,
        older_than: float | timedelta | None = None,
        metadata: Mapping[str, Any] | None = None,
        kind: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        reviewer: Any = None,
        order: PendingOrder = "oldest",
        owners: ClaimFilter | None = None,
    ) -> InterruptPage:
        """Async :meth:`list_interrupts`."""
        store = self._store_or_raise()
        filter = inbox.pending_filter(
            tool, thread_id, older_than, metadata, kind, limit, cursor, order, owners=owners
        )
        env = Env(self._spec, store, "")
        page: InterruptPage = await drive_async(inbox.listing(env, filter, _reviewer(reviewer)), env)
        return page

    def list_threads(
        self,
        *,
        metadata: Mapping[str, Any] | None = None,
        status: Literal["idle", "running", "interrupted"] | None = None,
        updated_after: datetime | float | None = None,
        updated_before: datetime | float | None = None,
        limit: int = 100,
        offset: int = 0,
        owners: ClaimFilter | None = None,
    ) -> list[ThreadRecord]:
        """The store's threads, most recently updated first.

        Filter by thread ``metadata`` (a subset match), ``status`` (``"idle"``,
        ``"running"`` or ``"interrupted"``), last update time (datetimes, or epoch
        seconds) and ``owners``, the agents the threads belong to (as in
        :meth:`list_interrupts`).

        Example::

            stale = agent.list_threads(status="interrupted", updated_before=datetime(2026, 11, 1, tzinfo=UTC))
        """
        return self._store_or_raise().list_threads(
            inbox.thread_filter(metadata, status, updated_after, updated_before, limit, offset, owners)
        )

    async def alist_threads(
        self,
        *,
        metadata: Mapping[str, Any] | None = None,
        status: Literal["idle", "running", "interrupted"] | None = None,
        updated_after: datetime | float | None = None,
        updated_before: datetime | float | None = None,
        limit: int = 100,
        offset: int = 0,
        owners: ClaimFilter | None = None,
    ) -> list[ThreadRecord]:
        """Async :meth:`list_threads`."""
        return await self._store_or_raise().alist_threads(
            inbox.thread_filter(metadata, status, updated_after, updated_before, limit, offset, owners)
        )

    def prune_thread(self, thread_id: str, *, keep_last: int = 20) -> int:
        """Drop old checkpoints of a thread, keeping its state and its whole audit trail.

        The newest ``keep_last`` checkpoints stay available to ``get_state_history`` and
        time travel; older ones are gone, and the oldest one kept holds the state at that
        point. Every review request, answer and tool run stays in ``get_audit_trail``.
        Safe while the thread runs elsewhere. Returns how many events were dropped.

        Example::

            agent.prune_thread("some_id", keep_last=20)
        """
        env, _ = self._reader({"configurable": {"thread_id": thread_id}})
        dropped: int = drive_sync(maintenance.prune(env, keep_last), env)
        return dropped

    async def aprune_thread(self, thread_id: str, *, keep_last: int = 20) -> int:
        """Async :meth:`prune_thread`."""
        env, _ = self._reader({"configurable": {"thread_id": thread_id}})
        dropped: int = await drive_async(maintenance.prune(env, keep_last), env)
        return dropped

    def get_audit_trail(self, config: RunnableConfig) -> list[AuditEntry]:
        """Who was asked what, who answered what and when, and what actually ran.

        Read from the thread's log itself, oldest first; pruning never removes it.
        """
        env, _ = self._reader(config)
        entries: list[AuditEntry] = drive_sync(maintenance.audit_trail(env), env)
        return entries

    async def aget_audit_trail(self, config: RunnableConfig) -> list[AuditEntry]:
        """Async :meth:`get_audit_trail`."""
        env, _ = self._reader(config)
        entries: list[AuditEntry] = await drive_async(maintenance.audit_trail(env), env)
        return entries

    def audit(
        self,
        *,
        since: datetime | float | None = None,
        until: datetime | float | None = None,
        metadata: Mapping[str, Any] | None = None,
        limit: int = 1000,
        owners: ClaimFilter | None = None,
    ) -> list[AuditEntry]:
        """The audit trail across threads: every request, answer and tool run, oldest first.

        ``since``/``until`` (aware datetimes or epoch seconds) bound the entries' times,
        ``metadata`` picks the threads (a subset match), ``owners`` the agents they
        belong to (as in :meth:`list_interrupts`), ``limit`` caps the entries (the
        oldest are kept). Each thread updated since ``since`` is read from its log. A
        deleted thread has no log: the record its deletion left is its entry,
        ``event="thread_deleted"`` (who, when, the deleted log's head hash), filtered by
        the thread's metadata as it was.

        Example::

            for entry in agent.audit(since=datetime.now(UTC) - timedelta(days=1)):
                print(entry.at, entry.thread_id, entry.event, entry.reviewer)
        """
        env, args = self._audit_args(since, until, metadata, limit, owners)
        entries: list[AuditEntry] = drive_sync(maintenance.audit_across(env, *args), env)
        return entries

    async def aaudit(
        self,
        *,
        since: datetime | float | None = None,
        until: datetime | float | None = None,
        metadata: Mapping[str, Any] | None = None,
        limit: int = 1000,
        owners: ClaimFilter | None = None,
    ) -> list[AuditEntry]:
        """Async :meth:`audit`."""
        env, args = self._audit_args(since, until, metadata, limit, owners)
        entries: list[AuditEntry] = await drive_async(maintenance.audit_across(env, *args), env)
        return entries

    def _audit_args(
        self,
        since: datetime | float | None,
        until: datetime | float | None,
        metadata: Mapping[str, Any] | None,
        limit: int,
        owners: ClaimFilter | None,
    ) -> tuple[Env, tuple[ThreadFilter, float | None, float | None, int]]:
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 100_000:
            raise InvalidInputError(f"limit must be an integer from 1 to 100000, got {limit!r}")
        window = inbox.thread_filter(metadata, None, since, until, 1, 0, owners)
        return Env(self._spec, self._store_or_raise(), ""), (
            window,
            window.updated_after,
            window.updated_before,
            limit,
        )

    def verify_audit(self, config: RunnableConfig, *, expect_head: str | None = None) -> AuditVerification:
        """Check a thread's whole log against its hash chain (SPEC rule 18).

        Every stored record carries a hash over its content and the hash of the record
        before it, so a record changed, copied from another row, removed or moved is
        found: the report names the first record that does not match, and how. Loading
        a thread checks the same chain and raises ``SerializationError``; this reports
        instead of raising.

        The report's ``head_hash`` vouches for the whole log. A chain cannot see records
        cut from its own end, so keep ``head_hash`` where the database's writers cannot
        change it, and pass it back as ``expect_head``: the report is then ``ok`` only if
        the log still ends at that head, and otherwise says whether the log goes on past
        it or does not hold it at all (cut at its end, or rewritten). A malformed
        ``expect_head`` raises ``InvalidInputError`` (a ``ValueError``).
        """
        from handrail.checkpoint.integrity import read_head

        expected = read_head(expect_head) if expect_head is not None else None
        env, _ = self._reader(config)
        report: AuditVerification = drive_sync(maintenance.verify_audit(env, expected), env)
        return report

    async def averify_audit(
        self, config: RunnableConfig, *, expect_head: str | None = None
    ) -> AuditVerification:
        """Async :meth:`verify_audit`."""
        from handrail.checkpoint.integrity import read_head

        expected = read_head(expect_head) if expect_head is not None else None
        env, _ = self._reader(config)
        report: AuditVerification = await drive_async(maintenance.verify_audit(env, expected), env)
        return report

    def delete_thread(self, thread_id: str, *, by: Any = None) -> bool:
        """Delete a thread and its whole log; return whether it existed.

        The store keeps a record of the deletion (SPEC rule 21), written in the same
        transaction: ``by`` (who deletes it: a reviewer id or ``{"id", "roles"}``, as the
        config's ``reviewer``; None when nobody is named), the time, the number and hash
        of the deleted log's last record, and the thread's metadata. :meth:`audit` shows
        it as a ``"thread_deleted"`` entry; it is all that is left of the thread. A
        thread that does not exist leaves no record.

        A store written before deletions were recorded (its ``delete_thread`` takes no
        ``by``) still deletes the thread, and keeps no record of it.

        Example::

            agent.delete_thread("ticket-17", by={"id": "ops", "roles": ["admin"]})
        """
        store, extra = self._deleter(thread_id, by, "delete_thread")
        return store.delete_thread(thread_id, **extra)

    async def adelete_thread(self, thread_id: str, *, by: Any = None) -> bool:
        """Async :meth:`delete_thread`."""
        store, extra = self._deleter(thread_id, by, "adelete_thread")
        return await store.adelete_thread(thread_id, **extra)

    def _deleter(self, thread_id: str, by: Any, method: str) -> tuple[BaseCheckpointSaver, dict[str, Any]]:
        """The store, and ``by`` for it if it takes one (checked as a reviewer is)."""
        store = self._store_or_raise()
        try:
            who = _reviewer(by)
        except ConfigurationError as exc:
            raise InvalidInputError(f"by (who deletes the thread): {exc}") from None
        self._spec.cache.drop(thread_id)
        return store, ({"by": who} if who is not None and takes(type(store), method, "by") else {})

    def _store_or_raise(self) -> BaseCheckpointSaver:
        store = self._spec.store
        if store is None:
            raise ConfigurationError(
                "this agent has no checkpointer, so it keeps no threads: pass "
                "checkpointer=InMemorySaver() (or another saver) to create_agent"
            )
        return store


# Helpers ------------------------------------------------------------------------------------
_DONE = "__done__"
_FAILED = "__failed__"


class _StreamClosed(BaseException):
    """The consumer stopped reading a sync stream; the run stops at its next chunk."""


def _stale(env: Env) -> bool:
    """Whether a run started from a cached reading that no append confirmed: run it again.

    Such a run failed before saving anything, or finished without writing (its answer
    came from the cache alone). Nothing acts on the world before a run's first append
    (rule 7), so running it again from a fresh reading repeats nothing.
    """
    return env.optimistic and env.appends == 0


_ATTEMPTS = 8
"""How many times a run is tried when another writer changed the thread before its first append."""


def _again(env: Env) -> bool:
    """Whether a run refused by the store can run again from a fresh reading: its first
    append was refused (another writer changed the thread first: another review's answer,
    say) and it did nothing before it, so running it again repeats nothing (issue 24).
    An answer to a review someone else answered meanwhile is then refused by name."""
    return env.conflicted and env.appends == 0 and not env.acted


def _named(exc: ConflictError, trail: list[AuditEntry]) -> ConflictError:
    """A conflict over an answer, named after the answer that won when the log has it."""
    for interrupt_id in exc.interrupt_ids:
        named = name_first_answer(exc, interrupt_id, trail)
        if named is not exc:
            return named
    return exc


def _fresh(env: Env) -> Env:
    fresh = Env(
        env.spec,
        env.store,
        env.thread_id,
        run_id=env.run_id,
        emit=env.emit,
        modes=env.modes,
        trust_cache=False,
    )
    fresh.claimed = env.claimed  # a worker's claimed run keeps its claim and its run id
    return fresh


def _check_version(version: str) -> None:
    if version not in ("v1", "v2"):
        raise InvalidInputError(f"version must be 'v1' or 'v2', got {version!r}")


def _parse_modes(stream_mode: Any) -> tuple[frozenset[str], bool]:
    single = isinstance(stream_mode, str)
    modes = [stream_mode] if single else list(stream_mode)
    if not modes:
        raise InvalidInputError(f"stream_mode needs at least one of {list(STREAM_MODES)}")
    for mode in modes:
        if mode not in STREAM_MODES:
            raise InvalidInputError(f"unknown stream_mode {mode!r}; expected one of {list(STREAM_MODES)}")
    return frozenset(modes), single and len(modes) == 1


def _format(mode: str, chunk: Any, single: bool, version: str) -> Any:
    interrupts: tuple[Interrupt, ...] | None = None
    if mode == "values" and isinstance(chunk, tuple):
        chunk, interrupts = chunk
    if version == "v2":
        part: dict[str, Any] = {"type": mode, "ns": (), "data": chunk}
        if mode == "values":  # always there, as LangGraph's: empty while nothing is pending
            part["interrupts"] = interrupts if interrupts is not None else ()
        return part
    if interrupts is not None:
        chunk = {**chunk, "__interrupt__": list(interrupts)}
    return chunk if single else (mode, chunk)


def _output(result: loop.RunResult, version: str) -> Any:
    if version == "v2":
        return GraphOutput(value=result.values, interrupts=result.interrupts)
    values = dict(result.values)
    if result.interrupts:
        values["__interrupt__"] = list(result.interrupts)
    return values


def _reviewer(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, str) and value:
        return value
    if isinstance(value, Mapping) and isinstance(value.get("id"), str) and value["id"]:
        roles = value.get("roles", [])
        if not isinstance(roles, (list, tuple)) or not all(isinstance(r, str) for r in roles):
            raise ConfigurationError("reviewer roles must be a list of strings")
        unknown = sorted(set(value) - {"id", "roles"})
        if unknown:
            raise ConfigurationError(f"reviewer has unexpected key(s) {unknown}; expected 'id' and 'roles'")
        return {"id": value["id"], "roles": list(roles)}
    raise ConfigurationError(
        f"reviewer must be a string id or {{'id': str, 'roles': [str, ...]}}, got {value!r}"
    )


def _caller(configurable: Mapping[str, Any]) -> tuple[Any, str]:
    """Who makes a change, and through which channel, from a config (SPEC rule 21)."""
    channel = configurable.get("channel", "python")
    if not isinstance(channel, str) or not channel:
        raise ConfigurationError("config['configurable']['channel'] must be a non-empty string")
    return _identity(configurable), channel


def _identity(configurable: Mapping[str, Any]) -> Any:
    """Who is calling, from a config: its ``reviewer``, or ``user`` (the same, named for a
    run's starter: SPEC rule 13); giving both, they must agree."""
    reviewer = _reviewer(configurable.get("reviewer"))
    user = _reviewer(configurable.get("user"))
    if reviewer is not None and user is not None and reviewer != user:
        raise ConfigurationError(
            "config['configurable'] names both a 'reviewer' and a 'user', and they differ: name the "
            "caller once ('user' is another name for the same identity)"
        )
    return reviewer if reviewer is not None else user


def _decision(
    thread_id: str, result: loop.RunResult, request: loop.RunRequest, interrupt_id: str
) -> Decision:
    answer = result.answers.get(interrupt_id)
    approvals = result.approvals.get(interrupt_id, ())
    return Decision(thread_id, interrupt_id, answer, request.reviewer, request.channel, approvals)


def _checkpoint_of(config: RunnableConfig | None) -> str | None:
    if not config:
        return None
    value = config.get("configurable", {}).get("checkpoint_id")
    return value if isinstance(value, str) else None


def _grant_filter(
    thread_id: str | None, agent: str | None, tool: str | None, active: bool, limit: int, offset: int
) -> GrantFilter:
    if not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise InvalidInputError(f"limit must be an integer from 1 to 1000, got {limit!r}")
    if not isinstance(offset, int) or offset < 0:
        raise InvalidInputError(f"offset must be a non-negative integer, got {offset!r}")
    for name, value in (("thread_id", thread_id), ("agent", agent), ("tool", tool)):
        if value is not None and not isinstance(value, str):
            raise InvalidInputError(f"{name} must be a string, got {type(value).__name__}")
    at = answering.now() if active else None
    return GrantFilter(agent=agent, tool=tool, thread_id=thread_id, active_at=at, limit=limit, offset=offset)


def _grant_id(grant_id: Any) -> str:
    if not isinstance(grant_id, str) or not grant_id or len(grant_id) > 64:
        raise InvalidInputError(f"a grant id is a string of up to 64 characters, got {grant_id!r}")
    return grant_id
