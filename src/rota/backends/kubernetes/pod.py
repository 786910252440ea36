"""The pod a Rota job runs in: containers, volumes, resources, scheduling.

Shared by the batch/v1 Job (one pod) and the PyTorchJob (one pod per node); a TrainJob
takes its env, resources and volumes (its runtime makes the pods). Every user
value reaches the pod as a list element, never inside a shell string Rota builds.
"""

from __future__ import annotations

import math
from typing import Any

from rota.backends.engine import EngineJob
from rota.backends.kubernetes.refusal import model_fetch_kind
from rota.pools import KubernetesPool
from rota.storage import job_workspace

SCRATCH = "/scratch"
WORKSPACE_MOUNT = "/workspace"  # the job's folder of the pool's workspace_claim
#: the MLflow server a ``runs:/`` or ``models:/`` model is fetched from, when it is not the
#: one the job reports to (MLFLOW_TRACKING_URI)
MODEL_TRACKING_ENV = "ROTA_MODEL_TRACKING_URI"
#: the image the pod runs (the job's, else the pool's), for the job to record (rota.eval.run
#: tags its MLflow run with it)
IMAGE_ENV = "ROTA_IMAGE"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # GPU feature discovery's label, in MiB

# A fixed program: bucket, key and destination arrive as argv, never in its text. boto3
# finds credentials and endpoint in the usual AWS_* variables (AWS_ENDPOINT_URL_S3 for an
# S3-compatible server). Run against a real S3 server in tests/eval/test_eval_s3.py.
_S3_FETCH = """\
import os, sys, boto3
uri = sys.argv[1]
bucket, _, prefix = uri[len("s3://"):].partition("/")
dst, s3, got = os.path.realpath(sys.argv[2]), boto3.client("s3"), 0
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
    for obj in page.get("Contents", []):
        key = obj["Key"]
        rel = os.path.basename(key) if key == prefix else os.path.relpath(key, prefix)
        path = os.path.realpath(os.path.join(dst, rel))
        if key.endswith("/"):
            continue  # a folder marker
        if not path.startswith(dst + os.sep):
            print("skipped s3://%s/%s: outside %s" % (bucket, key, uri), flush=True)
            continue  # another prefix's key (models/tiny2/...), or one climbing out of dst
        os.makedirs(os.path.dirname(path), exist_ok=True)
        s3.download_file(bucket, key, path)
        got += 1
if not got:
    sys.exit("no model at %s: no objects under that prefix" % uri)
print("fetched %d file(s) from %s into %s" % (got, uri, dst), flush=True)
"""


def literal(text: str) -> str:
    """``text`` as Kubernetes passes it: it expands ``$(VAR)`` in command, args and env
    values, and ``$$`` is its escape for one ``$``."""
    return text.replace("$", "$$")


def quantity_cpu(cpus: float) -> str:
    millis = math.ceil(cpus * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def secret_name(job: EngineJob) -> str:
    """The attempt's own Secret, holding its secret values (key = the variable's name).
    Made at submit and owned by the workload, so it goes when the workload does."""
    return secret_name_of(job.key)


def secret_name_of(key: str) -> str:
    """The Secret of the attempt whose key this is."""
    return f"{key}-secrets"


def files_name_of(key: str) -> str:
    """The files' ConfigMap of the attempt whose key this is."""
    return f"{key}-files"


def image(job: EngineJob, pool: KubernetesPool) -> str:
    """The image the pod runs: the job's, else the pool's (refusal.py refuses neither)."""
    return job.image or pool.image or ""


def env(job: EngineJob, pool: KubernetesPool) -> list[dict[str, Any]]:
    """Plain variables as values, ``ROTA_IMAGE`` the image the pod runs; secrets as
    references to the attempt's Secret."""
    out: list[dict[str, Any]] = [{"name": k, "value": literal(v)} for k, v in job.env.items()
                                 if k != IMAGE_ENV]
    if image(job, pool):
        out.append({"name": IMAGE_ENV, "value": literal(image(job, pool))})
    if pool.workspace_claim and job.workspace:
        out.append({"name": "ROTA_WORKSPACE", "value": WORKSPACE_MOUNT})
    elif job_workspace.SYNC_ENV in job.env and job_workspace.CACHE_ENV not in job.env:
        # the copy a job brings from the workspaces' bucket: on the pod's scratch volume
        out.append({"name": job_workspace.CACHE_ENV, "value": f"{SCRATCH}/rota-workspaces"})
    if job.model_uri and "ROTA_MODEL_DIR" not in job.env:
        out.append({"name": "ROTA_MODEL_DIR", "value": literal(job.model_dir)})
    if job.procs_per_node and job.nodes == 1:  # torchrun reads PET_* as its defaults
        out.append({"name": "PET_NPROC_PER_NODE", "value": str(job.procs_per_node)})
    out += [{"name": var, "valueFrom": {"secretKeyRef": {"name": secret_name(job),
                                                         "key": var}}}
            for var in job.secret_env]
    return out


def resources(job: EngineJob, pool: KubernetesPool) -> dict[str, Any]:
    """Requests equal limits: the pod gets what Rota was asked for, no more."""
    amounts: dict[str, str] = {}
    if job.cpus:
        amounts["cpu"] = quantity_cpu(job.cpus)
    if job.memory:
        amounts["memory"] = str(job.memory)
    limits = dict(amounts)
    if job.gpus >= 1:  # extended resources: the limit is the request
        limits[pool.gpu_resource] = str(int(job.gpus))
    out: dict[str, Any] = {}
    if amounts:
        out["requests"] = amounts
    if limits:
        out["limits"] = limits
    return out


def command(job: EngineJob) -> dict[str, list[str]]:
    if job.shell:
        return {"command": ["/bin/sh", "-c", literal(job.argv[0])]}
    argv = [literal(a) for a in job.argv]
    return {"command": argv[:1], "args": argv[1:]} if len(argv) > 1 else {"command": argv}


def stop_hook(job: EngineJob) -> dict[str, Any] | None:
    """Kubernetes sends SIGTERM to each container's PID 1 when a pod is deleted. For
    another signal a preStop hook sends it to PID 1 and holds the SIGTERM back for the
    grace; the kubelet kills at the end of the grace either way. The signal's name was
    checked against the signal table (refusal.py) before it reaches this shell line."""
    if job.stop_signal == "SIGTERM":
        return None
    sig = job.stop_signal.removeprefix("SIG")
    line = f"kill -s {sig} 1; sleep {math.ceil(job.grace)}"
    return {"preStop": {"exec": {"command": ["/bin/sh", "-c", line]}}}


def volumes(job: EngineJob, pool: KubernetesPool, files_map: str | None
            ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes and the main container's mounts."""
    vols: list[dict[str, Any]] = [{"name": "scratch",
                                   "emptyDir": {"sizeLimit": pool.scratch_size}}]
    mounts: list[dict[str, Any]] = [{"name": "scratch", "mountPath": SCRATCH}]
    if job.model_uri:
        vols.append({"name": "model", "emptyDir": {}})
        mounts.append({"name": "model", "mountPath": job.model_dir, "readOnly": True})
    if files_map:
        vols.append({"name": "files", "configMap": {"name": files_map}})
        mounts += [{"name": "files", "mountPath": path, "subPath": file_key(i, path),
                    "readOnly": True} for i, path in enumerate(sorted(job.files))]
    if pool.workspace_claim and job.workspace:  # its user's and project's folder of it
        vols.append({"name": "workspace",
                     "persistentVolumeClaim": {"claimName": pool.workspace_claim}})
        mounts.append({"name": "workspace", "subPath": job.workspace,
                       "mountPath": WORKSPACE_MOUNT})
    if pool.checkpoint_claim and (job.checkpoint_dir or job.nodes > 1):
        vols.append({"name": "checkpoints",
                     "persistentVolumeClaim": {"claimName": pool.checkpoint_claim}})
        # One folder a job, shared by its attempts: a retry resumes from it.
        mounts.append({"name": "checkpoints", "subPath": f"rota/{job.job_id}",
                       "mountPath": job.checkpoint_dir or "/checkpoints"})
    return vols, mounts


def file_key(index: int, path: str) -> str:
    """A ConfigMap key for ``path``: keys allow only ``[-._a-zA-Z0-9]``."""
    base = "".join(c if c.isalnum() or c in "-._" else "_" for c in path.rsplit("/", 1)[-1])
    return f"f{index}-{base}"[:253]


def fetch_container(job: EngineJob, image: str, env_list: list[dict[str, Any]]
                    ) -> dict[str, Any]:
    """The init container that puts ``job.model_uri`` into the model volume."""
    uri, dst = job.model_uri or "", job.model_dir
    if model_fetch_kind(uri) == "mlflow":
        argv = ["mlflow", "artifacts", "download", "--artifact-uri", uri, "--dst-path", dst]
    else:
        argv = ["python3", "-c", _S3_FETCH, uri, dst]
    server = job.env.get(MODEL_TRACKING_ENV)
    if server:  # the model's MLflow server, not the one the job reports to
        env_list = [e for e in env_list if e["name"] != "MLFLOW_TRACKING_URI"]
        env_list.append({"name": "MLFLOW_TRACKING_URI", "value": literal(server)})
    return {"name": "fetch-model", "image": image, "command": [literal(a) for a in argv],
            "env": env_list, "volumeMounts": [{"name": "model", "mountPath": dst}]}


def node_selector(job: EngineJob, pool: KubernetesPool) -> dict[str, str]:
    """The pool's node selector and, for a GPU type, the node label that names it."""
    selector = dict(pool.node_selector)
    if job.gpu_type:
        selector[pool.gpu_type_label] = job.gpu_type
    return selector


def scheduling(job: EngineJob, pool: KubernetesPool) -> dict[str, Any]:
    """Node selector (pool's, GPU type) and, for gpu_mem, an affinity on GPU memory."""
    out: dict[str, Any] = {}
    selector = node_selector(job, pool)
    if selector:
        out["nodeSelector"] = selector
    if job.gpu_mem is not None and job.gpus >= 1:
        mib = math.ceil(job.gpu_mem / 2**20)
        term = {"matchExpressions": [{"key": GPU_MEMORY_LABEL, "operator": "Gt",
                                      "values": [str(mib - 1)]}]}
        out["affinity"] = {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    return out


def pod_spec(job: EngineJob, pool: KubernetesPool, *, container: str,
             files_map: str | None) -> dict[str, Any]:
    """The pod of one node: the job's container, the model fetch, volumes, scheduling."""
    env_list = env(job, pool)
    vols, mounts = volumes(job, pool, files_map)
    main: dict[str, Any] = {"name": container, "image": image(job, pool), **command(job),
                            "env": env_list, "resources": resources(job, pool),
                            "volumeMounts": mounts}
    if job.cwd:
        main["workingDir"] = job.cwd  # not expanded by Kubernetes
    hook = stop_hook(job)
    if hook:
        main["lifecycle"] = hook
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [main], "volumes": vols,
                            "terminationGracePeriodSeconds": math.ceil(job.grace),
                            **scheduling(job, pool)}
    if job.model_uri:
        spec["initContainers"] = [fetch_container(job, image(job, pool), env_list)]
    if pool.service_account:
        spec["serviceAccountName"] = pool.service_account
    klass = pool.priority_class(job.priority)
    if klass:
        spec["priorityClassName"] = klass
    return spec
