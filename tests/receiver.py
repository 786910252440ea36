"""A local webhook receiver for the alert tests: a real HTTP server in a thread that
records each POST's JSON body and answers with scripted statuses (then 200)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    def __init__(self, statuses: list[int] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        self.statuses = list(statuses or [])
        self.headers = headers or {}
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.got = threading.Event()
        self.url = ""

    def answer(self) -> int:
        return self.statuses.pop(0) if self.statuses else 200


@contextmanager
def receiving(statuses: list[int] | None = None, *, port: int = 0,
              headers: dict[str, str] | None = None) -> Iterator[Receiver]:
    rec = Receiver(statuses, headers)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            status = rec.answer()
            rec.bodies.append(json.loads(body))
            rec.paths.append(self.path)
            self.send_response(status)
            for k, v in (rec.headers if status != 200 else {}).items():
                self.send_header(k, v)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
            rec.got.set()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    rec.url = f"http://127.0.0.1:{server.server_address[1]}/services/T000/B000/s3cretPath"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()
