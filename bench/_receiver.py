"""A webhook receiver for bench/notify_delay.py, in a process of its own: it answers 204 at
once and appends one JSON line per delivery to the file named on its command line: when it
arrived, the event's commit time (the payload's ``timestamp``), its type and ``webhook-id``.

Run: ``python bench/_receiver.py OUT.jsonl`` prints ``listening on PORT`` once ready.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def main(out: str) -> None:
    with open(out, "a", buffering=1) as sink:
        _serve(sink)


def _serve(sink: Any) -> None:

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            arrived = time.time()
            self.send_response(204)
            self.send_header("content-length", "0")
            self.end_headers()
            event = json.loads(body)
            committed = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
            line = {"arrived": arrived, "committed": committed, "type": event["type"]}
            line["id"] = self.headers.get("webhook-id")
            sink.write(json.dumps(line) + "\n")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1])
