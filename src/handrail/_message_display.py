"""How messages show themselves, as LangChain's do: ``pretty_repr`` and ``content_blocks``.

``pretty_repr`` lays a message out as LangChain does (a title line of ``=`` 80 wide, the
name, the content, the tool calls), so printed transcripts read the same after a port.
``content_blocks`` gives the content as a list of typed blocks (``text``, ``reasoning``,
``image``, ``tool_call``, ...), anything unknown wrapped as ``non_standard``.

:func:`visible` is the rule for putting untrusted text (model output, tool arguments,
tool results, names typed by reviewers) on a terminal: control characters and the
invisible formatting characters are shown as escapes (``\\x1b``, ``\\u202e``) instead
of being written raw, so a value cannot send the terminal an escape sequence (colours, a
cursor move, an OSC 52 clipboard write, a hyperlink), hide part of itself or reorder
what the reader sees. It covers everything the web pages mark
(``handrail.server.pages._markup.HIDDEN``) and, for a terminal, carriage returns and a
few more. ``pretty_repr``, the review CLI and ``handrail demo`` print through it. A
zero-width joiner between two pictographs is part of an emoji (👩‍💻) and is kept.

:func:`reviewer_content` is what every display shows of a message: a tool result without
the edit notice written for the model (``review.policy.with_edit_notice``), so a reviewer
reads the tool's own result.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from handrail.messages import BaseMessage

__all__ = [
    "ONE_LINE_HIDDEN",
    "TERMINAL_HIDDEN",
    "content_blocks",
    "escape_char",
    "pretty_repr",
    "reviewer_content",
    "visible",
    "visible_json",
]

_HIDDEN_SET = (
    # C0 controls but tab, newline and carriage return (below), DEL and the C1 controls
    # (CSI is U+009B, OSC U+009D)
    "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"
    # soft hyphen, Arabic letter mark, Mongolian vowel separator
    "\u00ad\u061c\u180e"
    # zero-width space / non-joiner (the joiner: below), LRM, RLM, line and paragraph
    # separators, the bidi embeddings and overrides (LRE, RLE, PDF, LRO, RLO)
    "\u200b\u200c\u200e\u200f\u2028-\u202e"
    # word joiner, invisible operators, the bidi isolates (LRI, RLI, FSI, PDI), deprecated formats
    "\u2060-\u2064\u2066-\u206f"
    # byte order mark / zero-width no-break space, interlinear annotations, Unicode tag characters
    "\ufeff\ufff9-\ufffb\U000e0000-\U000e007f"
)
# Pictographs and the emoji presentation selector: a zero-width joiner between them joins
# one glyph (👩‍💻 is U+1F469 U+200D U+1F4BB); anywhere else it is hidden text.
_PICTOGRAPHS = "\u2190-\u21ff\u2300-\u23ff\u2600-\u27bf\u2b00-\u2bff\U0001f000-\U0001faff"
_LONE_JOINER = f"(?<![{_PICTOGRAPHS}\\ufe0f])\u200d|\u200d(?![{_PICTOGRAPHS}])"
TERMINAL_HIDDEN = re.compile(f"[{_HIDDEN_SET}]|\r(?!\n)|{_LONE_JOINER}")
"""What :func:`visible` escapes in text shown on several lines (newlines and tabs stay;
a carriage return stays only before a newline, where it moves nothing)."""
ONE_LINE_HIDDEN = re.compile(f"[{_HIDDEN_SET}\t\n\r]|{_LONE_JOINER}")
"""What :func:`visible` escapes in a value kept on one line: the same, and tabs and line breaks."""
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def escape_char(char: str) -> str:
    r"""One character as a visible escape: ``\t``, ``\n``, ``\r``, else ``\x1b``, ``\u202e``, ``\U000e0041``.

    >>> escape_char("\x1b"), escape_char("\u202e"), escape_char("\n")
    ('\\x1b', '\\u202e', '\\n')
    """
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def visible(text: object, *, newlines: bool = False) -> str:
    r"""``text`` with control and invisible formatting characters shown as escapes.

    With ``newlines`` (a value shown on several lines on purpose) newlines and tabs are
    kept; without, they are escaped too, so the value stays on one line. None is shown
    as an empty text.

    >>> visible("ok\x1b[31m \u202egnp.exe")
    'ok\\x1b[31m \\u202egnp.exe'
    >>> visible("two\nlines", newlines=True), visible("two\nlines")
    ('two\nlines', 'two\\nlines')
    """
    shown = "" if text is None else str(text)
    rule = TERMINAL_HIDDEN if newlines else ONE_LINE_HIDDEN
    return rule.sub(lambda found: escape_char(found.group()), shown)


def visible_json(text: str) -> str:
    r"""JSON text with its hidden characters written as JSON escapes: the same JSON, readable.

    Outside its strings JSON text holds only ASCII letters, digits, punctuation, spaces
    and newlines, so only characters inside strings change (U+202E becomes ``\u202e``);
    a JSON encoder has already escaped the C0 controls.

    >>> visible_json('{"a": "x\u202ey"}')
    '{"a": "x\\u202ey"}'
    """
    return TERMINAL_HIDDEN.sub(lambda found: _json_escape(found.group()), text)


def _json_escape(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # beyond the BMP JSON writes a surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


_EDIT_MARK = "handrail_edit_notice"  # review.policy.EDIT_MARK (not imported: this module is a leaf)
_TOOL_RESPONSE = "\n\nTool response:\n"


def reviewer_content(message: BaseMessage | Mapping[str, Any]) -> tuple[Any, bool]:
    """What a reviewer reads of ``message``'s content, and whether a reviewer's edit led it.

    The result of an edited call starts with a notice for the model ("Note: a human
    reviewer replaced this tool call ... Tool response: ..."); the reviewer is shown the
    tool's own result instead (what changed is in the audit trail). A message the edit
    mark says nothing about is returned as it is, except a stored result from before the
    mark, recognised by its layout (the notice, "Executed instead: ...", then "Tool
    response:"). ``message`` is a message or its JSON form (``to_wire``).

    >>> from handrail.messages import ToolMessage
    >>> text = "Note: edited. Executed instead: t with arguments {}.\n\nTool response:\nok"
    >>> reviewer_content(ToolMessage(text, tool_call_id="1"))
    ('ok', True)
    """
    if isinstance(message, Mapping):
        kind, content, extra = message.get("type"), message.get("content"), message.get("additional_kwargs")
    else:
        kind, content, extra = message.type, message.content, message.additional_kwargs
    if kind != "tool":
        return content, False
    mark = extra.get(_EDIT_MARK) if isinstance(extra, Mapping) else None
    if isinstance(mark, Mapping):
        chars, blocks = mark.get("chars"), mark.get("blocks")
        if isinstance(content, str) and isinstance(chars, int) and 0 <= chars <= len(content):
            return content[chars:], True
        if isinstance(content, list) and isinstance(blocks, int) and 0 <= blocks <= len(content):
            return content[blocks:], True
    if isinstance(content, str):
        head, found, rest = content.partition(_TOOL_RESPONSE)
        if found and " Executed instead: " in head:
            return rest, True
    return content, False


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
    """The message as LangChain prints it, control and invisible characters shown as escapes.

    Text from the model or a tool may hold terminal escape sequences or bidirectional
    overrides; they are shown as :func:`visible` shows them, never written raw. Plain
    text, newlines included, reads exactly as LangChain prints it.
    """
    title = _title(message.type.title() + " Message")
    if message.name is not None:
        title += f"\nName: {visible(message.name)}"
    text = f"{title}\n\n{visible(message.content, newlines=True)}"
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
            name, call_id = visible(call.get("name", "Tool")), visible(str(call.get("id")))
            lines += [f"  {name} ({call_id})", f" Call ID: {call_id}"]
            if call.get("error"):
                lines.append(f"  Error: {visible(call.get('error'), newlines=True)}")
            lines.append("  Args:")
            args = call.get("args")
            if isinstance(args, str):
                lines.append(f"    {visible(args, newlines=True)}")
            elif isinstance(args, Mapping):
                lines += [
                    f"    {visible(key)}: {visible(value, newlines=True)}" for key, value in args.items()
                ]
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
