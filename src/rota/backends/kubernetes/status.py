"""What the API server's objects say about one attempt: pure functions over the JSON of a
Job, PyTorchJob or TrainJob and its pods (as ``kubectl get -o json`` shows them), no client needed.

Reasons are Kubernetes' own words: the scheduler's message on an unschedulable pod ("0/3
nodes are available: 3 Insufficient nvidia.com/gpu."), a container's waiting reason
(ImagePullBackOff), a Job condition's reason and message (DeadlineExceeded: Job was active
longer than specified deadline), a container's termination reason (OOMKilled).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from rota.backends.engine import EngineState, EngineStatus, PoolHealth
from rota.backends.kubernetes import trainjob

Obj = dict[str, Any]

#: the training operator's label on each pod: its replica type, lower-cased
REPLICA_TYPE = "training.kubeflow.org/replica-type"
#: waiting reasons of a container that is simply on its way
_ON_ITS_WAY = ("ContainerCreating", "PodInitializing")
_QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")
_SUFFIX = {"": 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2.0**10, "Mi": 2.0**20,
           "Gi": 2.0**30}


def seconds(stamp: object) -> float | None:
    """An RFC 3339 time of the API (``2022-06-15T08:40:15Z``) as epoch seconds."""
    if not isinstance(stamp, str) or not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def true_conditions(obj: Obj) -> dict[str, Obj]:
    """The object's conditions whose status is "True", by type."""
    conds = (obj.get("status") or {}).get("conditions") or []
    return {c["type"]: c for c in conds if c.get("status") == "True"}


def _words(cond: Obj) -> str:
    reason, message = cond.get("reason"), cond.get("message")
    return f"{reason}: {message}" if reason and message else str(reason or message or cond["type"])


# ------------------------------------------------------------------------------ pods


def _created(pod: Obj) -> str:
    return str(pod["metadata"].get("creationTimestamp") or "")


def newest(pods: list[Obj]) -> Obj | None:
    return max(pods, key=_created) if pods else None


def master(pods: list[Obj]) -> Obj | None:
    """A PyTorchJob's Master pod (the one whose log is the job's)."""
    masters = [p for p in pods if p["metadata"].get("labels", {}).get(REPLICA_TYPE) == "master"]
    return newest(masters)


def node0(pods: list[Obj]) -> Obj | None:
    """A TrainJob's first node (completion index 0: PET_NODE_RANK 0, torchrun's master),
    by the Job controller's label, else its annotation (the label came in 1.28)."""
    def index(pod: Obj) -> object:
        meta = pod["metadata"]
        return ((meta.get("labels") or {}).get(trainjob.COMPLETION_INDEX)
                or (meta.get("annotations") or {}).get(trainjob.COMPLETION_INDEX))
    return newest([p for p in pods if index(p) == "0"])


def nodes(pods: list[Obj]) -> tuple[str, ...]:
    return tuple(sorted({p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}))


def container_status(pod: Obj, container: str) -> Obj:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == container:
            return dict(cs)
    return {}


def terminated(pod: Obj, container: str) -> Obj | None:
    """How the container ended (its state, else its last state); None while it has not."""
    cs = container_status(pod, container)
    for where in ("state", "lastState"):
        ended = (cs.get(where) or {}).get("terminated")
        if ended:
            return dict(ended)
    return None


def pending_reason(pod: Obj) -> str:
    """Why a pod is not running yet, in Kubernetes' words."""
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("message") or cond.get("reason") or "not scheduled yet")
    inits = status.get("initContainerStatuses") or []
    for cs in inits + (status.get("containerStatuses") or []):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting and waiting.get("reason") not in _ON_ITS_WAY:
            return _words({"type": "Waiting", **waiting})
    for cs in inits:  # e.g. fetch-model, still fetching
        if (cs.get("state") or {}).get("running"):
            return f"init container {cs.get('name')} is running"
    node = pod["spec"].get("nodeName")
    return f"scheduled on {node}, starting its containers" if node else "not scheduled yet"


def _exit(pod: Obj | None, container: str, default: int | None
          ) -> tuple[int | None, int | None, str | None]:
    """Exit code, signal and the container's termination reason (OOMKilled kept)."""
    ended = terminated(pod, container) if pod else None
    if not ended:
        return default, None, None
    code, sig = ended.get("exitCode"), ended.get("signal")
    reason = ended.get("reason")
    how = f"container {container}: {reason} (exit code {code})" if reason else None
    return (None, int(sig), how) if sig else (code, None, how)


# ------------------------------------------------------------------------------ workloads


def job_status(eid: str, job: Obj, pods: list[Obj], container: str) -> EngineStatus:
    """A batch/v1 Job and its pods as an EngineStatus."""
    status = job.get("status") or {}
    conds = true_conditions(job)
    pod = newest(pods)
    started, where = seconds(status.get("startTime")), nodes(pods)
    end = conds.get("Failed") or conds.get("Complete")
    if end is not None:
        return _ended(eid, job, end, pod, container, pods)
    if (job.get("spec") or {}).get("suspend") and not status.get("active"):
        why = _words(conds["Suspended"]) if "Suspended" in conds else "Suspended"
        return EngineStatus(eid, EngineState.QUEUED,
                            reason=f"{why} (waiting to be admitted, e.g. by Kueue)")
    return _by_pod(eid, pod, container, started, where)


def _ended(eid: str, workload: Obj, end: Obj, pod: Obj | None, container: str,
           pods: list[Obj]) -> EngineStatus:
    """``end``: the workload's true Complete/Succeeded or Failed condition; ``pod``: the
    one whose main container's exit is the job's."""
    status = workload.get("status") or {}
    ok = end["type"] != "Failed"
    code, sig, how = _exit(pod, container, 0 if ok else None)
    reason = end["type"] if ok else _words(end)
    return EngineStatus(eid, EngineState.ENDED, reason=f"{reason}; {how}" if how else reason,
                        started_at=seconds(status.get("startTime")), exit_code=code,
                        signal=sig, nodes=nodes(pods),
                        ended_at=seconds(status.get("completionTime"))
                        or seconds(end.get("lastTransitionTime")))


def _by_pod(eid: str, pod: Obj | None, container: str, started: float | None,
            where: tuple[str, ...]) -> EngineStatus:
    """Not ended: running once its pod runs, else queued with the pod's reason."""
    if pod is None:
        return EngineStatus(eid, EngineState.QUEUED, reason="no pod created yet")
    if (pod.get("status") or {}).get("phase") == "Pending":
        return EngineStatus(eid, EngineState.QUEUED, reason=pending_reason(pod), nodes=where)
    running = (container_status(pod, container).get("state") or {}).get("running") or {}
    return EngineStatus(eid, EngineState.RUNNING, nodes=where,
                        started_at=seconds(running.get("startedAt")) or started)


def pytorchjob_status(eid: str, job: Obj, pods: list[Obj], container: str) -> EngineStatus:
    """A Kubeflow PyTorchJob (its conditions) and its pods as an EngineStatus."""
    status = job.get("status") or {}
    conds = true_conditions(job)
    started, where = seconds(status.get("startTime")), nodes(pods)
    end = conds.get("Failed") or conds.get("Succeeded")
    if end is not None:
        pod = _lead(pods, container, end["type"] != "Failed", master)
        return _ended(eid, job, end, pod, container, pods)
    if "Suspended" in conds:
        return EngineStatus(eid, EngineState.QUEUED, reason=_words(conds["Suspended"]))
    if "Running" in conds or "Restarting" in conds:
        return EngineStatus(eid, EngineState.RUNNING, started_at=started, nodes=where)
    waiting = [p for p in pods if (p.get("status") or {}).get("phase") == "Pending"]
    reason = (pending_reason(waiting[0]) if waiting
              else _words(conds["Created"]) if "Created" in conds
              else "waiting for the training operator to create its pods")
    return EngineStatus(eid, EngineState.QUEUED, reason=reason, nodes=where)


def _lead(pods: list[Obj], container: str, ok: bool,
          first: Callable[[list[Obj]], Obj | None]) -> Obj | None:
    """The pod whose exit is the job's: ``first`` of them (the master, node 0), or, when
    the job failed, the first of those whose ``container`` exited non-zero."""
    failed = [p for p in pods if (terminated(p, container) or {}).get("exitCode")]
    return (first(failed) or newest(failed)) if not ok and failed else first(pods)


def trainjob_status(eid: str, job: Obj, pods: list[Obj], container: str) -> EngineStatus:
    """A Kubeflow TrainJob and its trainer pods. Its conditions (Trainer v2.0) are
    Suspended, and Complete or Failed copied from its JobSet's; it has no Running
    condition and no times, so it runs once every node's pod runs, from the last start."""
    conds, where = true_conditions(job), nodes(pods)
    end = conds.get("Failed") or conds.get("Complete")
    if end is not None:
        got = _ended(eid, job, end, _lead(pods, container, end["type"] != "Failed", node0),
                     container, pods)
        return replace(got, started_at=_last_start(pods, container))
    if "Suspended" in conds:
        return EngineStatus(eid, EngineState.QUEUED,
                            reason=f"{_words(conds['Suspended'])} (waiting to be admitted, "
                                   "e.g. by Kueue)")
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    waiting = [p for p in live if (p.get("status") or {}).get("phase") == "Pending"]
    want = int(((job.get("spec") or {}).get("trainer") or {}).get("numNodes") or 1)
    if waiting or len(live) < want:
        reason = (pending_reason(node0(waiting) or waiting[0]) if waiting
                  else f"{len(live)} of {want} node pods created")
        return EngineStatus(eid, EngineState.QUEUED, reason=reason, nodes=where)
    return EngineStatus(eid, EngineState.RUNNING, nodes=where,
                        started_at=_last_start(live, container))


def _last_start(pods: list[Obj], container: str) -> float | None:
    """When the last node's ``container`` started (running, or ended since)."""
    starts = []
    for pod in pods:
        state = container_status(pod, container).get("state") or {}
        began = (state.get("running") or state.get("terminated") or {}).get("startedAt")
        if began:
            starts.append(seconds(began))
    return max((s for s in starts if s is not None), default=None)


# ------------------------------------------------------------------------------ health


def quantity(text: object) -> float:
    """A resource quantity ("8", "500m", "4Gi") as a number."""
    found = _QUANTITY.match(str(text or "0"))
    if not found or found.group(2) not in _SUFFIX:
        raise ValueError(f"not a quantity Rota reads: {text!r}")
    return float(found.group(1)) * _SUFFIX[found.group(2)]


def gpus_requested(pod: Obj, resource: str) -> float:
    """GPUs a placed pod holds: its containers' requests (an extended resource's request
    is its limit), init containers at most their largest, as the scheduler counts."""
    def asked(c: Obj) -> float:
        res = c.get("resources") or {}
        return quantity((res.get("requests") or res.get("limits") or {}).get(resource, 0))
    spec = pod["spec"]
    main = sum(asked(c) for c in spec.get("containers") or [])
    init = max((asked(c) for c in spec.get("initContainers") or []), default=0.0)
    return max(main, init)


def cluster_health(node_list: Obj, pod_list: Obj | None, resource: str) -> PoolHealth:
    """Nodes and GPUs (allocatable ``resource``); free ones when the pods could be read."""
    items = node_list.get("items") or []
    total = sum(quantity((n.get("status") or {}).get("allocatable", {}).get(resource, 0))
                for n in items)
    free = None
    if pod_list is not None:
        placed = [p for p in pod_list.get("items") or [] if p["spec"].get("nodeName")]
        free = max(0.0, total - sum(gpus_requested(p, resource) for p in placed))
    gpus = f"{free:g}/{total:g}" if free is not None else f"?/{total:g}"
    return PoolHealth(reachable=True, nodes=len(items), gpus_total=total, gpus_free=free,
                      message=f"{len(items)} node(s), {gpus} GPUs ({resource}) free")
