"""API workers (`rota server --listen ... --api-workers N`): they answer job reads from the
store, exactly as the daemon would, and hand everything else to it. (Every TCP test of
test_auth.py also runs through a worker.)"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from rota_testing import DaemonProcess, free_port, kill_job_processes, wait_until


class Served:
    def __init__(self, daemon: DaemonProcess, port: int, token: str) -> None:
        self.daemon, self.port = daemon, port
        self.tcp = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                headers={"Authorization": f"Bearer {token}"})
        self.sock = httpx.Client(transport=httpx.HTTPTransport(uds=str(daemon.socket)),
                                 base_url="http://rota", timeout=30)

    def workers(self) -> list[psutil.Process]:
        assert self.daemon.proc is not None
        out = []
        for c in psutil.Process(self.daemon.proc.pid).children():
            try:
                if "rota.server.api_worker" in " ".join(c.cmdline()):
                    out.append(c)
            except psutil.Error:  # a zombie: dead, not yet reaped by the daemon
                pass
        return out


def _cli(d: DaemonProcess, *args: str) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-m", "rota", *args, "--json"], env=d.env,
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    return out


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    port = free_port()
    d = DaemonProcess(tmp_path / "home", simulate="2x24G",
                      args=["--listen", f"127.0.0.1:{port}", "--api-workers", "2"]).start()
    try:
        _cli(d, "user", "add", "alice")
        s = Served(d, port, _cli(d, "token", "create", "--user", "alice")["token"])
        wait_until(lambda: len(s.workers()) == 2, what="two API workers")
        yield s
        s.tcp.close()
        s.sock.close()
    finally:
        d.stop()
        kill_job_processes(d.home)


def _ok(r: httpx.Response) -> Any:
    assert r.status_code < 300, r.text
    return r.json()


def test_a_worker_answers_job_reads_exactly_as_the_daemon(served: Served) -> None:
    submit = served.tcp.post  # through a worker, forwarded to the daemon
    running = _ok(submit("/v1/jobs", json={"jobs": [{"command": ["sleep", "60"], "gpus": 2}]}))
    run_id = running["jobs"][0]["id"]
    wait_until(lambda: _ok(served.sock.get(f"/v1/jobs/{run_id}"))["state"] == "running",
               what="the running job")
    ids = [j["id"] for j in _ok(submit("/v1/jobs", json={"jobs": [
        {"command": ["true"], "gpus": 0.5, "after": [run_id]},  # pending: waits for it
        {"command": ["true"], "hold": True, "tags": ["t1"]},    # held
        {"command": ["sh", "-c", "exit 3"], "gpus": 0},         # failed
        {"command": ["true"], "gpus": 0, "project": "p"},       # completed
    ]}))["jobs"]]
    wait_until(lambda: {_ok(served.sock.get(f"/v1/jobs/{i}"))["state"] for i in ids[2:]}
               == {"failed", "completed"}, what="the short jobs to end")
    states = set()
    for job_id in [run_id, *ids]:
        mine = _ok(served.tcp.get(f"/v1/jobs/{job_id}"))
        assert mine == _ok(served.sock.get(f"/v1/jobs/{job_id}"))
        states.add(mine["state"])
    assert states == {"running", "pending", "held", "failed", "completed"}
    pending = _ok(served.tcp.get(f"/v1/jobs/{ids[0]}"))
    assert pending["reason"]["code"] == "dependency" and str(run_id) in \
        pending["reason"]["message"]
    assert _ok(served.tcp.get(f"/v1/jobs/{run_id}"))["gpu_indices"] == [0, 1]
    for query in ("", "?state=pending&state=running", "?limit=2", f"?before={ids[2]}",
                  "?tag=t1", "?project=p", "?user=alice&limit=3"):
        assert _ok(served.tcp.get(f"/v1/jobs{query}")) == \
            _ok(served.sock.get(f"/v1/jobs{query}")), query
    # its errors are the daemon's too
    for path in ("/v1/jobs/999999", "/v1/jobs/abc", "/v1/jobs?state=nope", "/v1/jobs?limit=0"):
        mine, theirs = served.tcp.get(path), served.sock.get(path)
        assert (mine.status_code, mine.json()) == (theirs.status_code, theirs.json()), path
        assert mine.headers["content-type"].startswith("application/problem+json")


def test_a_worker_refuses_a_revoked_token_within_a_second(served: Served) -> None:
    assert _ok(served.tcp.get("/v1/jobs"))["jobs"] == []
    token_id = _ok(served.sock.get("/v1/tokens"))["tokens"][0]["id"]
    _ok(served.sock.post(f"/v1/tokens/{token_id}/revoke"))
    wait_until(lambda: served.tcp.get("/v1/jobs").status_code == 401, timeout=3,
               what="the job list refused")
    assert served.tcp.get("/v1/jobs/1").status_code == 401
    assert served.tcp.post("/v1/jobs", json={"jobs": [{"command": ["true"]}]}).status_code \
        == 401


def test_the_endpoints_for_workers_are_not_served_over_tcp(served: Served) -> None:
    r = served.tcp.post("/v1/live", json={"ids": [1]})
    assert r.status_code == 404, r.text
    assert _ok(served.sock.post("/v1/live", json={"ids": []})) == {"facts": {}}
    totals = {"slot": 5, "pid": 1, "counts": [
        {"labels": ["GET", "/made-up", "200"], "buckets": [1] * 12, "sum": 0.5}]}
    assert served.tcp.post("/v1/worker-requests", json=totals).status_code == 404
    assert ("GET", "/made-up", "200") not in _request_counts(served)
    short = {**totals, "counts": [{**totals["counts"][0], "buckets": [1] * 3}]}
    r = served.sock.post("/v1/worker-requests", json=short)
    assert r.status_code == 422 and "buckets" in r.json()["detail"], r.text
    _ok(served.sock.post("/v1/worker-requests", json=totals))
    assert _request_counts(served)[("GET", "/made-up", "200")] == 1


def _request_counts(served: Served) -> dict[tuple[str, str, str], float]:
    """rota_api_request_duration_seconds_count by (method, route, status), from /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    text = served.sock.get("/metrics").text
    return {(s.labels["method"], s.labels["route"], s.labels["status"]): s.value
            for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "rota_api_request_duration_seconds_count"}


def test_requests_a_worker_answers_are_in_the_daemons_metrics_once(served: Served) -> None:
    """Reads a worker answers itself and requests it forwards are both timed by the worker
    (what the client waited), under the daemon's route templates, and counted once."""
    [job] = _ok(served.tcp.post("/v1/jobs", json={"jobs": [{"command": ["true"],
                                                            "hold": True}]}))["jobs"]
    for _ in range(7):
        _ok(served.tcp.get(f"/v1/jobs/{job['id']}"))
    _ok(served.tcp.get("/v1/jobs"))
    events = served.tcp.get(f"/v1/jobs/{job['id']}/events")
    assert "x-rota-route" not in events.headers  # the daemon's note to the worker stays there
    assert served.tcp.get("/v1/jobs/999999").status_code == 404
    want = {("POST", "/v1/jobs", "201"): 1, ("GET", "/v1/jobs/{job_id}", "200"): 7,
            ("GET", "/v1/jobs", "200"): 1, ("GET", "/v1/jobs/{job_id}/events", "200"): 1,
            ("GET", "/v1/jobs/{job_id}", "404"): 1}
    wait_until(lambda: all(_request_counts(served).get(k) == n for k, n in want.items()),
               timeout=15, what=f"{want} in /metrics")
    counts = _request_counts(served)
    assert not any(route == "/{path:path}" for _, route, _ in counts), counts
    # the workers' totals survive a worker's restart: what /metrics shows never goes down
    first = served.workers()
    for w in first:
        w.send_signal(signal.SIGKILL)
    wait_until(lambda: len(served.workers()) == 2 and
               not {w.pid for w in served.workers()} & {w.pid for w in first},
               timeout=20, what="new workers")
    _ok(served.tcp.get(f"/v1/jobs/{job['id']}"))
    wait_until(lambda: _request_counts(served).get(("GET", "/v1/jobs/{job_id}", "200")) == 8,
               timeout=15, what="the eighth get counted")
    assert all(_request_counts(served).get(k, 0) >= n for k, n in want.items())


def test_connections_opened_at_once_are_spread_over_the_workers(served: Served) -> None:
    """Each worker accepts on a socket of its own (SO_REUSEPORT), which the kernel fills
    evenly. (On one shared socket, whichever worker accepts first takes the connection: in
    one load bench run, one of two workers took all 50.)"""
    conns = [socket.create_connection(("127.0.0.1", served.port)) for _ in range(40)]
    try:
        auth = served.tcp.headers["authorization"].encode()
        for c in conns:  # one request each, so that each connection is surely accepted
            c.sendall(b"GET /v1/health HTTP/1.1\r\nhost: x\r\nauthorization: " + auth +
                      b"\r\n\r\n")
        for c in conns:
            assert c.recv(65536).startswith(b"HTTP/1.1 200")

        def established(w: psutil.Process) -> int:
            return sum(1 for c in w.net_connections("tcp")
                       if c.laddr and c.laddr.port == served.port and c.status == "ESTABLISHED")

        per_worker = [established(w) for w in served.workers()]
        assert sum(per_worker) == 40 and min(per_worker) >= 5, per_worker
    finally:
        for c in conns:
            c.close()


def test_a_worker_that_dies_is_started_again(served: Served) -> None:
    first = served.workers()
    first[0].send_signal(signal.SIGKILL)
    wait_until(lambda: len(served.workers()) == 2 and
               {w.pid for w in served.workers()} != {w.pid for w in first},
               timeout=15, what="a new worker")
    for _ in range(20):  # whichever worker takes the connection answers
        with httpx.Client(base_url=f"http://127.0.0.1:{served.port}", timeout=10,
                          headers=served.tcp.headers) as fresh:
            assert _ok(fresh.get("/v1/health"))["ok"]


def test_the_workers_stop_with_the_daemon_and_free_the_port(served: Served) -> None:
    workers = served.workers()
    served.daemon.stop()
    for w in workers:
        w.wait(10)
    with socket.socket() as s:
        s.bind(("127.0.0.1", served.port))  # nothing holds it any more


def test_a_worker_whose_daemon_is_gone_leaves_and_frees_the_port(tmp_path: Path) -> None:
    """Started for a daemon that is not (or no longer) its parent, as when the daemon dies
    while the worker still starts: it leaves at once instead of holding the port."""
    from rota.config import load_settings

    settings = load_settings(home=tmp_path / "home")
    settings.home.mkdir(parents=True)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, "-m", "rota.server.api_worker", "--fd", str(listener.fileno()),
             "--daemon-pid", "999999999"], stdin=subprocess.PIPE,
            pass_fds=(listener.fileno(),))
        assert proc.stdin is not None
        proc.stdin.write(settings.model_dump_json().encode())
        proc.stdin.close()
        assert proc.wait(30) == 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
