"""Job arrays and Slurm's own ends, pure: the array's sbatch argv and script (hostile
commands run through /bin/sh as written), and sacct/squeue/scontrol rows of array tasks
and of jobs Slurm preempted or whose node failed."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest

from rota.backends.engine import EngineJob, EngineState
from rota.backends.slurm import parse, script
from rota.pools import SlurmPool

POOL = SlurmPool(engine="slurm")
HOSTILE = ("printf", "%s|", "$(touch /tmp/pwned)", "a'b\"c", "`id`", "; exit 9", "\n")


def point(job_id: int, argv: tuple[str, ...], **kw: Any) -> EngineJob:
    env = {"ROTA_JOB_ID": str(job_id), "ROTA_ATTEMPT": "1", "LR": "$(touch /tmp/pwned)"}
    return EngineJob(job_id=job_id, attempt=1, name=f"p{job_id}", argv=argv, env=env, **kw)


def test_an_array_is_named_by_its_groups_key_and_logs_per_task() -> None:
    argv = script.sbatch_argv(point(4, ("true",)), POOL, "/w", array=("rota-4-1-array", 3))
    assert "--array=0-2" in argv and "--no-requeue" in argv
    assert "--job-name=rota-4-1-array" in argv and "--comment=rota-4-1-array" in argv
    assert "--output=/w/logs/%A_%a.log" in argv and "--error=/w/logs/%A_%a.log" in argv
    single = script.sbatch_argv(point(4, ("true",)), POOL, "/w")
    assert "--no-requeue" in single and not any(a.startswith("--array") for a in single)
    assert script.log_path("/w", "12_3") == "/w/logs/12_3.log"


@pytest.mark.parametrize("task", [0, 1, 2])
def test_each_task_runs_its_own_command_as_written_with_rotas_own_ids(
        task: int, tmp_path: Any) -> None:
    jobs = [point(4, ("printf", "%s|", "plain")), point(5, HOSTILE),
            point(6, ("sh -c 'exit 7'",), shell=True)]
    text = script.array_script(jobs, "rota-4-1-array")
    assert "pwned" not in text.replace(script.shlex.join(HOSTILE), "")  # only in the command
    env = {"PATH": os.environ["PATH"], "SLURM_ARRAY_TASK_ID": str(task)}
    probe = text.replace("exec ", 'echo "id=$ROTA_JOB_ID"; exec ', 3)
    got = subprocess.run(["/bin/sh", "-c", probe], env=env, capture_output=True, text=True,
                         cwd=tmp_path, check=False)
    assert f"id={4 + task}" in got.stdout
    if task == 0:
        assert got.stdout.endswith("plain|") and got.returncode == 0
    elif task == 1:
        assert got.stdout.endswith("$(touch /tmp/pwned)|a'b\"c|`id`|; exit 9|\n|")
        assert not (tmp_path / "pwned").exists() and got.returncode == 0
    else:
        assert got.returncode == 7


def test_a_task_index_outside_the_array_fails_loudly() -> None:
    text = script.array_script([point(4, ("true",)), point(5, ("true",))], "k")
    got = subprocess.run(["/bin/sh", "-c", text], env={"SLURM_ARRAY_TASK_ID": "9"},
                         capture_output=True, text=True, check=False)
    assert got.returncode == 2 and "no task 9" in got.stderr


def test_array_task_ids_are_job_ids_to_wait_for_and_to_read() -> None:
    assert script.refusal(point(4, ("true",), after=("12_3", "13")), POOL) is None
    assert script.refusal(point(4, ("true",), after=("12_x",)), POOL) is not None
    row = parse.JobRow("14", "PENDING", reason="Dependency",
                       dependency="afterok:12_3(unfulfilled)")
    assert parse.status(row).reason == "Dependency (it starts once Slurm job 12_3 has completed)"


def test_scontrol_names_an_array_task_as_rota_follows_it() -> None:
    out = ("JobId=15 ArrayJobId=12 ArrayTaskId=3 JobName=k JobState=COMPLETED "
           "ExitCode=0:0 StartTime=2026-01-01T00:00:00 EndTime=2026-01-01T00:00:01 "
           "NodeList=n1")
    row = parse.scontrol_row(out)
    assert row is not None and row.engine_id == "12_3"
    single = parse.scontrol_row(out.replace("ArrayJobId=12 ArrayTaskId=3 ", ""))
    assert single is not None and single.engine_id == "15"


@pytest.mark.parametrize("state", ["PREEMPTED", "NODE_FAIL", "BOOT_FAIL"])
def test_ends_that_are_the_clusters_doing_are_taken_back(state: str) -> None:
    fields = ("engine_id", "name", "state", "exit_code", "started", "ended", "node_list")
    [row] = parse.rows(f"21|rota-3-1|{state}|0:0|2026-01-01T00:00:00|"
                       "2026-01-01T00:01:00|n1\n", fields)
    got = parse.status(row)
    assert got.state is EngineState.ENDED and got.preempted and not got.unmet_dependency
    assert got.exit_code is None and got.reason == state


@pytest.mark.parametrize("state", ["FAILED", "CANCELLED by 0", "TIMEOUT", "OUT_OF_MEMORY",
                                   "COMPLETED"])
def test_the_jobs_own_ends_are_not_taken_back(state: str) -> None:
    row = parse.JobRow("21", state, exit_code="1:0", started="2026-01-01T00:00:00",
                       node_list="n1")
    assert not parse.status(row).preempted
