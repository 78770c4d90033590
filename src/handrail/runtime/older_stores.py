"""Stores written before some of the protocol's keywords: what the runtime passes them.

The store protocol (``checkpoint/base.py``) took keywords after the first stores were
written. The runtime passes each only to a store whose method takes it (:func:`takes`),
and a store that does not keeps working without what the keyword brings:

``append(durable=)``
    every append waits for the disk (``commit.py``, rule 4);
``append(reading=)``, ``read(from_reading=)``
    no saved readings: a new process reads the thread's whole log (docs/production.md);
``append(notices=, queue=)``
    no feed, so no notifications and no queue for workers;
``delete_thread(by=)``
    the thread is deleted and no record of the deletion is kept (docs/state.md, SPEC
    rule 21).

These are promises to stores written outside this repository; every store in it takes
all of them.
"""

from __future__ import annotations

import functools
import inspect

from handrail.checkpoint.base import BaseCheckpointSaver

__all__ = ["takes"]


@functools.cache
def takes(store_type: type[BaseCheckpointSaver], method: str, keyword: str) -> bool:
    """Whether a store's ``method`` takes ``keyword`` (worked out once per store type)."""
    # an async twin may hand everything to the sync method (the defaults do): both must take it
    twin = method[1:] if method.startswith("a") and hasattr(BaseCheckpointSaver, method[1:]) else None
    methods = (method, twin) if twin else (method,)
    return all(
        any(p.name == keyword or p.kind is p.VAR_KEYWORD for p in inspect.signature(m).parameters.values())
        for m in (getattr(store_type, name) for name in methods)
    )
