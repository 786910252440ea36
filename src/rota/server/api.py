"""The HTTP API (/v1), served on the daemon's Unix socket.

Handlers are coroutines so they run on the loop thread: the daemon stays the single writer.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field

from rota import __version__
from rota.core.lifecycle import JobState
from rota.errors import InvalidSpec, NotFound, RotaError
from rota.server.daemon import Daemon
from rota.server.intake import Intake
from rota.server.views import attempt_view, event_view, gpu_views, job_view

PROBLEM = "application/problem+json"


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


def problem(status: int, title: str, detail: str, field: str | None = None) -> JSONResponse:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    if field:
        body["field"] = field
    return JSONResponse(body, status_code=status, media_type=PROBLEM)


def build_app(daemon: Daemon, intake: Intake, *, on_shutdown: Any = None) -> FastAPI:
    app = FastAPI(title="Rota", version=__version__, docs_url=None, redoc_url=None)

    @app.exception_handler(RotaError)
    async def _rota_error(_: Request, e: RotaError) -> JSONResponse:
        return problem(e.http_status, type(e).__name__, str(e), getattr(e, "field", None))

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_: Request, e: RequestValidationError) -> JSONResponse:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"] if x != "body")
        return problem(422, "InvalidRequest", f"{loc}: {err['msg']}", loc)

    def _job_id(job_id: int) -> int:
        daemon.job_state(job_id)  # NotFound if unknown
        return job_id

    @app.get("/v1/health")
    async def health() -> dict[str, Any]:
        return {"ok": True, "version": __version__, "pid": os.getpid(),
                "devices": daemon.devices.kind, "gpus": len(daemon.readings),
                "pending": len(daemon.queue), "running": len(daemon.running),
                "draining": daemon.draining}

    @app.post("/v1/jobs", status_code=201)
    async def submit(body: SubmitBody) -> dict[str, Any]:
        rows = intake.submit(body.jobs, user=body.user or daemon.settings.user, source="api",
                             idempotency_key=body.idempotency_key, dedup=body.dedup)
        return {"jobs": [job_view(daemon, r) for r in rows]}

    @app.get("/v1/jobs")
    async def list_jobs(state: list[str] = Query(default=[]), user: str | None = None,
                        name: str | None = None, limit: int = Query(200, ge=1, le=10000),
                        before: int | None = None) -> dict[str, Any]:
        for s in state:
            if s not in JobState.__members__.values():
                raise InvalidSpec(f"state: {s!r} is not one of "
                                  f"{[x.value for x in JobState]}", field="state")
        rows = daemon.store.list_jobs(states=state or None, user=user, name=name, limit=limit,
                                      before_id=before)
        nxt = rows[-1].id if len(rows) == limit else None
        return {"jobs": [job_view(daemon, r) for r in rows], "next": nxt}

    @app.get("/v1/jobs/{job_id}")
    async def get_job(job_id: int) -> dict[str, Any]:
        row = daemon.store.get_job(job_id)
        out = job_view(daemon, row, detail=True)
        out["attempts_detail"] = [attempt_view(a) for a in daemon.store.attempts(job_id)]
        return out

    @app.get("/v1/jobs/{job_id}/events")
    async def events(job_id: int) -> dict[str, Any]:
        return {"events": [event_view(e) for e in daemon.store.events(_job_id(job_id))]}

    @app.get("/v1/jobs/{job_id}/why")
    async def why(job_id: int) -> dict[str, Any]:
        row = daemon.store.get_job(job_id)
        view = job_view(daemon, row)
        state = view["state"]
        if "reason" in view:
            return {"id": job_id, "state": state, **view["reason"]}
        if state in ("running", "starting"):
            msg = f"it is {state} on GPUs {view['gpu_indices'] or 'none (CPU only)'}"
        else:
            msg = f"it is {state}" + (f": {row.end_reason}" if row.end_reason else "")
        return {"id": job_id, "state": state, "code": state, "message": msg}

    @app.post("/v1/jobs/{job_id}/cancel")
    async def cancel(job_id: int) -> dict[str, Any]:
        return {"id": job_id, "state": str(daemon.cancel(job_id))}

    @app.post("/v1/jobs/{job_id}/hold")
    async def hold(job_id: int) -> dict[str, Any]:
        daemon.hold(job_id)
        return {"id": job_id, "state": "held"}

    @app.post("/v1/jobs/{job_id}/release")
    async def release(job_id: int) -> dict[str, Any]:
        daemon.release(job_id)
        return {"id": job_id, "state": "pending"}

    @app.get("/v1/jobs/{job_id}/wait")
    async def wait(job_id: int, timeout: float | None = Query(None, gt=0)) -> dict[str, Any]:
        state = await daemon.wait_for_end(_job_id(job_id), timeout)
        row = daemon.store.get_job(job_id)
        return {"id": job_id, "state": str(state), "exit_code": row.exit_code,
                "done": state.terminal}

    @app.get("/v1/jobs/{job_id}/logs")
    async def logs(job_id: int, offset: int = Query(0, ge=0),
                   limit: int = Query(1 << 20, ge=1, le=16 << 20),
                   follow: bool = False) -> Any:
        path = _log_path(job_id)
        if not follow:
            data = _read(path, offset, limit)
            return JSONResponse({"offset": offset, "next": offset + len(data),
                                 "data": data.decode("utf-8", "replace")})
        return StreamingResponse(_follow(job_id, path, offset), media_type="text/plain")

    def _log_path(job_id: int) -> Path:
        _job_id(job_id)
        # the path is built from the integer id only: no client text reaches the filesystem
        return daemon.settings.logs_dir / f"{int(job_id)}.log"

    async def _follow(job_id: int, path: Path, offset: int) -> AsyncIterator[bytes]:
        while True:
            data = _read(path, offset, 1 << 20)
            if data:
                offset += len(data)
                yield data
                continue
            if daemon.job_state(job_id).terminal:
                return
            await asyncio.sleep(0.2)

    @app.get("/v1/gpus")
    async def gpus() -> dict[str, Any]:
        return {"devices": daemon.devices.kind, "gpus": gpu_views(daemon),
                "draining": daemon.draining}

    @app.post("/v1/gpus/{index}/pause")
    async def pause(index: int) -> dict[str, Any]:
        daemon.set_paused(index, True)
        return {"index": index, "paused": True}

    @app.post("/v1/gpus/{index}/resume")
    async def resume(index: int) -> dict[str, Any]:
        daemon.set_paused(index, False)
        return {"index": index, "paused": False}

    @app.post("/v1/gpus/{index}/simulate")
    async def simulate(index: int, body: SimulateBody) -> dict[str, Any]:
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

    @app.post("/v1/drain")
    async def drain(on: bool = True) -> dict[str, Any]:
        daemon.set_draining(on)
        return {"draining": on}

    @app.get("/v1/queue")
    async def queue() -> dict[str, Any]:
        return {"counts": daemon.store.count_by_state(), "pending": len(daemon.queue),
                "running": len(daemon.running),
                "reservations": [{"job": r.job_id, "gpus": list(r.gpu_indices)}
                                 for r in daemon.last_plan.reservations]}

    @app.get("/v1/sessions")
    async def sessions() -> dict[str, Any]:
        out = []
        for r in daemon.running.values():
            if r.handle is not None and r.backend.capabilities.attachable:
                out.append({"job": r.job_id, "session": r.handle.session_name,
                            "backend": r.handle.backend, "gpus": list(r.gpus),
                            "attach": r.backend.attach_argv(r.handle)})
        return {"sessions": out}

    @app.get("/v1/jobs/{job_id}/attach")
    async def attach(job_id: int) -> dict[str, Any]:
        run = daemon.running.get(_job_id(job_id))
        if run is None or run.handle is None:
            raise NotFound(f"job {job_id} is not running")
        argv = run.backend.attach_argv(run.handle)
        if argv is None:
            raise InvalidSpec(f"job {job_id} runs without a session; submit it with "
                              "--session tmux or --session screen to attach", field="session")
        return {"argv": argv}

    @app.get("/v1/jobsfile")
    async def jobsfile() -> dict[str, Any]:
        return vars(intake.jobs_file)

    @app.post("/v1/jobsfile/reload")
    async def jobsfile_reload() -> dict[str, Any]:
        return vars(intake.poll_jobs_file(force=True))

    @app.get("/v1/stats")
    async def stats() -> dict[str, Any]:
        p = sorted(daemon.pass_seconds)
        return {"passes": len(p), "pass_p50_ms": 1000 * p[len(p) // 2] if p else None,
                "pass_max_ms": 1000 * p[-1] if p else None}

    @app.post("/v1/shutdown")
    async def shutdown() -> dict[str, Any]:
        if on_shutdown is not None:
            asyncio.get_running_loop().call_soon(on_shutdown)
        return {"stopping": True}

    return app


def _read(path: Path, offset: int, limit: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(limit)
    except FileNotFoundError:
        return b""
