"""schemathesis against the service's own OpenAPI document: no 500s, responses as documented.

Every operation but the live inbox (a stream that never ends) gets a bounded number of
generated requests (:data:`EXAMPLES`), each sent with a credential of each scope - run,
review, admin - on a SQLite store holding one paused thread (SPEC §5.3: no client input
gives a 500). The request bodies are typed (``server/_bodies.py``) and the document names
the served assistants, so generated runs reach the agent. handrail's own paths
(``/handrail/...``) document their answers, problem details for 400, 401, 403, 404, 409,
413 and 422 included, so their responses are checked against the document too: status,
content type, headers and body schema.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

import schemathesis
import served_agent
from hypothesis import HealthCheck, settings

from handrail.checkpoint.sqlite import SqliteSaver
from handrail.server import ServerDB, create_app

EXAMPLES = 10
_FOLDER = Path(tempfile.mkdtemp(prefix="handrail-schemathesis-"))
atexit.register(shutil.rmtree, _FOLDER, True)
_AGENT = served_agent.build(SqliteSaver(_FOLDER / "h.db"))
APP = create_app({"sql": _AGENT}, db=ServerDB.open(db_path=_FOLDER / "h.db"))
TOKENS = {
    scope: APP.state.service.tokens.create(f"fuzzer-{scope}", ["dba"], [scope])[1]
    for scope in ("run", "review", "admin")
}
TOKEN = TOKENS["admin"]
_AGENT.invoke({"messages": ["DELETE FROM logs"]}, {"configurable": {"thread_id": "paused"}})

# The live inbox never ends by itself.
schema = schemathesis.openapi.from_asgi("/openapi.json", APP).exclude(path_regex=r"/handrail/events$")


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_service_never_answers_500(case: Any) -> None:
    """Each generated request, sent with a run, a review and an admin credential."""
    for scope, token in TOKENS.items():
        response = case.call(headers={"Authorization": f"Bearer {token}"})
        assert response.status_code < 500, (scope, case.method, case.path, response.text)
        case.validate_response(response, checks=[schemathesis.checks.not_a_server_error])


def test_the_document_types_every_body_the_service_reads() -> None:
    """No operation takes an untyped body: schemathesis generates each one from its model."""
    document = APP.openapi()
    untyped = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body is not None and "$ref" not in str(body["schema"]):
                untyped.append(f"{method.upper()} {path}")
    assert untyped == []
    run = document["components"]["schemas"]["RunBody"]
    assert run["properties"]["assistant_id"]["enum"] == ["sql"] and run["additionalProperties"] is False


OWN = (
    schemathesis.openapi.from_asgi("/openapi.json", APP)
    .include(path_regex=r"^/handrail/")
    .exclude(path_regex=r"/handrail/events$")
)
CONFORMANCE = [
    schemathesis.checks.not_a_server_error,
    schemathesis.checks.status_code_conformance,
    schemathesis.checks.content_type_conformance,
    schemathesis.checks.response_headers_conformance,
    schemathesis.checks.response_schema_conformance,
]


@OWN.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_handrail_paths_answer_as_their_openapi_document_says(case: Any) -> None:
    """SPEC §5.3: every answer, errors included, is one the document describes."""
    response = case.call(headers={"Authorization": f"Bearer {TOKEN}"})
    case.validate_response(response, checks=CONFORMANCE)


def test_the_document_describes_problem_details_for_every_error_of_handrail_paths() -> None:
    document = APP.openapi()
    answer = document["paths"]["/handrail/threads/{thread_id}/interrupts/{interrupt_id}/answer"]["post"]
    for status in ("400", "401", "403", "404", "409", "413", "422"):
        body = answer["responses"][status]["content"]["application/problem+json"]["schema"]
        assert body["required"] == ["type", "title", "status", "detail"], status
    assert "HTTPValidationError" not in str(document)  # validation errors are 400 problem details


def test_an_unauthenticated_answer_conforms_too() -> None:
    """The 401 without a credential is a documented problem-details answer."""
    operation = OWN["/handrail/threads/{thread_id}/interrupts/{interrupt_id}/answer"]["POST"]
    case = operation.Case(
        path_parameters={"thread_id": "paused", "interrupt_id": "nope"},
        body={"answer": "x"},
        media_type="application/json",
    )
    response = case.call()
    assert response.status_code == 401
    case.validate_response(response, checks=CONFORMANCE)
