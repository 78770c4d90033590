"""The SDK examples of docs/service.md, run as they are against a real ``handrail serve``.

The page's ```python service``` and ```javascript service``` blocks are taken from the
page, their ``URL`` pointed at the service and ``TOKEN`` given, and run: the Python one
with the real ``langgraph-sdk``, the JavaScript one with the real
``@langchain/langgraph-sdk`` under Node (``tests/server/js``; ``make test`` installs it).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from test_sdk_js import JS, node_or_skip

from conftest import Backend, make_token, serving

PAGE = Path(__file__).resolve().parents[2] / "docs" / "service.md"
pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def block(language: str) -> str:
    found = re.findall(rf"^```{language} service\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)
    assert len(found) == 1, f"docs/service.md has {len(found)} '{language} service' blocks"
    return str(found[0])


def pointed(source: str, url: str) -> str:
    assert "http://127.0.0.1:8000" in source
    return source.replace("http://127.0.0.1:8000", url)


def test_the_python_sdk_example_runs_as_written(backend: Backend, capsys: pytest.CaptureFixture[str]) -> None:
    token = make_token(backend, "alice", "dba")
    with serving(backend, "--agent", "agent=served_agent:agent") as url:
        exec(compile(pointed(block("python"), url), "docs/service.md", "exec"), {"TOKEN": token})
    printed = capsys.readouterr().out
    assert "updates" in printed and "done: ran Delete old records" in printed


def test_the_javascript_sdk_example_runs_as_written(backend: Backend, tmp_path: Path) -> None:
    node = node_or_skip()
    token = make_token(backend, "alice", "dba")
    script = JS / f"docs_example_{tmp_path.name}.mjs"  # beside node_modules, so the import resolves
    with serving(backend, "--agent", "agent=served_agent:agent") as url:
        script.write_text(f"const TOKEN = {token!r};\n" + pointed(block("javascript"), url))
        try:
            done = subprocess.run([node, script.name], cwd=JS, capture_output=True, text=True, timeout=120)
        finally:
            script.unlink()
    assert done.returncode == 0, done.stderr
    assert "action_requests" in done.stdout  # the pause's value, printed by the loop
