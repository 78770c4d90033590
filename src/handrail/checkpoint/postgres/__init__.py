"""PostgresSaver and AsyncPostgresSaver: the store protocol in PostgreSQL (psycopg 3).

Install with ``pip install 'handrail[postgres]'`` (psycopg 3 and psycopg_pool).

The backend, one concept a module:

- :mod:`~handrail.checkpoint.postgres._schema`: the tables, their migrations (SQL, or a
  step in Python), and setup, one transaction under an advisory lock.
- :mod:`~handrail.checkpoint.postgres._write`: the write path. An append is one statement
  (one round trip, one transaction) that moves the thread's head or raises a conflict,
  its rows sealed (``checkpoint/seals.py``); the one thing the saver remembers between
  appends. :mod:`~handrail.checkpoint.postgres._prune`: pruning.
- :mod:`~handrail.checkpoint.postgres._deletions`: deleting a thread, and the record of
  it that stays (SPEC rule 21), written in the same transaction.
- :mod:`~handrail.checkpoint.postgres._grants`: grants (SPEC rule 16): added in an
  append's transaction, each use spent by one conditional ``UPDATE`` (race-safe under
  READ COMMITTED), listed, revoked; a thread's deletion leaves them.
- :mod:`~handrail.checkpoint.postgres._read`: reads (one statement, one snapshot) and the
  reviewers' inbox (one index walked in page order), every row checked against its seal.
- :mod:`~handrail.checkpoint.postgres._repair`: a thread's rows rebuilt from its log.
- :mod:`~handrail.checkpoint.postgres._liveness`: run liveness (SPEC rule 9), advisory
  locks that die with their connection.
- :mod:`~handrail.checkpoint.postgres._queries`: all of the above for one schema. Every
  operation is written once, as a generator that yields batches of SQL and receives
  their results, with no I/O (:mod:`~handrail.checkpoint.postgres._base`).
- :mod:`~handrail.checkpoint.postgres._core`: the saver, written once for both: its rules
  (connections, setup, the liveness lock, what it remembers, waits, closing, locks) at
  the top, and the steps that keep them; each step is a generator that a driver runs.
  :mod:`~handrail.checkpoint.postgres._protocol`: the store protocol's methods, each a
  step, made into sync and async methods.
- :mod:`~handrail.checkpoint.postgres._drivers`: run the steps, with blocking psycopg calls
  or on an event loop, with psycopg's public API only (``execute``, prepared by psycopg
  after ``prepare_threshold`` runs; several statements in pipeline mode).
  :mod:`~handrail.checkpoint.postgres._connect`: open connections, failing fast with the
  server named when it cannot be reached.
- :mod:`~handrail.checkpoint.postgres._sync` and :mod:`~handrail.checkpoint.postgres._aio`:
  the savers, facades that say which driver runs them and what is their own.

Example::

    from handrail import PostgresSaver, create_agent

    with PostgresSaver.from_conn_string("postgresql://localhost/app") as saver:
        agent = create_agent(model, tools, middleware=[...], checkpointer=saver)
"""

from __future__ import annotations

try:
    import psycopg  # noqa: F401
    import psycopg_pool  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "PostgresSaver and AsyncPostgresSaver need psycopg 3 and psycopg_pool: "
        "pip install 'handrail[postgres]'"
    ) from exc

from handrail.checkpoint.postgres._aio import AsyncPostgresSaver
from handrail.checkpoint.postgres._connect import CONNECT_TIMEOUT, PREPARE_THRESHOLD
from handrail.checkpoint.postgres._sync import PostgresSaver

__all__ = ["CONNECT_TIMEOUT", "PREPARE_THRESHOLD", "AsyncPostgresSaver", "PostgresSaver"]
