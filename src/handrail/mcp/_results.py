"""How an MCP ``tools/call`` result becomes the call's ``ToolMessage``.

The rules:

- The content the model sees is the result's text blocks, in order, one after another
  on their own lines. When the result has no text block but has structured content, the
  structured content's JSON takes the text's place.
- Every other block is summarised on its own line, never copied: an image or audio block
  says its MIME type and size (``[image: image/png, 12.4 kB, not shown]``), a resource
  link its name and URI, an embedded binary resource its URI, type and size. An embedded
  text resource is text the server chose to return: it is shown after a line naming it.
- The structured content (any JSON value), when there is one, is the message's
  ``artifact``, for the program rather than the model.
- A result marked ``isError`` is an error ``ToolMessage`` (``status="error"``) with the
  server's text; without any text it says the tool reported an error.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
import orjson

from handrail.mcp._text import clean_text
from handrail.messages import ToolMessage

__all__ = ["result_message"]

_LABEL_LIMIT = 300  # characters of a URI, name or MIME type in a summary line


def result_message(result: types.CallToolResult, *, call_id: str, name: str) -> ToolMessage:
    """The ``ToolMessage`` for ``result``, answering call ``call_id`` of tool ``name``.

    Example::

        result_message(types.CallToolResult(content=[types.TextContent(text="ok")]),
                       call_id="call_1", name="write_note").content   # -> "ok"
    """
    lines: list[str] = []
    texts = 0
    for block in result.content:
        if isinstance(block, types.TextContent):
            lines.append(block.text)
            texts += 1
        elif isinstance(block, types.EmbeddedResource) and isinstance(
            block.resource, types.TextResourceContents
        ):
            lines.append(f"[resource {_label(block.resource.uri)}{_mime(block.resource.mime_type)}:]")
            lines.append(block.resource.text)
            texts += 1
        else:
            lines.append(_summary(block))
    structured = result.structured_content
    if texts == 0 and structured is not None:
        lines.insert(0, _json(structured))
    content = "\n".join(lines)
    if result.is_error:
        return ToolMessage(
            content or f"Error: tool {name!r} reported an error without saying what it was.",
            tool_call_id=call_id,
            name=name,
            status="error",
            artifact=structured,
        )
    return ToolMessage(content, tool_call_id=call_id, name=name, artifact=structured)


def _summary(block: Any) -> str:
    """One line saying what a non-text block is, without its data."""
    if isinstance(block, types.ImageContent):
        return f"[image: {_label(block.mime_type)}, {_size(_base64_bytes(block.data))}, not shown]"
    if isinstance(block, types.AudioContent):
        return f"[audio: {_label(block.mime_type)}, {_size(_base64_bytes(block.data))}, not shown]"
    if isinstance(block, types.ResourceLink):
        size = f", {_size(block.size)}" if isinstance(block.size, int) and block.size >= 0 else ""
        return f"[resource link: {_label(block.name)} <{_label(block.uri)}>{_mime(block.mime_type)}{size}]"
    if isinstance(block, types.EmbeddedResource) and isinstance(block.resource, types.BlobResourceContents):
        resource = block.resource
        return (
            f"[resource {_label(resource.uri)}{_mime(resource.mime_type)}: "
            f"{_size(_base64_bytes(resource.blob))} of binary data, not shown]"
        )
    kind = getattr(block, "type", None)
    return f"[a content block of type {_label(str(kind))}, not shown]"


def _label(text: str) -> str:
    return clean_text(text, _LABEL_LIMIT).replace("\n", " ")


def _mime(mime_type: str | None) -> str:
    return f" ({_label(mime_type)})" if mime_type else ""


def _base64_bytes(data: str) -> int:
    """How many bytes base64 text of this length decodes to (without decoding it)."""
    stripped = len(data.rstrip("="))
    return stripped * 3 // 4


def _size(count: int) -> str:
    if count < 1000:
        return f"{count} bytes"
    if count < 1_000_000:
        return f"{count / 1000:.1f} kB"
    if count < 1_000_000_000:
        return f"{count / 1_000_000:.1f} MB"
    return f"{count / 1_000_000_000:.1f} GB"


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # pragma: no cover - structured content arrives as parsed JSON
        return str(value)
