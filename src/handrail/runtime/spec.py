"""AgentSpec: everything a run needs to know about the agent, built once by create_agent."""

from __future__ import annotations

import threading
import typing
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from handrail.checkpoint.base import BaseCheckpointSaver
from handrail.errors import ConfigurationError
from handrail.middleware.types import AgentMiddleware, hook_is_defined
from handrail.models.base import ChatModel
from handrail.review import NO_POLICIES, Policies
from handrail.runtime._fold import Reducer, ThreadFold
from handrail.runtime.plan import Plan
from handrail.tools import Tool

__all__ = ["AgentSpec", "FoldCache", "state_schema_of"]


class FoldCache:
    """The latest reading of recently used threads, so a resume reads only new events.

    What an agent keeps for the threads it has seen, and all it keeps: at most ``size``
    threads (128) and ``messages`` messages between them (32,768), the least recently
    used going first (the one just stored always stays). A thread that is not here
    loads from its saved reading and the events after it (``runtime/reading.py``), which
    costs about as much as decoding what it holds. Entries are never mutated after they
    are stored; a run works on its own copy.
    """

    def __init__(self, size: int = 128, messages: int = 32_768) -> None:
        self._size = size
        self._messages = messages
        self._held = 0  # messages in the entries
        self._entries: OrderedDict[str, tuple[ThreadFold, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, thread_id: str) -> ThreadFold | None:
        with self._lock:
            entry = self._entries.get(thread_id)
            if entry is None:
                return None
            self._entries.move_to_end(thread_id)
            return entry[0]

    def put(self, fold: ThreadFold) -> None:
        count = len(fold.values.get("messages") or ())
        with self._lock:
            current = self._entries.get(fold.thread_id)
            if current is not None:
                if current[0].epoch == fold.epoch and current[0].head_seq > fold.head_seq:
                    return
                self._held -= current[1]
            self._entries[fold.thread_id] = (fold, count)
            self._entries.move_to_end(fold.thread_id)
            self._held += count
            while len(self._entries) > 1 and (len(self._entries) > self._size or self._held > self._messages):
                _, (_, dropped) = self._entries.popitem(last=False)
                self._held -= dropped

    def drop(self, thread_id: str) -> None:
        with self._lock:
            entry = self._entries.pop(thread_id, None)
            if entry is not None:
                self._held -= entry[1]

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


@dataclass
class AgentSpec:
    """The agent as the run loop sees it."""

    name: str | None
    model: ChatModel
    tools: dict[str, Tool]
    middleware: list[AgentMiddleware]
    system_prompt: str | None
    store: BaseCheckpointSaver | None
    long_term_store: Any = None  # create_agent(store=...): what hooks and tools see as runtime.store
    context_schema: Any = None
    response_format: Any = None  # a resolved ToolStrategy / ProviderStrategy, or None
    plan: Plan = field(init=False)
    middleware_by_name: dict[str, AgentMiddleware] = field(init=False)
    reducers: dict[str, Reducer] = field(init=False)
    state_keys: frozenset[str] = field(init=False)
    tool_wrappers: list[AgentMiddleware] = field(init=False)
    model_wrappers: list[AgentMiddleware] = field(init=False)
    policies: Policies = field(init=False)  # the review gate's (``handrail.review``)
    cache: FoldCache = field(default_factory=FoldCache)

    def __post_init__(self) -> None:
        self.plan = Plan(self.middleware)
        specs = getattr(self.response_format, "schema_specs", None)  # a ToolStrategy's schemas
        if specs:
            self.plan.final_tools = frozenset(spec.name for spec in specs)
        self.middleware_by_name = {m.name: m for m in self.middleware}
        reducers: dict[str, Reducer] = {}
        keys = {"messages"}
        for middleware in self.middleware:
            schema_keys, schema_reducers = state_schema_of(middleware)
            keys |= schema_keys
            reducers.update(schema_reducers)
        keys.add("structured_response")
        self.reducers = reducers
        self.state_keys = frozenset(keys)
        self.tool_wrappers = [m for m in self.middleware if any(hook_is_defined(m, "wrap_tool_call"))]
        self.model_wrappers = [m for m in self.middleware if any(hook_is_defined(m, "wrap_model_call"))]
        self.policies = review_policies_of(self.middleware, self.tools)


def review_policies_of(middleware: Sequence[AgentMiddleware], tools: dict[str, Tool]) -> Policies:
    """The review policies of the agent's gate: the one middleware that holds them."""
    gates = [(m, p) for m in middleware if (p := m.review_policies()) is not None]
    if len(gates) > 1:
        raise ConfigurationError(
            f"an agent has one review gate, but {[m.name for m, _ in gates]} each hold review "
            "policies; put every tool's policy in one HumanInTheLoopMiddleware"
        )
    if not gates:
        return NO_POLICIES
    policies = gates[0][1]
    if not policies.tools:
        policies.bind(tools)
    return policies


def state_schema_of(middleware: AgentMiddleware) -> tuple[set[str], dict[str, Reducer]]:
    """The state keys a middleware's ``state_schema`` adds, and their reducers."""
    schema = middleware.state_schema
    if schema is None:
        return set(), {}
    try:
        hints = typing.get_type_hints(schema, include_extras=True)
    except Exception as exc:
        raise ConfigurationError(
            f"middleware {middleware.name!r}: cannot read state_schema {schema!r} ({exc}); use a TypedDict"
        ) from None
    reducers: dict[str, Reducer] = {}
    for key, hint in hints.items():
        if typing.get_origin(hint) is typing.Annotated:
            found = [m for m in _annotated_metadata(hint) if callable(m)]
            if found:
                reducers[key] = found[-1]
    return set(hints), reducers


def _annotated_metadata(hint: Any) -> Sequence[Any]:
    return getattr(hint, "__metadata__", ())
