"""Notifications: reviews reach reviewers where they are (SPEC rule 17, §5.4).

Every review requested, decided, expired or found ``outcome_unknown`` (and a run's end)
is delivered at least once to each endpoint that takes it: signed webhooks, Slack, email.
The store's feed, written in the same transaction as the events, is the outbox; each
endpoint keeps a cursor into it and a delivery state per event (:mod:`.outbox`). A
deliverer (inside ``handrail serve``, or ``handrail deliver``) sends them
(:mod:`.deliverer`). See ``docs/notifications.md``.

Example::

    from handrail.notify import Deliverer, Outbox, default_channels
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from handrail.notify.channels import Delivery, Endpoint, Sent
    from handrail.notify.deliverer import Deliverer, default_channels
    from handrail.notify.events import EVENT_TYPES
    from handrail.notify.outbox import Outbox

__all__ = ["EVENT_TYPES", "Deliverer", "Delivery", "Endpoint", "Outbox", "Sent", "default_channels"]

_WHERE = {
    "Delivery": "handrail.notify.channels",
    "Endpoint": "handrail.notify.channels",
    "Sent": "handrail.notify.channels",
    "Deliverer": "handrail.notify.deliverer",
    "default_channels": "handrail.notify.deliverer",
    "EVENT_TYPES": "handrail.notify.events",
    "Outbox": "handrail.notify.outbox",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'handrail.notify' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
