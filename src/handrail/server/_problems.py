"""Errors as JSON problem details (RFC 9457, SPEC §5.3); no client input gives a 500.

Every error the service answers is ``application/problem+json``: ``type``, ``title``,
``status``, ``detail`` and, where they help, fields of their own (``interrupt_id``,
``answered_by``, ``answered_at``). handrail's errors map onto statuses here, in one
place: 400 malformed, 401 no or bad credential, 403 not allowed, 404 unknown, 409
already answered or busy, 413 too large, 422 an answer or input that rule 5 refuses
(with the library's own message), 429 too many requests from one credential. A value a
client sent that the store cannot keep is that client's mistake (422), never a 500.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from handrail.errors import (
    AlreadyAnsweredError,
    ConfigurationError,
    ConflictError,
    HandrailError,
    InvalidDecisionError,
    InvalidInputError,
    NotAllowedError,
    PendingInterruptError,
    ReviewExpiredError,
    SerializationError,
)

__all__ = [
    "PROBLEM_SCHEMA",
    "BodyLimit",
    "Problem",
    "client_problem",
    "documented",
    "install",
    "problem_response",
]

log = logging.getLogger("handrail.server")

_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
}


PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "ProblemDetails",
    "type": "object",
    "description": "An error as RFC 9457 problem details; some errors add fields of their own.",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string", "description": "always 'about:blank': the status says the kind"},
        "title": {"type": "string", "description": "the status's name"},
        "status": {"type": "integer", "minimum": 400, "maximum": 599},
        "detail": {"type": "string", "description": "what was wrong and what was expected"},
        "interrupt_id": {"type": "string"},
        "decision_index": {"type": "integer"},
        "roles": {"type": "array", "items": {"type": "string"}},
        "answered_by": {"type": "string"},
        "answered_at": {"type": "string", "format": "date-time"},
        "channel": {"type": "string"},
        "errors": {"type": "array", "items": {"type": "object"}},
    },
    "additionalProperties": True,
}
"""The JSON schema of every error body (``application/problem+json``), for the OpenAPI document."""

_WHEN = {
    400: "Malformed: a parameter or the body is not what the operation takes",
    401: "No credential, or one that is unknown, malformed or revoked",
    403: "The credential's roles may not decide this review (rule 12); nothing was saved",
    404: "No such thread, interrupt or assistant",
    409: "Already answered (naming who and when), expired (naming when) or the thread is busy",
    413: "The request body is too large",
    422: "Refused by the rules: an answer or input that rule 5 rejects, or a cursor from elsewhere",
    429: "Too many requests from this credential (--rate-limit); Retry-After says when to retry",
}


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` entries of these error statuses, each a problem-details body.

    Example::

        @router.get("/inbox", responses=documented(400, 401, 422))
    """
    unknown = sorted(set(statuses) - set(_WHEN))
    if unknown:
        raise ValueError(f"no description of status {unknown}; known: {sorted(_WHEN)}")
    return {
        status: {
            "description": _WHEN[status],
            "content": {"application/problem+json": {"schema": PROBLEM_SCHEMA}},
        }
        for status in statuses
    }


class Problem(Exception):
    """An error answered as problem details; raise it from any endpoint."""

    def __init__(
        self, status: int, detail: str, *, headers: dict[str, str] | None = None, **extra: Any
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers or {}
        self.extra = extra


def problem_response(
    status: int, detail: str, *, headers: dict[str, str] | None = None, **extra: Any
) -> Response:
    """A ``application/problem+json`` response."""
    body = {"type": "about:blank", "title": _TITLES.get(status, "Error"), "status": status, "detail": detail}
    body.update({k: v for k, v in extra.items() if v is not None})
    return Response(
        orjson.dumps(body, default=str),
        status_code=status,
        media_type="application/problem+json",
        headers=headers,
    )


def client_problem(exc: BaseException) -> Problem | None:
    """The problem a handrail error is answered with when the request caused it (a 4xx), or
    None when it is not the client's doing (the service's own failure).

    A :class:`~handrail.errors.SerializationError` that could not *store* a value is the
    value's sender's (e.g. a dict with the store's reserved key), and so is PostgreSQL's
    ``DataError`` (a value it cannot hold: a NUL, a number out of range; the service's
    own checks refuse those first); one that could not *load* a record is damage, never
    the client's.
    """
    if isinstance(exc, NotAllowedError):
        return Problem(403, str(exc), interrupt_id=exc.interrupt_id, roles=list(exc.roles))
    if isinstance(exc, AlreadyAnsweredError):
        return Problem(
            409,
            str(exc),
            interrupt_id=exc.interrupt_ids[0] if exc.interrupt_ids else None,
            answered_by=exc.answered_by,
            answered_at=exc.answered_at.isoformat(),
            channel=exc.channel,
        )
    if isinstance(exc, ReviewExpiredError):
        return Problem(
            409,
            str(exc),
            interrupt_id=exc.interrupt_ids[0] if exc.interrupt_ids else None,
            expired_at=exc.expired_at.isoformat(),
        )
    if isinstance(exc, (ConflictError, PendingInterruptError)):
        return Problem(409, str(exc))
    if isinstance(exc, InvalidDecisionError):
        return Problem(422, str(exc), interrupt_id=exc.interrupt_id, decision_index=exc.decision_index)
    if isinstance(exc, (InvalidInputError, ConfigurationError)):
        return Problem(422, str(exc))
    if isinstance(exc, SerializationError) and str(exc).startswith("cannot store"):
        return Problem(422, str(exc))
    psycopg = sys.modules.get("psycopg")  # loaded when a store is on PostgreSQL
    if psycopg is not None and isinstance(exc, psycopg.DataError):
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return Problem(422, f"a value of the request cannot be stored in PostgreSQL: {reason}")
    return None


def _from_handrail(exc: Exception) -> Response | None:
    found = client_problem(exc)
    if found is None:
        return None
    return problem_response(found.status, found.detail, headers=found.headers, **found.extra)


def install(app: FastAPI) -> None:
    """Answer every error of ``app`` as problem details."""

    async def on_problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Problem)
        return problem_response(exc.status, exc.detail, headers=exc.headers, **exc.extra)

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        return problem_response(exc.status_code, str(exc.detail), headers=dict(exc.headers or {}))

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = [
            {
                "loc": [str(part) for part in e.get("loc", ())],
                "msg": str(e.get("msg", "")),
                "type": e.get("type"),
            }
            for e in exc.errors()
        ]
        for error in errors:  # pydantic's prefix says nothing the message does not
            error["msg"] = error["msg"].removeprefix("Value error, ")
        where = "; ".join(f"{'.'.join(e['loc'])}: {e['msg']}" for e in errors[:5])
        return problem_response(400, f"malformed request: {where}", errors=errors)

    async def on_error(request: Request, exc: Exception) -> Response:
        mapped = _from_handrail(exc)
        if mapped is not None:
            return mapped
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return problem_response(500, "the service failed on this request; its log has the details")

    generate = app.openapi

    def openapi() -> dict[str, Any]:
        schema = generate()  # FastAPI's, cached on the app: corrected once, in place
        _document_validation_as_problems(schema)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HandrailError, on_error)  # mapped in ExceptionMiddleware: not re-raised
    psycopg = sys.modules.get("psycopg")  # a store on PostgreSQL: a value it cannot hold is a 422
    if psycopg is not None:
        app.add_exception_handler(psycopg.DataError, on_error)
    app.add_exception_handler(Exception, on_error)  # the last resort: a 500, logged


def _document_validation_as_problems(schema: dict[str, Any]) -> None:
    """Replace FastAPI's default 422 (``HTTPValidationError``, never sent) with what is sent.

    A request the parameters refuse is answered 400 as problem details (``on_validation``),
    and a 422 is problem details too; paths that document their errors already keep them.
    """
    default = "#/components/schemas/HTTPValidationError"
    for operation in (op for item in schema.get("paths", {}).values() for op in item.values()):
        responses = operation.get("responses", {}) if isinstance(operation, dict) else {}
        content = responses.get("422", {}).get("content", {}).get("application/json", {})
        if content.get("schema", {}).get("$ref") == default:
            responses.update({str(k): v for k, v in documented(422).items()})
            responses.setdefault("400", documented(400)[400])
    for name in ("HTTPValidationError", "ValidationError"):
        schema.get("components", {}).get("schemas", {}).pop(name, None)


class BodyLimit:
    """ASGI middleware: refuse request bodies over ``limit`` bytes with a 413."""

    def __init__(self, app: ASGIApp, limit: int = 1024 * 1024) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        too_large = problem_response(413, f"the request body is over {self.limit} bytes")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await too_large(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge()
            return message

        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited, tracking_send)
        except _TooLarge:
            if not started:
                await too_large(scope, receive, send)


class _TooLarge(Exception):
    pass


Handler = Callable[[Request], Awaitable[Response]]
