"""One contract every pool keeps, through the whole daemon as a user drives it: this
machine (``local``), containers on it (``--image``, a private dockerd), a Slurm cluster
and a Ray cluster (the private ones of tests/backends).

Each pool, the same cases: a job's exit code and output, a failure, `rota logs -f` to the
job's end with the metrics read from its output, a cancel of a running job, a time limit, a
retry, and a job re-found after the daemon was SIGKILLed while it ran (never started
twice)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends.container.conftest import IMAGE
from rota_testing import DaemonProcess, kill_job_processes, wait_until

#: each pool, and the backend its jobs' attempts record
BACKENDS = {"local": "local", "container": "container", "slurm": "slurm:hpc", "ray": "ray:rc"}
POOLS = tuple(BACKENDS)


@pytest.fixture(scope="module", params=POOLS)
def pool(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
         ) -> Iterator[tuple[str, DaemonProcess]]:
    name = request.param
    home = tmp_path_factory.mktemp(f"contract-{name}")
    if name == "slurm":
        conf = request.getfixturevalue("slurm").env["SLURM_CONF"]
        (home / "rota.toml").write_text(
            f'default_pool = "hpc"\n[pools.hpc]\nengine = "slurm"\n'
            f'slurm_conf = "{conf}"\n')
    elif name == "container":
        host = request.getfixturevalue("dockerd")
        request.getfixturevalue("docker_client")  # the test image, built
        (home / "rota.toml").write_text(
            f'[pools.local]\ndocker_host = "{host}"\n')  # no engine line: implied
    elif name == "ray":
        address = request.getfixturevalue("ray_cluster").address
        (home / "rota.toml").write_text(
            f'default_pool = "rc"\n[pools.rc]\nengine = "ray"\n'
            f'address = "{address}"\n')
    d = DaemonProcess(home).start()
    try:
        yield name, d
    finally:
        d.stop()
        kill_job_processes(home)


def _submit(d: DaemonProcess, cwd: Path, *args: str) -> int:
    image = ["--image", IMAGE] if d.home.name.startswith("contract-container") else []
    return d.submit("--gpus", "0", *image, *args, cwd=cwd)


def _job(d: DaemonProcess, job_id: int) -> dict[str, Any]:
    r = d.cli("show", str(job_id), "--json")
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))


def _ended(d: DaemonProcess, job_id: int, timeout: float = 90) -> dict[str, Any]:
    d.cli("wait", str(job_id), "--timeout", str(timeout), timeout=timeout + 30)
    return _job(d, job_id)


def _running(d: DaemonProcess, job_id: int) -> None:
    def runs() -> bool:
        job = _job(d, job_id)
        return job["state"] == "running" and job.get("engine", {}).get("state") in (
            None, "running")
    wait_until(runs, 60, every=0.2, what=f"job {job_id} to run")


def test_exit_code_and_output(pool: tuple[str, DaemonProcess], tmp_path: Path) -> None:
    name, d = pool
    ok = _submit(d, tmp_path, "--", "sh", "-c", "echo contract-output; exit 0")
    bad = _submit(d, tmp_path, "--", "sh", "-c", "echo failing >&2; exit 3")
    done = _ended(d, ok)
    assert (done["state"], done["exit_code"]) == ("completed", 0), done
    # a whole line: Ray's log also echoes the command, which holds the same text
    assert "contract-output" in d.cli("logs", str(ok)).stdout.splitlines()
    [attempt] = _job(d, ok)["attempts_detail"]
    assert attempt["backend"] == BACKENDS[name]  # where it really ran
    failed = _ended(d, bad)
    assert (failed["state"], failed["exit_code"]) == ("failed", 3), failed


#: a training-style loop; its command line holds no ``name=number`` pair (Ray's log echoes
#: the command, which must add no metric of its own)
LOSSES = ("0.9", "0.7", "0.5")
LOOP = ("i=0; for l in " + " ".join(LOSSES) + "; do i=$((i+1)); "
        'echo "step=$i loss=$l"; sleep 0.4; done')


def test_logs_follow_to_the_end_and_metrics_come_from_the_output(
        pool: tuple[str, DaemonProcess], tmp_path: Path) -> None:
    _, d = pool
    job = _submit(d, tmp_path, "--", "sh", "-c", LOOP)
    follow = d.cli("logs", "-f", str(job), timeout=120)  # raises if it does not end by itself
    assert follow.returncode == 0, follow.stderr
    lines = follow.stdout.splitlines()
    want = [f"step={n} loss={loss}" for n, loss in enumerate(LOSSES, 1)]
    assert [line for line in lines if line in want] == want, follow.stdout
    assert _job(d, job)["state"] == "completed"

    def losses() -> list[list[Any]] | None:
        r = d.cli("metrics", str(job), "--json")
        assert r.returncode == 0, r.stderr
        points = json.loads(r.stdout)["series"].get("loss", [])
        return points if len(points) >= len(LOSSES) else None

    points = wait_until(losses, 30, every=0.2, what="the loss values in the job's metrics")
    assert [(p[0], p[1]) for p in points] == [(n, float(v)) for n, v in enumerate(LOSSES, 1)]


def test_cancel_stops_a_running_job(pool: tuple[str, DaemonProcess], tmp_path: Path) -> None:
    _, d = pool
    job = _submit(d, tmp_path, "--grace", "2s", "--", "sleep", "300")
    _running(d, job)
    assert d.cli("cancel", str(job)).returncode == 0
    assert _ended(d, job, 60)["state"] == "cancelled"


def test_time_limit(pool: tuple[str, DaemonProcess], tmp_path: Path) -> None:
    _, d = pool
    job = _submit(d, tmp_path, "--time-limit", "3s", "--grace", "1s", "--", "sleep", "300")
    ended = _ended(d, job, 90)
    assert ended["state"] == "timeout", ended


def test_a_failed_attempt_is_retried(pool: tuple[str, DaemonProcess], tmp_path: Path) -> None:
    _, d = pool
    marker = tmp_path / "tried"
    job = _submit(d, tmp_path, "--retries", "1", "--retry-backoff", "0s", "--", "sh", "-c",
                  f"if [ -e {marker} ]; then exit 0; fi; touch {marker}; exit 3")
    done = _ended(d, job)
    assert (done["state"], done["attempts"]) == ("completed", 2), done


def test_a_job_is_refound_after_a_daemon_sigkill_and_runs_once(
        pool: tuple[str, DaemonProcess], tmp_path: Path) -> None:
    _, d = pool
    count = tmp_path / "starts"
    job = _submit(d, tmp_path, "--", "sh", "-c",
                  f"echo start >> {count}; sleep 6; echo contract-after-restart")
    _running(d, job)
    d.kill()
    time.sleep(1)
    d.start()
    done = _ended(d, job)
    assert (done["state"], done["exit_code"], done["attempts"]) == ("completed", 0, 1), done
    assert count.read_text().count("start") == 1
    assert "contract-after-restart" in d.cli("logs", str(job)).stdout.splitlines()
