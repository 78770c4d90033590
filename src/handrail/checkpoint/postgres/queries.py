"""All the SQL of the Postgres backend for one schema: the concept modules' operations together."""

from __future__ import annotations

from handrail.checkpoint.postgres.deletions import DeletionSQL
from handrail.checkpoint.postgres.feed import FeedSQL
from handrail.checkpoint.postgres.grants import GrantSQL
from handrail.checkpoint.postgres.liveness import LivenessSQL
from handrail.checkpoint.postgres.prune import PruneSQL
from handrail.checkpoint.postgres.read import ReadSQL
from handrail.checkpoint.postgres.repair import RepairSQL
from handrail.checkpoint.postgres.schema import SchemaSQL
from handrail.checkpoint.postgres.write import WriteSQL

__all__ = ["Queries"]


class Queries(SchemaSQL, WriteSQL, PruneSQL, ReadSQL, LivenessSQL, FeedSQL, DeletionSQL, RepairSQL, GrantSQL):
    """The SQL of every operation, for one schema (see each base class). No I/O."""
