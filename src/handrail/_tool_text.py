"""How a tool's text is read and told: its docstring's summary and argument descriptions,
and the problems pydantic found with arguments, in a few lines each."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pydantic

__all__ = ["describe_errors", "read_docstring"]

_SECTION_RE = re.compile(r"^(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?):\s*$")


def read_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its summary and per-argument descriptions."""
    summary: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in doc.splitlines():
        match = _SECTION_RE.match(line.strip())
        if match and not line.startswith((" ", "\t")):
            section = match.group(1)
            current = None
            continue
        if section is None:
            summary.append(line)
        elif section in ("Args", "Arguments", "Parameters"):
            arg = re.match(r"^\s+(\w+)\s*(\([^)]*\))?:\s*(.*)$", line)
            if arg and (current is None or len(line) - len(line.lstrip()) <= 4):
                current = arg.group(1)
                args[current] = arg.group(3).strip()
            elif current and line.strip():
                args[current] = (args[current] + " " + line.strip()).strip()
    return "\n".join(summary).strip(), args


_MAX_PROBLEMS = 10  # an error message lists this many, then says how many more


def describe_errors(exc: pydantic.ValidationError) -> list[str]:
    problems = []
    errors = exc.errors(include_url=False, include_input=False)
    for error in errors[:_MAX_PROBLEMS]:
        location = ".".join(str(part)[:40] for part in error["loc"][:8]) or "arguments"
        problems.append(f"{location}: {error['msg'][:200]}")
    if len(errors) > _MAX_PROBLEMS:
        problems.append(f"and {len(errors) - _MAX_PROBLEMS} more")
    return problems
