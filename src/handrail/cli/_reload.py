"""Reloading the review policy of ``handrail serve --policy`` and ``handrail worker --policy``
on SIGHUP (SPEC §5.4).

The process keeps its agents as their code made them (on the store its flags name). On
SIGHUP it reads the policy file again and checks it against those agents; when the file
is good, the agents built from them with the file's policy replace the ones in use, all
at once: one assignment made on the event loop, so a request or a run holds the old
agent or the new one, whole, and a run started afterwards is run by the new one. A file
that is bad or cannot be read changes nothing: the policy in force stays (a bad file
never means "no review") and the process goes on; the console says why, in one line.
A pending review keeps the terms it was asked under (the runtime records them with it).

Example (``handrail serve`` does this; ``handrail worker`` swaps its worker's agents)::

    reloading = PolicyReload(Path("handrail.toml"), code_agents, console, service.use_agents)
    reloading.install(asyncio.get_running_loop())      # kill -HUP <pid> reloads the file
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console
from rich.markup import escape

from handrail.agent import Agent
from handrail.notify.config import notify_settings
from handrail.review.policy_file import PolicyFileError, load_policy_file

__all__ = ["PolicyReload", "with_policy"]


def with_policy(path: Path, agents: Mapping[str, Agent]) -> dict[str, Agent]:
    """``agents`` (name -> agent as its code made it) with the review policy ``path`` gives
    each agent it names; the others as they are.

    Raises :class:`~handrail.review.policy_file.PolicyFileError` (file, line and key) when
    the file is bad, or names an agent or a tool that is not among ``agents``.
    """
    policies = load_policy_file(path)
    policies.check({name: list(agent.tools) for name, agent in agents.items()})
    built = {
        name: agent.with_policy_file(path, name=name) if name in policies.agents else agent
        for name, agent in agents.items()
    }
    # with_policy_file reads the file again: what it built must be what was checked here
    if load_policy_file(path).agents != policies.agents:
        raise PolicyFileError(path, None, None, "changed while it was being loaded; load it again")
    return built


class PolicyReload:
    """Reload the policy file ``path`` into the agents in use on SIGHUP (see the module).

    ``agents``: the agents as their code made them, kept for every reload. ``swap``: puts
    the reloaded agents in use (``Service.use_agents``, ``Worker.use_agents``). ``path``
    None (no ``--policy``): a SIGHUP only says there is nothing to reload.
    """

    def __init__(
        self,
        path: Path | None,
        agents: Mapping[str, Agent],
        console: Console,
        swap: Callable[[dict[str, Agent]], None],
        *,
        notify: Any = None,
    ) -> None:
        self.path = path
        self.agents = dict(agents)
        self.console = console
        self.swap = swap
        self.notify = notify  # the Service whose notification endpoints the file's [notifications] sets
        self._early = False  # a SIGHUP came before the event loop handled them
        self._tasks: set[asyncio.Task[None]] = set()

    def arm(self) -> None:
        """Keep a SIGHUP that comes before :meth:`install` for the loop, rather than let it
        end the process (its default). Signals reach the main thread only: elsewhere, nothing."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGHUP, self._remember)

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Handle SIGHUP on ``loop`` (the process's running loop) from now on: a reload runs
        there, between the steps of requests and runs, never inside one. A loop outside the
        main thread gets no signals: there, nothing."""
        if threading.current_thread() is not threading.main_thread():
            return
        loop.add_signal_handler(signal.SIGHUP, self.reload)
        if self._early:
            self._early = False
            loop.call_soon(self.reload)

    def _remember(self, signum: int, frame: FrameType | None) -> None:
        self._early = True

    def reload(self) -> bool:
        """Read and check the file again; put it in use if it is good. Whether it was."""
        if self.path is None:
            self._say("SIGHUP: no policy file to reload (started without --policy); nothing changed")
            return False
        try:
            agents = with_policy(self.path, self.agents)
            settings = notify_settings(load_policy_file(self.path)) if self.notify is not None else None
            self.swap(agents)
            if self.notify is not None:
                self._notifications(settings)
        except Exception as exc:  # a bad or unreadable file (or anything else): keep what is in force
            said = (
                str(exc) if isinstance(exc, PolicyFileError) else f"{self.path}: {type(exc).__name__}: {exc}"
            )
            self._say(f"SIGHUP: review policy not reloaded, the one in force stays: {said}")
            return False
        self._say(
            f"SIGHUP: review policy reloaded from {self.path}: runs started from now on are reviewed "
            "under it; pending reviews keep the policy they were asked under"
        )
        return True

    def _notifications(self, settings: Any) -> None:
        """Put the file's endpoints in use (on the loop, soon after); a file without
        [notifications] removes the file's endpoints."""
        from handrail.notify.config import NotifySettings, apply_settings

        service = self.notify

        async def apply() -> None:
            start = await service.live.store.afeed_end() if service.live is not None else None
            await asyncio.to_thread(
                apply_settings, service.outbox, settings or NotifySettings(), start, service.db
            )

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(apply())
            return
        task = loop.create_task(apply())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _say(self, line: str) -> None:
        self.console.print(escape(" ".join(line.split())), soft_wrap=True)
