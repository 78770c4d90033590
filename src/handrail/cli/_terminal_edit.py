"""Helpers for editing a tool call's arguments in a terminal review.

:class:`~handrail.cli.terminal.TerminalReviewer` checks each edit as it is entered, so a
wrong edit is refused at once and the model's proposal is kept. Without a better check
(``handrail demo`` passes the tools' own validation) :func:`schema_problems` compares the
edit with the JSON schema the review request carries (``review_configs[i]["args_schema"]``):
unknown and missing arguments, and the JSON type of each value.

:func:`edit_in_editor` opens ``$VISUAL`` or ``$EDITOR`` on a text (the whole JSON object of
the arguments) and returns what the person saved.

Private to :mod:`handrail.cli.terminal`.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["EditorUnavailableError", "edit_in_editor", "editor_command", "read_text_value", "schema_problems"]

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
}


class EditorUnavailableError(Exception):
    """No editor is set (``$VISUAL``/``$EDITOR``), or it could not be run; the message says which."""


def schema_problems(schema: Mapping[str, Any] | None, args: Mapping[str, Any]) -> list[str]:
    """What is wrong with ``args`` for the JSON ``schema`` of a tool's arguments (empty when fine).

    >>> schema_problems({"properties": {"n": {"type": "integer"}}, "required": ["n"]}, {"n": "x"})
    ['n: expected integer, got string']
    """
    if not schema:
        return []
    properties: Mapping[str, Any] = schema.get("properties", {})
    problems = [f"{name}: missing" for name in schema.get("required", []) if name not in args]
    if properties and schema.get("additionalProperties") is not True:
        problems += [f"{name}: {_unknown(properties)}" for name in args if name not in properties]
    for name, value in args.items():
        if name in properties and not _fits(properties[name], value):
            problems.append(f"{name}: expected {_expected(properties[name])}, got {_json_type(value)}")
    return problems


def _unknown(properties: Mapping[str, Any]) -> str:
    return f"no such argument (it takes {', '.join(properties)})"


def _fits(schema: Mapping[str, Any], value: Any) -> bool:
    branches = schema.get("anyOf") or schema.get("oneOf")
    if branches:
        return any(_fits(branch, value) for branch in branches)
    kind = schema.get("type")
    if kind is None:
        return True
    kinds = kind if isinstance(kind, list) else [kind]
    for name in kinds:
        if name == "null" and value is None:
            return True
        allowed = _JSON_TYPES.get(name)
        if allowed is None:
            return True  # a type this check does not know: leave it to handrail's own check
        if isinstance(value, bool) and name != "boolean":
            continue
        if isinstance(value, allowed):
            return True
    return False


def _expected(schema: Mapping[str, Any]) -> str:
    branches = schema.get("anyOf") or schema.get("oneOf")
    if branches:
        return " or ".join(_expected(branch) for branch in branches)
    kind = schema.get("type", "any value")
    return " or ".join(kind) if isinstance(kind, list) else str(kind)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    for name in ("string", "integer", "number", "array", "object"):
        if isinstance(value, _JSON_TYPES[name]):
            return name
    return type(value).__name__


def read_text_value(raw: str) -> str:
    """A text field as typed: a JSON string in double quotes (for ``\\n`` and friends), else as it is.

    >>> read_text_value('"line one\\\\nline two"')
    'line one\\nline two'
    >>> read_text_value("plain text")
    'plain text'
    """
    if len(raw) >= 2 and raw.startswith('"') and raw.endswith('"'):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            return raw
        if isinstance(value, str):
            return value
    return raw


def editor_command() -> list[str] | None:
    """The editor the person chose (``$VISUAL``, else ``$EDITOR``) as a command line, or None."""
    chosen = os.environ.get("VISUAL") or os.environ.get("EDITOR")
    if not chosen or not chosen.strip():
        return None
    return shlex.split(chosen)


def edit_in_editor(text: str, *, suffix: str = ".json") -> str:
    """Open the person's editor on ``text`` in a temporary file; return the file as saved.

    Raises :class:`EditorUnavailableError` when no editor is set, it cannot be started,
    or it exits with an error (the edit is then abandoned).
    """
    command = editor_command()
    if command is None:
        raise EditorUnavailableError("no editor is set: set $EDITOR (or $VISUAL), e.g. export EDITOR=nano")
    with tempfile.TemporaryDirectory(prefix="handrail-edit-") as folder:
        path = Path(folder) / f"arguments{suffix}"
        path.write_text(text, encoding="utf-8")
        try:
            done = subprocess.run([*command, str(path)], check=False)
        except OSError as exc:
            raise EditorUnavailableError(f"could not start the editor {command[0]!r}: {exc}") from None
        if done.returncode != 0:
            raise EditorUnavailableError(f"the editor exited with code {done.returncode}")
        return path.read_text(encoding="utf-8")
