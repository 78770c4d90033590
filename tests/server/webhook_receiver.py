"""A real webhook receiver for the tests: an HTTP server on 127.0.0.1, in a thread.

It verifies each delivery with the ``standardwebhooks`` package (as a user's receiver
would), records what came (``seen``: every request; ``verified``: those whose signature
held), and can be told to fail the first N requests with a 500, or to hang on them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


@dataclass
class Seen:
    """One request the receiver got."""

    id: str
    headers: dict[str, str]
    body: bytes
    verified: bool
    at: float
    answered: int

    @property
    def payload(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """What the server does and what it saw. ``secrets``: the secrets it verifies with
    (any may match); ``fail_first``: answer 500 to that many requests; ``hang_first``:
    never answer that many (until ``release`` is set)."""

    secrets: list[str] = field(default_factory=list)
    fail_first: int = 0
    hang_first: int = 0
    gone: bool = False
    seen: list[Seen] = field(default_factory=list)
    url: str = ""
    release: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def verified(self) -> list[Seen]:
        return [s for s in self.seen if s.verified]

    def delivered(self) -> list[Seen]:
        """The requests answered with a 2xx."""
        return [s for s in self.seen if 200 <= s.answered < 300]

    def wait_for(self, count: int, timeout: float = 30.0, *, delivered: bool = True) -> list[Seen]:
        """Wait until ``count`` requests (answered 2xx, by default) came; all of them."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.delivered() if delivered else list(self.seen)
            if len(found) >= count:
                return found
            time.sleep(0.02)
        raise AssertionError(
            f"the receiver got {len(self.seen)} request(s), {len(self.delivered())} delivered"
        )

    def _handle(self, headers: dict[str, str], body: bytes) -> int:
        verified = False
        for secret in self.secrets:
            try:
                Webhook(secret).verify(body, headers)
                verified = True
                break
            except WebhookVerificationError:
                continue
        with self._lock:
            number = len(self.seen)
            hang = number < self.hang_first
            code = 410 if self.gone else 500 if number < self.fail_first else 204
            seen = Seen(
                headers.get("webhook-id", ""), headers, body, verified, time.time(), 0 if hang else code
            )
            self.seen.append(seen)
        if hang:
            self.release.wait(120)
            return 204
        return code


@contextmanager
def receiving(**options: Any) -> Iterator[Receiver]:
    """A running receiver; yields it with its ``url`` set."""
    receiver = Receiver(**options)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            code = receiver._handle({k.lower(): v for k, v in self.headers.items()}, body)
            self.send_response(code)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.release.set()
        server.shutdown()
        server.server_close()
