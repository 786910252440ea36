"""ML-aware runs end to end on a real daemon: metrics and progress read from a job's output,
`rota metrics`, `rota checkpoints`, and a retry resuming from the newest checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from rota_testing import DaemonProcess, wait_until

# A training loop as people write it: prints its step and loss, saves a checkpoint every 5
# steps, resumes from `--resume PATH` when given, and (first attempt only) dies at step 12.
TRAIN = textwrap.dedent("""
    import os, sys, time
    args = sys.argv[1:]
    start = 0
    if "--resume" in args:
        path = args[args.index("--resume") + 1]
        start = int(open(path).read()) + 1
        assert os.environ["ROTA_RESUME_FROM"] == path
        print(f"resumed from {path} at step {start}", flush=True)
    os.makedirs("ckpt", exist_ok=True)
    for step in range(start, 20):
        print(f"step {step}/20: loss={10.0 / (step + 1):.4f} lr=3e-4", flush=True)
        if step % 5 == 0:
            with open(f"ckpt/step_{step}.pt", "w") as f:
                f.write(str(step))
        if step == 12 and start == 0:
            sys.exit(1)  # a crash: the retry continues from step 10's checkpoint
        time.sleep(0.05)
""")




def api(d: DaemonProcess) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(d.socket)), base_url="http://rota",
                        timeout=30)


def cli(d: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rota", *args], env=d.env,
                          capture_output=True, text=True, timeout=60, check=False)


def submit(d: DaemonProcess, *args: str) -> int:
    r = cli(d, "submit", "--json", *args)
    assert r.returncode == 0, r.stderr
    return int(json.loads(r.stdout)["jobs"][0]["id"])


def state(c: httpx.Client, job_id: int) -> dict[str, Any]:
    out: dict[str, Any] = c.get(f"/v1/jobs/{job_id}").json()
    return out


def test_metrics_and_progress_come_from_the_output(daemon: DaemonProcess, tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import sys, time
        for i in range(1, 31):
            print(f"step {i}/30: loss={3.0 / i:.4f} | acc: {i / 30:.3f}", flush=True)
            time.sleep(0.1)
        sys.stderr.write("\\r 100%|##########| 30/30 [00:03<00:00, 9.50it/s, reward=7.5]")
        sys.stderr.flush()
    """)
    job_id = submit(daemon, "--gpus", "0.5", "--cwd", str(tmp_path),
                    "--metric-pattern", r"reward=(?P<reward>[\d.]+)", "--",
                    sys.executable, "-u", "-c", script)
    with api(daemon) as c:
        # while it runs, the job's view carries its progress
        wait_until(lambda: (state(c, job_id).get("progress") or {}).get("step", 0) >= 5,
                   timeout=30, what="progress while running")
        live = state(c, job_id)
        assert live["state"] == "running"
        p = live["progress"]
        assert p["total_steps"] == 30 and 0 < p["fraction"] < 1 and p["attempt"] == 1
        [queued] = [j for j in json.loads(cli(daemon, "queue", "--json").stdout)["jobs"]
                    if j["id"] == job_id]
        assert queued["progress"]["total_steps"] == 30
        wait_until(lambda: state(c, job_id)["state"] == "completed", timeout=60)
        m = c.get(f"/v1/jobs/{job_id}/metrics").json()
    loss = m["series"]["loss"]
    assert [pt[0] for pt in loss] == list(range(1, 31))  # [step, value, time, attempt]
    assert loss[0][1] == 3.0 and loss[-1][1] == pytest.approx(0.1) and loss[0][3] == 1
    assert len(m["series"]["acc"]) == 30
    assert m["series"]["reward"][-1][1] == 7.5  # the job's own pattern, from a \\r bar
    assert m["progress"]["step"] == 30 and m["progress"]["fraction"] == 1.0
    assert m["progress"]["rate"] == pytest.approx(9.5)
    # the CLI: a table with a trend line; --json has every point; --name filters
    table = cli(daemon, "metrics", str(job_id))
    assert table.returncode == 0 and "loss" in table.stdout and "▁" in table.stdout
    only = json.loads(cli(daemon, "metrics", str(job_id), "--name", "acc", "--json").stdout)
    assert list(only["series"]) == ["acc"]
    with api(daemon) as c:  # the cursor: nothing new after the last sample
        after = c.get(f"/v1/jobs/{job_id}/metrics", params={"after": m["next"]}).json()
        assert after["series"] == {} and after["next"] == m["next"] and not after["more"]


def test_a_bad_metric_pattern_is_refused_naming_it(daemon: DaemonProcess) -> None:
    r = cli(daemon, "submit", "--metric-pattern", "loss=(", "--", "true")
    assert r.returncode != 0 and "metric_patterns" in r.stderr and "loss=(" in r.stderr
    r = cli(daemon, "submit", "--metric-pattern", r"loss=(\d+)", "--", "true")
    assert r.returncode != 0 and "named group" in r.stderr


def test_a_retry_resumes_from_the_newest_checkpoint(daemon: DaemonProcess,
                                                    tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    job_id = submit(daemon, "--gpus", "1", "--cwd", str(tmp_path), "--retries", "1",
                    "--retry-backoff", "3s", "--checkpoint-dir", "ckpt", "--",
                    sys.executable, "-u", "train.py", "--resume", "{checkpoint}")
    with api(daemon) as c:
        wait_until(lambda: state(c, job_id)["state"] in ("completed", "failed"), timeout=90,
                   what="the job to end")
        job = state(c, job_id)
        assert (job["state"], job["attempts"]) == ("completed", 2), job
        log = (daemon.home / "logs" / f"{job_id}.log").read_text()
        ckpt = tmp_path / "ckpt" / "step_10.pt"
        # attempt 1 had no checkpoint: the `--resume {checkpoint}` pair was dropped
        assert log.count("step 0/20") == 1 and f"resumed from {ckpt} at step 11" in log
        steps = [int(line.split()[1].split("/")[0]) for line in log.splitlines()
                 if line.startswith("step ")]
        assert steps == list(range(13)) + list(range(11, 20))  # 11 and 12 done again only
        events = c.get(f"/v1/jobs/{job_id}/events").json()["events"]
        assert any(e["kind"] == "resume" and str(ckpt) in e["message"] for e in events)
        # the loss goes on from where it was, in attempt 2's samples
        loss = c.get(f"/v1/jobs/{job_id}/metrics", params={"name": "loss", "attempt": 2}
                     ).json()["series"]["loss"]
        assert loss[0][0] == 11 and loss[0][1] == pytest.approx(10 / 12, abs=1e-3)
        cps = c.get(f"/v1/jobs/{job_id}/checkpoints").json()
        assert [cp["step"] for cp in cps["checkpoints"]] == [0, 5, 10, 15]
        # the last one counts once it has not been written to for a moment
        last = str(tmp_path / "ckpt" / "step_15.pt")
        wait_until(lambda: c.get(f"/v1/jobs/{job_id}/checkpoints").json()["resume_from"] == last,
                   timeout=10)
        cps = c.get(f"/v1/jobs/{job_id}/checkpoints").json()
        r = c.get(f"/v1/jobs/{job_id}/checkpoints/download",
                  params={"path": cps["resume_from"]})
        assert r.status_code == 200 and r.content == b"15"
        # only a listed checkpoint is served
        for bad in (str(daemon.home / "rota.db"), str(tmp_path / "train.py"),
                    str(tmp_path / "ckpt" / ".." / "train.py")):
            r = c.get(f"/v1/jobs/{job_id}/checkpoints/download", params={"path": bad})
            assert r.status_code == 404 and "SQLite" not in r.text
    wide = subprocess.run([sys.executable, "-m", "rota", "checkpoints", str(job_id)],
                          env={**daemon.env, "COLUMNS": "400"}, capture_output=True, text=True,
                          timeout=60, check=False)
    row = [line for line in wide.stdout.splitlines() if "step_15.pt" in line]
    assert wide.returncode == 0 and len(row) == 1 and "(resume)" in row[0], wide.stdout


def test_checkpoints_reported_by_rota_job_are_resumed_from(daemon: DaemonProcess,
                                                           tmp_path: Path) -> None:
    """No checkpoint_dir: the job tells Rota with rota.job.checkpoint_saved."""
    script = textwrap.dedent("""
        import os, sys
        from rota import job
        resume = job.resume_from()
        if resume is None:
            open("weights.bin", "w").write("7")
            job.checkpoint_saved("weights.bin", step=7)
            job.report(step=7, total_steps=10, loss=0.5)
            sys.exit(3)
        print("resuming at", open(resume).read(), flush=True)
    """)
    job_id = submit(daemon, "--gpus", "0", "--cwd", str(tmp_path), "--retries", "1",
                    "--retry-backoff", "0.5s", "--", sys.executable, "-u", "-c", script)
    with api(daemon) as c:
        wait_until(lambda: state(c, job_id)["state"] in ("completed", "failed"), timeout=60)
        assert state(c, job_id)["state"] == "completed"
        assert "resuming at 7" in (daemon.home / "logs" / f"{job_id}.log").read_text()
        m = c.get(f"/v1/jobs/{job_id}/metrics").json()
        assert m["series"]["loss"] == [[7, 0.5, m["series"]["loss"][0][2], 1]]


OOM = textwrap.dedent("""
    import os, sys, time
    time.sleep(1.5)  # long enough for the daemon to read the GPUs while it runs
    if os.environ["ROTA_ATTEMPT"] == "1":
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
              file=sys.stderr, flush=True)
        sys.exit(1)
    print("fits now", flush=True)
""")


def test_an_out_of_memory_death_is_retried_once_with_more_memory(daemon: DaemonProcess) -> None:
    job_id = submit(daemon, "--name", "oom-job", "--gpus", "0.25", "--gpu-mem", "4G", "--",
                    sys.executable, "-u", "-c", OOM)
    with api(daemon) as c:
        wait_until(lambda: state(c, job_id)["state"] in ("completed", "failed"), timeout=60)
        job = state(c, job_id)
        assert (job["state"], job["attempts"]) == ("completed", 2)  # no --retries needed
        # simulated GPUs report a job's processes at 90 % of what it asked
        first = job["attempts_detail"][0]
        assert first["peak_gpu_mem"] == int(0.9 * 4 * 2**30) and first["outcome"] == "failed"
        assert job["gpu_mem"] == 6 * 2**30  # 1.5 x 4 GiB
        assert job["attempts_detail"][1]["gpu_mem"] == 6 * 2**30
        events = c.get(f"/v1/jobs/{job_id}/events").json()["events"]
        [retry] = [e for e in events if e["kind"] == "oom_retry"]
        assert "retried once with 6" in retry["message"]
        # the next submit of the same name asking far more than it used is warned
        r = cli(daemon, "submit", "--json", "--name", "oom-job", "--gpus", "1", "--hold", "--",
                "true")
        assert r.returncode == 0
        assert "warning:" in r.stderr and "peaked at 5.4G" in r.stderr, r.stderr  # 0.9 x 6 GiB
        assert json.loads(r.stdout)["warnings"]


def test_a_second_out_of_memory_is_a_failure(daemon: DaemonProcess) -> None:
    script = OOM.replace('os.environ["ROTA_ATTEMPT"] == "1"', "True")
    job_id = submit(daemon, "--gpus", "0.25", "--gpu-mem", "4G", "--", sys.executable, "-u",
                    "-c", script)
    with api(daemon) as c:
        wait_until(lambda: state(c, job_id)["state"] in ("completed", "failed"), timeout=60)
        job = state(c, job_id)
        assert (job["state"], job["attempts"]) == ("failed", 2)


def test_output_written_just_before_the_end_is_read_whole(daemon: DaemonProcess) -> None:
    """A job that prints a burst of metrics and exits at once: its final read stops at its
    parsing budget (the daemon's loop is never held long) and the daemon reads the rest in
    its next reads, up to the job's end, so its last metrics are kept."""
    script = "for i in range(1, 20001): print(f'step {i}/20000: loss={1 / i:.6f}')"
    job_id = submit(daemon, "--", sys.executable, "-c", script)
    with api(daemon) as c:
        wait_until(lambda: state(c, job_id)["state"] == "completed", timeout=60)

        def last_step() -> int:
            m = c.get(f"/v1/jobs/{job_id}/metrics", params={"name": "loss"}).json()
            return int(m["series"]["loss"][-1][0]) if m["series"].get("loss") else 0

        wait_until(lambda: last_step() == 20000, timeout=60, what="the last step's loss")
