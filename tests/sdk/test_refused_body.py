"""A daemon that answers before reading a whole body (a 413 for a body over its
max_request_bytes, past what it reads and drops) and closes: the CLI's transport reads that
answer instead of reporting a broken connection."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from rota.client import RawClient
from rota.errors import InvalidSpec, RequestTooLarge

DETAIL = "the request body is larger than 1 MiB (1048576 bytes), the most this daemon takes"


def _answer_at_once(listener: socket.socket) -> None:
    conn, _ = listener.accept()
    with conn:
        head = b""
        while b"\r\n\r\n" not in head:
            head += conn.recv(4096)
        body = json.dumps({"type": "about:blank", "title": "RequestTooLarge", "status": 413,
                           "detail": DETAIL}).encode()
        conn.sendall(b"HTTP/1.1 413 Content Too Large\r\ncontent-type: application/problem"
                     b"+json\r\nconnection: close\r\ncontent-length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
    # closed with most of the request unread: the client's next writes fail


def test_the_answer_to_a_body_cut_short_is_read(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    server = threading.Thread(target=_answer_at_once, args=(listener,), daemon=True)
    server.start()
    try:
        with RawClient(path) as c, pytest.raises(RequestTooLarge) as got:
            c.request("POST", "/v1/jobs", json={"jobs": [{"command": ["x" * (8 << 20)]}]})
        assert str(got.value) == DETAIL
        assert isinstance(got.value, InvalidSpec)  # the CLI's "bad input" exit code
    finally:
        server.join(10)
        listener.close()
