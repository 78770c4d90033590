"""What a Postgres saver remembers of its own appends: which deletes the next one can leave out."""

from __future__ import annotations

from handrail.checkpoint.base import ThreadRecord

__all__ = ["Cleared"]


class Cleared:
    """What this saver's own last append left in a thread's pending tables, at which head.

    An append at that head and epoch finds exactly that (another writer would have
    moved the head, and the append's head check would fail), so its statement leaves
    out the deletes that would find nothing: fewer tables for the server to open.

    What keeps it safe: it is only a hint about which deletes to leave out, never a
    reason to skip the head check, which every append's statement makes on the server.
    It is recorded only after the server committed the append, and forgotten when an
    append fails or the thread is deleted. Raced by
    ``test_an_append_leaves_out_the_deletes_only_where_no_review_can_be_pending`` (another
    saver moves the head) and ``test_postgres_races.py`` (two threads on one saver).
    """

    __slots__ = ("heads",)
    LIMIT = 4096  # threads remembered; an older one just takes the full statement

    def __init__(self) -> None:
        self.heads: dict[str, tuple[int, str, int]] = {}

    def rows_at(self, thread_id: str, expected_seq: int, epoch: str) -> int:
        """``clear`` for :meth:`Queries.append`: 2 (anything) unless known better."""
        known = self.heads.get(thread_id)
        return known[2] if known is not None and known[:2] == (expected_seq, epoch) else 2

    def appended(self, thread_id: str, record: ThreadRecord) -> None:
        heads = self.heads
        heads.pop(thread_id, None)  # re-insert: the dict's order is the order of use
        rows = 0 if not record.pending else (2 if record.metadata else 1)
        heads[thread_id] = (record.head_seq, record.epoch, rows)
        if len(heads) > self.LIMIT:
            heads.pop(next(iter(heads)), None)

    def forget(self, thread_id: str) -> None:
        self.heads.pop(thread_id, None)
