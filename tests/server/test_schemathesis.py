"""schemathesis against the service's own OpenAPI document: no 500s, responses as documented.

A bounded number of generated requests per operation (15), with a valid credential, on
a SQLite store holding one paused thread (SPEC §5.3: no client input gives a 500).
handrail's own paths (``/handrail/...``) document their answers, problem details for
400, 401, 403, 404, 409, 413 and 422 included, so their responses are checked against
the document too: status, content type, headers and body schema.
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

_FOLDER = Path(tempfile.mkdtemp(prefix="handrail-schemathesis-"))
atexit.register(shutil.rmtree, _FOLDER, True)
_AGENT = served_agent.build(SqliteSaver(_FOLDER / "h.db"))
APP = create_app({"sql": _AGENT}, db=ServerDB.open(db_path=_FOLDER / "h.db"))
TOKEN = APP.state.service.tokens.create("fuzzer", ["dba"])[1]
_AGENT.invoke({"messages": ["DELETE FROM logs"]}, {"configurable": {"thread_id": "paused"}})

schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
# The live inbox never ends by itself; a stream of a run is covered by the API tests.
schema = schema.exclude(path_regex=r"/handrail/events$").exclude(path_regex=r"/stream$")


@schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_service_never_answers_500(case: Any) -> None:
    response = case.call(headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code < 500, (case.method, case.path, response.text)
    case.validate_response(response, checks=[schemathesis.checks.not_a_server_error])


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
