"""Backends for the store suite, the agent the cross-process tests share, and their worker.

Imported by the tests as ``_stores``; run as a script it is the worker process of
``test_processes.py``::

    python _stores.py run '{"store": {...}, "op": "start", ...}'   # one command, then exit
    python _stores.py race '{"store": {...}, "log": ...}'           # resume on "go" lines
    python _stores.py serve                                         # a fork server

Commands and results are JSON; nothing is pickled. Postgres tests read
``HANDRAIL_TEST_POSTGRES_DSN``; when the server cannot be reached they skip, unless
``HANDRAIL_REQUIRE_POSTGRES=1``, in which case they fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from handrail import (
    AIMessage,
    Command,
    HumanInTheLoopMiddleware,
    InMemorySaver,
    ScriptedModel,
    ToolMessage,
    create_agent,
    tool,
)
from handrail.agent import Agent
from handrail.checkpoint.base import (
    Append,
    BaseCheckpointSaver,
    DeletionRecord,
    FeedEntry,
    PendingFilter,
    PendingItem,
    StoredEvent,
    ThreadFilter,
    ThreadRead,
    ThreadRecord,
)
from handrail.checkpoint.sqlite import AsyncSqliteSaver, SqliteSaver
from handrail.errors import ConflictError

PG_ENV = "HANDRAIL_TEST_POSTGRES_DSN"
REQUIRE_ENV = "HANDRAIL_REQUIRE_POSTGRES"
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
PGBOUNCER = "postgres-pgbouncer"  # Postgres through PgBouncer in transaction pooling mode
BACKENDS = ("memory", "sqlite", "postgres", PGBOUNCER)
DURABLE = ("sqlite", "postgres", PGBOUNCER)


# Postgres --------------------------------------------------------------------------------
def postgres_dsn() -> tuple[str, str | None]:
    """The test DSN and, when the server cannot be used, why."""
    dsn = os.environ.get(PG_ENV) or DEFAULT_DSN
    try:
        import psycopg
    except ImportError:
        return dsn, "psycopg is not installed (pip install 'handrail[postgres]')"
    try:
        with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return dsn, f"PostgreSQL at {dsn} is not reachable ({exc})"
    return dsn, None


def drop_schema(dsn: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


class Location:
    """Where a backend keeps its threads; every saver opened here shares them."""

    def __init__(self, backend: str, tmp_path: Path, dsn: str | None = None) -> None:
        self.backend = backend
        self.path = tmp_path / "threads.db"
        self.dsn = dsn
        self.schema = f"hr_test_{uuid.uuid4().hex[:16]}"
        self._memory = InMemorySaver()
        self._savers: list[Any] = []
        self._shared: Any = None
        self.scratch: dict[str, Any] = {}  # what a test keeps between hypothesis examples

    @property
    def spec(self) -> dict[str, Any]:
        """How a worker process opens a saver here."""
        if self.backend == "sqlite":
            return {"kind": "sqlite", "path": str(self.path)}
        if self.backend == "postgres":
            return {"kind": "postgres", "dsn": self.dsn, "schema": self.schema}
        if self.backend == PGBOUNCER:  # PgBouncer 1.18: no prepared statements (production guide)
            return {"kind": "postgres", "dsn": self.dsn, "schema": self.schema, "prepare_threshold": None}
        raise ValueError("an in-memory store cannot be shared with another process")

    def saver(self, **options: Any) -> BaseCheckpointSaver:
        """A new sync saver on this location (the same one, in memory)."""
        if self.backend == "memory":
            return self._memory
        saver = open_saver(self.spec, **options)
        self._savers.append(saver)
        return saver

    def shared_saver(self) -> Any:
        """One sync saver for the whole test (hypothesis examples reuse it)."""
        if self._shared is None:
            self._shared = self.saver()
        return self._shared

    async def asaver(self, **options: Any) -> BaseCheckpointSaver:
        """A new async saver on this location, ready for use."""
        if self.backend == "memory":
            return self._memory
        if self.backend == "sqlite":
            saver: Any = AsyncSqliteSaver(self.path, **options)
        else:
            from handrail.checkpoint.postgres import AsyncPostgresSaver

            assert self.dsn is not None
            if self.backend == PGBOUNCER:
                options.setdefault("prepare_threshold", None)
            saver = AsyncPostgresSaver.from_conn_string(self.dsn, schema=self.schema, pool_size=4, **options)
            await saver.setup()
        self._savers.append(saver)
        return saver

    async def aclose(self) -> None:
        for saver in reversed(self._savers):
            if hasattr(saver, "aclose"):
                await saver.aclose()
            else:
                saver.close()
        self._savers.clear()

    def close(self) -> None:
        for saver in reversed(self._savers):
            if not hasattr(saver, "close"):
                raise RuntimeError("close async savers with aclose()")
            saver.close()
        self._savers.clear()

    def finish(self) -> None:
        if self.backend in ("postgres", PGBOUNCER) and self.dsn is not None:
            drop_schema(self.dsn, self.schema)


def open_saver(spec: dict[str, Any], **options: Any) -> Any:
    """A sync saver from a JSON-able spec (what worker processes receive)."""
    if spec["kind"] == "sqlite":
        return SqliteSaver(spec["path"], **options)
    if spec["kind"] == "postgres":
        from handrail.checkpoint.postgres import PostgresSaver

        if "prepare_threshold" in spec:
            options.setdefault("prepare_threshold", spec["prepare_threshold"])
        saver = PostgresSaver.from_conn_string(spec["dsn"], schema=spec["schema"], pool_size=4, **options)
        saver.setup()
        return saver
    raise ValueError(f"unknown store kind {spec['kind']!r}")


class Store:
    """One test body for sync and async savers: every protocol method, awaitable.

    ``await store.append(thread_id, Append(...))`` calls ``saver.append`` or ``await saver.aappend``.
    """

    def __init__(self, saver: BaseCheckpointSaver, is_async: bool, location: Location) -> None:
        self.saver = saver
        self.is_async = is_async
        self.location = location

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.is_async:
            return await getattr(self.saver, "a" + name)(*args, **kwargs)
        return getattr(self.saver, name)(*args, **kwargs)

    async def append(self, thread_id: str, change: Append) -> None:
        await self._call("append", thread_id, change)

    async def read(
        self, thread_id: str, *, after_seq: int = 0, upto_seq: int | None = None, **extra: Any
    ) -> ThreadRead:
        result: ThreadRead = await self._call(
            "read", thread_id, after_seq=after_seq, upto_seq=upto_seq, **extra
        )
        return result

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        result: ThreadRecord | None = await self._call("get_thread", thread_id)
        return result

    async def list_threads(self, filter: ThreadFilter | None = None, **options: Any) -> list[ThreadRecord]:
        result: list[ThreadRecord] = await self._call("list_threads", filter or ThreadFilter(**options))
        return result

    async def list_pending(self, filter: PendingFilter | None = None, **options: Any) -> list[PendingItem]:
        result: list[PendingItem] = await self._call("list_pending", filter or PendingFilter(**options))
        return result

    async def delete_thread(self, thread_id: str, **extra: Any) -> bool:
        result: bool = await self._call("delete_thread", thread_id, **extra)
        return result

    async def list_deletions(self, **options: Any) -> list[DeletionRecord]:
        result: list[DeletionRecord] = await self._call("list_deletions", **options)
        return result

    async def claim_run(self, thread_id: str, run_id: str) -> None:
        await self._call("claim_run", thread_id, run_id)

    async def release_run(self, thread_id: str, run_id: str) -> None:
        await self._call("release_run", thread_id, run_id)

    async def runs_alive(self, thread_id: str) -> set[str]:
        result: set[str] = await self._call("runs_alive", thread_id)
        return result

    async def read_feed(self, after: str | None = None, **options: Any) -> list[FeedEntry]:
        result: list[FeedEntry] = await self._call("read_feed", after, **options)
        return result

    async def feed_end(self) -> str | None:
        result: str | None = await self._call("feed_end")
        return result

    async def trim_feed(self, before: float) -> int:
        result: int = await self._call("trim_feed", before)
        return result

    async def claim_queued(self, run_id: str, **options: Any) -> str | None:
        result: str | None = await self._call("claim_queued", run_id, **options)
        return result


@contextmanager
def location_for(backend: str, tmp_path: Path, dsn: str | None) -> Iterator[Location]:
    place = Location(backend, tmp_path, dsn)
    try:
        yield place
    finally:
        try:
            place.close()
        finally:
            place.finish()


@asynccontextmanager
async def async_location_for(backend: str, tmp_path: Path, dsn: str | None) -> AsyncIterator[Location]:
    place = Location(backend, tmp_path, dsn)
    try:
        yield place
    finally:
        try:
            await place.aclose()
        finally:
            place.finish()


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Wait for something another process does; the timeout is only a safety net."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.002)


# The agent the processes share --------------------------------------------------------------
TOOL_MODES = ("normal", "kill", "hang")


def _next_turn(messages: list[Any]) -> dict[str, Any]:
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return {"content": "done"}
    tool_name, _, target = str(last.content).partition(":")
    return {"content": "", "tool_calls": [{"name": tool_name, "args": {"path": target}}]}


def build_agent(
    saver: BaseCheckpointSaver,
    log: Path | str,
    *,
    tool_mode: str = "normal",
    notify: Callable[[str], None] | None = None,
) -> Agent:
    """An agent whose gated tools append the target to ``log``, one line per run.

    ``write_file`` is not idempotent, ``touch_file`` is. In ``tool_mode="kill"`` the
    tool kills its own process (SIGKILL) right after writing; in ``"hang"`` it tells
    ``notify`` and waits to be killed.
    """
    log_path = str(log)

    def effect(path: str) -> str:
        with open(log_path, "a") as handle:
            handle.write(path + "\n")
        if tool_mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if tool_mode == "hang":
            assert notify is not None
            notify("in_tool")
            threading.Event().wait()
        return f"wrote {path}"

    @tool
    def write_file(path: str) -> str:
        """Append a line to the log (not safe to repeat)."""
        return effect(path)

    @tool(idempotent=True)
    def touch_file(path: str) -> str:
        """Append a line to the log (safe to repeat)."""
        return effect(path)

    return create_agent(
        ScriptedModel([_next_turn] * 10_000),
        tools=[write_file, touch_file],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"write_file": True, "touch_file": True})],
        checkpointer=saver,
    )


def config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def start(agent: Agent, thread_id: str, tool_name: str = "write_file") -> str:
    """Begin a run that pauses for review; return the interrupt id."""
    result = agent.invoke({"messages": [f"{tool_name}:{thread_id}"]}, config(thread_id))
    (interrupt,) = result["__interrupt__"]
    return str(interrupt.id)


def approve(interrupt_id: str) -> Command:
    return Command(resume={interrupt_id: {"decisions": [{"type": "approve"}]}})


def log_lines(log: Path | str) -> list[str]:
    try:
        return Path(log).read_text().splitlines()
    except FileNotFoundError:
        return []


def finished(values: dict[str, Any]) -> bool:
    """Whether a run ended with the model's final answer, every tool call answered once."""
    messages = values.get("messages", [])
    if not messages or not isinstance(messages[-1], AIMessage) or messages[-1].content != "done":
        return False
    calls = [c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    results = [m.tool_call_id for m in messages if isinstance(m, ToolMessage)]
    return sorted(calls) == sorted(results) and len(set(results)) == len(results)


# The worker ---------------------------------------------------------------------------------
def _run_command(command: dict[str, Any], notify: Callable[[str], None]) -> dict[str, Any]:
    if command.get("reading_every"):  # save the whole state that often (a forked child: its own copy)
        from handrail.runtime import commit

        commit.READING_EVERY = command["reading_every"]
    if command.get("async"):
        return asyncio.run(_resume_async(command, notify))
    saver = open_saver(command["store"])
    try:
        if command.get("kill_at") is not None:
            saver = KillingSaver(saver, *command["kill_at"])
        agent = build_agent(
            saver, command["log"], tool_mode=command.get("tool_mode", "normal"), notify=notify
        )
        thread_id = command["thread"]
        op = command["op"]
        if op == "start":
            return {"interrupt": start(agent, thread_id, command.get("tool", "write_file"))}
        if op == "resume":
            try:
                agent.invoke(approve(command["interrupt"]), config(thread_id))
            except ConflictError as exc:
                return {"conflict": str(exc)}
            return {"applied": True}
        if op == "work":  # what a worker does with a queued thread: claim it, run it
            from handrail.worker import Worker

            result = asyncio.run(Worker({"agent": agent}).run_thread(thread_id))
            return {"ran": result is not None}
        if op == "scenario":  # the whole review cycle in this process
            interrupt_id = start(agent, thread_id, command.get("tool", "write_file"))
            agent.invoke(approve(interrupt_id), config(thread_id))
            return {"applied": True}
        raise ValueError(f"unknown op {op!r}")
    finally:
        inner = saver.inner if isinstance(saver, KillingSaver) else saver
        inner.close()


async def _resume_async(command: dict[str, Any], notify: Callable[[str], None]) -> dict[str, Any]:
    """``op: resume`` with an async saver and ``ainvoke``."""
    assert command["op"] == "resume"
    spec = command["store"]
    saver: Any
    if spec["kind"] == "sqlite":
        saver = AsyncSqliteSaver(spec["path"])
    else:
        from handrail.checkpoint.postgres import AsyncPostgresSaver

        saver = AsyncPostgresSaver.from_conn_string(
            spec["dsn"],
            schema=spec["schema"],
            pool_size=4,
            prepare_threshold=spec.get("prepare_threshold", 5),
        )
    try:
        agent = build_agent(
            saver, command["log"], tool_mode=command.get("tool_mode", "normal"), notify=notify
        )
        await agent.ainvoke(approve(command["interrupt"]), config(command["thread"]))
        return {"applied": True}
    finally:
        await saver.aclose()


class KillingSaver(BaseCheckpointSaver):
    """Delegates to a saver, and SIGKILLs its process at the n-th append (before or after it)."""

    def __init__(self, inner: Any, at: int, when: str) -> None:
        self.inner = inner
        self.at = at
        self.when = when
        self.appends = 0

    def append(self, thread_id: str, change: Append) -> None:
        self.appends += 1
        if self.appends == self.at and self.when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        self.inner.append(thread_id, change)
        if self.appends == self.at and self.when == "after":
            os.kill(os.getpid(), signal.SIGKILL)

    def read(
        self, thread_id: str, *, after_seq: int = 0, upto_seq: int | None = None, **options: Any
    ) -> ThreadRead:
        result: ThreadRead = self.inner.read(thread_id, after_seq=after_seq, upto_seq=upto_seq, **options)
        return result

    def get_thread(self, thread_id: str) -> ThreadRecord | None:
        result: ThreadRecord | None = self.inner.get_thread(thread_id)
        return result

    def list_threads(self, filter: ThreadFilter) -> list[ThreadRecord]:
        result: list[ThreadRecord] = self.inner.list_threads(filter)
        return result

    def list_pending(self, filter: PendingFilter) -> list[PendingItem]:
        result: list[PendingItem] = self.inner.list_pending(filter)
        return result

    def delete_thread(self, thread_id: str, *, by: Any = None) -> bool:
        result: bool = self.inner.delete_thread(thread_id, by=by)
        return result

    def prune(
        self, thread_id: str, *, upto_seq: int, snapshot: StoredEvent, keep_kinds: frozenset[str]
    ) -> int:
        result: int = self.inner.prune(thread_id, upto_seq=upto_seq, snapshot=snapshot, keep_kinds=keep_kinds)
        return result

    def claim_run(self, thread_id: str, run_id: str) -> None:
        self.inner.claim_run(thread_id, run_id)

    def release_run(self, thread_id: str, run_id: str) -> None:
        self.inner.release_run(thread_id, run_id)

    def runs_alive(self, thread_id: str) -> set[str]:
        result: set[str] = self.inner.runs_alive(thread_id)
        return result


def _race(spec: dict[str, Any]) -> None:
    """Resume the interrupt named on each ``go THREAD INTERRUPT`` line; print the outcome."""
    saver = open_saver(spec["store"])
    agent = build_agent(saver, spec["log"])
    print("ready", flush=True)
    for line in sys.stdin:
        _, thread_id, interrupt_id = line.split()
        try:
            agent.invoke(approve(interrupt_id), config(thread_id))
            print("applied", flush=True)
        except ConflictError as exc:
            print("conflict " + json.dumps(str(exc)), flush=True)
    saver.close()


def _serve() -> None:
    """A fork server: run each command (a JSON line) in a fresh child, report how it ended.

    The child reports progress on a pipe; ``"kill_when": "in_tool"`` makes the server
    SIGKILL the child once its tool runs, ``"kill_after": seconds`` at a random moment.
    """
    for line in sys.stdin:
        command = json.loads(line)
        read_end, write_end = os.pipe()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:  # the child
            os.close(read_end)
            out = os.fdopen(write_end, "w", buffering=1)
            code = 0
            try:
                result = _run_command(command, lambda note, out=out: print(note, file=out, flush=True))
                print(json.dumps(result), file=out, flush=True)
            except BaseException as exc:
                print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), file=out, flush=True)
                code = 1
            os._exit(code)
        os.close(write_end)
        notes = os.fdopen(read_end)
        killer = None
        if command.get("kill_after") is not None:
            killer = threading.Timer(command["kill_after"], _kill, (pid,))
            killer.start()
        lines = []
        for note in notes:
            lines.append(note.strip())
            if note.strip() == "in_tool" and command.get("kill_when") == "in_tool":
                _kill(pid)
        notes.close()
        _, status = os.waitpid(pid, 0)
        if killer is not None:
            killer.cancel()
            killer.join()
        report = {
            "pid": pid,
            "killed": os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL,
            "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "notes": lines,
        }
        print(json.dumps(report), flush=True)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "run":
        result = _run_command(json.loads(argv[1]), lambda note: print(note, flush=True))
        print(json.dumps(result), flush=True)
    elif mode == "race":
        _race(json.loads(argv[1]))
    elif mode == "serve":
        _serve()
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
