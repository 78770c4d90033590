"""A local stand-in for model providers: an HTTP server that answers from a queue.

Tests queue replies (JSON bodies, server-sent-event streams, error statuses, broken
bodies), point a real SDK at ``server.url`` and then read ``server.requests`` to see
exactly what the adapter sent. Builders below produce each provider's wire format.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One queued answer. ``events`` makes it a stream: each item is written and flushed."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    events: list[bytes] | None = None


@dataclass
class Recorded:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw)


class LLMServer:
    """A threaded HTTP server on 127.0.0.1 with a free port; use as a context manager."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                server._record(
                    Recorded("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, raw)
                )
                self._answer(server._next())

            do_GET = do_POST

            def _answer(self, reply: Reply) -> None:
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                if reply.events is None:
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                    return
                # a stream: no length, so the connection closes at its end
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                for event in reply.events:
                    self.wfile.write(event)
                    self.wfile.flush()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def reply(self, *replies: Reply) -> LLMServer:
        """Queue answers, served in order, one per request."""
        with self._lock:
            self._replies.extend(replies)
        return self

    @property
    def pending(self) -> int:
        """Replies queued and not yet served."""
        with self._lock:
            return len(self._replies)

    def bodies(self) -> list[Any]:
        """The JSON bodies of every request so far."""
        return [r.json for r in self.requests]

    def _record(self, request: Recorded) -> None:
        with self._lock:
            self.requests.append(request)

    def _next(self) -> Reply:
        with self._lock:
            if self._replies:
                return self._replies.popleft()
        return json_reply({"error": {"message": "the test server has no reply queued"}}, status=599)

    def __enter__(self) -> LLMServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


# Generic replies ---------------------------------------------------------------------------
FAST_RETRY = {"retry-after-ms": "1"}
"""Headers that make the SDKs retry at once instead of backing off."""


def json_reply(body: Any, *, status: int = 200, headers: Mapping[str, str] | None = None) -> Reply:
    return Reply(
        status=status,
        body=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )


def raw_reply(body: bytes, *, status: int = 200, content_type: str = "application/json") -> Reply:
    return Reply(status=status, body=body, headers={"Content-Type": content_type})


def sse_reply(events: Iterable[bytes]) -> Reply:
    return Reply(headers={"Content-Type": "text/event-stream"}, events=list(events))


def error_reply(status: int, message: str, *, code: str | None = None, fast_retry: bool = True) -> Reply:
    """An OpenAI-style error body (Anthropic's is built with :func:`anthropic_error`)."""
    error: dict[str, Any] = {"message": message, "type": "invalid_request_error", "code": code}
    return json_reply({"error": error}, status=status, headers=FAST_RETRY if fast_retry else None)


# OpenAI Chat Completions -------------------------------------------------------------------
_counter = iter(range(1, 1_000_000))


def openai_tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def openai_completion(
    content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    *,
    model: str = "gpt-test",
    finish_reason: str | None = None,
    usage: tuple[int, int] = (11, 7),
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": f"chatcmpl-{next(_counter)}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": usage[0] + usage[1],
        },
    }


def openai_chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish_reason: str | None = None,
    usage: tuple[int, int] | None = None,
    model: str = "gpt-test",
    completion_id: str = "chatcmpl-stream",
) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
    chunk: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": model,
        "choices": choices,
    }
    if usage is not None:
        chunk["usage"] = {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": usage[0] + usage[1],
        }
    return chunk


def openai_tool_delta(
    index: int, *, call_id: str | None = None, name: str | None = None, arguments: str | None = None
) -> dict[str, Any]:
    delta: dict[str, Any] = {"index": index}
    if call_id is not None:
        delta["id"] = call_id
        delta["type"] = "function"
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    if function:
        delta["function"] = function
    return delta


def openai_sse(chunks: Iterable[dict[str, Any]], *, done: bool = True) -> Iterator[bytes]:
    for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    if done:
        yield b"data: [DONE]\n\n"


def openai_stream(
    text: str = "",
    tool_calls: list[tuple[str, str, str]] = (),  # type: ignore[assignment]
    *,
    pieces: int = 3,
    usage: tuple[int, int] = (20, 9),
    model: str = "gpt-test",
) -> Reply:
    """A streamed answer: ``text`` word by word, then each ``(id, name, arguments)`` tool
    call with its arguments split into ``pieces`` fragments, calls interleaved."""
    chunks = [openai_chunk({"role": "assistant", "content": ""}, model=model)]
    for word in _words(text):
        chunks.append(openai_chunk({"content": word}, model=model))
    for index, (call_id, name, _) in enumerate(tool_calls):
        chunks.append(
            openai_chunk(
                {"tool_calls": [openai_tool_delta(index, call_id=call_id, name=name, arguments="")]},
                model=model,
            )
        )
    fragments = [_split(arguments, pieces) for _, _, arguments in tool_calls]
    for step in range(pieces):
        for index, parts in enumerate(fragments):
            chunks.append(
                openai_chunk({"tool_calls": [openai_tool_delta(index, arguments=parts[step])]}, model=model)
            )
    chunks.append(openai_chunk({}, finish_reason="tool_calls" if tool_calls else "stop", model=model))
    chunks.append(openai_chunk(None, usage=usage, model=model))
    return sse_reply(openai_sse(chunks))


# Anthropic Messages ------------------------------------------------------------------------
def anthropic_message(
    blocks: list[dict[str, Any]],
    *,
    model: str = "claude-test",
    stop_reason: str | None = None,
    usage: tuple[int, int] = (13, 5),
) -> dict[str, Any]:
    uses_tool = any(b["type"] == "tool_use" for b in blocks)
    return {
        "id": f"msg_{next(_counter)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop_reason or ("tool_use" if uses_tool else "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def tool_use_block(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def anthropic_error(status: int, message: str, kind: str = "invalid_request_error") -> Reply:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return json_reply(body, status=status, headers=FAST_RETRY)


def anthropic_sse(events: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    for event in events:
        yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def anthropic_stream(
    text: str = "",
    tool_calls: list[tuple[str, str, str]] = (),  # type: ignore[assignment]
    *,
    pieces: int = 3,
    usage: tuple[int, int] = (30, 12),
    model: str = "claude-test",
    stop_reason: str | None = None,
) -> Reply:
    """A streamed answer: a text block word by word, then one tool_use block per
    ``(id, name, arguments JSON)`` with the JSON in ``pieces`` input_json deltas."""
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": f"msg_{next(_counter)}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": usage[0], "output_tokens": 1},
            },
        },
        {"type": "ping"},
    ]
    index = 0
    if text:
        events.append(
            {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
        )
        for word in _words(text):
            events.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": word},
                }
            )
        events.append({"type": "content_block_stop", "index": index})
        index += 1
    for call_id, name, arguments in tool_calls:
        events.append(
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
            }
        )
        for part in _split(arguments, pieces):
            events.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": part},
                }
            )
        events.append({"type": "content_block_stop", "index": index})
        index += 1
    events.append(
        {
            "type": "message_delta",
            "delta": {
                "stop_reason": stop_reason or ("tool_use" if tool_calls else "end_turn"),
                "stop_sequence": None,
            },
            "usage": {"output_tokens": usage[1]},
        }
    )
    events.append({"type": "message_stop"})
    return sse_reply(anthropic_sse(events))


# Helpers -----------------------------------------------------------------------------------
def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words)] if text else []


def _split(text: str, pieces: int) -> list[str]:
    size = max(1, -(-len(text) // pieces))
    parts = [text[i * size : (i + 1) * size] for i in range(pieces)]
    return parts
