"""The ``handrail`` command: :func:`main` (the console script, ``python -m handrail``).

The command prints with rich, which the ``cli`` extra installs (``pip install
'handrail[cli]'``); the library and the service never import this package. Without rich,
:func:`main` says which extra to install, in one line, and returns 1.

Where each part lives (every module but :mod:`~handrail.cli.demo` and
:mod:`~handrail.cli.terminal` is private to this package)::

    _command.py         the parser, and the dispatch to the modules below
    _errors.py          exit codes; UsageError, StoreError, CommandError
    _flags.py           flags several commands share: --db/--postgres/--schema, --policy
    _store.py           the store those flags name, opened; _sqlite_file.py checks a --db file
    _safe_text.py       what every command prints: control characters as escapes

    _demo_command.py    demo: its flags and session
    demo.py             run_demo: the scripted agent reviewed in a terminal
    _demo_agent.py      that agent: its workspace, tools, policy and scripted model
    _demo_outcomes.py   what became of each of its calls, read from the audit trail
    _demo_tidy.py       the working folders of finished demos, removed
    terminal.py         TerminalReviewer; _terminal_edit.py: its edits
    _service.py         serve, worker, tokens; _reload.py: their policy reload on SIGHUP
    _review.py          inbox, show, approve | reject | respond | edit, threads, audit
    _review_answer.py   their answers
    _review_client.py   where they read and answer: a service over HTTP, or a store
    _review_display.py  how commands lay out values, ids and times
    _audit.py           audit verify
    _grants.py          approve --grant, grants list | revoke
    _policy.py          policy check
    _sweep.py           sweep
    _webhooks.py        webhooks ..., deliver
    _slack.py           slack setup, slack users ...
    _mcp.py             mcp, mcp init
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]

NEEDS_CLI_EXTRA = "handrail: error: the handrail command needs the cli extra: pip install 'handrail[cli]'"
"""What :func:`main` prints when rich is not installed."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``handrail`` command with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    try:
        from handrail.cli._command import run_command
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "rich":
            raise
        print(NEEDS_CLI_EXTRA, file=sys.stderr)
        return 1
    return run_command(argv)
