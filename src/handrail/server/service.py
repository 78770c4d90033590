"""What the service holds: the served agents, credentials and sessions, which agent a thread is of.

A thread belongs to one agent, fixed when it is created (SPEC rule 21). Its log says
which: the first input's metadata ``assistant_id`` (the assistant a run of the service
named, or the ``name`` of the agent a Python program ran it with). The service hosts
each agent under its key and under its own name (:func:`~handrail.worker.hosted_names`);
a thread bound to none of those names is not served here: every route answers 404 for
it, as for a thread that does not exist, and no listing shows it. A thread bound to no
agent at all (an unnamed agent's, in a Python program) belongs to the first agent
served.

A thread created with ``threads.create`` and not run yet has no log: the service keeps
its assistant (:data:`UNBOUND` when the client named none: its first run chooses) and
the metadata it was created with in ``handrail_server_threads``; its first run writes
them into the log, which from then on is the only account. A binding read from a log
never changes, so each process remembers it (until the thread is deleted here); runs
read it afresh, so a thread deleted and made again elsewhere is never run by an agent
it is not bound to. Rows are remembered for a few seconds (:data:`ROW_SECONDS`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from handrail.agent import Agent
from handrail.checkpoint.base import BaseCheckpointSaver, ClaimFilter
from handrail.server.access import Access
from handrail.server.db import ServerDB
from handrail.server.problems import Problem
from handrail.server.sessions import SessionStore
from handrail.server.tokens import Credential, TokenStore
from handrail.worker import ASSISTANT_KEY, hosted_names

__all__ = ["BOUND_KEYS", "ROW_SECONDS", "UNBOUND", "Located", "Service", "ThreadRow"]

UNBOUND = ""
"""The assistant of a thread created without one: its first run chooses it."""

BOUND_KEYS = ("assistant_id", "graph_id")
"""The metadata keys that name the agent a thread belongs to: written by its first input only."""

ROW_SECONDS = 5.0
"""How long a process trusts a thread row it read (one deleted elsewhere meanwhile still shows)."""

_KEPT = 10_000  # bindings and rows a process remembers (the least recently used go first)


@dataclass(frozen=True, slots=True)
class ThreadRow:
    """What ``threads.create`` recorded of a thread: its assistant, metadata and creation time.

    Read only while the thread has no log (its first run writes the metadata into it).
    """

    thread_id: str
    assistant_id: str
    metadata: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Located:
    """Where a thread stands for this process (:meth:`Service.locate`).

    ``logged``: the store has its log (and so its binding). ``assistant``: the key of
    the served agent it belongs to, None when it is bound to an agent not served here
    or does not exist. ``row``: the service's row of a thread that has no log yet.
    """

    logged: bool
    assistant: str | None
    row: ThreadRow | None = None


@dataclass
class Service:
    """The served agents (by assistant id), the credentials and the service's tables."""

    agents: dict[str, Agent]
    db: ServerDB
    tokens: TokenStore = field(init=False)
    sessions: SessionStore = field(init=False)
    names: dict[str, str] = field(init=False)
    access: Access = field(init=False)
    runs: Any = None  # runs.RunRegistry, set by create_app
    live: Any = None  # events.LiveFeed, set by create_app
    worker: Any = None  # handrail.worker.Worker, set by create_app
    unbound: bool = True  # whether threads bound to no agent are the first agent's (create_app)
    runs_answers: bool = True  # whether this process runs queued threads (``--concurrency 0``: no)
    outbox: Any = None  # handrail.notify.outbox.Outbox, set by create_app
    deliverer: Any = None  # handrail.notify.deliverer.Deliverer when this process delivers
    public_url: str = ""  # where reviewers reach this service (links in notifications)

    def __post_init__(self) -> None:
        if not self.agents:
            raise ValueError("the service needs at least one agent to serve")
        self.tokens = TokenStore(self.db)
        self.names = hosted_names(self.agents)
        self.access = Access()
        self._rows: OrderedDict[str, tuple[ThreadRow, float]] = OrderedDict()
        self._bound: OrderedDict[str, str | None] = OrderedDict()  # thread -> key, None: not served here
        self._lock = threading.Lock()  # read on the loop and in worker threads
        self.sessions = SessionStore(self.db, self.tokens)

    def agent(self, assistant_id: str) -> Agent:
        """The agent served as ``assistant_id``; 404 when there is none."""
        agent = self.agents.get(assistant_id)
        if agent is None:
            raise Problem(404, f"no assistant {assistant_id!r}; this service serves {sorted(self.agents)}")
        return agent

    def use_agents(self, agents: Mapping[str, Agent]) -> None:
        """Serve ``agents`` from now on in place of the agents served (a policy reload,
        ``cli/_reload.py``): the same keys, each agent with the name and the store of the one it
        replaces. The map is replaced whole, so a lookup finds an old agent or a new one
        (never a mix of the two within one agent); this process's worker hosts them too. A
        request or a run holding an agent keeps it; one that looks its agent up afterwards
        gets the new one.
        """
        if list(agents) != list(self.agents):
            raise ValueError(f"the service serves {list(self.agents)}; got agents {list(agents)}")
        for key, agent in agents.items():
            if agent.checkpointer is not self.agents[key].checkpointer or agent.name != self.agents[key].name:
                raise ValueError(f"agent {key!r} must keep the name and the store it has")
        if self.worker is not None:
            self.worker.use_agents(agents)
        self.agents = dict(agents)

    @property
    def default_assistant(self) -> str:
        """The first agent served: owner of the threads bound to no agent."""
        return next(iter(self.agents))

    @property
    def store(self) -> BaseCheckpointSaver:
        """The first agent's store: where the inbox, searches and the live feed read."""
        store = self.agents[self.default_assistant].checkpointer
        assert store is not None  # create_app refuses an agent without one
        return store

    # Which agent a thread is of -----------------------------------------------------------------
    def key_of(self, name: Any) -> str | None:
        """The key of the served agent hosted as ``name``, or None."""
        return self.names.get(name) if isinstance(name, str) else None

    def owner_of(self, metadata: Mapping[str, Any]) -> str | None:
        """The key of the served agent a thread with this (logged) metadata belongs to, or None."""
        if ASSISTANT_KEY not in metadata:
            return self.default_assistant if self.unbound else None
        return self.key_of(metadata[ASSISTANT_KEY])

    def owners(self, assistant: str | None = None) -> ClaimFilter:
        """The threads this service serves (``owners=`` of the library's listings).

        With ``assistant``, those of that one served agent only.
        """
        names = tuple(n for n, key in self.names.items() if assistant in (None, key))
        return ClaimFilter(
            ASSISTANT_KEY, names, or_missing=self.unbound and assistant in (None, self.default_assistant)
        )

    async def locate(self, thread_id: str, *, fresh: bool = False) -> Located:
        """Where a thread stands; ``fresh``: read its binding from the store, not from memory."""
        if not fresh:
            with self._lock:
                if thread_id in self._bound:
                    self._bound.move_to_end(thread_id)
                    return Located(True, self._bound[thread_id])
        for store in dict.fromkeys(a.checkpointer for a in self.agents.values() if a.checkpointer):
            record = await store.aget_thread(thread_id)
            if record is None:
                continue
            key = self.owner_of(record.metadata)
            if key is not None and self.agents[key].checkpointer is not store:
                key = None  # bound to a name served here, but on another agent's store
            with self._lock:
                self._bound[thread_id] = key
                self._bound.move_to_end(thread_id)
                if len(self._bound) > _KEPT:
                    self._bound.popitem(last=False)
            return Located(True, key)
        row = await self.athread_row(thread_id)
        if row is None:
            return Located(False, None)
        if row.assistant_id == UNBOUND:
            return Located(False, self.default_assistant if self.unbound else None, row)
        return Located(False, row.assistant_id if row.assistant_id in self.agents else None, row)

    async def owner(self, thread_id: str, *, fresh: bool = False) -> tuple[str, Agent, ThreadRow | None]:
        """The assistant a thread belongs to, its agent, and its row if it has no log yet.

        A 404 for a thread that does not exist and for one bound to an agent not served
        here, in the same words.
        """
        found = await self.locate(thread_id, fresh=fresh)
        if found.assistant is None:
            raise Problem(404, f"no thread {thread_id!r} is served here")
        return found.assistant, self.agents[found.assistant], found.row

    async def readable(self, thread_id: str, credential: Credential) -> tuple[str, Agent, ThreadRow | None]:
        """:meth:`owner`, for a caller who may read the thread (``access.py``); a 403 otherwise."""
        assistant, agent, row = await self.owner(thread_id)
        await self.access.check_read(credential, thread_id, agent, row.metadata if row is not None else None)
        return assistant, agent, row

    async def metadata_of(self, thread_id: str, agent: Agent, row: ThreadRow | None) -> dict[str, Any]:
        """The thread's metadata: its log's, or its service row's while it has no log."""
        store = agent.checkpointer
        record = await store.aget_thread(thread_id) if store is not None else None
        if record is not None:
            return dict(record.metadata)
        return dict(row.metadata) if row is not None else {}

    def check_binding(self, thread_id: str, owner: str, sources: Sequence[tuple[str, Any]]) -> list[str]:
        """Refuse a request that names another agent than the thread's own (SPEC rule 21).

        ``sources`` are ``(where, object)`` pairs of the request (its ``metadata``, its
        ``config.metadata`` ...): each :data:`BOUND_KEYS` key one of them has must name
        ``owner`` (its key, or a name it is hosted under), else a 422 that says where.
        Returns the keys named.
        """
        named: list[str] = []
        for where, source in sources:
            if not isinstance(source, Mapping):
                raise Problem(422, f"'{where}' must be an object")
            for key in BOUND_KEYS:
                if key not in source:
                    continue
                value = source[key]
                if self.key_of(value) != owner:
                    shown = repr(value) if len(repr(value)) <= 100 else repr(value)[:97] + "..."
                    raise Problem(
                        422,
                        f"{where} names {key} {shown}, but thread {thread_id!r} belongs to assistant "
                        f"{owner!r}: the agent a thread belongs to is set when it is created and no "
                        f"input changes it; leave {key} out, or name {owner!r}",
                    )
                named.append(key)
        return named

    def forget(self, thread_id: str) -> None:
        """Forget what this process remembers of a thread (it was deleted)."""
        self.access.forget(thread_id)
        with self._lock:
            self._bound.pop(thread_id, None)
            self._rows.pop(thread_id, None)

    # The service's rows ---------------------------------------------------------------------------
    def thread_row(self, thread_id: str) -> ThreadRow | None:
        """The service's row for a thread, if it created it."""
        known = self._remembered(thread_id)
        if known is not None:
            return known
        rows = self.db.query(
            "SELECT thread_id, assistant_id, metadata, created_at FROM handrail_server_threads "
            "WHERE thread_id = ?",
            (thread_id,),
        )
        if not rows:
            return None
        tid, assistant, metadata, created = rows[0]
        row = ThreadRow(
            str(tid), str(assistant), orjson.loads(str(metadata)), datetime.fromtimestamp(float(created), UTC)
        )
        self._remember(row)
        return row

    async def athread_row(self, thread_id: str) -> ThreadRow | None:
        """:meth:`thread_row`, reading the row (when it must) off the event loop."""
        known = self._remembered(thread_id)
        if known is not None:
            return known
        return await asyncio.to_thread(self.thread_row, thread_id)

    def _remembered(self, thread_id: str) -> ThreadRow | None:
        with self._lock:
            found = self._rows.get(thread_id)
        if found is None or found[1] < time.monotonic():
            return None
        return found[0]

    def _remember(self, row: ThreadRow) -> None:
        with self._lock:
            self._rows.pop(row.thread_id, None)
            self._rows[row.thread_id] = (row, time.monotonic() + ROW_SECONDS)
            if len(self._rows) > _KEPT:
                self._rows.popitem(last=False)

    def add_thread(self, thread_id: str, assistant_id: str, metadata: dict[str, Any]) -> bool:
        """Record a new thread; False when one with this id exists already."""
        now = time.time()
        changed = self.db.execute(
            "INSERT INTO handrail_server_threads (thread_id, assistant_id, metadata, created_at) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (thread_id) DO NOTHING",
            (thread_id, assistant_id, orjson.dumps(metadata).decode(), now),
        )
        if changed > 0:
            self._remember(
                ThreadRow(thread_id, assistant_id, dict(metadata), datetime.fromtimestamp(now, UTC))
            )
        return changed > 0

    def drop_thread(self, thread_id: str) -> bool:
        """Forget the service's row for a thread (and its binding here); whether there was a row."""
        self.forget(thread_id)
        return self.db.execute("DELETE FROM handrail_server_threads WHERE thread_id = ?", (thread_id,)) > 0
