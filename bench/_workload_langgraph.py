"""The benchmark workload on LangChain v1 / LangGraph (runs ONLY in bench/.venv-reference).

The twin of ``_workload_handrail.py``: the same script, tools and decisions, through
``langchain.agents.create_agent`` with ``HumanInTheLoopMiddleware`` and LangGraph's
savers. The model is a small ``BaseChatModel`` subclass that answers from
``_script.py`` (langchain_core's fake chat models cannot bind tools); its async path
answers directly rather than in an executor, as the handrail model does.

Savers as a user would open them: ``InMemorySaver``; ``SqliteSaver`` on a
``sqlite3`` connection (the saver switches the file to WAL; Python's default
``synchronous=FULL``, the same as handrail's) and ``AsyncSqliteSaver.from_conn_string``;
``PostgresSaver.from_conn_string`` (one connection) and ``AsyncPostgresSaver`` on a
pool of 8 connections (like handrail's ``from_conn_string``). LangGraph's default
durability (``"async"``) is kept.

Run one task (``compare_langgraph.py`` does this for you)::

    bench/.venv-reference/bin/python bench/_workload_langgraph.py cycle --backend sqlite --out /tmp/r.json
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any, ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _script
import _tasks
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool


class BenchModel(BaseChatModel):
    """Answers turn after turn from the script; after ``turns`` turns, a final answer."""

    turns: int | None = None

    @property
    def _llm_type(self) -> str:
        return "scripted-benchmark"

    def _generate(
        self, messages: list[Any], stop: Any = None, run_manager: Any = None, **_: Any
    ) -> ChatResult:
        message = AIMessage(**_script.answer_for(len(messages), self.turns))
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self, messages: list[Any], stop: Any = None, run_manager: Any = None, **_: Any
    ) -> ChatResult:
        return self._generate(messages)

    def bind_tools(self, tools: Any, **_: Any) -> BenchModel:
        return self  # the script already knows the tools


@tool
def write_file(path: str, content: str) -> str:
    """Write text to a file."""
    return _script.write_file_result(path, content)


@tool
def execute_sql(query: str) -> str:
    """Run a SQL statement against the main database."""
    return _script.execute_sql_result(query)


# The same tools written ``async def`` (the throughput task's ``tools="async"``): no
# worker thread per call under ``ainvoke``.
write_file_async = tool("write_file")(_script.write_file_async)
execute_sql_async = tool("execute_sql")(_script.execute_sql_async)


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def _next_interrupt(result: dict[str, Any]) -> str | None:
    interrupts = result.get("__interrupt__")
    return interrupts[0].id if interrupts else None


_WRITES = ("put", "put_writes", "delete_thread")
_READS = ("get_tuple", "list")


class LangGraph:
    name = "langgraph"
    relations: ClassVar[list[str]] = [
        "checkpoints",
        "checkpoint_blobs",
        "checkpoint_writes",
        "checkpoint_migrations",
    ]

    def versions(self) -> dict[str, str]:
        names = (
            "langchain",
            "langchain-core",
            "langgraph",
            "langgraph-checkpoint",
            "langgraph-checkpoint-sqlite",
            "langgraph-checkpoint-postgres",
            "psycopg",
        )
        return {name: version(name) for name in names}

    @contextlib.contextmanager
    def store(self, backend: str, location: str | None) -> Iterator[Any]:
        if backend == "memory":
            yield InMemorySaver()
        elif backend == "sqlite":
            assert location is not None
            conn = sqlite3.connect(location, check_same_thread=False)
            try:
                saver = SqliteSaver(conn)
                saver.setup()
                yield saver
            finally:
                conn.close()
        else:
            assert location is not None
            with PostgresSaver.from_conn_string(location) as saver:
                saver.setup()
                yield saver

    @contextlib.asynccontextmanager
    async def astore(self, backend: str, location: str | None) -> AsyncIterator[Any]:
        if backend == "memory":
            yield InMemorySaver()
        elif backend == "sqlite":
            assert location is not None
            async with AsyncSqliteSaver.from_conn_string(location) as saver:
                await saver.setup()
                yield saver
        else:
            assert location is not None
            kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
            async with AsyncConnectionPool(
                location, min_size=1, max_size=8, kwargs=kwargs, open=False
            ) as pool:
                saver = AsyncPostgresSaver(pool)
                await saver.setup()
                yield saver

    def agent(self, saver: Any, turns: int | None, async_tools: bool = False) -> Any:
        tools = [write_file_async, execute_sql_async] if async_tools else [write_file, execute_sql]
        return create_agent(
            BenchModel(turns=turns),
            tools,
            middleware=[HumanInTheLoopMiddleware(interrupt_on={"write_file": True, "execute_sql": True})],
            checkpointer=saver,
        )

    def start(self, agent: Any, thread_id: str) -> str:
        result = agent.invoke(
            {"messages": [{"role": "user", "content": _script.USER_PROMPT}]}, _config(thread_id)
        )
        interrupt_id = _next_interrupt(result)
        assert interrupt_id is not None
        return interrupt_id

    def resume(self, agent: Any, thread_id: str, interrupt_id: str, turn: int) -> str | None:
        command = Command(resume={interrupt_id: _script.decisions_for(turn)})
        return _next_interrupt(agent.invoke(command, _config(thread_id)))

    async def astart(self, agent: Any, thread_id: str) -> str:
        result = await agent.ainvoke(
            {"messages": [{"role": "user", "content": _script.USER_PROMPT}]}, _config(thread_id)
        )
        interrupt_id = _next_interrupt(result)
        assert interrupt_id is not None
        return interrupt_id

    async def aresume(self, agent: Any, thread_id: str, interrupt_id: str, turn: int) -> str | None:
        command = Command(resume={interrupt_id: _script.decisions_for(turn)})
        return _next_interrupt(await agent.ainvoke(command, _config(thread_id)))

    def payload_bytes(self, saver: Any, backend: str, location: str | None, thread_id: str) -> int:
        """Checkpoints, their metadata, channel blobs and pending writes, as stored."""
        if backend == "memory":
            total = 0
            for checkpoints in saver.storage.get(thread_id, {}).values():
                for checkpoint, metadata, _parent in checkpoints.values():
                    total += len(checkpoint[1]) + len(metadata[1])
            for key, blob in saver.blobs.items():
                if key[0] == thread_id:
                    total += len(blob[1])
            for key, writes in saver.writes.items():
                if key[0] == thread_id:
                    total += sum(len(value[1]) for _task, _channel, value, _path in writes.values())
            return total
        if backend == "sqlite":
            assert location is not None
            with contextlib.closing(sqlite3.connect(location)) as conn:
                row = conn.execute(
                    "SELECT (SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints "
                    "WHERE thread_id = ?) + (SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes "
                    "WHERE thread_id = ?)",
                    (thread_id, thread_id),
                ).fetchone()
            return int(row[0])
        import psycopg

        with psycopg.connect(location, autocommit=True) as conn:
            row = conn.execute(
                "SELECT (SELECT COALESCE(SUM(octet_length(checkpoint::text) + octet_length(metadata::text)), 0) "
                "FROM checkpoints WHERE thread_id = %s) "
                "+ (SELECT COALESCE(SUM(octet_length(blob)), 0) FROM checkpoint_blobs WHERE thread_id = %s) "
                "+ (SELECT COALESCE(SUM(octet_length(blob)), 0) FROM checkpoint_writes WHERE thread_id = %s)",
                (thread_id, thread_id, thread_id),
            ).fetchone()
        return int(row[0])

    def messages(self, agent: Any, thread_id: str) -> list[Any]:
        return list(agent.get_state(_config(thread_id)).values["messages"])

    def count_calls(self, saver: Any) -> Counter[str]:
        """Count the saver's sync calls: ``write:NAME`` and ``read:NAME``."""
        counter: Counter[str] = Counter()
        for kind, names in (("write", _WRITES), ("read", _READS)):
            for name in names:
                original = getattr(saver, name)

                def counted(
                    *args: Any, _original: Any = original, _key: str = f"{kind}:{name}", **kw: Any
                ) -> Any:
                    counter[_key] += 1
                    return _original(*args, **kw)

                setattr(saver, name, counted)
        return counter


if __name__ == "__main__":
    raise SystemExit(_tasks.main(LangGraph()))
