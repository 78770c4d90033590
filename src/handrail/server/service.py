"""What the service holds: the served agents, credentials and sessions, threads' assistants, runs.

A thread belongs to the assistant (served agent) it was created for; the service keeps
that, and the metadata a client gave when creating it, in ``handrail_server_threads``.
A thread that a Python program created (it has events but no row here) belongs to the
first agent served; one created without an assistant belongs to none until its first
run names one (:data:`UNBOUND`). A row's assistant changes at most that once, so each
process remembers the rows it read for a few seconds (:data:`ROW_SECONDS`): a request
on a thread seen a moment ago reads no row.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from handrail.agent import Agent
from handrail.server.db import ServerDB
from handrail.server.problems import Problem
from handrail.server.sessions import SessionStore
from handrail.server.tokens import TokenStore

__all__ = ["ROW_SECONDS", "UNBOUND", "Service", "ThreadRow"]

UNBOUND = ""
"""The assistant of a thread created without one: its first run binds it (``bind_thread``)."""

ROW_SECONDS = 5.0
"""How long a process trusts a thread row it read (one deleted elsewhere meanwhile still shows)."""


@dataclass(frozen=True, slots=True)
class ThreadRow:
    """A thread the service created: its assistant, metadata and creation time."""

    thread_id: str
    assistant_id: str
    metadata: dict[str, Any]
    created_at: datetime


@dataclass
class Service:
    """The served agents (by assistant id), the credentials and the service's tables."""

    agents: dict[str, Agent]
    db: ServerDB
    tokens: TokenStore = field(init=False)
    sessions: SessionStore = field(init=False)
    runs: Any = None  # runs.RunRegistry, set by create_app
    live: Any = None  # events.LiveFeed, set by create_app
    worker: Any = None  # handrail.worker.Worker, set by create_app

    def __post_init__(self) -> None:
        if not self.agents:
            raise ValueError("the service needs at least one agent to serve")
        self.tokens = TokenStore(self.db)
        self._rows: OrderedDict[str, tuple[ThreadRow, float]] = OrderedDict()
        self._rows_lock = threading.Lock()  # rows are read on the loop and in worker threads
        self.sessions = SessionStore(self.db, self.tokens)

    def agent(self, assistant_id: str) -> Agent:
        """The agent served as ``assistant_id``; 404 when there is none."""
        agent = self.agents.get(assistant_id)
        if agent is None:
            raise Problem(404, f"no assistant {assistant_id!r}; this service serves {sorted(self.agents)}")
        return agent

    @property
    def default_assistant(self) -> str:
        """The first agent served: owner of threads the service did not create."""
        return next(iter(self.agents))

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
        with self._rows_lock:
            found = self._rows.get(thread_id)
        if found is None or found[1] < time.monotonic():
            return None
        return found[0]

    def _remember(self, row: ThreadRow) -> None:
        with self._rows_lock:
            self._rows.pop(row.thread_id, None)
            self._rows[row.thread_id] = (row, time.monotonic() + ROW_SECONDS)
            if len(self._rows) > 10_000:
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

    def bind_thread(self, thread_id: str, assistant_id: str) -> bool:
        """Give a thread created without an assistant its first run's; False if it has one."""
        changed = self.db.execute(
            "UPDATE handrail_server_threads SET assistant_id = ? WHERE thread_id = ? AND assistant_id = ?",
            (assistant_id, thread_id, UNBOUND),
        )
        with self._rows_lock:
            self._rows.pop(thread_id, None)
        return changed > 0

    def drop_thread(self, thread_id: str) -> bool:
        """Forget the service's row for a thread; whether there was one."""
        with self._rows_lock:
            self._rows.pop(thread_id, None)
        return self.db.execute("DELETE FROM handrail_server_threads WHERE thread_id = ?", (thread_id,)) > 0

    async def owner(self, thread_id: str) -> tuple[str, Agent, ThreadRow | None]:
        """The assistant a thread belongs to, its agent and row; 404 for an unknown thread."""
        row = await self.athread_row(thread_id)
        if row is not None and row.assistant_id != UNBOUND:
            return row.assistant_id, self.agent(row.assistant_id), row
        if row is not None:  # not run yet: the first agent reads it, its first run binds it
            return self.default_assistant, self.agents[self.default_assistant], row
        assistant = self.default_assistant
        agent = self.agents[assistant]
        store = agent.checkpointer
        if store is None or await store.aget_thread(thread_id) is None:
            raise Problem(404, f"no thread {thread_id!r}")
        return assistant, agent, None
