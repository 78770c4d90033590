"""What the service holds, and where it asks which agent a thread is of and whether it is busy.

The store is the only account of a thread: this module reads it and keeps no table of
threads of its own. Its rules, for every route, the web pages, the live feed and the
service's worker:

Rule S1 - A thread is in the store from its creation. ``threads.create`` (and a run that
    makes its thread, ``if_not_exists="create"`` or stateless) writes a thread record
    with no events (head 0, an append of no event after event 0): the metadata it was
    created with and, when the client named one, its assistant (metadata
    ``assistant_id``). The thread's first run appends after event 0 and so replaces that
    record, writing the same binding. Two ``threads.create`` of one id at the same
    instant through two processes both succeed, the later one's metadata kept (the
    store's append at event 0 overwrites a thread still at event 0); a logged thread is
    never overwritten (the append conflicts: a 409).
Rule S2 - A thread belongs to one agent, fixed when it is created (SPEC rule 21). Its record
    says which: metadata ``assistant_id`` (the assistant a service created or ran it as,
    or the ``name`` of the agent a Python program ran it with). The service hosts each
    agent under its key and under its own name (:func:`~handrail.worker.hosted_names`);
    a thread bound to none of those names, or kept in another agent's store, is not
    served here: every route answers 404 for it, as for a thread that does not exist,
    and no listing shows it. A thread with a log bound to no agent (an unnamed agent's,
    in a Python program) belongs to the first agent served. A thread created with no
    assistant and not run yet is *unbound*: it is kept in the first agent's store, is
    the first agent's until then, and its first run chooses (as LangGraph's server
    does). The worker reads the same record (``handrail.worker`` rule W3): the two agree.
Rule S3 - What a process remembers. A binding that no longer changes - a thread with a
    log, or one created for a named assistant - is remembered (until the thread is
    deleted here): read again it would be the same. Runs read it afresh, so a thread
    deleted and made again elsewhere is never run by an agent it is not bound to.
    Nothing that can change elsewhere is remembered: an unbound thread's binding, any
    thread's metadata and status are read from the store when asked.
Rule S4 - Busy is the store's. A thread is ``busy`` while a run of it is alive in the
    store (``runs_alive``: the claim a run's first append makes, which lapses when its
    process dies), whichever process runs it - a run of ``runs.*``, or a worker's - or
    while this process starts one (before its first append). Every process serving the
    store answers the same. A run is refused with a 409 on a busy thread. Two runs
    started at once on an idle thread through two processes both append their input
    after the same event: the store takes one (SPEC rule 8), the other's run stops with
    a ``ConflictError`` and saves nothing, and its request is a 409 too.
Rule S5 - One read per request. A request reads the thread's record once
    (:meth:`Service.locate`) and hands it on: the access checks (``_access.py``), the
    binding checks and the run's metadata use it; the gate's checks stay in the runtime.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from handrail.agent import Agent
from handrail.checkpoint.base import Append, BaseCheckpointSaver, ClaimFilter, ThreadRecord
from handrail.errors import ConflictError
from handrail.messages import new_id
from handrail.server._access import Access
from handrail.server._problems import Problem
from handrail.server.db import ServerDB
from handrail.server.sessions import SessionStore
from handrail.server.tokens import Credential, TokenStore
from handrail.worker import ASSISTANT_KEY, hosted_names

__all__ = ["BOUND_KEYS", "Located", "Service"]

BOUND_KEYS = ("assistant_id", "graph_id")
"""The metadata keys that name the agent a thread belongs to: written by its first input only."""

_KEPT = 10_000  # bindings a process remembers (the least recently used go first)


@dataclass(frozen=True, slots=True)
class Located:
    """Where a thread stands (:meth:`Service.locate`).

    ``found``: a store has it. ``assistant``: the key of the served agent it belongs to;
    None when it does not exist or is not served here (rule S2). ``record``: its record
    as the store gave it for this request (None when the binding was remembered, rule
    S3). ``unbound``: created with no assistant and not run yet: its first run chooses.
    """

    found: bool
    assistant: str | None
    record: ThreadRecord | None = None
    unbound: bool = False


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
        """Where a thread stands, read from the stores (rules S2, S3); ``fresh``: read its
        binding from the store even when this process remembers it."""
        if not fresh:
            with self._lock:
                if thread_id in self._bound:
                    self._bound.move_to_end(thread_id)
                    return Located(True, self._bound[thread_id])
        for store in self.stores():
            record = await store.aget_thread(thread_id)
            if record is None:
                continue
            unbound = record.head_seq == 0 and ASSISTANT_KEY not in record.metadata
            key = self.owner_of(record.metadata)
            if key is not None and self.agents[key].checkpointer is not store:
                key = None  # bound to a name served here, but on another agent's store
            if not unbound:  # a binding that no longer changes (rule S3)
                with self._lock:
                    self._bound[thread_id] = key
                    self._bound.move_to_end(thread_id)
                    if len(self._bound) > _KEPT:
                        self._bound.popitem(last=False)
            return Located(True, key, record, unbound)
        return Located(False, None)

    def stores(self) -> list[BaseCheckpointSaver]:
        """The stores of the agents served, each once, the first agent's first."""
        return list(dict.fromkeys(a.checkpointer for a in self.agents.values() if a.checkpointer))

    async def owner(self, thread_id: str, *, fresh: bool = False) -> tuple[str, Agent, ThreadRecord | None]:
        """The assistant a thread belongs to, its agent, and its record when it was read
        (None: the binding was remembered; :meth:`record_of` reads it).

        A 404 for a thread that does not exist and for one bound to an agent not served
        here, in the same words.
        """
        found = await self.locate(thread_id, fresh=fresh)
        if found.assistant is None:
            raise Problem(404, f"no thread {thread_id!r} is served here")
        return found.assistant, self.agents[found.assistant], found.record

    async def readable(
        self, thread_id: str, credential: Credential
    ) -> tuple[str, Agent, ThreadRecord | None]:
        """:meth:`owner`, for a caller who may read the thread (``_access.py``); a 403 otherwise."""
        assistant, agent, record = await self.owner(thread_id)
        await self.access.check_read(credential, thread_id, agent, record)
        return assistant, agent, record

    async def record_of(
        self, thread_id: str, agent: Agent, record: ThreadRecord | None
    ) -> ThreadRecord | None:
        """The thread's record: ``record`` when the request read it already, else the store's."""
        if record is not None:
            return record
        store = agent.checkpointer
        return await store.aget_thread(thread_id) if store is not None else None

    async def metadata_of(self, thread_id: str, agent: Agent, record: ThreadRecord | None) -> dict[str, Any]:
        """The thread's metadata (``record``'s when the request read it already)."""
        found = await self.record_of(thread_id, agent, record)
        return dict(found.metadata) if found is not None else {}

    async def busy(self, thread_id: str, agent: Agent, record: ThreadRecord | None) -> bool:
        """Whether a run is on the thread (rule S4): one this process starts, or one alive in
        the store. An idle record has no live run (a run's claim rides on an append that
        leaves the thread running), so only the others are asked about."""
        if thread_id in getattr(self.runs, "active", ()):
            return True
        if record is None or record.status == "idle" or agent.checkpointer is None:
            return False
        return bool(await agent.checkpointer.aruns_alive(thread_id))

    async def create_thread(
        self,
        thread_id: str,
        assistant: str | None,
        metadata: Mapping[str, Any],
        *,
        created_at: float | None = None,
    ) -> ThreadRecord | None:
        """Make a thread in the store, without events (rule S1): for ``assistant`` (its key;
        its ``assistant_id``), or, with None, bound as ``metadata`` says (unbound when it
        names none). Returns its record; None when a logged thread has this id."""
        store = self.agents.get(assistant or "", self.agents[self.default_assistant]).checkpointer
        assert store is not None  # create_app refuses an agent without one
        now = time.time()
        kept = dict(metadata)
        if assistant is not None:
            kept[ASSISTANT_KEY] = assistant
        created = now if created_at is None else created_at
        record = ThreadRecord(thread_id, 0, "idle", new_id(), created, now, kept)
        try:
            await store.aappend(thread_id, Append((), expected_seq=0, record=record))
        except ConflictError:
            return None
        self.forget(thread_id)
        return record

    async def move_thread_rows(self) -> int:
        """Move the threads an older service kept in a table of its own (created and not run,
        ``handrail_server_threads``) into the store, and drop the table: once, at start-up
        (rule S1). A row of a thread the store has already is dropped (its log is its
        account). Returns how many threads were moved."""
        rows = await asyncio.to_thread(self.db.old_thread_rows)
        if rows is None:
            return 0
        moved = 0
        for thread_id, assistant, metadata, created in rows:
            if (await self.locate(str(thread_id), fresh=True)).found:
                continue
            kept = orjson.loads(str(metadata))
            if assistant and assistant not in self.agents:  # an agent no longer served here
                kept = {**kept, ASSISTANT_KEY: str(assistant)}
            named = str(assistant) if assistant in self.agents else None
            if await self.create_thread(str(thread_id), named, kept, created_at=float(created)) is not None:
                moved += 1
        await asyncio.to_thread(self.db.drop_old_threads)
        return moved

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
