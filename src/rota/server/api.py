"""The HTTP API (/v1), served on the daemon's Unix socket.

Handlers are coroutines so they run on the loop thread: the daemon stays the single writer.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from rota import __version__
from rota.core.spec import check_secret_name
from rota.errors import Conflict, InvalidSpec, NotFound
from rota.ml.checkpoints import Checkpoint, newest_valid, tar_stream
from rota.ml.checkpoints import of_job as checkpoints_of_job
from rota.server.admission import PointRequestsFirst
from rota.server.auth import (
    VIA_HEADER,
    VIA_KEY,
    Authenticator,
    Principal,
    check_user_name,
    new_token,
    token_digest,
)
from rota.server.daemon import Daemon
from rota.server.dashboard import mount_dashboard
from rota.server.intake import Intake
from rota.server.job_reads import MAX_ID, JobId, add_job_reads, answer_errors_as_problems
from rota.server.logstream import follow as follow_log
from rota.server.logstream import read_range
from rota.server.logstream import sse as log_sse
from rota.server.metrics import CONTENT_TYPE, REQUEST_BUCKETS, RequestTimer, Totals
from rota.server.secrets import MAX_VALUE_BYTES
from rota.server.views import (
    event_view,
    gpu_views,
    job_view,
    live_facts,
    progress_view,
)

RowId = Annotated[int, PathParam(ge=1, le=MAX_ID)]
GpuIndex = Annotated[int, PathParam(ge=0, le=1023, description="a GPU's index")]
SecretName = Annotated[str, PathParam(max_length=200,
                                      description="like an environment variable's name")]


class SubmitBody(BaseModel):
    jobs: list[dict[str, Any]] = Field(min_length=1)
    idempotency_key: str | None = None
    dedup: bool = False
    user: str | None = None


class SimulateBody(BaseModel):
    healthy: bool | None = None
    present: bool | None = None
    external_mem: int | None = None
    external_util: float | None = None


class LiveBody(BaseModel):
    ids: list[int] = Field(max_length=10_000)


class RequestCounts(BaseModel):
    labels: tuple[str, str, str]  # method, route, status
    buckets: list[float] = Field(min_length=len(REQUEST_BUCKETS) + 1,
                                 max_length=len(REQUEST_BUCKETS) + 1)
    sum: float


class WorkerRequestsBody(BaseModel):
    slot: int = Field(ge=0)
    pid: int
    counts: list[RequestCounts] = Field(max_length=10_000)

    def totals(self) -> Totals:
        return {c.labels: (c.buckets, c.sum) for c in self.counts}


class UserBody(BaseModel):
    name: str = Field(min_length=1, max_length=64)
    admin: bool = False


class SecretBody(BaseModel):
    value: str = Field(min_length=1, max_length=MAX_VALUE_BYTES, repr=False)
    user: str | None = None  # default: the caller; another user's needs an admin


class TokenBody(BaseModel):
    user: str | None = None  # default: the caller
    note: str | None = Field(default=None, max_length=200)


def build_app(daemon: Daemon, intake: Intake, *, on_shutdown: Any = None) -> FastAPI:
    app = FastAPI(title="Rota", version=__version__, docs_url=None, redoc_url=None)
    auth = Authenticator(daemon.store, daemon.settings.user, daemon.clock)

    async def who(request: Request) -> Principal:
        via = request.scope.get(VIA_KEY, "socket")
        if via == "socket" and request.headers.get(VIA_HEADER) == "tcp":
            via = "tcp"  # forwarded by an API worker: the caller's token decides
        return auth.principal(via, request.headers.get("authorization"))

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(who)])
    app.add_middleware(PointRequestsFirst)  # inside the timer: its wait is timed
    app.add_middleware(RequestTimer, histogram=daemon.metrics.requests)

    @app.get("/metrics", dependencies=[Depends(who)], include_in_schema=False)
    async def metrics() -> Response:
        """Prometheus text format; over TCP a scraper sends a token like any client."""
        return Response(daemon.metrics.render(), media_type=CONTENT_TYPE)

    answer_errors_as_problems(app)

    def _view(row: Any, *, detail: bool = False) -> dict[str, Any]:
        return job_view(row, live_facts(daemon, row), detail=detail)

    def _job_id(job_id: int) -> int:
        daemon.job_state(job_id)  # NotFound if unknown
        return job_id

    def _own(p: Principal, job_id: int, what: str) -> int:
        """The job exists and the caller may change it or read its logs."""
        p.require_owner(daemon.store.get_job(job_id).user, f"{what} job {job_id}")
        return job_id

    @v1.get("/health")
    async def health() -> dict[str, Any]:
        return {"ok": True, "version": __version__, "pid": os.getpid(),
                "devices": daemon.devices.kind, "gpus": len(daemon.readings),
                "pending": len(daemon.queue), "running": len(daemon.running),
                "draining": daemon.draining}

    @v1.post("/jobs", status_code=201)
    async def submit(body: SubmitBody, p: Principal = Depends(who)) -> dict[str, Any]:
        if body.user and body.user != p.user:
            p.require_admin(f"submitting as {body.user!r}")
        rows = intake.submit(body.jobs, user=body.user or p.user, source="api",
                             idempotency_key=body.idempotency_key, dedup=body.dedup)
        out: dict[str, Any] = {"jobs": [_view(r) for r in rows]}
        warnings = intake.sizing_warnings(rows)
        if warnings:
            out["warnings"] = warnings
        return out

    async def facts_of(rows: Sequence[Any]) -> list[dict[str, Any]]:
        return [live_facts(daemon, r) for r in rows]

    add_job_reads(v1, daemon.store, facts_of)

    def _for_workers_only(request: Request) -> None:
        """The endpoints the API workers use answer on the socket only, to the workers."""
        if request.scope.get(VIA_KEY) == "tcp" or VIA_HEADER in request.headers:
            raise NotFound(f"no such endpoint: {request.url.path}")

    @v1.post("/live", include_in_schema=False)
    async def live(body: LiveBody, request: Request) -> dict[str, Any]:
        """For the API workers: what the daemon's memory knows of these jobs (see
        rota.server.views.live_facts), by id."""
        _for_workers_only(request)
        rows = daemon.store.jobs(body.ids)
        return {"facts": {str(i): live_facts(daemon, r) for i, r in rows.items()}}

    @v1.post("/worker-requests", include_in_schema=False)
    async def worker_requests(body: WorkerRequestsBody, request: Request) -> dict[str, Any]:
        """For the API workers: the running totals of the requests a worker answered, for
        /metrics (see rota.server.metrics.WorkerRequests)."""
        _for_workers_only(request)
        daemon.metrics.worker_requests.report(body.slot, body.pid, body.totals())
        return {"ok": True}

    @v1.get("/jobs/{job_id}/events")
    async def events(job_id: JobId) -> dict[str, Any]:
        return {"events": [event_view(e) for e in daemon.store.events(_job_id(job_id))]}

    @v1.get("/jobs/{job_id}/metrics")
    async def metrics_of(job_id: JobId, name: list[str] = Query(default=[]),
                         attempt: int | None = Query(None, ge=1, le=1_000_000),
                         after: int = Query(0, ge=0, le=MAX_ID),
                         limit: int = Query(10_000, ge=1, le=100_000)) -> dict[str, Any]:
        """Metric samples read from the job's output, per metric as [step, value, time,
        attempt] points, oldest first. ``next`` is the ``after`` that asks for what came
        since (poll with it); ``more`` says whether this answer stopped at ``limit``."""
        row = daemon.store.get_job(job_id)
        got = daemon.store.metrics(job_id, names=name, attempt=attempt, after_id=after,
                                   limit=limit)
        series: dict[str, list[list[Any]]] = {}
        for m in got:
            series.setdefault(m.name, []).append([m.step, m.value, m.ts, m.attempt])
        return {"id": job_id, "series": series, "next": got[-1].id if got else after,
                "more": len(got) == limit, "progress": progress_view(row.progress)}

    def _checkpoints(job_id: int) -> tuple[list[Checkpoint], Checkpoint | None]:
        row = daemon.store.get_job(job_id)
        own = checkpoints_of_job(row.spec.get("checkpoint_dir"), row.spec.get("cwd"),
                                 reported=(row.progress or {}).get("checkpoint"),
                                 since=row.created_at, now=daemon.clock())
        return own, newest_valid(own)

    @v1.get("/jobs/{job_id}/checkpoints")
    async def checkpoints_of(job_id: JobId) -> dict[str, Any]:
        """The job's checkpoints (under its checkpoint_dir, or reported by rota.job), oldest
        step first, and the one a retry would resume from."""
        own, best = _checkpoints(job_id)
        return {"id": job_id, "checkpoints": [c.to_json() for c in own],
                "resume_from": best.path if best else None}

    @v1.get("/jobs/{job_id}/checkpoints/download", response_class=StreamingResponse,
            responses={200: {"content": {"application/octet-stream": {}, "application/x-tar": {}},
                             "description": "the file, or a directory as a tar stream"}})
    async def checkpoint_download(job_id: JobId, path: str = Query(..., max_length=4096),
                                  p: Principal = Depends(who)) -> Response:
        """One of the listed checkpoints: a file as it is, a directory as a tar stream. Only
        a path the listing gives is served."""
        _own(p, job_id, "download the checkpoints of")
        own, _ = _checkpoints(job_id)
        hit = next((c for c in own if c.path == path), None)
        if hit is None:
            raise NotFound(f"job {job_id} has no checkpoint {path!r}; "
                           f"`rota checkpoints {job_id}` lists them")
        name = os.path.basename(hit.path.rstrip("/"))
        if os.path.isdir(hit.path):
            return StreamingResponse(tar_stream(hit.path), media_type="application/x-tar",
                                     headers={"Content-Disposition":
                                              f'attachment; filename="{name}.tar"'})
        return FileResponse(hit.path, filename=name, media_type="application/octet-stream")

    @v1.get("/jobs/{job_id}/why")
    async def why(job_id: JobId) -> dict[str, Any]:
        row = daemon.store.get_job(job_id)
        view = _view(row)
        state = view["state"]
        if "reason" in view:
            return {"id": job_id, "state": state, **view["reason"]}
        if state in ("running", "starting"):
            msg = f"it is {state} on GPUs {view['gpu_indices'] or 'none (CPU only)'}"
        else:
            msg = f"it is {state}" + (f": {row.end_reason}" if row.end_reason else "")
        return {"id": job_id, "state": state, "code": state, "message": msg}

    @v1.post("/jobs/{job_id}/cancel")
    async def cancel(job_id: JobId, p: Principal = Depends(who)) -> dict[str, Any]:
        return {"id": job_id, "state": str(daemon.cancel(_own(p, job_id, "cancel")))}

    @v1.post("/jobs/{job_id}/hold")
    async def hold(job_id: JobId, p: Principal = Depends(who)) -> dict[str, Any]:
        daemon.hold(_own(p, job_id, "hold"))
        return {"id": job_id, "state": "held"}

    @v1.post("/jobs/{job_id}/release")
    async def release(job_id: JobId, p: Principal = Depends(who)) -> dict[str, Any]:
        daemon.release(_own(p, job_id, "release"))
        return {"id": job_id, "state": "pending"}

    @v1.post("/jobs/{job_id}/preempt")
    async def preempt(job_id: JobId, p: Principal = Depends(who)) -> dict[str, Any]:
        """The stop handshake (its stop signal, its grace, then SIGKILL); once it has exited
        it waits again in its old place in the queue, and resumes from its checkpoint."""
        daemon.preempt(_own(p, job_id, "preempt"))
        return {"id": job_id, "state": str(daemon.job_state(job_id))}

    @v1.post("/jobs/{job_id}/requeue")
    async def requeue(job_id: JobId, p: Principal = Depends(who)) -> dict[str, Any]:
        """A running job is stopped and queued again; an ended one is submitted anew."""
        row = daemon.store.get_job(_own(p, job_id, "requeue"))
        state = daemon.job_state(job_id)
        if state.terminal:
            [new] = intake.submit([{**row.spec, "hold": False}], user=row.user,
                                  source=f"requeue of job {job_id}")
            return {"requeued": job_id, "job": _view(new)}
        daemon.requeue(job_id)
        return {"requeued": job_id, "job": _view(daemon.store.get_job(job_id))}

    @v1.get("/jobs/{job_id}/wait")
    async def wait(job_id: JobId, timeout: float | None = Query(None, gt=0)) -> dict[str, Any]:
        state = await daemon.wait_for_end(_job_id(job_id), timeout)
        row = daemon.store.get_job(job_id)
        return {"id": job_id, "state": str(state), "exit_code": row.exit_code,
                "done": state.terminal}

    @v1.get("/jobs/{job_id}/logs")
    async def logs(job_id: JobId, offset: int = Query(0, ge=0, le=MAX_ID),
                   limit: int = Query(1 << 20, ge=1, le=16 << 20),
                   follow: bool = False, p: Principal = Depends(who)) -> Any:
        path = _log_path(_own(p, job_id, "read the logs of"))
        if not follow:
            data = read_range(path, offset, limit)
            return JSONResponse({"offset": offset, "next": offset + len(data),
                                 "data": data.decode("utf-8", "replace")})
        chunks = (data async for _, data in follow_log(path, offset, _ended(job_id)))
        return StreamingResponse(chunks, media_type="text/plain")

    @v1.get("/jobs/{job_id}/logs/stream", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}},
                             "description": "server-sent events: `log`, then `end`"}})
    async def log_events(job_id: JobId, offset: int = Query(0, ge=0, le=MAX_ID),
                         last_event_id: str | None = Header(None),
                         p: Principal = Depends(who)) -> StreamingResponse:
        """The log as server-sent events that follow the job until it ends. A client
        that reconnects with ``Last-Event-ID`` resumes where it left off."""
        path = _log_path(_own(p, job_id, "read the logs of"))
        if last_event_id is not None:
            if not last_event_id.isdigit() or int(last_event_id) > MAX_ID:
                raise InvalidSpec(f"Last-Event-ID: {last_event_id[:40]!r} is not a byte "
                                  "offset", field="Last-Event-ID")
            offset = int(last_event_id)

        def end() -> dict[str, Any]:
            row = daemon.store.get_job(job_id)
            return {"id": job_id, "state": str(daemon.job_state(job_id)),
                    "exit_code": row.exit_code, "end_reason": row.end_reason}

        return StreamingResponse(log_sse(path, offset, _ended(job_id), end),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store",
                                          "X-Accel-Buffering": "no"})

    def _ended(job_id: int) -> Callable[[], bool]:
        return lambda: daemon.job_state(job_id).terminal

    def _log_path(job_id: JobId) -> Path:
        _job_id(job_id)
        # the path is built from the integer id only: no client text reaches the filesystem
        return daemon.settings.logs_dir / f"{int(job_id)}.log"

    @v1.get("/gpus")
    async def gpus() -> dict[str, Any]:
        return {"devices": daemon.devices.kind, "gpus": gpu_views(daemon),
                "draining": daemon.draining}

    @v1.post("/gpus/{index}/pause")
    async def pause(index: GpuIndex, p: Principal = Depends(who)) -> dict[str, Any]:
        p.require_admin("pausing a GPU")
        daemon.set_paused(index, True)
        return {"index": index, "paused": True}

    @v1.post("/gpus/{index}/resume")
    async def resume(index: GpuIndex, p: Principal = Depends(who)) -> dict[str, Any]:
        p.require_admin("resuming a GPU")
        daemon.set_paused(index, False)
        return {"index": index, "paused": False}

    @v1.post("/gpus/{index}/simulate")
    async def simulate(index: GpuIndex, body: SimulateBody,
                       p: Principal = Depends(who)) -> dict[str, Any]:
        p.require_admin("injecting GPU faults")
        dev: Any = daemon.devices
        if daemon.devices.kind != "simulated":
            raise InvalidSpec("only simulated GPUs take injected faults", field="devices")
        if body.present is False:
            dev.remove(index)
        elif body.present is True:
            dev.restore(index)
        if body.healthy is not None:
            dev.set_health(index, body.healthy)
        if body.external_mem is not None or body.external_util is not None:
            dev.set_external(index, body.external_mem or 0, body.external_util or 0.0)
        if daemon.read_devices():
            daemon.kick()
        daemon.kick()
        return {"index": index, "ok": True}

    @v1.post("/drain")
    async def drain(on: bool = True, p: Principal = Depends(who)) -> dict[str, Any]:
        p.require_admin("draining the machine")
        daemon.set_draining(on)
        return {"draining": on}

    @v1.get("/queue")
    async def queue() -> dict[str, Any]:
        return {"counts": daemon.store.count_by_state(), "pending": len(daemon.queue),
                "running": len(daemon.running),
                "reservations": [{"job": r.job_id, "gpus": list(r.gpu_indices)}
                                 for r in daemon.last_plan.reservations]}

    @v1.get("/summary")
    async def summary() -> dict[str, Any]:
        """Counts by state, and GPU-hours used by user and by project."""
        return {"counts": daemon.store.count_by_state(),
                "gpu_hours": daemon.store.gpu_hours(now=daemon.clock())}

    @v1.get("/whoami")
    async def whoami(p: Principal = Depends(who)) -> dict[str, Any]:
        return {"user": p.user, "admin": p.admin, "via": p.via}

    @v1.get("/users")
    async def users(p: Principal = Depends(who)) -> dict[str, Any]:
        p.require_admin("listing users")
        return {"users": [{"name": u.name, "admin": u.admin, "created_at": u.created_at}
                          for u in daemon.store.users()]}

    @v1.post("/users", status_code=201)
    async def add_user(body: UserBody, p: Principal = Depends(who)) -> dict[str, Any]:
        p.require_admin("adding users")
        u = daemon.store.add_user(check_user_name(body.name), admin=body.admin,
                                  now=daemon.clock())
        return {"name": u.name, "admin": u.admin, "created_at": u.created_at}

    def _token_view(t: Any) -> dict[str, Any]:
        return {"id": t.id, "user": t.user, "prefix": t.prefix, "note": t.note,
                "created_at": t.created_at, "last_used_at": t.last_used_at,
                "revoked_at": t.revoked_at}

    @v1.get("/tokens")
    async def tokens(p: Principal = Depends(who)) -> dict[str, Any]:
        rows = daemon.store.tokens(None if p.admin else p.user)
        return {"tokens": [_token_view(t) for t in rows]}

    @v1.post("/tokens", status_code=201)
    async def create_token(body: TokenBody, p: Principal = Depends(who)) -> dict[str, Any]:
        """The token itself is in this answer only; the store keeps its SHA-256."""
        user = body.user or p.user
        if user != p.user:
            p.require_admin(f"creating a token for {user!r}")
        token = new_token()
        row = daemon.store.add_token(user, digest=token_digest(token),
                                     prefix=token[:12], note=body.note, now=daemon.clock())
        return {**_token_view(row), "token": token}

    @v1.post("/tokens/{token_id}/revoke")
    async def revoke_token(token_id: RowId, p: Principal = Depends(who)) -> dict[str, Any]:
        row = daemon.store.token(token_id)
        if row.user != p.user:
            p.require_admin("revoking another user's token")
        if row.revoked_at is not None:
            raise Conflict(f"token {token_id} is already revoked")
        daemon.store.revoke_token(token_id, now=daemon.clock())
        auth.forget()
        return _token_view(daemon.store.token(token_id))

    def _secret_owner(p: Principal, user: str | None, what: str) -> str:
        owner = user or p.user
        if owner != p.user:
            p.require_admin(f"{what} of {owner!r}")
        return owner

    @v1.get("/secrets")
    async def secrets_list(user: str | None = None,
                           p: Principal = Depends(who)) -> dict[str, Any]:
        """Names and dates only: no answer ever carries a secret's value."""
        owner = _secret_owner(p, user, "listing the secrets")
        return {"user": owner, "secrets": [
            {"name": n, "created_at": c, "updated_at": u}
            for n, c, u in daemon.store.secret_list(owner)]}

    @v1.put("/secrets/{name}")
    async def secret_put(name: SecretName, body: SecretBody,
                         p: Principal = Depends(who)) -> dict[str, Any]:
        owner = _secret_owner(p, body.user, "setting a secret")
        created = daemon.secrets.put(owner, name, body.value)
        return {"user": owner, "name": name, "created": created}

    @v1.delete("/secrets/{name}")
    async def secret_delete(name: SecretName, user: str | None = None,
                            p: Principal = Depends(who)) -> dict[str, Any]:
        owner = _secret_owner(p, user, "deleting a secret")
        daemon.secrets.delete(owner, check_secret_name(name))
        return {"user": owner, "name": name, "deleted": True}

    @v1.get("/sessions")
    async def sessions() -> dict[str, Any]:
        out = []
        for r in daemon.running.values():
            if r.handle is not None and r.backend.capabilities.attachable:
                out.append({"job": r.job_id, "session": r.handle.session_name,
                            "backend": r.handle.backend, "gpus": list(r.gpus),
                            "attach": r.backend.attach_argv(r.handle)})
        return {"sessions": out}

    @v1.get("/jobs/{job_id}/attach")
    async def attach(job_id: JobId, p: Principal = Depends(who)) -> dict[str, Any]:
        run = daemon.running.get(_own(p, job_id, "attach to"))
        if run is None or run.handle is None:
            raise NotFound(f"job {job_id} is not running")
        argv = run.backend.attach_argv(run.handle)
        if argv is None:
            raise InvalidSpec(f"job {job_id} runs without a session; submit it with "
                              "--session tmux or --session screen to attach", field="session")
        return {"argv": argv}

    @v1.get("/jobsfile")
    async def jobsfile() -> dict[str, Any]:
        return vars(intake.jobs_file)

    @v1.post("/jobsfile/reload")
    async def jobsfile_reload(p: Principal = Depends(who)) -> dict[str, Any]:
        p.require_admin("reloading the jobs file")
        return vars(intake.poll_jobs_file(force=True))

    @v1.get("/stats")
    async def stats() -> dict[str, Any]:
        p = sorted(daemon.pass_seconds)
        return {"passes": len(p), "pass_p50_ms": 1000 * p[len(p) // 2] if p else None,
                "pass_max_ms": 1000 * p[-1] if p else None}

    @v1.post("/shutdown")
    async def shutdown(p: Principal = Depends(who)) -> dict[str, Any]:
        p.require_admin("stopping the daemon")
        if on_shutdown is not None:
            asyncio.get_running_loop().call_soon(on_shutdown)
        return {"stopping": True}

    app.include_router(v1)
    mount_dashboard(app)
    return app


def tcp_app(app: Any) -> Any:
    """The same app for the TCP listener: its requests are marked so they need a token."""
    async def marked(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = {**scope, VIA_KEY: "tcp"}
        await app(scope, receive, send)
    return marked

