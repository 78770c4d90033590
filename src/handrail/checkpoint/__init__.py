"""Checkpointers: the store protocol and its backends."""

from handrail.checkpoint.base import (
    BaseCheckpointSaver,
    PendingFilter,
    PendingItem,
    PendingReview,
    StoredEvent,
    ThreadFilter,
    ThreadRead,
    ThreadRecord,
)
from handrail.checkpoint.memory import InMemorySaver, MemorySaver

__all__ = [
    "BaseCheckpointSaver",
    "InMemorySaver",
    "MemorySaver",
    "PendingFilter",
    "PendingItem",
    "PendingReview",
    "StoredEvent",
    "ThreadFilter",
    "ThreadRead",
    "ThreadRecord",
]
