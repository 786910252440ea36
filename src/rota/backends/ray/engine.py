"""The Ray engine: Ray's Jobs REST API on the head's dashboard port, over HTTP (httpx).

Rota talks to the documented REST API (``/api/jobs/``) with a timeout on every request
rather than through ``ray.job_submission.JobSubmissionClient``, whose requests have none:
no call here can block past ``timeout``, and Rota's side needs no ``ray`` installed (the
cluster does, and the gang module runs there).

Never twice: a job's submission id is its key (``rota-JOB-ATTEMPT``) and Ray refuses a
second submission with the same id; ``submit`` then answers the id of the job Ray holds,
and ``find`` is ``GET /api/jobs/KEY``.

Exit codes: Ray records ``driver_exit_code`` (the entrypoint's return code; negative:
the signal that ended it); older heads only say "exit code N" in the message, which is
read instead. A job that never ran its entrypoint (runtime_env setup failed, Ray gave up
waiting for resources) has no code: its reason says why.

Stop: ``POST /api/jobs/ID/stop``; Ray's supervisor sends the job's stop signal to the
entrypoint and every process under it, and SIGKILL after the grace (both fixed at submit,
see translate.py); a gang's driver forwards the signal to every rank. A job that is still
PENDING keeps waiting: Ray queues the stop and applies it when the job starts.

Logs: Ray's API returns a job's whole log on every request; ``read_log`` slices it at
``offset``, so each read costs the log's full size on the wire (see docs/pools-ray.md).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlparse

import httpx

from rota.backends.engine import (
    EngineCapabilities,
    EngineJob,
    EngineState,
    EngineStatus,
    PoolHealth,
)
from rota.backends.ray import translate
from rota.errors import BackendError
from rota.pools import RayPool

log = logging.getLogger(__name__)

_LOG_READ_MAX = 8 * 1024 * 1024
_EXIT_CODE = re.compile(r"exit code (-?\d+)")
_DUPLICATE = "already exists"
_QUEUED = ("PENDING",)
_ENDED = ("SUCCEEDED", "FAILED", "STOPPED")


class RayEngine:
    """The :class:`rota.backends.engine.Engine` for a Ray cluster (Ray Jobs API)."""

    name = "ray"
    capabilities = EngineCapabilities(fractional_gpus=True, multi_node=True, conda=True)

    def __init__(self, pool: RayPool, work_dir: str, *,
                 secrets: Callable[[str], str] | None = None, timeout: float = 30.0) -> None:
        """``work_dir``: where secrets files wait for their job (only with a head on this
        machine). ``secrets``: a secret's value by its name (raises KeyError)."""
        self.pool = pool
        self.work_dir = os.path.abspath(work_dir)
        self.timeout = timeout
        self._secrets = secrets
        self._http = httpx.Client(base_url=pool.address.rstrip("/"), timeout=timeout)

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------ translation

    def refusal(self, job: EngineJob) -> str | None:
        return translate.refusal(job, self.pool, secrets=self._secrets is not None)

    def render(self, job: EngineJob) -> str:
        secrets = translate.SECRETS_PLACEHOLDER if job.secret_env else None
        body = translate.submission(job, self.pool, secrets)
        return ("# POST " + self.pool.address.rstrip("/") + "/api/jobs/\n"
                + json.dumps(body, indent=2, sort_keys=True) + "\n")

    # ------------------------------------------------------------------ submit and find

    def submit(self, job: EngineJob) -> str:
        reason = self.refusal(job)
        if reason:
            raise BackendError(f"job {job.job_id}: {reason}")
        secrets_file = self._write_secrets(job) if job.secret_env else None
        try:
            resp = self._request("POST", "/api/jobs/",
                                 json=translate.submission(job, self.pool, secrets_file))
        except BackendError:
            self._drop_secrets(job.key)
            raise
        if resp.status_code == 200:
            return str(resp.json().get("submission_id") or job.key)
        self._drop_secrets(job.key)  # a refused job never reads its file
        if _DUPLICATE in resp.text:  # this attempt reached Ray before: follow that job
            log.info("ray: %s was submitted before; following that job", job.key)
            return job.key
        raise BackendError(f"Ray refused job {job.job_id}: {_ray_words(resp)}")

    def find(self, key: str) -> str | None:
        return key if self._job_info(key) is not None else None

    # ------------------------------------------------------------------ poll

    def poll(self, engine_ids: list[str]) -> dict[str, EngineStatus]:
        out: dict[str, EngineStatus] = {}
        for eid in engine_ids:
            info = self._job_info(eid)
            out[eid] = (status(eid, info) if info is not None
                        else EngineStatus(eid, EngineState.LOST,
                                          reason="Ray no longer knows this job (the head "
                                                 "was restarted, or the job was deleted)"))
            if out[eid].state in (EngineState.ENDED, EngineState.LOST):
                self._drop_secrets(eid)
        return out

    def _job_info(self, eid: str) -> dict[str, Any] | None:
        resp = self._request("GET", f"/api/jobs/{_path(eid)}")
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise BackendError(f"Ray answered {resp.status_code} for job {eid}: "
                               f"{_ray_words(resp)}")
        info: dict[str, Any] = resp.json()
        return info

    # ------------------------------------------------------------------ stop and logs

    def stop(self, engine_id: str, signal: str, grace: float) -> None:
        """Ask Ray to stop the job. ``signal`` and ``grace`` were fixed at submit (Ray's
        supervisor reads them from the job's runtime_env): these arguments cannot change
        them, and a job already ended or unknown is left as it is."""
        resp = self._request("POST", f"/api/jobs/{_path(engine_id)}/stop")
        if resp.status_code not in (200, 404):
            raise BackendError(f"Ray could not stop job {engine_id}: {_ray_words(resp)}")

    def read_log(self, engine_id: str, offset: int) -> bytes:
        resp = self._request("GET", f"/api/jobs/{_path(engine_id)}/logs")
        if resp.status_code == 404:
            return b""
        if resp.status_code != 200:
            raise BackendError(f"Ray could not read the log of job {engine_id}: "
                               f"{_ray_words(resp)}")
        data = str(resp.json().get("logs") or "").encode()
        start = max(0, offset)
        return data[start:start + _LOG_READ_MAX]

    # ------------------------------------------------------------------ health

    def health(self) -> PoolHealth:
        try:
            resp = self._request("GET", "/api/cluster_status")
            if resp.status_code != 200:
                raise BackendError(f"Ray answered {resp.status_code}: {_ray_words(resp)}")
            return cluster_health(resp.json())
        except (BackendError, ValueError, KeyError, TypeError) as exc:
            return PoolHealth(reachable=False, message=f"Ray at {self.pool.address}: {exc}")

    # ------------------------------------------------------------------ secrets

    def _secrets_path(self, key: str) -> str:
        return os.path.join(self.work_dir, "ray-secrets", f"{key}.json")

    def _write_secrets(self, job: EngineJob) -> str:
        """The job's secret values in a file only this user can read; the gang module on
        the (local) head reads and deletes it before the command starts."""
        assert self._secrets is not None  # refusal() said so otherwise
        values: dict[str, str] = {}
        for var, name in job.secret_env.items():
            try:
                values[var] = self._secrets(name)
            except KeyError as exc:
                raise BackendError(f"job {job.job_id}: no secret named {name!r}") from exc
        path = self._secrets_path(job.key)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(values, fh)
        return path

    def _drop_secrets(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._secrets_path(key))

    # ------------------------------------------------------------------ HTTP

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **kw)
        except httpx.TimeoutException as exc:
            raise BackendError(f"the Ray head at {self.pool.address} did not answer "
                               f"within {self.timeout:g}s") from exc
        except httpx.HTTPError as exc:
            raise BackendError(f"cannot reach the Ray head at {self.pool.address}: "
                               f"{exc}") from exc


# ---------------------------------------------------------------------------- answers


def status(eid: str, info: dict[str, Any]) -> EngineStatus:
    """A Ray JobDetails (JSON) as an EngineStatus."""
    state = str(info.get("status") or "")
    message = _first_line(info.get("message"))
    if state in _QUEUED:
        return EngineStatus(eid, EngineState.QUEUED, reason=message)
    started = _seconds(info.get("start_time"))
    nodes = _driver_node(info)
    if state not in _ENDED:
        return EngineStatus(eid, EngineState.RUNNING, started_at=started, nodes=nodes)
    code = exit_code(info)
    sig = -code if code is not None and code < 0 else None
    reason = state if state == "SUCCEEDED" else f"{state}: {message}" if message else state
    return EngineStatus(eid, EngineState.ENDED, reason=reason, started_at=started,
                        ended_at=_seconds(info.get("end_time")),
                        exit_code=None if sig else code, signal=sig, nodes=nodes)


def exit_code(info: dict[str, Any]) -> int | None:
    """The entrypoint's return code: Ray's ``driver_exit_code``, else "exit code N" in its
    message, else 0 for SUCCEEDED; None when Ray does not say."""
    code = info.get("driver_exit_code")
    if isinstance(code, int):
        return code
    found = _EXIT_CODE.search(str(info.get("message") or ""))
    if found:
        return int(found.group(1))
    return 0 if info.get("status") == "SUCCEEDED" else None


def cluster_health(answer: dict[str, Any]) -> PoolHealth:
    """``GET /api/cluster_status`` as PoolHealth: nodes, GPUs in all and free."""
    cluster = answer["data"]["clusterStatus"]
    usage: dict[str, list[float]] = cluster["loadMetricsReport"]["usage"]
    report = cluster.get("autoscalerReport") or {}
    nodes = sum(int(n) for n in (report.get("activeNodes") or {}).values())
    nodes += len(report.get("idleNodes") or {})
    used, total = usage.get("GPU", [0.0, 0.0])
    cpus_used, cpus = usage.get("CPU", [0.0, 0.0])
    free = max(0.0, total - used)
    return PoolHealth(reachable=True, nodes=nodes, gpus_total=total, gpus_free=free,
                      message=f"{nodes} node(s), {free:g}/{total:g} GPUs free, "
                              f"{cpus - cpus_used:g}/{cpus:g} CPUs free")


def _seconds(ms: object) -> float | None:
    return ms / 1000.0 if isinstance(ms, (int, float)) and ms > 0 else None


def _first_line(text: object) -> str | None:
    lines = str(text or "").strip().splitlines()
    # "...failed with exit code 3, last available logs (...):" and the log itself follow
    return lines[0].split(", last available logs")[0].rstrip(",:") if lines else None


def _driver_node(info: dict[str, Any]) -> tuple[str, ...]:
    host = urlparse(str(info.get("driver_agent_http_address") or "")).hostname
    return (host,) if host else ()


def _path(eid: str) -> str:
    return quote(eid, safe="")


def _ray_words(resp: httpx.Response) -> str:
    """The last line of Ray's answer (its errors come as a Python traceback)."""
    lines = [ln for ln in resp.text.strip().splitlines() if ln.strip(" .")]
    return (lines[-1] if lines else f"HTTP {resp.status_code}")[-2000:]
