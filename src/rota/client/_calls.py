"""Each SDK method as data: which request to send and how to read the answer.

No I/O here, so :class:`rota.Client` and :class:`rota.AsyncClient` build the same requests
and read the same answers; they differ only in how they send them.
"""

from __future__ import annotations

import json
import operator
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Generic, TypeVar

from pydantic import TypeAdapter

from rota.answers import QuotaAnswer
from rota.client import _times as log_times
from rota.client._times import When
from rota.client.models import (
    Alert,
    Checkpoints,
    EvalRun,
    EvalSchedule,
    Event,
    Gpu,
    Health,
    Identity,
    Job,
    JobDetail,
    JobState,
    LogChunk,
    Metrics,
    Page,
    Pipeline,
    PipelineDetail,
    Priority,
    QueuePage,
    Report,
    Shares,
    Tier,
    Why,
)
from rota.core.report import report_time
from rota.errors import DaemonUnavailable, InvalidSpec, NotFound

T = TypeVar("T")

#: A job id, or a job the SDK returned.
JobRef = int | Job
#: One state or several to list.
States = str | JobState | Sequence[str | JobState] | None

#: Seconds the daemon holds one long poll of ``wait`` before answering "not yet".
WAIT_STEP = 60.0
#: Extra seconds a long poll may take on the wire beyond what the daemon was asked to hold.
WAIT_SLACK = 30.0

_JOBS = TypeAdapter(list[Job])
_EVENTS = TypeAdapter(list[Event])
_GPUS = TypeAdapter(list[Gpu])
_TIERS = TypeAdapter(list[Tier])
_EVAL_RUNS = TypeAdapter(list[EvalRun])
_EVAL_SCHEDULES = TypeAdapter(list[EvalSchedule])
_PIPELINES = TypeAdapter(list[Pipeline])
_ALERTS = TypeAdapter(list[Alert])


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and the function that turns its JSON answer into the method's result."""

    method: str
    path: str
    parse: Callable[[Any], T]
    params: dict[str, Any] | None = None
    json: Any = None
    extra: dict[str, Any] = field(default_factory=dict)

    def kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = dict(self.extra)
        if self.params is not None:
            kw["params"] = self.params
        if self.json is not None:
            kw["json"] = self.json
        return kw


def job_id(ref: JobRef) -> int:
    """The integer id (only an integer ever reaches a URL path)."""
    jid = ref.id if isinstance(ref, Job) else ref
    if isinstance(jid, bool):
        raise TypeError("a job id is an int, not a bool")
    return operator.index(jid)


def _jobs_path(ref: JobRef, tail: str = "") -> str:
    return f"/v1/jobs/{job_id(ref)}{tail}"


# --- jobs ----------------------------------------------------------------------------------

def submit_body(spec: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
                fields: Mapping[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """The specs to send and whether the caller gave one (so gets one job back)."""
    if spec is None:
        if not fields:
            raise TypeError("submit() needs a spec dict, a list of them, or fields "
                            "such as command=[...]")
        return [dict(fields)], True
    if isinstance(spec, Mapping):
        return [{**spec, **fields}], True
    if isinstance(spec, str | bytes) or not isinstance(spec, Sequence):
        raise TypeError("submit() takes a spec dict or a list of spec dicts; "
                        "for a command use submit(command=[...])")
    if fields:
        raise TypeError("keyword fields go with one spec, not with a list of specs")
    specs = [dict(s) for s in spec]
    if not specs:
        raise InvalidSpec("no job given", field="jobs")
    return specs, False


def submit(specs: list[dict[str, Any]], idempotency_key: str | None,
           force: bool = False) -> Call[list[Job]]:
    """``force``: accept a job this machine cannot run now (it waits until the GPUs
    change) instead of refusing it."""
    body: dict[str, Any] = {"jobs": specs}
    if idempotency_key is not None:
        body["idempotency_key"] = idempotency_key
    if force:
        body["force"] = True
    return Call("POST", "/v1/jobs", lambda d: _JOBS.validate_python(d["jobs"]), json=body)


def get(ref: JobRef) -> Call[JobDetail]:
    return Call("GET", _jobs_path(ref), JobDetail.model_validate)


def list_jobs(state: States, limit: int, before: int | None,
              **filters: str | None) -> Call[Page[Job]]:
    """``filters``: user, name (a substring), project, tag; None leaves one out."""
    params: dict[str, Any] = {k: v for k, v in filters.items() if v is not None}
    params["limit"] = limit
    if state is not None:
        states = [state] if isinstance(state, str) else list(state)
        params["state"] = [str(s) for s in states]
    if before is not None:
        params["before"] = before

    def parse(d: Any) -> Page[Job]:
        return Page[Job](items=_JOBS.validate_python(d["jobs"]), next=d.get("next"))

    return Call("GET", "/v1/jobs", parse, params=params)


def events(ref: JobRef) -> Call[list[Event]]:
    return Call("GET", _jobs_path(ref, "/events"), lambda d: _EVENTS.validate_python(d["events"]))


def why(ref: JobRef) -> Call[Why]:
    return Call("GET", _jobs_path(ref, "/why"), Why.model_validate)


def metrics(ref: JobRef, names: Sequence[str], attempt: int | None,
            after: int) -> Call[Metrics]:
    params: dict[str, Any] = {"name": list(names), "after": after}
    if attempt is not None:
        params["attempt"] = attempt
    return Call("GET", _jobs_path(ref, "/metrics"), Metrics.model_validate, params=params)


def merge_metrics(into: Metrics | None, page: Metrics) -> Metrics:
    """Pages of samples as one answer."""
    if into is None:
        return page
    for name, points in page.series.items():
        into.series.setdefault(name, []).extend(points)
    into.next, into.more, into.progress = page.next, page.more, page.progress
    return into


def checkpoints(ref: JobRef) -> Call[Checkpoints]:
    return Call("GET", _jobs_path(ref, "/checkpoints"), Checkpoints.model_validate)


def action(ref: JobRef, verb: str) -> Call[None]:
    """cancel, hold, release or preempt; the client then reads the job back."""
    return Call("POST", _jobs_path(ref, f"/{verb}"), lambda _: None)


def wait_hold(deadline: float | None) -> float:
    """Seconds to ask the daemon to hold the next long poll (``deadline``: monotonic)."""
    if deadline is None:
        return WAIT_STEP
    return max(0.001, min(WAIT_STEP, deadline - time.monotonic()))


def wait_once(ref: JobRef, hold: float, base_read: float | None) -> Call[dict[str, Any]]:
    """One long poll: the daemon answers when the job ends or after ``hold`` seconds
    (``base_read``: the client's read limit in seconds, None for none)."""
    read = None if base_read is None else hold + max(base_read, WAIT_SLACK)
    return Call("GET", _jobs_path(ref, "/wait"), dict, params={"timeout": hold},
                extra={"timeout": read})


def log_window(since: When | None, until: When | None) -> dict[str, float]:
    """``since``/``until`` as the unix times the daemon takes (a duration counts from now)."""
    return log_times.window(since, until, now=time.time())


def read_log(ref: JobRef, offset: int, limit: int | None,
             window: Mapping[str, float] | None = None) -> Call[LogChunk]:
    """``window``: from :func:`log_window`, the same for every page."""
    params: dict[str, Any] = {"offset": offset, **(window or {})}
    if limit is not None:
        params["limit"] = limit
    return Call("GET", _jobs_path(ref, "/logs"), LogChunk.model_validate, params=params)


def stream_cut() -> DaemonUnavailable:
    return DaemonUnavailable("the log stream closed before the job ended")


def follower(ref: JobRef, offset: int, window: Mapping[str, float]) -> LogFollower:
    """A follower from ``offset``, or from the first line written at ``window``'s since."""
    if "until" in window:
        raise InvalidSpec("until: a followed log has no end time (following goes on until "
                          "the job ends); give since only", field="until")
    return LogFollower(ref, offset, window.get("since"))


class LogFollower:
    """A followed log across reconnects: the server-sent events of ``/logs/stream``, where
    to resume after a dropped connection (a daemon restart), and when to stop trying."""

    #: Seconds to keep reconnecting without getting anything; pauses between tries.
    GIVE_UP_S = 30.0
    PAUSES = (0.2, 0.5, 1.0, 2.0)

    def __init__(self, ref: JobRef, offset: int, since: float | None = None) -> None:
        self.path = _jobs_path(ref, "/logs/stream")
        self.offset = offset
        self.since = since  # where a reconnect resumes is later: ``offset`` wins then
        self.ended = False
        self._failures = 0
        self._failing_since: float | None = None

    def params(self) -> dict[str, Any]:
        if self.since is None:
            return {"offset": self.offset}
        return {"offset": self.offset, "since": self.since}

    def take(self, event: str, data: str) -> str | None:
        """The text an event carries (None for other events); notes the end."""
        self._failures, self._failing_since = 0, None
        if event == "end":
            self.ended = True
        elif event == "log":
            body = json.loads(data)
            self.offset = int(body["next"])
            return str(body["text"])
        return None

    def pause_after(self, error: Exception) -> float:
        """Seconds to wait before reconnecting; raises ``error`` once it is time to give up."""
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        if now - self._failing_since > self.GIVE_UP_S:
            raise error
        pause = self.PAUSES[min(self._failures, len(self.PAUSES) - 1)]
        self._failures += 1
        return pause


def requeue(ref: JobRef) -> Call[Job]:
    """A running job is stopped and queued again (same id); an ended one is submitted anew
    (a new id). Either way the answer is the job that will run."""
    return Call("POST", _jobs_path(ref, "/requeue"), lambda d: Job.model_validate(d["job"]))


# --- machine -------------------------------------------------------------------------------

def gpus() -> Call[list[Gpu]]:
    return Call("GET", "/v1/gpus", lambda d: _GPUS.validate_python(d["gpus"]))


def gpu_action(index: int, verb: str) -> Call[None]:
    return Call("POST", f"/v1/gpus/{int(index)}/{verb}", lambda _: None)


def pick_gpu(all_gpus: list[Gpu], index: int) -> Gpu:
    for g in all_gpus:
        if g.index == index:
            return g
    raise NotFound(f"no GPU {index}")


def queue(limit: int, offset: int, counts: bool) -> Call[QueuePage]:
    """The totals; with ``limit`` > 0 also a page of the queue (see QueuePage)."""
    params: dict[str, Any] = {}
    if limit:
        params |= {"limit": limit, "offset": offset}
    if not counts:
        params["counts"] = False
    return Call("GET", "/v1/queue", QueuePage.model_validate, params=params or None)


def tiers() -> Call[list[Tier]]:
    return Call("GET", "/v1/tiers", lambda d: _TIERS.validate_python(d["tiers"]))


def report(by: str, period: str, since: object, until: object) -> Call[Report]:
    params = {"by": by, "period": period, "since": _when(since, "since"),
              "until": _when(until, "until")}
    return Call("GET", "/v1/report", Report.model_validate,
                params={k: v for k, v in params.items() if v is not None})


def _when(t: object, field: str) -> str | None:
    """A date, datetime (naive: UTC), epoch seconds or their text as the epoch seconds the
    report takes; read here so that text it cannot read is named as the daemon would."""
    if t is None:
        return None
    text = t.isoformat() if isinstance(t, datetime | date) else str(t)
    return f"{report_time(text, field):.6f}"


def health() -> Call[Health]:
    return Call("GET", "/v1/health", Health.model_validate)


def whoami() -> Call[Identity]:
    return Call("GET", "/v1/whoami", Identity.model_validate)


# --- fair share ----------------------------------------------------------------------------

def shares() -> Call[Shares]:
    return Call("GET", "/v1/shares", Shares.model_validate)


def set_share(name: str, shares: float, *, project: bool) -> Call[Shares]:
    kind = "project" if project else "user"
    return Call("PUT", f"/v1/shares/{kind}/{name}", Shares.model_validate,
                json={"shares": shares})


def priority(ref: JobRef) -> Call[Priority]:
    return Call("GET", _jobs_path(ref, "/priority"), Priority.model_validate)


# --- evaluations ---------------------------------------------------------------------------

def eval_results(name: str | None, model: str | None, task: str | None,
                 limit: int) -> Call[list[EvalRun]]:
    """Evaluation runs, newest first; None leaves a filter out."""
    params: dict[str, Any] = {k: v for k, v in (("name", name), ("model", model),
                                                ("task", task)) if v is not None}
    params["limit"] = limit
    return Call("GET", "/v1/eval/results", lambda d: _EVAL_RUNS.validate_python(d["runs"]),
                params=params)


def schedule_body(config: str, *, path: str, every: str | float | None,
                  after_job: JobRef | None, on_checkpoint: JobRef | None, pool: str | None,
                  git_commit: str | None = None,
                  git_dirty: bool | None = None) -> dict[str, Any]:
    """POST /v1/eval/schedules's body (exactly one trigger: the daemon says so otherwise)."""
    body: dict[str, Any] = {"config": config, "path": path, "every": every, "pool": pool,
                            "after_job": None if after_job is None else job_id(after_job),
                            "on_checkpoint": None if on_checkpoint is None
                            else job_id(on_checkpoint),
                            "git_commit": git_commit, "git_dirty": git_dirty}
    return {k: v for k, v in body.items() if v is not None}


def schedule_eval(body: dict[str, Any]) -> Call[EvalSchedule]:
    return Call("POST", "/v1/eval/schedules", EvalSchedule.model_validate, json=body)


def eval_schedules() -> Call[list[EvalSchedule]]:
    return Call("GET", "/v1/eval/schedules",
                lambda d: _EVAL_SCHEDULES.validate_python(d["schedules"]))


def unschedule_eval(schedule_id: int) -> Call[None]:
    return Call("DELETE", f"/v1/eval/schedules/{operator.index(schedule_id)}", lambda _: None)


# --- pipelines -----------------------------------------------------------------------------

def add_pipeline(config: str, *, path: str, task: str | None) -> Call[list[Pipeline]]:
    body = {"config": config, "path": path, **({"task": task} if task else {})}
    return Call("POST", "/v1/pipelines", lambda d: _PIPELINES.validate_python(d["pipelines"]),
                json=body)


def pipelines() -> Call[list[Pipeline]]:
    return Call("GET", "/v1/pipelines", lambda d: _PIPELINES.validate_python(d["pipelines"]))


def pipeline(name: str, limit: int = 50) -> Call[PipelineDetail]:
    return Call("GET", f"/v1/pipelines/{_name(name)}", PipelineDetail.model_validate,
                params={"limit": limit})


def pipeline_action(name: str, action: str, body: dict[str, Any] | None = None
                    ) -> Call[Pipeline]:
    """pause | resume | run-now."""
    return Call("POST", f"/v1/pipelines/{_name(name)}/{action}", Pipeline.model_validate,
                **({"json": body} if body is not None else {}))


def remove_pipeline(name: str) -> Call[int | None]:
    """The open round whose jobs were cancelled, if any."""
    return Call("DELETE", f"/v1/pipelines/{_name(name)}", lambda d: d["cancelled_round"])


def _name(name: str) -> str:
    """A pipeline's name as a path segment: refused here when it could not be one."""
    import re

    from rota.errors import InvalidSpec

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
        raise InvalidSpec(f"pipeline name {name!r}: 1-64 letters, digits, _ . -",
                          field="name")
    return name


# --- quotas and budgets (answers as rota.answers.QuotaAnswer) ---------------------------
def quotas() -> Call[list[QuotaAnswer]]:
    return Call("GET", "/v1/quotas", lambda d: list(d["quotas"]))


def set_quota(kind: str, name: str, what: str, limit: float, period: str,
              hard: bool) -> Call[QuotaAnswer]:
    return Call("PUT", "/v1/quotas", lambda d: d, json={
        "kind": kind, "name": name, "what": what, "limit": limit, "period": period,
        "hard": hard})


def lift_quota(kind: str, name: str, seconds: float, what: str | None) -> Call[int]:
    return Call("POST", "/v1/quotas/lift", lambda d: int(d["changed"]), json={
        "kind": kind, "name": name, "what": what, "seconds": seconds})


def remove_quota(kind: str, name: str, what: str | None) -> Call[int]:
    return Call("DELETE", "/v1/quotas", lambda d: int(d["changed"]),
                params={"kind": kind, "name": name, **({"what": what} if what else {})})

# --- alerts --------------------------------------------------------------------------------

def alerts(user: str | None, limit: int) -> Call[list[Alert]]:
    params: dict[str, Any] = {"limit": limit}
    if user is not None:
        params["user"] = user
    return Call("GET", "/v1/alerts", lambda d: _ALERTS.validate_python(d["alerts"]),
                params=params)


def test_alert(text: str | None) -> Call[Alert]:
    return Call("POST", "/v1/alerts/test", Alert.model_validate, json={"text": text})
