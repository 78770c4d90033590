"""Two Python threads of one process, one shared Postgres saver, racing on one thread.

Issue 12, defect 2 (SPEC rule 8): the resume that wins must be told it won and its run
must complete; the loser gets :class:`~handrail.errors.ConflictError` and changes nothing,
and reading the thread meanwhile disturbs neither. Every append returns only once the
server has committed it, so no append is left for another caller to confirm.
"""

from __future__ import annotations

import inspect
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _stores import approve, build_agent, config, drop_schema, finished, log_lines, start

from handrail.checkpoint.base import BaseCheckpointSaver
from handrail.errors import ConflictError

pytest.importorskip("psycopg")
from handrail.checkpoint.postgres import AsyncPostgresSaver, PostgresSaver

ROUNDS = 25


@pytest.fixture
def schema(postgres: str) -> Iterator[str]:
    name = f"hr_test_{uuid.uuid4().hex[:16]}"
    yield name
    drop_schema(postgres, name)


def _race(saver: BaseCheckpointSaver, thread_id: str, log: Path) -> list[Any]:
    """Pause a run, then resume it from two threads at once; each keeps reading the thread
    until the other is done (as a reviewer's screen does). The two outcomes."""
    agents = [build_agent(saver, log) for _ in range(2)]
    interrupt_id = start(agents[0], thread_id)
    barrier = threading.Barrier(2)
    outcomes: list[Any] = [None, None]
    done = [threading.Event(), threading.Event()]

    def resume(n: int) -> None:
        barrier.wait()
        try:
            outcomes[n] = agents[n].invoke(approve(interrupt_id), config(thread_id))
        except ConflictError as exc:
            outcomes[n] = exc
        except BaseException as exc:  # anything else fails the test
            outcomes[n] = ("unexpected", exc)
        finally:
            done[n].set()
        while not done[1 - n].is_set():
            agents[n].get_state(config(thread_id))

    workers = [threading.Thread(target=resume, args=(n,)) for n in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return outcomes


def test_two_threads_sharing_a_saver_race_resumes_one_winner_whose_run_completes(
    postgres: str, schema: str, tmp_path: Path
) -> None:
    """Rule 8: of two resumes of one review raced by two threads on one saver, exactly one
    wins, its tool runs once and its run ends with nothing pending; the other gets
    ConflictError. Many rounds, each a new thread, so that the interleavings vary."""
    with PostgresSaver.from_conn_string(postgres, schema=schema, pool_size=4) as saver:
        for round_ in range(ROUNDS):
            thread_id, log = f"race{round_}", tmp_path / f"log{round_}"
            outcomes = _race(saver, thread_id, log)
            winners = [o for o in outcomes if isinstance(o, dict)]
            losers = [o for o in outcomes if isinstance(o, ConflictError)]
            assert (len(winners), len(losers)) == (1, 1), f"round {round_}: {outcomes!r}"
            assert finished(winners[0]), f"round {round_}: the winner's run stopped half-way"
            assert log_lines(log) == [thread_id]  # the tool ran once
            state = build_agent(saver, log).get_state(config(thread_id))
            assert state.next == () and not state.interrupts, f"round {round_}: {state.next!r}"
            assert finished(state.values)


def test_no_postgres_append_can_be_left_unconfirmed() -> None:
    """Defect 2's cause is gone: neither saver's append takes ``wait`` (it takes one
    :class:`Append`), so the runtime never sends a save it does not wait for, and no later
    call has an earlier call's answer to read."""
    for method in (PostgresSaver.append, AsyncPostgresSaver.append, AsyncPostgresSaver.aappend):
        assert "wait" not in inspect.signature(method).parameters
    assert not hasattr(PostgresSaver, "_confirm") and not hasattr(PostgresSaver, "_park")
