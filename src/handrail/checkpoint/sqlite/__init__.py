"""SqliteSaver: the store protocol in one SQLite file, the embedded default.

Theory of operation
-------------------
The file holds a versioned schema (table ``handrail_schema_version``;
:meth:`SqliteSaver.setup` applies :meth:`SqliteSaver.schema_migrations` in order,
idempotently, under SQLite's write lock so that many processes may open a new file at
once). Every table and index is named ``handrail_*``, so the file may be an
application's own: handrail adds its tables and touches nothing else, refuses objects
under its names that it did not make, and renames the tables of a file written before
the prefix (``_adopt_plain_names``). A damaged file raises
:class:`~handrail.errors.SerializationError` naming it. The tables (without the prefix):

``events``         the logs: ``(thread_id, seq)`` is the primary key, ``payload`` the
                   serialised event (JSON, never pickle).
``threads``        one row per thread: head, status, epoch, times, metadata (JSON), and
                   the head hash and seal that bind it to its log (``checkpoint/seals.py``).
``pending``        one row per pending review (sealed too), indexed for the inbox: by
                   ``(created_at, thread_id, interrupt_id)`` for keyset paging and by
                   ``kind``; ``pending_tools`` indexes the tool names of each review.
``readings``       each thread's saved reading (its state at an event).
``runs``,          which runs are alive (SPEC rule 9), see below; a ``runs`` row with
``run_owners``     the run id ``queued`` and no owner is a thread answered for a worker.
``feed``           the notices the review service reads (reviews asked and answered,
                   runs ended), written with the appends they tell of (``_feed``).
``deletions``      what each deletion of a thread left: who, when, the number and hash
                   of its log's last record, its metadata (``_deletions``).
``grants``         one row per grant (SPEC rule 16): added by an append, in its
                   transaction; spent, each use atomically; revoked; kept when its thread
                   is deleted (``_grants``).

The file is opened in WAL mode, so readers never wait for the writer. An append is
one ``BEGIN IMMEDIATE`` transaction that reads the thread's head and epoch, refuses a
stale ``expected_seq`` (or, past event 0, another epoch: the thread was deleted and
created again) with :class:`~handrail.errors.ConflictError`, and writes the events, the
thread row, its pending reviews and the append's run ``claim``/``release``;
``BEGIN IMMEDIATE`` takes the write lock first, so two writers cannot both see the
same head. The saver keeps a small pool of connections, one per concurrent caller, so
it is safe to share between Python threads; after a fork the child opens its own
connections.

Durability: ``synchronous``
---------------------------
Every append, claim and release is one transaction, and its commit is most of its
cost. With ``synchronous="FULL"`` (the default) a durable commit waits for an fsync of
the WAL: once it returns, the events survive a crash of the process, of the operating
system and a power cut. The runtime asks for that where its promises rest on it: the
commit that records the tool calls a step is about to run (so after any crash a tool
never runs twice without a review: its result is reported as unknown instead), and
the run's last commit (a pause or a final answer is never lost once ``invoke``
returns). The commits in between - a finished tool's result, the state before a
model call - are appended with ``durable=False`` and made with ``synchronous=NORMAL``:
committed and visible to every process, kept if the process dies, but synced to disk
only by the next durable commit (in WAL mode the log is written in order, so one
fsync covers every frame before it). A power cut between the two rolls the thread
back to the last durable commit, where the calls that had begun come back as
``outcome_unknown`` reviews.

``synchronous="NORMAL"`` makes every commit skip the fsync (SQLite syncs the WAL at
checkpoints instead): commits are several times cheaper (on the benchmark machine's
disk an append takes about 0.05 ms instead of 0.3 ms), the file is never corrupted,
and nothing is lost when the *process* crashes or is killed; but a crash of the
operating system or a power cut may roll back the last commits. The thread then comes
back as it was a few commits earlier: a review answered just before the crash is
pending again, and if its tools had already run, approving it again runs them a
second time. Use ``"NORMAL"`` where that is acceptable (development, tests, workers
whose disk does not outlive the machine, tools that are safe to repeat); keep
``"FULL"`` where a tool must never run twice.

Where things are
----------------
``_schema``        the file: the tables, migrations, older files, damage.
``_connections``   options, the connection pool, transactions, opening and closing.
``_writes``        the write path: appends, group commit, the rows a saver remembers,
                   pruning.
``_rows``          the rows an append writes beside the events, sealed (``checkpoint/seals.py``).
``_deletions``     deleting a thread, and the record it leaves (SPEC rule 21).
``_grants``        grants: spent, listed, revoked (their rows and checks, shared with
                   the PostgreSQL saver: ``_grant_rows``).
``_repair``        a thread's derived rows rebuilt from its log (``repair_thread``).
``_reads``         reads: a thread, the thread list, the inbox.
``_runs``          run liveness (SPEC rule 9): claims, leases, live runs.
``_feed``          the feed of notices and the queue of answered threads.
This module        :class:`SqliteSaver` and :class:`AsyncSqliteSaver`, thin facades.

Example::

    from handrail import SqliteSaver, create_agent

    with SqliteSaver.from_conn_string("threads.db") as saver:
        agent = create_agent(model, tools, middleware=[...], checkpointer=saver)
        agent.invoke({"messages": ["hi"]}, {"configurable": {"thread_id": "t1"}})
"""

from __future__ import annotations

import os
import sqlite3
from types import TracebackType
from typing import Any

from handrail.checkpoint.sqlite._connections import Synchronous
from handrail.checkpoint.sqlite._deletions import _Deletions
from handrail.checkpoint.sqlite._grants import _Grants
from handrail.checkpoint.sqlite._reads import _Reads
from handrail.checkpoint.sqlite._repair import _Repairs

__all__ = ["AsyncSqliteSaver", "SqliteSaver"]


class _SqliteStore(_Grants, _Repairs, _Deletions, _Reads):
    """What SqliteSaver and AsyncSqliteSaver share: everything but setup and closing."""

    def __init__(
        self,
        conn: str | os.PathLike[str] | sqlite3.Connection,
        *,
        lease_seconds: float = 30.0,
        timeout: float = 30.0,
        synchronous: Synchronous = "FULL",
    ) -> None:
        super().__init__(conn, lease_seconds=lease_seconds, timeout=timeout, synchronous=synchronous)
        self._migrate()


class SqliteSaver(_SqliteStore):
    """Keeps threads in one SQLite file; safe to share between threads and processes.

    ``conn`` is a path (the file is created when missing), ``":memory:"``, or an open
    ``sqlite3.Connection`` (used as the only connection, behind a lock). The schema is
    created or migrated when the saver opens.

    Options: ``lease_seconds`` - how long a claimed run stays alive without its
    process renewing it (rule 9; on one host a dead process is also seen at once);
    ``timeout`` - how long to wait for another writer's lock; ``synchronous`` -
    ``"FULL"`` (the default: every commit survives a power cut) or ``"NORMAL"``
    (commits several times cheaper; they survive a crash of the process, not of the
    machine). See "Durability" in the module's documentation.

    Example::

        saver = SqliteSaver("threads.db")
        agent = create_agent(model, tools, middleware=[...], checkpointer=saver)
        ...
        saver.close()
    """

    @classmethod
    def from_conn_string(cls, conn_string: str | os.PathLike[str], **options: Any) -> SqliteSaver:
        """Open a saver on a file path; also a context manager that closes it.

        Example::

            with SqliteSaver.from_conn_string("threads.db") as saver:
                ...
        """
        return cls(conn_string, **options)

    def __enter__(self) -> SqliteSaver:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def setup(self) -> None:
        """Create or migrate the schema; idempotent and safe from many processes at once.

        The saver does this when it opens. Migrations newer than the version stored in
        ``handrail_schema_version`` run in order (a migration's Python step, if any, after
        its statements), all in one transaction under the write lock. A database written
        by a newer handrail (a version this one does not know) raises ConfigurationError;
        a damaged file, or tables under handrail's names that handrail did not make, raise
        the errors described in the module's documentation.
        """
        self._migrate()


class AsyncSqliteSaver(_SqliteStore):
    """:class:`SqliteSaver` for asyncio code: the async twins run in worker threads.

    SQLite has no asynchronous interface (aiosqlite, too, runs each connection in a
    thread), so this saver performs each operation in a worker thread with
    ``asyncio.to_thread``; the event loop never waits on the file. The sync methods
    work as well. It takes the same arguments as :class:`SqliteSaver`;
    ``from_conn_string`` gives a saver usable with ``async with``.

    Example::

        async with AsyncSqliteSaver.from_conn_string("threads.db") as saver:
            agent = create_agent(model, tools, middleware=[...], checkpointer=saver)
            await agent.ainvoke({"messages": ["hi"]}, {"configurable": {"thread_id": "t1"}})
    """

    @classmethod
    def from_conn_string(cls, conn_string: str | os.PathLike[str], **options: Any) -> AsyncSqliteSaver:
        """Open a saver on a file path; also an (async) context manager that closes it."""
        return cls(conn_string, **options)

    def __enter__(self) -> AsyncSqliteSaver:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> AsyncSqliteSaver:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def setup(self) -> None:
        """Create or migrate the schema (see :meth:`SqliteSaver.setup`); done on opening."""
        import asyncio

        await asyncio.to_thread(self._migrate)

    async def aclose(self) -> None:
        """Async :meth:`close`."""
        import asyncio

        await asyncio.to_thread(self.close)
