"""The ChatModel protocol every model adapter implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from handrail.messages import AIMessage, AIMessageChunk, BaseMessage

__all__ = ["ChatModel", "ToolSpec", "accumulate_chunks"]

ToolSpec = Mapping[str, Any]
"""A tool as a model sees it: ``{"name", "description", "parameters"}`` (JSON schema)."""


class ChatModel(ABC):
    """A chat model: messages and tool specs in, one :class:`AIMessage` out.

    Implement :meth:`invoke`; override :meth:`stream` to stream tokens, and the async
    twins when the provider has a native async client. The defaults make every model
    usable from sync and async runs and from every stream mode.

    Example::

        class Echo(ChatModel):
            def invoke(self, messages, *, tools=None, tool_choice=None, **settings):
                return AIMessage(messages[-1].text)
    """

    provider: str = "custom"
    model_name: str = ""

    @abstractmethod
    def invoke(
        self,
        messages: Sequence[BaseMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: Any = None,
        **settings: Any,
    ) -> AIMessage:
        """Return the model's answer to ``messages`` (which start with any system prompt)."""

    def stream(
        self,
        messages: Sequence[BaseMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: Any = None,
        **settings: Any,
    ) -> Iterator[AIMessageChunk]:
        """Yield the answer in chunks; the default yields the whole answer as one chunk."""
        yield _as_chunk(self.invoke(messages, tools=tools, tool_choice=tool_choice, **settings))

    async def ainvoke(
        self,
        messages: Sequence[BaseMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: Any = None,
        **settings: Any,
    ) -> AIMessage:
        """Async :meth:`invoke`; the default runs the sync one in a worker thread."""
        import asyncio

        return await asyncio.to_thread(
            lambda: self.invoke(messages, tools=tools, tool_choice=tool_choice, **settings)
        )

    async def astream(
        self,
        messages: Sequence[BaseMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_choice: Any = None,
        **settings: Any,
    ) -> AsyncIterator[AIMessageChunk]:
        """Async :meth:`stream`; the default yields :meth:`ainvoke`'s answer as one chunk."""
        yield _as_chunk(await self.ainvoke(messages, tools=tools, tool_choice=tool_choice, **settings))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(provider={self.provider!r}, model={self.model_name!r})"


def _as_chunk(message: AIMessage) -> AIMessageChunk:
    return AIMessageChunk(
        content=message.content,
        id=message.id,
        name=message.name,
        additional_kwargs=dict(message.additional_kwargs),
        response_metadata=dict(message.response_metadata),
        tool_calls=list(message.tool_calls),
        invalid_tool_calls=list(message.invalid_tool_calls),
        usage_metadata=message.usage_metadata,
    )


def accumulate_chunks(chunks: Sequence[AIMessageChunk]) -> AIMessage:
    """Add streamed chunks up into the complete :class:`AIMessage`."""
    if not chunks:
        return AIMessage("")
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    return total.to_message()
