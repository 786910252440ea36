"""Through the whole daemon, against the private Slurm: a sweep handed over in one pass is
one `sbatch --array` whose tasks are the sweep's jobs (each with its own output, one
cancelled alone), and a job whose node Slurm loses is queued again with no failure counted
and resumes from its checkpoint.

The cluster keeps ended jobs for Slurm's default MinJobAge (300 s): an array's task is
read from squeue while the controller holds it (the completion log names a task by its own
job id, which Rota learns from squeue; see docs/pools-slurm.md)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.baselines.slurm import PrivateSlurm

from rota_testing import DaemonProcess, wait_until

from ..slurm.conftest import private_slurm
from .daemon_slurm import daemon_over, job_view, wait_end

TOML = """
[pools.hpc]
engine = "slurm"
shared_workspaces = true
slurm_conf = "{conf}"
max_in_flight = 10

[pools.second]
engine = "slurm"
shared_workspaces = true
slurm_conf = "{conf}"
sbatch_args = ["--nodelist={node}"]
"""


@pytest.fixture(scope="module")
def slurm() -> Iterator[PrivateSlurm]:
    """The tests' private Slurm, with Slurm's default MinJobAge."""
    yield from private_slurm(MinJobAge="300")


@pytest.fixture(scope="module")
def daemon(slurm: PrivateSlurm, tmp_path_factory: pytest.TempPathFactory,
           ) -> Iterator[DaemonProcess]:
    toml = TOML.replace("{node}", slurm.node_names[1])
    with daemon_over(slurm, tmp_path_factory.mktemp("arrays"), toml) as d:
        yield d


def slurm_rows(slurm: PrivateSlurm, *args: str) -> list[list[str]]:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-r", *args], env=slurm.env,
                         capture_output=True, text=True, check=True, timeout=30).stdout
    return [line.split("|") for line in out.splitlines() if line.strip()]


def sweep(d: DaemonProcess, cwd: Path, *args: str) -> list[int]:
    r = d.cli("submit", "--json", "--pool", "hpc", "--gpus", "0", *args, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return [int(j["id"]) for j in json.loads(r.stdout)["jobs"]]


def test_a_sweep_is_one_array_and_each_job_ends_with_its_own_output(
        daemon: DaemonProcess, slurm: PrivateSlurm, tmp_path: Path) -> None:
    ids = sweep(daemon, tmp_path, "--sweep", "x=1,2,3", "--", "sh", "-c",
                "echo x={x} job=$ROTA_JOB_ID; exit $(( {x} - 1 ))")
    assert len(ids) == 3
    ends = [wait_end(daemon, i) for i in ids]
    # one sbatch: one array, named by its first member's key, whose tasks are the jobs
    tasks = [r for r in slurm_rows(slurm, "-o", "%i|%j|%F")
             if r[1].endswith(f"-{ids[0]}-1-array")]
    assert sorted(r[0] for r in tasks) == [f"{tasks[0][2]}_{i}" for i in range(3)], tasks
    assert len(slurm_rows(slurm, "--name", tasks[0][1], "-o", "%i")) == 3
    assert [(e["state"], e["exit_code"]) for e in ends] == \
        [("completed", 0), ("failed", 1), ("failed", 2)]
    for x, job_id in enumerate(ids, start=1):
        out = daemon.cli("logs", str(job_id)).stdout
        assert f"x={x} job={job_id}" in out and "handed to slurm:hpc" in out, out
        assert sum("x=" in line for line in out.splitlines()) == 1, out


def test_cancelling_one_member_leaves_the_others_running(
        daemon: DaemonProcess, slurm: PrivateSlurm, tmp_path: Path) -> None:
    ids = sweep(daemon, tmp_path, "--sweep", "x=1,2,3", "--", "sh", "-c",
                "echo up {x}; sleep 30")
    wait_until(lambda: all(job_view(daemon, i)["state"] == "running" for i in ids), 60,
               every=0.3, what="the three tasks running")
    arrays = {job_view(daemon, i)["engine"]["id"].split("_")[0] for i in ids}
    assert len(arrays) == 1
    assert daemon.cli("cancel", str(ids[1])).returncode == 0
    assert wait_end(daemon, ids[1])["state"] == "cancelled"
    assert [job_view(daemon, i)["state"] for i in (ids[0], ids[2])] == ["running"] * 2
    array = arrays.pop()
    states = dict(slurm_rows(slurm, "-j", array, "-o", "%i|%T"))  # SIGTERM: sh ends FAILED
    assert states[f"{array}_0"] == states[f"{array}_2"] == "RUNNING", states
    assert states[f"{array}_1"] in ("FAILED", "CANCELLED"), states
    for job_id in (ids[0], ids[2]):
        daemon.cli("cancel", str(job_id))
        assert wait_end(daemon, job_id)["state"] == "cancelled"


def node_state(slurm: PrivateSlurm, node: str) -> str:
    return subprocess.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"], env=slurm.env,
                          capture_output=True, text=True, timeout=30, check=True).stdout


def set_node(slurm: PrivateSlurm, node: str, state: str) -> None:
    """Slurm refuses to resume a node that is not down (ReturnToService=2 brings it back
    once its slurmd registers again): done when it is up, either way."""
    r = subprocess.run(["scontrol", "update", f"nodename={node}", f"state={state}",
                        "reason=rota-test"], env=slurm.env, capture_output=True, text=True,
                       timeout=30, check=False)
    assert r.returncode == 0 or (state == "resume" and "down" not in node_state(slurm, node)), \
        r.stderr


def test_a_job_whose_node_fails_runs_again_with_no_failure_and_resumes(
        daemon: DaemonProcess, slurm: PrivateSlurm, tmp_path: Path) -> None:
    node = slurm.node_names[1]
    script = ('if [ -n "$ROTA_RESUME_FROM" ]; then echo "resumed from $ROTA_RESUME_FROM"; '
              "exit 0; fi; mkdir -p ckpt; printf weights > ckpt/step-7.bin; echo saved; "
              "sleep 120")
    job = daemon.submit("--pool", "second", "--gpus", "0", "--retries", "0",
                        "--checkpoint-dir", "ckpt", "--", "sh", "-c", script, cwd=tmp_path)
    wait_until(lambda: "saved" in daemon.cli("logs", str(job)).stdout, 60, every=0.3,
               what="the first attempt to save its checkpoint")
    assert job_view(daemon, job)["engine"]["state"] == "running"
    set_node(slurm, node, "down")
    try:
        wait_until(lambda: job_view(daemon, job)["attempts"] == 2, 60, every=0.3,
                   what="the job handed over again after NODE_FAIL")
    finally:
        set_node(slurm, node, "resume")
    done = wait_end(daemon, job, timeout=90)
    assert (done["state"], done["exit_code"]) == ("completed", 0), done
    first, second = done["attempts_detail"]
    assert first["outcome"] == "preempted", first
    assert "NODE_FAIL" in (first["reason"] or "") and "step-7.bin" in first["reason"], first
    assert second["outcome"] == "completed"
    out = daemon.cli("logs", str(job)).stdout
    assert f"resumed from {tmp_path / 'ckpt' / 'step-7.bin'}" in out, out
