"""What Rota knows of a Kubeflow Trainer v2 TrainJob, the second multi-node form.

The names are those of Trainer v2.0 (``pkg/constants/constants.go`` at tag v2.0.0): the
``torch-distributed`` ClusterTrainingRuntime runs one JobSet (named as the TrainJob) whose
replicated Job ``node`` is an Indexed Job of ``numNodes`` pods, its container ``node``.
The pods carry the JobSet's labels (sigs.k8s.io/jobset v0.8, ``labelAndAnnotateObject``)
and the Job controller's completion index; the Trainer's own SDK finds them the same way.
"""

from __future__ import annotations

import math

from rota.backends.engine import EngineJob

GROUP, VERSION, PLURAL = "trainer.kubeflow.org", "v1alpha1", "trainjobs"
API_VERSION = f"{GROUP}/{VERSION}"
RUNTIME_KIND = "ClusterTrainingRuntime"
NODE = "node"  # the runtime's replicated Job and its trainer container
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # label (1.28+), annotation
#: what the Trainer sets for torchrun; its webhook refuses a TrainJob that sets one
TORCHRUN_ENV = frozenset({"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK",
                          "PET_MASTER_ADDR", "PET_MASTER_PORT"})
#: the pods' termination grace: a TrainJob cannot set it, so it is the runtime's
#: (Kubernetes' default when the runtime sets none, as torch-distributed does)
RUNTIME_GRACE = 30
_POD_NAME_MAX = 63  # JobSet refuses pod names longer than a DNS-1035 label


def pod_selector(key: str) -> str:
    """The label selector of a TrainJob's trainer pods (not its initializers')."""
    return f"{JOBSET_NAME}={key},{REPLICATED_JOB}={NODE}"


def gaps(job: EngineJob) -> list[str]:
    """What ``job`` asks that a TrainJob cannot express, each with why; [] when none."""
    out: list[str] = []
    if job.cwd:
        out.append(f"cwd={job.cwd!r} (its pod overrides have no workingDir)")
    if job.gpu_mem is not None:
        out.append("gpu_mem (its pod overrides have no node affinity)")
    if job.model_uri:
        out.append("a model to fetch (its pod overrides cannot add an init container)")
    if job.stop_signal != "SIGTERM":
        out.append(f"stop_signal={job.stop_signal} (its pod overrides have no preStop hook: "
                   "the pods get SIGTERM)")
    if math.ceil(job.grace) != RUNTIME_GRACE:
        out.append(f"grace={job.grace:g}s (the pods keep the runtime's termination grace, "
                   f"{RUNTIME_GRACE} s unless the runtime sets one)")
    reserved = sorted(TORCHRUN_ENV & (set(job.env) | set(job.secret_env)))
    if reserved:
        out.append(f"{', '.join(reserved)} in its env (the Trainer sets them for torchrun)")
    longest = f"{job.key}-{NODE}-0-{job.nodes - 1}-xxxxx"  # JobSet's pod names
    if len(longest) > _POD_NAME_MAX:
        out.append(f"{job.nodes} nodes of key {job.key} (pod names such as {longest} pass "
                   f"{_POD_NAME_MAX} characters)")
    return out
