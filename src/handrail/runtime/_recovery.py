"""Rule 9: tool calls left unfinished by a run that died, and who took them over.

A tools step saves the calls it is about to run (``tools_planned``, with its ``run_id``
and the ``worker`` process running it) in one commit before any of them acts; each
call's own ``tool_started`` and ``tool_finished`` follow. A call whose start is on record
and whose end is not is either still running - its run is alive (a lease it renews, or a
lock its death releases: the store's ``runs_alive``) - or was cut short. A run that
finds one cut short asks a person about it with an ``outcome_unknown`` interrupt, never
running it again silently (unless its tool is idempotent: the tools step runs it again).

The interrupt event says what the log knows of the takeover: ``abandoned`` is the id of
the run that died, ``run_id`` and ``worker`` the run and process that found it dead and
asked. The audit trail shows it as a ``run_abandoned`` entry before the review
(``maintenance.py``).
"""

from __future__ import annotations

import hashlib
import os
from functools import cache
from typing import TYPE_CHECKING, Any

from handrail.review import OUTCOME_DECISIONS
from handrail.runtime._fold import ThreadFold
from handrail.runtime._pending import StartedTool
from handrail.runtime.events import Event

if TYPE_CHECKING:
    from handrail.runtime.spec import AgentSpec

__all__ = ["unfinished_tool_interrupts", "worker_name"]


@cache
def _host() -> str:
    import socket  # here, not at import: `import handrail` loads no network modules

    return socket.gethostname()


def worker_name() -> str:
    """The process a run runs in, as the log records it: ``host:pid``.

    Read at each call, so a forked child names itself, not its parent.
    """
    return f"{_host()}:{os.getpid()}"


def _outcome_unknown_id(thread_id: str, started: StartedTool) -> str:
    # Derived, not random: get_state shows the same id before and after it is saved. The
    # call's id is part of it: every call planned in one step shares its start record.
    key = f"{thread_id}\x00outcome_unknown\x00{started.seq}\x00{started.task}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _already_asked(fold: ThreadFold, started: StartedTool) -> bool:
    """Whether this start of the call already has an ``outcome_unknown`` review (pending or
    answered), whatever id an older version of handrail gave it."""
    return any(
        record.kind == "outcome_unknown" and record.task == started.task and record.seq > started.seq
        for record in fold.step_interrupts.values()
    )


def unfinished_tool_interrupts(
    spec: AgentSpec, fold: ThreadFold, alive: set[str], own_run: str | None
) -> tuple[list[Event], StartedTool | None]:
    """``outcome_unknown`` interrupts for tool calls left unfinished by dead runs.

    Also returns a call that a run still alive is executing, if any: that run is still
    working on the thread, and nobody else may write to it (``rules.start_events``).
    ``own_run`` is the run that asks (None for a reading that saves nothing).
    """
    events: list[Event] = []
    for started in fold.started.values():
        if started.run_id == own_run:
            continue
        if started.run_id in alive:
            return [], started
        tool = spec.tools.get(started.name)
        if started.idempotent or (tool is not None and tool.idempotent):
            continue  # the tools step runs it again
        interrupt_id = _outcome_unknown_id(fold.thread_id, started)
        if interrupt_id in fold.pending or interrupt_id in fold.answered_ids or _already_asked(fold, started):
            continue
        data: dict[str, Any] = {
            "id": interrupt_id,
            "step": "tools",
            "task": started.task,
            "index": 0,
            "kind": "outcome_unknown",
            "value": {
                "type": "outcome_unknown",
                "tool_call_id": started.task,
                "name": started.name,
                "args": started.args,
                "description": (
                    f"Tool {started.name!r} was about to run or running when the process "
                    "running it stopped, and its result was never saved. It may or may not "
                    "have taken effect. approve: run it again; respond: give its result; "
                    "reject: do not run it."
                ),
                "allowed_decisions": list(OUTCOME_DECISIONS),
            },
            "source": None,
            # the takeover, for the audit trail: whose run died, and who found it dead
            "abandoned": started.run_id,
            "run_id": own_run,
            "worker": worker_name(),
        }
        events.append(Event("interrupt", data))
    return events, None
