"""EASY backfill end to end: a short job starts on GPUs kept for a blocked big one, a long
one does not, and `rota why` and the API give the big job's start estimate, which the
backfilled job does not move."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from rota_testing import DaemonProcess, wait_until


def rota(d: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rota", *args], env=d.env,
                          capture_output=True, text=True, timeout=60, check=False)


def submit(d: DaemonProcess, *args: str) -> int:
    r = rota(d, "submit", "--json", *args)
    assert r.returncode == 0, r.stderr
    return int(json.loads(r.stdout)["jobs"][0]["id"])


def job(d: DaemonProcess, job_id: int) -> dict[str, Any]:
    with d.client() as c:
        return c.job(job_id)


def why(d: DaemonProcess, job_id: int) -> dict[str, Any]:
    r = rota(d, "why", "--json", str(job_id))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_short_job_backfills_without_delaying_the_blocked_big_one(
        daemon: DaemonProcess) -> None:
    # history: a job named "quick" that completes teaches Rota its run time
    first = submit(daemon, "--gpus", "1", "--name", "quick", "--", "sleep", "0.2")
    wait_until(lambda: job(daemon, first)["state"] == "completed", timeout=30)
    # two of the four GPUs held for up to 10 minutes; a 4-GPU job must wait for them
    holder = submit(daemon, "--gpus", "2", "--time-limit", "10m", "--", "sleep", "600")
    wait_until(lambda: job(daemon, holder)["state"] == "running", timeout=30)
    big = submit(daemon, "--gpus", "4", "--time-limit", "5m", "--", "sleep", "1")
    wait_until(lambda: job(daemon, big).get("estimated_start") is not None, timeout=30,
               what="the big job's start estimate")
    shadow = job(daemon, holder)["started_at"] + 600
    assert abs(job(daemon, big)["estimated_start"] - shadow) < 1
    said = why(daemon, big)
    assert "may start around" in said["message"] and "UTC" in said["message"], said
    assert abs(said["estimated_start"] - shadow) < 1

    # ends well before the holder may: backfills onto a kept GPU (its time limit)
    short = submit(daemon, "--gpus", "1", "--time-limit", "1m", "--", "sleep", "30")
    # no time limit, but its name's history says it is quick
    predicted = submit(daemon, "--gpus", "1", "--name", "quick", "--", "sleep", "30")
    # would outlive the shadow time: waits
    long = submit(daemon, "--gpus", "1", "--time-limit", "1h", "--", "sleep", "1")
    # no limit and no history: never on kept GPUs
    unknown = submit(daemon, "--gpus", "1", "--", "sleep", "1")
    for j in (short, predicted):
        wait_until(lambda j=j: job(daemon, j)["state"] == "running", timeout=30,
                   what=f"job {j} to backfill")
    for j in (long, unknown, big):
        assert job(daemon, j)["state"] == "pending"
    # the big job's estimate did not move: the backfilled jobs end before it may start
    assert abs(job(daemon, big)["estimated_start"] - shadow) < 1
    # the long job comes after the big one, which holds every GPU for up to 5 minutes
    assert abs(why(daemon, long)["estimated_start"] - (shadow + 300)) < 1
    with daemon.client() as c:
        answer = c.queue(limit=10, counts=False)
    waiting = {j["id"]: j for j in answer["waiting_jobs"]}
    assert abs(waiting[big]["estimated_start"] - shadow) < 1
    r = rota(daemon, "queue", "--start")
    assert r.returncode == 0 and "starts" in r.stdout and "~in" in r.stdout, r.stdout


def test_a_restarted_daemon_still_backfills_its_waiting_jobs(
        daemon_factory: type[DaemonProcess]) -> None:
    """The queue a restarted daemon loads (from the store's queue index, without the
    specs) keeps each job's time limit and its name's prediction: what was waiting before
    the restart backfills after it just the same."""
    d = daemon_factory().start()
    first = submit(d, "--gpus", "1", "--name", "quick", "--", "sleep", "0.2")
    wait_until(lambda: job(d, first)["state"] == "completed", timeout=30)
    holder = submit(d, "--gpus", "2", "--time-limit", "10m", "--", "sleep", "600")
    wait_until(lambda: job(d, holder)["state"] == "running", timeout=30)
    big = submit(d, "--gpus", "4", "--time-limit", "5m", "--", "sleep", "1")
    assert rota(d, "drain").returncode == 0  # nothing more starts before the restart
    short = submit(d, "--gpus", "1", "--time-limit", "1m", "--", "sleep", "30")
    predicted = submit(d, "--gpus", "1", "--name", "quick", "--", "sleep", "30")
    long = submit(d, "--gpus", "1", "--time-limit", "1h", "--", "sleep", "1")
    d.kill()  # a crash: the holder goes on running under the runner

    again = daemon_factory().start()
    with again.client() as c:
        if c.health()["draining"]:  # drain is kept across restarts
            assert rota(again, "drain", "--off").returncode == 0
    for j in (short, predicted):
        wait_until(lambda j=j: job(again, j)["state"] == "running", timeout=30,
                   what=f"job {j} to backfill after the restart")
    assert job(again, holder)["state"] == "running"
    for j in (long, big):
        assert job(again, j)["state"] == "pending"
