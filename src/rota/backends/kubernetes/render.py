"""Kubernetes manifests for one attempt of a Rota job; pure functions, no client needed.

One node: a ``batch/v1`` Job. Several: a Kubeflow ``kubeflow.org/v1`` PyTorchJob (Master
plus Workers; the training operator sets MASTER_ADDR, WORLD_SIZE and the PET_* variables
torchrun reads, so ``torchrun train.py`` needs no rendezvous flags), or, where the pool
says ``multi_node = "trainjob"``, a Kubeflow Trainer v2 TrainJob (trainjob.py; the Trainer
sets the PET_* variables). The job's files travel in a ConfigMap. Secret values never
appear: the pod refers to the attempt's own Secret, which :func:`secret_manifest` builds
from the stored values at submit, outside ``render``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

import yaml

from rota.backends.engine import EngineJob
from rota.backends.kubernetes import pod, trainjob
from rota.backends.kubernetes.refusal import refusal
from rota.errors import InvalidSpec
from rota.pools import KubernetesPool

KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
JOB_CONTAINER = "job"  # the main container of a batch Job's pod
PYTORCH_CONTAINER = "pytorch"  # the operator finds its port and sets its env by this name
PYTORCH_PORT = {"name": "pytorchjob-port", "containerPort": 23456}  # the operator's default
_LABEL_NAME = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)")
_LABEL_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def manifests(job: EngineJob, pool: KubernetesPool) -> list[dict[str, Any]]:
    """The objects to create, in order: the files' ConfigMap (if any), then the workload.
    Raises InvalidSpec with the refusal's sentence when the pool cannot honour the job."""
    reason = refusal(job, pool)
    if reason:
        raise InvalidSpec(reason, field="pool")
    files = files_map(job, pool)
    name = files["metadata"]["name"] if files else None
    if job.nodes == 1:
        work = job_manifest(job, pool, files_map=name)
    elif pool.multi_node == "trainjob":
        work = trainjob_manifest(job, pool, files_map=name)
    else:
        work = pytorchjob_manifest(job, pool, files_map=name)
    return [files, work] if files else [work]


def render_yaml(job: EngineJob, pool: KubernetesPool) -> str:
    """What ``rota render JOB --pool k8s`` prints: the manifests as one YAML stream."""
    head = f"# Rota job {job.job_id}, attempt {job.attempt} ({job.key})\n"
    docs = manifests(job, pool)
    if job.secret_env:
        keys = ", ".join(sorted(job.secret_env))
        head += (f"# secrets come from Secret {pod.secret_name(job)} (keys: {keys}), "
                 "written from your stored secrets at submit and owned by the "
                 f"{docs[-1]['kind']}\n")
    return head + yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False)


class _Dumper(yaml.SafeDumper):
    """Writes shared parts (the env of both containers) out in full, without &anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def metadata(job: EngineJob, pool: KubernetesPool, name: str, *, queue: bool = False
             ) -> dict[str, Any]:
    """Name, namespace, Rota's labels (found again by ``rota.dev/key``) and the user's;
    the Kueue label only on the workload (on pods, Kueue's pod integration would take
    them for workloads of their own)."""
    labels = {k: v for k, v in job.labels.items() if _valid_label(k, v)}
    labels.update({"rota.dev/job": str(job.job_id), "rota.dev/attempt": str(job.attempt),
                   "rota.dev/key": job.key})
    if queue and pool.kueue_queue:
        labels[KUEUE_QUEUE] = pool.kueue_queue
    # Every user label, valid as a Kubernetes label or not, so none is dropped.
    notes = {"rota.dev/name": job.name, "rota.dev/labels": json.dumps(dict(job.labels))}
    return {"name": name, "namespace": pool.namespace, "labels": labels, "annotations": notes}


def _valid_label(key: str, value: str) -> bool:
    prefix, _, name = key.rpartition("/")
    return (bool(_LABEL_NAME.fullmatch(name)) and not key.startswith("rota.dev/")
            and (not prefix or bool(_LABEL_PREFIX.fullmatch(prefix)))
            and (value == "" or bool(_LABEL_NAME.fullmatch(value))))


def _pod_template(job: EngineJob, pool: KubernetesPool, *, container: str,
                  files_map: str | None) -> dict[str, Any]:
    meta = metadata(job, pool, job.key)
    spec = pod.pod_spec(job, pool, container=container, files_map=files_map)
    return {"metadata": {"labels": meta["labels"]}, "spec": spec}


def job_manifest(job: EngineJob, pool: KubernetesPool, *,
                 files_map: str | None = None) -> dict[str, Any]:
    """A batch/v1 Job running the job's one pod."""
    spec: dict[str, Any] = {
        # Rota owns retries: one attempt is one engine job, so Kubernetes retries none.
        "backoffLimit": 0,
        "ttlSecondsAfterFinished": pool.ttl_seconds_after_finished,
        "template": _pod_template(job, pool, container=JOB_CONTAINER, files_map=files_map),
    }
    if job.time_limit:
        spec["activeDeadlineSeconds"] = max(1, math.ceil(job.time_limit))
    if pool.kueue_queue:
        spec["suspend"] = True  # Kueue admits (unsuspends) the job when its quota allows
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": metadata(job, pool, job.key, queue=True), "spec": spec}


def pytorchjob_manifest(job: EngineJob, pool: KubernetesPool, *,
                        files_map: str | None = None) -> dict[str, Any]:
    """A Kubeflow PyTorchJob: one Master and nodes-1 Workers running the same command.
    Deleting it deletes every pod, so each rank's container gets the stop signal."""
    def replicas(n: int) -> dict[str, Any]:
        template = _pod_template(job, pool, container=PYTORCH_CONTAINER,
                                 files_map=files_map)
        template["spec"]["containers"][0]["ports"] = [dict(PYTORCH_PORT)]
        # restartPolicy Never: Rota owns retries, as for a batch Job.
        return {"replicas": n, "restartPolicy": "Never", "template": template}

    run_policy: dict[str, Any] = {
        "cleanPodPolicy": "Running",  # stop leftover ranks; keep ended pods for their logs
        "ttlSecondsAfterFinished": pool.ttl_seconds_after_finished,
        "backoffLimit": 0,
    }
    if job.time_limit:
        run_policy["activeDeadlineSeconds"] = max(1, math.ceil(job.time_limit))
    if pool.kueue_queue:
        run_policy["suspend"] = True
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": metadata(job, pool, job.key, queue=True),
            "spec": {"nprocPerNode": str(job.torchrun_procs), "runPolicy": run_policy,
                     "pytorchReplicaSpecs": {"Master": replicas(1),
                                             "Worker": replicas(job.nodes - 1)}}}


def trainjob_manifest(job: EngineJob, pool: KubernetesPool, *,
                      files_map: str | None = None) -> dict[str, Any]:
    """A Kubeflow Trainer v2 TrainJob on the pool's ClusterTrainingRuntime: the runtime
    makes the pods (one per node, in a JobSet of its name), Rota gives the trainer (image,
    command, env, nodes, resources) and, through ``podSpecOverrides``, the volumes,
    node selector and service account. No time limit: Rota's own timer stops the job."""
    trainer: dict[str, Any] = {"image": pod.image(job, pool), **pod.command(job),
                               "numNodes": job.nodes, "numProcPerNode": job.torchrun_procs}
    env = pod.env(job, pool)
    if env:
        trainer["env"] = env
    amounts = pod.resources(job, pool)
    if amounts:
        trainer["resourcesPerNode"] = amounts
    vols, mounts = pod.volumes(job, pool, files_map)
    override: dict[str, Any] = {"targetJobs": [{"name": trainjob.NODE}],
                                "containers": [{"name": trainjob.NODE, "volumeMounts": mounts}],
                                "volumes": vols}
    selector = pod.node_selector(job, pool)
    if selector:
        override["nodeSelector"] = selector
    if pool.service_account:
        override["serviceAccountName"] = pool.service_account
    spec: dict[str, Any] = {
        "runtimeRef": {"apiGroup": trainjob.GROUP, "kind": trainjob.RUNTIME_KIND,
                       "name": pool.training_runtime},
        "labels": metadata(job, pool, job.key)["labels"],  # on its JobSet and Jobs
        "trainer": trainer, "podSpecOverrides": [override]}
    if pool.kueue_queue:
        spec["suspend"] = True
    return {"apiVersion": trainjob.API_VERSION, "kind": "TrainJob",
            "metadata": metadata(job, pool, job.key, queue=True), "spec": spec}


def files_map(job: EngineJob, pool: KubernetesPool) -> dict[str, Any] | None:
    """The ConfigMap holding the job's files (mounted read-only, one subPath each)."""
    if not job.files:
        return None
    data = {pod.file_key(i, path): job.files[path] for i, path in enumerate(sorted(job.files))}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": metadata(job, pool, pod.files_name_of(job.key)),
            "immutable": True, "data": data}


def secret_manifest(job: EngineJob, values: Mapping[str, str], pool: KubernetesPool
                    ) -> dict[str, Any]:
    """The attempt's Secret (key = variable), from the stored values: made at submit,
    never rendered or printed."""
    meta = metadata(job, pool, pod.secret_name(job))
    meta["labels"]["app.kubernetes.io/managed-by"] = "rota"
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": meta,
            "stringData": dict(values)}
