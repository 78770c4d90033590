"""``InMemoryStore``: long-term memory for hooks and tools, with LangGraph's store API.

``create_agent(store=InMemoryStore())`` hands the store to every hook and tool as
``runtime.store``. Values are dicts, filed under a namespace (a tuple of strings) and a
key. It lives in the process; any object with the same methods works in its place.

Example::

    store = InMemoryStore()
    store.put(("users",), "user_123", {"name": "John Smith"})

    @tool
    def get_user_info(user_id: str, runtime: ToolRuntime) -> str:
        \"\"\"Look up user info.\"\"\"
        item = runtime.store.get(("users",), user_id)
        return str(item.value) if item else "Unknown user"

Differences from LangGraph's: ``search`` matches a namespace prefix and an exact
``filter`` on the values; a ``query`` (semantic search) is refused; there are no TTLs.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from handrail.errors import ConfigurationError

__all__ = ["InMemoryStore", "Item"]


@dataclass(frozen=True, slots=True)
class Item:
    """One stored value with its ``namespace``, ``key`` and timestamps."""

    value: dict[str, Any]
    key: str
    namespace: tuple[str, ...]
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    updated_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    score: float | None = None


def _namespace(value: Any) -> tuple[str, ...]:
    if not isinstance(value, tuple) or not all(isinstance(part, str) and part for part in value):
        raise ConfigurationError(f"a namespace is a tuple of non-empty strings, got {value!r}")
    return value


class InMemoryStore:
    """A thread-safe in-process store: ``put``, ``get``, ``search``, ``delete``, ``list_namespaces``.

    Every method has an async twin (``aput``, ``aget`` ...).
    """

    def __init__(self) -> None:
        self._items: dict[tuple[tuple[str, ...], str], Item] = {}
        self._lock = threading.Lock()

    def put(self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any], index: Any = None) -> None:
        """Store ``value`` (a dict) under ``namespace`` and ``key``, replacing what was there."""
        namespace = _namespace(namespace)
        if not isinstance(value, Mapping):
            raise ConfigurationError(f"a stored value is a dict, got {type(value).__name__}")
        with self._lock:
            old = self._items.get((namespace, key))
            now = datetime.now(UTC)
            created = old.created_at if old is not None else now
            self._items[(namespace, key)] = Item(dict(value), key, namespace, created, now)

    def get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        """The item under ``namespace`` and ``key``, or None."""
        with self._lock:
            return self._items.get((_namespace(namespace), key))

    def delete(self, namespace: tuple[str, ...], key: str) -> None:
        """Remove the item, if there is one."""
        with self._lock:
            self._items.pop((_namespace(namespace), key), None)

    def search(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[Item]:
        """Items whose namespace starts with ``namespace_prefix`` and whose values match ``filter``."""
        if query is not None:
            raise ConfigurationError("InMemoryStore has no semantic search: search without query=")
        prefix = tuple(namespace_prefix)
        with self._lock:
            found = [
                item
                for (namespace, _), item in self._items.items()
                if namespace[: len(prefix)] == prefix
                and all(item.value.get(k) == v for k, v in (filter or {}).items())
            ]
        found.sort(key=lambda item: item.updated_at, reverse=True)
        return found[offset : offset + limit]

    def list_namespaces(
        self,
        *,
        prefix: tuple[str, ...] | None = None,
        suffix: tuple[str, ...] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        """The namespaces in use, sorted, optionally by prefix, suffix and depth."""
        with self._lock:
            spaces = {namespace for namespace, _ in self._items}
        if prefix:
            spaces = {s for s in spaces if s[: len(prefix)] == prefix}
        if suffix:
            spaces = {s for s in spaces if s[-len(suffix) :] == suffix}
        if max_depth is not None:
            spaces = {s[:max_depth] for s in spaces}
        return sorted(spaces)[offset : offset + limit]

    async def aput(
        self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any], index: Any = None
    ) -> None:
        """Async :meth:`put`."""
        self.put(namespace, key, value, index)

    async def aget(self, namespace: tuple[str, ...], key: str) -> Item | None:
        """Async :meth:`get`."""
        return self.get(namespace, key)

    async def adelete(self, namespace: tuple[str, ...], key: str) -> None:
        """Async :meth:`delete`."""
        self.delete(namespace, key)

    async def asearch(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[Item]:
        """Async :meth:`search`."""
        return self.search(namespace_prefix, query=query, filter=filter, limit=limit, offset=offset)
