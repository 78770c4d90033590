"""How the ``handrail`` command ends: its exit codes and the errors that end a command.

A mistake on the command line is a :class:`UsageError`: one line on stderr and exit code
2. A problem found while running (an unknown thread, a store that cannot be opened) is a
:class:`StoreError` or another :class:`~handrail.errors.HandrailError`: one line (see
:func:`one_line`) and exit code 1. Ctrl-C ends with a short message and exit code 130.
"""

from __future__ import annotations

from handrail.errors import HandrailError

__all__ = [
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "CommandError",
    "StoreError",
    "UsageError",
    "one_line",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CommandError(ValueError):
    """A command cannot go on; the message says why (shown in one line, as a :class:`StoreError`)."""


class UsageError(Exception):
    """The command line was wrong; the message is the one line to show."""


class StoreError(HandrailError):
    """The demo's store cannot be used (missing, not handrail's, unreachable); one line to show."""


def one_line(exc: BaseException) -> str:
    """The first line of what ``exc`` says; its type's name when it says nothing."""
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__
