"""What text from an MCP server may become: the rules for names, descriptions and messages.

An MCP server is not trusted: its tool names, titles, descriptions and error messages
reach the model, the reviewers' pages and terminals. The rules, applied before anything
from a server is used:

- A **tool name** is used as the server gives it when it is a valid handrail tool name
  (:data:`TOOL_NAME`: 1 to 128 letters, digits, ``_``, ``-``, ``.`` or ``:``, the prefix
  included). Any other name (HTML, spaces, control characters, empty, too long) is
  refused, never rewritten: the tool is left out and listed in ``McpTools.skipped``.
- A **server name** (a key of ``servers=`` or ``name=``) is 1 to 64 letters, digits,
  ``_`` or ``-``, so that ``{server}_{tool}`` is a tool name too.
- **Descriptions and titles** keep their text (HTML stays text: each page escapes what it
  shows) without control characters (tabs and newlines stay) or bidirectional overrides,
  cut at a limit with a note of how much was cut.
- **Messages** from a server (a refused call's error) are cleaned the same way and kept
  short.
"""

from __future__ import annotations

import re

__all__ = ["SERVER_NAME", "TOOL_NAME", "clean_text", "quoted"]

TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
"""A tool name handrail accepts (matched whole, with ``fullmatch``)."""

SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""A server name: usable as a prefix of tool names (matched whole)."""

# C0 and C1 controls except tab and newline, and the Unicode bidirectional controls,
# which can make a terminal or a page show text in another order than it is stored
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def clean_text(text: str, limit: int) -> str:
    """``text`` without control characters or bidirectional overrides, at most about
    ``limit`` characters (a longer text is cut and says how much was left out).

    Example::

        clean_text("Delete \\x1b[2Ja note", 100)   # -> "Delete [2Ja note"
    """
    cleaned = _UNSAFE.sub("", text)
    if len(cleaned) <= limit:
        return cleaned
    return f"{cleaned[:limit]}… [{len(cleaned) - limit} more characters cut]"


def quoted(text: str, limit: int = 80) -> str:
    """A short, safe ``repr``-like quote of a name from a server, for error messages."""
    shown = text if len(text) <= limit else text[:limit] + "…"
    return repr(shown)
