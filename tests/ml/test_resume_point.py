"""A preempted job resumes from the checkpoint it saved as it stopped, the same one its
stop was recorded with, however soon the retry starts (a daemon on simulated GPUs)."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

from rota_testing import DaemonProcess, wait_until

# Saves a zip archive (torch.save's container) every 3 steps and once more when asked to
# stop, without telling Rota: the checkpoint is found under --checkpoint-dir. The retry is
# started the moment the GPU is free, well within a second of that last save.
TRAIN = textwrap.dedent("""
    import io, os, signal, sys, time, zipfile
    stop = False
    def on_term(*_):
        global stop
        stop = True
    signal.signal(signal.SIGTERM, on_term)
    def save(step):
        with zipfile.ZipFile(f"ckpt/ckpt_{step:05d}.pt", "w") as z:
            z.writestr("archive/data.pkl", str(step))
            z.writestr("archive/data/0", os.urandom(1 << 16))
    start = 0
    if len(sys.argv) > 1:
        with zipfile.ZipFile(sys.argv[1]) as z:
            start = int(z.read("archive/data.pkl")) + 1
        print(f"resumed at step {start}", flush=True)
    os.makedirs("ckpt", exist_ok=True)
    for step in range(start, 30):
        print(f"step {step}", flush=True)
        if stop:
            save(step)
            print(f"stopping after step {step}", flush=True)
            sys.exit(0)
        if step % 3 == 0:
            save(step)
        time.sleep(0.1)
""")


def test_the_retry_resumes_from_the_checkpoint_saved_at_the_stop(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    jid = daemon.submit("--gpus", "1", "--preemptible", "--grace", "20s", "--checkpoint-dir",
                        "ckpt", "--cwd", str(tmp_path), "--", sys.executable, "-u",
                        "train.py", "{checkpoint}")
    log = daemon.home / "logs" / f"{jid}.log"
    wait_until(lambda: log.exists() and "step 7" in log.read_text(), timeout=60,
               what="step 7")
    r = daemon.cli("preempt", str(jid))
    assert r.returncode == 0, r.stderr

    def ended() -> dict[str, object] | None:
        with daemon.client() as c:
            j = c.job(jid)
        return j if j["state"] in ("completed", "failed") else None

    job = wait_until(ended, timeout=90, what="the job to end")
    assert job["state"] == "completed" and job["attempts"] == 2, job
    text = log.read_text()
    stopped = int(text.split("stopping after step ")[1].split()[0])
    saved = str(tmp_path / "ckpt" / f"ckpt_{stopped:05d}.pt")
    first = job["attempts_detail"][0]
    assert first["outcome"] == "preempted"
    assert f"last checkpoint {saved} (step {stopped})" in first["reason"]
    with daemon.client() as c:
        resumes = [e["message"] for e in c.events(jid) if e["kind"] == "resume"]
    assert resumes == [f"attempt 2 resumes from {saved} (step {stopped})"]
    assert f"resumed at step {stopped + 1}" in text
    steps = [int(m) for m in re.findall(r"^step (\d+)$", text, re.MULTILINE)]
    assert steps == list(range(30))  # nothing done twice, nothing skipped
