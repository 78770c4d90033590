"""A stand-in for Slack, on 127.0.0.1, for the Slack tests (Slack's cloud is out of reach here).

:class:`SlackLookalike` is a real HTTP server that answers the Web API methods handrail
calls (``auth.test``, ``chat.postMessage``, ``chat.update``, ``chat.postEphemeral``,
``views.open``), reading JSON or form bodies as ``slack_sdk`` sends them, checking the
bot token and the Block Kit limits Slack enforces (50 blocks, 3000 characters a section,
2000 a button value ...), keeping each message as it now stands, and recording every
call; ``response_url`` posts land at ``/response/...``. Tests can make a method fail
(:meth:`fail`) or answer slowly (``delay``).

It also makes the interactivity requests Slack sends when a button is clicked or a modal
submitted (:meth:`click`, :meth:`submit`), signed as Slack signs them (:func:`signed`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

TOKEN = "xoxb-1111-2222-lookalike"
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TEAM = "T0LOOKALIKE"


class SlackLookalike:
    """The server, its recorded calls and its messages (by ``(channel, ts)``)."""

    def __init__(self, token: str = TOKEN, team: str = TEAM) -> None:
        self.token = token
        self.team = team
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.messages: dict[tuple[str, str], dict[str, Any]] = {}
        self.responses: list[dict[str, Any]] = []
        self.missing_channels = {"C0MISSING"}
        self.delay: dict[str, float] = {}
        self._failures: dict[str, list[tuple[int, dict[str, Any], dict[str, str]]]] = {}
        self._lock = threading.Lock()
        self._serial = 0
        lookalike = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                status, body, headers = lookalike._answer(self.path, dict(self.headers), raw)
                data = json.dumps(body).encode() if not isinstance(body, bytes) else body
                self.send_response(status)
                self.send_header("content-type", "application/json; charset=utf-8")
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # The server ------------------------------------------------------------------------------------
    def __enter__(self) -> SlackLookalike:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def root(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def api_url(self) -> str:
        """The Web API's root (``base_url`` of slack_sdk's clients)."""
        return f"{self.root}/api/"

    def response_url(self, name: str = "r1") -> str:
        """A ``response_url`` of a click: what is posted there lands in :attr:`responses`."""
        return f"{self.root}/response/{name}"

    def fail(
        self, method: str, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        """Answer the next call of ``method`` so (once per call of this)."""
        with self._lock:
            self._failures.setdefault(method, []).append((status, body, headers or {}))

    def called(self, method: str) -> list[dict[str, Any]]:
        """The arguments of every call of ``method`` so far."""
        with self._lock:
            return [args for name, args in self.calls if name == method]

    def message(self, channel: str, ts: str) -> dict[str, Any]:
        with self._lock:
            return dict(self.messages[(channel, ts)])

    # Answers -----------------------------------------------------------------------------------------
    def _answer(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any, dict[str, str]]:
        if path.startswith("/response/"):
            with self._lock:
                self.responses.append({"path": path, **json.loads(raw or b"{}")})
            return 200, b"ok", {}
        method = urlsplit(path).path.removeprefix("/api/")
        args = _arguments(headers, raw, urlsplit(path).query)
        time.sleep(self.delay.get(method, 0.0))
        with self._lock:
            self.calls.append((method, args))
            queued = self._failures.get(method)
            if queued:
                return queued.pop(0)
        bearer = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        if bearer.removeprefix("Bearer ") != self.token and args.get("token") != self.token:
            return 200, {"ok": False, "error": "invalid_auth"}, {}
        if method == "auth.test":
            me = {"url": "https://lookalike.slack.test/", "team": "Lookalike", "user": "handrail"}
            return 200, {"ok": True, **me, "team_id": self.team, "user_id": "U0BOT", "bot_id": "B0BOT"}, {}
        if method in ("chat.postMessage", "chat.update"):
            return self._message(method, args)
        if method == "chat.postEphemeral":
            return 200, {"ok": True, "message_ts": self._ts()}, {}
        if method == "views.open":
            view = args.get("view")
            if isinstance(view, str):
                view = json.loads(view)
            if (
                not isinstance(view, dict)
                or not args.get("trigger_id")
                or len(view.get("private_metadata", "")) > 3000
            ):
                return 200, {"ok": False, "error": "invalid_arguments"}, {}
            return 200, {"ok": True, "view": {**view, "id": "V0MODAL"}}, {}
        return 404, {"ok": False, "error": "unknown_method"}, {}

    def _message(self, method: str, args: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        channel = args.get("channel")
        if not isinstance(channel, str) or channel in self.missing_channels:
            return 200, {"ok": False, "error": "channel_not_found"}, {}
        blocks = args.get("blocks")
        if isinstance(blocks, str):
            blocks = json.loads(blocks)
        problem = block_problem(blocks) if blocks is not None else None
        if problem is not None:
            return 200, {"ok": False, "error": "invalid_blocks", "errors": [problem]}, {}
        with self._lock:
            if method == "chat.update":
                ts = args.get("ts")
                if (channel, ts) not in self.messages:
                    return 200, {"ok": False, "error": "message_not_found"}, {}
            else:
                ts = self._ts()
            self.messages[(channel, str(ts))] = {
                "text": args.get("text"),
                "blocks": blocks or [],
                "thread_ts": args.get("thread_ts"),
            }
        return 200, {"ok": True, "channel": channel, "ts": ts, "message": {"text": args.get("text")}}, {}

    def _ts(self) -> str:
        self._serial += 1
        return f"1764840000.{self._serial:06d}"

    # What Slack sends to the app ---------------------------------------------------------------------
    def click(
        self, channel: str, ts: str, action_id: str, user: str, *, team: str | None = None
    ) -> dict[str, Any]:
        """The ``block_actions`` payload of ``user`` clicking the button ``action_id`` of a message."""
        message = self.message(channel, ts)
        found = [
            (block, element)
            for block in message["blocks"]
            for element in block.get("elements") or ()
            if isinstance(element, dict) and element.get("action_id") == action_id
        ]
        assert found, f"no button {action_id} on the message: {message['blocks']}"
        block, button = found[0]
        return {
            "type": "block_actions",
            "team": {"id": team or self.team, "domain": "lookalike"},
            "user": {"id": user, "username": user.lower(), "team_id": team or self.team},
            "api_app_id": "A0HANDRAIL",
            "token": "legacy-verification-token",
            "container": {"type": "message", "message_ts": ts, "channel_id": channel, "is_ephemeral": False},
            "trigger_id": f"1111.2222.{ts}",
            "channel": {"id": channel, "name": "reviews"},
            "message": {"type": "message", "ts": ts, "text": message["text"], "blocks": message["blocks"]},
            "response_url": self.response_url(f"{channel}-{ts}"),
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": block.get("block_id"),
                    "text": button.get("text"),
                    "value": button.get("value"),
                    "type": "button",
                    "action_ts": f"{time.time():.6f}",
                }
            ],
        }

    def submit(self, view: dict[str, Any], user: str, text: str | None) -> dict[str, Any]:
        """The ``view_submission`` payload of ``user`` sending a modal opened with ``views.open``."""
        return {
            "type": "view_submission",
            "team": {"id": self.team, "domain": "lookalike"},
            "user": {"id": user, "username": user.lower(), "team_id": self.team},
            "api_app_id": "A0HANDRAIL",
            "trigger_id": "3333.4444.modal",
            "view": {
                "id": "V0MODAL",
                "team_id": self.team,
                "type": "modal",
                "callback_id": view["callback_id"],
                "private_metadata": view["private_metadata"],
                "blocks": view["blocks"],
                "state": {
                    "values": {
                        block["block_id"]: {
                            block["element"]["action_id"]: {"type": "plain_text_input", "value": text}
                        }
                        for block in view["blocks"]
                        if block.get("type") == "input"
                    }
                },
            },
        }


def signed(
    payload: dict[str, Any], secret: str = SECRET, *, at: float | None = None
) -> tuple[bytes, dict[str, str]]:
    """The form body Slack posts for ``payload`` and its headers, signed with ``secret``:
    ``v0=`` and HMAC-SHA256 of ``v0:{timestamp}:{body}``."""
    body = urlencode({"payload": json.dumps(payload)}).encode()
    stamp = str(int(time.time() if at is None else at))
    digest = hmac.new(secret.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
    headers = {
        "content-type": "application/x-www-form-urlencoded",
        "x-slack-request-timestamp": stamp,
        "x-slack-signature": f"v0={digest}",
    }
    return body, headers


def block_problem(blocks: Any) -> str | None:
    """What Slack would refuse in ``blocks`` (its documented limits), or None."""
    if not isinstance(blocks, list) or len(blocks) > 50:
        return "blocks must be a list of at most 50"
    for block in blocks:
        for text in _texts(block):
            if len(text) > 3000:
                return f"a text of {len(text)} characters (at most 3000)"
        for element in block.get("elements") or ():
            if element.get("type") != "button":
                continue
            if len(element.get("value") or "") > 2000 or len(element["text"]["text"]) > 75:
                return "a button's value is at most 2000 characters and its text 75"
            if len(element.get("url") or "") > 3000 or len(element.get("action_id") or "") > 255:
                return "a button's url is at most 3000 characters and its action_id 255"
    return None


def _texts(block: dict[str, Any]) -> Iterator[str]:
    text = block.get("text")
    if isinstance(text, dict):
        yield str(text.get("text", ""))
    for element in block.get("elements") or ():
        if isinstance(element, dict) and element.get("type") in ("mrkdwn", "plain_text"):
            yield str(element.get("text", ""))


def _arguments(headers: dict[str, str], raw: bytes, query: str) -> dict[str, Any]:
    kind = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
    args: dict[str, Any] = {k: v[-1] for k, v in parse_qs(query).items()}
    if kind.startswith("application/json"):
        args.update(json.loads(raw or b"{}"))
    elif raw:
        args.update({k: v[-1] for k, v in parse_qs(raw.decode()).items()})
    return args


def text_of(blocks: list[dict[str, Any]]) -> str:
    """Every text of a message's blocks, one a line (what a reader sees, as mrkdwn)."""
    return "\n".join(text for block in blocks for text in _texts(block))


def buttons_of(blocks: list[dict[str, Any]]) -> list[str]:
    """The ``action_id`` of every button of a message."""
    return [
        element["action_id"]
        for block in blocks
        for element in block.get("elements") or ()
        if isinstance(element, dict) and element.get("type") == "button"
    ]
