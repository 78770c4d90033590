"""The benchmark workload on handrail (runs in handrail's venv).

The system object below is what ``_tasks.py`` drives; ``_workload_langgraph.py`` is
its twin for LangGraph. The model is a tiny :class:`ChatModel` that answers from
``_script.py`` by the length of the conversation (so any number of threads can share
it, and its cost is the same constant on both sides).

Run one task (``compare_langgraph.py`` does this for you)::

    .venv/bin/python bench/_workload_handrail.py cycle --backend sqlite --out /tmp/r.json
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any, ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _script
import _tasks

from handrail import (
    AIMessage,
    AsyncPostgresSaver,
    AsyncSqliteSaver,
    Command,
    HumanInTheLoopMiddleware,
    InMemorySaver,
    PostgresSaver,
    SqliteSaver,
    create_agent,
    tool,
)
from handrail.models.base import ChatModel


class BenchModel(ChatModel):
    """Answers turn after turn from the script; after ``turns`` turns, a final answer."""

    provider = "bench"
    model_name = "scripted-benchmark"

    def __init__(self, turns: int | None) -> None:
        self.turns = turns

    def invoke(
        self, messages: Sequence[Any], *, tools: Any = None, tool_choice: Any = None, **_: Any
    ) -> AIMessage:
        return AIMessage(**_script.answer_for(len(messages), self.turns))

    async def ainvoke(
        self, messages: Sequence[Any], *, tools: Any = None, tool_choice: Any = None, **_: Any
    ) -> AIMessage:
        return AIMessage(**_script.answer_for(len(messages), self.turns))


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


_WRITES = ("append", "claim_run", "release_run", "delete_thread")
_READS = ("read", "get_thread", "runs_alive", "list_pending", "list_threads")


class Handrail:
    name = "handrail"
    relations: ClassVar[list[str]] = [
        "handrail_threads",
        "handrail_events",
        "handrail_pending",
        "handrail_pending_tools",
        "handrail_pending_metadata",
        "handrail_runs",
        "handrail_readings",
        "handrail_schema_version",
    ]

    def versions(self) -> dict[str, str]:
        return {"handrail": version("handrail"), "psycopg": version("psycopg")}

    @contextlib.contextmanager
    def store(self, backend: str, location: str | None) -> Iterator[Any]:
        if backend == "memory":
            yield InMemorySaver()
        elif backend == "sqlite":
            assert location is not None
            with SqliteSaver.from_conn_string(location) as saver:
                yield saver
        else:
            assert location is not None
            with PostgresSaver.from_conn_string(location) as saver:
                saver.setup()
                yield saver

    def astore(self, backend: str, location: str | None) -> contextlib.AbstractAsyncContextManager[Any]:
        if backend == "memory":
            return _tasks.just(InMemorySaver())
        assert location is not None
        if backend == "sqlite":
            return AsyncSqliteSaver.from_conn_string(location)
        return AsyncPostgresSaver.from_conn_string(location)

    def agent(self, saver: Any, turns: int | None, async_tools: bool = False) -> Any:
        tools = [write_file_async, execute_sql_async] if async_tools else [write_file, execute_sql]
        return create_agent(
            BenchModel(turns),
            tools,
            middleware=[HumanInTheLoopMiddleware({"write_file": True, "execute_sql": True})],
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
        """The event payloads, the pending-review payloads and the saved reading, as stored."""
        read = saver.read(thread_id)
        total = sum(len(event.payload) for event in read.events)
        if read.record is not None:
            total += sum(len(review.payload) for review in read.record.pending)
        reading = saver.read(thread_id, from_reading=True).reading
        return total + (len(reading.payload) if reading is not None else 0)

    def messages(self, agent: Any, thread_id: str) -> list[Any]:
        return list(agent.get_state(_config(thread_id)).values["messages"])

    def count_calls(self, saver: Any) -> Counter[str]:
        """Count the saver's sync calls: ``write:NAME`` (one commit each) and ``read:NAME``.

        Appends made with ``durable=False`` (committed without an fsync) count as
        ``write:append (no fsync)``.
        """
        counter: Counter[str] = Counter()
        for kind, names in (("write", _WRITES), ("read", _READS)):
            for name in names:
                original = getattr(saver, name)

                def counted(
                    *args: Any, _original: Any = original, _key: str = f"{kind}:{name}", **kw: Any
                ) -> Any:
                    # an append that need not wait for the disk (no fsync) is counted apart;
                    # the store takes it as one record (``append(thread_id, change)``)
                    change = args[1] if len(args) > 1 else kw.get("change")
                    durable = getattr(change, "durable", True)
                    counter[_key if durable else f"{_key} (no fsync)"] += 1
                    return _original(*args, **kw)

                setattr(saver, name, counted)
        return counter


if __name__ == "__main__":
    raise SystemExit(_tasks.main(Handrail()))
