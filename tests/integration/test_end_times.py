"""A job that ends while the daemon is down is stored with the end its runner recorded,
not the time the restarted daemon found it (DESIGN.md, invariant 10)."""

from __future__ import annotations

import time

from rota_testing import wait_until


def test_a_job_that_ends_while_the_daemon_is_stopped_keeps_its_real_end(daemon_factory,
                                                                         tmp_path):
    go = tmp_path / "go"
    d = daemon_factory().start()
    with d.client() as c:
        [job] = c.submit([{"command": ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.01; "
                                                   "done; sleep 0.2; exit 5"], "gpus": 0.25}])
        wait_until(lambda: c.job(job["id"])["state"] == "running", what="the job to run")
    d.stop()
    go.touch()
    time.sleep(5.0)  # the job ends 0.2 s into the daemon's 5 s outage
    ended_by = time.time() - 4.0
    d.start()
    with d.client() as c:
        wait_until(lambda: c.job(job["id"])["state"] == "failed", what="the job's end")
        got = c.job(job["id"])
        [attempt] = got["attempts_detail"]
    assert got["exit_code"] == 5
    assert got["ended_at"] < ended_by
    assert attempt["ended_at"] == got["ended_at"]
    assert attempt["ended_at"] - attempt["started_at"] < 2.0
