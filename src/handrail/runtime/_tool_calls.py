"""The effects of a tools step: call one tool, run several calls' tasks, shape a result.

Sync runs run a step's calls one after another, async runs concurrently
(:class:`RunTasks`); every call runs with its task as the current task, so that
``interrupt()`` and ``get_stream_writer()`` inside it find their call.
"""

from __future__ import annotations

from typing import Any

import orjson

from handrail.context import TaskContext, reset_current_task, set_current_task
from handrail.messages import ToolMessage
from handrail.runtime.effects import Effect, Env, Gen, drive_async, drive_sync
from handrail.tools import Tool

__all__ = ["CallTool", "RunTasks", "normalise_tool_result", "tool_result_message"]


def normalise_tool_result(result: Any) -> ToolMessage:
    """A wrap_tool_call hook must return a ToolMessage."""
    if isinstance(result, ToolMessage):
        return result
    raise TypeError(f"wrap_tool_call must return a ToolMessage, got {type(result).__name__}")


class CallTool(Effect):
    """Call a tool's function with arguments already validated."""

    __slots__ = ("args", "runtime", "task", "tool")

    def __init__(self, tool: Tool, args: dict[str, Any], runtime: Any, task: TaskContext) -> None:
        self.tool = tool
        self.args = args
        self.runtime = runtime
        self.task = task  # the current task while the tool runs (interrupt, get_stream_writer)

    def run_sync(self, env: Env) -> Any:
        token = set_current_task(self.task)
        try:
            return self.tool.run(self.args, self.runtime)
        finally:
            reset_current_task(token)

    async def run_async(self, env: Env) -> Any:
        token = set_current_task(self.task)
        try:
            return await self.tool.arun(self.args, self.runtime)
        finally:
            reset_current_task(token)


class RunTasks(Effect):
    """Run several task generators: one after another (sync) or concurrently (async).

    In async runs every task finishes before the first error (if any) is raised, so no
    tool is abandoned half-way by a sibling's failure.
    """

    __slots__ = ("tasks",)

    def __init__(self, tasks: list[Gen]) -> None:
        self.tasks = tasks

    def nested_sync(self, env: Env) -> tuple[Gen, Env] | None:
        return _one_by_one(self.tasks), env

    def nested_async(self, env: Env) -> tuple[Gen, Env] | None:
        return (self.tasks[0], env) if len(self.tasks) == 1 else None

    def run_sync(self, env: Env) -> None:
        for task in self.tasks:
            drive_sync(task, env)

    async def run_async(self, env: Env) -> None:
        import asyncio

        if len(self.tasks) == 1:
            await drive_async(self.tasks[0], env)
            return
        outer, env.lock = env.lock, asyncio.Lock()  # the tasks' appends take turns
        try:
            results = await asyncio.gather(
                *(drive_async(task, env) for task in self.tasks), return_exceptions=True
            )
        finally:
            env.lock = outer
        for result in results:
            if isinstance(result, BaseException):
                raise result


def _one_by_one(tasks: list[Gen]) -> Gen:
    """Several task generators as one, run one after another."""
    for task in tasks:
        yield from task


def tool_result_message(
    result: Any, call_id: str, name: str, response_format: str = "content"
) -> ToolMessage:
    """Turn what a tool returned into its ToolMessage.

    With ``response_format="content_and_artifact"`` the tool returns ``(content,
    artifact)``: the content is what the model sees, the artifact rides on the message.
    """
    if response_format == "content_and_artifact" and not isinstance(result, ToolMessage):
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(
                f"tool {name!r} has response_format='content_and_artifact' and must return a "
                f"(content, artifact) tuple, got {type(result).__name__}"
            )
        message = tool_result_message(result[0], call_id, name)
        message.artifact = result[1]
        return message
    if isinstance(result, ToolMessage):
        if result.tool_call_id == call_id:
            return result
        # a tool that built its own message keeps its content, answering this call
        return ToolMessage(
            result.content,
            tool_call_id=call_id,
            name=result.name or name,
            status=result.status,
            artifact=result.artifact,
        )
    if isinstance(result, str):
        content: Any = result
    elif result is None:
        content = ""
    else:
        try:
            content = orjson.dumps(result, option=orjson.OPT_NON_STR_KEYS).decode()
        except TypeError:
            content = str(result)
    return ToolMessage(content, tool_call_id=call_id, name=name)
