"""Showing untrusted values: JSON with highlighting, text with visible control characters.

Tool arguments, tool results and model messages are untrusted. Everything here returns
:class:`markupsafe.Markup` built from escaped pieces only, so a ``<script>``, an
``onerror=`` attribute or a ``javascript:`` URL in them is text on the page. Control
characters and invisible formatting characters (bidirectional overrides, zero-width
spaces) are shown as ``\\uXXXX`` in a marked span, so a value cannot hide part of itself
or reorder what the reviewer reads; a zero-width joiner between two pictographs is part
of an emoji (👩‍💻) and shows as the emoji.

Long values are folded: a string over :data:`FOLD_LIMIT` characters shows its first
:data:`FOLD_HEAD` characters and its length, with a link to the whole value when the
page has one (``_raw.py``), so a megabyte argument is never put on a page whole.
"""

from __future__ import annotations

import difflib
import re
import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from markupsafe import Markup, escape

__all__ = [
    "FOLD_HEAD",
    "FOLD_LIMIT",
    "HIDDEN",
    "PICTOGRAPHS",
    "age",
    "clock",
    "fold_text",
    "folded",
    "highlight_json",
    "json_text",
    "line_diff",
    "one_line",
    "summary",
    "visible",
]

# Pictographs (emoji) and the emoji presentation selector: a zero-width joiner between
# them joins one glyph (👩‍💻 is U+1F469 U+200D U+1F4BB), elsewhere it is hidden text.
PICTOGRAPHS = "\u2190-\u21ff\u2300-\u23ff\u2600-\u27bf\u2b00-\u2bff\U0001f000-\U0001faff"
_LONE_JOINER = f"(?<![{PICTOGRAPHS}\\ufe0f])\u200d|\u200d(?![{PICTOGRAPHS}])"
#: C0/C1 controls but tab and newline (and a carriage return before a newline), the soft
# hyphen, and the invisible formatting characters of Unicode's Cf category that matter.
HIDDEN = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b\u200c\u200e\u200f\u202a-\u202e"
    f"\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]|\r(?!\n)|{_LONE_JOINER}"
)
FOLD_LIMIT = 2000
"""Strings longer than this (in characters) are folded on a page."""
FOLD_HEAD = 500
"""How much of a folded string a page shows."""
_JSON_TOKEN = re.compile(
    r'(?P<string>"(?:[^"\\]|\\.)*")(?P<colon>\s*:)?'
    r"|(?P<number>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)"
    r"|(?P<literal>true|false|null)"
    r"|(?P<punct>[{}\[\],:])"
    r"|(?P<space>\s+)"
)


def _mark_hidden(escaped: str) -> str:
    return HIDDEN.sub(lambda m: f'<span class="ctl">\\u{ord(m.group()):04x}</span>', escaped)


def visible(text: Any) -> Markup:
    """``text`` escaped, with control and invisible characters shown as ``\\uXXXX``."""
    return Markup(_mark_hidden(str(escape("" if text is None else str(text)))))


def json_text(value: Any, *, indent: bool = True) -> str:
    """``value`` as JSON text (two-space indent), anything unknown as its string."""
    option = orjson.OPT_NON_STR_KEYS | (orjson.OPT_INDENT_2 if indent else 0)
    return orjson.dumps(value, default=str, option=option).decode()


def _size(length: int) -> str:
    return f"{length:,} characters"


def _fold_note(length: int, link: str | None) -> str:
    whole = (
        f'; <a href="{escape(link)}" target="_blank" rel="noopener">see and copy the whole value</a>'
        if link
        else ""
    )
    return f'<span class="fold">(folded: {_size(length)} in all{whole})</span>'


def _raw_link(raw: str | None, path: Sequence[Any]) -> str | None:
    if raw is None:
        return None
    from urllib.parse import quote

    return f"{raw}&path={quote(json_text(list(path), indent=False), safe='')}"


def _fold(value: Any, path: tuple[Any, ...], nonce: str, found: list[tuple[tuple[Any, ...], str]]) -> Any:
    if isinstance(value, str):
        if len(value) <= FOLD_LIMIT:
            return value
        found.append((path, value))
        return f"\ue000{nonce}:{len(found) - 1}\ue000"
    if isinstance(value, Mapping):
        return {k: _fold(v, (*path, k), nonce, found) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_fold(v, (*path, i), nonce, found) for i, v in enumerate(value)]
    return value


def folded(value: Any) -> Any:
    """``value`` with every string over :data:`FOLD_LIMIT` cut to its head and a note of its length."""
    if isinstance(value, str):
        if len(value) <= FOLD_LIMIT:
            return value
        return f"{value[:FOLD_HEAD]}… [folded: {_size(len(value))} in all]"
    if isinstance(value, Mapping):
        return {k: folded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [folded(v) for v in value]
    return value


def highlight_json(value: Any, raw: str | None = None, at: Sequence[Any] = ()) -> Markup:
    """``value`` as indented JSON, each token in a span whose class names its kind.

    A string over :data:`FOLD_LIMIT` characters is folded: its head, its length and, with
    ``raw`` (the URL of the raw view of the value this one sits in, at the path ``at``),
    a link to the whole of it.
    """
    nonce = secrets.token_hex(8)
    long: list[tuple[tuple[Any, ...], str]] = []
    text = json_text(_fold(value, tuple(at), nonce, long))
    out: list[str] = []
    position = 0
    for match in _JSON_TOKEN.finditer(text):
        if match.start() != position:  # never happens for orjson's output; kept as text anyway
            out.append(str(escape(text[position : match.start()])))
        position = match.end()
        kind = match.lastgroup
        if match.group("string") is not None:
            token = match.group("string")
            if long and not match.group("colon") and token.startswith(f'"\ue000{nonce}:'):
                path, whole = long[int(token[len(nonce) + 3 : -2])]
                head = json_text(whole[:FOLD_HEAD])[:-1]
                out.append(f'<span class="j-str">{_mark_hidden(str(escape(head)))}…"</span> ')
                out.append(_fold_note(len(whole), _raw_link(raw, path)))
                continue
            css = "j-key" if match.group("colon") else "j-str"
            out.append(f'<span class="{css}">{_mark_hidden(str(escape(token)))}</span>')
            if match.group("colon"):
                out.append(f'<span class="j-p">{escape(match.group("colon"))}</span>')
        elif kind == "number":
            out.append(f'<span class="j-num">{escape(match.group())}</span>')
        elif kind == "literal":
            out.append(f'<span class="j-lit">{escape(match.group())}</span>')
        elif kind == "punct":
            out.append(f'<span class="j-p">{escape(match.group())}</span>')
        else:
            out.append(str(escape(match.group())))
    out.append(str(escape(text[position:])))
    return Markup("".join(out))


def fold_text(text: Any, raw: str | None = None, at: Sequence[Any] = ()) -> Markup:
    """Text as :func:`visible` shows it, folded as :func:`highlight_json` folds a long string."""
    shown = "" if text is None else str(text)
    if len(shown) <= FOLD_LIMIT:
        return visible(shown)
    head = str(visible(shown[:FOLD_HEAD]))
    return Markup(f"{head}… {_fold_note(len(shown), _raw_link(raw, at))}")


def one_line(value: Any, size: int = 160) -> str:
    """``value`` as one line of JSON, cut to ``size`` characters with an ellipsis."""
    text = value if isinstance(value, str) else json_text(value, indent=False)
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    return text if len(text) <= size else text[: size - 1] + "…"


def summary(args: Any, size: int = 160) -> str:
    """A one-line summary of a tool call's arguments: ``key: value, ...`` (values as JSON)."""
    if isinstance(args, Mapping):
        text = ", ".join(f"{k}: {json_text(v, indent=False)}" for k, v in args.items())
        return one_line(text, size) if text else "(no arguments)"
    return one_line(args, size)


def _when(value: datetime | float | str) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str):
        return _when(datetime.fromisoformat(value))
    return datetime.fromtimestamp(float(value), UTC)


def clock(value: datetime | float | str, now: datetime | None = None) -> str:
    """``10:42 UTC`` for today, ``2026-12-01 10:42 UTC`` for another day."""
    at = _when(value).astimezone(UTC)
    today = (now or datetime.now(UTC)).astimezone(UTC).date()
    return at.strftime("%H:%M UTC") if at.date() == today else at.strftime("%Y-%m-%d %H:%M UTC")


def age(value: datetime | float | str, now: datetime | None = None) -> str:
    """How long ago: ``12 s``, ``3 min``, ``2 h``, ``4 d``."""
    seconds = max(0, int(((now or datetime.now(UTC)) - _when(value)).total_seconds()))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def line_diff(before: Any, after: Any) -> list[tuple[str, str]]:
    """The lines of two values' JSON (keys sorted, long strings folded), each marked " ", "-" or "+"."""
    option = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
    old = orjson.dumps(folded(before), default=str, option=option).decode().splitlines()
    new = orjson.dumps(folded(after), default=str, option=option).decode().splitlines()
    out: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if op == "equal":
            out += [(" ", line) for line in old[i1:i2]]
            continue
        out += [("-", line) for line in old[i1:i2]]
        out += [("+", line) for line in new[j1:j2]]
    return out
