"""Fixtures of the store suite: every test runs against every backend.

``location`` is where a backend keeps threads (a fresh SQLite file, a fresh Postgres
schema); ``store`` is a saver there, sync or async, behind one awaitable interface.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from _pgbouncer import REQUIRE_PGBOUNCER_ENV, Unavailable, running_pgbouncer
from _stores import (
    BACKENDS,
    PGBOUNCER,
    REQUIRE_ENV,
    Location,
    Store,
    async_location_for,
    location_for,
    postgres_dsn,
)


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The DSN of the test database; skips (or fails, if required) when it is unreachable."""
    dsn, problem = postgres_dsn()
    if problem is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but the Postgres tests cannot run: {problem}", pytrace=False)
        pytest.skip(problem)
    return dsn


@pytest.fixture(scope="session")
def pgbouncer(postgres_server: str) -> Iterator[str]:
    """The DSN of the test database through a PgBouncer of the session's own (transaction
    pooling); skips (or fails, with HANDRAIL_REQUIRE_PGBOUNCER=1) when it cannot run."""
    try:
        with running_pgbouncer(postgres_server) as dsn:
            yield dsn
    except Unavailable as exc:
        if os.environ.get(REQUIRE_PGBOUNCER_ENV) == "1":
            pytest.fail(f"{REQUIRE_PGBOUNCER_ENV}=1 but PgBouncer cannot run: {exc}", pytrace=False)
        pytest.skip(str(exc))


@pytest.fixture(params=["postgres", PGBOUNCER])
def postgres(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The DSN of the test database, directly and then through PgBouncer: the tests that
    take it (the Postgres savers' own) run both ways. Through PgBouncer (1.18 here, no
    ``max_prepared_statements``) every connection a test opens has ``prepare_threshold=None``,
    as the production guide tells users of such a pooler."""
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_server"))
    dsn = str(request.getfixturevalue("pgbouncer"))
    without_prepared_statements(monkeypatch)
    return dsn


def without_prepared_statements(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every psycopg connection opened from here on take ``prepare_threshold=None``."""
    import psycopg

    for cls in (psycopg.Connection, psycopg.AsyncConnection):
        connect = cls.connect.__func__  # type: ignore[attr-defined]

        def patched(klass: Any, *args: Any, __connect: Any = connect, **kwargs: Any) -> Any:
            kwargs["prepare_threshold"] = None
            return __connect(klass, *args, **kwargs)

        monkeypatch.setattr(cls, "connect", classmethod(patched))
    monkeypatch.setattr(psycopg, "connect", psycopg.Connection.connect)


@pytest.fixture
def behind_pgbouncer(request: pytest.FixtureRequest, postgres: str) -> bool:
    """Whether this run of a test goes through PgBouncer (see ``postgres``)."""
    return bool(request.node.callspec.params.get("postgres") == PGBOUNCER)


def _dsn(request: pytest.FixtureRequest, backend: str) -> str | None:
    if backend == PGBOUNCER:
        return str(request.getfixturevalue("pgbouncer"))
    return str(request.getfixturevalue("postgres_server")) if backend == "postgres" else None


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=[b for b in BACKENDS if b != "memory"])
def durable(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def location(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> Iterator[Location]:
    """Where the backend keeps threads; sync savers opened here are closed afterwards."""
    with location_for(backend, tmp_path, _dsn(request, backend)) as place:
        yield place


@pytest.fixture
def durable_location(request: pytest.FixtureRequest, durable: str, tmp_path: Path) -> Iterator[Location]:
    with location_for(durable, tmp_path, _dsn(request, durable)) as place:
        yield place


@pytest.fixture
async def alocation(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> AsyncIterator[Location]:
    """Like ``location``, for async savers (closed with ``aclose`` in the test's loop)."""
    async with async_location_for(backend, tmp_path, _dsn(request, backend)) as place:
        yield place


@pytest.fixture
async def adurable_location(
    request: pytest.FixtureRequest, durable: str, tmp_path: Path
) -> AsyncIterator[Location]:
    async with async_location_for(durable, tmp_path, _dsn(request, durable)) as place:
        yield place


@pytest.fixture(params=["sync", "async"])
async def store(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> AsyncIterator[Store]:
    """A saver of each backend, sync and async, behind one awaitable interface."""
    async with async_location_for(backend, tmp_path, _dsn(request, backend)) as place:
        if request.param == "async":
            yield Store(await place.asaver(), True, place)
        else:
            yield Store(place.saver(), False, place)
