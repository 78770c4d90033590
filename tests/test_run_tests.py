"""``make test``'s runner (scripts/run_tests.py): it says before the tests what it could not
set up and which tests skip for it, and runs them in parallel (issue 25 item 9)."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_tests", ROOT / "scripts" / "run_tests.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_what_could_not_be_set_up_is_named_with_the_tests_it_skips(
    runner: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(runner, "_postgres_problem", lambda dsn: "connection refused")
    monkeypatch.setattr(
        runner, "_program", lambda name, path, packages: None if name == "PgBouncer" else "missing"
    )
    monkeypatch.setattr(runner, "_npm_problems", lambda: {"tests/server/js": "npm ci failed"})
    ran: list[list[str]] = []
    monkeypatch.setattr(runner.subprocess, "call", lambda command, cwd: ran.append(command) or 0)
    monkeypatch.setenv("HANDRAIL_TEST_WORKERS", "3")
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # restored after: main() drops it for pytest
    assert runner.main(["run_tests.py", "--", "-k", "gate"]) == 0
    assert "PYTHONDONTWRITEBYTECODE" not in runner.os.environ  # pytest may cache what it compiles
    line, slow = capsys.readouterr().out.splitlines()
    assert "left to 'make test-slow'; CI runs both" in slow
    assert line.startswith("make test: could not set up PostgreSQL at ")
    assert "connection refused" in line and "the PostgreSQL store, service and PgBouncer tests skip" in line
    assert "Chromium (missing): the browser tests (tests/server/web) skip" in line
    assert "the JavaScript SDK tests skip" in line and "PgBouncer (" not in line
    parallel, alone = ran
    expected = ["-m", "pytest", "-rs", "-n", "3", "--dist", "loadgroup", "-m", "(not slow) and (not serial)"]
    assert parallel[1:] == [*expected, "-k", "gate"]
    assert alone[1:] == [
        "-m",
        "pytest",
        "-rs",
        "-p",
        "no:xdist",
        "-m",
        "(not slow) and (serial)",
        "-k",
        "gate",
    ]


def test_everything_ready_is_said_in_one_line_and_no_workers_runs_in_one_process(
    runner: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(runner, "_postgres_problem", lambda dsn: None)
    monkeypatch.setattr(runner, "_program", lambda name, path, packages: None)
    monkeypatch.setattr(runner, "_npm_problems", dict)
    ran: list[list[str]] = []
    monkeypatch.setattr(runner.subprocess, "call", lambda command, cwd: ran.append(command) or 0)
    monkeypatch.setenv("HANDRAIL_TEST_WORKERS", "0")
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    assert runner.main(["run_tests.py", "--slow"]) == 0
    assert capsys.readouterr().out == (
        "make test-slow: PostgreSQL, PgBouncer, Chromium and the npm packages are ready.\n"
    )
    assert ran[0][1:] == ["-m", "pytest", "-rs", "-m", "(slow)"]
    assert runner.main(["run_tests.py", "--all", "-x"]) == 0
    assert ran[1][1:] == ["-m", "pytest", "-rs", "-x"]


def test_a_job_fails_when_either_phase_fails_and_an_empty_phase_is_no_failure(
    runner: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "set_up", list)
    monkeypatch.setenv("HANDRAIL_TEST_WORKERS", "2")
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    for codes, expected in [((0, 5), 0), ((5, 0), 0), ((1, 5), 1), ((0, 1), 1), ((5, 5), 5), ((2, 0), 2)]:
        monkeypatch.setattr(
            runner.subprocess, "call", lambda command, cwd, replies=iter(codes): next(replies)
        )
        assert runner.main(["run_tests.py"]) == expected, codes


def test_a_database_missing_on_a_running_server_is_created(runner: ModuleType) -> None:
    """The runner creates the test database when the server answers without it."""
    import os

    psycopg: Any = pytest.importorskip("psycopg")
    base = os.environ.get("HANDRAIL_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
    server = base.rsplit("/", 1)[0]
    try:
        with psycopg.connect(server + "/postgres", autocommit=True, connect_timeout=3) as conn:
            conn.execute('DROP DATABASE IF EXISTS "handrail_run_tests_check"')
    except psycopg.Error as exc:
        if os.environ.get("HANDRAIL_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL at {server} cannot be used: {exc}")
        pytest.skip(f"PostgreSQL at {server} is not reachable ({exc})")
    try:
        assert runner._postgres_problem(server + "/handrail_run_tests_check") is None
    finally:
        with psycopg.connect(server + "/postgres", autocommit=True) as conn:
            conn.execute('DROP DATABASE IF EXISTS "handrail_run_tests_check"')


def test_the_npm_packages_are_pinned_by_lockfiles_in_the_repository() -> None:
    for folder in ("tests/server/js", "tests/server/web/js", "tests/mcp/js"):
        lock = ROOT / folder / "package-lock.json"
        assert lock.exists(), lock
        tracked = subprocess.run(
            ["git", "ls-files", "--error-unmatch", str(lock)], cwd=ROOT, capture_output=True, check=False
        )
        assert tracked.returncode == 0 or not (ROOT / ".git").exists(), f"{lock} is not in git"


def test_the_makefile_runs_the_tests_through_the_runner_and_ci_runs_both_jobs() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.partition("\ntest: ")[2].partition("\n\n")[0]
    assert "scripts/run_tests.py" in recipe
    assert "scripts/run_tests.py --slow" in makefile.partition("\ntest-slow: ")[2].partition("\n\n")[0]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "make test" in ci and "make test-slow" in ci


def test_every_slow_module_exists() -> None:
    # by path: under pytest-xdist the name "conftest" may be another folder's
    spec = importlib.util.spec_from_file_location("tests_conftest", ROOT / "tests" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert all((ROOT / path).is_file() for path in module.SLOW_MODULES), module.SLOW_MODULES
