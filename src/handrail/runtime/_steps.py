"""What each step of a run does: a middleware hook, the model, the tools.

The loop (``loop.py``) picks the step that is due; a function here runs it and buffers
its events (``commit.py``). A step ends with a ``step`` event holding its update, or
pauses with an ``interrupt`` event; a step that is about to act on the world flushes
what came before it first (SPEC rule 7). A step that ends yields its stream chunks
(``updates``, ``values``) as :class:`~handrail.runtime.streaming.Emit` effects, only when
someone streams them.

* :func:`hook_step` calls one node hook of one middleware (``before_model`` ...);
* :func:`model_step` calls the model through the ``wrap_model_call`` chain;
* :func:`tools_step` asks the gate what every call may do now (``handrail.review``),
  saves the calls it is about to run in one commit (``tools_planned``, rule 9) and runs
  them through the ``wrap_tool_call`` chain, each start recorded right before its tool
  runs.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import TYPE_CHECKING, Any

from handrail import review, structured_output
from handrail.context import PauseSignal, Runtime, TaskContext, ToolRuntime
from handrail.errors import ConfigurationError, InvalidInputError
from handrail.messages import AIMessage, SystemMessage, ToolCall, ToolMessage, new_id
from handrail.middleware.types import ModelRequest, ModelResponse, ToolCallRequest
from handrail.runtime import _granting as granting
from handrail.runtime import _recovery as recovery
from handrail.runtime import _rules as rules
from handrail.runtime._compat import stream_metadata
from handrail.runtime._fold import ThreadFold
from handrail.runtime._tool_calls import CallTool, RunTasks, normalise_tool_result, tool_result_message
from handrail.runtime.commit import Persist, buffer, flush
from handrail.runtime.effects import CallHook, CallModel, Chain, Effect, Env, normalise_model_result
from handrail.runtime.events import Event
from handrail.runtime.plan import MODEL, TOOLS
from handrail.runtime.spec import AgentSpec
from handrail.runtime.streaming import Emit
from handrail.tools import ToolArgumentsError

if TYPE_CHECKING:
    from handrail.runtime.loop import RunRequest

__all__ = ["hook_step", "model_step", "stream_writer", "tools_step"]

Gen = Generator[Effect, Any, Any]


def stream_writer(env: Env) -> Any:
    """The ``stream_writer`` of a run's hooks and tools: to the "custom" stream, if anyone reads it."""
    if not env.wants("custom"):
        return _discard
    return lambda chunk: env.send("custom", chunk)


def _discard(chunk: Any) -> None:
    """The stream writer of a run nobody streams custom chunks from."""


def _task(env: Env, request: RunRequest, answers: dict[int, Any], source: str | None) -> TaskContext:
    return TaskContext(
        answers=answers,
        can_pause=request.can_pause,
        why_cannot_pause=request.why_cannot_pause,
        stream_writer=stream_writer(env),
        source=source,
    )


def _finish_step(
    env: Env, fold: ThreadFold, step: str, update: Any, extra: dict[str, Any] | None = None
) -> Any:
    """Buffer the step's event; the update it records (None: nothing changed)."""
    data: dict[str, Any] = {"step": step, "values": None, "next": None, **(extra or {})}
    if update is not None:
        if not isinstance(update, Mapping):
            raise TypeError(
                f"step {step!r} must return a dict of state updates or None, got {type(update).__name__}"
            )
        values = dict(update)
        jump = values.pop("jump_to", None)
        if jump is not None:
            from handrail.runtime.plan import JUMP_TARGETS

            if jump not in JUMP_TARGETS:
                raise InvalidInputError(
                    f"step {step!r} returned jump_to={jump!r}; expected one of {list(JUMP_TARGETS)}"
                )
            data["jump_to"] = jump
        unknown = [] if env.spec.state_keys.issuperset(values) else sorted(set(values) - env.spec.state_keys)
        if unknown:
            raise InvalidInputError(
                f"step {step!r} returned unknown state key(s) {unknown}; declare them in a "
                "middleware's state_schema"
            )
        data["values"] = values or None
    buffer(env, [Event("step", data)])
    return data["values"]


def _step_chunks(env: Env, fold: ThreadFold, step: str, update: Any) -> Gen:
    """The chunks of a finished step, for the modes the stream wants."""
    if env.wants("updates"):
        yield Emit("updates", {step: update})
    if env.wants("values"):
        yield Emit("values", fold.public_values())


def _pause(env: Env, step: str, task: str, signal: PauseSignal) -> None:
    policies = env.spec.policies
    terms = (
        review.terms_for(policies, signal.value)
        if policies.has_terms and signal.source is not None and signal.source == policies.source
        else None
    )
    buffer(
        env,
        [
            Event(
                "interrupt",
                {
                    "id": rules.new_interrupt_id(),
                    "step": step,
                    "value": signal.value,
                    # defaults left out: storage holds only what the event adds
                    **({"task": task} if task != step else {}),
                    **({"index": signal.index} if signal.index else {}),
                    **({"source": signal.source} if signal.source is not None else {}),
                    **({"terms": terms} if terms is not None else {}),  # what the review keeps
                },
            )
        ],
    )


def hook_step(env: Env, fold: ThreadFold, request: RunRequest, runtime: Runtime, step: str) -> Gen:
    """Run the node hook of step ``step``; an ``interrupt()`` in it pauses the step, unless
    grants cover every call it asks about (rule 16)."""
    hook = env.spec.plan.hooks[step]
    if hook.hook not in hook.middleware.pure_hooks and env.buffer:
        yield flush()  # a hook may act on the world: what came before must be saved first
    task = _task(env, request, fold.answers_for(step), hook.middleware.name)
    try:
        update = yield CallHook(hook.middleware, hook.hook, fold.state_view(), runtime, task)
    except PauseSignal as signal:
        asked = yield from granting.uncovered(env, fold, signal)  # rule 16: granted calls drop out
        if asked is not None:
            _pause(env, step, step, asked)
            return
        update = None
    done = _finish_step(env, fold, step, update)
    if env.modes:  # nothing to compute for a caller that streams nothing
        yield from _step_chunks(env, fold, step, done)


def model_step(env: Env, fold: ThreadFold, request: RunRequest, runtime: Runtime) -> Gen:
    """Call the model once; its answer (or a structured response) is the step's update."""
    spec = env.spec
    state = fold.state_view()
    model_request = ModelRequest(
        model=spec.model,
        messages=state["messages"],
        system_prompt=spec.system_prompt,
        tools=list(spec.tools.values()),
        state=state,
        runtime=runtime,
        response_format=spec.response_format,
    )
    metadata = stream_metadata(env, fold, MODEL) if env.wants("messages") else {}
    retry = [False]

    def innermost(req: ModelRequest) -> Gen:
        messages = ([SystemMessage(req.system_prompt)] if req.system_prompt else []) + list(req.messages)
        if req.response_format is None:
            message = yield CallModel(req, messages, metadata, env.wants("messages"), task)
            return ModelResponse(result=[message])
        message = yield CallModel(
            structured_output.bind(req), messages, metadata, env.wants("messages"), task
        )
        _prepare_ai_message(message, spec.name)  # the answer to a structured call needs its id
        outcome = structured_output.handle(req.response_format, message)
        retry[0] = outcome.retry
        return ModelResponse(result=outcome.messages, structured_response=outcome.structured_response)

    task = _task(env, request, fold.answers_for(MODEL), None)
    if env.buffer:
        yield flush()  # tool results are saved before the model sees them
    try:
        response = yield Chain(
            "wrap_model_call", spec.model_wrappers, model_request, innermost, task, normalise_model_result
        )
    except PauseSignal as signal:
        _pause(env, MODEL, MODEL, signal)
        return
    for message in response.result:
        if isinstance(message, AIMessage):
            _prepare_ai_message(message, spec.name)
    update: dict[str, Any] = {"messages": list(response.result)}
    if response.structured_response is not None:
        update["structured_response"] = response.structured_response
    elif retry[0]:
        update["jump_to"] = MODEL  # the structured answer was malformed: the model tries again
    done = _finish_step(env, fold, MODEL, update)
    if env.modes:  # nothing to compute for a caller that streams nothing
        yield from _step_chunks(env, fold, MODEL, done)


def _prepare_ai_message(message: AIMessage, agent_name: str | None) -> None:
    # Ids are fixed before saving so that every later reading agrees on them.
    if message.id is None:
        message.id = new_id("run-")
    for call in message.tool_calls:
        if not call.get("id"):
            call["id"] = new_id("call_")
    for invalid in message.invalid_tool_calls:
        if not invalid.get("id"):
            invalid["id"] = new_id("call_")
    if agent_name and message.name is None:
        message.name = agent_name


def tools_step(env: Env, fold: ThreadFold, request: RunRequest, runtime: Runtime) -> Gen:
    """Run the due calls of the last AI message as the gate allows; the step ends when
    every call has its result, in call order."""
    spec = env.spec
    _, calls = fold.pending_calls()
    order = [str(call["id"]) for call in calls]
    state = fold.state_view()
    waiting = {record.task for record in fold.pending.values()}
    tasks: list[Gen] = []
    planned: list[str] = []
    granted: dict[str, str] = {}  # call id -> the grant it runs under (rule 16)
    for call in calls:
        call_id = str(call["id"])
        if call_id in fold.task_results or call_id in waiting:
            continue  # rule 6: a finished call never runs again; a waiting one waits
        if call.get("invalid"):
            message = ToolMessage(
                f"Error: the call to {call.get('name')!r} could not be read ({call.get('error')}). "
                "Send it again with its arguments as a JSON object.",
                tool_call_id=call_id,
                name=str(call.get("name") or ""),
                status="error",
            )
            buffer(env, [Event("tool_finished", {"message": message})])
            continue
        tool_call = ToolCall(name=call["name"], args=call["args"], id=call_id, type="tool_call")
        tool_runtime = ToolRuntime.of_call(runtime, call_id, state, step=TOOLS, tools=spec.tools.values())
        call_request = ToolCallRequest(
            tool_call=tool_call, tool=spec.tools.get(call["name"]), state=state, runtime=tool_runtime
        )
        outcome = _gate(spec, fold, call_request)  # rules 19-20: what the log lets this call do
        if isinstance(outcome, review.Result):
            buffer(env, [Event("tool_finished", {"message": outcome.message})])
            continue
        if isinstance(outcome, review.Ask):
            grant = yield from granting.spend(env, fold, tool_call)  # rule 16: a grant's use instead?
            if grant is None:
                value = spec.policies.call_request(tool_call, outcome.policy, state, tool_runtime)
                _pause(env, TOOLS, call_id, PauseSignal(value, 0, spec.policies.source))
                continue
            outcome = review.Run(tool_call, grant={"id": grant.grant_id, "given_by": grant.given_by})
            granted[call_id] = grant.grant_id
        if outcome.edited:
            call_request = call_request.override(
                tool_call=outcome.call, tool=spec.tools[outcome.call["name"]]
            )
        task = _task(env, request, fold.answers_for(call_id, gate=spec.policies.source), None)
        tasks.append(_tool_task(env, call_request, task, outcome))
        planned.append(call_id)
    if tasks:
        # Rule 9 in one commit: every call that may start is on record before any acts
        by = {"run_id": env.run_id, "worker": recovery.worker_name()}  # which run, in which process
        uses = {"grants": granted} if granted else {}  # the grants whose uses they spent (rule 16)
        yield Persist([Event("tools_planned", {"calls": planned, **by, **uses})], flush=True)
        yield RunTasks(tasks)
    if fold.pending or any(call_id not in fold.task_results for call_id in order):
        return  # waits for answers, or an answer recorded meanwhile made a call due: the loop goes on
    results = [fold.task_results[call_id] for call_id in order]
    data: dict[str, Any] = {"step": TOOLS, "values": None, "next": None}
    ran = [spec.tools[m.name] for m in results if m.name in spec.tools]
    if ran and all(t.return_direct for t in ran):
        data["jump_to"] = "end"  # return_direct: the tools' results are the answer
    buffer(env, [Event("step", data)])
    if env.modes:
        yield from _step_chunks(env, fold, TOOLS, {"messages": results})


def _gate(spec: AgentSpec, fold: ThreadFold, request: ToolCallRequest) -> review.Outcome:
    """Ask the gate what one call may do now, from the answers on this branch."""
    call = request.tool_call
    call_id = str(call["id"])
    started = fold.started.get(call_id)
    tool = spec.tools.get(call["name"])
    return review.call_outcome(
        spec.policies,
        spec.tools,
        call,
        answer=fold.decided.get(call_id),
        used=fold.used.get(call_id),
        started=(started.name, started.args) if started is not None else None,
        idempotent=started is not None and (started.idempotent or (tool is not None and tool.idempotent)),
        starter=fold.started_by,
        request=lambda: request,
    )


def _tool_task(env: Env, request: ToolCallRequest, task: TaskContext, outcome: review.Run) -> Gen:
    call_id = str(request.tool_call["id"])
    try:
        message = yield Chain(
            "wrap_tool_call",
            env.spec.tool_wrappers,
            request,
            lambda req: _execute_tool(env, req, task, outcome.call, outcome.grant),
            task,
            normalise_tool_result,
        )
    except PauseSignal as signal:
        _pause(env, TOOLS, call_id, signal)
        return
    if message.tool_call_id != call_id:
        raise InvalidInputError(
            f"wrap_tool_call returned a ToolMessage for call {message.tool_call_id!r} while "
            f"running call {call_id!r}"
        )
    if outcome.edited:
        message = review.with_edit_notice(message, outcome.call, env.spec.policies.edit_notice)
    buffer(env, [Event("tool_finished", {"message": message})])


def _execute_tool(
    env: Env,
    request: ToolCallRequest,
    task: TaskContext,
    authorized: ToolCall,
    grant: dict[str, Any] | None = None,
) -> Gen:
    """The innermost tool handler: check, record the start (rule 9), run, shape the result.

    ``authorized`` is the call the gate let run; a wrapper that hands down another call
    of a gated tool is refused here, right before the start (rule 19).
    """
    call = request.tool_call
    call_id = str(call["id"])
    refused = _refused(env, request, authorized)
    if refused is not None:
        return refused
    tool = env.spec.tools.get(call["name"])
    if tool is None:  # pragma: no cover - the gate answers a call to an unknown tool
        raise InvalidInputError(f"call {call_id!r} names no tool of the agent")
    try:
        values, read = tool.validate_call(call["args"])
    except ToolArgumentsError as exc:
        return ToolMessage(
            f"Error: {exc}. Fix the arguments and call the tool again.",
            tool_call_id=call_id,
            name=tool.name,
            status="error",
        )
    started: dict[str, Any] = {"task": call_id, "name": tool.name, "run_id": env.run_id}
    assert env.fold is not None
    proposed = next((c for c in env.fold.pending_calls()[1] if c.get("id") == call_id), None)
    if call["args"] != env.fold.proposed_args(call_id):
        started["args"] = call["args"]  # an edited call: what actually runs
    if read != call["args"]:
        started["ran"] = read  # the arguments as the tool's schema read them (for the audit)
    edited = "args" in started or proposed is None or proposed.get("name") != tool.name
    if tool.idempotent:
        started["idempotent"] = True
    if grant is not None:
        started["grant"] = grant  # the audit names the grant and its giver (rule 16)
    # The step's plan holds this call (rule 9): its start needs no commit of its own; but the
    # results of calls that ran (not those made from a saved decision) are saved before
    # another call acts. An edited call's start is saved before it acts: the plan names the
    # call as proposed, and an outcome_unknown review must show what ran instead.
    if edited or any(_ran(env, event) for event in env.buffer):
        yield Persist([Event("tool_started", started)], flush=True)
    else:
        buffer(env, [Event("tool_started", started)])
    env.ran.add(call_id)
    try:
        result = yield CallTool(tool, values, request.runtime, task)
    except ConfigurationError:
        raise  # e.g. interrupt() without a checkpointer: the agent is misconfigured, not the call
    except Exception as exc:  # a failing tool is a result the model can react to
        task.tool_errors[call_id] = exc  # for a wrapper that retries
        return ToolMessage(
            f"Error: {type(exc).__name__}: {exc}",
            tool_call_id=call_id,
            name=tool.name,
            status="error",
        )
    try:
        return tool_result_message(result, call_id, tool.name, tool.response_format)
    except TypeError as exc:  # a tool that broke its own response_format: the model sees why
        return ToolMessage(f"Error: {exc}", tool_call_id=call_id, name=tool.name, status="error")


def _refused(env: Env, request: ToolCallRequest, authorized: ToolCall) -> ToolMessage | None:
    """An error result when a wrapper changed the call the gate authorized into one it gates."""
    call = request.tool_call
    if call is authorized or (
        call["name"] == authorized["name"]
        and review.call_digest(call["name"], call["args"])
        == review.call_digest(authorized["name"], authorized["args"])
    ):
        return None
    outcome = review.call_outcome(
        env.spec.policies, env.spec.tools, call, answer=None, request=lambda: request
    )
    if isinstance(outcome, review.Run):
        return None  # a call nobody reviews: the wrapper may run it
    if isinstance(outcome, review.Result):
        return outcome.message
    return ToolMessage(
        f"Error: a wrap_tool_call middleware changed the call to {call['name']!r} after it was "
        "reviewed; the changed call was not reviewed, so it was not run.",
        tool_call_id=str(call["id"]),
        name=call["name"],
        status="error",
    )


def _ran(env: Env, event: Event) -> bool:
    """Whether ``event`` is the result of a tool call this run started."""
    return event.kind == "tool_finished" and event.data["message"].tool_call_id in env.ran
