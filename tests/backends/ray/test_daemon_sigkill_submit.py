"""A real SIGKILL of the daemon between Ray's submit and its answer: Ray has the job, Rota
has no engine id for it yet. The restarted daemon must find the job by Rota's key (the
job's ``submission_id``) and follow it, never submit it again.

Ray's submit is one HTTP POST (``/api/jobs/``) to the head's dashboard, so the cut is made
by a small HTTP proxy on 127.0.0.1 in front of the module's private Ray head: it forwards
every request as it is; a submit's answer, once Ray has given it, is written to a marker
file and withheld while a HOLD file exists (or until the client hangs up). The daemon's Ray
pool names the proxy as its ``address``. The Slurm variant is
tests/backends/engine_backend/test_daemon_sigkill_submit.py.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from rota_testing import DaemonProcess, kill_job_processes, wait_until

from .conftest import LocalRay

TOML = """
default_pool = "rc"
[pools.rc]
engine = "ray"
address = "{address}"
poll_every = 0.5
"""

#: headers the proxy does not pass on (hop-by-hop, or redone for the body as forwarded)
_DROPPED = frozenset({"connection", "keep-alive", "transfer-encoding", "content-encoding",
                      "content-length", "host", "proxy-connection", "te", "trailer",
                      "upgrade"})


class HoldingProxy:
    """Forwards every request to ``upstream``. A submit (``POST /api/jobs/``) goes to Ray
    at once; its answer is then written to ``marker`` and sent only when ``hold`` is gone
    or the client has hung up. ``submissions`` lists the ``submission_id`` of every submit
    forwarded, in order."""

    def __init__(self, upstream: str, hold: Path, marker: Path) -> None:
        self.upstream, self.hold, self.marker = upstream.rstrip("/"), hold, marker
        self.submissions: list[str] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.address = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HoldingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.hold.unlink(missing_ok=True)  # no handler left waiting
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: pytest shows the assertions

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _DROPPED}
                resp = httpx.request(self.command, proxy.upstream + self.path,
                                     headers=headers, content=body, timeout=60)
                if self.command == "POST" and urlsplit(self.path).path == "/api/jobs/":
                    with proxy._lock:
                        proxy.submissions.append(str(json.loads(body)["submission_id"]))
                    proxy.hold_answer(self.connection, resp.content)
                try:
                    self.send_response(resp.status_code)
                    for k, v in resp.headers.items():
                        if k.lower() not in _DROPPED:
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(resp.content)))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(resp.content)
                except OSError:  # the client is gone (the SIGKILLed daemon)
                    pass

            do_GET = do_POST = do_PUT = do_DELETE = _forward

        return Handler

    def hold_answer(self, conn: socket.socket, answer: bytes) -> None:
        if not self.hold.exists():
            return
        tmp = self.marker.with_suffix(".tmp")
        tmp.write_bytes(answer)
        tmp.rename(self.marker)
        while self.hold.exists() and not _hung_up(conn):
            time.sleep(0.05)


def _hung_up(conn: socket.socket) -> bool:
    """Whether the peer has closed its end (readable, and nothing to read)."""
    readable, _, _ = select.select([conn], [], [], 0)
    if not readable:
        return False
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


@pytest.fixture()
def proxy(ray_cluster: LocalRay, tmp_path: Path) -> Iterator[HoldingProxy]:
    hold, marker = tmp_path / "hold", tmp_path / "answered"
    hold.touch()
    with HoldingProxy(ray_cluster.address, hold, marker) as p:
        yield p


def _submission_ids(ray_cluster: LocalRay) -> list[str]:
    """Every submission id the real head holds (``GET /api/jobs/``, past the proxy)."""
    resp = httpx.get(ray_cluster.address + "/api/jobs/", timeout=30)
    resp.raise_for_status()
    return [str(j.get("submission_id")) for j in resp.json()]


def _ended(d: DaemonProcess, job_id: int, timeout: float = 90) -> dict[str, object]:
    d.cli("wait", str(job_id), "--timeout", str(timeout), timeout=timeout + 30)
    r = d.cli("show", str(job_id), "--json")
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))


def test_a_sigkill_between_the_submit_and_its_answer_runs_the_job_once(
        ray_cluster: LocalRay, proxy: HoldingProxy, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "rota.toml").write_text(TOML.format(address=proxy.address))
    d = DaemonProcess(home).start()
    try:
        job = d.submit("--gpus", "0", "--", "sh", "-c", "echo rota-after-the-cut",
                       cwd=tmp_path)
        wait_until(proxy.marker.exists, 60, every=0.05, what="Ray to have the job")
        answered = json.loads(proxy.marker.read_text())
        # the record written before the submit: Rota's key, and no engine id yet
        [record] = (home / "status").glob(f"{job}-1.json.engine")
        saved = json.loads(record.read_text())
        assert saved["engine_id"] is None, saved
        key = saved["key"]
        assert key.endswith(f"-{job}-1"), key
        assert answered["submission_id"] == key, answered
        assert proxy.submissions == [key]
        d.kill()
        proxy.hold.unlink()  # the held answer goes nowhere; later submits pass through
        d.start()
        done = _ended(d, job)
        assert (done["state"], done["exit_code"], done["attempts"]) == ("completed", 0, 1), done
        assert "rota-after-the-cut" in d.cli("logs", str(job)).stdout.splitlines()
        # re-found by its key, never submitted again: one POST, one Ray job of this Rota job
        assert proxy.submissions == [key]
        prefix = key.rsplit("-", 1)[0] + "-"  # rota-<install>-<job>-
        ids = _submission_ids(ray_cluster)
        assert ids.count(key) == 1, ids
        assert [i for i in ids if i.startswith(prefix)] == [key], ids
    finally:
        with contextlib.suppress(Exception):
            d.stop()
        kill_job_processes(home)
