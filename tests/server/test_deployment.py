"""What the service tells and shows to whom, and how it starts (issue 23's deployment findings)."""

from __future__ import annotations

import os
import subprocess

import httpx
import pytest

from conftest import HANDRAIL, HERE, Backend, Service
from handrail.cli._service import masked_dsn


async def test_info_tells_an_anonymous_caller_only_the_version(
    service: Service, client: httpx.AsyncClient
) -> None:
    reply = await client.get("/info")
    assert reply.status_code == 200 and reply.json() == {"version": "0.1.0"}


async def test_no_api_docs_pages_load_scripts_from_elsewhere(
    service: Service, client: httpx.AsyncClient
) -> None:
    for path in ("/docs", "/redoc"):
        assert (await client.get(path)).status_code == 404
    assert (await client.get("/openapi.json")).json()["info"]["title"] == "handrail"


async def test_every_response_carries_a_content_security_policy(
    service: Service, client: httpx.AsyncClient
) -> None:
    headers = service.token("alice", "dba")
    for reply in (
        await client.get("/info"),
        await client.get("/handrail/inbox", headers=headers),
        await client.get("/handrail/inbox"),  # a 401 problem too
        await client.get("/inbox/signin"),  # a page keeps its own, stricter policy
    ):
        assert "default-src" in reply.headers["content-security-policy"], reply.url
        assert reply.headers["x-content-type-options"] == "nosniff"
    assert (await client.get("/info")).headers[
        "content-security-policy"
    ] == "default-src 'none'; frame-ancestors 'none'"


@pytest.mark.parametrize(
    "dsn, shown",
    [
        ("postgresql://app:s3cret@db/handrail", "postgresql://app:***@db/handrail"),
        (
            "postgresql://app:p%40ss@db:5432/h?sslmode=require",
            "postgresql://app:***@db:5432/h?sslmode=require",
        ),
        ("postgresql://app@db/handrail", "postgresql://app@db/handrail"),
        ("host=db user=app password=s3cret dbname=h", "host=db user=app password=*** dbname=h"),
        ("host=db PASSWORD = 'two words' dbname=h", "host=db PASSWORD = *** dbname=h"),
    ],
)
def test_a_dsn_is_printed_without_its_password(dsn: str, shown: str) -> None:
    assert masked_dsn(dsn) == shown


def test_serve_says_so_when_it_listens_beyond_this_machine_and_never_prints_the_password(
    backend: Backend,
) -> None:
    if backend.kind == "postgres":
        user, _, rest = str(backend.dsn).partition("@")
        flags = ["--postgres", f"{user}:not-the-password@{rest}", "--schema", backend.schema]
    else:
        flags = backend.store_flags()
    args = [*HANDRAIL, "serve", "served_agent:agent", *flags, "--port", "0", "--host", "0.0.0.0"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        args, cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            if "Create a first credential" in line:
                break
    finally:
        process.terminate()
        process.wait(timeout=30)
    said = "".join(lines)
    assert "Warning: listening on 0.0.0.0" in said and "TLS" in said, said
    assert "not-the-password" not in said
    if backend.kind == "postgres":
        assert ":***@" in said
