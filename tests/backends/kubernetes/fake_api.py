"""A small stateful Kubernetes API server on 127.0.0.1, built on the recorded answers, for
driving a Kubernetes pool through the whole daemon.

replay.py serves one recorded conversation request by request, in order. A daemon cannot be
driven through that: its poller, its log copier, the launch thread and `rota pools` ask in
an order that timing decides, and a poll is repeated as often as ``poll_every`` allows. So
this server keeps state instead: the Secrets, ConfigMaps and Jobs of one namespace, and each
Job's phase, which the test moves on (:meth:`FakeApi.advance`).

What it answers is recorded, not invented: every Job, PodList, Secret, ConfigMap and Status
it serves is an object of conversations/job.yaml (each taken from real published output,
sources cited there), with only its names, uids, Rota's own labels and annotations, and its
timestamps changed to this job's (so a pod shows the recording's image, busybox:1.36,
whatever image the Job names); the Secret's and ConfigMap's ``data`` are what was created,
as an API server stores them. Every answer is validated against the strict schemas
of schemas.py before it is sent. A pod's log is the text the test gives it.

What it checks: the token; the namespace; that each request is one the engine is meant to
make (method, path and exact query); and every Secret, ConfigMap and Job body the daemon
creates against the same strict schemas the render tests use (schemas.validate). Anything
else is answered 500 and kept in :attr:`FakeApi.errors`, so the test fails naming it.

Garbage collection, as the cluster's collector does it: a deleted Job, once its pods are
gone (:meth:`FakeApi.finish_deletion`), takes with it every Secret and ConfigMap whose
``ownerReferences`` name its uid.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml
from tests.backends.kubernetes.replay import HERE, TOKEN, ApiServer, Seen
from tests.backends.kubernetes.schemas import validate

Obj = dict[str, Any]

_DOC = yaml.safe_load((HERE / "job.yaml").read_text())
_OBJECTS: dict[str, Any] = _DOC["objects"]
_CONVERSATIONS: dict[str, list[Obj]] = _DOC["conversations"]
#: the recording's names and uids, changed to each job's own
_KEY = "rota-7-1"
_JOB_UID = "863452e6-270d-420e-9b94-53a54146c223"
_POD_UID = "0e7c2d0a-3b5f-4a3e-9c6e-8f1d2a4b5c6d"
_POD_SUFFIX = "-x7k2p"
_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
#: the recording's times, by the event each stands for (the Job's creation, its container's
#: start, its end, its deletion)
_EVENTS = (("2026-11-23T08:40:20Z", "created"), ("2026-11-23T08:40:31Z", "started"),
           ("2026-11-23T08:44:59Z", "ended"), ("9999", "deleted"))

#: a Job's phases: the recorded Job and PodList that show it
PHASES: dict[str, tuple[str, str]] = {
    "created": ("job_created", "pods_none"),
    "unschedulable": ("job_running", "pods_unschedulable"),
    "pulling": ("job_running", "pods_image_pull"),
    "running": ("job_running", "pods_running"),
    "complete": ("job_complete", "pods_succeeded"),
    "oomkilled": ("job_backoff", "pods_oomkilled"),
}
#: phases whose container has started (its log can be read)
_STARTED = ("running", "complete", "oomkilled")


def _response(conversation: str, index: int) -> Obj:
    return copy.deepcopy(_CONVERSATIONS[conversation][index]["response"]["body"])


def _stamp(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))




@dataclass
class FakeJob:
    """A Job the daemon created, as the fake cluster holds it."""

    name: str
    body: Obj  # as the daemon sent it
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    pod_uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    phase: str = "created"
    times: dict[str, float] = field(default_factory=dict)
    log: bytes = b""
    deleting: dict[str, str] | None = None  # the DELETE's query, once deleted

    @property
    def pod(self) -> str:
        return self.name + _POD_SUFFIX

    def adapt(self, obj: Any) -> Any:
        """A recorded object as this job's: names, uids, Rota's labels and annotations
        (``rota.dev/*``, from what the daemon sent), timestamps."""
        meta = self.body["metadata"]
        ours = {k: v for k, v in {**meta.get("labels", {}), **meta.get("annotations", {})
                                  }.items() if k.startswith("rota.dev/")}
        return _adapt(obj, self._names(), ours, self._time)

    def _names(self) -> dict[str, str]:
        return {_JOB_UID: self.uid, _POD_UID: self.pod_uid, _KEY: self.name}

    def _time(self, recorded: str) -> str:
        event = next(name for bound, name in _EVENTS if recorded <= bound)
        return _stamp(self.times.get(event) or self.times["created"])


def _adapt(obj: Any, names: dict[str, str], ours: dict[str, str],
           when: Callable[[str], str]) -> Any:
    if isinstance(obj, dict):
        return {k: ours[k] if k in ours and isinstance(v, str) else
                _adapt(v, names, ours, when) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_adapt(v, names, ours, when) for v in obj]
    if isinstance(obj, str):
        if _STAMP.fullmatch(obj):
            return when(obj)
        for old, new in names.items():
            obj = obj.replace(old, new)
    return obj


def _status(code: int, reason: str, message: str, **details: str) -> Obj:
    """The API's Status answer, shaped as the recorded ones are (job.yaml, S9)."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "details": details, "code": code}


class Mismatch(Exception):
    """A request the engine is not meant to make (answered 500, kept in errors)."""


class FakeApi:
    """See the module's docstring."""

    def __init__(self, namespace: str = "ml") -> None:
        self.namespace = namespace
        self.seen: list[Seen] = []
        self.errors: list[str] = []
        self.jobs: dict[str, FakeJob] = {}
        self.secrets: dict[str, Obj] = {}
        self.configmaps: dict[str, Obj] = {}
        self._lock = threading.RLock()
        self._valid: set[str] = set()  # answers already validated, as JSON
        #: called with each request once it is served, before its answer is sent (outside
        #: the lock): a test may hold an answer here, as a slow or lost network would
        self.before_answer: Callable[[Seen], None] | None = None
        self._server: ApiServer | None = None

    # ------------------------------------------------------------------ the server

    @property
    def url(self) -> str:
        assert self._server is not None
        return self._server.url

    def start(self) -> FakeApi:
        def answer(method: str, target: str, raw: bytes, auth: str,
                   kind: str) -> tuple[int, Any]:
            seen, status, body = self.answer(method, target, raw, auth, kind)
            hook = self.before_answer
            if hook is not None:
                hook(seen)
            return status, body

        self._server = ApiServer(answer).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    def answer(self, method: str, target: str, raw: bytes, auth: str,
               content_type: str) -> tuple[Seen, int, Any]:
        """The request as seen, and its answer's status and body."""
        url = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        with self._lock:
            seen = Seen(method, url.path, query, raw, content_type)
            self.seen.append(seen)
            try:
                if auth != f"Bearer {TOKEN}":
                    raise Mismatch(f"no token (Authorization: {auth!r})")
                status, body = self._route(seen)
                if isinstance(body, dict):
                    self._check_answer(body)
                return seen, status, body
            except Mismatch as exc:
                why = f"{method} {target}: {exc}"
                self.errors.append(why)
                return seen, 500, _status(500, "InternalError", f"fake API: {why}")

    def _check_answer(self, body: Obj) -> None:
        text = json.dumps(body, sort_keys=True)
        if text not in self._valid:
            try:
                validate(body)
            except Exception as exc:  # jsonschema's, kubernetes-validate's
                raise Mismatch(f"the fake's own answer is not valid: {exc}") from None
            self._valid.add(text)

    # ------------------------------------------------------------------ routes

    def _route(self, req: Seen) -> tuple[int, Any]:
        ns = re.escape(self.namespace)
        core, batch = f"/api/v1/namespaces/{ns}", f"/apis/batch/v1/namespaces/{ns}"
        routes: list[tuple[str, str, Any]] = [
            ("POST", rf"{core}/(secrets|configmaps)", self._create_core),
            ("PATCH", rf"{core}/(secrets|configmaps)/([^/]+)", self._patch_core),
            ("DELETE", rf"{core}/(secrets|configmaps)/([^/]+)", self._delete_core),
            ("POST", rf"{batch}/jobs", self._create_job),
            ("GET", rf"{batch}/jobs/([^/]+)", self._read_job),
            ("DELETE", rf"{batch}/jobs/([^/]+)", self._delete_job),
            ("GET", rf"/apis/(kubeflow\.org/v1|trainer\.kubeflow\.org/v1alpha1)/namespaces/"
                    rf"{ns}/(pytorchjobs|trainjobs)/([^/]+)", self._no_custom),
            ("GET", rf"{core}/pods", self._list_pods),
            ("GET", rf"{core}/pods/([^/]+)/log", self._read_log),
            ("GET", r"/api/v1/nodes", self._health(0)),
            ("GET", r"/api/v1/pods", self._health(1)),
        ]
        for method, pattern, handler in routes:
            match = re.fullmatch(pattern, req.path)
            if method == req.method and match:
                return handler(req, *match.groups())
        raise Mismatch("not a request the Kubernetes engine makes")

    @staticmethod
    def _query(req: Seen, *names: str) -> None:
        if sorted(req.query) != sorted(names):
            raise Mismatch(f"query {req.query} (expected exactly {sorted(names)})")

    def _body(self, req: Seen, kind: str) -> Obj:
        """A created object's body: of ``kind``, in the namespace, valid (strict)."""
        self._query(req)
        body = req.json()
        if not isinstance(body, dict) or body.get("kind") != kind:
            raise Mismatch(f"the body is not a {kind}: {str(body)[:200]}")
        if body["metadata"].get("namespace", self.namespace) != self.namespace:
            raise Mismatch(f"metadata.namespace {body['metadata']['namespace']!r}")
        try:
            validate(body)
        except Exception as exc:
            raise Mismatch(f"the {kind} is not valid: {exc}") from None
        return dict(body)

    def _create_core(self, req: Seen, plural: str) -> tuple[int, Any]:
        kind, store = (("Secret", self.secrets) if plural == "secrets"
                       else ("ConfigMap", self.configmaps))
        body = self._body(req, kind)
        name = body["metadata"]["name"]
        if name in store:
            return 409, _status(409, "AlreadyExists", f'{plural} "{name}" already exists',
                                name=name, kind=plural)
        recorded = _response("submit", 0 if kind == "Secret" else 1)
        meta = recorded["metadata"]
        meta.update(name=name, uid=str(uuid.uuid4()), creationTimestamp=_stamp(time.time()),
                    labels=dict(body["metadata"].get("labels") or {}))
        if kind == "Secret":
            recorded["data"] = {k: base64.b64encode(v.encode()).decode()
                                for k, v in (body.get("stringData") or {}).items()}
        else:
            recorded["data"] = dict(body.get("data") or {})
        store[name] = recorded
        return 201, recorded

    def _patch_core(self, req: Seen, plural: str, name: str) -> tuple[int, Any]:
        self._query(req)
        store = self.secrets if plural == "secrets" else self.configmaps
        if "merge-patch" not in req.content_type:  # strategic or plain: not a JSON patch
            raise Mismatch(f"Content-Type {req.content_type!r} (a merge patch expected)")
        patch = req.json()
        refs = ((patch or {}).get("metadata") or {}).get("ownerReferences")
        if set(patch) != {"metadata"} or set(patch["metadata"]) != {"ownerReferences"} \
                or not refs:
            raise Mismatch(f"a patch of more than the owner references: {patch}")
        if name not in store:
            return 404, _status(404, "NotFound", f'{plural} "{name}" not found', name=name,
                                kind=plural)
        store[name]["metadata"]["ownerReferences"] = refs
        return 200, store[name]

    def _delete_core(self, req: Seen, plural: str, name: str) -> tuple[int, Any]:
        self._query(req)
        store = self.secrets if plural == "secrets" else self.configmaps
        if store.pop(name, None) is None:
            return 404, _status(404, "NotFound", f'{plural} "{name}" not found', name=name,
                                kind=plural)
        done = _response("submit_forbidden", 2)
        done["details"] = {"name": name, "kind": plural}
        return 200, done

    def _create_job(self, req: Seen) -> tuple[int, Any]:
        body = self._body(req, "Job")
        meta = body["metadata"]
        name = meta["name"]
        if meta.get("labels", {}).get("rota.dev/key") != name:
            raise Mismatch(f"Job {name} lacks its label rota.dev/key={name}")
        if name in self.jobs:
            gone = _response("submit_again", 2)
            return 409, _adapt(gone, {_KEY: name}, {}, str)
        job = self.jobs[name] = FakeJob(name, body, times={"created": time.time()})
        return 201, job.adapt(_OBJECTS["job_created"])

    def _job(self, name: str) -> FakeJob | None:
        job = self.jobs.get(name)
        return None if job is None or job.phase == "gone" else job

    def _not_found(self, name: str) -> Obj:
        return dict(_adapt(_OBJECTS["not_found"], {_KEY: name}, {}, str))

    def _read_job(self, req: Seen, name: str) -> tuple[int, Any]:
        self._query(req)
        job = self._job(name)
        if job is None:
            return 404, self._not_found(name)
        if job.deleting is not None:  # the recorded Job being deleted (S10)
            return 200, job.adapt(_OBJECTS["job_deleting"])
        return 200, job.adapt(_OBJECTS[PHASES[job.phase][0]])

    def _delete_job(self, req: Seen, name: str) -> tuple[int, Any]:
        self._query(req, "gracePeriodSeconds", "propagationPolicy")
        job = self._job(name)
        if job is None:
            return 404, self._not_found(name)
        if job.deleting is None:
            job.deleting = dict(req.query)
            job.times["deleted"] = time.time()
        return 200, job.adapt(_OBJECTS["job_deleting"])

    @staticmethod
    def _no_custom(req: Seen, group: str, plural: str, name: str) -> tuple[int, Any]:
        FakeApi._query(req)
        return 404, _status(404, "NotFound",
                            f'{plural}.{group.split("/")[0]} "{name}" not found',
                            name=name, group=group.split("/")[0], kind=plural)

    def _list_pods(self, req: Seen) -> tuple[int, Any]:
        self._query(req, "labelSelector")
        label, _, key = req.query["labelSelector"].partition("=")
        if label != "rota.dev/key":
            raise Mismatch(f"labelSelector {req.query['labelSelector']!r}")
        job = self._job(key)
        if job is None:
            return 200, _OBJECTS["pods_none"]
        return 200, job.adapt(_OBJECTS[PHASES[job.phase][1]])

    def _read_log(self, req: Seen, pod: str) -> tuple[int, Any]:
        self._query(req, "container", "limitBytes")
        if req.query["container"] != "job":
            raise Mismatch(f"container {req.query['container']!r} (the Job's is 'job')")
        job = next((j for j in self.jobs.values() if j.pod == pod and j.phase != "gone"), None)
        if job is None:
            return 404, _status(404, "NotFound", f'pods "{pod}" not found', name=pod,
                                kind="pods")
        if job.phase not in _STARTED:
            return 400, _status(400, "BadRequest", f'container "job" in pod "{pod}" is '
                                "waiting to start: ContainerCreating")
        return 200, job.log[:int(req.query["limitBytes"])]

    def _health(self, index: int) -> Any:
        def answer(req: Seen) -> tuple[int, Any]:
            self._query(req, *(["fieldSelector"] if index else []))
            return 200, _response("health", index)
        return answer

    # ------------------------------------------------------------------ the test's side

    def advance(self, name: str, phase: str, log: bytes | None = None) -> None:
        """The Job ``name`` is now in ``phase`` (see PHASES); ``log``: its pod's whole
        log from now on."""
        assert phase in PHASES, phase
        with self._lock:
            job = self.jobs[name]
            now = time.time()
            if phase in _STARTED:
                job.times.setdefault("started", now)
            if phase in ("complete", "oomkilled"):
                job.times.setdefault("ended", now)
            job.phase = phase
            if log is not None:
                job.log = log

    def finish_deletion(self, name: str) -> None:
        """The deleted Job's pods are gone (their grace is over): the Job goes, and the
        garbage collector takes what it owns."""
        with self._lock:
            job = self.jobs[name]
            assert job.deleting is not None, f"{name} was not deleted"
            self._collect(job)

    def _collect(self, job: FakeJob) -> None:
        job.phase = "gone"
        for store in (self.secrets, self.configmaps):
            for name, obj in list(store.items()):
                if any(ref.get("uid") == job.uid
                       for ref in obj["metadata"].get("ownerReferences") or []):
                    del store[name]

    def owners(self, plural: str, name: str) -> list[Obj]:
        """The ownerReferences of the Secret or ConfigMap ``name`` ([] if none, or none such)."""
        with self._lock:
            obj = (self.secrets if plural == "secrets" else self.configmaps).get(name)
            return list(obj["metadata"].get("ownerReferences") or []) if obj else []

    def requests(self, method: str, path_end: str) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if s.method == method and s.path.endswith(path_end)]
