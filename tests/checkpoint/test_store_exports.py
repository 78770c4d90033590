"""The savers are importable from ``handrail``; Postgres only when its extra is installed."""

from __future__ import annotations

import subprocess
import sys

import pytest

import handrail
import handrail.checkpoint


def test_the_savers_are_public_names() -> None:
    from handrail import AsyncSqliteSaver, SqliteSaver

    assert handrail.checkpoint.SqliteSaver is SqliteSaver
    assert handrail.checkpoint.AsyncSqliteSaver is AsyncSqliteSaver
    assert {"SqliteSaver", "AsyncSqliteSaver"} <= set(handrail.__all__)
    pytest.importorskip("psycopg")
    from handrail import AsyncPostgresSaver, PostgresSaver
    from handrail.checkpoint import postgres

    assert (PostgresSaver, AsyncPostgresSaver) == (postgres.PostgresSaver, postgres.AsyncPostgresSaver)
    assert handrail.checkpoint.PostgresSaver is PostgresSaver
    with pytest.raises(AttributeError):
        handrail.NoSuchSaver  # type: ignore[attr-defined]  # noqa: B018


def test_without_psycopg_handrail_works_and_postgres_says_what_to_install() -> None:
    script = """
import sys
sys.modules["psycopg"] = None  # as if the postgres extra were not installed
sys.modules["psycopg_pool"] = None
import handrail
from handrail import *  # noqa
saver = handrail.SqliteSaver(":memory:")
saver.close()
for name in ("PostgresSaver", "AsyncPostgresSaver"):
    try:
        getattr(handrail, name)
    except ImportError as exc:
        print(exc)
    else:
        print("imported?!")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all("pip install 'handrail[postgres]'" in line for line in lines), lines
