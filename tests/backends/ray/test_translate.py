"""A job as the Ray Jobs API is handed it (pure: no cluster)."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from rota.backends.engine import EngineJob
from rota.backends.ray import translate
from rota.backends.ray.engine import cluster_health, exit_code, status
from rota.backends.ray.gang import _parse, bundle, rank_env, worst
from rota.pools import RayPool

LOCAL = RayPool(engine="ray", address="http://127.0.0.1:8265",
                runtime_env={"env_vars": {"HF_HOME": "/data/hf", "PLAIN": "pool"}})
REMOTE = RayPool(engine="ray", address="http://ray-head.lab:8265")


def job(**kw: Any) -> EngineJob:
    return EngineJob(**{"job_id": 7, "attempt": 2, "name": "train",
                        "argv": ("python", "train.py"), **kw})


def test_entrypoint_is_quoted_argv_and_survives_hostile_values() -> None:
    hostile = ("python", "-c", "print('a; rm -rf /')", "$(id)", "x y")
    e = translate.entrypoint(job(argv=hostile))
    assert shlex.split(e) == list(hostile)
    shell = translate.entrypoint(job(argv=("echo $HOME; exit 3",), shell=True))
    assert shlex.split(shell) == ["/bin/sh", "-c", "echo $HOME; exit 3", "sh"]
    cwd = shlex.split(translate.entrypoint(job(cwd="/w/it's here")))
    assert cwd[:3] == ["/bin/sh", "-c", 'cd -- "$1" && shift && exec "$@"']
    assert cwd[4:] == ["/w/it's here", "python", "train.py"]


def test_submission_resources_env_and_metadata() -> None:
    j = job(gpus=0.5, cpus=2, memory=3 * 2**30, gpu_type="A100", env={"PLAIN": "job"},
            labels={"user": "ada"}, grace=7.5, conda="torch")
    body = translate.submission(j, LOCAL)
    assert body["submission_id"] == "rota-7-2"
    assert body["entrypoint_num_gpus"] == 0.5 and body["entrypoint_num_cpus"] == 2
    assert body["entrypoint_memory"] == 3 * 2**30
    assert body["entrypoint_resources"] == {"accelerator_type:A100": 0.001}
    env = body["runtime_env"]
    assert env["env_vars"] == {"HF_HOME": "/data/hf", "PLAIN": "job",
                               "RAY_JOB_STOP_SIGNAL": "SIGTERM",
                               "RAY_JOB_STOP_WAIT_TIME_S": "8"}
    assert env["conda"] == "torch"
    assert LOCAL.runtime_env["env_vars"] == {"HF_HOME": "/data/hf", "PLAIN": "pool"}
    assert body["metadata"] == {"rota_job_id": "7", "rota_attempt": "2", "rota_name": "train",
                                "label.user": "ada"}


def test_a_gang_runs_the_gang_module_and_holds_no_entrypoint_resources() -> None:
    j = job(nodes=2, gpus=1, cpus=4, memory=2**30, gpu_type="T4", procs_per_node=2,
            grace=30, cwd="/w")
    body = translate.submission(j, LOCAL)
    assert not any(k.startswith("entrypoint_") for k in body if k != "entrypoint")
    argv = shlex.split(body["entrypoint"])
    assert argv[:3] == ["python", "-m", "rota.backends.ray.gang"]
    assert argv[argv.index("--") + 1:] == ["python", "train.py"]
    assert body["runtime_env"]["env_vars"]["RAY_JOB_STOP_WAIT_TIME_S"] == "40"
    args = _parse(argv[3:])
    assert (args.nodes, args.gpus, args.cpus, args.memory, args.nproc, args.cwd) == (
        2, 1.0, 4.0, 2**30, 2, "/w")
    assert bundle(args) == {"CPU": 4.0, "GPU": 1.0, "memory": float(2**30),
                            "accelerator_type:T4": 0.001}


def test_secrets_go_by_file_never_in_the_submission() -> None:
    j = job(secret_env={"TOKEN": "api-token"})
    body = translate.submission(j, LOCAL, "/run/rota/rota-7-2.json")
    assert "TOKEN" not in body["runtime_env"]["env_vars"]
    assert "--secrets=/run/rota/rota-7-2.json" in shlex.split(body["entrypoint"])


@pytest.mark.parametrize(("kw", "pool", "words"), [
    ({"gpu_mem": 8 * 2**30}, LOCAL, "cannot reserve GPU memory"),
    ({"gpus": 1.5}, LOCAL, "ask for 2 GPUs"),
    ({"image": "ghcr.io/x:1"}, LOCAL, "no per-job container images"),
    ({"files": {"/etc/x.yaml": "a: 1"}}, LOCAL, "cannot mount files"),
    ({"model_uri": "s3://b/m"}, LOCAL, "does not fetch a model"),
    ({"stop_signal": "SIGUSR1"}, LOCAL, "SIGTERM or SIGINT only"),
    ({"env": {"RAY_JOB_STOP_WAIT_TIME_S": "1"}}, LOCAL, "is Rota's"),
    ({"cwd": "/home/me/run"}, REMOTE, "is not: drop cwd"),
    ({"secret_env": {"T": "t"}}, REMOTE, "never puts secret values there"),
    ({"conda": "torch"}, RayPool(engine="ray", runtime_env={"pip": ["x"]}), "sets pip"),
    ({"nodes": 0}, LOCAL, "at least 1"),
])
def test_refusals_say_why(kw: dict[str, Any], pool: RayPool, words: str) -> None:
    reason = translate.refusal(job(**kw), pool, secrets=True)
    assert reason and words in reason, reason


def test_what_is_honoured_is_not_refused() -> None:
    ok = job(gpus=0.25, time_limit=60, priority=5, stop_signal="INT", cwd="/w", nodes=3,
             secret_env={"T": "t"})
    assert translate.refusal(ok, LOCAL, secrets=True) is None
    assert "cannot be filled" in (translate.refusal(ok, LOCAL, secrets=False) or "")


def test_status_and_exit_codes_from_rays_answers() -> None:
    pending = status("k", {"status": "PENDING", "start_time": 1000,
                           "message": "Job has not started yet. It may be waiting..."})
    assert pending.state.value == "queued" and pending.started_at is None
    assert pending.reason == "Job has not started yet. It may be waiting..."
    failed = {"status": "FAILED", "start_time": 1000, "end_time": 3500,
              "message": "Job entrypoint command failed with exit code 3, last available "
                         "logs (truncated to 20,000 chars):\nboom\n"}
    st = status("k", failed)
    assert (st.exit_code, st.started_at, st.ended_at) == (3, 1.0, 3.5)
    assert st.reason == "FAILED: Job entrypoint command failed with exit code 3"
    assert exit_code({**failed, "driver_exit_code": 5}) == 5
    killed = status("k", {"status": "STOPPED", "driver_exit_code": -9})
    assert (killed.exit_code, killed.signal) == (None, 9)
    setup = status("k", {"status": "FAILED", "message": "runtime_env setup failed: x"})
    assert setup.exit_code is None and setup.reason == "FAILED: runtime_env setup failed: x"


def test_cluster_health_reads_rays_usage() -> None:
    answer = {"data": {"clusterStatus": {
        "loadMetricsReport": {"usage": {"GPU": [1.5, 3.0], "CPU": [1.0, 6.0]}},
        "autoscalerReport": {"activeNodes": {"a": 1, "b": 1}}}}}
    h = cluster_health(answer)
    assert (h.reachable, h.nodes, h.gpus_total, h.gpus_free) == (True, 2, 3.0, 1.5)


def test_gang_env_and_worst_code() -> None:
    env = rank_env(1, 2, ("10.0.0.5", 29500), 4)
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "10.0.0.5"
    assert (env["NODE_RANK"], env["PET_NNODES"], env["PET_NPROC_PER_NODE"]) == ("1", "2", "4")
    assert worst([0, 3, -15]) == 143 and worst([0, 0]) == 0
