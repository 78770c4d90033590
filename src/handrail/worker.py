"""Workers: the processes that run what reviewers decided.

An answer recorded without running it (``agent.decide``, the service's answer
endpoint, the review CLI, the web inbox) leaves its thread *queued* in the store, in
the same transaction as the answer (``checkpoint/base.py``). A worker hosts agents and
runs their queued threads:

Rule W1 - exactly one run per queued thread. A worker takes a thread with the store's
    ``claim_queued``, which drops the queued row and claims a run on the thread in one
    transaction, skipping threads with a live run (PostgreSQL: ``FOR UPDATE SKIP
    LOCKED``; SQLite: under its write lock). Two workers never run one thread at once,
    and the store's rule 8 stands behind them anyway.
Rule W2 - a dead worker's runs are taken over. A claim made by a process that died
    (killed, its host gone) is no longer alive, and ``claim_queued`` hands its thread to
    the next worker like a queued one; the run then finds the tool calls the dead run
    left unfinished and raises them as ``outcome_unknown`` reviews (SPEC rule 9): nothing
    is run twice silently.
Rule W3 - a worker takes only its own agents' threads. A thread is bound to its agent
    by its first input (metadata ``assistant_id``: the assistant a service ran it as,
    or the ``name`` of the agent a Python program ran it with; SPEC rule 21), or, made
    by the service's ``threads.create``, by the record that made it (the same key: the
    service reads the same record, ``server/_service.py`` rule S2). A worker
    hosts each agent under its key and under its ``name`` (unless another agent's key
    is that name: :func:`hosted_names`), takes the threads bound to those names, and
    its first agent also those bound to none (an unnamed agent's).
Rule W4 - a failed run is not retried by the worker (a model that is down would be
    called forever). The thread keeps what the run saved and says why it stopped (a
    ``failed`` event in its audit trail, ``run.finished`` with ``"status": "error"`` in
    the feed); ``invoke(None, config)`` (or a ``runs.create`` through the service) runs
    it again from there.
Rule W5 - workers wake when a thread is queued (PostgreSQL ``LISTEN``; the process's
    own stores at once) and look every ``poll`` seconds anyway, for other processes'
    queues on SQLite and for the runs of dead processes.

Example (``handrail worker app.agents:agent --postgres DSN`` does this)::

    import asyncio
    from handrail.worker import Worker

    asyncio.run(Worker({"agent": agent}).run())
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from handrail.agent import Agent
from handrail.checkpoint.base import BaseCheckpointSaver, ClaimFilter
from handrail.errors import ConfigurationError
from handrail.messages import new_id
from handrail.runtime.loop import RunResult

__all__ = ["ASSISTANT_KEY", "Worker", "hosted_names"]

log = logging.getLogger("handrail.worker")

ASSISTANT_KEY = "assistant_id"
"""The thread metadata key that names the agent (assistant) a thread belongs to (rule W3)."""


def hosted_names(agents: Mapping[str, Agent]) -> dict[str, str]:
    """Every name a thread of ``agents`` may be bound to, and the key of its agent.

    Each agent is hosted under its key and under its own ``name`` (the one a Python
    program's threads of it are bound to), unless that name is another agent's key or
    an earlier agent's name.

    Example::

        hosted_names({"billing": support_agent})   # {"billing": "billing", "support": "billing"}
    """
    names = {key: key for key in agents}
    for key, agent in agents.items():
        if agent.name:
            names.setdefault(agent.name, key)
    return names


class _Group:
    """The agents a worker hosts on one store, and which threads of it they take."""

    def __init__(
        self, store: BaseCheckpointSaver, agents: dict[str, Agent], names: dict[str, str], default: str | None
    ) -> None:
        self.store = store
        self.agents = agents
        self.default = default
        self.names = {name: key for name, key in names.items() if key in agents}
        self.filter = ClaimFilter(ASSISTANT_KEY, tuple(self.names), or_missing=default is not None)
        keys = set(self.names.values()) | ({default} if default is not None else set())
        self.only = next(iter(keys)) if len(keys) == 1 else None  # the one agent the filter takes

    async def agent_for(self, thread_id: str) -> Agent | None:
        """The agent that runs ``thread_id``, a thread this group's filter claimed.

        With one agent behind every name the filter takes (the usual worker), the claim
        said it already: no read of the thread's record, one round trip less before the
        run (its own read of the thread comes next).
        """
        if self.only is not None:
            return self.agents[self.only]
        record = await self.store.aget_thread(thread_id)
        if record is None:
            return None
        if ASSISTANT_KEY not in record.metadata:
            return None if self.default is None else self.agents[self.default]
        name = record.metadata[ASSISTANT_KEY]
        key = self.names.get(name) if isinstance(name, str) else None
        return None if key is None else self.agents[key]


class Worker:
    """Run the queued threads of the agents it hosts (see the rules above).

    ``agents`` maps assistant names to agents (each with a checkpointer; agents may
    share one); each also takes the threads bound to its own ``name``, and the first
    one the threads bound to no agent (rule W3).
    ``concurrency`` bounds the runs going at once; ``poll`` is how often (seconds) it
    looks for work nobody woke it for; ``on_finished`` (and each callable added to
    ``worker.finished``) is called with the thread id after each run it made ends,
    however it ended (on the worker's event loop).
    ``unbound=False``: take no thread bound to no agent (a host of agents that are not
    the application's own, as the MCP gateway's).

    Example::

        worker = Worker({"sql": agent}, concurrency=4)
        task = asyncio.create_task(worker.run())
        ...
        await worker.stop()      # stop taking work, let the runs going finish
    """

    def __init__(
        self,
        agents: Mapping[str, Agent],
        *,
        concurrency: int = 8,
        poll: float = 1.0,
        on_finished: Callable[[str], None] | None = None,
        unbound: bool = True,
    ) -> None:
        if not agents:
            raise ConfigurationError("a worker needs at least one agent to host")
        if concurrency < 1:
            raise ConfigurationError(f"concurrency must be at least 1, got {concurrency!r}")
        if not poll > 0:
            raise ConfigurationError(f"poll must be a number of seconds above 0, got {poll!r}")
        groups: dict[int, tuple[BaseCheckpointSaver, dict[str, Agent]]] = {}
        for name, agent in agents.items():
            store = agent.checkpointer
            if store is None:
                raise ConfigurationError(f"agent {name!r} has no checkpointer: a worker runs stored threads")
            groups.setdefault(id(store), (store, {}))[1][name] = agent
        first = next(iter(agents))
        names = hosted_names(agents)
        self._groups = [
            _Group(store, members, names, first if unbound and first in members else None)
            for store, members in groups.values()
        ]
        self.concurrency = concurrency
        self.poll = float(poll)
        self._running: dict[str, asyncio.Task[None]] = {}  # thread id -> its run
        self._wake: asyncio.Event | None = None
        self._stopping = False
        self._full = False  # the last look stopped at the concurrency limit: there may be more
        self.ran = 0  # runs finished (for logs and tests)
        self.finished: list[Callable[[str], None]] = [on_finished] if on_finished is not None else []

    def use_agents(self, agents: Mapping[str, Agent]) -> None:
        """Host ``agents`` from now on in place of the agents it hosts (a policy reload,
        ``cli/_reload.py``): the same keys, each agent with the name and the store of the
        one it replaces. A run going keeps its agent; a thread taken from now on is run by
        the new one.
        """
        hosted = {key: agent for group in self._groups for key, agent in group.agents.items()}
        if set(agents) != set(hosted):
            raise ConfigurationError(f"a worker hosts {sorted(hosted)}; got agents {sorted(agents)}")
        for key, agent in agents.items():
            if agent.checkpointer is not hosted[key].checkpointer or agent.name != hosted[key].name:
                raise ConfigurationError(f"agent {key!r} must keep the name and the store it has")
        for group in self._groups:
            group.agents = {key: agents[key] for key in group.agents}

    def running(self, thread_id: str) -> bool:
        """Whether this worker is running a run of ``thread_id`` now."""
        return any(key.startswith(thread_id + "\x00") for key in self._running)

    def wake(self) -> None:
        """Look for queued threads now (call it from the worker's event loop)."""
        if self._wake is not None:
            self._wake.set()

    async def run(self) -> None:
        """Take and run queued threads until :meth:`stop`."""
        self._wake = asyncio.Event()
        self._stopping = False
        waiters = [asyncio.create_task(self._listen(group)) for group in self._groups]
        try:
            while not self._stopping:
                await self._take_all()
                try:
                    async with asyncio.timeout(self.poll):  # not wait_for: it can drop a cancel on 3.11
                        await self._wake.wait()
                except TimeoutError:
                    pass
                self._wake.clear()
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

    async def stop(self, *, timeout: float = 30.0) -> None:
        """Stop taking threads; wait up to ``timeout`` seconds for the runs going to end.

        A run still going after that is cancelled; its thread is left to another worker
        as the run of a dead process would be, once this process is gone (rule W2).
        """
        self._stopping = True
        self.wake()
        running = list(self._running.values())
        if running:
            _, late = await asyncio.wait(running, timeout=timeout)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    async def run_thread(self, thread_id: str) -> RunResult | None:
        """Take ``thread_id`` now if it is queued here and run it in this task; its result.

        None when another worker has it (or it is not queued, or not this worker's).
        """
        for group in self._groups:
            run_id = new_id("run-")
            if await group.store.aclaim_queued(run_id, filter=group.filter, thread_id=thread_id) is None:
                continue
            agent = await group.agent_for(thread_id)
            if agent is None:  # pragma: no cover - the filter chose it for one of ours
                await group.store.arelease_run(thread_id, run_id)
                return None
            try:
                return await agent.arun_claimed(thread_id, run_id)
            finally:
                self._finished(thread_id)
        return None

    async def _take_all(self) -> None:
        """Claim queued threads while there is room, starting a run for each."""
        progress = True
        self._full = False
        while progress and not self._stopping:
            if len(self._running) >= self.concurrency:
                self._full = True
                return
            progress = False
            for group in self._groups:
                if len(self._running) >= self.concurrency:
                    self._full = True
                    return
                run_id = new_id("run-")
                try:
                    thread_id = await group.store.aclaim_queued(run_id, filter=group.filter)
                except Exception:
                    log.exception("could not claim a queued thread")
                    continue
                if thread_id is None:
                    continue
                progress = True
                task = asyncio.create_task(self._run_one(group, thread_id, run_id))
                self._running[f"{thread_id}\x00{run_id}"] = task

    async def _run_one(self, group: _Group, thread_id: str, run_id: str) -> None:
        try:
            agent = await group.agent_for(thread_id)
            if agent is None:
                await group.store.arelease_run(thread_id, run_id)
                return
            await agent.arun_claimed(thread_id, run_id)
        except asyncio.CancelledError:
            raise
        except Exception:  # rule W4: its thread says why; the worker goes on
            log.exception("the run of thread %r stopped with an error", thread_id)
        finally:
            self._finished(thread_id)
            self._running.pop(f"{thread_id}\x00{run_id}", None)
            if self._full:
                self.wake()  # room for one of those left waiting

    def _finished(self, thread_id: str) -> None:
        self.ran += 1
        for listener in self.finished:
            try:
                listener(thread_id)
            except Exception:
                log.exception("a listener of finished runs failed for thread %r", thread_id)

    async def _listen(self, group: _Group) -> None:
        """Wake the loop whenever the store says a thread may have been queued."""
        while True:
            try:
                await group.store.await_queued(max(self.poll, 1.0) * 5)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("waiting for queued threads failed; polling instead", exc_info=True)
                await asyncio.sleep(self.poll)
            self.wake()
