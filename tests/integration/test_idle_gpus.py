"""Idle allocated GPUs end to end: a real daemon on simulated GPUs whose utilisation is set
to 0 under a running job; [idle] minutes are a fraction of a minute so that it is flagged
within seconds. Flagged in the API, `rota queue` and `rota why`; its wasted GPU-seconds
stored on its attempt and summed per user; with action = "stop" stopped through the
handshake (it saves a checkpoint) and held."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from rota_testing import DaemonProcess, wait_until

MINUTES = 0.02  # 1.2 s
POLL = {"ROTA_DEVICE_POLL": "0.1"}

# Waits for Rota to ask it to stop, then saves a checkpoint and exits 0.
WAITER = textwrap.dedent("""
    import os, time
    from rota import job
    print("holding the GPU", flush=True)
    while not job.should_stop():
        time.sleep(0.05)
    os.makedirs("ckpt", exist_ok=True)
    with open("ckpt/1.txt", "w") as f:
        f.write("1")
    job.checkpoint_saved("ckpt/1.txt", step=1)
    print("saved and stopping", flush=True)
""")


def daemon_with(factory: type[DaemonProcess], tmp_path: Path, action: str) -> DaemonProcess:
    home = tmp_path / "home"
    home.mkdir()
    (home / "rota.toml").write_text(
        f'[idle]\nthreshold = 0.05\nminutes = {MINUTES}\naction = "{action}"\n')
    return factory(simulate="2x24G", home=home, extra_env=POLL).start()  # type: ignore[call-arg]


def test_an_idle_job_is_flagged_and_its_waste_counted(daemon_factory: type[DaemonProcess],
                                                      tmp_path: Path) -> None:
    d = daemon_with(daemon_factory, tmp_path, "flag")
    with d.client() as c:
        [j] = c.submit([{"command": ["sleep", "120"], "gpus": 1, "allowed_gpus": [1],
                         "grace": 1}])
        job_id = j["id"]
        wait_until(lambda: c.job(job_id)["state"] == "running", what="the job to run")
        # a simulated GPU follows its jobs (95 % busy): never flagged while that holds
        assert c.job(job_id)["idle_since"] is None
        c.simulate(1, utilization=0.0)
        flagged = wait_until(lambda: (x := c.job(job_id))["idle_since"] is not None and x,
                             timeout=30, what="the job to be flagged idle")
        assert flagged["state"] == "running"  # flagged only: it keeps running
        assert flagged["idle"]["gpus"] == [1]
        assert "its GPU 1 has been under 5 % for" in flagged["idle"]["message"]
        why = c.why(job_id)
        assert "its GPU 1 has been under 5 % for" in why["message"], why
        events = [e for e in c.events(job_id) if e["kind"] == "idle"]
        assert len(events) == 1 and "GPU 1" in (events[0]["message"] or "")
        queue = d.cli("queue")
        assert queue.returncode == 0, queue.stderr
        assert "idle " in queue.stdout, queue.stdout
        why_cli = d.cli("why", str(job_id))
        assert "has been under 5 %" in why_cli.stdout, why_cli.stdout
        # a GPU busy again clears the flag
        c.simulate(1, present=True)  # its utilisation follows its jobs again
        wait_until(lambda: c.job(job_id)["idle_since"] is None, timeout=30,
                   what="the flag to clear")
        c.cancel(job_id)
        c.wait(job_id, timeout=30)
        [attempt] = c.job(job_id)["attempts_detail"]
        assert attempt["idle_seconds"] >= MINUTES * 60
        wasted = c.summary()["gpu_hours"]["idle_by_user"]
        assert wasted[j["user"]] * 3600 >= MINUTES * 60
        assert wasted[j["user"]] * 3600 <= attempt["idle_seconds"] + 0.01  # hours to 6 places
        # the usage report carries the same waste, in the user's row
        [total] = c.report(by="user", period="day")["totals"]
        assert total["group"] == j["user"]
        assert total["wasted_gpu_hours"] * 3600 == pytest.approx(attempt["idle_seconds"])
        assert total["wasted_gpu_hours"] <= total["gpu_hours"]


def test_with_action_stop_an_idle_job_is_stopped_through_the_handshake_and_held(
        daemon_factory: type[DaemonProcess], tmp_path: Path) -> None:
    d = daemon_with(daemon_factory, tmp_path, "stop")
    (tmp_path / "wait.py").write_text(WAITER)
    with d.client() as c:
        [j] = c.submit([{"command": [sys.executable, "-u", "wait.py"], "gpus": 1,
                         "allowed_gpus": [0], "grace": 30, "cwd": str(tmp_path),
                         "checkpoint_dir": str(tmp_path / "ckpt")}])
        job_id = j["id"]
        c.simulate(0, utilization=0.0)  # nothing it runs will use it
        wait_until(lambda: c.job(job_id)["state"] == "held", timeout=60,
                   what="the idle job to be stopped and held")
        log = (d.home / "logs" / f"{job_id}.log").read_text()
        assert "saved and stopping" in log  # it was asked, and saved; never killed first
        kinds = [(e["kind"], e["message"] or "") for e in c.events(job_id)]
        stopping = [m for k, m in kinds if k == "stopping:idle"]
        assert len(stopping) == 1 and "under 5 %" in stopping[0] and "SIGTERM" in stopping[0]
        [attempt] = c.job(job_id)["attempts_detail"]
        assert attempt["outcome"] == "idle_stopped"
        assert attempt["signal"] is None and attempt["exit_code"] == 0
        assert "held" in (attempt["reason"] or "")
        assert c.why(job_id)["code"] == "held"
