"""A real SIGKILL of the daemon between Slurm's submit and its answer: the engine has the
job, Rota has no engine id for it yet. The restarted daemon must find the job by Rota's key
(the job's name) and follow it, never submit it again.

The pool's ``bin_dir`` holds wrappers of the private Slurm's commands: ``sbatch`` runs the
real one (stdin passed through) and, while a HOLD file exists, writes a marker with its
answer and waits before printing it; the other commands are links to the real ones. The
same cut on Ray, through an HTTP proxy that withholds the head's answer to the submit:
tests/backends/ray/test_daemon_sigkill_submit.py."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.baselines.slurm import PrivateSlurm

from rota_testing import wait_until

from .daemon_slurm import daemon_over, wait_end

TOML = """
[pools.hpc]
engine = "slurm"
shared_workspaces = true
slurm_conf = "{conf}"
bin_dir = "{bin_dir}"
poll_every = 0.5
"""

#: Slurm's commands the engine runs besides sbatch (slurm/engine.py)
PASSED_THROUGH = ("squeue", "sacct", "scancel", "scontrol", "sinfo")

SBATCH = """#!/bin/sh
# the real sbatch, its stdin (the batch script) inherited
out=$("{real}" "$@")
rc=$?
if [ "$rc" -eq 0 ] && [ -e "{hold}" ]; then
    printf '%s\\n' "$out" > "{marker}.tmp" && mv "{marker}.tmp" "{marker}"
    while [ -e "{hold}" ]; do sleep 0.1; done
fi
printf '%s\\n' "$out"
exit "$rc"
"""


def _wrappers(folder: Path, hold: Path, marker: Path) -> Path:
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    for prog in PASSED_THROUGH:
        real = shutil.which(prog)
        assert real, f"{prog} not on PATH"
        (bin_dir / prog).symlink_to(real)
    real_sbatch = shutil.which("sbatch")
    assert real_sbatch, "sbatch not on PATH"
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(SBATCH.format(real=real_sbatch, hold=hold, marker=marker))
    sbatch.chmod(sbatch.stat().st_mode | stat.S_IXUSR)
    return bin_dir


@pytest.fixture()
def held(tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    """(bin_dir, hold, marker); the HOLD file is gone afterwards, so no wrapper is left
    waiting."""
    hold, marker = tmp_path / "hold", tmp_path / "answered"
    bin_dir = _wrappers(tmp_path, hold, marker)
    hold.touch()
    try:
        yield bin_dir, hold, marker
    finally:
        hold.unlink(missing_ok=True)


def _ids_named(slurm: PrivateSlurm, key: str) -> set[str]:
    """The ids of every Slurm job named ``key``: queued, running, or ended (squeue while
    the controller holds it; the completion log after)."""
    out = subprocess.run(["squeue", "-h", "-t", "all", f"--name={key}", "-o", "%i"],
                         env=slurm.env, capture_output=True, text=True, check=True,
                         timeout=30).stdout
    ids = set(out.split())
    comp = subprocess.run(["sacct", "-c", "-X", "-n", "-P", "-o", "JobID,JobName",
                           "--starttime=2000-01-01"], env=slurm.env, capture_output=True,
                          text=True, check=False, timeout=30)
    for line in comp.stdout.splitlines():
        job_id, _, name = line.partition("|")
        if name == key:
            ids.add(job_id)
    return ids


def test_a_sigkill_between_sbatch_and_its_answer_runs_the_job_once(
        slurm: PrivateSlurm, held: tuple[Path, Path, Path], tmp_path: Path) -> None:
    bin_dir, hold, marker = held
    starts = tmp_path / "starts"
    toml = TOML.replace("{bin_dir}", str(bin_dir))
    home = tmp_path / "home"
    home.mkdir()
    with daemon_over(slurm, home, toml) as d:
        job = d.submit("--pool", "hpc", "--gpus", "0", "--", "sh", "-c",
                       f"echo start >> {starts}; sleep 1; echo rota-after-the-cut",
                       cwd=tmp_path)
        wait_until(marker.exists, 60, every=0.05, what="sbatch to have the job")
        engine_id = marker.read_text().strip().split(";", 1)[0]
        # the record written before the submit: Rota's key, and no engine id yet
        [record] = (d.home / "status").glob(f"{job}-1.json.engine")
        saved = json.loads(record.read_text())
        assert saved["engine_id"] is None, saved
        key = saved["key"]
        assert key.endswith(f"-{job}-1"), key
        d.kill()
        hold.unlink()  # the orphaned wrapper answers no one; later sbatch calls pass through
        d.start()
        done = wait_end(d, job, 90)
        assert (done["state"], done["exit_code"], done["attempts"]) == ("completed", 0, 1), done
        assert "rota-after-the-cut" in d.cli("logs", str(job)).stdout.splitlines()
        assert _ids_named(slurm, key) == {engine_id}
        with d.client() as c:  # the ended job still names its Slurm job
            [attempt] = c.job(job)["attempts_detail"]
        assert attempt["engine_id"] == engine_id and attempt["pid"] is None
        assert f"job {engine_id}" in d.cli("show", str(job)).stdout
        assert starts.read_text().split() == ["start"]
