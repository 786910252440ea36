"""The Kubernetes engine's client half against recorded API conversations.

No API server can run here: the real ``kubernetes`` client talks HTTP to a replay server on
127.0.0.1 (replay.py) that checks each request against the recording and answers the
recorded objects (conversations/*.yaml, sources cited there), each of which is validated
against the published schemas below, so an invented field fails.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.backends.kubernetes.replay import Replay, all_responses, conversation, kubeconfig
from tests.backends.kubernetes.schemas import validate

from rota.backends import engines
from rota.backends.engine import EngineJob, EngineState
from rota.backends.kubernetes import KubernetesEngine
from rota.errors import BackendError
from rota.pools import KubernetesPool

SECRET_VALUE = "hf_Rz81-secret-value"
SECRETS = {"job7.1.HF_TOKEN": SECRET_VALUE}


def a_job(**kw: Any) -> EngineJob:
    base = EngineJob(job_id=7, attempt=1, name="train", argv=("sh", "-c", "echo hello"),
                     image="busybox:1.36")
    return replace(base, **kw)


def a_pool(config: Path, **kw: Any) -> KubernetesPool:
    return KubernetesPool(engine="kubernetes", namespace="ml", kubeconfig=str(config),
                          context="replay", **kw)


Replayed = Callable[..., tuple[KubernetesEngine, Replay]]


@pytest.fixture
def replayed(tmp_path: Path) -> Iterator[Replayed]:
    """``replayed(file, name)``: an engine whose API server replays that conversation; at
    the end, every recorded request must have been made."""
    started: list[tuple[KubernetesEngine, Replay]] = []

    def start(file: str, name: str, **pool: Any) -> tuple[KubernetesEngine, Replay]:
        replay = Replay(conversation(file, name)).start()
        config = kubeconfig(tmp_path / f"kubeconfig-{len(started)}", replay.url)
        engine = KubernetesEngine(a_pool(config, **pool), secrets=SECRETS.__getitem__,
                                  timeout=10)
        started.append((engine, replay))
        return engine, replay

    yield start
    for engine, replay in started:
        engine.close()
        replay.stop()
    for _, replay in started:
        replay.finished()


# ---------------------------------------------------------------------- the recordings


@pytest.mark.parametrize(("where", "obj"), list(all_responses()),
                         ids=[w for w, _ in all_responses()])
def test_every_recorded_answer_is_a_valid_api_object(where: str, obj: dict[str, Any]) -> None:
    validate(obj)


def test_a_made_up_field_in_an_answer_fails_validation() -> None:
    import jsonschema

    [job] = [o for w, o in all_responses() if w.startswith("job.yaml:poll_oomkilled")
             and o["kind"] == "Job"]
    bad = {**job, "status": {**job["status"], "exitCode": 137}}
    with pytest.raises(jsonschema.ValidationError):
        validate(bad)


# ---------------------------------------------------------------------- submit and find


def test_submit_creates_secret_files_and_job_then_owns_them(replayed: Replayed,
                                                             caplog: Any) -> None:
    engine, replay = replayed("job.yaml", "submit")
    job = a_job(secret_env={"HF_TOKEN": "job7.1.HF_TOKEN"},
                files={"/etc/app/config.yaml": "lr: 0.1\n"})
    with caplog.at_level(logging.DEBUG):
        eid = engine.submit(job)
    assert eid == "job/rota-7-1"
    # the value travels in the Secret's create body and nowhere else
    carrying = [s for s in replay.seen if SECRET_VALUE.encode() in s.body
                or SECRET_VALUE in str(s.query) or SECRET_VALUE in s.path]
    assert [(s.method, s.path) for s in carrying] == [("POST", "/api/v1/namespaces/ml/secrets")]
    assert SECRET_VALUE not in eid and SECRET_VALUE not in caplog.text
    assert SECRET_VALUE not in engine.render(job)


def test_submit_again_after_already_exists_answers_the_same_job(replayed: Replayed,
                                                                caplog: Any) -> None:
    engine, replay = replayed("job.yaml", "submit_again")
    job = a_job(secret_env={"HF_TOKEN": "job7.1.HF_TOKEN"},
                files={"/etc/app/config.yaml": "lr: 0.1\n"})
    with caplog.at_level(logging.INFO):
        assert engine.submit(job) == "job/rota-7-1"
    assert "created before" in caplog.text
    creates = [s.path for s in replay.seen if s.method == "POST"]
    assert len(creates) == 3  # each refused as existing: nothing was made twice


def test_a_refused_job_leaves_no_secret_behind(replayed: Replayed) -> None:
    engine, replay = replayed("job.yaml", "submit_forbidden")
    with pytest.raises(BackendError) as err:
        engine.submit(a_job(secret_env={"HF_TOKEN": "job7.1.HF_TOKEN"}))
    text = str(err.value)
    assert "answered 403 to 'create job rota-7-1'" in text
    assert 'jobs.batch is forbidden: User "system:serviceaccount:ml:rota" cannot create' in text
    assert replay.seen[-1].method == "DELETE" and SECRET_VALUE not in text


def test_find_by_key(replayed: Replayed) -> None:
    engine, replay = replayed("job.yaml", "find")
    assert engine.find("rota-7-1") == "job/rota-7-1"
    # found, the Job is made the owner of the attempt's Secret (a crash may have come
    # between their creates and submit's patch); it had no ConfigMap (404: nothing to own)
    assert [(s.method, s.path.rsplit("/", 1)[-1]) for s in replay.seen[1:3]] == [
        ("PATCH", "rota-7-1-secrets"), ("PATCH", "rota-7-1-files")]
    assert engine.find("rota-7-2") is None  # neither a Job nor a PyTorchJob


def test_a_job_the_pool_cannot_honour_is_refused_before_any_request(tmp_path: Path) -> None:
    engine = KubernetesEngine(a_pool(tmp_path / "none"), secrets=SECRETS.__getitem__)
    with pytest.raises(BackendError, match="whole GPUs only"):
        engine.submit(a_job(gpus=0.5))
    no_secrets = KubernetesEngine(a_pool(tmp_path / "none"))
    assert "no way to read secret values" in str(
        no_secrets.refusal(a_job(secret_env={"A": "A"})))


# ---------------------------------------------------------------------- poll


def test_poll_from_unschedulable_to_complete(replayed: Replayed) -> None:
    engine, _ = replayed("job.yaml", "poll_to_success")
    eid = "job/rota-7-1"
    waiting = engine.poll([eid])[eid]
    assert waiting.state is EngineState.QUEUED
    assert waiting.reason == "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    pulling = engine.poll([eid])[eid]
    assert pulling.state is EngineState.QUEUED
    assert pulling.reason == 'ImagePullBackOff: Back-off pulling image "busybox:1.36"'
    running = engine.poll([eid])[eid]
    assert running.state is EngineState.RUNNING and running.nodes == ("gpu-node-2",)
    assert running.started_at == 1795423231.0  # the container's startedAt, 08:40:31Z
    done = engine.poll([eid])[eid]
    assert (done.state, done.exit_code, done.signal) == (EngineState.ENDED, 0, None)
    assert done.ended_at == 1795423280.0 and done.started_at == 1795423215.0
    assert done.reason == "Complete; container job: Completed (exit code 0)"


def test_poll_failed_keeps_the_exit_code_and_oomkilled(replayed: Replayed) -> None:
    engine, _ = replayed("job.yaml", "poll_oomkilled")
    st = engine.poll(["job/rota-7-1"])["job/rota-7-1"]
    assert (st.state, st.exit_code) == (EngineState.ENDED, 137)
    assert st.reason == ("BackoffLimitExceeded: Job has reached the specified backoff limit; "
                         "container job: OOMKilled (exit code 137)")
    assert st.ended_at == 1795423368.0  # the Failed condition's time


def test_poll_deadline_exceeded(replayed: Replayed) -> None:
    engine, _ = replayed("job.yaml", "poll_deadline")
    st = engine.poll(["job/rota-7-1"])["job/rota-7-1"]
    assert st.state is EngineState.ENDED and st.exit_code is None
    assert st.reason == "DeadlineExceeded: Job was active longer than specified deadline"


def test_poll_suspended_by_kueue_is_queued(replayed: Replayed) -> None:
    engine, _ = replayed("job.yaml", "poll_suspended")
    st = engine.poll(["job/rota-7-1"])["job/rota-7-1"]
    assert st.state is EngineState.QUEUED and st.reason is not None
    assert st.reason.startswith("Suspended")


def test_poll_of_a_deleted_job_is_lost(replayed: Replayed) -> None:
    engine, _ = replayed("job.yaml", "poll_lost")
    assert engine.poll(["job/rota-7-1"])["job/rota-7-1"].state is EngineState.LOST


def test_an_id_of_no_known_kind_is_lost_without_a_request(tmp_path: Path) -> None:
    engine = KubernetesEngine(a_pool(tmp_path / "none"))
    assert engine.poll(["deployment/x"])["deployment/x"].state is EngineState.LOST


# ---------------------------------------------------------------------- logs and stop


def test_logs_from_an_offset_and_before_any_pod(replayed: Replayed) -> None:
    engine, _ = replayed("job.yaml", "logs")
    first = engine.read_log("job/rota-7-1", 0)
    assert first == b"epoch 1 loss 0.93\nepoch 2 loss 0.71\n"
    assert engine.read_log("job/rota-7-1", 18) == b"epoch 2 loss 0.71\nepoch 3 loss 0.64\n"
    assert engine.read_log("job/rota-7-1", 0) == b""  # no pod (yet, or any more)


def test_stop_deletes_with_the_grace_then_the_job_is_lost(replayed: Replayed) -> None:
    engine, replay = replayed("job.yaml", "stop")
    engine.stop("job/rota-7-1", "SIGTERM", 29.2)
    assert (replay.seen[0].method, replay.seen[0].query) == (
        "DELETE", {"gracePeriodSeconds": "30", "propagationPolicy": "Foreground"})
    stopping = engine.poll(["job/rota-7-1"])["job/rota-7-1"]
    assert stopping.state is EngineState.RUNNING and stopping.reason is not None
    assert "being deleted" in stopping.reason
    assert engine.poll(["job/rota-7-1"])["job/rota-7-1"].state is EngineState.LOST
    engine.stop("job/rota-7-1", "SIGTERM", 30)  # already gone: nothing to do


# ---------------------------------------------------------------------- health and errors


def test_health_counts_nodes_and_gpus(replayed: Replayed) -> None:
    engine, _ = replayed("job.yaml", "health")
    h = engine.health()
    assert (h.reachable, h.nodes, h.gpus_total, h.gpus_free) == (True, 3, 16.0, 12.0)
    assert h.message == "3 node(s), 12/16 GPUs (nvidia.com/gpu) free"


def test_health_without_leave_to_list_pods_leaves_free_gpus_unknown(replayed: Replayed) -> None:
    engine, _ = replayed("job.yaml", "health_forbidden_pods")
    h = engine.health()
    assert (h.reachable, h.nodes, h.gpus_total, h.gpus_free) == (True, 1, 8.0, None)


def _closed_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_api_server_is_a_backend_error(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    engine = KubernetesEngine(a_pool(kubeconfig(tmp_path / "kc", url)), timeout=5)
    with pytest.raises(BackendError) as err:
        engine.find("rota-7-1")
    assert f"cannot reach the Kubernetes API server at {url}" in str(err.value)
    assert "Connection refused" in str(err.value)
    h = engine.health()
    assert not h.reachable and url in h.message


def test_a_missing_kubeconfig_is_a_backend_error(tmp_path: Path) -> None:
    engine = KubernetesEngine(a_pool(tmp_path / "absent"))
    with pytest.raises(BackendError, match="cannot load the kubeconfig"):
        engine.find("rota-7-1")


# ---------------------------------------------------------------------- PyTorchJob


def test_pytorchjob_submit(replayed: Replayed) -> None:
    engine, _ = replayed("pytorchjob.yaml", "submit", checkpoint_claim="ckpt")
    job = a_job(job_id=9, nodes=2, image="ghcr.io/lab/train:1", argv=("torchrun", "train.py"))
    assert engine.submit(job) == "pytorchjob/rota-9-1"


def test_pytorchjob_poll_running_then_succeeded(replayed: Replayed) -> None:
    engine, _ = replayed("pytorchjob.yaml", "poll")
    eid = "pytorchjob/rota-9-1"
    running = engine.poll([eid])[eid]
    assert running.state is EngineState.RUNNING
    assert running.nodes == ("gpu-node-2", "gpu-node-3")
    done = engine.poll([eid])[eid]
    assert (done.state, done.exit_code) == (EngineState.ENDED, 0)
    assert done.ended_at == 1795427007.0  # completionTime, 09:43:27Z
    assert done.reason is not None and done.reason.startswith("Succeeded")


def test_pytorchjob_logs_are_the_masters(replayed: Replayed) -> None:
    engine, replay = replayed("pytorchjob.yaml", "logs")
    assert engine.read_log("pytorchjob/rota-9-1", 6) == b": step 100 loss 1.20\n"
    assert replay.seen[-1].path.endswith("/pods/rota-9-1-master-0/log")


def test_pytorchjob_stop(replayed: Replayed) -> None:
    engine, _ = replayed("pytorchjob.yaml", "stop")
    engine.stop("pytorchjob/rota-9-1", "SIGTERM", 45)


# ---------------------------------------------------------------------- the pool's engine


def test_engines_make_health_and_refusal_use_the_client(tmp_path: Path) -> None:
    pool = a_pool(tmp_path / "absent")
    engine = engines.make(pool, tmp_path, secrets=SECRETS.__getitem__)
    assert isinstance(engine, KubernetesEngine)
    assert engines.refusal(pool, a_job(), work_dir=tmp_path) is None
    assert "whole GPUs" in str(engines.refusal(pool, a_job(gpus=1.5), work_dir=tmp_path))
    health = engines.health(pool, tmp_path)
    assert not health.reachable and "cannot load the kubeconfig" in health.message
    assert engines.capabilities(pool, tmp_path) == KubernetesEngine.capabilities


# ---------------------------------------------------------------------- a real cluster


@pytest.mark.live_kubernetes
@pytest.mark.skipif(not os.environ.get("KUBECONFIG"),
                    reason="no cluster: set KUBECONFIG to run a busybox Job on one")
def test_a_tiny_job_on_a_real_cluster(tmp_path: Path) -> None:
    from rota_testing import wait_until

    pool = KubernetesPool(engine="kubernetes", image="busybox:1.36",
                          namespace=os.environ.get("ROTA_TEST_K8S_NAMESPACE", "default"))
    engine = KubernetesEngine(pool)
    job = a_job(job_id=os.getpid(), argv=("echo", "hello from rota"), install="live")
    eid = engine.submit(job)
    try:
        assert engine.find(job.key) == eid
        ended = wait_until(lambda: (st := engine.poll([eid])[eid]).state is EngineState.ENDED
                           and st, 180, every=1, what="the busybox Job to end")
        assert ended.exit_code == 0, ended
        assert b"hello from rota" in engine.read_log(eid, 0)
    finally:
        engine.stop(eid, "SIGTERM", 1)


# ---------------------------------------------------------------------- TrainJob

TRAINJOB = "trainjob/rota-9-1"


def a_trainjob(**kw: Any) -> EngineJob:
    return a_job(job_id=9, nodes=2, image="ghcr.io/lab/train:1", argv=("torchrun", "train.py"),
                 **kw)


def test_trainjob_submit_owns_its_configmap(replayed: Replayed) -> None:
    engine, replay = replayed("trainjob.yaml", "submit", checkpoint_claim="ckpt",
                              multi_node="trainjob")
    job = a_trainjob(files={"/etc/app/config.yaml": "lr: 0.1\n"})
    assert engine.submit(job) == TRAINJOB
    assert [(s.method, s.path.rsplit("/", 1)[-1]) for s in replay.seen] == [
        ("POST", "configmaps"), ("POST", "trainjobs"), ("PATCH", "rota-9-1-files")]


def test_trainjob_refused_before_any_request(tmp_path: Path) -> None:
    pool = a_pool(tmp_path / "none", checkpoint_claim="ckpt", multi_node="trainjob")
    engine = KubernetesEngine(pool, secrets=SECRETS.__getitem__)
    with pytest.raises(BackendError, match=r"cwd='/w' \(its pod overrides have no workingDir"):
        engine.submit(a_trainjob(cwd="/w"))


def test_trainjob_found_after_a_restart(replayed: Replayed) -> None:
    engine, _ = replayed("trainjob.yaml", "find", multi_node="trainjob")
    assert engine.find("rota-9-1") == TRAINJOB


def test_trainjob_poll_suspended_pending_running_complete(replayed: Replayed) -> None:
    engine, _ = replayed("trainjob.yaml", "poll")
    suspended = engine.poll([TRAINJOB])[TRAINJOB]
    assert suspended.state is EngineState.QUEUED
    assert suspended.reason == ("Suspended: TrainJob is suspended (waiting to be admitted, "
                                "e.g. by Kueue)")
    pending = engine.poll([TRAINJOB])[TRAINJOB]
    assert pending.state is EngineState.QUEUED and pending.nodes == ("gpu-node-2",)
    assert pending.reason == ("0/3 nodes are available: 1 Insufficient nvidia.com/gpu, "
                              "2 node(s) didn't match Pod's node affinity/selector.")
    running = engine.poll([TRAINJOB])[TRAINJOB]
    assert running.state is EngineState.RUNNING
    assert running.nodes == ("gpu-node-2", "gpu-node-3")
    assert running.started_at == 1795428309.0  # the last node's start, 10:05:09Z
    done = engine.poll([TRAINJOB])[TRAINJOB]
    assert (done.state, done.exit_code, done.signal) == (EngineState.ENDED, 0, None)
    assert done.reason == ("Complete; container node: Completed (exit code 0)")
    assert done.ended_at == 1795429862.0  # the Complete condition's time, 10:31:02Z
    assert done.started_at == 1795428309.0


def test_trainjob_failed_names_the_node_that_failed(replayed: Replayed) -> None:
    engine, _ = replayed("trainjob.yaml", "poll_failed")
    st = engine.poll([TRAINJOB])[TRAINJOB]
    assert (st.state, st.exit_code) == (EngineState.ENDED, 137)
    assert st.reason == ("FailedJobs: jobset failed due to one or more job failures; "
                         "container node: OOMKilled (exit code 137)")
    assert st.ended_at == 1795428765.0  # 10:12:45Z


def test_trainjob_logs_are_node_zeros(replayed: Replayed) -> None:
    engine, replay = replayed("trainjob.yaml", "logs")
    assert engine.read_log(TRAINJOB, 0) == b"[rank0]: step 100 loss 1.20\n"
    assert replay.seen[-1].query["container"] == "node"


def test_trainjob_stop_deletes_then_it_is_lost(replayed: Replayed) -> None:
    engine, _ = replayed("trainjob.yaml", "stop")
    engine.stop(TRAINJOB, "SIGTERM", 30)
    stopping = engine.poll([TRAINJOB])[TRAINJOB]
    assert stopping.state is EngineState.RUNNING and stopping.reason is not None
    assert "being deleted" in stopping.reason
    lost = engine.poll([TRAINJOB])[TRAINJOB]
    assert lost.state is EngineState.LOST and lost.reason is not None
    assert "no longer has this trainjob" in lost.reason
