"""How messages show themselves, as LangChain's do: ``pretty_repr`` and ``content_blocks``.

``pretty_repr`` lays a message out as LangChain does (a title line of ``=`` 80 wide, the
name, the content, the tool calls), so printed transcripts read the same after a port.
``content_blocks`` gives the content as a list of typed blocks (``text``, ``reasoning``,
``image``, ``tool_call``, ...), anything unknown wrapped as ``non_standard``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from handrail.messages import BaseMessage

__all__ = ["content_blocks", "pretty_repr"]

KNOWN_BLOCK_TYPES = frozenset(
    {
        "text",
        "reasoning",
        "image",
        "audio",
        "video",
        "file",
        "text-plain",
        "tool_call",
        "tool_call_chunk",
        "invalid_tool_call",
        "server_tool_call",
        "server_tool_call_chunk",
        "server_tool_result",
        "non_standard",
    }
)


def _title(title: str) -> str:
    padded = f" {title} "
    rule = "=" * ((80 - len(padded)) // 2)
    return f"{rule}{padded}{rule}{'=' if len(padded) % 2 else ''}"


def pretty_repr(message: BaseMessage) -> str:
    """The message as LangChain prints it."""
    title = _title(message.type.title() + " Message")
    if message.name is not None:
        title += f"\nName: {message.name}"
    text = f"{title}\n\n{message.content}"
    calls = list(getattr(message, "tool_calls", ()) or ())
    invalid = list(getattr(message, "invalid_tool_calls", ()) or ())
    if not calls and not invalid:
        return text
    lines: list[str] = []
    for heading, items in (("Tool Calls:", calls), ("Invalid Tool Calls:", invalid)):
        if not items:
            continue
        lines.append(heading)
        for call in items:
            lines += [f"  {call.get('name', 'Tool')} ({call.get('id')})", f" Call ID: {call.get('id')}"]
            if call.get("error"):
                lines.append(f"  Error: {call.get('error')}")
            lines.append("  Args:")
            args = call.get("args")
            if isinstance(args, str):
                lines.append(f"    {args}")
            elif isinstance(args, Mapping):
                lines += [f"    {key}: {value}" for key, value in args.items()]
    return (text.strip() + "\n" + "\n".join(lines)).strip()


def content_blocks(message: BaseMessage) -> list[dict[str, Any]]:
    """The content as typed blocks; an AI message's tool calls follow as ``tool_call`` blocks."""
    content = message.content
    items: list[Any] = ([content] if content else []) if isinstance(content, str) else list(content)
    blocks: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, str):
            blocks.append({"type": "text", "text": item})
        elif isinstance(item, Mapping):
            kind = item.get("type")
            if kind == "thinking":  # Anthropic's name for reasoning
                blocks.append({"type": "reasoning", "reasoning": item.get("thinking", "")})
            elif kind in KNOWN_BLOCK_TYPES:
                blocks.append(dict(item))
            else:
                blocks.append({"type": "non_standard", "value": dict(item)})
    present = {b.get("id") for b in blocks if b.get("type") == "tool_call"}
    for call in getattr(message, "tool_calls", ()) or ():
        if call.get("id") not in present:
            blocks.append(
                {"type": "tool_call", "id": call.get("id"), "name": call["name"], "args": call["args"]}
            )
    return blocks
