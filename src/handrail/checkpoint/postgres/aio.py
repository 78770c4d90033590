"""AsyncPostgresSaver: the store protocol on PostgreSQL, for asyncio (a facade over the operations)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from handrail.checkpoint._grant_rows import checked_change
from handrail.checkpoint._records import Migration, check_append, check_reading
from handrail.checkpoint.base import (
    BaseCheckpointSaver,
    ClaimFilter,
    DeletionRecord,
    Derived,
    FeedEntry,
    Notice,
    PendingFilter,
    PendingItem,
    StoredEvent,
    ThreadFilter,
    ThreadRead,
    ThreadRecord,
)
from handrail.checkpoint.grants import GrantChange
from handrail.checkpoint.postgres._base import Op
from handrail.checkpoint.postgres.cleared import Cleared
from handrail.checkpoint.postgres.drivers import (
    CONNECT_TIMEOUT,
    PREPARE_THRESHOLD,
    _check_pool_size,
    _not_autocommit,
    _pool_kwargs,
    connect_like_async,
    run_async,
)
from handrail.checkpoint.postgres.feed import QUEUE_CHANNEL
from handrail.checkpoint.postgres.grants import AsyncGrantMethods
from handrail.checkpoint.postgres.liveness import NEED_OWNER, Flow, LockAgain
from handrail.checkpoint.postgres.queries import Queries
from handrail.checkpoint.postgres.write import append_flow
from handrail.errors import ConfigurationError, StoreUnavailableError

__all__ = ["AsyncPostgresSaver"]

T = TypeVar("T")


class AsyncPostgresSaver(AsyncGrantMethods, BaseCheckpointSaver):
    """PostgresSaver for asyncio: the ``a``-methods run on psycopg's async driver.

    ``conn`` is a ``psycopg_pool.AsyncConnectionPool`` or a ``psycopg.AsyncConnection``
    in autocommit mode. The sync methods also work when called from a thread other
    than the event loop's (they hand the work to the loop and wait).

    Example::

        async with AsyncPostgresSaver.from_conn_string("postgresql://localhost/app") as saver:
            agent = create_agent(model, tools, middleware=[...], checkpointer=saver)
            await agent.ainvoke({"messages": ["hi"]}, {"configurable": {"thread_id": "t1"}})
    """

    def __init__(
        self,
        conn: AsyncConnectionPool[Any] | psycopg.AsyncConnection[Any],
        *,
        schema: str | None = None,
    ) -> None:
        self._queries = Queries(schema, probe_locks=isinstance(conn, AsyncConnectionPool))
        self._pool: AsyncConnectionPool[Any] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        if isinstance(conn, AsyncConnectionPool):
            self._pool = conn
        elif isinstance(conn, psycopg.AsyncConnection):
            if not conn.autocommit:
                raise _not_autocommit()
            self._conn = conn
        else:
            raise ConfigurationError(
                "AsyncPostgresSaver takes a psycopg AsyncConnectionPool or AsyncConnection, "
                f"got {type(conn).__name__}"
            )
        self._owns_pool = False
        self._ready = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._locks: dict[str, asyncio.Lock] = {}
        self._owner_conn: psycopg.AsyncConnection[Any] | None = None
        # this saver's liveness key and connection: checked by every claim's statement
        # on the server (HR410 when the lock is gone), never trusted alone
        self._owner_key: int | None = None
        # The runs this saver claimed, remembered only to claim them again under a new
        # liveness lock after its connection was lost. Safe: the server's rows are the
        # truth (a stale entry re-claims a released run at worst until the saver closes,
        # and is removed by release_run and close); each claim's statement checks the
        # lock itself. Raced by test_a_claim_takes_a_lost_liveness_lock_again.
        self._claimed: set[tuple[str, str]] = set()
        self._cleared = Cleared()
        self._listener: psycopg.AsyncConnection[Any] | None = None  # LISTENs for queued threads

    @classmethod
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        schema: str | None = None,
        pool_size: int = 8,
        prepare_threshold: int | None = PREPARE_THRESHOLD,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> AsyncPostgresSaver:
        """A saver with its own pool; use it with ``async with`` (it opens on first use too).

        ``prepare_threshold`` and ``connect_timeout``: as in
        :meth:`PostgresSaver.from_conn_string` (an unreachable server fails :meth:`setup`
        with :class:`~handrail.errors.StoreUnavailableError`).
        """
        _check_pool_size(pool_size)
        kwargs = _pool_kwargs(prepare_threshold, connect_timeout)
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            conn_string, min_size=1, max_size=pool_size, kwargs=kwargs, open=False
        )
        saver = cls(pool, schema=schema)
        saver._owns_pool = True
        return saver

    async def __aenter__(self) -> AsyncPostgresSaver:
        await self.setup()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def _lock(self, name: str) -> asyncio.Lock:
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        return lock

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        if self._pool is not None:
            if self._owns_pool:
                await self._pool.open()
            async with self._pool.connection() as conn:
                yield conn
        else:
            assert self._conn is not None
            async with self._lock("conn"):
                yield self._conn

    async def _run(self, op: Op[T], *, ready: bool = True) -> T:
        self._loop = asyncio.get_running_loop()
        if ready and not self._ready:
            await self.setup()
        async with self._connection() as conn:
            if not conn.autocommit:
                raise _not_autocommit()
            return await run_async(conn, op)

    def schema_migrations(self) -> tuple[Migration, ...]:
        """The schema, version by version (a subclass may add its own at the end)."""
        return self._queries.migrations

    @property
    def table_prefix(self) -> str:
        """What every table name starts with: the quoted schema, if any, and ``handrail_``."""
        return self._queries.prefix

    async def setup(self) -> None:
        """Create or migrate the schema; idempotent, safe from many processes at once."""
        async with self._lock("setup"):
            if self._ready:
                return
            if self._owns_pool and self._pool is not None and self._pool.closed:
                await (await connect_like_async(self._pool)).close()  # see PostgresSaver.setup
            migrations = self.schema_migrations()
            if await self._run(self._queries.version(), ready=False) != migrations[-1].version:
                await self._run(self._queries.setup(migrations), ready=False)
            self._ready = True

    async def aclose(self) -> None:
        """Release this saver's runs and its liveness lock; close the pool it opened."""
        key, owner, self._owner_conn, self._owner_key = self._owner_key, self._owner_conn, None, None
        self._claimed.clear()
        if key is not None:
            try:
                await self._run(self._queries.forget_owner(key))
            except psycopg.Error:
                pass
        if owner is not None:
            await owner.close()
        elif key is not None and self._conn is not None:
            async with self._lock("conn"):
                await self._conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.close()
        if self._owns_pool and self._pool is not None:
            await self._pool.close()

    # The protocol, async ----------------------------------------------------------------------
    async def aappend(
        self,
        thread_id: str,
        events: Sequence[StoredEvent],
        *,
        expected_seq: int,
        record: ThreadRecord,
        claim: str | None = None,
        release: str | None = None,
        durable: bool = True,
        reading: StoredEvent | None = None,
        notices: Sequence[Notice] = (),
        queue: bool = False,
        grants: GrantChange | None = None,
    ) -> None:
        check_append(thread_id, events, expected_seq, record)
        check_reading(reading, record)
        added = checked_change(grants)  # refused before anything is written
        released = release is not None and (thread_id, release) in self._claimed
        if release is not None:
            self._claimed.discard((thread_id, release))
        try:
            await self._perform(
                append_flow(
                    self._queries,
                    self._cleared,
                    thread_id,
                    events,
                    expected_seq,
                    record,
                    claim=claim,
                    release=release,
                    durable=durable,
                    reading=reading,
                    notices=notices,
                    queue=queue,
                    grants=added,
                )
            )
        except BaseException:
            if released and release is not None:
                self._claimed.add((thread_id, release))
            raise
        if claim is not None and claim != release:
            self._claimed.add((thread_id, claim))

    async def aread(
        self, thread_id: str, *, after_seq: int = 0, upto_seq: int | None = None, from_reading: bool = False
    ) -> ThreadRead:
        return await self._run(self._queries.read(thread_id, after_seq, upto_seq, from_reading))

    async def aget_thread(self, thread_id: str) -> ThreadRecord | None:
        return await self._run(self._queries.get_thread(thread_id))

    async def alist_threads(self, filter: ThreadFilter) -> list[ThreadRecord]:
        return await self._run(self._queries.list_threads(filter))

    async def alist_pending(self, filter: PendingFilter) -> list[PendingItem]:
        return await self._run(self._queries.list_pending(filter))

    async def adelete_thread(self, thread_id: str, *, by: Any = None) -> bool:
        self._cleared.forget(thread_id)
        return await self._run(self._queries.delete_thread(thread_id, by))

    async def alist_deletions(
        self,
        *,
        since: float | None = None,
        until: float | None = None,
        owners: ClaimFilter | None = None,
        metadata: Mapping[str, Any] | None = None,
        limit: int = 1000,
    ) -> list[DeletionRecord]:
        return await self._run(self._queries.list_deletions(since, until, owners, metadata, limit))

    async def arepair_thread(
        self, thread_id: str, derive: Callable[[list[StoredEvent]], Derived], *, dry_run: bool = False
    ) -> list[str]:
        self._cleared.forget(thread_id)
        return await self._run(self._queries.repair_thread(thread_id, derive, dry_run))

    async def aprune(
        self, thread_id: str, *, upto_seq: int, snapshot: StoredEvent, keep_kinds: frozenset[str]
    ) -> int:
        if snapshot.seq != upto_seq:
            raise ValueError(f"the snapshot must take the place of event {upto_seq}")
        return await self._run(self._queries.prune(thread_id, upto_seq, snapshot, keep_kinds))

    async def aclaim_run(self, thread_id: str, run_id: str) -> None:
        await self._perform(self._queries.claim_flow(thread_id, run_id))
        self._claimed.add((thread_id, run_id))

    async def arelease_run(self, thread_id: str, run_id: str) -> None:
        self._claimed.discard((thread_id, run_id))
        await self._run(self._queries.release_run(thread_id, run_id))

    async def aruns_alive(self, thread_id: str) -> set[str]:
        return await self._run(self._queries.runs_alive(thread_id))

    async def aread_feed(self, after: str | None = None, *, limit: int = 500) -> list[FeedEntry]:
        return await self._run(self._queries.read_feed(after, limit))

    async def afeed_end(self) -> str | None:
        return await self._run(self._queries.feed_end())

    async def atrim_feed(self, before: float) -> int:
        return await self._run(self._queries.trim_feed(before))

    async def await_queued(self, timeout: float) -> None:
        """Wait for a ``NOTIFY`` of a queued thread, at most ``timeout`` seconds (see
        :meth:`PostgresSaver.wait_queued`)."""
        async with self._lock("listen"):
            conn = self._listener
            if conn is None and self._pool is not None:
                try:
                    conn = await connect_like_async(self._pool)
                    await conn.execute(f"LISTEN {QUEUE_CHANNEL}")
                except (psycopg.Error, StoreUnavailableError):
                    conn = None
                self._listener = conn
            if conn is not None:
                try:
                    async for _ in conn.notifies(timeout=timeout, stop_after=1):
                        pass
                    return
                except psycopg.Error:
                    self._listener = None
                    await conn.close()
        await asyncio.sleep(timeout)

    async def aclaim_queued(
        self, run_id: str, *, filter: ClaimFilter | None = None, thread_id: str | None = None
    ) -> str | None:
        claimed = await self._perform(self._queries.claim_queued_flow(run_id, filter, thread_id))
        if claimed is not None:
            self._claimed.add((claimed, run_id))
        return claimed

    # This saver's liveness lock (see PostgresSaver) -------------------------------------------
    async def _perform(self, flow: Flow[T]) -> T:
        """Run a flow (see :data:`~handrail.checkpoint.postgres.liveness.Flow`), awaiting."""
        answer: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = flow.send(answer) if error is None else flow.throw(error)
            except StopIteration as stop:
                value: T = stop.value
                return value
            answer, error = None, None
            try:
                if step is NEED_OWNER:
                    answer = await self._owner()
                elif isinstance(step, LockAgain):
                    await self._lock_again(step.seen)
                else:
                    answer = await self._run(step)
            except BaseException as exc:  # into the flow, which says what it means (or re-raises)
                error = exc

    async def _owner(self) -> tuple[int, object]:
        async with self._lock("owner"):
            if self._pool is None:
                if self._owner_key is None:
                    async with self._connection() as conn:
                        self._owner_key = await run_async(conn, self._queries.take_lock(None))
                return self._owner_key, self._conn
            if self._owner_conn is None or self._owner_conn.closed or self._owner_key is None:
                await self._relock()
            assert self._owner_key is not None
            return self._owner_key, self._owner_conn

    async def _lock_again(self, seen: tuple[int, object]) -> None:
        async with self._lock("owner"):
            if self._pool is None:
                if self._owner_key == seen[0]:
                    async with self._connection() as conn:
                        self._owner_key = await run_async(conn, self._queries.take_lock(self._owner_key))
                    await self._run(self._queries.reclaim_runs(sorted(self._claimed), self._owner_key))
            elif (self._owner_key, self._owner_conn) == seen:
                await self._relock()

    async def _relock(self) -> None:
        assert self._pool is not None
        if self._owner_conn is not None:
            await self._owner_conn.close()
        self._owner_conn = owner = await connect_like_async(self._pool)
        previous = self._owner_key
        self._owner_key = await run_async(owner, self._queries.take_lock(previous, hold=True), stay_open=True)
        if previous is not None:
            await self._run(self._queries.reclaim_runs(sorted(self._claimed), self._owner_key))

    # The sync methods hand the work to the saver's event loop ---------------------------------
    def _call(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        loop = self._loop
        if loop is None or not loop.is_running():
            raise ConfigurationError(
                "AsyncPostgresSaver's sync methods need its event loop running in another thread; "
                "use the async methods (ainvoke, astream, ...) or PostgresSaver"
            )
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise ConfigurationError(
                "a sync method of AsyncPostgresSaver was called from its event loop, which would "
                "block it; use the async methods (ainvoke, aget_state, ...)"
            )
        return asyncio.run_coroutine_threadsafe(make(), loop).result()

    def append(
        self,
        thread_id: str,
        events: Sequence[StoredEvent],
        *,
        expected_seq: int,
        record: ThreadRecord,
        claim: str | None = None,
        release: str | None = None,
        durable: bool = True,
        reading: StoredEvent | None = None,
        notices: Sequence[Notice] = (),
        queue: bool = False,
        grants: GrantChange | None = None,
    ) -> None:
        self._call(
            lambda: self.aappend(
                thread_id,
                events,
                expected_seq=expected_seq,
                record=record,
                claim=claim,
                release=release,
                durable=durable,
                reading=reading,
                notices=notices,
                queue=queue,
                grants=grants,
            )
        )

    def read(
        self, thread_id: str, *, after_seq: int = 0, upto_seq: int | None = None, from_reading: bool = False
    ) -> ThreadRead:
        return self._call(
            lambda: self.aread(thread_id, after_seq=after_seq, upto_seq=upto_seq, from_reading=from_reading)
        )

    def get_thread(self, thread_id: str) -> ThreadRecord | None:
        return self._call(lambda: self.aget_thread(thread_id))

    def list_threads(self, filter: ThreadFilter) -> list[ThreadRecord]:
        return self._call(lambda: self.alist_threads(filter))

    def list_pending(self, filter: PendingFilter) -> list[PendingItem]:
        return self._call(lambda: self.alist_pending(filter))

    def delete_thread(self, thread_id: str, *, by: Any = None) -> bool:
        return self._call(lambda: self.adelete_thread(thread_id, by=by))

    def list_deletions(
        self,
        *,
        since: float | None = None,
        until: float | None = None,
        owners: ClaimFilter | None = None,
        metadata: Mapping[str, Any] | None = None,
        limit: int = 1000,
    ) -> list[DeletionRecord]:
        return self._call(
            lambda: self.alist_deletions(
                since=since, until=until, owners=owners, metadata=metadata, limit=limit
            )
        )

    def repair_thread(
        self, thread_id: str, derive: Callable[[list[StoredEvent]], Derived], *, dry_run: bool = False
    ) -> list[str]:
        return self._call(lambda: self.arepair_thread(thread_id, derive, dry_run=dry_run))

    def prune(
        self, thread_id: str, *, upto_seq: int, snapshot: StoredEvent, keep_kinds: frozenset[str]
    ) -> int:
        return self._call(
            lambda: self.aprune(thread_id, upto_seq=upto_seq, snapshot=snapshot, keep_kinds=keep_kinds)
        )

    def claim_run(self, thread_id: str, run_id: str) -> None:
        self._call(lambda: self.aclaim_run(thread_id, run_id))

    def release_run(self, thread_id: str, run_id: str) -> None:
        self._call(lambda: self.arelease_run(thread_id, run_id))

    def runs_alive(self, thread_id: str) -> set[str]:
        return self._call(lambda: self.aruns_alive(thread_id))

    def read_feed(self, after: str | None = None, *, limit: int = 500) -> list[FeedEntry]:
        return self._call(lambda: self.aread_feed(after, limit=limit))

    def feed_end(self) -> str | None:
        return self._call(self.afeed_end)

    def trim_feed(self, before: float) -> int:
        return self._call(lambda: self.atrim_feed(before))

    def wait_queued(self, timeout: float) -> None:
        self._call(lambda: self.await_queued(timeout))

    def claim_queued(
        self, run_id: str, *, filter: ClaimFilter | None = None, thread_id: str | None = None
    ) -> str | None:
        return self._call(lambda: self.aclaim_queued(run_id, filter=filter, thread_id=thread_id))
