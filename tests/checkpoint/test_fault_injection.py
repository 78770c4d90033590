"""Rules 7, 9 and 18 under fault injection: SIGKILL at random moments of reviewed runs with
several tool calls a step, on SQLite and Postgres (``scripts/fault_injection.py``; the long
run is that script with more trials).

No non-idempotent call runs twice, every call that began without a saved result gets its
own ``outcome_unknown`` review, no pause is lost, and the log verifies.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="uses fork and SIGKILL")

TRIALS = 30


def _harness() -> ModuleType:
    path = Path(__file__).parents[2] / "scripts" / "fault_injection.py"
    spec = importlib.util.spec_from_file_location("fault_injection", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_random_kills_of_runs_with_several_calls_a_step_lose_nothing_and_repeat_nothing(
    request: pytest.FixtureRequest, backend: str, tmp_path: Path
) -> None:
    dsn = request.getfixturevalue("postgres_server") if backend == "postgres" else None
    tally = _harness().run(backend, TRIALS, tmp_path, dsn, seed=7)
    assert tally.failures == [], tally.failures
    assert tally.trials == TRIALS and tally.killed > TRIALS // 2
    assert tally.outcome_unknown > 0  # some kills did land inside a tools step


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize("scenario", ["races", "first-run"])
def test_answers_to_two_reviews_at_once_and_a_first_run_killed_after_its_input(
    request: pytest.FixtureRequest, backend: str, scenario: str, tmp_path: Path
) -> None:
    """Issue 24: both answers to two reviews of one thread are recorded and each call runs
    once; a first run killed right after its input is handed on by the next claim."""
    dsn = request.getfixturevalue("postgres_server") if backend == "postgres" else None
    tally = _harness().run(backend, 8, tmp_path, dsn, seed=7, scenarios=(scenario,))
    assert tally.failures == [], tally.failures
    if scenario == "races":
        assert tally.races == 8 and tally.race_answers == 16
    else:
        assert tally.first_runs == 8 and tally.taken_over == 8
