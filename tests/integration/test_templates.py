"""Templates that really train: nanogpt-shakespeare on the CPU, killed mid-run, resumed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rota_testing import DaemonProcess, wait_until

try:
    import torch  # noqa: F401
except ImportError:
    if os.environ.get("ROTA_REQUIRE_TORCH"):
        raise
    pytest.skip("PyTorch is not installed (pip install 'rota[ml]')", allow_module_level=True)

TINY = ["--set", "n_layer=1", "--set", "n_head=2", "--set", "n_embd=32", "--set",
        "block_size=32", "--set", "batch_size=8", "--set", "steps=600", "--set",
        "ckpt_every=25", "--set", "eval_every=100", "--set", "gpus=0", "--set", "device=cpu"]




def cli(d: DaemonProcess, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rota", *args], env=d.env, cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


def job(d: DaemonProcess, job_id: int) -> dict[str, Any]:
    with d.client() as c:
        return c.job(job_id)


def test_templates_are_listed_and_their_options_checked(daemon: DaemonProcess) -> None:
    r = cli(daemon, "templates", "--json")
    assert r.returncode == 0, r.stderr
    [nano] = [t for t in json.loads(r.stdout) if t["name"] == "nanogpt-shakespeare"]
    assert {"steps", "n_layer", "out", "gpus"} <= {o["name"] for o in nano["options"]}
    human = cli(daemon, "templates").stdout  # the extras read as written, not as markup
    assert "pip install 'rota[ml]'" in human and "pip install 'rota[eval,ml]'" in human
    bad = cli(daemon, "submit", "--template", "nanogpt-shakespeare", "--set", "nope=1")
    assert bad.returncode != 0 and "no option 'nope'" in bad.stderr
    bad = cli(daemon, "submit", "--template", "nanogpt-shakespeare", "--set", "steps=many")
    assert bad.returncode != 0 and "steps='many': expected int" in bad.stderr
    bad = cli(daemon, "submit", "--template", "nope")
    assert bad.returncode != 0 and "nanogpt-shakespeare" in bad.stderr


def test_nanogpt_killed_mid_run_resumes_from_its_checkpoint(daemon: DaemonProcess,
                                                            tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = cli(daemon, "submit", "--json", "--template", "nanogpt-shakespeare", "--set",
            f"out={run}", *TINY, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["jobs"][0]["id"]
    # once a checkpoint at step 100 or later exists, kill the whole job: no handshake
    wait_until(lambda: any(int(p.stem.split("_")[1]) >= 99 for p in (run / "ckpt").glob("*.pt")),
               timeout=120, what="a checkpoint at step 100")
    pid = job(daemon, job_id)["attempts_detail"][0]["pid"]
    os.killpg(pid, signal.SIGKILL)
    wait_until(lambda: job(daemon, job_id)["state"] == "completed", timeout=240,
               what="the resumed attempt to finish")
    j = job(daemon, job_id)
    assert j["attempts"] == 2 and j["attempts_detail"][0]["signal"] == signal.SIGKILL
    log = (daemon.home / "logs" / f"{job_id}.log").read_text()
    resumed_at = int(log.split("resumed from ")[1].split(" at step ")[1].split()[0])
    assert resumed_at >= 100 and "step 599/600" in log
    with daemon.client() as c:
        loss = c.request("GET", f"/v1/jobs/{job_id}/metrics", params={"name": "loss"})
    points = loss["series"]["loss"]  # [step, value, time, attempt]
    first = [p for p in points if p[3] == 1]
    second = [p for p in points if p[3] == 2]
    assert second[0][0] == resumed_at  # the second attempt starts where the first saved
    start_loss = first[0][1]  # about ln(61): an untrained model
    before = [p[1] for p in first if resumed_at - 30 <= p[0] < resumed_at]
    assert start_loss > 3.8 and second[0][1] < start_loss - 0.5  # it did not start over
    assert abs(second[0][1] - sum(before) / len(before)) < 0.5  # the loss goes on
    # TensorBoard's events: the same scalars under the same names, one file per attempt
    from rota.ml import tfevents
    files = tfevents.event_files(str(run / "tb"))
    scalars = [tfevents.read_scalars(f, 0)[0] for f in files]
    assert len(files) == 2 and {t for sc in scalars for t, _, _ in sc} == {"loss", "val_loss"}
    assert sorted(min(s for _, s, _ in sc) for sc in scalars) == [0, resumed_at]
    # read by the daemon too, yet a step the log and TensorBoard both give counts once
    for attempt in (first, second):
        steps = [p[0] for p in attempt]
        assert len(steps) == len(set(steps)), "a loss step counted twice"
    with daemon.client() as c:
        names = c.request("GET", f"/v1/jobs/{job_id}/metrics")["series"]
    assert "train/loss" not in names and "val/loss" not in names


def test_rota_tensorboard_serves_a_jobs_logs(daemon: DaemonProcess, tmp_path: Path) -> None:
    import socket
    import time
    import urllib.request

    run = tmp_path / "tbrun"
    r = cli(daemon, "submit", "--json", "--template", "nanogpt-shakespeare", "--set",
            f"out={run}", *TINY, "--set", "steps=30", cwd=tmp_path)
    job_id = json.loads(r.stdout)["jobs"][0]["id"]
    wait_until(lambda: job(daemon, job_id)["state"] == "completed", timeout=120)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "rota", "tensorboard", str(job_id),
                             "--port", str(port), "--json"], env=daemon.env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        said = json.loads(proc.stdout.readline())  # first, where it will be
        assert said["id"] == job_id and said["url"] == f"http://127.0.0.1:{port}/"
        assert said["logdir"] == str(run / "tb") and "--logdir" in said["command"]

        def serving() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/runs",
                                            timeout=2) as resp:
                    return resp.status == 200 and b"." in resp.read()
            except OSError:
                return False
        deadline = time.monotonic() + 90
        while not serving():
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "TensorBoard did not come up"
            time.sleep(0.5)
    finally:
        proc.terminate()
        proc.wait(30)
    plain = cli(daemon, "submit", "--json", "--gpus", "0", "--", "true")
    other = json.loads(plain.stdout)["jobs"][0]["id"]
    r = cli(daemon, "tensorboard", str(other))
    assert r.returncode != 0 and "no tensorboard_dir" in r.stderr
    r = cli(daemon, "tensorboard", str(other), "--json")
    assert r.returncode != 0 and "no tensorboard_dir" in json.loads(r.stdout)["message"]
