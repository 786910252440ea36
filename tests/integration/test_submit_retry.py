"""A submit whose answer is lost to a daemon SIGKILL after the jobs were stored: sent again
with the same idempotency key, it answers the jobs stored then and makes no copy."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import rota
from rota_testing import DaemonProcess


class CutAfterStore:
    """A proxy to the daemon's socket. The first ``POST /v1/jobs`` reaches the daemon; its
    answer (the jobs are stored by then) is withheld: the daemon is SIGKILLed and started
    again, and the client's connection closed. Everything else is passed through."""

    def __init__(self, d: DaemonProcess, path: Path) -> None:
        self.d, self.path, self.cuts = d, path, 0
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(path))
        self.listener.listen(8)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        up = socket.socket(socket.AF_UNIX)
        up.connect(str(self.d.socket))
        request = _read_request(conn)
        up.sendall(request)
        if request.startswith(b"POST /v1/jobs ") and not self.cuts:
            self.cuts += 1
            up.recv(1)  # the daemon answers: the jobs are stored
            self.d.kill()
            self.d.start()
            conn.close()
            up.close()
            return
        threading.Thread(target=_pipe, args=(up, conn), daemon=True).start()
        _pipe(conn, up)

    def close(self) -> None:
        self.listener.close()


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += conn.recv(65536)
    return head + b"\r\n\r\n" + body


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def cut_after_store(d: DaemonProcess, path: Path) -> Iterator[CutAfterStore]:
    proxy = CutAfterStore(d, path)
    try:
        yield proxy
    finally:
        proxy.close()


def test_a_submit_cut_by_a_daemon_sigkill_is_sent_again_and_makes_no_copy(
        daemon_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = daemon_factory().start()
    specs = [{"command": ["sleep", "0"], "gpus": 0, "name": f"b{n}"} for n in range(3)]
    with cut_after_store(d, tmp_path / "p.sock") as proxy, rota.Client(proxy.path) as c:
        jobs = c.submit(specs)
        assert proxy.cuts == 1  # the first answer was lost, the jobs stored
    with d.client() as raw:
        stored = raw.jobs(limit=100)
    assert sorted(j["id"] for j in stored) == sorted(j.id for j in jobs)
    assert [j.name for j in jobs] == ["b0", "b1", "b2"]  # the batch, in its order
