"""`make test`'s runner: set up the real parts the tests use, say what is missing, run pytest.

The suite talks to real parts where users use real parts: a PostgreSQL server, PgBouncer,
a headless Chromium, and Node with the LangGraph SDK, the MCP SDK and axe-core from the npm
registry.
On a fresh clone nothing but Python is set up, so before pytest this script:

1. finds PostgreSQL at ``$HANDRAIL_TEST_POSTGRES_DSN`` (default
   ``postgresql://postgres@127.0.0.1:5432/test``), starts the local cluster with
   ``pg_ctlcluster`` when it is installed but down, and creates the database when the
   server is up without it;
2. installs Debian's ``chromium`` and ``pgbouncer`` (and ``nodejs``/``npm``) with
   ``apt-get`` when they are missing and this process may (root, apt-get present);
3. installs the pinned npm packages (``npm ci`` from each ``package-lock.json``) into the
   folders the tests own, ``tests/server/js``, ``tests/server/web/js`` and ``tests/mcp/js``;
4. prints one line that says what could not be set up and which tests skip for it;
5. runs pytest over the suite in parallel (pytest-xdist), with a summary of every skip.

The tests marked ``serial`` (they read server-wide figures that other tests change) run
after the others, alone. Two jobs: by default every test but the slow ones (marked
``slow`` in tests/conftest.py: Chromium, several processes, long fault runs); ``--slow``
runs only those (``make test-slow``), ``--all`` runs both at once. CI runs both jobs.
Other arguments go to pytest: ``make test PYTEST_ARGS="-k gate"``.
``HANDRAIL_TEST_WORKERS`` sets the number of pytest processes (default: one per core, at
least 2; ``0`` runs in this process). More than one per core gains little (the suite is
busy on the CPU) and the PostgreSQL tests of many workers at once can pass the server's
``max_connections``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
NPM_FOLDERS = {
    "tests/server/js": "@langchain/langgraph-sdk",
    "tests/server/web/js": "axe-core",
    "tests/mcp/js": "@modelcontextprotocol/sdk",
}


def _quiet(*command: str, timeout: float = 600, cwd: Path | None = None) -> bool:
    """Run a setup command, its output kept out of the way; True when it succeeded."""
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _may_install() -> bool:
    return shutil.which("apt-get") is not None and hasattr(os, "geteuid") and os.geteuid() == 0


def _apt_install(*packages: str) -> bool:
    """``apt-get install`` the packages, after ``apt-get update`` if the first try fails."""
    if not _may_install():
        return False
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}

    def install() -> bool:
        try:
            done = subprocess.run(
                ["apt-get", "install", "-y", *packages],
                capture_output=True,
                env=env,
                timeout=900,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return done.returncode == 0

    return install() or (_quiet("apt-get", "update", timeout=600) and install())


def _postgres_problem(dsn: str) -> str | None:
    """None when the test database answers at ``dsn``; else why not, after trying to fix it."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed"

    def problem() -> str | None:
        try:
            with psycopg.connect(dsn, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error as exc:
            return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return None

    why = problem()
    if why is None:
        return None
    clusters = Path("/etc/postgresql")
    if "does not exist" not in why and clusters.is_dir() and shutil.which("pg_ctlcluster"):
        for version in sorted(p.name for p in clusters.iterdir()):
            _quiet("pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start", timeout=60)
        for _ in range(20):
            why = problem()
            if why is None or "does not exist" in why:
                break
            time.sleep(0.5)
    if why is not None and "does not exist" in why:  # the server is up, the database is not
        database = dsn.rsplit("/", 1)[-1].split("?", 1)[0]
        try:
            with psycopg.connect(
                dsn.rsplit("/", 1)[0] + "/postgres", autocommit=True, connect_timeout=3
            ) as conn:
                conn.execute(f'CREATE DATABASE "{database}"')
        except psycopg.Error:
            pass
        why = problem()
    return why


def _program(name: str, path: str, packages: tuple[str, ...]) -> str | None:
    """None when ``path`` exists (installing ``packages`` when it does not); else why not."""
    if Path(path).exists():
        return None
    if not _may_install():
        return f"{path} is missing (apt-get install {' '.join(packages)}, as root)"
    if _apt_install(*packages) and Path(path).exists():
        return None
    return f"apt-get install {' '.join(packages)} failed"


def _npm_problems() -> dict[str, str]:
    """Install each test folder's pinned npm packages; what could not be, by folder."""
    problems: dict[str, str] = {}
    if shutil.which("npm") is None and not (_apt_install("nodejs", "npm") and shutil.which("npm")):
        return {folder: "npm is missing (apt-get install nodejs npm)" for folder in NPM_FOLDERS}
    for folder, package in NPM_FOLDERS.items():
        where = ROOT / folder
        installed = where / "node_modules" / package / "package.json"
        lock = where / "package-lock.json"
        if installed.exists() and installed.stat().st_mtime >= lock.stat().st_mtime:
            continue
        if not _quiet("npm", "ci", "--no-audit", "--no-fund", "--silent", cwd=where, timeout=600):
            problems[folder] = "npm ci failed (is the npm registry reachable?)"
    return problems


def set_up() -> list[str]:
    """Set up what can be; one phrase per part that could not, naming the tests it skips."""
    missing: list[str] = []
    dsn = os.environ.setdefault("HANDRAIL_TEST_POSTGRES_DSN", DEFAULT_DSN)
    why = _postgres_problem(dsn)
    if why is not None:
        missing.append(f"PostgreSQL at {dsn} ({why}): the PostgreSQL store, service and PgBouncer tests skip")
    why = _program("Chromium", "/usr/bin/chromium", ("chromium",))
    if why is not None:
        missing.append(f"Chromium ({why}): the browser tests (tests/server/web) skip")
    why = _program("PgBouncer", "/usr/sbin/pgbouncer", ("pgbouncer",))
    if why is not None:
        missing.append(f"PgBouncer ({why}): the store tests through PgBouncer skip")
    for folder, why in _npm_problems().items():
        which = {
            "tests/server/js": "the JavaScript SDK tests",
            "tests/mcp/js": "the MCP gateway's TypeScript client tests",
        }.get(folder, "the accessibility checks")
        missing.append(f"{folder} ({why}): {which} skip")
    return missing


def _workers() -> int:
    given = os.environ.get("HANDRAIL_TEST_WORKERS", "")
    if given.strip().isdigit():
        return int(given)
    return max(2, os.cpu_count() or 1)


JOBS = {  # which tests each job runs, as a pytest -m expression
    None: "not slow",
    "--slow": "slow",
    "--all": "",
}
NO_TESTS = 5  # pytest's exit code when nothing was selected


def _and(*parts: str) -> list[str]:
    given = [f"({p})" for p in parts if p]
    return ["-m", " and ".join(given)] if given else []


def main(argv: list[str]) -> int:
    args = argv[1:]
    job = args.pop(0) if args[:1] and args[0] in JOBS else None
    if args[:1] == ["--"]:
        args = args[1:]
    missing = set_up()
    name = "make test-slow" if job == "--slow" else "make test"
    if missing:
        print(f"{name}: could not set up " + "; ".join(missing) + ".", flush=True)
    else:
        print(f"{name}: PostgreSQL, PgBouncer, Chromium and the npm packages are ready.", flush=True)
    if job is None:
        print(
            "make test: the slow tests (Chromium, several processes, fault runs) are left to "
            "'make test-slow'; CI runs both.",
            flush=True,
        )
    workers = _workers()
    pytest = [sys.executable, "-m", "pytest", "-rs"]
    # Bytecode and pytest's rewritten test modules are cached (in __pycache__, which git
    # ignores) even where PYTHONDONTWRITEBYTECODE is set: without the cache each pytest
    # process compiles some 700 modules again, 7 s of every collection.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    if workers == 0:
        return subprocess.call([*pytest, *_and(JOBS[job]), *args], cwd=ROOT)
    # in parallel, then the tests that read server-wide figures (marked serial) alone
    parallel = ["-n", str(workers), "--dist", "loadgroup"]
    first = subprocess.call([*pytest, *parallel, *_and(JOBS[job], "not serial"), *args], cwd=ROOT)
    alone = subprocess.call([*pytest, "-p", "no:xdist", *_and(JOBS[job], "serial"), *args], cwd=ROOT)
    if first == NO_TESTS or alone == NO_TESTS:
        return alone if first == NO_TESTS else first
    return first or alone


if __name__ == "__main__":
    sys.exit(main(sys.argv))
