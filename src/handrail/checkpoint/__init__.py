"""Checkpointers: the store protocol and its backends.

``PostgresSaver`` and ``AsyncPostgresSaver`` are imported on first use, so handrail
works without psycopg; using them without it raises an ImportError that names the
``postgres`` extra. (They are left out of ``__all__`` for the same reason.) ``SqliteSaver``
and ``AsyncSqliteSaver`` load on first use too: an agent on another store never needs them.
"""

from typing import TYPE_CHECKING, Any

from handrail.checkpoint.base import (
    Append,
    BaseCheckpointSaver,
    DeletionRecord,
    PendingFilter,
    PendingItem,
    PendingOrder,
    PendingReview,
    StoredEvent,
    ThreadFilter,
    ThreadRead,
    ThreadRecord,
)
from handrail.checkpoint.memory import InMemorySaver, MemorySaver

if TYPE_CHECKING:
    from handrail.checkpoint.postgres import AsyncPostgresSaver as AsyncPostgresSaver
    from handrail.checkpoint.postgres import PostgresSaver as PostgresSaver
    from handrail.checkpoint.sqlite import AsyncSqliteSaver as AsyncSqliteSaver
    from handrail.checkpoint.sqlite import SqliteSaver as SqliteSaver

__all__ = [
    "Append",
    "AsyncSqliteSaver",
    "BaseCheckpointSaver",
    "DeletionRecord",
    "InMemorySaver",
    "MemorySaver",
    "PendingFilter",
    "PendingItem",
    "PendingOrder",
    "PendingReview",
    "SqliteSaver",
    "StoredEvent",
    "ThreadFilter",
    "ThreadRead",
    "ThreadRecord",
]


def __getattr__(name: str) -> Any:
    if name in ("SqliteSaver", "AsyncSqliteSaver"):
        from handrail.checkpoint import sqlite

        value = getattr(sqlite, name)
        globals()[name] = value
        return value
    if name in ("PostgresSaver", "AsyncPostgresSaver"):
        from handrail.checkpoint import postgres  # ImportError names the extra when psycopg is missing

        return getattr(postgres, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
