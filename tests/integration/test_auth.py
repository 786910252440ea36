"""The TCP API: tokens, users, who may do what, and what never leaves the daemon."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rota_testing import DaemonProcess, free_port, kill_job_processes, wait_until


class Tcp:
    """A daemon listening on TCP as well, and helpers to talk to it as different people."""

    def __init__(self, daemon: DaemonProcess, port: int) -> None:
        self.daemon, self.url = daemon, f"http://127.0.0.1:{port}"

    def cli(self, *args: str) -> dict[str, Any]:
        r = subprocess.run([sys.executable, "-m", "rota", *args, "--json"], env=self.daemon.env,
                           capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        out: dict[str, Any] = json.loads(r.stdout)
        return out

    def as_(self, token: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


@pytest.fixture(params=[0, 1], ids=["daemon", "api-worker"])
def tcp(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Tcp]:
    """Every test twice: the daemon serving TCP itself, and an API worker serving it (job
    reads from the store, everything else forwarded to the daemon's socket)."""
    port = free_port()
    d = DaemonProcess(tmp_path / "home", args=["--listen", f"127.0.0.1:{port}",
                                               "--api-workers", str(request.param)]).start()
    try:
        yield Tcp(d, port)
    finally:
        d.stop()
        kill_job_processes(d.home)


def problem(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = r.json()
    assert "Traceback" not in r.text
    return body


def test_every_tcp_request_needs_a_valid_token(tcp: Tcp) -> None:
    with tcp.as_(None) as anon:
        for method, path in (("GET", "/v1/health"), ("GET", "/v1/jobs"), ("GET", "/v1/gpus"),
                             ("POST", "/v1/jobs")):
            body = problem(anon.request(method, path), 401)
            assert "rota token create" in body["detail"]
    with tcp.as_("rota_not-a-real-token") as bad:
        assert "unknown or revoked" in problem(bad.get("/v1/jobs"), 401)["detail"]
    with httpx.Client(base_url=tcp.url, headers={"Authorization": "Basic dXNlcjpwYXNz"}) as c:
        assert "Bearer" in problem(c.get("/v1/jobs"), 401)["detail"]


def test_token_lifecycle_and_ownership(tcp: Tcp) -> None:
    tcp.cli("user", "add", "alice")
    tcp.cli("user", "add", "bob")
    tcp.cli("user", "add", "root", "--admin")
    alice = tcp.cli("token", "create", "--user", "alice", "--note", "laptop")
    bob = tcp.cli("token", "create", "--user", "bob")["token"]
    root = tcp.cli("token", "create", "--user", "root")["token"]
    assert alice["token"].startswith("rota_") and alice["user"] == "alice"

    # the store keeps only the digest: the token is nowhere in the database file
    db = (tcp.daemon.home / "rota.db").read_bytes()
    assert alice["token"].encode() not in db and bob.encode() not in db

    with tcp.as_(alice["token"]) as a, tcp.as_(bob) as b, tcp.as_(root) as r:
        assert a.get("/v1/whoami").json() == {"user": "alice", "admin": False, "via": "tcp"}
        job = a.post("/v1/jobs", json={"jobs": [{"command": ["sleep", "30"], "gpus": 0.25,
                                                 "env": {"API_KEY": "s3cr3t-value"},
                                                 "secret_env": ["API_KEY"]}]})
        assert job.status_code == 201, job.text
        jid = job.json()["jobs"][0]["id"]
        assert job.json()["jobs"][0]["user"] == "alice"  # recorded from the token
        # bob sees the queue but may not touch or read alice's job
        assert any(j["id"] == jid for j in b.get("/v1/jobs").json()["jobs"])
        for path in (f"/v1/jobs/{jid}/cancel", f"/v1/jobs/{jid}/hold",
                     f"/v1/jobs/{jid}/requeue"):
            assert "belongs to alice" in problem(b.post(path), 403)["detail"]
        problem(b.get(f"/v1/jobs/{jid}/logs"), 403)
        problem(b.get(f"/v1/jobs/{jid}/logs/stream"), 403)
        # its metrics and checkpoints come from the same output: one rule for all three
        assert "belongs to alice" in problem(b.get(f"/v1/jobs/{jid}/metrics"), 403)["detail"]
        problem(b.get(f"/v1/jobs/{jid}/checkpoints"), 403)
        assert a.get(f"/v1/jobs/{jid}/metrics").status_code == 200
        assert r.get(f"/v1/jobs/{jid}/checkpoints").status_code == 200
        # nor submit in her name, nor do admin things
        problem(b.post("/v1/jobs", json={"jobs": [{"command": ["true"]}], "user": "alice"}), 403)
        assert "needs an admin" in problem(b.post("/v1/gpus/0/pause"), 403)["detail"]
        problem(b.post("/v1/drain"), 403)
        problem(b.post("/v1/shutdown"), 403)
        problem(b.post("/v1/users", json={"name": "mallory", "admin": True}), 403)
        problem(b.post("/v1/tokens", json={"user": "alice"}), 403)
        # the secret never comes back, to anyone
        for c in (a, b, r):
            for path in (f"/v1/jobs/{jid}", "/v1/jobs", f"/v1/jobs/{jid}/events"):
                assert "s3cr3t-value" not in c.get(path).text
        # the owner and an admin may
        assert a.get(f"/v1/jobs/{jid}/logs").status_code == 200
        assert r.get(f"/v1/jobs/{jid}/logs", params={"limit": 1}).status_code == 200
        assert r.post("/v1/gpus/1/pause").json()["paused"] is True
        assert r.post("/v1/gpus/1/resume").json()["paused"] is False
        assert a.post(f"/v1/jobs/{jid}/cancel").status_code == 200
        # tokens: each user lists their own; admin lists all; revoking works at once
        assert {t["user"] for t in b.get("/v1/tokens").json()["tokens"]} == {"bob"}
        listed = r.get("/v1/tokens").json()["tokens"]
        assert {t["user"] for t in listed} == {"alice", "bob", "root"}
        assert all("token" not in t and "digest" not in t for t in listed)
        assert a.get("/v1/whoami").status_code == 200
        problem(b.post(f"/v1/tokens/{alice['id']}/revoke"), 403)
        assert a.post(f"/v1/tokens/{alice['id']}/revoke").json()["revoked_at"]
        assert "revoked" in problem(a.get("/v1/whoami"), 401)["detail"]
        problem(r.post(f"/v1/tokens/{alice['id']}/revoke"), 409)


def test_socket_is_the_owner_and_admin(tcp: Tcp) -> None:
    with tcp.daemon.client() as c:
        me = c.request("GET", "/v1/whoami")
        assert me["admin"] is True and me["via"] == "socket"


def test_bad_user_names_and_unknown_users(tcp: Tcp) -> None:
    r = subprocess.run([sys.executable, "-m", "rota", "user", "add", "Bad Name!"],
                       env=tcp.daemon.env, capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == 2 and "user name 'Bad Name!'" in r.stderr
    r = subprocess.run([sys.executable, "-m", "rota", "token", "create", "--user", "ghost"],
                       env=tcp.daemon.env, capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == 1 and "no user 'ghost'" in r.stderr
    tcp.cli("user", "add", "carol")
    r = subprocess.run([sys.executable, "-m", "rota", "user", "add", "carol"],
                       env=tcp.daemon.env, capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == 1 and "already exists" in r.stderr


def test_requeue_whoami_summary_filters_and_gpu_history(tcp: Tcp) -> None:
    with tcp.daemon.client() as c:
        [run] = c.submit([{"command": ["sleep", "30"], "gpus": 1, "project": "llm",
                           "tags": ["sweep-1", "a_b"]}])
        [done] = c.submit([{"command": ["sh", "-c", "exit 3"], "gpus": 0.5, "project": "vision"}])
        assert c.wait(done["id"], timeout=30)["state"] == "failed"
        wait_until(lambda: c.job(run["id"])["state"] == "running")
        # a running job is stopped and queued again; it runs again as attempt 2
        r = c.request("POST", f"/v1/jobs/{run['id']}/requeue")
        assert r["requeued"] == run["id"]
        wait_until(lambda: c.job(run["id"])["attempts"] >= 2, timeout=30)
        first = c.job(run["id"])["attempts_detail"][0]
        assert first["outcome"] == "requeued" and "requeued by request" in first["reason"]
        # an ended job is submitted anew, same spec
        again = c.request("POST", f"/v1/jobs/{done['id']}/requeue")["job"]
        assert again["id"] != done["id"] and again["state"] in ("pending", "starting",
                                                               "running", "failed")
        # filters: project and tag (an underscore is not a wildcard)
        assert [j["id"] for j in c.request("GET", "/v1/jobs", params={"tag": "a_b"})["jobs"]] \
            == [run["id"]]
        assert c.request("GET", "/v1/jobs", params={"tag": "aXb"})["jobs"] == []
        vision = c.request("GET", "/v1/jobs", params={"project": "vision"})["jobs"]
        assert {j["id"] for j in vision} == {done["id"], again["id"]}
        s = c.request("GET", "/v1/summary")
        assert s["counts"]["failed"] >= 1
        assert set(s["gpu_hours"]["by_project"]) >= {"llm", "vision"}
        assert s["gpu_hours"]["by_project"]["llm"] > 0
        gpus = c.gpus()["gpus"]
        assert all(g["history"] and len(g["history"][0]) == 4 for g in gpus)
        c.cancel(run["id"])


def test_prometheus_metrics(tcp: Tcp) -> None:
    with tcp.daemon.client() as c:
        [j] = c.submit([{"command": ["sh", "-c", "exit 0"], "gpus": 0.5}])
        assert c.wait(j["id"], timeout=30)["state"] == "completed"
        [h] = c.submit([{"command": ["true"], "gpus": 0.25, "hold": True}])
        c.pause(2)
    problem(httpx.get(f"{tcp.url}/metrics", timeout=30), 401)  # a scraper needs a token too
    tcp.cli("user", "add", "prom")
    token = tcp.cli("token", "create", "--user", "prom")["token"]
    with tcp.as_(token) as prom:
        r = prom.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    from prometheus_client.parser import text_string_to_metric_families

    fams = {f.name: f for f in text_string_to_metric_families(r.text)}
    value = {(s.name, tuple(sorted(s.labels.items()))): s.value
             for f in fams.values() for s in f.samples}
    assert value[("rota_jobs", (("state", "completed"),))] == 1
    assert value[("rota_jobs", (("state", "held"),))] == 1
    assert value[("rota_job_starts_total", ())] == 1
    assert value[("rota_job_attempts_ended_total", (("outcome", "completed"),))] == 1
    assert value[("rota_job_queue_wait_seconds_count", ())] == 1
    assert value[("rota_job_run_seconds_count", (("outcome", "completed"),))] == 1
    assert value[("rota_scheduling_pass_duration_seconds_count", ())] >= 1
    gpus = {dict(lbl)["gpu"]: v for (name, lbl), v in value.items()
            if name == "rota_gpu_schedulable"}
    assert gpus == {"0": 1, "1": 1, "2": 0, "3": 1}  # GPU 2 is paused
    assert value[("rota_gpu_memory_total_bytes", (("gpu", "0"), ("uuid", next(
        dict(lbl)["uuid"] for (n, lbl) in value if n == "rota_gpu_memory_total_bytes"
        and dict(lbl)["gpu"] == "0"))))] == 24 * 2**30
    routes = {dict(lbl).get("route") for (n, lbl) in value
              if n == "rota_api_request_duration_seconds_count"}
    assert "/v1/jobs/{job_id}/wait" in routes and "/v1/jobs" in routes
    assert not any(r and r.rstrip("/").split("/")[-1].isdigit() for r in routes)
    assert "Traceback" not in r.text and h["id"] > 0


def test_logs_cannot_be_read_outside_a_jobs_own_file(tcp: Tcp) -> None:
    secret = tcp.daemon.home / "rota.db"
    with tcp.daemon.client() as c:
        [j] = c.submit([{"command": ["echo", "mine"], "gpus": 0}])
        c.wait(j["id"], timeout=30)
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(tcp.daemon.socket)),
                      base_url="http://rota") as raw:
        assert raw.get(f"/v1/jobs/{j['id']}/logs").json()["data"].endswith("mine\n")
        for path in ("/v1/jobs/..%2F..%2Frota.db/logs", "/v1/jobs/../../rota.db/logs",
                     "/v1/jobs/%2e%2e/logs", "/v1/jobs/1%2F..%2F..%2Frota.db/logs",
                     f"/v1/jobs/{j['id']}/logs?offset=-1", "/v1/jobs/-1/logs",
                     "/v1/jobs/99999/logs"):
            r = raw.get(path)
            assert r.status_code in (404, 422), (path, r.status_code)
            assert "SQLite format" not in r.text and str(secret) not in r.text


def test_cli_reaches_a_remote_daemon_with_rota_url_and_token(tcp: Tcp, tmp_path: Path) -> None:
    tcp.cli("user", "add", "dana")
    token = tcp.cli("token", "create", "--user", "dana")["token"]
    env = {**tcp.daemon.env, "ROTA_HOME": str(tmp_path / "elsewhere"), "ROTA_URL": tcp.url}

    def cli(*args: str, token_env: str | None = token) -> subprocess.CompletedProcess[str]:
        e = {**env, **({"ROTA_TOKEN": token_env} if token_env else {})}
        return subprocess.run([sys.executable, "-m", "rota", *args], env=e,
                              capture_output=True, text=True, timeout=60, check=False)

    r = cli("submit", "--json", "--gpus", "0", "--time-limit", "1h", "--", "echo", "remote")
    assert r.returncode == 0, r.stderr
    [job] = json.loads(r.stdout)["jobs"]
    assert job["user"] == "dana" and job["time_limit"] == 3600
    r = cli("wait", str(job["id"]), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "completed", r.stderr
    r = cli("queue", "--json", token_env=None)
    assert r.returncode != 0 and "token" in (r.stderr + r.stdout)
