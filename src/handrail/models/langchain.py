"""Use LangChain chat models and tools in handrail, without depending on LangChain.

Everything here is duck-typed: nothing imports ``langchain`` or ``langchain_core``. A
LangChain chat model is anything with ``invoke`` / ``stream`` (and ``bind_tools`` to
call tools); a LangChain tool is anything with ``name``, ``description``, an argument
schema and ``invoke``.

Example::

    from langchain_openai import ChatOpenAI
    from langchain_community.tools import DuckDuckGoSearchRun
    from handrail import create_agent
    from handrail.models.langchain import from_langchain_model, from_langchain_tool

    agent = create_agent(
        from_langchain_model(ChatOpenAI(model="gpt-5.4")),
        tools=[from_langchain_tool(DuckDuckGoSearchRun()), write_file],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"write_file": True})],
        checkpointer=InMemorySaver(),
    )

Messages go to the LangChain model as the role dicts LangChain's ``convert_to_messages``
accepts (``{"role": "assistant", "content", "tool_calls"}``, ``{"role": "tool",
"tool_call_id", "status"}``, ...); its answers come back as handrail messages, keeping
only JSON-serialisable metadata (a thread must be storable).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict

from handrail.context import ToolRuntime
from handrail.errors import ConfigurationError
from handrail.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    InvalidToolCall,
    ToolCall,
    ToolCallChunk,
    ToolMessage,
    new_id,
)
from handrail.models._common import AdapterModel, ModelCall
from handrail.models._wire import content_text, to_openai_tool
from handrail.tools import Tool, ToolArgumentsError

__all__ = [
    "LangChainChatModel",
    "LangChainTool",
    "from_langchain_model",
    "from_langchain_tool",
    "from_langchain_tools",
    "to_langchain_messages",
]


class LangChainChatModel(AdapterModel):
    """A LangChain ``BaseChatModel`` behind handrail's :class:`ChatModel` protocol.

    Tools are bound per call with ``bind_tools`` (as OpenAI-style function specs, which
    every LangChain chat model accepts); per-call settings travel as keyword arguments
    of ``invoke`` / ``stream``. The async calls use the model's ``ainvoke`` / ``astream``
    when it has them (else ``invoke`` in a worker thread); a model without ``stream``
    streams its whole answer as one chunk. Build one with :func:`from_langchain_model`.
    """

    provider = "langchain"

    def __init__(self, model: Any) -> None:
        if not callable(getattr(model, "invoke", None)):
            raise TypeError(f"{type(model).__name__} is not a LangChain chat model (it has no invoke())")
        self.model = model
        self.model_name = str(
            getattr(model, "model_name", None) or getattr(model, "model", None) or type(model).__name__
        )

    def _runnable(self, call: ModelCall) -> Any:
        if not call.tools:
            return self.model
        bind_tools = getattr(self.model, "bind_tools", None)
        if not callable(bind_tools):
            raise ConfigurationError(
                f"{type(self.model).__name__} cannot call tools: it has no bind_tools(); give the "
                "agent no tools or use a model that supports tool calling"
            )
        options = {} if call.tool_choice is None else {"tool_choice": call.tool_choice}
        return bind_tools([to_openai_tool(spec) for spec in call.tools], **options)

    def _invoke(self, call: ModelCall) -> AIMessage:
        answer = self._runnable(call).invoke(to_langchain_messages(call.messages), **call.settings)
        return from_langchain_message(answer)

    async def _ainvoke(self, call: ModelCall) -> AIMessage:
        runnable = self._runnable(call)
        payload = to_langchain_messages(call.messages)
        if callable(getattr(runnable, "ainvoke", None)):
            answer = await runnable.ainvoke(payload, **call.settings)
        else:
            answer = await asyncio.to_thread(runnable.invoke, payload, **call.settings)
        return from_langchain_message(answer)

    def _stream(self, call: ModelCall) -> Iterator[AIMessageChunk]:
        runnable = self._runnable(call)
        payload = to_langchain_messages(call.messages)
        if not callable(getattr(runnable, "stream", None)):
            yield _whole(from_langchain_message(runnable.invoke(payload, **call.settings)))
            return
        converter = _ChunkConverter()
        for chunk in runnable.stream(payload, **call.settings):
            yield converter.convert(chunk)

    async def _astream(self, call: ModelCall) -> AsyncIterator[AIMessageChunk]:
        runnable = self._runnable(call)
        if not callable(getattr(runnable, "astream", None)):
            yield _whole(await self._ainvoke(call))
            return
        converter = _ChunkConverter()
        async for chunk in runnable.astream(to_langchain_messages(call.messages), **call.settings):
            yield converter.convert(chunk)


def from_langchain_model(model: Any) -> LangChainChatModel:
    """Wrap a LangChain chat model (``ChatOpenAI``, ``ChatAnthropic``, ``ChatOllama``, ...).

    Example::

        agent = create_agent(from_langchain_model(ChatOllama(model="qwen3")), tools=[...])
    """
    if isinstance(model, LangChainChatModel):
        return model
    return LangChainChatModel(model)


# Messages ------------------------------------------------------------------------------------
def to_langchain_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """handrail messages as the role dicts LangChain models accept as input.

    A malformed tool call is sent as a call with empty arguments, so that the error
    result answering it has a call to answer.

    Example::

        to_langchain_messages([HumanMessage("hi")])   # [{"role": "user", "content": "hi"}]
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        item: dict[str, Any]
        if isinstance(message, AIMessage):
            calls = [
                {"name": c["name"], "args": dict(c["args"]), "id": c["id"], "type": "tool_call"}
                for c in message.tool_calls
            ]
            calls += [
                {"name": bad.get("name") or "", "args": {}, "id": bad.get("id"), "type": "tool_call"}
                for bad in message.invalid_tool_calls
            ]
            item = {"role": "assistant", "content": message.content}
            if calls:
                item["tool_calls"] = calls
        elif isinstance(message, ToolMessage):
            item = {
                "role": "tool",
                "content": message.content,
                "tool_call_id": message.tool_call_id,
                "status": message.status,
            }
            if message.name:
                item["name"] = message.name
        elif message.type == "system":
            item = {"role": "system", "content": message.content}
        elif message.type == "human":
            item = {"role": "user", "content": message.content}
        else:
            raise ValueError(f"cannot send a {type(message).__name__} to a LangChain model")
        if message.id is not None:
            item["id"] = message.id
        out.append(item)
    return out


def from_langchain_message(message: Any) -> AIMessage:
    """A LangChain ``AIMessage`` (or anything shaped like one) as a handrail AIMessage.

    A bare string is taken as the content. Metadata that does not serialise to JSON is
    left out.
    """
    if isinstance(message, str):
        return AIMessage(message, id=new_id("run-"))
    content = getattr(message, "content", "")
    tool_calls = [_tool_call(c) for c in getattr(message, "tool_calls", None) or ()]
    invalid = [_invalid_call(c) for c in getattr(message, "invalid_tool_calls", None) or ()]
    usage = getattr(message, "usage_metadata", None)
    return AIMessage(
        content=content if isinstance(content, (str, list)) else str(content),
        id=new_id("run-"),
        additional_kwargs=_jsonable(getattr(message, "additional_kwargs", None)),
        response_metadata={
            "model_provider": "langchain",
            **_jsonable(getattr(message, "response_metadata", None)),
        },
        tool_calls=tool_calls,
        invalid_tool_calls=invalid,
        usage_metadata=_jsonable(usage) or None,
    )


class _ChunkConverter:
    """LangChain ``AIMessageChunk`` s as handrail chunks sharing one message id."""

    def __init__(self) -> None:
        self.id = new_id("run-")

    def convert(self, chunk: Any) -> AIMessageChunk:
        if isinstance(chunk, str):
            return AIMessageChunk(content=chunk, id=self.id)
        content = getattr(chunk, "content", "")
        pieces = [
            ToolCallChunk(
                name=piece.get("name"),
                args=piece.get("args"),
                id=piece.get("id"),
                index=piece.get("index"),
                type="tool_call_chunk",
            )
            for piece in getattr(chunk, "tool_call_chunks", None) or ()
        ]
        # a model that streams whole calls (no pieces) sends them as tool_calls
        whole = [] if pieces else [_tool_call(c) for c in getattr(chunk, "tool_calls", None) or ()]
        usage = getattr(chunk, "usage_metadata", None)
        return AIMessageChunk(
            # content blocks (Anthropic's) arrive as fragments; their text is what adds up
            content=content if isinstance(content, str) else content_text(list(content or [])),
            id=self.id,
            additional_kwargs=_jsonable(getattr(chunk, "additional_kwargs", None)),
            response_metadata=_jsonable(getattr(chunk, "response_metadata", None)),
            tool_calls=whole,
            tool_call_chunks=pieces,
            usage_metadata=_jsonable(usage) or None,
        )


def _whole(message: AIMessage) -> AIMessageChunk:
    return AIMessageChunk(
        content=message.content,
        id=message.id,
        additional_kwargs=message.additional_kwargs,
        response_metadata=message.response_metadata,
        tool_calls=message.tool_calls,
        invalid_tool_calls=message.invalid_tool_calls,
        usage_metadata=message.usage_metadata,
    )


def _tool_call(call: Mapping[str, Any]) -> ToolCall:
    return ToolCall(name=str(call.get("name") or ""), args=dict(call.get("args") or {}), id=call.get("id"))


def _invalid_call(call: Mapping[str, Any]) -> InvalidToolCall:
    args = call.get("args")
    return InvalidToolCall(
        name=call.get("name"),
        args=args if isinstance(args, str) or args is None else str(args),
        id=call.get("id"),
        error=call.get("error"),
        type="invalid_tool_call",
    )


def _jsonable(values: Any) -> dict[str, Any]:
    """The entries of a mapping that serialise to JSON (others are dropped)."""
    if not isinstance(values, Mapping):
        return {}
    kept: dict[str, Any] = {}
    for key, value in values.items():
        try:
            orjson.dumps(value)
        except TypeError:
            continue
        kept[str(key)] = value
    return kept


# Tools ----------------------------------------------------------------------------------------
class _NoSchema(BaseModel):
    model_config = ConfigDict(extra="allow")


class LangChainTool(Tool):
    """A LangChain ``BaseTool`` as a handrail :class:`~handrail.tools.Tool`.

    The schema the model and reviewers see is the tool's ``tool_call_schema`` (or
    ``args_schema``): a pydantic model validates arguments as handrail tools do; a plain
    JSON-schema dict is shown as given and checked for required and unknown keys. Calls go
    to the tool's ``invoke`` / ``ainvoke`` with the arguments dict. Build one with
    :func:`from_langchain_tool`.
    """

    def __init__(self, tool: Any, *, idempotent: bool = False) -> None:
        name = getattr(tool, "name", None)
        if not isinstance(name, str) or not callable(getattr(tool, "invoke", None)):
            raise TypeError(f"{type(tool).__name__} is not a LangChain tool (it needs a name and invoke())")
        self.langchain_tool = tool
        schema = _schema_of(tool)
        self._raw_schema: dict[str, Any] | None = None
        args_schema: type[BaseModel]
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            args_schema = schema
        else:
            self._raw_schema = _dict_schema(schema)
            args_schema = _NoSchema
        super().__init__(
            self._call,
            name=name,
            description=str(getattr(tool, "description", "") or ""),
            args_schema=args_schema,
            idempotent=idempotent,
        )

    def _call(self, **kwargs: Any) -> Any:
        return _result(self.langchain_tool.invoke(kwargs))

    @property
    def json_schema(self) -> dict[str, Any]:
        if self._raw_schema is not None:
            return self._raw_schema
        return super().json_schema

    def validate_args(self, args: Any) -> dict[str, Any]:
        if self._raw_schema is None:
            super().validate_args(args)  # the checks (and messages) of any handrail tool
            # pass on what was given, as plain data: the tool validates again and fills defaults
            return self.args_schema.model_validate(dict(args)).model_dump(exclude_unset=True)
        if not isinstance(args, Mapping):
            raise ToolArgumentsError(self.name, [f"arguments must be an object, got {type(args).__name__}"])
        problems = [
            f"{key}: Field required" for key in self._raw_schema.get("required", []) if key not in args
        ]
        properties = self._raw_schema.get("properties")
        if self._raw_schema.get("additionalProperties") is False and isinstance(properties, Mapping):
            problems += [f"{key}: Extra inputs are not permitted" for key in args if key not in properties]
        if problems:
            raise ToolArgumentsError(self.name, problems)
        return dict(args)

    def run(self, values: Mapping[str, Any], runtime: ToolRuntime | None = None) -> Any:
        return _result(self.langchain_tool.invoke(dict(values)))

    async def arun(self, values: Mapping[str, Any], runtime: ToolRuntime | None = None) -> Any:
        ainvoke = getattr(self.langchain_tool, "ainvoke", None)
        if callable(ainvoke):
            return _result(await ainvoke(dict(values)))
        return await asyncio.to_thread(self.run, values, runtime)


def from_langchain_tool(tool: Any, *, idempotent: bool = False) -> LangChainTool:
    """Wrap a LangChain tool (``@tool`` function, ``StructuredTool``, ``BaseTool`` subclass).

    ``idempotent=True`` marks a tool that may safely run again after a crash.

    Example::

        search = from_langchain_tool(DuckDuckGoSearchRun())
        agent = create_agent(model, tools=[search, write_file], ...)
    """
    if isinstance(tool, LangChainTool):
        return tool
    return LangChainTool(tool, idempotent=idempotent)


def from_langchain_tools(tools: Iterable[Any]) -> list[LangChainTool]:
    """:func:`from_langchain_tool` for each of ``tools`` (a toolkit's ``get_tools()``)."""
    return [from_langchain_tool(t) for t in tools]


def _schema_of(tool: Any) -> Any:
    for attribute in ("tool_call_schema", "args_schema"):
        try:
            schema = getattr(tool, attribute, None)
        except Exception:  # a property that fails for this tool: try the next one
            continue
        if schema is not None:
            return schema
    return None


def _dict_schema(schema: Any) -> dict[str, Any]:
    if isinstance(schema, Mapping):
        result = dict(schema)
    elif schema is not None and callable(getattr(schema, "schema", None)):  # a pydantic v1 model
        result = dict(schema.schema())
    else:
        result = {"type": "object", "properties": {}}
    result.pop("title", None)
    result.setdefault("type", "object")
    result.setdefault("properties", {})
    return result


def _result(value: Any) -> Any:
    """What the tool returned; a LangChain ToolMessage counts as its content."""
    if hasattr(value, "tool_call_id") and hasattr(value, "content"):
        return value.content
    return value
