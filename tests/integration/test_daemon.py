"""The daemon end to end: real processes on simulated GPUs."""

from __future__ import annotations

import itertools
import sys

import pytest

from rota.errors import Conflict, InvalidSpec
from rota_testing import wait_until


def test_jobs_share_a_gpu_and_record_exit_codes(daemon):
    with daemon.client() as c:
        jobs = c.submit([{"command": ["sh", "-c", "sleep 0.3; exit 0"], "gpus": 0.5},
                         {"command": ["sh", "-c", "sleep 0.3; exit 4"], "gpus": 0.5}])
        wait_until(lambda: all(c.job(j["id"])["state"] == "running" for j in jobs)
                   or all(c.job(j["id"])["state"] != "pending" for j in jobs))
        done = [c.wait(j["id"], timeout=20) for j in jobs]
        assert [d["state"] for d in done] == ["completed", "failed"]
        assert [d["exit_code"] for d in done] == [0, 4]
        gpus = [c.job(j["id"])["attempts_detail"][0]["gpus"] for j in jobs]
        assert gpus[0] == gpus[1] and len(gpus[0]) == 1  # best fit: both on the same GPU


def test_env_cuda_and_log(daemon, tmp_path):
    with daemon.client() as c:
        [j] = c.submit([{"command": [sys.executable, "-c",
                                     "import os,sys; "
                                     "print('CVD=' + os.environ['CUDA_VISIBLE_DEVICES'],"
                                     " 'ARGS=' + ' '.join(sys.argv[1:]))",
                                     "--cuda", "9", "x,y"],
                         "gpus": 2, "cuda_arg": True}])
        assert c.wait(j["id"], timeout=20)["state"] == "completed"
        log = c.logs(j["id"])["data"]
        gpus = c.job(j["id"])["attempts_detail"][0]["gpus"]
        ids = ",".join(map(str, gpus))
        assert f"CVD={ids}" in log and f"ARGS=--cuda {ids} x,y" in log


def test_priority_lower_number_first_and_fifo(daemon):
    with daemon.client() as c:
        [blocker] = c.submit([{"command": ["sleep", "1"], "gpus": 4}])
        jobs = c.submit([{"command": ["true"], "gpus": 4, "priority": p, "name": f"p{p}-{n}"}
                         for n, p in enumerate([5, 1, 5, 1])])
        for j in jobs:
            c.wait(j["id"], timeout=30)
        c.wait(blocker["id"], timeout=30)
        starts = sorted((c.job(j["id"])["started_at"], c.job(j["id"])["name"]) for j in jobs)
        assert [n for _, n in starts] == ["p1-1", "p1-3", "p5-0", "p5-2"]


def test_why_explains_waiting(daemon):
    with daemon.client() as c:
        [big] = c.submit([{"command": ["sleep", "30"], "gpus": 3}])
        wait_until(lambda: c.job(big["id"])["state"] == "running")
        [j] = c.submit([{"command": ["true"], "gpus": 2, "allowed_gpus": "0-3"}])
        why = wait_until(lambda: (w := c.why(j["id"]))["code"] != "not_scheduled" and w)
        assert why["code"] in ("resources", "priority")
        assert "2 whole GPUs" in why["message"] and "1 free" in why["message"]
        [held] = c.submit([{"command": ["true"], "hold": True}])
        assert c.why(held["id"])["code"] == "held"
        [dep] = c.submit([{"command": ["true"], "gpus": 0.25, "after": [big["id"]]}])
        w = wait_until(lambda: (x := c.why(dep["id"]))["code"] == "dependency" and x)
        assert f"job {big['id']}" in w["message"]
        # refused unless forced (tests/integration/test_api_newcomers.py), then waits
        [never] = c.request("POST", "/v1/jobs", json={
            "jobs": [{"command": ["true"], "gpus": 8}], "force": True})["jobs"]
        w = wait_until(lambda: (x := c.why(never["id"]))["code"] == "unsatisfiable" and x)
        assert "only 4" in w["message"]
        c.cancel(big["id"])
        assert c.wait(big["id"], timeout=40)["state"] == "cancelled"
        assert c.wait(dep["id"], timeout=20)["state"] == "cancelled"  # dependency failed


def test_retries_with_backoff_then_success(daemon, tmp_path):
    marker = tmp_path / "marker"
    script = (f"import os,sys; p={str(marker)!r}; "
              "n=int(open(p).read()) if os.path.exists(p) else 0; "
              "open(p,'w').write(str(n+1)); sys.exit(0 if n >= 2 else 1)")
    with daemon.client() as c:
        [j] = c.submit([{"command": [sys.executable, "-c", script], "gpus": 0.25, "retries": 3,
                         "retry_backoff": 0.2}])
        assert c.wait(j["id"], timeout=30)["state"] == "completed"
        attempts = c.job(j["id"])["attempts_detail"]
        assert [a["outcome"] for a in attempts] == ["failed", "failed", "completed"]
        gaps = [b["started_at"] - a["ended_at"] for a, b in itertools.pairwise(attempts)]
        assert gaps[0] >= 0.2 and gaps[1] >= 0.4  # exponential backoff


def test_retries_exhausted_fail(daemon):
    with daemon.client() as c:
        [j] = c.submit([{"command": ["false"], "gpus": 0.25, "retries": 1, "retry_backoff": 0.1}])
        res = c.wait(j["id"], timeout=30)
        assert res["state"] == "failed" and res["exit_code"] == 1
        assert len(c.job(j["id"])["attempts_detail"]) == 2


def test_time_limit_terms_then_kills(daemon):
    with daemon.client() as c:
        [j] = c.submit([{"command": ["sh", "-c", "trap '' TERM; sleep 30"], "gpus": 0.25,
                         "time_limit": 0.5, "grace": 0.5}])
        res = c.wait(j["id"], timeout=30)
        assert res["state"] == "timeout"
        kinds = [e["kind"] for e in c.events(j["id"])]
        assert "stopping:timeout" in kinds


def test_cancel_pending_held_running_and_finished(daemon):
    with daemon.client() as c:
        [r] = c.submit([{"command": ["sleep", "30"], "gpus": 4}])
        [p] = c.submit([{"command": ["true"], "gpus": 4}])
        [h] = c.submit([{"command": ["true"], "hold": True}])
        wait_until(lambda: c.job(r["id"])["state"] == "running")
        assert c.cancel(p["id"])["state"] == "cancelled"
        assert c.cancel(h["id"])["state"] == "cancelled"
        c.cancel(r["id"])
        assert c.wait(r["id"], timeout=40)["state"] == "cancelled"
        with pytest.raises(Conflict):
            c.cancel(r["id"])


def test_hold_and_release(daemon):
    with daemon.client() as c:
        [j] = c.submit([{"command": ["true"], "gpus": 0.25, "hold": True}])
        assert c.job(j["id"])["state"] == "held"
        c.release(j["id"])
        assert c.wait(j["id"], timeout=20)["state"] == "completed"
        with pytest.raises(Conflict):
            c.hold(j["id"])


def test_bad_input_is_named_and_nothing_stored(daemon):
    with daemon.client() as c:
        before = len(c.jobs())
        with pytest.raises(InvalidSpec) as e:
            c.submit([{"command": ["true"]}, {"command": ["true"], "gpus": 1.5}])
        assert "jobs[1]" in str(e.value) and "gpus" in str(e.value)
        with pytest.raises(InvalidSpec, match="after"):
            c.submit([{"command": ["true"], "after": [999999]}])
        assert len(c.jobs()) == before


def test_idempotent_submit(daemon):
    with daemon.client() as c:
        a = c.submit([{"command": ["true"], "hold": True}], idempotency_key="k1")
        b = c.submit([{"command": ["true"], "hold": True}], idempotency_key="k1")
        assert a[0]["id"] == b[0]["id"]


def test_paused_gpu_gets_nothing_and_pause_survives_restart(daemon_factory):
    d = daemon_factory(simulate="1x24G").start()
    with d.client() as c:
        c.pause(0)
        [j] = c.submit([{"command": ["true"], "gpus": 0.25}])
        w = wait_until(lambda: (x := c.why(j["id"]))["code"] == "resources" and x)
        assert "paused" in w["message"]
    d.stop()
    d.start()
    with d.client() as c:
        assert c.gpus()["gpus"][0]["paused"] is True
        assert c.job(j["id"])["state"] == "pending"
        c.resume(0)
        assert c.wait(j["id"], timeout=20)["state"] == "completed"


def test_drain_stops_new_starts(daemon):
    with daemon.client() as c:
        c.drain(True)
        [j] = c.submit([{"command": ["true"], "gpus": 0.25}])
        wait_until(lambda: c.why(j["id"])["code"] == "draining")
        c.drain(False)
        assert c.wait(j["id"], timeout=20)["state"] == "completed"


def test_unhealthy_gpu_requeues_its_jobs(daemon):
    with daemon.client() as c:
        [j] = c.submit([{"command": ["sleep", "30"], "gpus": 1, "allowed_gpus": [2],
                         "grace": 1}])
        wait_until(lambda: c.job(j["id"])["state"] == "running")
        c.simulate(2, healthy=False)
        wait_until(lambda: c.job(j["id"])["state"] == "pending", what="requeue")
        w = wait_until(lambda: (x := c.why(j["id"]))["code"] == "resources" and x)
        assert "unhealthy" in w["message"]
        assert c.job(j["id"])["attempts_detail"][0]["outcome"] == "requeued"
        c.simulate(2, healthy=True)
        wait_until(lambda: c.job(j["id"])["state"] == "running", what="restart on healed GPU")
        c.cancel(j["id"])
        c.wait(j["id"], timeout=30)


def test_vanished_gpu_requeues_and_outside_memory_counts(daemon):
    with daemon.client() as c:
        c.simulate(1, external_mem=20 << 30, external_util=0.1)
        [m] = c.submit([{"command": ["true"], "gpus": 0.5, "gpu_mem": "10G",
                         "allowed_gpus": [1]}])
        w = wait_until(lambda: (x := c.why(m["id"]))["code"] == "resources" and x)
        assert "other processes" in w["message"] or "free memory" in w["message"]
        c.cancel(m["id"])
        [j] = c.submit([{"command": ["sleep", "30"], "gpus": 1, "allowed_gpus": [3],
                         "grace": 1}])
        wait_until(lambda: c.job(j["id"])["state"] == "running")
        c.simulate(3, present=False)
        wait_until(lambda: c.job(j["id"])["state"] == "pending", what="requeue")
        assert wait_until(
            lambda: (x := c.why(j["id"])["code"]) != "not_scheduled" and x) == "unsatisfiable"
        c.cancel(j["id"])
