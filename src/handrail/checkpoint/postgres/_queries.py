"""All the SQL of the Postgres backend for one schema: the concept modules' operations together."""

from __future__ import annotations

from handrail.checkpoint.postgres._deletions import DeletionSQL
from handrail.checkpoint.postgres._feed import FeedSQL
from handrail.checkpoint.postgres._grants import GrantSQL
from handrail.checkpoint.postgres._liveness import LivenessSQL
from handrail.checkpoint.postgres._prune import PruneSQL
from handrail.checkpoint.postgres._read import ReadSQL
from handrail.checkpoint.postgres._repair import RepairSQL
from handrail.checkpoint.postgres._schema import SchemaSQL
from handrail.checkpoint.postgres._write import WriteSQL

__all__ = ["Queries"]


class Queries(SchemaSQL, WriteSQL, PruneSQL, ReadSQL, LivenessSQL, FeedSQL, DeletionSQL, RepairSQL, GrantSQL):
    """The SQL of every operation, for one schema (see each base class). No I/O."""
