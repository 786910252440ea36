"""The stop handshake end to end: priority preemption with save and resume, `rota preempt`,
a custom stop signal, and the time-limit warning that comes `grace` before the limit."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from rota_testing import DaemonProcess, wait_until

# Saves a checkpoint every 5 steps and when Rota asks it to stop (then exits 0); a new
# attempt resumes after the saved step. Every step it does is printed once per attempt.
TRAIN = textwrap.dedent("""
    import os, sys, time
    from rota import job
    start = 0
    if job.resume_from():
        start = int(open(job.resume_from()).read()) + 1
        print(f"resumed at step {start}", flush=True)
    os.makedirs("ckpt", exist_ok=True)
    def save(step):
        path = f"ckpt/{step}.txt"
        with open(path, "w") as f:
            f.write(str(step))
        job.checkpoint_saved(path, step=step)
    for step in range(start, 40):
        print(f"step {step}", flush=True)
        job.report(step=step, total_steps=40, loss=1.0 / (step + 1))
        if step % 5 == 4:
            save(step)
        if job.should_stop():
            save(step)
            print(f"stopping after step {step}", flush=True)
            sys.exit(0)
        time.sleep(0.1)
""")




def submit(d: DaemonProcess, *args: str) -> int:
    r = subprocess.run([sys.executable, "-m", "rota", "submit", "--json", *args], env=d.env,
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    return int(json.loads(r.stdout)["jobs"][0]["id"])


def job(d: DaemonProcess, job_id: int) -> dict[str, Any]:
    with d.client() as c:
        return c.job(job_id)


def log_of(d: DaemonProcess, job_id: int) -> str:
    path = d.home / "logs" / f"{job_id}.log"
    return path.read_text() if path.exists() else ""  # made when the job is started


def test_a_preemptible_job_makes_room_saves_and_resumes_in_its_place(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    low = submit(daemon, "--gpus", "4", "--priority", "10", "--preemptible", "--grace", "20s",
                 "--cwd", str(tmp_path), "--", sys.executable, "-u", "train.py")
    wait_until(lambda: "step 8" in log_of(daemon, low), timeout=60, what="the low job's step 8")
    high = submit(daemon, "--gpus", "2", "--priority", "0", "--", "sh", "-c",
                  "echo high-priority work; sleep 1")
    wait_until(lambda: job(daemon, high)["state"] == "running", timeout=30,
               what="the high-priority job to start")
    # a job of the low one's priority submitted now queues behind it: the preempted job
    # kept its place
    later = submit(daemon, "--gpus", "4", "--priority", "10", "--", "sh", "-c", "echo later")
    wait_until(lambda: job(daemon, low)["state"] == "completed", timeout=90,
               what="the preempted job to finish after resuming")
    wait_until(lambda: job(daemon, later)["state"] == "completed", timeout=30)
    assert job(daemon, high)["state"] == "completed"
    lo = job(daemon, low)
    assert lo["attempts"] == 2
    a1, a2 = lo["attempts_detail"]
    assert a1["outcome"] == "preempted" and "last checkpoint" in a1["reason"]
    assert a2["started_at"] >= job(daemon, high)["started_at"]
    assert a2["started_at"] < job(daemon, later)["started_at"]  # in its old place
    text = log_of(daemon, low)
    stopped_at = int(text.split("stopping after step ")[1].split()[0])
    assert f"resumed at step {stopped_at + 1}" in text
    steps = [int(line.split()[1]) for line in text.splitlines() if line.startswith("step ")]
    assert steps == list(range(40))  # nothing done twice, nothing skipped
    with daemon.client() as c:
        kinds = [e["kind"] for e in c.events(low)]
    assert "preempting" in kinds and "stopping:preempt" in kinds and "resume" in kinds


def test_rota_preempt_with_a_custom_stop_signal(daemon: DaemonProcess, tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import os, signal, sys, time
        if os.environ["ROTA_ATTEMPT"] == "2":
            print("second attempt", flush=True); sys.exit(0)
        assert os.environ["ROTA_STOP_SIGNAL"] == "SIGUSR1"
        def on_usr1(*_):
            print("got SIGUSR1, stop file:", os.path.exists(os.environ["ROTA_STOP_FILE"]),
                  flush=True)
            sys.exit(0)
        signal.signal(signal.SIGUSR1, on_usr1)
        print("waiting", flush=True)
        time.sleep(60)
    """)
    jid = submit(daemon, "--gpus", "1", "--stop-signal", "usr1", "--", sys.executable, "-u",
                 "-c", script)
    wait_until(lambda: "waiting" in log_of(daemon, jid), timeout=30)
    r = subprocess.run([sys.executable, "-m", "rota", "preempt", str(jid)], env=daemon.env,
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0 and f"preempting job {jid}" in r.stdout, r.stderr
    wait_until(lambda: job(daemon, jid)["state"] == "completed", timeout=30)
    text = log_of(daemon, jid)
    assert "got SIGUSR1, stop file: True" in text and "second attempt" in text
    assert job(daemon, jid)["attempts"] == 2
    # only a running job can be preempted
    again = subprocess.run([sys.executable, "-m", "rota", "preempt", str(jid)],
                           env=daemon.env, capture_output=True, text=True, timeout=60)
    assert again.returncode != 0 and "only running jobs" in again.stdout + again.stderr
    bad = subprocess.run([sys.executable, "-m", "rota", "submit", "--stop-signal", "SIGKILL",
                          "--", "true"], env=daemon.env, capture_output=True, text=True)
    assert bad.returncode != 0 and "stop_signal" in bad.stderr


def test_the_time_limit_warns_grace_before_and_kills_at_the_limit(
        daemon: DaemonProcess) -> None:
    script = textwrap.dedent("""
        import signal, time
        t0 = time.monotonic()
        def on_term(*_):
            print(f"warned after {time.monotonic() - t0:.2f}s", flush=True)
        signal.signal(signal.SIGTERM, on_term)  # and goes on: SIGKILL comes at the limit
        while True:
            time.sleep(0.05)
    """)
    jid = submit(daemon, "--gpus", "0.5", "--time-limit", "4s", "--grace", "2s", "--",
                 sys.executable, "-u", "-c", script)
    wait_until(lambda: job(daemon, jid)["state"] == "timeout", timeout=30)
    warned = float(log_of(daemon, jid).split("warned after ")[1].split("s")[0])
    assert 1.5 <= warned <= 3.0  # at limit - grace = 2 s
    j = job(daemon, jid)
    took = j["ended_at"] - j["started_at"]
    assert 3.8 <= took <= 5.5, took  # killed at the 4 s limit, not at limit + grace


def test_a_checkpoint_found_in_the_usual_layout_is_named_when_preempted(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    """No --checkpoint-dir and nothing reported: the checkpoint the job saved as it stopped
    is found in its working directory's usual layout (checkpoints/), named in the stopped
    attempt's record, and the retry resumes from it."""
    script = textwrap.dedent("""
        import os, signal, sys, time, zipfile
        if os.environ["ROTA_ATTEMPT"] == "2":
            print("resumes from", os.environ.get("ROTA_RESUME_FROM"), flush=True)
            sys.exit(0)
        def on_term(*_):
            os.makedirs("checkpoints", exist_ok=True)
            with zipfile.ZipFile("checkpoints/step_00007.pt", "w") as z:  # torch.save's form
                z.writestr("archive/data.pkl", "7")
                z.writestr("archive/data/0", os.urandom(1 << 12))
            sys.exit(0)
        signal.signal(signal.SIGTERM, on_term)
        print("waiting", flush=True)
        time.sleep(60)
    """)
    jid = submit(daemon, "--gpus", "1", "--cwd", str(tmp_path), "--", sys.executable, "-u",
                 "-c", script)
    wait_until(lambda: "waiting" in log_of(daemon, jid), timeout=30)
    r = subprocess.run([sys.executable, "-m", "rota", "preempt", str(jid)], env=daemon.env,
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    wait_until(lambda: job(daemon, jid)["state"] == "completed", timeout=30)
    saved = tmp_path / "checkpoints" / "step_00007.pt"
    first = job(daemon, jid)["attempts_detail"][0]
    assert first["outcome"] == "preempted"
    assert f"last checkpoint {saved} (step 7)" in first["reason"], first["reason"]
    assert "saved no checkpoint" not in first["reason"]
    assert f"resumes from {saved}" in log_of(daemon, jid)
