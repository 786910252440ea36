"""What a Kubernetes pool cannot honour, each in a sentence a person can act on.

Read at submit (through the engine's ``refusal``) and again by :func:`manifests`, so an
option is refused or rendered, never silently dropped.
"""

from __future__ import annotations

import posixpath
import signal

from rota.backends.engine import EngineJob
from rota.backends.kubernetes import trainjob
from rota.pools import KubernetesPool

MLFLOW_SCHEMES = ("runs:/", "models:/", "mlflow-artifacts:")
S3_SCHEME = "s3://"
CONFIGMAP_LIMIT = 1024 * 1024  # bytes: the API server refuses a larger ConfigMap


def model_fetch_kind(uri: str) -> str | None:
    """``"mlflow"`` or ``"s3"``: how the init container fetches ``uri``; None: it cannot."""
    if uri.startswith(MLFLOW_SCHEMES):
        return "mlflow"
    if uri.startswith(S3_SCHEME) and len(uri) > len(S3_SCHEME):
        return "s3"
    return None


def refusal(job: EngineJob, pool: KubernetesPool) -> str | None:
    """Why ``pool`` cannot run ``job`` as asked; None when it can."""
    for check in (_gpus, _image, _conda, _nodes, _checkpoints, _model, _files, _signal,
                  _trainjob):
        reason = check(job, pool)
        if reason:
            return reason
    return None


def _gpus(job: EngineJob, pool: KubernetesPool) -> str | None:
    if job.gpus != int(job.gpus):
        return (f"Kubernetes gives whole GPUs only ({pool.gpu_resource} is an integer "
                f"resource): ask for {max(1, round(job.gpus))} GPU(s) instead of "
                f"{job.gpus:g}, or use a pool that shares GPUs (Ray)")
    if job.gpu_mem is not None and job.gpus < 1:
        # With whole GPUs, gpu_mem selects nodes by their GPUs' memory (see pod.py).
        return ("Kubernetes cannot reserve GPU memory: ask for whole GPUs (gpu_mem then "
                "picks nodes whose GPUs have that much memory), or drop gpu_mem")
    return None


def _image(job: EngineJob, pool: KubernetesPool) -> str | None:
    if job.image or pool.image:
        return None
    return ("a Kubernetes job runs in a container image: give the job an image (--image) "
            "or set `image` in the pool's settings")


def _conda(job: EngineJob, pool: KubernetesPool) -> str | None:
    if job.conda is None:
        return None
    return (f"conda environments are not available on Kubernetes pods (conda={job.conda!r}): "
            "build an image holding the environment and name it with --image")


def _nodes(job: EngineJob, pool: KubernetesPool) -> str | None:
    if job.nodes < 1:
        return f"nodes must be at least 1, not {job.nodes}"
    if job.nodes > 1 and not pool.checkpoint_claim:
        return (f"a {job.nodes}-node job needs a volume every node shares for its checkpoints: "
                "set `checkpoint_claim` (a ReadWriteMany PersistentVolumeClaim) in the "
                "pool's settings")
    return None


def _checkpoints(job: EngineJob, pool: KubernetesPool) -> str | None:
    if job.checkpoint_dir is None or pool.checkpoint_claim:
        return None
    return (f"checkpoints in {job.checkpoint_dir} would vanish with the pod, so a retry "
            "could not resume: set `checkpoint_claim` (a PersistentVolumeClaim) in the "
            "pool's settings")


def _model(job: EngineJob, pool: KubernetesPool) -> str | None:
    if job.model_uri is None or model_fetch_kind(job.model_uri):
        return None
    return (f"a pod cannot fetch the model {job.model_uri!r}: give an MLflow URI (runs:/, "
            "models:/, mlflow-artifacts:) or an s3:// URI; a path on this machine is not "
            "visible in the cluster")


def _files(job: EngineJob, pool: KubernetesPool) -> str | None:
    for path in job.files:
        if not posixpath.isabs(path):
            return f"the file {path!r} needs an absolute path inside the container"
    size = sum(len(text.encode()) for text in job.files.values())
    if size > CONFIGMAP_LIMIT:
        return (f"the job's files hold {size} bytes; a ConfigMap holds at most 1 MiB: "
                "put large files in the image or fetch them with the model")
    return None


def _signal(job: EngineJob, pool: KubernetesPool) -> str | None:
    name = job.stop_signal
    if name not in signal.Signals.__members__ or name in ("SIGKILL", "SIGSTOP"):
        return f"{name!r} is not a signal a job can catch (e.g. SIGTERM, SIGINT, SIGUSR1)"
    return None


def _trainjob(job: EngineJob, pool: KubernetesPool) -> str | None:
    if job.nodes < 2 or pool.multi_node != "trainjob":
        return None
    lacking = trainjob.gaps(job)
    klass = pool.priority_class(job.priority)
    if klass:  # not silently left out: the cluster would run it at its default priority
        lacking.append(f"the PriorityClass {klass} of priority {job.priority} (its pod "
                       "overrides have no priorityClassName)")
    if not lacking:
        return None
    return (f"this pool runs a {job.nodes}-node job as a Kubeflow TrainJob "
            f"(multi_node = \"trainjob\"), which cannot take {'; '.join(lacking)}: drop "
            f"{'it' if len(lacking) == 1 else 'them'}, or set multi_node = \"pytorchjob\" "
            "in the pool's settings")
