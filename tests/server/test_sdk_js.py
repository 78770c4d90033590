"""The real ``@langchain/langgraph-sdk`` under Node against a real ``handrail serve`` (SPEC §5.3).

``.ci/run`` installs the package from the npm registry into ``tests/server/js`` when it
is missing; elsewhere the test runs when Node.js and the package are there, and fails
under CI (``CI=true``) when they are not.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import Backend, make_token

JS = Path(__file__).resolve().parent / "js"


def node_or_skip() -> str:
    node = shutil.which("node")
    installed = (JS / "node_modules" / "@langchain" / "langgraph-sdk").is_dir()
    if node is None or not installed:
        why = "Node.js is missing" if node is None else f"run 'npm install' in {JS} (make test does)"
        if os.environ.get("CI"):
            pytest.fail(f"the JavaScript SDK test must run in CI: {why}")
        pytest.skip(why)
    return node


def test_the_javascript_sdk_streams_pauses_and_resumes(backend: Backend, served: str) -> None:
    node = node_or_skip()
    token = make_token(backend, "alice", "dba")
    done = subprocess.run(
        [node, "sdk_check.mjs", served, token],
        cwd=JS,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["assistant"] == "sql"
    assert seen["events"][0] == "metadata" and "updates" in seen["events"] and "messages" in seen["events"]
    assert seen["interrupts"][0]["value"]["action_requests"][0]["name"] == "execute_sql"
    assert seen["final"] == "done: ran DELETE FROM logs"
