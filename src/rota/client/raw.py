"""The typed wire client the CLI uses: the daemon's JSON as it comes, typed as the
TypedDicts of :mod:`rota.answers`, over the same transport (socket or URL, token,
error mapping) as the SDK's :class:`rota.Client`, which gives pydantic models instead."""

from __future__ import annotations

import os
from collections.abc import Iterator

from rota.client import _submits
from rota.client._endpoint import DEFAULT_TIMEOUT, Endpoint
from rota.client._wire import Timeout, WireTransport
from rota.client.raw_storage import RawStorage

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:  # types only: plain dicts at run time, nothing more to import
    from pathlib import Path

    from rota.answers import (
        AlertAnswer,
        AlertsAnswer,
        CheckpointsAnswer,
        DrainAnswer,
        EvalResultsAnswer,
        EvalScheduleAnswer,
        EvalSchedulesAnswer,
        EvalUnscheduledAnswer,
        EventAnswer,
        GpuPausedAnswer,
        GpusAnswer,
        HealthAnswer,
        JobAnswer,
        JobDetailAnswer,
        JobsFileAnswer,
        JobStateAnswer,
        LogAnswer,
        MetricPoint,
        MetricsAnswer,
        MetricsPageAnswer,
        NewTokenAnswer,
        PipelineAnswer,
        PipelineDetailAnswer,
        PipelineRemovedAnswer,
        PipelinesAnswer,
        PoolsAnswer,
        PriorityAnswer,
        QueueAnswer,
        QuotaAnswer,
        QuotaChangedAnswer,
        QuotasAnswer,
        RenderAnswer,
        ReportAnswer,
        RequeueAnswer,
        SecretDeletedAnswer,
        SecretsAnswer,
        SecretSetAnswer,
        SessionAnswer,
        SharesAnswer,
        ShutdownAnswer,
        SimulateAnswer,
        StatsAnswer,
        SubmitAnswer,
        SummaryAnswer,
        TiersAnswer,
        TokenAnswer,
        TokensAnswer,
        UserAnswer,
        UserRemovedAnswer,
        UsersAnswer,
        WaitAnswer,
        WhyAnswer,
    )


class RawClient(RawStorage):
    """The daemon's answers as plain dicts whose shape mypy knows (rota.answers):
    nothing is parsed or copied beyond the JSON, so the CLI pays nothing for the types.
    Programs that want objects (datetimes, enums, helpers) use :class:`rota.Client`."""

    def __init__(self, socket_path: str | os.PathLike[str] | None = None, *,
                 url: str | None = None, token: str | None = None,
                 timeout: Timeout = DEFAULT_TIMEOUT) -> None:
        self._t = WireTransport(Endpoint.resolve(socket_path, url=url, token=token), timeout)

    @property
    def socket_path(self) -> Path | None:
        """The daemon's socket (None for a daemon reached by URL)."""
        return self._t.endpoint.socket_path

    def close(self) -> None:
        self._t.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def request(self, method: str, path: str, **kw: Any) -> Any:
        """Any endpoint, its answer untyped (the methods below type theirs)."""
        return self._t.request(method, path, **kw)

    # --- jobs ----------------------------------------------------------------------------
    def submit(self, jobs: list[dict[str, Any]], *, idempotency_key: str | None = None,
               dedup: bool = False, force: bool = False) -> list[JobAnswer]:
        return self.submit_full(jobs, idempotency_key=idempotency_key, dedup=dedup,
                                force=force)["jobs"]

    def submit_full(self, jobs: list[dict[str, Any]], *, idempotency_key: str | None = None,
                    dedup: bool = False, force: bool = False) -> SubmitAnswer:
        """The whole answer: ``jobs``, and ``warnings`` about their sizes when there are any.
        ``force``: accept a job this machine cannot run now (it waits until the GPUs
        change) instead of refusing it. Sent with ``idempotency_key`` (else a new random
        one), again with it when the connection fails (``rota.client._submits``)."""
        def once(key: str) -> SubmitAnswer:
            body: dict[str, Any] = {"jobs": jobs, "idempotency_key": key, "dedup": dedup}
            if force:
                body["force"] = True
            answer: SubmitAnswer = self.request("POST", "/v1/jobs", json=body)
            return answer

        return _submits.send(once, idempotency_key)

    def jobs(self, *, states: list[str] | None = None, user: str | None = None,
             name: str | None = None, limit: int = 200) -> list[JobAnswer]:
        params: dict[str, Any] = {"limit": limit}
        if states:
            params["state"] = states
        if user:
            params["user"] = user
        if name:
            params["name"] = name
        return self.request("GET", "/v1/jobs", params=params)["jobs"]

    def job(self, job_id: int) -> JobDetailAnswer:
        return self.request("GET", f"/v1/jobs/{job_id}")

    def events(self, job_id: int) -> list[EventAnswer]:
        return self.request("GET", f"/v1/jobs/{job_id}/events")["events"]

    def why(self, job_id: int) -> WhyAnswer:
        return self.request("GET", f"/v1/jobs/{job_id}/why")

    def cancel(self, job_id: int) -> JobStateAnswer:
        return self.request("POST", f"/v1/jobs/{job_id}/cancel")

    def preempt(self, job_id: int) -> JobStateAnswer:
        return self.request("POST", f"/v1/jobs/{job_id}/preempt")

    def requeue(self, job_id: int) -> RequeueAnswer:
        return self.request("POST", f"/v1/jobs/{job_id}/requeue")

    def hold(self, job_id: int) -> JobStateAnswer:
        return self.request("POST", f"/v1/jobs/{job_id}/hold")

    def release(self, job_id: int) -> JobStateAnswer:
        return self.request("POST", f"/v1/jobs/{job_id}/release")

    def wait(self, job_id: int, timeout: float | None = None) -> WaitAnswer:
        """Block until the job ends (or the timeout passes); long-polls the daemon."""
        while True:
            step = 60.0 if timeout is None else min(timeout, 60.0)
            res: WaitAnswer = self.request("GET", f"/v1/jobs/{job_id}/wait",
                                           params={"timeout": step}, timeout=step + 30)
            if res["done"]:
                return res
            if timeout is not None:
                timeout -= step
                if timeout <= 0:
                    return res

    def logs(self, job_id: int, offset: int = 0, *, since: float | None = None,
             until: float | None = None) -> LogAnswer:
        """One page of the log from ``offset``; ``since``/``until`` (unix times): of the
        lines written in that time only (page on with ``offset=next``, the same window)."""
        return self.request("GET", f"/v1/jobs/{job_id}/logs",
                            params={"offset": offset, **_window(since, until)})

    def metrics(self, job_id: int, names: list[str] | None = None) -> MetricsAnswer:
        """Every sample of the job's metrics (all pages), merged per metric."""
        series: dict[str, list[MetricPoint]] = {}
        after = 0
        while True:
            page: MetricsPageAnswer = self.request(
                "GET", f"/v1/jobs/{job_id}/metrics",
                params={"name": names or [], "after": after})
            for name, points in page["series"].items():
                series.setdefault(name, []).extend(points)
            if not page["more"]:
                return {"series": series, "id": page["id"], "progress": page["progress"]}
            after = page["next"]

    def checkpoints(self, job_id: int) -> CheckpointsAnswer:
        return self.request("GET", f"/v1/jobs/{job_id}/checkpoints")

    def log_stream(self, job_id: int, offset: int = 0, *, since: float | None = None,
                   until: float | None = None) -> Iterator[bytes]:
        """The log's raw bytes from ``offset`` to its end now (or of the lines written from
        ``since`` to ``until``), in pieces as they arrive: a log of any size is never held
        whole."""
        params = {"offset": offset, "stream": True, **_window(since, until)}
        with self._t.stream("GET", f"/v1/jobs/{int(job_id)}/logs", params=params) as resp:
            yield from resp.iter_bytes()

    def follow_logs(self, job_id: int, offset: int = 0, *,
                    since: float | None = None) -> Iterator[bytes]:
        """The log's raw bytes until the job ends, from the first line written at or
        after ``since`` (a unix time) when given."""
        params = {"offset": offset, "follow": True, **_window(since, None)}
        with self._t.stream("GET", f"/v1/jobs/{int(job_id)}/logs", params=params) as resp:
            yield from resp.iter_bytes()

    def attach_argv(self, job_id: int) -> list[str]:
        return self.request("GET", f"/v1/jobs/{job_id}/attach")["argv"]

    # --- machine -------------------------------------------------------------------------
    def health(self) -> HealthAnswer:
        return self.request("GET", "/v1/health")

    def gpus(self) -> GpusAnswer:
        return self.request("GET", "/v1/gpus")

    def pause(self, index: int) -> GpuPausedAnswer:
        return self.request("POST", f"/v1/gpus/{index}/pause")

    def resume(self, index: int) -> GpuPausedAnswer:
        return self.request("POST", f"/v1/gpus/{index}/resume")

    def simulate(self, index: int, **fault: Any) -> SimulateAnswer:
        return self.request("POST", f"/v1/gpus/{index}/simulate", json=fault)

    # --- quotas and budgets ---------------------------------------------------------------
    def quotas(self) -> QuotasAnswer:
        return self.request("GET", "/v1/quotas")

    def set_quota(self, kind: str, name: str, what: str, limit: float, *,
                  period: str = "none", hard: bool = False) -> QuotaAnswer:
        return self.request("PUT", "/v1/quotas", json={
            "kind": kind, "name": name, "what": what, "limit": limit, "period": period,
            "hard": hard})

    def lift_quota(self, kind: str, name: str, seconds: float,
                   what: str | None = None) -> QuotaChangedAnswer:
        return self.request("POST", "/v1/quotas/lift", json={
            "kind": kind, "name": name, "what": what, "seconds": seconds})

    def remove_quota(self, kind: str, name: str,
                     what: str | None = None) -> QuotaChangedAnswer:
        params = {"kind": kind, "name": name, **({"what": what} if what else {})}
        return self.request("DELETE", "/v1/quotas", params=params)

    def drain(self, on: bool = True) -> DrainAnswer:
        return self.request("POST", "/v1/drain", params={"on": on})

    def queue_summary(self) -> QueueAnswer:
        """The totals only (counts per state, no job lists)."""
        return self.request("GET", "/v1/queue")

    def queue(self, *, limit: int = 200, offset: int = 0, counts: bool = True) -> QueueAnswer:
        """Totals, the jobs on GPUs, ``limit`` waiting jobs from ``offset`` in the order
        they will start (with why they wait), and the oldest held ones; ``counts=False``
        leaves out the counts per state (they read every job's row)."""
        return self.request("GET", "/v1/queue", params={
            "limit": limit, "offset": offset, "counts": counts})

    def sessions(self) -> list[SessionAnswer]:
        return self.request("GET", "/v1/sessions")["sessions"]

    def jobs_file(self) -> JobsFileAnswer:
        return self.request("GET", "/v1/jobsfile")

    def reload_jobs_file(self, again: list[int] | None = None) -> JobsFileAnswer:
        """Have the daemon read its jobs file now; the lines in ``again`` run again even
        if they ran before."""
        if again:
            return self.request("POST", "/v1/jobsfile/reload", json={"again": again})
        return self.request("POST", "/v1/jobsfile/reload")

    def stats(self) -> StatsAnswer:
        return self.request("GET", "/v1/stats")

    def summary(self) -> SummaryAnswer:
        """Jobs by state; GPU-hours by user and project, and wasted on idle GPUs by user."""
        return self.request("GET", "/v1/summary")

    def shares(self) -> SharesAnswer:
        return self.request("GET", "/v1/shares")

    def set_share(self, name: str, shares: float, *, project: bool = False) -> SharesAnswer:
        kind = "project" if project else "user"
        return self.request("PUT", f"/v1/shares/{kind}/{name}", json={"shares": shares})

    def priority(self, job_id: int) -> PriorityAnswer:
        return self.request("GET", f"/v1/jobs/{int(job_id)}/priority")

    def tiers(self) -> TiersAnswer:
        return self.request("GET", "/v1/tiers")

    def report(self, *, by: str = "user", period: str = "day", since: str | None = None,
               until: str | None = None) -> ReportAnswer:
        """GPU-hours and cost per ``by`` group and ``period`` bucket (the caller's own
        usage unless an admin asks); since/until: dates, ISO times or epoch seconds."""
        from rota.client._calls import report

        return self.request("GET", "/v1/report", params=report(by, period, since, until).params)

    def pools(self) -> PoolsAnswer:
        return self.request("GET", "/v1/pools")

    def render(self, job_id: int, pool: str | None = None) -> RenderAnswer:
        """What ``pool``'s engine would be handed for the job (None: the default pool)."""
        params = {"pool": pool} if pool else {}
        return self.request("GET", f"/v1/jobs/{int(job_id)}/render", params=params)

    def render_spec(self, spec: dict[str, Any], pool: str) -> RenderAnswer:
        """What ``pool``'s engine would be handed for ``spec`` were it submitted (nothing is
        stored: ``id`` is None)."""
        from urllib.parse import quote

        return self.request("POST", f"/v1/pools/{quote(pool, safe='')}/render", json=spec)

    # --- evaluations ---------------------------------------------------------------------
    def eval_results(self, *, name: str | None = None, model: str | None = None,
                     task: str | None = None, limit: int = 50) -> EvalResultsAnswer:
        """Evaluation runs, newest first, with their metrics (``task``: only ``TASK/...``)."""
        params = {k: v for k, v in (("name", name), ("model", model), ("task", task))
                  if v is not None}
        return self.request("GET", "/v1/eval/results", params={**params, "limit": limit})

    def eval_schedule(self, body: dict[str, Any]) -> EvalScheduleAnswer:
        """A new schedule (rota.client._calls.schedule_body makes ``body``)."""
        return self.request("POST", "/v1/eval/schedules", json=body)

    def eval_schedules(self) -> EvalSchedulesAnswer:
        return self.request("GET", "/v1/eval/schedules")

    def eval_unschedule(self, schedule_id: int) -> EvalUnscheduledAnswer:
        return self.request("DELETE", f"/v1/eval/schedules/{int(schedule_id)}")

    # --- pipelines -------------------------------------------------------------------------
    def pipeline_add(self, config: str, *, path: str, task: str | None) -> PipelinesAnswer:
        body = {"config": config, "path": path, **({"task": task} if task else {})}
        return self.request("POST", "/v1/pipelines", json=body)

    def pipelines(self) -> PipelinesAnswer:
        return self.request("GET", "/v1/pipelines")

    def pipeline(self, name: str, *, limit: int = 50) -> PipelineDetailAnswer:
        from rota.client._calls import _name

        return self.request("GET", f"/v1/pipelines/{_name(name)}", params={"limit": limit})

    def pipeline_action(self, name: str, action: str,
                        body: dict[str, Any] | None = None) -> PipelineAnswer:
        from rota.client._calls import _name

        return self.request("POST", f"/v1/pipelines/{_name(name)}/{action}",
                            **({"json": body} if body is not None else {}))

    def pipeline_remove(self, name: str) -> PipelineRemovedAnswer:
        from rota.client._calls import _name

        return self.request("DELETE", f"/v1/pipelines/{_name(name)}")

    def shutdown(self) -> ShutdownAnswer:
        return self.request("POST", "/v1/shutdown")

    # --- users, tokens, secrets ----------------------------------------------------------
    def users(self) -> UsersAnswer:
        return self.request("GET", "/v1/users")

    def add_user(self, name: str, *, admin: bool = False,
                 unix_account: str | None = None) -> UserAnswer:
        """``unix_account``: the account a root daemon starts this user's jobs as."""
        return self.request("POST", "/v1/users", json={"name": name, "admin": admin,
                                                       "unix_account": unix_account})

    def set_user(self, name: str, *, admin: bool | None = None,
                 unix_account: str | None = None, own_account: bool = False) -> UserAnswer:
        """Change a user's rights or Unix account (``own_account``: the daemon's own
        again); what is not given stays."""
        body: dict[str, object] = {}
        if admin is not None:
            body["admin"] = admin
        if unix_account is not None or own_account:  # null: the daemon's own account again
            body["unix_account"] = unix_account
        return self.request("PATCH", f"/v1/users/{name}", json=body)

    def remove_user(self, name: str, *, cancel_jobs: bool = False) -> UserRemovedAnswer:
        return self.request("DELETE", f"/v1/users/{name}",
                            params={"cancel_jobs": cancel_jobs})

    def tokens(self) -> TokensAnswer:
        return self.request("GET", "/v1/tokens")

    def create_token(self, user: str | None = None, note: str | None = None) -> NewTokenAnswer:
        return self.request("POST", "/v1/tokens", json={"user": user, "note": note})

    def revoke_token(self, token_id: int) -> TokenAnswer:
        return self.request("POST", f"/v1/tokens/{token_id}/revoke")

    def secrets(self, user: str | None = None) -> SecretsAnswer:
        """Names and dates (never values); another user's needs an admin."""
        return self.request("GET", "/v1/secrets", params=_user(user))

    def put_secret(self, name: str, value: str, *, user: str | None = None) -> SecretSetAnswer:
        return self.request("PUT", f"/v1/secrets/{name}", json={"value": value, "user": user})

    def delete_secret(self, name: str, *, user: str | None = None) -> SecretDeletedAnswer:
        return self.request("DELETE", f"/v1/secrets/{name}", params=_user(user))

    # --- alerts --------------------------------------------------------------------------
    def alerts(self, *, user: str | None = None, limit: int = 100) -> AlertsAnswer:
        return self.request("GET", "/v1/alerts", params={"limit": limit, **(_user(user) or {})})

    def test_alert(self, text: str | None = None) -> AlertAnswer:
        return self.request("POST", "/v1/alerts/test", json={"text": text})


def _user(user: str | None) -> dict[str, Any] | None:
    return {"user": user} if user else None


def _window(since: float | None, until: float | None) -> dict[str, float]:
    return {k: v for k, v in (("since", since), ("until", until)) if v is not None}
