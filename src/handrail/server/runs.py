"""Runs: the LangGraph Platform API's ``/threads/{id}/runs`` family, run in this process.

A run is one ``agent.astream(...)`` (or ``ainvoke``) on a thread, started by a client
(``runs.create``, ``runs.wait``, ``runs.stream``). Answers recorded through handrail's
own paths are run by workers instead (``handrail.worker``). The run keeps the server-sent events it
produced, so ``join`` and a joined ``stream`` see all of them. One run at a time per
thread in this process (LangGraph's ``multitask_strategy="reject"``); the store's
rule 8 keeps two processes apart.

Runs live in memory: a restarted service forgets finished runs, not threads (their
state, interrupts and audit trail are in the store).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from fastapi import APIRouter, Body, Depends, Request
from starlette.responses import Response, StreamingResponse

from handrail.agent import Agent
from handrail.errors import HandrailError
from handrail.server.auth import caller
from handrail.server.problems import Problem
from handrail.server.service import BOUND_KEYS, UNBOUND, Service, ThreadRow
from handrail.server.tokens import Credential
from handrail.server.wire import to_wire
from handrail.types import Command

__all__ = ["Run", "RunRegistry", "router"]

log = logging.getLogger("handrail.server")

router = APIRouter(tags=["runs"])

# LangGraph stream modes handrail serves, and the agent mode each one reads.
STREAM_MODES = {
    "values": "values",
    "updates": "updates",
    "messages": "messages",
    "messages-tuple": "messages",
    "custom": "custom",
}
_SUPPORTED_FIELDS = frozenset(
    {
        "assistant_id",
        "input",
        "command",
        "stream_mode",
        "config",
        "metadata",
        "context",
        "multitask_strategy",
        "if_not_exists",
        "stream_subgraphs",
        "stream_resumable",
        "on_disconnect",
        "checkpoint_id",
    }
)


@dataclass
class Run:
    """One run of an agent on a thread, and the events it sent."""

    run_id: str
    thread_id: str
    assistant_id: str
    metadata: dict[str, Any]
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    status: str = "pending"
    events: list[tuple[str, Any]] = field(default_factory=list)
    result: dict[str, Any] | None = None
    error: BaseException | None = None
    task: asyncio.Task[None] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    def publish(self, event: str, data: Any) -> None:
        self.events.append((event, data))
        self._wake.set()
        self._wake = asyncio.Event()

    async def follow(self) -> AsyncIterator[tuple[str, Any]]:
        """Every event of the run, those sent already first, until it ends."""
        index = 0
        while True:
            wake = self._wake
            while index < len(self.events):
                yield self.events[index]
                index += 1
            if self.done.is_set():
                return
            await wake.wait()

    def as_json(self) -> dict[str, Any]:
        """The LangGraph ``Run`` dict."""
        return {
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "assistant_id": self.assistant_id,
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
            "status": self.status,
            "metadata": self.metadata,
            "multitask_strategy": "reject",
            "kwargs": {},
        }


class RunRegistry:
    """The runs of this process, and the one active run of each thread."""

    def __init__(self) -> None:
        self.runs: dict[str, Run] = {}
        self.active: dict[str, Run] = {}

    def get(self, thread_id: str, run_id: str) -> Run:
        run = self.runs.get(run_id)
        if run is None or run.thread_id != thread_id:
            raise Problem(404, f"no run {run_id!r} on thread {thread_id!r} in this service process")
        return run

    def start(
        self,
        agent: Agent,
        assistant_id: str,
        thread_id: str,
        run_input: Any,
        config: dict[str, Any],
        modes: list[str],
        metadata: dict[str, Any],
    ) -> Run:
        """Start a run as a task of the event loop."""
        busy = self.active.get(thread_id)
        if busy is not None:
            raise Problem(
                409,
                f"thread {thread_id!r} is busy with run {busy.run_id}; wait for it (runs.join) or cancel it",
            )
        run = Run(str(uuid.uuid4()), thread_id, assistant_id, metadata)
        self.runs[run.run_id] = run
        self.active[thread_id] = run
        run.task = asyncio.get_running_loop().create_task(self._execute(run, agent, run_input, config, modes))
        return run

    async def _execute(
        self, run: Run, agent: Agent, run_input: Any, config: dict[str, Any], modes: list[str]
    ) -> None:
        run_config: Any = config
        try:
            run.status = "running"
            run.publish("metadata", {"run_id": run.run_id, "attempt": 1})
            if modes:
                wanted = {STREAM_MODES[m]: m for m in modes}
                agent_modes: list[Any] = sorted(wanted)
                async for part in agent.astream(run_input, run_config, stream_mode=agent_modes, version="v2"):
                    data = part["data"]
                    if part["type"] == "values" and "interrupts" in part:
                        data = {**data, "__interrupt__": part["interrupts"]}
                    run.publish(part["type"], data)  # made JSON when a stream reads it
                snapshot = await agent.aget_state(run_config)
                pending = snapshot.interrupts
                values = to_wire(snapshot.values)
            else:  # runs.wait, runs.create: nobody streams it
                output = await agent.ainvoke(run_input, run_config, version="v2")
                pending = output.interrupts
                values = to_wire(output.value)
            if pending:
                values["__interrupt__"] = to_wire(list(pending))
            run.result = values
            run.status = "success"
        except asyncio.CancelledError:
            run.status = "interrupted"
            run.publish("error", {"error": "CancelledError", "message": "the run was cancelled"})
        except Exception as exc:
            run.status = "error"
            run.error = exc
            run.publish("error", {"error": type(exc).__name__, "message": str(exc)})
        finally:
            run.updated_at = time.time()
            if self.active.get(run.thread_id) is run:
                del self.active[run.thread_id]
            run.done.set()
            run._wake.set()


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


def _service(request: Request) -> Service:
    service = request.app.state.service
    assert isinstance(service, Service)
    return service


def _registry(service: Service) -> RunRegistry:
    registry = service.runs
    assert isinstance(registry, RunRegistry)
    return registry


# Reading a run request -------------------------------------------------------------------------
def _run_input(payload: Mapping[str, Any]) -> Any:
    run_input = payload.get("input")
    command = payload.get("command")
    if command is not None:
        if run_input is not None:
            raise Problem(422, "send either 'input' or 'command', not both")
        if not isinstance(command, Mapping):
            raise Problem(422, "'command' must be an object like {'resume': ...}")
        unsupported = sorted(set(command) - {"resume", "update"})
        if unsupported:
            raise Problem(
                422, f"command field(s) {unsupported} are not supported by handrail; use resume/update"
            )
        if command.get("resume") is None and command.get("update") is None:
            raise Problem(422, "'command' needs 'resume' or 'update'")
        return Command(resume=command.get("resume"), update=command.get("update"))
    if (
        run_input is not None
        and isinstance(run_input, Mapping)
        and isinstance(run_input.get("messages"), list)
    ):
        messages = [
            {k: v for k, v in m.items() if k != "example"} if isinstance(m, Mapping) else m
            for m in run_input["messages"]
        ]
        return {**run_input, "messages": messages}
    return run_input


def _config(payload: Mapping[str, Any], thread_id: str, credential: Credential) -> dict[str, Any]:
    config = payload.get("config") or {}
    if not isinstance(config, Mapping):
        raise Problem(422, "'config' must be an object")
    unsupported = sorted(set(config) - {"configurable", "tags", "metadata"})
    if unsupported:
        raise Problem(422, f"config field(s) {unsupported} are not supported by handrail")
    configurable = config.get("configurable") or {}
    if not isinstance(configurable, Mapping):
        raise Problem(422, "'config.configurable' must be an object")
    # An identity named by the client is ignored: the credential says who answers (rule 11).
    known = {"thread_id", "checkpoint_id", "reviewer", "channel", "checkpoint_ns", "assistant_id", "graph_id"}
    unsupported = sorted(set(configurable) - known)
    if unsupported:
        raise Problem(422, f"config.configurable key(s) {unsupported} are not supported by handrail")
    out: dict[str, Any] = {
        "configurable": {"thread_id": thread_id, "reviewer": credential.reviewer, "channel": "http"}
    }
    checkpoint_id = payload.get("checkpoint_id") or configurable.get("checkpoint_id")
    if checkpoint_id is not None:
        out["configurable"]["checkpoint_id"] = checkpoint_id
    if payload.get("context") is not None:
        out["context"] = payload["context"]
    return out


def _modes(payload: Mapping[str, Any]) -> list[str]:
    modes = payload.get("stream_mode") or ["values"]
    if isinstance(modes, str):
        modes = [modes]
    if not isinstance(modes, list) or not all(isinstance(m, str) for m in modes):
        raise Problem(422, "'stream_mode' must be a string or a list of strings")
    unsupported = [m for m in modes if m not in STREAM_MODES]
    if unsupported:
        raise Problem(
            422, f"stream_mode {unsupported} is not supported by handrail; supported: {sorted(STREAM_MODES)}"
        )
    return list(dict.fromkeys(modes))


def _check_fields(payload: Mapping[str, Any]) -> None:
    unsupported = sorted(set(payload) - _SUPPORTED_FIELDS)
    if unsupported:
        raise Problem(422, f"run field(s) {unsupported} are not supported by handrail")
    for name, allowed in (
        ("multitask_strategy", {"reject"}),
        ("if_not_exists", {"create", "reject"}),
        ("stream_subgraphs", {False}),
        ("stream_resumable", {False}),
        ("on_disconnect", {"continue"}),
    ):
        if name in payload and payload[name] not in allowed:
            raise Problem(422, f"{name}={payload[name]!r} is not supported by handrail; supported: {allowed}")


async def start_run(
    service: Service, thread_id: str | None, payload: Any, credential: Credential, *, streamed: bool = False
) -> Run:
    """Check a run request and start it (a new thread when ``thread_id`` is None).

    A run nobody will stream (``runs.wait``; ``runs.create`` without ``stream_mode``)
    keeps no events but its ``metadata``: it runs with ``ainvoke``, not ``astream``.
    The run's assistant must be the thread's own agent, and so must any ``assistant_id``
    or ``graph_id`` in its metadata (SPEC rule 21): a 422 otherwise, and nothing is saved.
    """
    if not isinstance(payload, Mapping):
        raise Problem(400, "the request body must be a JSON object")
    _check_fields(payload)
    assistant_id = payload.get("assistant_id")
    if not isinstance(assistant_id, str):
        raise Problem(422, "'assistant_id' is required: the name of a served agent")
    agent = service.agent(assistant_id)
    metadata = payload.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise Problem(422, "'metadata' must be an object")
    row: ThreadRow | None = None
    logged, new = False, thread_id is None
    if thread_id is None:
        thread_id = str(uuid.uuid4())
        owner = assistant_id
    else:
        found = await service.locate(thread_id, fresh=True)  # a run reads the binding afresh
        logged, row = found.logged, found.row
        if found.assistant is None:
            if found.logged or found.row is not None or payload.get("if_not_exists") != "create":
                raise Problem(404, f"no thread {thread_id!r} is served here")
            owner, new = assistant_id, True
        elif row is not None and row.assistant_id == UNBOUND:  # created for no assistant: this run's
            owner = assistant_id
        else:
            owner = found.assistant
    if owner != assistant_id:
        raise Problem(422, f"thread {thread_id!r} belongs to assistant {owner!r}, not {assistant_id!r}")
    config = _config(payload, thread_id, credential)
    asked = payload.get("config") or {}  # an object: _config checked it
    named = service.check_binding(
        thread_id,
        owner,
        [
            ("the thread's metadata", row.metadata if row is not None else {}),
            ("config.metadata", asked.get("metadata") or {}),
            ("config.configurable", asked.get("configurable") or {}),
            ("metadata", metadata),
        ],
    )
    given = {k: v for k, v in metadata.items() if k not in BOUND_KEYS}
    if logged:  # its log holds its binding, which no input changes: name none
        config["metadata"] = given
    else:  # its first input binds it (a thread created with metadata gets that too)
        kept = {k: v for k, v in (row.metadata if row else {}).items() if k not in BOUND_KEYS}
        config["metadata"] = {
            **kept,
            **given,
            **dict.fromkeys(named, assistant_id),
            "assistant_id": assistant_id,
        }
    run_input = _run_input(payload)
    modes = _modes(payload)
    streamed = streamed or "stream_mode" in payload
    if new:  # checked: now the service may keep it
        await asyncio.to_thread(service.add_thread, thread_id, assistant_id, {})
    return _registry(service).start(
        agent, assistant_id, thread_id, run_input, config, modes if streamed else [], dict(metadata)
    )


def _sse(event: str, data: Any) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data, default=str) + b"\n\n"


def stream_response(run: Run) -> StreamingResponse:
    """The run's events as LangGraph's server-sent events."""

    async def body() -> AsyncIterator[bytes]:
        async for event, data in run.follow():
            yield _sse(event, to_wire(data))

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={
            "Content-Location": f"/threads/{run.thread_id}/runs/{run.run_id}",
            "Cache-Control": "no-store",
        },
    )


async def outcome(run: Run) -> Response:
    """The run's final values (``runs.wait`` / ``runs.join``), or its error as a problem."""
    await run.done.wait()
    if isinstance(run.error, HandrailError):
        raise run.error
    if run.error is not None:
        raise Problem(500, f"the run failed: {type(run.error).__name__}: {run.error}")
    if run.status == "interrupted":
        raise Problem(409, f"run {run.run_id} was cancelled")
    return Response(
        orjson.dumps(run.result or {}),
        media_type="application/json",
        headers={"Content-Location": f"/threads/{run.thread_id}/runs/{run.run_id}"},
    )


# Endpoints --------------------------------------------------------------------------------------
@router.post("/threads/{thread_id}/runs")
async def create_run(
    thread_id: str, request: Request, payload: Any = Body(None), credential: Credential = Depends(caller)
) -> Response:
    """Start a background run; returns the Run."""
    run = await start_run(_service(request), thread_id, payload, credential)
    return Response(orjson.dumps(run.as_json()), media_type="application/json")


@router.post("/threads/{thread_id}/runs/wait")
async def wait_run(
    thread_id: str, request: Request, payload: Any = Body(None), credential: Credential = Depends(caller)
) -> Response:
    """Run and return the thread's values when it pauses or ends."""
    return await outcome(await start_run(_service(request), thread_id, payload, credential))


@router.post("/runs/wait")
async def wait_stateless_run(
    request: Request, payload: Any = Body(None), credential: Credential = Depends(caller)
) -> Response:
    """Run on a new thread and return its values."""
    return await outcome(await start_run(_service(request), None, payload, credential))


@router.post("/threads/{thread_id}/runs/stream")
async def stream_run(
    thread_id: str, request: Request, payload: Any = Body(None), credential: Credential = Depends(caller)
) -> StreamingResponse:
    """Run and stream its events (SSE)."""
    return stream_response(await start_run(_service(request), thread_id, payload, credential, streamed=True))


@router.post("/runs/stream")
async def stream_stateless_run(
    request: Request, payload: Any = Body(None), credential: Credential = Depends(caller)
) -> StreamingResponse:
    """Run on a new thread and stream its events (SSE)."""
    return stream_response(await start_run(_service(request), None, payload, credential, streamed=True))


@router.get("/threads/{thread_id}/runs")
async def list_runs(thread_id: str, request: Request, credential: Credential = Depends(caller)) -> Response:
    """The runs of a thread this process knows, newest first."""
    runs = [r for r in _registry(_service(request)).runs.values() if r.thread_id == thread_id]
    runs.sort(key=lambda r: r.created_at, reverse=True)
    return Response(orjson.dumps([r.as_json() for r in runs]), media_type="application/json")


@router.get("/threads/{thread_id}/runs/{run_id}")
async def get_run(
    thread_id: str, run_id: str, request: Request, credential: Credential = Depends(caller)
) -> Response:
    """One run."""
    run = _registry(_service(request)).get(thread_id, run_id)
    return Response(orjson.dumps(run.as_json()), media_type="application/json")


@router.get("/threads/{thread_id}/runs/{run_id}/join")
async def join_run(
    thread_id: str, run_id: str, request: Request, credential: Credential = Depends(caller)
) -> Response:
    """Wait for a run to end; return the thread's values."""
    return await outcome(_registry(_service(request)).get(thread_id, run_id))


@router.get("/threads/{thread_id}/runs/{run_id}/stream")
async def join_stream(
    thread_id: str, run_id: str, request: Request, credential: Credential = Depends(caller)
) -> StreamingResponse:
    """Every event of a run, from its start, until it ends (SSE)."""
    return stream_response(_registry(_service(request)).get(thread_id, run_id))


@router.post("/threads/{thread_id}/runs/{run_id}/cancel")
async def cancel_run(
    thread_id: str,
    run_id: str,
    request: Request,
    wait: bool = False,
    action: str = "interrupt",
    credential: Credential = Depends(caller),
) -> Response:
    """Cancel a run (``action=interrupt``): it stops at once; what it saved stays."""
    if action != "interrupt":
        raise Problem(422, f"cancel action {action!r} is not supported by handrail; supported: 'interrupt'")
    run = _registry(_service(request)).get(thread_id, run_id)
    if run.task is not None and not run.done.is_set():
        run.task.cancel()
        if wait:
            await run.done.wait()
    return Response(status_code=202 if not wait else 204)
