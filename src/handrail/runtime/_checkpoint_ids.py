"""Checkpoint ids: the public name of a thread's state after event ``seq``.

A checkpoint id is the event number, zero-padded to ten digits, so ids sort as the log
does and a client can hand one back (``get_state``, ``update_state``, history) to name
a point of the log. Nothing else is encoded in it.
"""

from __future__ import annotations

__all__ = ["checkpoint_id_of", "seq_of_checkpoint"]


def checkpoint_id_of(seq: int) -> str:
    """The public id of the checkpoint at event ``seq``."""
    return f"{seq:010d}"


def seq_of_checkpoint(checkpoint_id: str) -> int | None:
    """The event number a checkpoint id names, or None if it is not one of ours."""
    if isinstance(checkpoint_id, str) and checkpoint_id.isdigit() and len(checkpoint_id) == 10:
        return int(checkpoint_id)
    return None
