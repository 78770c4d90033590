"""What the service bounds, and how it refuses the rest (SPEC §5.3: bounded by construction).

Each limit answers a 4xx problem that says what was wrong and what is taken:

- A request body is at most ``max_body`` bytes (``problems.BodyLimit``: 413).
- A JSON body is read by orjson, the parser the store writes with: no ``NaN`` or
  ``Infinity``, no lone surrogate, no number beyond a double's range (``1e400``; an
  integer beyond 64 bits is read as a double), and containers nested at most
  :data:`MAX_DEPTH` deep (the body's own object counts as one), or a 400.
  The ``metadata`` query parameter (the inbox, the audit) is read the same way.
- Ids: an id a client names for a new thread (``threads.create``, a run with
  ``if_not_exists="create"``) matches :data:`NEW_ID` - letters, digits and
  ``. _ : @ ~ + = -``, starting with a letter, a digit or ``_`` - and every id a request
  names (thread, run, interrupt, checkpoint) is 1 to :data:`MAX_ID` characters without
  control characters (NUL, CR, LF, ...): a 400 otherwise.
- NUL: a URL (path or query) or a form body holding a NUL character is refused (400), and
  so is thread metadata or a metadata filter holding one (PostgreSQL's ``text`` and
  ``jsonb`` cannot hold it). Message contents and answers may hold one: the store keeps
  them as bytes.
- Pages: ``limit`` 1 to :data:`MAX_LIMIT`, ``offset`` 0 to :data:`MAX_OFFSET`.
- Requests: with ``create_app(rate_limit=N)`` (``handrail serve --rate-limit N``) each
  credential may send N requests a second, in bursts of up to N (:class:`RateLimit`: 429
  with ``Retry-After``).
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from itertools import accumulate
from typing import Any, TypeVar

import orjson
from fastapi import HTTPException, Request
from fastapi.routing import APIRoute
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from handrail.server._problems import problem_response
from handrail.server.sessions import SESSION_COOKIE

__all__ = [
    "MAX_DEPTH",
    "MAX_ID",
    "MAX_LIMIT",
    "MAX_OFFSET",
    "NEW_ID",
    "NEW_ID_RULE",
    "GuardedRoute",
    "RateLimit",
    "RequestGuard",
    "check_id",
    "check_new_id",
    "check_storable",
    "json_depth",
    "load_json",
]

MAX_DEPTH = 64
"""How deep the containers of a JSON body (or ``?metadata=``) may nest."""

MAX_ID = 128
"""The most characters an id may have."""

NEW_ID = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9._:@~+=-]{{0,{MAX_ID - 1}}}")
"""What an id a client names for a new thread matches (a UUID does)."""

MAX_LIMIT = 1000
"""The largest page a listing gives (``limit``)."""

MAX_OFFSET = 1_000_000_000
"""The largest ``offset`` a listing takes."""

NEW_ID_RULE = (  # what a refusal says
    f"1 to {MAX_ID} letters, digits and . _ : @ ~ + = - , starting with a letter, a digit or _ "
    "(a UUID is one)"
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_T = TypeVar("_T")


def check_id(value: str, what: str = "id") -> str:
    """``value`` if it can be an id a request names: 1 to :data:`MAX_ID` characters, none of
    them a control character; a ``ValueError`` that says so otherwise."""
    if not 1 <= len(value) <= MAX_ID:
        raise ValueError(f"{what} must be 1 to {MAX_ID} characters, got {len(value)}")
    found = _CONTROL.search(value)
    if found is not None:
        raise ValueError(f"{what} may not hold a control character, found {found.group()!r}")
    return value


def check_new_id(value: str, what: str = "a new thread's id") -> str:
    """``value`` if a client may name a new thread so (:data:`NEW_ID`); a ``ValueError`` otherwise."""
    if NEW_ID.fullmatch(value) is None:
        shown = value if len(value) <= 40 else value[:37] + "..."
        raise ValueError(f"{what} is {NEW_ID_RULE}; got {shown!r}")
    return value


def check_storable(value: _T, where: str) -> _T:
    """``value`` (JSON) if PostgreSQL's ``jsonb`` can hold it: no NUL in a key or a string, at
    any depth; a ``ValueError`` naming where the NUL is otherwise."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                raise ValueError(f"{at} holds a NUL character, which the store cannot keep")
        elif isinstance(item, Mapping):
            for key, inner in item.items():
                if isinstance(key, str) and "\x00" in key:
                    raise ValueError(f"a key of {at} holds a NUL character, which the store cannot keep")
                stack.append((inner, f"{at}.{key}"))
        elif isinstance(item, list | tuple):
            stack.extend((inner, f"{at}[{index}]") for index, inner in enumerate(item))
    return value


# JSON -------------------------------------------------------------------------------------------
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


def json_depth(raw: bytes) -> int:
    """How deep the arrays and objects of a JSON text nest (0 for a bare scalar).

    Strings are left out first, so brackets inside them do not count; ``raw`` must be JSON.
    """
    if raw.count(b"[") + raw.count(b"{") <= 1:
        return 1 if raw.lstrip()[:1] in (b"[", b"{") else 0
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def load_json(raw: bytes | str, what: str = "the body") -> Any:
    """JSON as the service takes it (see the module's docstring); ``ValueError`` saying why not."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{what} is not JSON handrail can read: {exc}") from None
    if data.count(b"[") + data.count(b"{") > MAX_DEPTH:
        depth = json_depth(data)
        if depth > MAX_DEPTH:
            raise ValueError(f"{what} nests {depth} deep; JSON is taken nested at most {MAX_DEPTH} deep")
    return value


class _JsonRequest(Request):
    """A request whose JSON body is read by :func:`load_json`."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                self._json = load_json(await self.body())
            except ValueError as exc:
                raise HTTPException(400, str(exc)) from None
        return self._json


class GuardedRoute(APIRoute):
    """A FastAPI route whose JSON body is read by :func:`load_json` (a 400 when it refuses)."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            response: Response = await handler(_JsonRequest(request.scope, request.receive))
            return response

        return guarded


# Middleware -------------------------------------------------------------------------------------
_FORM = b"application/x-www-form-urlencoded"


class RequestGuard:
    """ASGI middleware: refuse a NUL character in the URL or in a form body with a 400."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        query = bytes(scope.get("query_string") or b"")
        if "\x00" in scope.get("path", "") or b"%00" in query or b"\x00" in query:
            refused = problem_response(
                400, "the URL holds a NUL character (%00), which no path or parameter takes"
            )
            await refused(scope, receive, send)
            return
        content_type = dict(scope.get("headers") or []).get(b"content-type", b"")
        if not content_type.lower().startswith(_FORM):
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        body = b""
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        if b"%00" in body or b"\x00" in body:
            await problem_response(400, "the form holds a NUL character (%00), which no field takes")(
                scope, receive, send
            )
            return

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


class RateLimit:
    """ASGI middleware: at most ``rate`` requests a second per credential, in bursts of up to
    ``max(1, rate)`` (a token bucket per credential); more is a 429 with ``Retry-After``.

    The credential is the request's token (``Authorization: Bearer``, ``x-api-key``) or, on
    a read, its session (whose requests count with its token's). A request without a valid
    credential is not counted here: it is answered 401 by the route. The web inbox's static
    files are not counted. The buckets of the :data:`KEPT` credentials seen last are kept.
    """

    KEPT = 10_000

    def __init__(
        self, app: ASGIApp, *, service: Any, rate: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not rate > 0 or not math.isfinite(rate):
            raise ValueError(f"a rate limit is a number of requests a second above 0, got {rate!r}")
        self.app = app
        self.service = service
        self.rate = rate
        self.burst = max(1.0, rate)
        self.clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # id -> (tokens, at)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path", "").startswith("/inbox/static/"):
            await self.app(scope, receive, send)
            return
        who = await self._credential_id(Request(scope))
        wait = self.take(who) if who is not None else 0.0
        if wait > 0:
            seconds = max(1, math.ceil(wait))
            refused = problem_response(
                429,
                f"this credential sent more than {self.rate:g} request(s) a second; "
                f"retry after {seconds} second(s)",
                headers={"Retry-After": str(seconds)},
            )
            await refused(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def take(self, key: str) -> float:
        """Take one request from ``key``'s bucket: 0 when it may go on, else the seconds until
        it could."""
        now = self.clock()
        tokens, at = self._buckets.pop(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        wait = 0.0
        if tokens >= 1.0:
            tokens -= 1.0
        else:
            wait = (1.0 - tokens) / self.rate
        self._buckets[key] = (tokens, now)
        if len(self._buckets) > self.KEPT:
            self._buckets.popitem(last=False)
        return wait

    async def _credential_id(self, request: Request) -> str | None:
        header = request.headers.get("authorization", "")
        token = (
            header[7:].strip() if header[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
        )
        tokens = self.service.tokens
        if token:
            found = tokens.remembered(token) or await asyncio.to_thread(tokens.verify, token)
        elif request.method in ("GET", "HEAD") and request.cookies.get(SESSION_COOKIE):
            found = await asyncio.to_thread(self.service.sessions.credential, request.cookies[SESSION_COOKIE])
        else:
            return None
        return str(found.id) if found is not None else None
