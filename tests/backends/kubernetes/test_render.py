"""Manifests of the Kubernetes engine, each validated against the published schemas."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import ValidationError
from tests.backends.kubernetes.schemas import (
    validate,
    validate_builtin,
    validate_pytorchjob,
    validate_trainjob,
)

from rota.backends import engines
from rota.backends.engine import EngineJob
from rota.backends.kubernetes import manifests, refusal, render_yaml, secret_manifest
from rota.backends.kubernetes.pod import secret_name
from rota.core.spec import JobSpec
from rota.errors import InvalidSpec
from rota.pools import KubernetesPool, Pools
from rota.server.api.pool_reads import engine_job
from rota.storage.job_workspace import WorkspacePlan


def a_job(**kw: Any) -> EngineJob:
    base = EngineJob(job_id=42, attempt=1, name="train lora", argv=("python", "train.py"))
    return replace(base, **kw)


def a_pool(**kw: Any) -> KubernetesPool:
    return KubernetesPool(engine="kubernetes", namespace="ml", image="ghcr.io/lab/train:1",
                          **kw)


def rendered(job: EngineJob, pool: KubernetesPool | None = None) -> list[dict[str, Any]]:
    """The manifests, each checked against its schema first."""
    docs = manifests(job, pool or a_pool())
    for doc in docs:
        validate(doc)
    return docs


def workload(job: EngineJob, pool: KubernetesPool | None = None) -> dict[str, Any]:
    return rendered(job, pool)[-1]


def a_trainjob_pool(**kw: Any) -> KubernetesPool:
    return a_pool(multi_node="trainjob", checkpoint_claim="ckpt-rwx", **kw)


def pod_of(doc: dict[str, Any]) -> dict[str, Any]:
    if doc["kind"] == "Job":
        return doc["spec"]["template"]["spec"]
    return doc["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]


def main(doc: dict[str, Any]) -> dict[str, Any]:
    return pod_of(doc)["containers"][0]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_plain_cpu_job() -> None:
    doc = workload(a_job(cpus=1.5, memory=4 * 2**30, cwd="/work", env={"SEED": "1"}))
    assert doc["apiVersion"] == "batch/v1" and doc["kind"] == "Job"
    assert doc["metadata"]["name"] == "rota-42-1" and doc["metadata"]["namespace"] == "ml"
    assert doc["metadata"]["labels"] == {"rota.dev/job": "42", "rota.dev/attempt": "1",
                                         "rota.dev/key": "rota-42-1"}
    spec = doc["spec"]
    assert spec["backoffLimit"] == 0 and spec["ttlSecondsAfterFinished"] == 3600
    assert "activeDeadlineSeconds" not in spec and "suspend" not in spec
    pod = pod_of(doc)
    assert pod["restartPolicy"] == "Never" and pod["terminationGracePeriodSeconds"] == 30
    c = main(doc)
    assert c["image"] == "ghcr.io/lab/train:1" and c["workingDir"] == "/work"
    assert c["command"] == ["python"] and c["args"] == ["train.py"]
    amounts = {"cpu": "1500m", "memory": str(4 * 2**30)}
    assert c["resources"] == {"requests": amounts, "limits": amounts}
    assert env_of(c) == {"SEED": "1", "ROTA_IMAGE": "ghcr.io/lab/train:1"}  # the pool's
    assert {"name": "scratch", "emptyDir": {"sizeLimit": "10Gi"}} in pod["volumes"]
    assert {"name": "scratch", "mountPath": "/scratch"} in c["volumeMounts"]
    assert "nodeSelector" not in pod and "initContainers" not in pod


def test_gpus_and_type_selector() -> None:
    pool = a_pool(node_selector={"pool": "a100"}, gpu_resource="amd.com/gpu")
    doc = workload(a_job(gpus=2, gpu_type="NVIDIA-A100-SXM4-80GB", cpus=8), pool)
    c = main(doc)
    assert c["resources"]["limits"] == {"cpu": "8", "amd.com/gpu": "2"}
    assert c["resources"]["requests"] == {"cpu": "8"}
    assert pod_of(doc)["nodeSelector"] == {"pool": "a100",
                                          "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}


def test_gpu_memory_with_whole_gpus_selects_nodes_by_memory() -> None:
    doc = workload(a_job(gpus=1, gpu_mem=40 * 2**30))
    term = (pod_of(doc)["affinity"]["nodeAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0])
    assert term == {"matchExpressions": [{"key": "nvidia.com/gpu.memory", "operator": "Gt",
                                          "values": ["40959"]}]}


def test_secrets_are_references_to_the_attempts_secret_and_no_value_is_rendered() -> None:
    job = a_job(env={"MODE": "x"}, secret_env={"HF_TOKEN": "HF_TOKEN", "KEY": "WANDB_API_KEY"})
    c = main(workload(job))
    # key = the variable: submit fills it by the secret's name, render shows the same name
    assert env_of(c)["HF_TOKEN"] == {"secretKeyRef": {"name": "rota-42-1-secrets",
                                                      "key": "HF_TOKEN"}}
    assert env_of(c)["KEY"] == {"secretKeyRef": {"name": "rota-42-1-secrets", "key": "KEY"}}
    values = {"HF_TOKEN": "hf_s3cr3t_value", "KEY": "wandb-0123456789"}
    secret = secret_manifest(job, values, a_pool())
    validate_builtin(secret)
    assert secret["metadata"]["name"] == secret_name(job) == "rota-42-1-secrets"
    assert secret["metadata"]["namespace"] == "ml"
    assert secret["metadata"]["labels"]["rota.dev/key"] == job.key
    assert secret["stringData"] == values
    text = render_yaml(job, a_pool())
    assert "Secret rota-42-1-secrets (keys: HF_TOKEN, KEY)" in text
    for value in values.values():
        assert value not in text


def test_each_attempt_has_its_own_secret() -> None:
    names = {secret_name(a_job(attempt=n, secret_env={"A": "A"})) for n in (1, 2)}
    names.add(secret_name(a_job(install="lab2", secret_env={"A": "A"})))
    assert len(names) == 3
    for name in names:
        validate_builtin({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}})


def test_files_in_a_configmap_mounted_read_only() -> None:
    files = {"/etc/app/config.yaml": "lr: 0.1\n", "/opt/run/args.txt": "--fast\n"}
    cm, doc = rendered(a_job(files=files))
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "rota-42-1-files"
    assert cm["immutable"] is True
    assert sorted(cm["data"].values()) == sorted(files.values())
    mounts = {m["mountPath"]: m for m in main(doc)["volumeMounts"]}
    for path, text in files.items():
        assert mounts[path]["readOnly"] is True
        assert cm["data"][mounts[path]["subPath"]] == text
    assert {"name": "files", "configMap": {"name": "rota-42-1-files"}} in pod_of(doc)["volumes"]


def test_mlflow_model_fetched_by_an_init_container() -> None:
    job = a_job(model_uri="models:/llama-lora/3", model_dir="/models/base",
                env={"MLFLOW_TRACKING_URI": "http://mlflow:5000"})
    pod = pod_of(workload(job))
    (init,) = pod["initContainers"]
    assert init["command"] == ["mlflow", "artifacts", "download", "--artifact-uri",
                               "models:/llama-lora/3", "--dst-path", "/models/base"]
    assert env_of(init)["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
    assert init["volumeMounts"] == [{"name": "model", "mountPath": "/models/base"}]
    c = pod["containers"][0]
    assert {"name": "model", "mountPath": "/models/base", "readOnly": True} in c["volumeMounts"]
    assert env_of(c)["ROTA_MODEL_DIR"] == "/models/base"


def test_a_model_on_another_mlflow_server_is_fetched_from_there() -> None:
    job = a_job(model_uri="runs:/0a1b/model", env={
        "MLFLOW_TRACKING_URI": "http://rota-results:5000",  # where the job reports
        "ROTA_MODEL_TRACKING_URI": "http://models:5000"})  # where the model lives
    pod = pod_of(workload(job))
    (init,) = pod["initContainers"]
    assert [e for e in init["env"] if e["name"] == "MLFLOW_TRACKING_URI"] == [
        {"name": "MLFLOW_TRACKING_URI", "value": "http://models:5000"}]
    assert env_of(pod["containers"][0])["MLFLOW_TRACKING_URI"] == "http://rota-results:5000"


def test_s3_model_fetched_with_argv_not_a_shell_line() -> None:
    uri = "s3://bucket/models/x; rm -rf /"
    (init,) = pod_of(workload(a_job(model_uri=uri)))["initContainers"]
    assert init["command"][:2] == ["python3", "-c"]
    assert init["command"][3:] == [uri, "/models"]
    assert uri not in init["command"][2]  # the program is fixed; the URI is an argument


def test_kueue_label_on_the_workload_only() -> None:
    cm, doc = rendered(a_job(files={"/a": "b"}), a_pool(kueue_queue="team-a"))
    assert doc["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert doc["spec"]["suspend"] is True
    assert "kueue.x-k8s.io/queue-name" not in doc["spec"]["template"]["metadata"]["labels"]
    assert "kueue.x-k8s.io/queue-name" not in cm["metadata"]["labels"]


def test_time_limit_and_grace() -> None:
    doc = workload(a_job(time_limit=5400.2, grace=12.5))
    assert doc["spec"]["activeDeadlineSeconds"] == 5401
    assert pod_of(doc)["terminationGracePeriodSeconds"] == 13


def test_shell_command_and_dollar_escaping() -> None:
    doc = workload(a_job(argv=("echo $(date) $HOME && python train.py",), shell=True,
                         env={"P": "$(HOME)/x"}))
    c = main(doc)
    # Kubernetes expands $(VAR) in command and env: $$ keeps the user's text as written.
    assert c["command"] == ["/bin/sh", "-c", "echo $$(date) $$HOME && python train.py"]
    assert "args" not in c and env_of(c)["P"] == "$$(HOME)/x"


def test_user_labels_kept_and_rota_labels_win() -> None:
    labels = {"project": "lora", "team": "Vision Group", "rota.dev/key": "forged"}
    meta = workload(a_job(labels=labels))["metadata"]
    assert meta["labels"]["project"] == "lora" and meta["labels"]["rota.dev/key"] == "rota-42-1"
    assert "team" not in meta["labels"]  # not a valid label value: kept as an annotation
    assert yaml.safe_load(meta["annotations"]["rota.dev/labels"]) == labels
    assert meta["annotations"]["rota.dev/name"] == "train lora"


def test_other_stop_signal_through_a_pre_stop_hook() -> None:
    c = main(workload(a_job(stop_signal="SIGINT", grace=20)))
    assert c["lifecycle"] == {"preStop": {"exec": {"command": [
        "/bin/sh", "-c", "kill -s INT 1; sleep 20"]}}}
    assert "lifecycle" not in main(workload(a_job()))


def test_multi_node_pytorchjob() -> None:
    pool = a_pool(checkpoint_claim="ckpt-rwx", kueue_queue="team-a")
    job = a_job(argv=("torchrun", "train.py", "--epochs", "3"), nodes=3, gpus=4, cpus=16,
                time_limit=7200, checkpoint_dir="/ckpt", secret_env={"HF_TOKEN": "HF_TOKEN"})
    doc = workload(job, pool)
    assert doc["kind"] == "PyTorchJob" and doc["metadata"]["name"] == "rota-42-1"
    spec = doc["spec"]
    assert spec["nprocPerNode"] == "4"
    assert spec["runPolicy"] == {"cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 3600,
                                 "backoffLimit": 0, "activeDeadlineSeconds": 7200,
                                 "suspend": True}
    replicas = spec["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 2
    for r in replicas.values():
        assert r["restartPolicy"] == "Never"
        c = r["template"]["spec"]["containers"][0]
        assert c["name"] == "pytorch"
        assert c["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456}]
        assert c["command"] == ["torchrun"] and c["args"] == ["train.py", "--epochs", "3"]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "4"
        assert {"name": "checkpoints", "subPath": "rota/42",
                "mountPath": "/ckpt"} in c["volumeMounts"]
        assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ckpt-rwx"}
                } in r["template"]["spec"]["volumes"]
    assert replicas["Master"]["template"] is not replicas["Worker"]["template"]


def test_multi_node_cpu_procs_per_node() -> None:
    doc = workload(a_job(nodes=2, procs_per_node=3), a_pool(checkpoint_claim="c"))
    assert doc["spec"]["nprocPerNode"] == "3"
    mounts = main(doc)["volumeMounts"]
    assert {"name": "checkpoints", "subPath": "rota/42", "mountPath": "/checkpoints"} in mounts
    single = main(workload(a_job(procs_per_node=2)))
    assert env_of(single)["PET_NPROC_PER_NODE"] == "2"


@pytest.mark.parametrize(("job", "pool", "sentence"), [
    (a_job(gpus=0.5), a_pool(), "whole GPUs only"),
    (a_job(gpu_mem=8 * 2**30), a_pool(), "cannot reserve GPU memory"),
    (a_job(conda="torch"), a_pool(), "conda environments are not available"),
    (a_job(), KubernetesPool(engine="kubernetes"), "set `image` in the pool's settings"),
    (a_job(nodes=2), a_pool(), "set `checkpoint_claim`"),
    (a_job(checkpoint_dir="/ckpt"), a_pool(), "retry could not resume"),
    (a_job(model_uri="/home/alice/model"), a_pool(), "a pod cannot fetch the model"),
    (a_job(model_uri="hf://meta/llama"), a_pool(), "a pod cannot fetch the model"),
    (a_job(files={"conf.yaml": "x"}), a_pool(), "needs an absolute path"),
    (a_job(files={"/big": "x" * (1024 * 1024 + 1)}), a_pool(), "at most 1 MiB"),
    (a_job(stop_signal="SIGKILL"), a_pool(), "not a signal a job can catch"),
])
def test_refusals(job: EngineJob, pool: KubernetesPool, sentence: str) -> None:
    reason = refusal(job, pool)
    assert reason is not None and sentence in reason
    with pytest.raises(InvalidSpec, match=re.escape(sentence)):
        manifests(job, pool)


def test_no_refusal_for_what_it_can_run() -> None:
    pool = a_pool(checkpoint_claim="c")
    for job in (a_job(), a_job(gpus=2, gpu_mem=2**30), a_job(nodes=4, gpus=8),
                a_job(image="mine:1"), a_job(model_uri="s3://b/k")):
        assert refusal(job, pool) is None


def test_the_pod_is_told_the_image_it_runs_the_jobs_else_the_pools(tmp_path: Any) -> None:
    """ROTA_IMAGE (an evaluation records it in MLflow): what `rota render` and a launch
    hand the pool, in the main container and the model-fetch init container."""
    pools = Pools.model_validate({"pools": {"k8s": {
        "engine": "kubernetes", "namespace": "ml", "image": "ghcr.io/lab/evals:3"}}})
    pool = pools.get("k8s")[1]
    assert isinstance(pool, KubernetesPool)
    spec = JobSpec(command=["python", "-m", "rota.eval.run"], gpus=1, model="s3://b/m")
    text = engines.render(pool, engine_job(5, "alice", spec, attempt=1), user="alice",
                          work_dir=tmp_path)
    [work] = [d for d in yaml.safe_load_all(text) if d]
    validate(work)
    pod = pod_of(work)
    assert env_of(pod["containers"][0])["ROTA_IMAGE"] == "ghcr.io/lab/evals:3"
    assert env_of(pod["initContainers"][0])["ROTA_IMAGE"] == "ghcr.io/lab/evals:3"
    # the job's own image wins, given once though the launcher's env names it too
    own = engine_job(5, "alice", spec.model_copy(update={"image": "mine:1"}), attempt=1,
                     env={"ROTA_IMAGE": "mine:1", "ROTA_JOB_ID": "5"})
    c = main(workload(own, pool))
    assert [e for e in c["env"] if e["name"] == "ROTA_IMAGE"] == [
        {"name": "ROTA_IMAGE", "value": "mine:1"}]
    assert c["image"] == "mine:1"


def test_render_yaml_is_the_manifests() -> None:
    job, pool = a_job(files={"/a": "b"}), a_pool()
    text = render_yaml(job, pool)
    assert text.startswith("# Rota job 42, attempt 1 (rota-42-1)\n")
    assert "&id" not in text and "*id" not in text
    assert list(yaml.safe_load_all(text)) == manifests(job, pool)


def test_the_validation_can_fail() -> None:
    job = workload(a_job())
    job["spec"]["backoffLimit"] = "none"
    with pytest.raises(jsonschema.ValidationError, match="'none' is not of type"):
        validate_builtin(job)
    job = workload(a_job())
    job["spec"]["template"]["spec"]["containers"][0]["stopSignal"] = "SIGINT"  # not in 1.30
    with pytest.raises(jsonschema.ValidationError, match="stopSignal"):
        validate_builtin(job)
    pt = workload(a_job(nodes=2), a_pool(checkpoint_claim="c"))
    pt["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "one"
    with pytest.raises(jsonschema.ValidationError, match="one"):
        validate_pytorchjob(pt)
    pt = workload(a_job(nodes=2), a_pool(checkpoint_claim="c"))
    pt["spec"]["runPolicy"]["backofLimit"] = 0  # misspelt: strict validation refuses it
    with pytest.raises(jsonschema.ValidationError, match="backofLimit"):
        validate_pytorchjob(pt)
    job = workload(a_job())
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "lots"}
    with pytest.raises(jsonschema.ValidationError, match="not a quantity"):
        validate_builtin(job)
    pt = workload(a_job(nodes=2), a_pool(checkpoint_claim="c"))
    pt["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0][
        "resources"]["limits"] = {"cpu": "lots"}
    with pytest.raises(jsonschema.ValidationError, match="'lots' does not match"):
        validate_pytorchjob(pt)


# ---------------------------------------------------------------------- TrainJob


def test_multi_node_trainjob() -> None:
    pool = a_trainjob_pool(kueue_queue="team-a", node_selector={"pool": "a100"},
                           service_account="trainer", training_runtime="torch-rwx")
    job = a_job(argv=("torchrun", "train.py", "--out", "$(HOME)/x"), nodes=3, gpus=4,
                cpus=16, memory=64 * 2**30, gpu_type="A100", time_limit=7200,
                checkpoint_dir="/ckpt", env={"SEED": "1"}, secret_env={"HF_TOKEN": "HF_TOKEN"},
                files={"/etc/app/config.yaml": "lr: 0.1\n"}, labels={"project": "lora"})
    cm, doc = rendered(job, pool)
    assert cm["kind"] == "ConfigMap"
    assert (doc["apiVersion"], doc["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    meta = doc["metadata"]
    assert meta["name"] == "rota-42-1" and meta["namespace"] == "ml"
    assert meta["labels"] == {"project": "lora", "rota.dev/job": "42", "rota.dev/attempt": "1",
                              "rota.dev/key": "rota-42-1", "kueue.x-k8s.io/queue-name": "team-a"}
    spec = doc["spec"]
    assert spec["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org",
                                  "kind": "ClusterTrainingRuntime", "name": "torch-rwx"}
    assert spec["suspend"] is True
    # the JobSet and its Jobs carry Rota's labels; never Kueue's (they are not workloads)
    assert "kueue.x-k8s.io/queue-name" not in spec["labels"]
    assert spec["labels"]["rota.dev/key"] == "rota-42-1"
    trainer = spec["trainer"]
    assert trainer["image"] == "ghcr.io/lab/train:1"
    assert trainer["command"] == ["torchrun"]
    assert trainer["args"] == ["train.py", "--out", "$$(HOME)/x"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (3, 4)
    amounts = {"cpu": "16", "memory": str(64 * 2**30)}
    assert trainer["resourcesPerNode"] == {"requests": amounts,
                                           "limits": {**amounts, "nvidia.com/gpu": "4"}}
    assert env_of(trainer) == {"SEED": "1", "ROTA_IMAGE": "ghcr.io/lab/train:1",
                               "HF_TOKEN": {"secretKeyRef": {"name": "rota-42-1-secrets",
                                                             "key": "HF_TOKEN"}}}
    (override,) = spec["podSpecOverrides"]
    assert override["targetJobs"] == [{"name": "node"}]
    (node,) = override["containers"]
    assert set(node) == {"name", "volumeMounts"} and node["name"] == "node"
    mounts = {m["mountPath"]: m for m in node["volumeMounts"]}
    assert mounts["/ckpt"] == {"name": "checkpoints", "subPath": "rota/42", "mountPath": "/ckpt"}
    assert mounts["/scratch"]["name"] == "scratch"
    assert mounts["/etc/app/config.yaml"]["readOnly"] is True
    volumes = {v["name"]: v for v in override["volumes"]}
    assert volumes["checkpoints"]["persistentVolumeClaim"] == {"claimName": "ckpt-rwx"}
    assert volumes["files"]["configMap"] == {"name": "rota-42-1-files"}
    assert override["nodeSelector"] == {"pool": "a100", "nvidia.com/gpu.product": "A100"}
    assert override["serviceAccountName"] == "trainer"
    # no time limit in a TrainJob (Rota's timer stops it), no workingDir, no grace
    assert "activeDeadlineSeconds" not in yaml.safe_dump(doc)


def test_trainjob_without_kueue_gpus_or_env() -> None:
    doc = workload(a_job(nodes=2, procs_per_node=3, shell=True,
                         argv=("exec torchrun train.py",)), a_trainjob_pool())
    spec = doc["spec"]
    assert "suspend" not in spec
    assert spec["runtimeRef"]["name"] == "torch-distributed"  # the Trainer's own default
    trainer = spec["trainer"]
    assert trainer["command"] == ["/bin/sh", "-c", "exec torchrun train.py"]
    assert "args" not in trainer and "resourcesPerNode" not in trainer
    assert trainer["env"] == [{"name": "ROTA_IMAGE", "value": "ghcr.io/lab/train:1"}]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (2, 3)
    (override,) = spec["podSpecOverrides"]
    assert "nodeSelector" not in override and "serviceAccountName" not in override
    assert {"name": "checkpoints", "subPath": "rota/42", "mountPath": "/checkpoints"} in (
        override["containers"][0]["volumeMounts"])


def test_one_node_stays_a_job_and_pytorchjob_stays_the_default() -> None:
    assert workload(a_job(cwd="/w"), a_trainjob_pool())["kind"] == "Job"
    assert workload(a_job(nodes=2), a_pool(checkpoint_claim="c"))["kind"] == "PyTorchJob"


@pytest.mark.parametrize(("job", "sentence"), [
    (a_job(cwd="/work"), "cwd='/work' (its pod overrides have no workingDir)"),
    (a_job(gpus=1, gpu_mem=2**30), "gpu_mem (its pod overrides have no node affinity)"),
    (a_job(model_uri="s3://b/m"), "a model to fetch (its pod overrides cannot add an init"),
    (a_job(stop_signal="SIGINT"), "stop_signal=SIGINT (its pod overrides have no preStop"),
    (a_job(grace=120), "grace=120s (the pods keep the runtime's termination grace, 30 s"),
    (a_job(env={"PET_MASTER_PORT": "1"}, secret_env={"PET_NNODES": "x"}),
     "PET_MASTER_PORT, PET_NNODES in its env (the Trainer sets them for torchrun)"),
    (a_job(install="a-very-long-installation-name-0123456789", job_id=1234567, nodes=12),
     "pod names such as rota-a-very-long-installation-name-0123456789-1234567-1-node-0-11-"),
])
def test_what_a_trainjob_cannot_express_is_refused(job: EngineJob, sentence: str) -> None:
    pool = a_trainjob_pool()
    job = replace(job, nodes=max(job.nodes, 2))
    reason = refusal(job, pool)
    assert reason is not None and sentence in reason
    assert reason.startswith(f"this pool runs a {job.nodes}-node job as a Kubeflow TrainJob")
    assert reason.endswith('or set multi_node = "pytorchjob" in the pool\'s settings')
    with pytest.raises(InvalidSpec, match=re.escape(sentence)):
        manifests(job, pool)
    # the same job is fine as a PyTorchJob
    assert refusal(job, a_pool(checkpoint_claim="c")) is None


def test_every_trainjob_gap_is_named_at_once() -> None:
    reason = refusal(a_job(nodes=2, cwd="/w", grace=5), a_trainjob_pool())
    assert reason is not None and "cwd='/w'" in reason and "grace=5s" in reason
    assert ": drop them, or" in reason


def test_trainjob_pool_settings_are_checked() -> None:
    pools = Pools.model_validate({"pools": {"k8s": {
        "engine": "kubernetes", "multi_node": "trainjob", "training_runtime": "torch-rwx.v2"}}})
    pool = pools.get("k8s")[1]
    assert isinstance(pool, KubernetesPool)
    assert (pool.multi_node, pool.training_runtime) == ("trainjob", "torch-rwx.v2")
    with pytest.raises(ValidationError, match="Input should be 'pytorchjob' or 'trainjob'"):
        KubernetesPool(engine="kubernetes", multi_node="jobset")
    with pytest.raises(ValidationError, match="'Torch_Distributed' is not a Kubernetes object"):
        KubernetesPool(engine="kubernetes", training_runtime="Torch_Distributed")


def test_rota_render_of_a_two_node_job_shows_the_trainjob(tmp_path: Any) -> None:
    """What ``rota render JOB --pool k8s`` prints (pool_reads.render_answer's two calls)."""
    pools = Pools.model_validate({"pools": {"k8s": {
        "engine": "kubernetes", "namespace": "ml", "image": "ghcr.io/lab/train:1",
        "checkpoint_claim": "ckpt-rwx", "multi_node": "trainjob"}}})
    spec = JobSpec(command=["torchrun", "--nnodes", "2", "lora.py"], nodes=2, gpus=2,
                   env={"HF_TOKEN": "hf_value"}, secret_env=["HF_TOKEN"])
    job = engine_job(5, "alice", spec, attempt=1)
    text = engines.render(pools.get("k8s")[1], job, user="alice", work_dir=tmp_path)
    assert "owned by the TrainJob" in text and "hf_value" not in text
    [work] = [d for d in yaml.safe_load_all(text) if d]
    validate(work)
    assert work["kind"] == "TrainJob" and work["spec"]["trainer"]["numNodes"] == 2
    assert work["spec"]["trainer"]["args"] == ["--nnodes", "2", "lora.py"]


def test_the_trainjob_validation_can_fail() -> None:
    def doc() -> dict[str, Any]:
        return workload(a_job(nodes=2, gpus=1), a_trainjob_pool())

    bad = doc()
    bad["spec"]["trainer"]["activeDeadlineSeconds"] = 60  # not a TrainJob field (v2.0)
    with pytest.raises(jsonschema.ValidationError, match="activeDeadlineSeconds"):
        validate_trainjob(bad)
    bad = doc()
    bad["spec"]["podSpecOverrides"][0]["containers"][0]["workingDir"] = "/w"  # not overridable
    with pytest.raises(jsonschema.ValidationError, match="workingDir"):
        validate_trainjob(bad)
    bad = doc()
    bad["spec"]["podSpecOverrides"][0]["containers"][0]["command"] = ["x"]  # a55f03a8 only
    with pytest.raises(jsonschema.ValidationError, match="command"):
        validate_trainjob(bad)
    bad = doc()
    bad["spec"]["trainer"]["numNodes"] = "two"
    with pytest.raises(jsonschema.ValidationError, match="'two' is not of type 'integer'"):
        validate_trainjob(bad)
    bad = doc()
    del bad["spec"]["runtimeRef"]
    with pytest.raises(jsonschema.ValidationError, match="'runtimeRef' is a required"):
        validate_trainjob(bad)
    bad = doc()
    bad["spec"]["podSpecOverrides"][0]["volumes"] = []
    with pytest.raises(jsonschema.ValidationError, match="volumeMount 'scratch': no such"):
        validate_trainjob(bad)
    bad = doc()
    bad["spec"]["trainer"]["resourcesPerNode"] = {"limits": {"cpu": "lots"}}
    with pytest.raises(jsonschema.ValidationError, match="lots"):
        validate_trainjob(bad)


CLASSES = [{"up_to": 10, "name": "normal"}, {"up_to": -1, "name": "urgent"}]


@pytest.mark.parametrize(("priority", "klass"), [
    (-5, "urgent"), (-1, "urgent"), (0, "normal"), (10, "normal"), (11, None)])
def test_priority_becomes_the_pools_priority_class(priority: int, klass: str | None) -> None:
    """Rules in any order in rota.toml; the first (by rising up_to) that reaches the job's
    priority names its class; above them all, the cluster's default (no field)."""
    pool = a_pool(priority_classes=CLASSES, checkpoint_claim="c")
    for job in (a_job(priority=priority), a_job(priority=priority, nodes=2, gpus=1)):
        doc = workload(job, pool)  # a Job, then a PyTorchJob: every replica's pod
        pods = ([doc["spec"]["template"]["spec"]] if doc["kind"] == "Job" else
                [r["template"]["spec"] for r in doc["spec"]["pytorchReplicaSpecs"].values()])
        assert [p.get("priorityClassName") for p in pods] == [klass] * len(pods)


def test_priority_classes_are_checked() -> None:
    with pytest.raises(ValidationError, match="two priority classes share an up_to"):
        a_pool(priority_classes=[{"up_to": 1, "name": "a"}, {"up_to": 1, "name": "b"}])
    with pytest.raises(ValidationError, match="'High' is not a Kubernetes object name"):
        a_pool(priority_classes=[{"up_to": 1, "name": "High"}])


def test_a_trainjob_refuses_a_priority_class_it_cannot_carry() -> None:
    pool = a_trainjob_pool(priority_classes=CLASSES)
    reason = refusal(a_job(nodes=2, priority=3), pool)
    assert reason is not None and "the PriorityClass normal of priority 3" in reason
    assert refusal(a_job(nodes=2, priority=50), pool) is None  # the cluster's default


def test_a_pools_workspace_claim_mounts_the_jobs_own_folder_at_workspace() -> None:
    """Each job sees its user's and project's folder of the claim (a subPath), as the
    daemon's machine gives ROTA_WORKSPACE; without a claim, no workspace at all."""
    pool = a_pool(workspace_claim="team-workspaces", checkpoint_claim="ckpt-rwx")
    for doc in (workload(a_job(workspace="alice/vision"), pool),
                workload(a_job(workspace="alice/vision", nodes=2), pool)):
        pod, c = pod_of(doc), main(doc)
        assert {"name": "workspace", "persistentVolumeClaim": {
            "claimName": "team-workspaces"}} in pod["volumes"]
        assert {"name": "workspace", "subPath": "alice/vision",
                "mountPath": "/workspace"} in c["volumeMounts"]
        assert env_of(c)["ROTA_WORKSPACE"] == "/workspace"
    bare = workload(a_job(workspace="alice/vision"))  # a pool without a claim
    assert all(v["name"] != "workspace" for v in pod_of(bare)["volumes"])
    assert "ROTA_WORKSPACE" not in env_of(main(bare))


def test_a_job_that_syncs_its_workspace_keeps_its_copy_on_the_pods_scratch() -> None:
    """Workspaces in a bucket and no claim: the pod's command brings the copy itself
    (rota.storage.job_fetch), into the scratch volume unless the job says where."""
    plan = WorkspacePlan("s3://team-ws/ws/alice/vision", "alice/vision").env()
    c = main(workload(a_job(env=plan)))
    assert env_of(c)["ROTA_WORKSPACE_CACHE"] == "/scratch/rota-workspaces"
    assert "ROTA_WORKSPACE" not in env_of(c)  # (the copy's folder: the job's to set)
    own = main(workload(a_job(env={**plan, "ROTA_WORKSPACE_CACHE": "/data/ws"})))
    assert env_of(own)["ROTA_WORKSPACE_CACHE"] == "/data/ws"
    assert "ROTA_WORKSPACE_CACHE" not in env_of(main(workload(a_job())))
