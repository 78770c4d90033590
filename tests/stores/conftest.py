"""Fixtures of the store suite: every test runs against every backend.

``location`` is where a backend keeps threads (a fresh SQLite file, a fresh Postgres
schema); ``store`` is a saver there, sync or async, behind one awaitable interface.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from _stores import BACKENDS, REQUIRE_ENV, Location, Store, async_location_for, location_for, postgres_dsn


@pytest.fixture(scope="session")
def postgres() -> str:
    """The DSN of the test database; skips (or fails, if required) when it is unreachable."""
    dsn, problem = postgres_dsn()
    if problem is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but the Postgres tests cannot run: {problem}", pytrace=False)
        pytest.skip(problem)
    return dsn


def _dsn(request: pytest.FixtureRequest, backend: str) -> str | None:
    return request.getfixturevalue("postgres") if backend == "postgres" else None


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
