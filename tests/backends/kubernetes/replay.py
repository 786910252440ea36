"""A recorded Kubernetes API conversation, replayed by a real HTTP server on 127.0.0.1.

The real ``kubernetes`` client reaches it through a kubeconfig written for the test (a
token user). Each request must be the next recorded one: method, path, query (exactly) and
the recorded parts of its body (a recorded dict's keys and a recorded list's items, deeply);
the answer is the recorded status and object. Anything else is a mismatch: answered 500 and
kept in :attr:`Replay.errors`, so the test fails naming it.

Conversations live in conversations/*.yaml: ``objects`` (anchors), then ``conversations``,
each a list of ``{request: {method, path, query?, body?}, response: {status, body}}``.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

HERE = Path(__file__).with_name("conversations")
TOKEN = "replay-token-0123"


def conversation(file: str, name: str) -> list[dict[str, Any]]:
    doc = yaml.safe_load((HERE / file).read_text())
    return list(doc["conversations"][name])


def all_responses() -> Iterator[tuple[str, dict[str, Any]]]:
    """Every recorded answer that is an API object, with where it is recorded."""
    for path in sorted(HERE.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        for name, exchanges in doc["conversations"].items():
            for i, ex in enumerate(exchanges):
                body = ex["response"].get("body")
                if isinstance(body, dict):
                    yield f"{path.name}:{name}[{i}]", body


def contains(actual: Any, expected: Any, where: str = "body") -> str | None:
    """Why ``actual`` lacks ``expected`` (dict keys and list items, deeply); None if not."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"{where}: {actual!r} is not an object"
        for key, value in expected.items():
            if key not in actual:
                return f"{where}.{key} is missing"
            why = contains(actual[key], value, f"{where}.{key}")
            if why:
                return why
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return f"{where}: {actual!r} is not a list of {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            why = contains(a, e, f"{where}[{i}]")
            if why:
                return why
        return None
    return None if actual == expected else f"{where}: {actual!r} != {expected!r}"


@dataclass
class Seen:
    """A request as the server got it."""

    method: str
    path: str
    query: dict[str, str]
    body: bytes
    content_type: str = ""

    def json(self) -> Any:
        return json.loads(self.body or b"null")


#: (method, target, body, Authorization, Content-Type) -> (status, body): bytes are sent as
#: text, anything else as JSON
Answerer = Callable[[str, str, bytes, str, str], tuple[int, Any]]


class ApiServer:
    """A real HTTP server on 127.0.0.1 (a free port) handing every request to ``answer``."""

    def __init__(self, answer: Answerer) -> None:
        self._answer = answer
        self._server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_port}"

    def start(self) -> ApiServer:
        answer = self._answer

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                status, body = answer(self.command, self.path, self.rfile.read(size),
                                      self.headers.get("Authorization", ""),
                                      self.headers.get("Content-Type", ""))
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                with contextlib.suppress(OSError):  # the client may be gone (SIGKILLed)
                    self.send_response(status)
                    kind = "text/plain" if isinstance(body, bytes) else "application/json"
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _any

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


@dataclass
class Replay:
    exchanges: list[dict[str, Any]]
    seen: list[Seen] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _server: ApiServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        assert self._server is not None
        return self._server.url

    def start(self) -> Replay:
        self._server = ApiServer(lambda method, target, raw, auth, _kind:
                                 self.answer(method, target, raw, auth)).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    def answer(self, method: str, target: str, raw: bytes, auth: str) -> tuple[int, Any]:
        url = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        with self._lock:
            self.seen.append(Seen(method, url.path, query, raw))
            index = len(self.seen) - 1
            why = self._mismatch(index, method, url.path, query, raw, auth)
            if why:
                self.errors.append(why)
                return 500, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                             "message": f"replay mismatch: {why}", "code": 500}
        response = self.exchanges[index]["response"]
        body = response.get("body")
        return int(response["status"]), body.encode() if isinstance(body, str) else body

    def _mismatch(self, index: int, method: str, path: str, query: dict[str, str],
                  raw: bytes, auth: str) -> str | None:
        if auth != f"Bearer {TOKEN}":
            return f"request {index}: no token (Authorization: {auth!r})"
        if index >= len(self.exchanges):
            return f"request {index} ({method} {path}) is past the recorded conversation"
        want = self.exchanges[index]["request"]
        got = (method, path, query)
        expected = (want["method"], want["path"], {k: str(v) for k, v in
                                                   (want.get("query") or {}).items()})
        if got != expected:
            return f"request {index}: {got} != recorded {expected}"
        if "body" in want:
            why = contains(json.loads(raw or b"null"), want["body"])
            if why:
                return f"request {index} ({method} {path}): {why}"
        return None

    def finished(self) -> None:
        """Every recorded request was made, and nothing else."""
        assert not self.errors, self.errors
        made, recorded = len(self.seen), len(self.exchanges)
        nxt = self.exchanges[made]["request"] if made < recorded else None
        assert made == recorded, f"{made} of {recorded} recorded requests made; next: {nxt}"


def kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig for ``server`` with a token user and the context ``replay``."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "replay",
        "clusters": [{"name": "replay", "cluster": {"server": server}}],
        "users": [{"name": "rota", "user": {"token": TOKEN}}],
        "contexts": [{"name": "replay", "context": {"cluster": "replay", "user": "rota",
                                                    "namespace": "ml"}}]}))
    return path
