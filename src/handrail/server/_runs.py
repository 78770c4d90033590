"""Runs: the LangGraph Platform API's ``/threads/{id}/runs`` family, run in this process.

A run is one ``agent.astream(...)`` (or ``ainvoke``) on a thread, started by a client
(``runs.create``, ``runs.wait``, ``runs.stream``). Answers recorded through handrail's
own paths are run by workers instead (``handrail.worker``). The run keeps the server-sent events it
produced while it runs, so ``join`` and a joined ``stream`` see all of them. One run at a
time per thread in this process (LangGraph's ``multitask_strategy="reject"``); the
store's rule 8 keeps two processes apart.

Runs live in memory, a bounded amount of them (``_registry.py``): a restarted service
forgets finished runs, not threads (their state, interrupts and audit trail are in the
store). A run that fails answers ``runs.wait`` and ``runs.join`` as LangGraph's server
does, ``{"__error__": {"error", "message"}}``, unless the client's input made it fail (a
4xx problem then, as ``_problems.py`` maps it).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import quote

import orjson
from fastapi import APIRouter, Depends, Request
from starlette.responses import Response, StreamingResponse

from handrail.agent import Agent
from handrail.checkpoint.base import ThreadRecord
from handrail.messages import coerce_messages
from handrail.runtime.loop import CancelledBy
from handrail.server._access import OWNER_KEY, claim_owner, require
from handrail.server._auth import RECHECK_SECONDS, caller, recheck
from handrail.server._bodies import RunBody, RunPath, ThreadPath
from handrail.server._limits import GuardedRoute, check_new_id
from handrail.server._problems import Problem
from handrail.server._registry import STREAM_MODES, Run, RunRegistry, values_of
from handrail.server._service import BOUND_KEYS, Service
from handrail.server.tokens import Credential
from handrail.server.wire import to_wire
from handrail.types import Command

__all__ = ["Run", "RunRegistry", "router"]

router = APIRouter(tags=["runs"], route_class=GuardedRoute)
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
        try:  # refused here, before a thread is made or anything is saved (the library would too)
            coerce_messages(messages, where="input['messages']")
        except ValueError as exc:
            raise Problem(422, str(exc)) from None
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
    service: Service,
    thread_id: str | None,
    body: RunBody,
    credential: Credential,
    *,
    streamed: bool = False,
    waited: bool = False,
) -> Run:
    """Check a run request and start it (a new thread when ``thread_id`` is None).

    A run nobody will stream (``runs.wait``; ``runs.create`` without ``stream_mode``)
    keeps no events but its ``metadata``: it runs with ``ainvoke``, not ``astream``.
    The run's assistant must be the thread's own agent, and so must any ``assistant_id``
    or ``graph_id`` in its metadata (SPEC rule 21): a 422 otherwise, and nothing is saved.
    ``waited``: the caller waits for its values (``runs.wait``: :func:`outcome`).
    """
    payload = body.given()
    _check_fields(payload)
    assistant_id = payload.get("assistant_id")
    if not isinstance(assistant_id, str):
        raise Problem(422, "'assistant_id' is required: the name of a served agent")
    agent = service.agent(assistant_id)
    metadata = payload.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise Problem(422, "'metadata' must be an object")
    record: ThreadRecord | None = None
    new, unbound = thread_id is None, False
    if thread_id is None:
        thread_id = str(uuid.uuid4())
        owner = assistant_id
    else:
        found = await service.locate(thread_id, fresh=True)  # a run reads the binding afresh
        record = found.record
        if found.assistant is None:
            if found.found or payload.get("if_not_exists") != "create":
                raise Problem(404, f"no thread {thread_id!r} is served here")
            try:
                check_new_id(thread_id, "the id of a thread a run creates")
            except ValueError as exc:
                raise Problem(400, str(exc)) from None
            owner, new = assistant_id, True
        elif found.unbound:  # created for no assistant: this run's
            owner, unbound = assistant_id, True
        else:
            owner = found.assistant
    if owner != assistant_id:
        raise Problem(422, f"thread {thread_id!r} belongs to assistant {owner!r}, not {assistant_id!r}")
    logged = record is not None and record.head_seq > 0
    thread_metadata = dict(record.metadata) if record is not None else {}  # read once (rule S5)
    await _may_run(service, credential, thread_id, agent, payload, new, thread_metadata)
    config = _config(payload, thread_id, credential)
    asked = payload.get("config") or {}  # an object: _config checked it
    named = service.check_binding(
        thread_id,
        owner,
        [
            ("the thread's metadata", thread_metadata if not logged else {}),
            ("config.metadata", asked.get("metadata") or {}),
            ("config.configurable", asked.get("configurable") or {}),
            ("metadata", metadata),
        ],
    )
    given = {k: v for k, v in metadata.items() if k not in BOUND_KEYS}
    if OWNER_KEY in given and given.pop(OWNER_KEY) != thread_metadata.get(OWNER_KEY, credential.name):
        raise Problem(422, f"'metadata' names an {OWNER_KEY} of thread {thread_id!r}: the service sets it")
    if new:
        given = claim_owner(credential, given, "'metadata'")
    if logged:  # its log holds its binding, which no input changes: name none
        config["metadata"] = given
    else:  # its first input binds it (a thread created with metadata gets that too)
        kept = {k: v for k, v in thread_metadata.items() if k not in BOUND_KEYS}
        config["metadata"] = {
            **kept,
            **given,
            **dict.fromkeys(named, assistant_id),
            "assistant_id": assistant_id,
        }
    run_input = _run_input(payload)
    modes = _modes(payload)
    streamed = streamed or "stream_mode" in payload
    if not new and _may_be_busy(record, payload) and await service.busy(thread_id, agent, record):
        raise Problem(409, f"thread {thread_id!r} is busy with a run; wait for it (runs.join) or cancel it")
    if new or (unbound and agent.checkpointer is not service.store):
        # checked: now the thread is in the store (rule S1), in the store of its agent
        if await service.create_thread(thread_id, assistant_id, config["metadata"]) is None:
            raise Problem(409, f"thread {thread_id!r} exists already")
        if unbound:  # made in the first agent's store: it moves to its agent's
            await service.store.adelete_thread(thread_id)
    return _registry(service).start(
        agent,
        assistant_id,
        thread_id,
        run_input,
        config,
        modes if streamed else [],
        dict(metadata),
        waited=waited,
    )


async def _may_run(
    service: Service,
    credential: Credential,
    thread_id: str,
    agent: Any,
    payload: Mapping[str, Any],
    new: bool,
    metadata: Mapping[str, Any],
) -> None:
    """What a run request needs (``_access.py``): answers ``review``, input ``run`` on the
    caller's own thread, state updates and runs from a checkpoint ``admin``."""
    command = payload.get("command")
    command = command if isinstance(command, Mapping) else {}
    configurable = (payload.get("config") or {}).get("configurable") or {}
    if command.get("update") is not None:
        require(credential, "admin", "a state update (command.update)")
    if payload.get("checkpoint_id") is not None or configurable.get("checkpoint_id") is not None:
        require(credential, "admin", "a run from a checkpoint_id")
    if command.get("resume") is not None:
        require(credential, "review", "answering a review (command.resume)")
        return
    if new:
        require(credential, "run", "starting a thread")
    elif command.get("update") is None:
        what = "sending input" if payload.get("input") is not None else "running a thread"
        await service.access.check_owner(credential, thread_id, agent, what, metadata)


def _may_be_busy(record: ThreadRecord | None, payload: Mapping[str, Any]) -> bool:
    """Whether a run request asks the store if a run is on the thread (rule S4): on a
    running thread; on an interrupted one unless the request answers it (the runtime's
    gate refuses an answer while another run executes a tool, and rule 8 keeps two
    writers apart: an answer costs no extra read)."""
    if record is None or record.status == "idle":
        return False
    command = payload.get("command")
    answers = isinstance(command, Mapping) and command.get("resume") is not None
    return record.status == "running" or not answers


def _sse(event: str, data: Any) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data, default=str) + b"\n\n"


def stream_response(run: Run, request: Request) -> StreamingResponse:
    """The run's events as LangGraph's server-sent events; the stream ends within about a
    second of its credential being revoked (``auth.recheck``)."""

    events = run.follow(tick=RECHECK_SECONDS)  # now: a run that ends before the body is read keeps them

    async def body() -> AsyncIterator[bytes]:
        checked = time.monotonic()
        async for event, data in events:
            if time.monotonic() - checked >= RECHECK_SECONDS:
                if await recheck(request) is None:
                    return
                checked = time.monotonic()
            if event:
                yield _sse(event, to_wire(data))

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"Content-Location": _location(run), "Cache-Control": "no-store"},
    )


def _location(run: Run) -> str:
    """Where the run is (a header: the ids percent-encoded beyond the charset of ``limits.NEW_ID``)."""
    return f"/threads/{quote(run.thread_id, safe=':@~+=')}/runs/{quote(run.run_id, safe='')}"


async def outcome(run: Run, agent: Agent) -> Response:
    """The run's final values (``runs.wait`` / ``runs.join``), when it ends.

    The values are those handed to the ``runs.wait`` that started it, else the thread's
    state read from the store. A run that failed answers as LangGraph's server does, 200
    with ``{"__error__": {"error": type, "message": ...}}`` (a failing model or tool is not
    the client's mistake), unless the client's input made it fail: then the problem
    ``_problems.py`` maps that error to (a 422 for input rule 5 refuses, ...). A cancelled
    run is a 409.
    """
    handoff = run.handoff  # taken now: the run lets go of it when it ends
    await run.done.wait()
    refusal = run.problem()
    if refusal is not None:
        raise refusal
    if run.failure is not None:
        body: dict[str, Any] = {"__error__": run.failure}
    elif run.status == "interrupted":
        raise Problem(409, f"run {run.run_id} was cancelled")
    elif handoff is not None and handoff.done():
        body = handoff.result()
    else:
        body = await values_of(agent, run.thread_id)
    return Response(
        orjson.dumps(body), media_type="application/json", headers={"Content-Location": _location(run)}
    )


# Endpoints --------------------------------------------------------------------------------------
@router.post("/threads/{thread_id}/runs")
async def create_run(
    thread_id: ThreadPath, request: Request, payload: RunBody, credential: Credential = Depends(caller)
) -> Response:
    """Start a background run; returns the Run once its input is on record, so that the
    run happens even if this process dies now (a worker takes the thread over). A run
    another process's run beat to the thread saved nothing: a 409."""
    run = await start_run(_service(request), thread_id, payload, credential)
    await run.accepted()
    refusal = run.problem() if run.lost else None
    if refusal is not None:  # another process's run took the thread first (rule S4)
        raise refusal
    return Response(orjson.dumps(run.as_json()), media_type="application/json")


@router.post("/threads/{thread_id}/runs/wait")
async def wait_run(
    thread_id: ThreadPath, request: Request, payload: RunBody, credential: Credential = Depends(caller)
) -> Response:
    """Run and return the thread's values when it pauses or ends."""
    service = _service(request)
    run = await start_run(service, thread_id, payload, credential, waited=True)
    return await outcome(run, service.agents[run.assistant_id])


@router.post("/runs/wait")
async def wait_stateless_run(
    request: Request, payload: RunBody, credential: Credential = Depends(caller)
) -> Response:
    """Run on a new thread and return its values."""
    service = _service(request)
    run = await start_run(service, None, payload, credential, waited=True)
    return await outcome(run, service.agents[run.assistant_id])


@router.post("/threads/{thread_id}/runs/stream")
async def stream_run(
    thread_id: ThreadPath, request: Request, payload: RunBody, credential: Credential = Depends(caller)
) -> StreamingResponse:
    """Run and stream its events (SSE)."""
    run = await start_run(_service(request), thread_id, payload, credential, streamed=True)
    return stream_response(run, request)


@router.post("/runs/stream")
async def stream_stateless_run(
    request: Request, payload: RunBody, credential: Credential = Depends(caller)
) -> StreamingResponse:
    """Run on a new thread and stream its events (SSE)."""
    return stream_response(
        await start_run(_service(request), None, payload, credential, streamed=True), request
    )


@router.get("/threads/{thread_id}/runs")
async def list_runs(
    thread_id: ThreadPath, request: Request, credential: Credential = Depends(caller)
) -> Response:
    """The runs of a thread this process knows, newest first."""
    service = _service(request)
    await service.readable(thread_id, credential)
    runs = _registry(service).of_thread(thread_id)
    return Response(orjson.dumps([r.as_json() for r in runs]), media_type="application/json")


@router.get("/threads/{thread_id}/runs/{run_id}")
async def get_run(
    thread_id: ThreadPath, run_id: RunPath, request: Request, credential: Credential = Depends(caller)
) -> Response:
    """One run."""
    service = _service(request)
    await service.readable(thread_id, credential)
    run = _registry(service).get(thread_id, run_id)
    return Response(orjson.dumps(run.as_json()), media_type="application/json")


@router.get("/threads/{thread_id}/runs/{run_id}/join")
async def join_run(
    thread_id: ThreadPath, run_id: RunPath, request: Request, credential: Credential = Depends(caller)
) -> Response:
    """Wait for a run to end; return the thread's values (read from the store)."""
    service = _service(request)
    _, agent, _ = await service.readable(thread_id, credential)
    return await outcome(_registry(service).get(thread_id, run_id), agent)


@router.get("/threads/{thread_id}/runs/{run_id}/stream")
async def join_stream(
    thread_id: ThreadPath, run_id: RunPath, request: Request, credential: Credential = Depends(caller)
) -> StreamingResponse:
    """Every event of a run, from its start, until it ends (SSE); of a run that has ended,
    its ``metadata`` event and its ``error`` event if it failed (what it made is in the
    thread's state)."""
    service = _service(request)
    await service.readable(thread_id, credential)
    return stream_response(_registry(service).get(thread_id, run_id), request)


@router.post("/threads/{thread_id}/runs/{run_id}/cancel")
async def cancel_run(
    thread_id: ThreadPath,
    run_id: RunPath,
    request: Request,
    wait: bool = False,
    action: str = "interrupt",
    credential: Credential = Depends(caller),
) -> Response:
    """Cancel a run (``action=interrupt``): it stops at once; what it saved stays."""
    if action != "interrupt":
        raise Problem(422, f"cancel action {action!r} is not supported by handrail; supported: 'interrupt'")
    service = _service(request)
    _, agent, record = await service.owner(thread_id)
    metadata = await service.metadata_of(thread_id, agent, record)
    await service.access.check_owner(credential, thread_id, agent, "cancelling a run", metadata)
    run = _registry(service).get(thread_id, run_id)
    if run.task is not None and not run.done.is_set():
        run.task.cancel(CancelledBy(credential.reviewer, "http"))  # recorded in the log (rule 21)
        if wait:
            await run.done.wait()
    return Response(status_code=202 if not wait else 204)
