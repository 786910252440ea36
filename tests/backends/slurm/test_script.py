"""The translation of a job into sbatch's argv and batch script, and the reading of Slurm's
answers: pure, no Slurm needed."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from rota.backends.engine import EngineJob, EngineState
from rota.backends.slurm import parse, script
from rota.pools import SlurmPool

POOL = SlurmPool(engine="slurm")
WORK = "/shared/rota"


def a_job(**kw: Any) -> EngineJob:
    base: dict[str, Any] = {"job_id": 7, "attempt": 2, "name": "train", "argv": ("python", "t.py")}
    return EngineJob(**{**base, **kw})


def opts(job: EngineJob, pool: SlurmPool = POOL, **kw: Any) -> dict[str, str]:
    """The argv's ``--name=value`` options as a dict (flags map to "")."""
    out = {}
    for a in script.sbatch_argv(job, pool, WORK, **kw):
        name, _, value = a.partition("=")
        out[name] = value
    return out


def test_key_log_and_folder_options() -> None:
    o = opts(a_job(cwd="/data/run"))
    assert o["--job-name"] == o["--comment"] == "rota-7-2"
    assert o["--output"] == o["--error"] == "/shared/rota/logs/%j.log"
    assert o["--chdir"] == "/data/run"
    assert o["--export"] == "ALL" and "--parsable" in o
    assert o["--nodes"] == "1" and o["--ntasks"] == "1"
    assert "--time" not in o and "--signal" not in o and "--gres" not in o
    assert opts(a_job())["--chdir"] == WORK  # no cwd: the work folder


def test_a_percent_in_the_work_folder_is_not_a_pattern() -> None:
    argv = script.sbatch_argv(a_job(), POOL, "/data/100%")
    assert "--output=/data/100%%/logs/%j.log" in argv


def test_time_limit_rounds_up_to_minutes_and_signals_before_it() -> None:
    o = opts(a_job(time_limit=61, grace=45, stop_signal="SIGUSR1"))
    assert o["--time"] == "2"
    assert o["--signal"] == "B:USR1@45"  # one node: the batch shell is the command
    o = opts(a_job(time_limit=10, grace=0.5, nodes=2))
    assert o["--time"] == "1"
    assert o["--signal"] == "TERM@1"  # several nodes: every step's tasks, not srun


def test_gpus_whole_typed_and_shards() -> None:
    assert opts(a_job(gpus=2))["--gres"] == "gpu:2"
    assert opts(a_job(gpus=1, gpu_type="a100"))["--gres"] == "gpu:a100:1"
    assert opts(a_job(gpus=4), replace_pool(gpu_gres="tesla"))["--gres"] == "tesla:4"
    shard_pool = replace_pool(shards=True)
    assert opts(a_job(gpus=0.5), shard_pool, shards_per_gpu=4)["--gres"] == "shard:2"
    assert opts(a_job(gpus=0.1), shard_pool, shards_per_gpu=4)["--gres"] == "shard:1"
    assert "--gres" not in opts(a_job(gpus=0))


def replace_pool(**kw: Any) -> SlurmPool:
    return SlurmPool(**{**POOL.model_dump(), **kw})


def test_cpus_memory_nodes_and_pool_settings() -> None:
    pool = replace_pool(partition="gpu", account="lab", qos="high",
                        sbatch_args=["--exclusive", "--constraint=ib"])
    argv = script.sbatch_argv(a_job(cpus=3.5, memory=1536 * 1024 * 1024 + 1, nodes=2), pool,
                              WORK)
    assert argv[:2] == ["--exclusive", "--constraint=ib"]  # the pool's first: the job's win
    o = opts(a_job(cpus=3.5, memory=1536 * 1024 * 1024 + 1, nodes=2), pool)
    assert o["--cpus-per-task"] == "4" and o["--mem"] == "1537M"
    assert o["--nodes"] == "2" and o["--ntasks-per-node"] == "1"
    assert (o["--partition"], o["--account"], o["--qos"]) == ("gpu", "lab", "high")


def test_priority_maps_to_nice_only_when_later_in_rotas_order() -> None:
    assert opts(a_job(priority=5))["--nice"] == "5"
    assert "--nice" not in opts(a_job(priority=0))
    assert "--nice" not in opts(a_job(priority=-3))  # a negative nice needs a Slurm admin


@pytest.mark.parametrize(("kw", "words"), [
    ({"gpu_mem": 8 << 30}, "cannot reserve GPU memory"),
    ({"gpus": 0.5}, "needs GRES shards"),
    ({"gpus": 1.5}, "whole GPUs, or shards"),
    ({"image": "pytorch:2"}, "no container images"),
    ({"files": {"/etc/c.yaml": "a: 1"}}, "cannot mount files"),
    ({"model_uri": "s3://b/m"}, "does not fetch a model"),
    ({"env": {"SBATCH_TIMELIMIT": "1"}}, "SBATCH_TIMELIMIT would be read by sbatch"),
    ({"stop_signal": "SIGNOPE"}, "unknown stop signal"),
    ({"time_limit": 600, "grace": 70000}, "at most 65535s"),
    ({"argv": ()}, "no command"),
    ({"argv": ("-rf",)}, "starts with '-'"),
])
def test_refusals_say_why(kw: dict[str, Any], words: str) -> None:
    reason = script.refusal(a_job(**kw), POOL)
    assert reason is not None and words in reason


def test_fractions_with_shards_are_honoured_and_typed_fractions_refused() -> None:
    pool = replace_pool(shards=True)
    assert script.refusal(a_job(gpus=0.5), pool) is None
    assert "shards carry no GPU type" in (script.refusal(a_job(gpus=0.5, gpu_type="a100"),
                                                         pool) or "")


def test_conda_missing_is_refused_at_submit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(script, "conda_exe", lambda: None)
    assert "conda is not installed" in (script.refusal(a_job(conda="ml"), POOL) or "")
    monkeypatch.setattr(script, "conda_exe", lambda: "/opt/conda/bin/conda")
    assert script.refusal(a_job(conda="ml"), POOL) is None
    assert script.command(a_job(conda="ml"), script.conda_path(a_job(conda="ml"))) == [
        "/opt/conda/bin/conda", "run", "-n", "ml", "--no-capture-output", "python", "t.py"]


HOSTILE = ("printf", "[%s]\\n", "$(touch pwned)", "a'b", "; touch pwned2", "`id`", "$HOME",
           "line\nbreak")


def test_the_script_runs_the_argv_exactly_and_nothing_else(tmp_path: Path) -> None:
    text = script.batch_script(a_job(argv=HOSTILE))
    assert text.startswith("#!/bin/sh\n")
    res = subprocess.run(["/bin/sh", "-c", text], cwd=tmp_path, capture_output=True,
                         text=True, check=True)
    assert res.stdout == "".join(f"[{a}]\n" for a in HOSTILE[2:])
    assert not list(tmp_path.iterdir())  # nothing was run but printf


def test_shell_jobs_and_multi_node_scripts() -> None:
    text = script.batch_script(a_job(argv=("echo $1 && exit 4", "x"), shell=True))
    assert text.splitlines()[-1] == "exec " + shlex.join(
        ["/bin/sh", "-c", "echo $1 && exit 4", "sh", "x"])
    multi = script.batch_script(a_job(nodes=2))
    last = shlex.split(multi.splitlines()[-1])  # srun runs one task a node, ranks set
    assert last[:4] == ["exec", "srun", "--kill-on-bad-exit=1", "/bin/sh"]
    assert last[-3:] == ["rota-rank", "python", "t.py"]
    assert 'PET_NODE_RANK="$SLURM_NODEID"' in last[5] and last[5].endswith('exec "$@"')
    assert "MASTER_ADDR" in multi and "MASTER_PORT" in multi
    # torchrun's processes per node: as asked (--procs-per-node), else one per GPU
    assert 'export PET_NPROC_PER_NODE="${PET_NPROC_PER_NODE:-1}"' in multi.splitlines()
    four = script.batch_script(a_job(nodes=2, gpus=4)).splitlines()
    assert 'export PET_NPROC_PER_NODE="${PET_NPROC_PER_NODE:-4}"' in four
    two = script.batch_script(a_job(nodes=2, gpus=4, procs_per_node=2)).splitlines()
    assert 'export PET_NPROC_PER_NODE="${PET_NPROC_PER_NODE:-2}"' in two
    one = script.batch_script(a_job(procs_per_node=3)).splitlines()
    assert 'export PET_NPROC_PER_NODE="${PET_NPROC_PER_NODE:-3}"' in one
    assert "PET_NPROC_PER_NODE" not in script.batch_script(a_job())


# ---------------------------------------------------------------------------- parse


def row(state: str, exit_code: str | None, **kw: Any) -> parse.JobRow:
    return parse.JobRow(engine_id="5", state=state, exit_code=exit_code, **kw)


@pytest.mark.parametrize(("state", "code", "want"), [
    ("COMPLETED", "0:0", (0, None)),
    ("FAILED", "3:0", (3, None)),
    ("CANCELLED by 0", "0:15", (None, 15)),
    ("TIMEOUT", "0:9", (None, 9)),
    ("CANCELLED by 0", "0:0", (None, None)),  # cancelled before it ran: not a success
    ("NODE_FAIL", "0:0", (None, None)),
    ("COMPLETED", None, (0, None)),
])
def test_exit_code_and_signal(state: str, code: str | None, want: tuple[Any, Any]) -> None:
    assert parse.exit_of(row(state, code)) == want


def test_status_from_rows() -> None:
    waiting = parse.status(row("PENDING", None, reason="Resources", started="2030-01-01T00:00:00"))
    assert (waiting.state, waiting.reason, waiting.started_at) == (
        EngineState.QUEUED, "Resources", None)
    ended = parse.status(row("FAILED", "3:0", started="2026-11-25T01:35:58",
                             ended="2026-11-25T01:36:00", node_list="n[1-2]"))
    assert ended.state is EngineState.ENDED and ended.exit_code == 3
    assert ended.ended_at is not None and ended.started_at is not None
    assert ended.ended_at - ended.started_at == 2
    assert ended.nodes == ("n1", "n2")
    assert parse.status(row("COMPLETING", None)).state is EngineState.RUNNING


def test_hostlists_and_gres() -> None:
    assert parse.expand_hostlist("gpu[01-03,7],cpu5") == ["gpu01", "gpu02", "gpu03", "gpu7",
                                                          "cpu5"]
    assert parse.gres_counts("gpu:a100:2(S:0-1),gpu:v100:1,shard:8") == {"gpu": 3, "shard": 8}
    assert parse.gres_counts("gpu:1(IDX:0),shard:(null):0(IDX:N/A)") == {"gpu": 1, "shard": 0}
    assert parse.gres_counts("(null)") == {}


def test_health_counts_only_usable_nodes_as_free() -> None:
    out = ("a|mixed|gpu:4|gpu:1(IDX:0)|\n"
           "b|drained|gpu:4|gpu:0|\n"
           "c|idle*|gpu:4|gpu:0|\n"
           "a|mixed|gpu:4|gpu:1(IDX:0)|\n")  # a node in two partitions: once
    h = parse.health(out, "gpu")
    assert (h.nodes, h.gpus_total, h.gpus_free) == (3, 12, 3)
    assert h.message == "1/3 nodes up, 3/12 GPUs free"
    assert parse.shards_per_gpu("a|idle|gpu:2,shard:8|gpu:0|\n", "gpu") == 4


def test_dependencies_become_afterok_with_the_kill_on_an_invalid_one() -> None:
    argv = script.sbatch_argv(a_job(after=("12", "15")), POOL, WORK)
    assert "--dependency=afterok:12:15" in argv and "--kill-on-invalid-dep=yes" in argv
    plain = script.sbatch_argv(a_job(), POOL, WORK)
    assert not [a for a in plain if a.startswith(("--dependency", "--kill-on-invalid-dep"))]
    reason = script.refusal(a_job(after=("12", "x;rm")), POOL)
    assert reason is not None and "'x;rm': not Slurm job ids" in reason


def test_a_job_dropped_for_its_dependency_never_started_and_says_so() -> None:
    waiting = parse.status(row("PENDING", None, reason="Dependency",
                               dependency="afterok:12(unfulfilled)"))
    assert waiting.reason == "Dependency (it starts once Slurm job 12 has completed)"
    two = parse.status(row("PENDING", None, reason="Dependency",
                           dependency="afterok:12(unfulfilled),afterok:15(unfulfilled)"))
    assert two.reason == "Dependency (it starts once Slurm jobs 12, 15 have completed)"
    odd = parse.status(row("PENDING", None, reason="Dependency", dependency="singleton"))
    assert odd.reason == "Dependency (singleton)"
    # Slurm gives the cancelled job its cancel time as a start, and no nodes
    dropped = parse.status(row("CANCELLED", "0:0", reason="DependencyNeverSatisfied",
                               started="2026-11-25T04:34:50", ended="2026-11-25T04:34:50"))
    assert dropped.state is EngineState.ENDED and dropped.unmet_dependency
    assert (dropped.started_at, dropped.exit_code, dropped.signal) == (None, None, None)
    cancelled = parse.status(row("CANCELLED by 0", "0:0", reason="None",
                                 started="2026-11-25T04:34:50"))
    assert not cancelled.unmet_dependency and cancelled.started_at is None
    ran = parse.status(row("CANCELLED by 0", "0:15", reason="DependencyNeverSatisfied",
                           started="2026-11-25T04:34:50", node_list="n1"))
    assert not ran.unmet_dependency and ran.started_at is not None


def test_an_ended_record_takes_squeues_reason_where_it_has_none() -> None:
    ended, live = row("CANCELLED", "0:0"), row("CANCELLED", None,
                                               reason="DependencyNeverSatisfied")
    assert parse.merged(ended, live) == row("CANCELLED", "0:0",
                                            reason="DependencyNeverSatisfied")
    assert parse.merged(None, live) is live and parse.merged(ended, None) is ended


def test_the_first_failed_task_is_read_from_srun_s_own_lines() -> None:
    from rota.backends.slurm.parse import first_failed_task

    # as srun 22.05 wrote them into a two-node job's log (rank 1 exited 3, rank 0 killed)
    tail = (b"step 9 loss=1.5\n"
            b"srun: error: rotabench2: task 1: Exited with exit code 3\n"
            b"srun: launch/slurm: _step_signal: Terminating StepId=2.0\n"
            b"slurmstepd-rotabench: error: *** STEP 2.0 ON rotabench CANCELLED AT "
            b"2026-12-07T21:19:28 ***\n"
            b"srun: error: rotabench: task 0: Exited with exit code 143\n")
    assert first_failed_task(tail) == 3
    assert first_failed_task(b"srun: error: n[1-2]: tasks 0-1: Exited with exit code 7\n") == 7
    assert first_failed_task(b"all fine\n") is None
    assert first_failed_task(b"print('srun: error: x: task 1: Exited with exit code 3')\n") \
        is None  # a line that merely mentions it
