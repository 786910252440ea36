"""The Kubernetes engine: the API server, through the official ``kubernetes`` client.

The client (an optional extra: ``pip install 'rota[kubernetes]'``) is imported here only,
on the first call that talks to the API server; its errors (ApiException, urllib3's) become
BackendError at :meth:`KubernetesEngine._call`, with the API server's own message. Every
request has a timeout. Answers are read as the API's JSON (``_preload_content=False``), the
same objects ``kubectl get -o json`` prints.

Engine id: ``job/<key>`` (a batch/v1 Job), ``pytorchjob/<key>`` (a Kubeflow PyTorchJob) or
``trainjob/<key>`` (a Kubeflow Trainer v2 TrainJob); the workload's name is the attempt's
key. The pods of a Job or PyTorchJob carry ``rota.dev/key``; a TrainJob's are made by its
runtime's JobSet and are found by the JobSet's labels (trainjob.py).

Submit, in order: the attempt's Secret (``<key>-secrets``, values from the secrets
callable, only in that request's body), the files' ConfigMap, then the workload. A second
create of the same name is refused (409 AlreadyExists): the attempt reached the cluster
before, and submit answers that workload's id, never creating it twice. The Secret and the
ConfigMap are then given an owner reference to the workload, so the garbage collector
deletes them with it (after ``ttlSecondsAfterFinished``, or a stop). ``find`` (asked after a
crash, which may have come before that patch) gives them their owner again.

Stop: DELETE of the workload with ``propagationPolicy=Foreground`` and
``gracePeriodSeconds=ceil(grace)``: each pod gets SIGTERM on its containers' PID 1 (the
preStop hook of pod.py sends another stop signal first), SIGKILL after the grace. The
workload stays visible (RUNNING) until its pods are gone; then it is LOST, as an attempt
ended by a stop reads.

Logs: the API returns a container's log from its start on every request; ``read_log``
asks for ``offset + 8 MiB`` bytes (``limitBytes``) and slices, so a long log costs its full
size on the wire at each read (see docs/pools-kubernetes.md).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from typing import Any

from rota.backends.engine import (
    EngineCapabilities,
    EngineJob,
    EngineState,
    EngineStatus,
    PoolHealth,
)
from rota.backends.kubernetes import pod, render, status, trainjob
from rota.backends.kubernetes.refusal import refusal
from rota.errors import BackendError
from rota.pools import KubernetesPool

log = logging.getLogger(__name__)

CAPABILITIES = EngineCapabilities(multi_node=True, images=True)
JOB, PYTORCHJOB, TRAINJOB = "job", "pytorchjob", "trainjob"
#: the custom resources' (group, version, plural)
_CUSTOM = {PYTORCHJOB: ("kubeflow.org", "v1", "pytorchjobs"),
           TRAINJOB: (trainjob.GROUP, trainjob.VERSION, trainjob.PLURAL)}
KEY_LABEL = "rota.dev/key"
LOG_READ_MAX = 8 * 1024 * 1024
_CONTAINER = {JOB: render.JOB_CONTAINER, PYTORCHJOB: render.PYTORCH_CONTAINER,
              TRAINJOB: trainjob.NODE}
_KIND = {JOB: "Job", PYTORCHJOB: "PyTorchJob", TRAINJOB: "TrainJob"}
_API_VERSION = {JOB: "batch/v1", PYTORCHJOB: "kubeflow.org/v1", TRAINJOB: trainjob.API_VERSION}
_STATUS = {JOB: status.job_status, PYTORCHJOB: status.pytorchjob_status,
           TRAINJOB: status.trainjob_status}
#: the pod whose log is the job's
_LOG_POD = {JOB: status.newest, PYTORCHJOB: status.master, TRAINJOB: status.node0}
_LOST = "Kubernetes no longer has this {kind} (deleted: by a stop, its TTL, or a person)"


class KubernetesEngine:
    """The :class:`rota.backends.engine.Engine` for a Kubernetes cluster."""

    name = "kubernetes"
    capabilities = CAPABILITIES

    def __init__(self, pool: KubernetesPool, *,
                 secrets: Callable[[str], str] | None = None, timeout: float = 30.0) -> None:
        """``secrets``: a secret's value by its name (raises KeyError); None: a pool that
        cannot fill secrets (jobs that name some are refused)."""
        self.pool = pool
        self.timeout = timeout
        self._secrets = secrets
        self._client: Any = None  # kubernetes.client.ApiClient, made on first use

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    # ------------------------------------------------------------------ translation

    def refusal(self, job: EngineJob) -> str | None:
        if job.secret_env and self._secrets is None:
            return "this Kubernetes pool was given no way to read secret values"
        return refusal(job, self.pool)

    def render(self, job: EngineJob) -> str:
        return render.render_yaml(job, self.pool)

    # ------------------------------------------------------------------ submit and find

    def submit(self, job: EngineJob) -> str:
        reason = self.refusal(job)
        if reason:
            raise BackendError(f"job {job.job_id}: {reason}")
        *extras, work = render.manifests(job, self.pool)
        kind = next(k for k, name in _KIND.items() if name == work["kind"])
        owned: list[tuple[str, str]] = []  # (core kind, name): what the workload will own
        made_secret = False
        if job.secret_env:
            made_secret = self._create_core("secret", self._secret(job))
            owned.append(("secret", pod.secret_name(job)))
        for extra in extras:  # the files' ConfigMap
            self._create_core("config_map", extra)
            owned.append(("config_map", extra["metadata"]["name"]))
        try:
            created = self._create_workload(kind, work)
        except BackendError:
            if made_secret:  # the values must not outlive a workload that never was
                self._delete_core("secret", pod.secret_name(job))
            raise
        if created is None:
            log.info("kubernetes: %s/%s was created before; following it", kind, job.key)
            created = self._read(kind, job.key)
        if created is not None:
            self._own(owned, kind, created)
        return f"{kind}/{job.key}"

    def _secret(self, job: EngineJob) -> dict[str, Any]:
        assert self._secrets is not None  # refusal() said so otherwise
        values: dict[str, str] = {}
        for var, name in job.secret_env.items():
            try:
                values[var] = self._secrets(name)
            except KeyError:
                raise BackendError(f"job {job.job_id}: no secret named {name!r}") from None
        return render.secret_manifest(job, values, self.pool)

    def find(self, key: str) -> str | None:
        """Every kind, the pool's multi-node form first: an attempt handed over before
        the pool's ``multi_node`` changed is found all the same, never made twice.

        Found, the workload is made the owner of the attempt's Secret and ConfigMap (those
        that exist; again, if submit did it): the daemon asks after a crash, which may have
        come between their create and submit's owner patch, and unowned they would outlive
        the workload, the Secret's values with them."""
        first = TRAINJOB if self.pool.multi_node == "trainjob" else PYTORCHJOB
        for kind in (JOB, first, *(k for k in _CUSTOM if k != first)):
            found = self._read(kind, key)
            if found is not None:
                self._own([("secret", pod.secret_name_of(key)),
                           ("config_map", pod.files_name_of(key))], kind, found, absent=(404,))
                return f"{kind}/{key}"
        return None

    # ------------------------------------------------------------------ poll

    def poll(self, engine_ids: list[str]) -> dict[str, EngineStatus]:
        return {eid: self._status(eid) for eid in engine_ids}

    def _status(self, eid: str) -> EngineStatus:
        kind, name = _split(eid)
        obj = self._read(kind, name) if kind else None
        if obj is None:
            return EngineStatus(eid, EngineState.LOST, reason=_LOST.format(kind=kind or "job"))
        pods = self._pods(kind, name)
        got = _STATUS[kind](eid, obj, pods, _CONTAINER[kind])
        if obj["metadata"].get("deletionTimestamp") and got.state is not EngineState.ENDED:
            return EngineStatus(eid, got.state, reason="being deleted (stopping)",
                                started_at=got.started_at, nodes=got.nodes)
        return got

    def _pods(self, kind: str, key: str) -> list[dict[str, Any]]:
        selector = trainjob.pod_selector(key) if kind == TRAINJOB else f"{KEY_LABEL}={key}"
        listing = self._call(f"list the pods of {key}", self._core().list_namespaced_pod,
                             self.pool.namespace, label_selector=selector)
        return list(listing["items"]) if listing else []

    # ------------------------------------------------------------------ stop and logs

    def stop(self, engine_id: str, signal: str, grace: float) -> None:
        """Delete the workload (see the module's docstring). ``signal`` was fixed at
        submit (SIGTERM, or the preStop hook's); a workload already gone is left so."""
        kind, name = _split(engine_id)
        if not kind:
            return
        grace_s, policy = max(0, math.ceil(grace)), "Foreground"
        what = f"delete {kind} {name}"
        if kind == JOB:
            self._call(what, self._batch().delete_namespaced_job, name, self.pool.namespace,
                       absent=(404,), grace_period_seconds=grace_s, propagation_policy=policy)
        else:
            group, version, plural = _CUSTOM[kind]
            self._call(what, self._custom().delete_namespaced_custom_object, group, version,
                       self.pool.namespace, plural, name, absent=(404,),
                       grace_period_seconds=grace_s, propagation_policy=policy)

    def read_log(self, engine_id: str, offset: int) -> bytes:
        kind, name = _split(engine_id)
        pods = self._pods(kind, name) if kind else []
        target = _LOG_POD[kind](pods) if kind else None
        if target is None:
            return b""
        start = max(0, offset)
        # 400: the container has not started yet (nothing to read); 404: the pod is gone
        data = self._call(f"read the log of pod {target['metadata']['name']}",
                          self._core().read_namespaced_pod_log, target["metadata"]["name"],
                          self.pool.namespace, container=_CONTAINER[kind],
                          limit_bytes=start + LOG_READ_MAX, absent=(400, 404), raw=True)
        return bytes(data or b"")[start:start + LOG_READ_MAX]

    # ------------------------------------------------------------------ health

    def health(self) -> PoolHealth:
        try:
            nodes = self._call("list nodes", self._core().list_node)
            pods = self._call("list the pods that hold GPUs",
                              self._core().list_pod_for_all_namespaces,
                              field_selector="status.phase!=Succeeded,status.phase!=Failed",
                              absent=(403,))  # a namespaced account: free GPUs unknown
            return status.cluster_health(nodes or {}, pods, self.pool.gpu_resource)
        except (BackendError, ValueError, KeyError, TypeError) as exc:
            return PoolHealth(reachable=False, message=str(exc))

    # ------------------------------------------------------------------ the API

    def _create_core(self, kind: str, body: dict[str, Any]) -> bool:
        """Create a Secret or ConfigMap; False when it exists (an earlier try of this
        attempt made it)."""
        create = getattr(self._core(), f"create_namespaced_{kind}")
        what = f"create the {kind.replace('_', '')} {body['metadata']['name']}"
        return self._call(what, create, self.pool.namespace, body, absent=(409,)) is not None

    def _delete_core(self, kind: str, name: str) -> None:
        try:
            self._call(f"delete the {kind} {name}",
                       getattr(self._core(), f"delete_namespaced_{kind}"), name,
                       self.pool.namespace, absent=(404,))
        except BackendError as exc:
            log.warning("kubernetes: %s; delete it by hand", exc)

    def _create_workload(self, kind: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """The created workload; None when one of that name exists (409)."""
        what = f"create {kind} {body['metadata']['name']}"
        if kind == JOB:
            return self._call(what, self._batch().create_namespaced_job, self.pool.namespace,
                              body, absent=(409,))
        group, version, plural = _CUSTOM[kind]
        return self._call(what, self._custom().create_namespaced_custom_object, group,
                          version, self.pool.namespace, plural, body, absent=(409,))

    def _read(self, kind: str, name: str) -> dict[str, Any] | None:
        what = f"read {kind} {name}"
        if kind == JOB:
            return self._call(what, self._batch().read_namespaced_job, name,
                              self.pool.namespace, absent=(404,))
        # 404 also when the cluster has no such kind: then no such job either
        group, version, plural = _CUSTOM[kind]
        return self._call(what, self._custom().get_namespaced_custom_object, group, version,
                          self.pool.namespace, plural, name, absent=(404,))

    def _own(self, owned: list[tuple[str, str]], kind: str, workload: dict[str, Any], *,
             absent: tuple[int, ...] = ()) -> None:
        """Make the workload the owner of its Secret and ConfigMap (garbage collection);
        ``absent``: the answers that mean there is no such object (nothing to own)."""
        meta = workload["metadata"]
        ref = {"apiVersion": _API_VERSION[kind], "kind": _KIND[kind], "name": meta["name"],
               "uid": meta["uid"]}
        for core_kind, name in owned:
            patch = getattr(self._core(), f"patch_namespaced_{core_kind}")
            try:
                self._call(f"give the {core_kind} {name} its owner", patch, name,
                           self.pool.namespace, {"metadata": {"ownerReferences": [ref]}},
                           absent=absent)
            except BackendError as exc:  # the job runs; only the clean-up is lost
                log.warning("kubernetes: %s; delete it by hand after the job", exc)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any,
              absent: tuple[int, ...] = (), raw: bool = False, **kw: Any) -> Any:
        """``fn(*args, **kw)`` with the timeout: the answer's JSON (its bytes when
        ``raw``), None when the API answered a status in ``absent``; else BackendError in
        the API server's words."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        try:
            resp = fn(*args, _request_timeout=self.timeout, _preload_content=False, **kw)
        except ApiException as exc:
            if exc.status in absent:
                return None
            raise BackendError(f"the Kubernetes API server at {self._host()} answered "
                               f"{exc.status} to '{what}': {_api_words(exc)}") from None
        except urllib3.exceptions.HTTPError as exc:
            cause = getattr(exc, "reason", None) or exc
            raise BackendError(f"cannot reach the Kubernetes API server at {self._host()} "
                               f"to {what}: {cause}") from None
        data = resp.data
        return data if raw else json.loads(data)

    def _host(self) -> str:
        return str(self._client.configuration.host) if self._client else "?"

    def _api_client(self) -> Any:
        if self._client is None:
            self._client = new_client(self.pool)
        return self._client

    def _core(self) -> Any:
        return _sdk().CoreV1Api(self._api_client())

    def _batch(self) -> Any:
        return _sdk().BatchV1Api(self._api_client())

    def _custom(self) -> Any:
        return _sdk().CustomObjectsApi(self._api_client())


#: what a pool says where the client is missing (health, a submit, a render)
NOT_INSTALLED = ("the Kubernetes client is not installed where the daemon runs: "
                 "pip install 'rota[kubernetes]'")


def _sdk() -> Any:
    """The ``kubernetes.client`` module; BackendError saying how to install it."""
    try:
        from kubernetes import client
    except ImportError as exc:
        raise BackendError(NOT_INSTALLED) from exc
    return client


def new_client(pool: KubernetesPool) -> Any:
    """An ApiClient for the pool: its kubeconfig and context (None: $KUBECONFIG or
    ~/.kube/config, and its current context), else the in-cluster service account."""
    client = _sdk()
    from kubernetes import config

    try:
        return config.new_client_from_config(config_file=pool.kubeconfig, context=pool.context,
                                             persist_config=False)
    except (config.ConfigException, OSError, ValueError, TypeError) as exc:
        if pool.kubeconfig is None and pool.context is None:
            try:
                conf = client.Configuration()
                config.load_incluster_config(client_configuration=conf)
                return client.ApiClient(conf)
            except config.ConfigException:
                pass
        raise BackendError(f"cannot load the kubeconfig {pool.kubeconfig or '(default)'}"
                           f"{f' (context {pool.context})' if pool.context else ''}: "
                           f"{exc}") from None


def _split(eid: str) -> tuple[str, str]:
    """``job/NAME`` -> (kind, name); an id of no known kind -> ("", id)."""
    kind, _, name = eid.partition("/")
    return (kind, name) if kind in _CONTAINER and name else ("", eid)


def _api_words(exc: Any) -> str:
    """The message of the API server's Status answer, else its HTTP reason."""
    try:
        body = json.loads(exc.body or "")
        return str(body.get("message") or body)[:2000]
    except (ValueError, AttributeError):
        return str(exc.reason or f"HTTP {exc.status}")[:2000]
