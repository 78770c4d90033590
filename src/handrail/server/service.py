"""What the service holds: the served agents, credentials and sessions, threads' assistants, runs.

A thread belongs to the assistant (served agent) it was created for; the service keeps
that, and the metadata a client gave when creating it, in ``handrail_server_threads``.
A thread that a Python program created (it has events but no row here) belongs to the
first agent served.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from handrail.agent import Agent
from handrail.server.db import ServerDB
from handrail.server.problems import Problem
from handrail.server.sessions import SessionStore
from handrail.server.tokens import TokenStore

__all__ = ["Service", "ThreadRow"]


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
    events: Any = None  # events.EventLog
    runs: Any = None  # runs.RunRegistry, set by create_app

    def __post_init__(self) -> None:
        if not self.agents:
            raise ValueError("the service needs at least one agent to serve")
        from handrail.server.events import EventLog

        self.tokens = TokenStore(self.db)
        self.sessions = SessionStore(self.db, self.tokens)
        self.events = EventLog(self.db)

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
        rows = self.db.query(
            "SELECT thread_id, assistant_id, metadata, created_at FROM handrail_server_threads "
            "WHERE thread_id = ?",
            (thread_id,),
        )
        if not rows:
            return None
        tid, assistant, metadata, created = rows[0]
        return ThreadRow(
            str(tid), str(assistant), orjson.loads(str(metadata)), datetime.fromtimestamp(float(created), UTC)
        )

    def add_thread(self, thread_id: str, assistant_id: str, metadata: dict[str, Any]) -> bool:
        """Record a new thread; False when one with this id exists already."""
        changed = self.db.execute(
            "INSERT INTO handrail_server_threads (thread_id, assistant_id, metadata, created_at) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (thread_id) DO NOTHING",
            (thread_id, assistant_id, orjson.dumps(metadata).decode(), time.time()),
        )
        return changed > 0

    def drop_thread(self, thread_id: str) -> bool:
        """Forget the service's row for a thread; whether there was one."""
        return self.db.execute("DELETE FROM handrail_server_threads WHERE thread_id = ?", (thread_id,)) > 0

    async def owner(self, thread_id: str) -> tuple[str, Agent, ThreadRow | None]:
        """The assistant a thread belongs to, its agent and row; 404 for an unknown thread."""
        row = self.thread_row(thread_id)
        if row is not None:
            return row.assistant_id, self.agent(row.assistant_id), row
        assistant = self.default_assistant
        agent = self.agents[assistant]
        store = agent.checkpointer
        if store is None or await store.aget_thread(thread_id) is None:
            raise Problem(404, f"no thread {thread_id!r}")
        return assistant, agent, None
