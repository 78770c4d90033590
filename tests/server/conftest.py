"""Fixtures for the service tests: the app over SQLite and PostgreSQL, clients, tokens."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import served_agent

from handrail.server import ServerDB, create_app

PG_DSN = os.environ.get("HANDRAIL_TEST_POSTGRES_DSN") or "postgresql://postgres@127.0.0.1:5432/test"


def postgres_or_skip() -> str:
    try:
        import psycopg

        with psycopg.connect(PG_DSN, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        if os.environ.get("HANDRAIL_REQUIRE_POSTGRES"):
            raise
        pytest.skip(f"PostgreSQL at {PG_DSN} is not reachable ({exc})")
    return PG_DSN


def drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


class Backend:
    """Where one test's service keeps its threads and tables."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.db_path = tmp_path / "handrail.db"
        self.schema = f"hr_test_{uuid.uuid4().hex[:16]}"
        self.dsn = postgres_or_skip() if kind == "postgres" else None
        self._closers: list[Any] = []

    def saver(self) -> Any:
        if self.kind == "postgres":
            from handrail.checkpoint.postgres import PostgresSaver

            saver = PostgresSaver.from_conn_string(self.dsn, schema=self.schema, pool_size=4)  # type: ignore[arg-type]
            saver.setup()
        else:
            from handrail.checkpoint.sqlite import SqliteSaver

            saver = SqliteSaver(self.db_path)
        self._closers.append(saver.close)
        return saver

    def server_db(self) -> ServerDB:
        db = (
            ServerDB.open(postgres=self.dsn, schema=self.schema)
            if self.kind == "postgres"
            else ServerDB.open(db_path=self.db_path)
        )
        self._closers.append(db.close)
        return db

    def store_flags(self) -> list[str]:
        if self.kind == "postgres":
            return ["--postgres", str(self.dsn), "--schema", self.schema]
        return ["--db", str(self.db_path)]

    def close(self) -> None:
        for close in reversed(self._closers):
            close()
        if self.kind == "postgres":
            drop_schema(self.schema)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    found = Backend(request.param, tmp_path)
    yield found
    found.close()


class Service:
    """The app of one test, its database and a way to make tokens."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.agent = served_agent.build(backend.saver())
        self.db = backend.server_db()
        self.app = create_app({"sql": self.agent}, db=self.db)
        self.tokens = self.app.state.service.tokens

    def token(self, name: str, *roles: str, scopes: tuple[str, ...] = ("run", "review")) -> dict[str, str]:
        """Headers with a new token for ``name``: ``roles``, and ``scopes`` (run and review
        unless given: what a test's application and reviewer both do)."""
        _, token = self.tokens.create(name, list(roles), list(scopes))
        return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def service(backend: Backend) -> AsyncIterator[Service]:
    served_agent.RAN.clear()
    found = Service(backend)
    yield found
    for run in list(found.app.state.service.runs.active.values()):
        if run.task is not None:
            run.task.cancel()


@pytest.fixture
async def client(service: Service) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=service.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://handrail.test") as found:
        yield found


HERE = Path(__file__).resolve().parent
HANDRAIL = [sys.executable, "-m", "handrail"]


def make_token(backend: Backend, name: str, *roles: str, scopes: tuple[str, ...] = ("run", "review")) -> str:
    """A token made by ``handrail tokens create`` (run and review unless ``scopes`` says)."""
    args = [
        *HANDRAIL,
        "tokens",
        "create",
        "--name",
        name,
        *(f"--role={r}" for r in roles),
        *(f"--scope={s}" for s in scopes),
        *backend.store_flags(),
    ]
    done = subprocess.run(args, capture_output=True, text=True, cwd=HERE, check=True, timeout=60)
    return done.stdout.strip().splitlines()[-1]


@contextmanager
def handrail_process(args: list[str], ready: str) -> Iterator[tuple[subprocess.Popen[str], re.Match[str]]]:
    """``python -m handrail ARGS`` from this folder, once a line of its output matches ``ready``;
    its output is drained (the pipe never fills up); it is stopped (SIGTERM) at the end."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [*HANDRAIL, *args], cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            found = re.search(ready, line)
            if found:
                break
        else:
            raise AssertionError(f"handrail {args[0]} stopped: " + "".join(lines))
        threading.Thread(target=process.stdout.read, daemon=True).start()
        yield process, found
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def working(backend: Backend, *flags: str) -> Iterator[subprocess.Popen[str]]:
    """A running ``handrail worker`` process for the served agent on the backend's store."""
    args = ["worker", "served_agent:agent", *backend.store_flags(), "--poll", "0.2", *flags]
    with handrail_process(args, "handrail worker for") as (process, _):
        yield process


@contextmanager
def serving(backend: Backend, *flags: str) -> Iterator[str]:
    """A running ``handrail serve`` process on the backend's store; yields its URL."""
    args = ["serve", "served_agent:agent", *backend.store_flags(), "--port", "0", *flags]
    with handrail_process(args, r"on (http://127\.0\.0\.1:\d+)") as (_, found):
        yield found.group(1)


@pytest.fixture
def served(backend: Backend) -> Iterator[str]:
    """A running ``handrail serve``; yields its URL."""
    with serving(backend) as url:
        yield url
