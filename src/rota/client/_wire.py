"""HTTP/1.1 to the daemon with the standard library's socket and json only.

The CLI starts a fresh process for every command, and a general HTTP client costs more
to import (httpx ~80 ms, http.client ~25 ms with email and ssl) than the whole request
takes. The daemon speaks plain HTTP/1.1 (uvicorn): requests with a JSON body, answers
with a Content-Length or chunked (streams). One connection is kept alive per transport;
a kept connection the daemon closed meanwhile fails before any answer, and the request
then goes once more on a new one (the daemon never saw it).
"""

from __future__ import annotations

import _socket  # socket.py costs ~4 ms to import (its enums); a Unix socket needs none of it
import json as _json
from collections.abc import Iterator
from contextlib import contextmanager

from rota.client._endpoint import DEFAULT_TIMEOUT, Endpoint, decode, error_from
from rota.errors import DaemonUnavailable

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)
if TYPE_CHECKING:
    from typing import Any

    #: Seconds, or None for no limit; an ``httpx.Timeout`` is read for its ``read`` part.
    Timeout = Any
else:
    Timeout = object  # imported by name elsewhere; annotations alone use it

_MAX_HEAD = 64 * 1024


def seconds(timeout: Timeout) -> float | None:
    """A timeout in seconds from a number, None, or an object with ``read`` (httpx)."""
    if timeout is None or isinstance(timeout, int | float):
        return None if timeout is None else float(timeout)
    read = getattr(timeout, "read", None)
    return None if read is None else float(read)


class _Closed(Exception):
    """The peer closed the connection before the first byte of an answer."""


class Answer:
    """The status and headers of an answer, and a reader for its body."""

    def __init__(self, sock: _socket.socket, buf: bytes, status: int, reason: str,
                 headers: dict[str, str]) -> None:
        self._sock, self._buf = sock, buf
        self.status, self.reason, self.headers = status, reason, headers
        self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        self._left = int(length) if length is not None and not self.chunked else None
        self.keep_alive = (headers.get("connection", "").lower() != "close"
                           and (self.chunked or self._left is not None))
        self.done = False

    def _recv(self) -> bytes:
        data = self._sock.recv(65536)
        if not data:
            raise ConnectionResetError("the daemon closed the connection mid-answer")
        return data

    def _line(self) -> bytes:
        while b"\r\n" not in self._buf:
            self._buf += self._recv()
        line, _, self._buf = self._buf.partition(b"\r\n")
        return line

    def _exactly(self, n: int) -> bytes:
        while len(self._buf) < n:
            self._buf += self._recv()
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def iter_bytes(self) -> Iterator[bytes]:
        """The body as it arrives."""
        if self.chunked:
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    while self._line():  # trailers end with an empty line
                        pass
                    break
                yield self._exactly(size)
                self._line()
        elif self._left is not None:
            while self._left > 0:
                if not self._buf:
                    self._buf = self._recv()
                part, self._buf = self._buf[:self._left], self._buf[self._left:]
                self._left -= len(part)
                yield part
        else:  # until the daemon closes the connection
            if self._buf:
                yield self._buf
                self._buf = b""
            while data := self._sock.recv(65536):
                yield data
        self.done = True

    def read(self) -> bytes:
        return b"".join(self.iter_bytes())

    def iter_lines(self) -> Iterator[str]:
        """The body's lines (server-sent events are read this way)."""
        pending = b""
        for part in self.iter_bytes():
            pending += part
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.rstrip(b"\r").decode("utf-8", "replace")
        if pending:
            yield pending.decode("utf-8", "replace")


def sse_events(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """(event, data) of each server-sent event (event "message" when none is named)."""
    event, data = "", list[str]()
    for line in lines:
        if not line:
            if data or event:
                yield event or "message", "\n".join(data)
            event, data = "", list[str]()
        elif line.startswith(":"):
            continue
        else:
            key, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if key == "event":
                event = value
            elif key == "data":
                data.append(value)


class WireTransport:
    """Requests to the daemon from blocking code, on one kept-alive connection."""

    def __init__(self, endpoint: Endpoint, timeout: Timeout = DEFAULT_TIMEOUT) -> None:
        self.endpoint = endpoint
        self.timeout = seconds(timeout)
        self._sock: _socket.socket | None = None
        self._host, self._port, self._tls, self._prefix = _split_url(endpoint)
        auth = "".join(f"{k}: {v}\r\n" for k, v in endpoint.headers().items())
        host = "rota" if endpoint.socket_file else endpoint.base_url.partition("://")[2]
        self._fixed = f"Host: {host.partition('/')[0]}\r\nAccept: application/json\r\n{auth}"

    # --- connection ------------------------------------------------------------------
    def _connect(self, timeout: float | None) -> _socket.socket:
        ep = self.endpoint
        try:
            if ep.socket_file is not None:
                sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
                sock.settimeout(timeout)
                try:
                    sock.connect(ep.socket_file)
                except BaseException:
                    sock.close()
                    raise
            else:
                import socket

                sock = socket.create_connection((self._host, self._port), timeout=timeout)
                if self._tls:
                    import ssl

                    sock = ssl.create_default_context().wrap_socket(
                        sock, server_hostname=self._host)
        except OSError as e:
            raise ep.not_answering(e) from e
        return sock

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    # --- one exchange ----------------------------------------------------------------
    def _head(self, method: str, path: str, params: dict[str, Any] | None,
              body: bytes | None, media: str = "application/json") -> bytes:
        target = self._prefix + path
        if params:
            target += "?" + _query(params)
        head = f"{method} {target} HTTP/1.1\r\n{self._fixed}"
        if body is not None:
            head += f"Content-Type: {media}\r\nContent-Length: {len(body)}\r\n"
        elif method in ("POST", "PUT", "PATCH"):
            head += "Content-Length: 0\r\n"
        return (head + "\r\n").encode("latin-1") + (body or b"")

    def _exchange(self, data: bytes, timeout: float | None) -> Answer:
        """Send one request and read the answer's head (retried once on a stale link)."""
        for fresh in (False, True):
            reused = self._sock is not None and not fresh
            if not reused:
                self.close()
                self._sock = self._connect(timeout)
            sock = self._sock
            assert sock is not None
            sock.settimeout(timeout)
            with self._failing():
                try:
                    try:
                        sock.sendall(data)
                    except (BrokenPipeError, ConnectionResetError) as e:
                        # the daemon may have answered before reading all of a body it
                        # refuses (a 413): that answer is still there to read
                        stopped: Exception = e
                        try:
                            return _read_head(sock)
                        except (_Closed, OSError):
                            raise stopped from None
                    return _read_head(sock)
                except (_Closed, BrokenPipeError, ConnectionResetError) as e:
                    self.close()
                    if not reused:
                        raise self.endpoint.broken(e) from e
        raise AssertionError("unreachable")

    @contextmanager
    def _failing(self) -> Iterator[None]:
        """A socket's failure as Rota's error; the connection, maybe half read, is closed."""
        try:
            yield
        except TimeoutError as e:
            self.close()
            raise self.endpoint.too_slow(e) from e
        except OSError as e:
            self.close()
            raise self.endpoint.broken(e) from e

    def _finish(self, answer: Answer) -> None:
        if not (answer.done and answer.keep_alive):
            self.close()

    def _give_back(self, answer: Answer) -> None:
        """A stream's connection, kept if it may serve the next request, else closed."""
        if answer.done and answer.keep_alive and self._sock is None:
            self._sock = answer._sock
        else:
            answer._sock.close()

    def request(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                json: Any = None, content: bytes | None = None,
                timeout: Timeout = "default") -> Any:
        """Send one request (a JSON body, or ``content``'s bytes); answer its JSON body
        or raise Rota's error."""
        t = self.timeout if timeout == "default" else seconds(timeout)
        if content is not None:
            head = self._head(method, path, params, content, "application/octet-stream")
        else:
            body = None if json is None else _json.dumps(json, separators=(",", ":")).encode()
            head = self._head(method, path, params, body)
        answer = self._exchange(head, t)
        with self._failing():
            content = answer.read()
        self._finish(answer)
        return decode(answer.status, content, answer.reason)

    @contextmanager
    def stream(self, method: str, path: str, *, params: dict[str, Any] | None = None
               ) -> Iterator[Answer]:
        """An open streaming answer (errors already raised); reads may wait forever."""
        answer = self._exchange(self._head(method, path, params, None), self.timeout)
        self._sock = None  # the stream owns its connection: requests meanwhile open another
        try:
            if answer.status >= 400:
                raise error_from(answer.status, answer.read(), answer.reason)
            answer._sock.settimeout(None)
            yield answer
        except (ConnectionResetError, BrokenPipeError) as e:
            raise self.endpoint.broken(e) from e
        finally:
            self._give_back(answer)


def _read_head(sock: _socket.socket) -> Answer:
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            if buf:
                raise ConnectionResetError("the daemon closed the connection mid-answer")
            raise _Closed()
        buf += data
        if len(buf) > _MAX_HEAD:
            raise DaemonUnavailable("the daemon's answer has no end of headers")
    head, _, rest = buf.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    _, status, *reason = status_line.split(" ", 2)
    headers = {}
    for line in lines:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    return Answer(sock, rest, int(status), reason[0] if reason else "", headers)


def _split_url(ep: Endpoint) -> tuple[str, int, bool, str]:
    """(host, port, tls, path prefix) of the endpoint's base URL."""
    if ep.socket_file is not None:
        return "rota", 0, False, ""
    scheme, _, rest = ep.base_url.partition("://")
    hostport, slash, prefix = rest.partition("/")
    tls = scheme.lower() == "https"
    if hostport.startswith("["):  # [::1]:8787
        host, _, port = hostport[1:].partition("]")
        port = port.removeprefix(":")
    else:
        host, _, port = hostport.partition(":")
    return host, int(port) if port else (443 if tls else 80), tls, (slash + prefix).rstrip("/")


def _query(params: dict[str, Any]) -> str:
    """A query string, lists as repeated keys, booleans as true/false (as httpx sends)."""
    from urllib.parse import quote

    parts = []
    for key, value in params.items():
        for v in value if isinstance(value, list | tuple) else [value]:
            if v is None:
                continue
            text = ("true" if v else "false") if isinstance(v, bool) else str(v)
            parts.append(f"{quote(str(key), safe='')}={quote(text, safe='')}")
    return "&".join(parts)
