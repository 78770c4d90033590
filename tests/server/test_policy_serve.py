"""``handrail serve --policy FILE`` (SPEC §5.4): the served agents' review policy from a policy
file, enforced on every channel; a bad file stops the service before it listens."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from conftest import HANDRAIL, HERE, Backend, make_token, serving

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

POLICY = """\
[agents.sql.interrupt_on]
write_file = false                         # the code reviews it; the file does not

[agents.sql.interrupt_on.execute_sql]
allowed_decisions = ["reject"]             # the code allows approve too
reviewers = ["ops"]                        # the code says dba
"""


def test_serve_takes_the_policy_of_a_policy_file_over_the_code(backend: Backend, tmp_path: Path) -> None:
    policy = tmp_path / "handrail.toml"
    policy.write_text(POLICY)
    dba, ops = make_token(backend, "dana", "dba"), make_token(backend, "olga", "ops")
    with serving(backend, "--policy", str(policy)) as url:
        run = {
            "assistant_id": "sql",
            "input": {"messages": [{"role": "user", "content": "DELETE FROM logs"}]},
        }
        thread = httpx.post(f"{url}/threads", json={}, headers={"x-api-key": ops}).json()["thread_id"]
        paused = httpx.post(
            f"{url}/threads/{thread}/runs/wait", json=run, headers={"x-api-key": ops}, timeout=60
        )
        (interrupt,) = paused.json()["__interrupt__"]
        assert interrupt["value"]["review_configs"][0]["allowed_decisions"] == ["reject"]
        answer = f"{url}/handrail/threads/{thread}/interrupts/{interrupt['id']}/answer"
        approve = {"answer": {"decisions": [{"type": "approve"}]}}
        assert httpx.post(answer, json=approve, headers={"x-api-key": dba}).status_code in (403, 404)
        refused = httpx.post(answer, json=approve, headers={"x-api-key": ops})
        assert refused.status_code == 422 and "Decision type 'approve' is not allowed" in refused.text
        reject = {"answer": {"decisions": [{"type": "reject", "message": "no"}]}}
        assert httpx.post(answer, json=reject, headers={"x-api-key": ops}).status_code == 202
        write = {
            "assistant_id": "sql",
            "input": {"messages": [{"role": "user", "content": "write notes.txt"}]},
        }
        other = httpx.post(f"{url}/threads", json={}, headers={"x-api-key": ops}).json()["thread_id"]
        done = httpx.post(
            f"{url}/threads/{other}/runs/wait", json=write, headers={"x-api-key": ops}, timeout=60
        )
        assert "__interrupt__" not in done.json()  # write_file is not reviewed under the file


def test_serve_refuses_a_bad_policy_file_naming_its_line_and_key(backend: Backend, tmp_path: Path) -> None:
    policy = tmp_path / "handrail.toml"
    policy.write_text(POLICY.replace("reviewers =", "reviewrs ="))
    args = ["serve", "served_agent:agent", *backend.store_flags(), "--port", "0", "--policy", str(policy)]
    done = subprocess.run([*HANDRAIL, *args], cwd=HERE, capture_output=True, text=True, timeout=60)
    said = " ".join((done.stdout + done.stderr).split())
    assert (
        done.returncode == 1
        and f"{policy}:6: agents.sql.interrupt_on.execute_sql.reviewrs: unknown key" in said
    )
    policy.write_text(POLICY.replace("execute_sql]", "drop_table]"))
    done = subprocess.run([*HANDRAIL, *args], cwd=HERE, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "agent 'sql' has no tool 'drop_table'" in " ".join(done.stderr.split())
