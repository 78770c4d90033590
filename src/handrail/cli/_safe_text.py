"""What the CLI prints of untrusted values: control and invisible characters as escapes.

Thread ids, tool names, arguments, messages, reviewer names and errors that quote them
come from models, tools and people. A control character in one (an ANSI or OSC escape
sequence) could recolour the terminal, move the cursor or set its title; a bidirectional
override or a zero-width character could make a value read as another. So every command
prints them through :func:`safe_text` or :func:`safe_markup`, which show such characters
as escapes (``\\x1b``, ``\\u202e``) and keep rich markup in them as text, on a console
made by :func:`safe_console`, which applies the same rule to everything printed on it as
a last line of defence.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderHook, RenderResult
from rich.markup import escape
from rich.segment import Segment
from rich.text import Text

from handrail._message_display import ONE_LINE_HIDDEN, TERMINAL_HIDDEN, escape_char, visible

__all__ = ["ESCAPE_STYLE", "safe_console", "safe_markup", "safe_text"]

ESCAPE_STYLE = "reverse"
"""How :func:`safe_text` sets an escape apart from text that merely looks like one."""


def safe_text(value: object, *, newlines: bool = False, style: str = "") -> Text:
    """``value`` as a rich :class:`~rich.text.Text`, safe to print from untrusted data.

    Control characters and invisible formatting characters (ANSI and OSC escape
    sequences, bidirectional overrides and isolates, zero-width characters) are shown
    as escapes such as ``\\x1b`` or ``\\u202e``, in :data:`ESCAPE_STYLE`; a ``Text`` is
    never read as markup. With ``newlines``, newlines and tabs are kept (a value shown on
    several lines on purpose); without, they are escaped too.
    """
    text = "" if value is None else str(value)
    rule = TERMINAL_HIDDEN if newlines else ONE_LINE_HIDDEN
    out = Text(style=style)
    start = 0
    for found in rule.finditer(text):
        out.append(text[start : found.start()])
        out.append(escape_char(found.group()), style=ESCAPE_STYLE)
        start = found.end()
    out.append(text[start:])
    return out


def safe_markup(value: object, *, newlines: bool = False) -> str:
    """``value`` for a rich markup string: hidden characters escaped as :func:`safe_text`
    does (without its style), and square brackets that would read as markup escaped."""
    return escape(visible(value, newlines=newlines))


class _Escaped:
    """A renderable whose text segments have their hidden characters shown as escapes."""

    def __init__(self, inner: ConsoleRenderable) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for segment in console.render(self.inner, options):
            if segment.control or not TERMINAL_HIDDEN.search(segment.text):
                yield segment
            else:
                yield Segment(visible(segment.text, newlines=True), segment.style)


class _EscapeHidden(RenderHook):
    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_Escaped(renderable) for renderable in renderables]


def safe_console(**options: Any) -> Console:
    """A rich :class:`~rich.console.Console` (``options`` as ``Console`` takes them) that
    never writes a control or invisible formatting character of what it prints raw.

    Whatever is printed, a hidden character in its text is shown as an escape
    (``\\x1b``, ``\\u202e``), while the console's own styles still reach the terminal.
    It is a last line of defence: values should still be printed through
    :func:`safe_text` or :func:`safe_markup`, which escape before the layout is made
    (so columns line up) and set the escapes apart. Writes to ``console.file`` itself
    are not covered.
    """
    console = Console(**options)
    console.push_render_hook(_EscapeHidden())
    return console
