"""Quotas and budgets through the real daemon on simulated GPUs: a GPU-hours quota holds
new jobs with its reason and they start when it is raised; a hard budget stops a running
job through the stop handshake, and it resumes from its checkpoint when the budget is
raised; a quota used up shortly before midnight UTC lets its held jobs start at the reset
(the daemon run under libfaketime, its clock a minute before midnight)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_preemption import TRAIN, log_of

from receiver import receiving
from rota_testing import DaemonProcess, pg_database, wait_until

FAST = {"ROTA_QUOTA_CHECK": "0.1"}  # usage read every 0.1 s rather than 30
#: Debian's libfaketime (scripts/test.sh installs it)
FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
DAY = 86400


@pytest.fixture(params=["sqlite", "postgres"])
def db_args(request: pytest.FixtureRequest) -> Iterator[list[str]]:
    """The daemon's store: SQLite in its home, or PostgreSQL when ROTA_TEST_PG_URL is set."""
    if request.param == "sqlite":
        yield []
    else:
        for url in pg_database():
            yield ["--database-url", url]


def job(d: DaemonProcess, job_id: int) -> dict[str, Any]:
    with d.client() as c:
        return c.job(job_id)


def why(d: DaemonProcess, job_id: int) -> dict[str, Any]:
    with d.client() as c:
        return c.why(job_id)


def test_a_gpu_hours_quota_holds_new_jobs_and_they_start_when_raised(
        daemon_factory: type[DaemonProcess], tmp_path: Path, db_args: list[str]) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "rota.toml").write_text('[alerts]\nwebhook_secret = "HOOK"\n')
    with receiving() as hook:
        d = daemon_factory(extra_env=FAST, home=home,  # type: ignore[call-arg]
                           args=db_args).start()
        set_url = d.cli("secret", "set", "HOOK", stdin=hook.url + "\n")
        assert set_url.returncode == 0, set_url.stderr
        _held_until_raised(d)
        # 50, 80 and 100 % reached the webhook once each, as they were recorded
        wait_until(lambda: len(hook.bodies) >= 3, timeout=30, what="three webhook alerts")
        assert sorted(b["rota"]["percent"] for b in hook.bodies) == [50, 80, 100]
        assert hook.bodies[0]["text"].startswith("project vision reached 50 % of a quota")


def _held_until_raised(d: DaemonProcess) -> None:
    with d.client() as c:
        # 0.0002 GPU-hours = 0.72 GPU-seconds a day: one 1-GPU job of 1.5 s uses it up
        c.set_quota("project", "vision", "gpu_hours", 0.0002, period="day")
    first = d.submit("--gpus", "1", "--project", "vision", "--", "sleep", "1.5")
    wait_until(lambda: job(d, first)["state"] == "completed", timeout=30)
    second = d.submit("--gpus", "1", "--project", "vision", "--", "true")
    other = d.submit("--gpus", "1", "--project", "speech", "--", "true")
    wait_until(lambda: job(d, other)["state"] == "completed", timeout=30,
               what="a job of another project to run")
    wait_until(lambda: why(d, second)["code"] == "quota", timeout=10)
    w = why(d, second)
    assert job(d, second)["state"] == "pending"
    assert w["message"].startswith("waits: project vision used 0.0004"), w["message"]
    assert w["message"].endswith(" of its 0.0002 GPU-hours today; resets tomorrow 00:00 UTC")
    with d.client() as c:
        [listed] = c.quotas()["quotas"]
        assert listed["used"] >= 0.0002 and listed["percent"] >= 100
        c.set_quota("project", "vision", "gpu_hours", 10, period="day")  # raised
    wait_until(lambda: job(d, second)["state"] == "completed", timeout=30,
               what="the held job to start once the quota was raised")
    with d.client() as c:  # each threshold is also an event (of no job)
        assert c.job(second)["state"] == "completed"


def test_a_hard_budget_stops_a_running_job_which_resumes_when_raised(
        daemon_factory: type[DaemonProcess], tmp_path: Path, db_args: list[str]) -> None:
    d = daemon_factory(extra_env=FAST, args=db_args).start()  # type: ignore[call-arg]
    (tmp_path / "train.py").write_text(TRAIN)
    with d.client() as c:
        # 0.0005 GPU-hours = 1.8 GPU-seconds: reached some 2 s into the run (40 steps of 0.1s)
        c.set_quota("project", "vision", "gpu_hours", 0.0005, period="month", hard=True)
    run = d.submit("--gpus", "1", "--project", "vision", "--grace", "20s",
                   "--cwd", str(tmp_path), "--", sys.executable, "-u", "train.py")
    wait_until(lambda: "stopping after step" in log_of(d, run), timeout=60,
               what="the job to be asked to stop and save")
    wait_until(lambda: job(d, run)["state"] == "pending", timeout=30)
    wait_until(lambda: why(d, run)["code"] == "quota", timeout=10)
    assert "GPU-hours this month" in why(d, run)["message"]
    with d.client() as c:
        events = c.events(run)
    stopping = [e for e in events if e["kind"] == "stopping:preempt"]
    assert stopping and "hard budget" in stopping[0]["message"], events
    assert "project vision used" in stopping[0]["message"]
    assert job(d, run)["attempts_detail"][0]["outcome"] == "preempted"
    with d.client() as c:
        c.set_quota("project", "vision", "gpu_hours", 10, period="month", hard=True)
    wait_until(lambda: job(d, run)["state"] == "completed", timeout=90,
               what="the stopped job to resume and finish once the budget was raised")
    text = log_of(d, run)
    stopped_at = int(text.split("stopping after step ")[1].split()[0])
    assert f"resumed at step {stopped_at + 1}" in text
    steps = [int(line.split()[1]) for line in text.splitlines() if line.startswith("step ")]
    assert steps == list(range(40))  # nothing done twice, nothing skipped


def test_a_quota_used_up_before_midnight_lets_its_held_job_start_at_the_reset(
        daemon_factory: type[DaemonProcess], db_args: list[str]) -> None:
    """The daemon's clock (and its jobs') runs ``LEAD`` seconds before the next UTC midnight
    when it starts: a day's quota used up then holds the next job until midnight, and not a
    moment past the reset (the daemon reads usage every 0.1 s here)."""
    if not FAKETIME.exists():
        if os.environ.get("ROTA_REQUIRE_FAKETIME"):
            pytest.fail(f"{FAKETIME} is missing (Debian's libfaketime)")
        pytest.skip("needs Debian's libfaketime")
    lead = 30.0  # room for the first job to use the quota up before midnight, under load
    midnight = (time.time() // DAY + 1) * DAY
    if midnight - time.time() < 2 * lead:  # the real clock near midnight too: the next one
        midnight += DAY
    offset = midnight - lead - time.time()
    d = daemon_factory(args=db_args, extra_env={  # type: ignore[call-arg]
        # the monotonic clock moves by the same offset: leaving it alone, libfaketime makes
        # Python's time.sleep fail with EINVAL
        **FAST, "LD_PRELOAD": str(FAKETIME), "FAKETIME": f"{offset:+.3f}",
        "FAKETIME_NO_CACHE": "1"}).start()
    with d.client() as c:
        assert midnight - 2 * lead < c.report()["now"] < midnight, "the daemon's clock"
        c.set_quota("project", "vision", "gpu_hours", 0.0002, period="day")  # 0.72 GPU-s
    first = d.submit("--gpus", "1", "--project", "vision", "--", "sleep", "1.5")
    wait_until(lambda: job(d, first)["state"] == "completed", timeout=20)
    second = d.submit("--gpus", "1", "--project", "vision", "--", "true")
    wait_until(lambda: why(d, second)["code"] == "quota", timeout=10)
    assert why(d, second)["message"].endswith("; resets tomorrow 00:00 UTC")
    assert job(d, first)["ended_at"] < midnight, "the quota was used up before midnight"
    wait_until(lambda: job(d, second)["state"] == "completed", timeout=2 * lead,
               what="the held job to start at midnight")
    started = job(d, second)["started_at"]
    assert midnight <= started < midnight + 5, started - midnight
    with d.client() as c:
        [quota] = c.quotas()["quotas"]
        assert quota["used"] < 0.0002  # a new day: only the second job's second or so


def test_rota_quota_set_list_lift_rm(daemon: DaemonProcess) -> None:
    r = daemon.cli("quota", "set", "--project", "vision", "--gpu-hours", "96", "--per", "week")
    assert r.returncode == 0, r.stderr
    assert "project vision used 0 of its 96 GPU-hours this week; resets Monday 00:00 UTC" \
        in r.stdout
    assert daemon.cli("quota", "set", "--user", "alice", "--gpus", "4").returncode == 0
    listed = daemon.cli("quota", "list", "--json")
    rows = {(q["kind"], q["name"], q["what"]) for q in json.loads(listed.stdout)["quotas"]}
    assert rows == {("project", "vision", "gpu_hours"), ("user", "alice", "gpus")}
    bad = daemon.cli("quota", "set", "--user", "alice", "--gpus", "4", "--per", "week")
    assert bad.returncode != 0 and "GPUs-at-once quota has no period" in bad.stderr
    both = daemon.cli("quota", "set", "--user", "a", "--project", "b", "--gpus", "1")
    assert both.returncode != 0 and "name one owner" in both.stderr
    assert daemon.cli("quota", "lift", "--user", "alice", "--for", "2h").returncode == 0
    with daemon.client() as c:
        [alice] = [q for q in c.quotas()["quotas"] if q["name"] == "alice"]
        assert alice["lifted_until"] is not None
    assert daemon.cli("quota", "rm", "--user", "alice").returncode == 0
    gone = daemon.cli("quota", "rm", "--user", "alice")
    assert gone.returncode != 0 and "user alice has no quota" in gone.stderr


def test_a_gpus_at_once_quota_starts_the_next_job_when_one_ends(daemon: DaemonProcess) -> None:
    with daemon.client() as c:
        c.set_quota("project", "vision", "gpus", 1)
    first = daemon.submit("--gpus", "1", "--project", "vision", "--", "sleep", "2")
    second = daemon.submit("--gpus", "1", "--project", "vision", "--", "true")
    wait_until(lambda: job(daemon, first)["state"] == "running", timeout=30)
    wait_until(lambda: why(daemon, second)["code"] == "quota", timeout=10)
    assert why(daemon, second)["message"] == (
        "waits: project vision may hold 1 GPUs at once and 0 of them are free; it needs 1")
    shown = daemon.cli("why", str(second))
    assert "project vision may hold 1 GPUs at once" in shown.stdout, shown.stdout
    wait_until(lambda: job(daemon, second)["state"] == "completed", timeout=30,
               what="the second job to start once the first ended")
    assert job(daemon, second)["started_at"] >= job(daemon, first)["ended_at"]
