"""No client input gives a 500 (SPEC §5.3): random bodies against the answer and run paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import served_agent
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handrail.checkpoint.sqlite import SqliteSaver
from handrail.server import ServerDB, create_app

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
decisions = st.fixed_dictionaries(
    {
        "decisions": st.lists(
            st.fixed_dictionaries(
                {"type": st.sampled_from(["edit", "respond", "x"])},
                optional={"message": json_values, "edited_action": json_values},
            ),
            max_size=3,
        )
    }
)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path: Path = tmp_path_factory.mktemp("fuzz") / "h.db"
    agent = served_agent.build(SqliteSaver(path))
    app = create_app({"sql": agent}, db=ServerDB.open(db_path=path))
    headers = {"Authorization": "Bearer " + app.state.service.tokens.create("alice", ["dba"], ["admin"])[1]}
    with TestClient(app, raise_server_exceptions=True) as client:
        thread = client.post("/threads", json={}, headers=headers).json()["thread_id"]
        body = {"assistant_id": "sql", "input": {"messages": [{"role": "user", "content": "q"}]}}
        interrupt = client.post(f"/threads/{thread}/runs/wait", json=body, headers=headers).json()[
            "__interrupt__"
        ]
        yield client, headers, thread, interrupt[0]["id"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(answer=json_values | decisions, extra=st.dictionaries(st.sampled_from(["reviewer", "x"]), json_values))
def test_random_answers_never_give_a_500(setup: Any, answer: Any, extra: dict[str, Any]) -> None:
    client, headers, thread, interrupt_id = setup
    reply = client.post(
        f"/handrail/threads/{thread}/interrupts/{interrupt_id}/answer",
        json={"answer": answer, **extra},
        headers=headers,
    )
    assert reply.status_code in (400, 403, 404, 409, 422), reply.text
    assert reply.headers["content-type"] == "application/problem+json"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.dictionaries(
        st.sampled_from(
            [
                "assistant_id",
                "input",
                "command",
                "stream_mode",
                "config",
                "metadata",
                "context",
                "checkpoint_id",
            ]
        ),
        json_values,
    )
)
def test_random_run_requests_never_give_a_500(setup: Any, body: dict[str, Any]) -> None:
    client, headers, thread, _ = setup
    reply = client.post(f"/threads/{thread}/runs/wait", json=body, headers=headers)
    assert reply.status_code < 500, reply.text
