"""What the damaged-column tests share: a store of real threads, every reader, the verdict.

SPEC rule 10 for the rows a store derives from each log (``checkpoint/seals.py``): with
one column of one row damaged, every reader either raises SerializationError naming a
thread, or returns exactly what it returns from the undamaged store. One exception,
which no store can avoid: a filter the database applies to a damaged column may leave
that row's items out of a filtered listing (a review whose kind was damaged is not
among the reviews of its old kind). It never shows a changed value, and the same items
fail in every unfiltered reader.

The store (:func:`fill`): ``t`` waits for two reviews (per-call mode: one each for
``write_file`` and ``touch_file``), ``u`` for one review about both tools (batched),
``d`` is finished, ``gone`` was deleted. ``t`` and ``d`` have ``{"team": "x"}``, ``u``
``{"team": "y"}``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from handrail import Command, HumanInTheLoopMiddleware, ScriptedModel, ToolMessage, create_agent, tool
from handrail.agent import Agent
from handrail.checkpoint.base import BaseCheckpointSaver, ClaimFilter, PendingFilter, ThreadFilter
from handrail.errors import SerializationError

THREADS = ("t", "u", "d")


def _turn(messages: list[Any]) -> dict[str, Any]:
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return {"content": "done"}
    names = str(last.content).split(",")
    return {
        "content": "",
        "tool_calls": [{"name": name, "args": {"path": f"p{n}"}} for n, name in enumerate(names)],
    }


def agent_on(saver: BaseCheckpointSaver, mode: str = "per_call") -> Agent:
    """An agent with two reviewed tools (``write_file``, ``touch_file``) on ``saver``."""

    @tool
    def write_file(path: str) -> str:
        """Write a file."""
        return f"wrote {path}"

    @tool
    def touch_file(path: str) -> str:
        """Touch a file."""
        return f"touched {path}"

    return create_agent(
        ScriptedModel([_turn] * 1000),
        [write_file, touch_file],
        middleware=[
            HumanInTheLoopMiddleware(
                {"write_file": True, "touch_file": True},
                interrupt_mode="per_call" if mode == "per_call" else "batched",
            )
        ],
        checkpointer=saver,
    )


def _config(thread_id: str, **metadata: Any) -> Any:
    return {"configurable": {"thread_id": thread_id}, "metadata": metadata}


def fill(saver: BaseCheckpointSaver) -> None:
    """The threads the tests damage (see the module's documentation); each run's last
    append saves a reading of its thread, so that readings are there to damage too."""
    from handrail.runtime import commit

    every, least = commit.READING_EVERY, commit.READING_MIN
    commit.READING_EVERY = commit.READING_MIN = 1
    try:
        per_call, batched = agent_on(saver), agent_on(saver, "batched")
        per_call.invoke({"messages": ["write_file,touch_file"]}, _config("t", team="x"))
        batched.invoke({"messages": ["write_file,touch_file"]}, _config("u", team="y"))
        paused = per_call.invoke({"messages": ["write_file"]}, _config("d", team="x"))
        (asked,) = paused["__interrupt__"]
        per_call.invoke(Command(resume={asked.id: {"type": "approve"}}), _config("d"))
        per_call.invoke({"messages": ["write_file"]}, _config("gone", team="x"))
        per_call.delete_thread("gone", by={"id": "ops", "roles": ["admin"]})
    finally:
        commit.READING_EVERY, commit.READING_MIN = every, least


def readers(saver: BaseCheckpointSaver) -> dict[str, Callable[[], Any]]:
    """Every reader, by name: the agent's (a new agent: nothing cached) and the store's."""
    agent = agent_on(saver)

    def page(**filter: Any) -> Callable[[], Any]:
        return lambda: agent.list_interrupts(limit=100, **filter).items

    found: dict[str, Callable[[], Any]] = {}
    for thread_id in THREADS:
        config = _config(thread_id)
        found[f"get_state {thread_id}"] = lambda config=config: agent.get_state(config)
        found[f"history {thread_id}"] = lambda config=config: list(agent.get_state_history(config))
        found[f"audit trail {thread_id}"] = lambda config=config: agent.get_audit_trail(config)
        found[f"get_thread {thread_id}"] = lambda thread_id=thread_id: saver.get_thread(thread_id)
    found.update(
        {
            "audit across": lambda: agent.audit(),
            "list_threads": lambda: agent.list_threads(),
            "list_deletions": lambda: saver.list_deletions(),
            "list_interrupts": page(),
            "list_interrupts newest": page(order="newest"),
            "list_pending": lambda: saver.list_pending(PendingFilter(limit=100)),
        }
    )
    found.update(filtered_readers(agent, saver, page))
    return found


def filtered_readers(
    agent: Agent, saver: BaseCheckpointSaver, page: Callable[..., Callable[[], Any]]
) -> dict[str, Callable[[], Any]]:
    """The readers whose filter the database may apply to a damaged column (see above)."""
    return {
        "list_threads by metadata": lambda: agent.list_threads(metadata={"team": "x"}),
        "list_threads by status": lambda: agent.list_threads(status="interrupted"),
        "list_threads by owners": lambda: saver.list_threads(
            ThreadFilter(owners=ClaimFilter("team", ("x",)))
        ),
        "list_interrupts by tool": page(tool="write_file"),
        "list_interrupts by other tool": page(tool="touch_file"),
        "list_interrupts by metadata": page(metadata={"team": "x"}),
        "list_interrupts by kind": page(kind="interrupt"),
        "list_interrupts by other kind": page(kind="outcome_unknown"),
        "list_interrupts older than": page(older_than=0.0),
        "list_interrupts by owners": page(owners=ClaimFilter("team", ("x",))),
        "list_interrupts by owners or none": page(owners=ClaimFilter("team", ("y", "z"), or_missing=True)),
        "list_interrupts by tool and metadata, newest": page(
            tool="write_file", metadata={"team": "y"}, order="newest"
        ),
        "audit by metadata": lambda: agent.audit(metadata={"team": "x"}),
    }


def filtered(name: str) -> bool:
    """Whether the reader ``name`` applies a filter (see the module's documentation)."""
    return " by " in name or name.endswith("older than")


def baseline(saver: BaseCheckpointSaver) -> dict[str, Any]:
    """What every reader returns from the undamaged store (each must return something)."""
    return {name: read() for name, read in readers(saver).items()}


def check_readers(
    saver: BaseCheckpointSaver, expected: dict[str, Any], thread_id: str | None, what: str
) -> list[str]:
    """Run every reader on a damaged store; return the names of those that refused.

    Each must raise SerializationError naming a thread, or return what it returned
    undamaged, or - a filtered reader - that without some items of ``thread_id``, the
    thread the damaged row belonged to.
    """
    refused = []
    for name, read in readers(saver).items():
        try:
            got = read()
        except SerializationError as exc:
            assert exc.thread_id is not None, (what, name, exc)
            assert str(exc).startswith(("cannot load thread ", "cannot repair thread ")), (what, name, exc)
            refused.append(name)
            continue
        want = expected[name]
        if got == want:
            continue
        assert filtered(name) and thread_id is not None and _fewer(got, want, thread_id), (
            f"{what}: {name} loaded other data without an error:\n got  {got!r:.1500}\n want {want!r:.1500}"
        )
    return refused


def _fewer(got: Any, want: Any, thread_id: str) -> bool:
    """Whether ``got`` is ``want`` with some items of ``thread_id`` left out (in order)."""
    if not isinstance(got, list) or not isinstance(want, list):
        return False
    rest = iter(want)
    for item in got:
        for candidate in rest:
            if candidate == item:
                break
            if _thread_of(candidate) != thread_id:
                return False
        else:
            return False
    return all(_thread_of(item) == thread_id for item in rest)


def _thread_of(item: Any) -> Any:
    return getattr(item, "thread_id", None)


def row_thread(table: str, keys: Sequence[str], key: Sequence[Any]) -> str | None:
    """The thread a damaged row belonged to, from its key (None: the key does not say)."""
    if "thread_id" in keys:
        value = key[list(keys).index("thread_id")]
        return value if isinstance(value, str) else None
    return None
