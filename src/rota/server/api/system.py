"""The machine and the daemon: health, drain, queue and summary figures, sessions, the
jobs file, Prometheus metrics, shutdown; and the endpoints only the API workers use."""

from __future__ import annotations

import os
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from rota import __version__
from rota.answers import (
    DrainAnswer,
    HealthAnswer,
    JobsFileAnswer,
    QueueAnswer,
    SessionsAnswer,
    ShutdownAnswer,
    StatsAnswer,
    SummaryAnswer,
)
from rota.errors import NotFound
from rota.server.access.auth import VIA_HEADER, VIA_KEY
from rota.server.api._shared import MAX_ID, Caller, CommandsPort, Json, ReadsPort, caller
from rota.server.api.problems import errors
from rota.server.tracking.metrics import CONTENT_TYPE, REQUEST_BUCKETS, Totals

MAX_PAGE = 10_000


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


def _for_workers_only(request: Request) -> None:
    """The endpoints the API workers use answer on the socket only, to the workers."""
    if request.scope.get(VIA_KEY) == "tcp" or VIA_HEADER in request.headers:
        raise NotFound(f"no such endpoint: {request.url.path}")


router = APIRouter(prefix="/v1")  # in the route templates (metrics labels)


@router.get("/health", responses=errors(401))
async def health(reads: ReadsPort) -> Annotated[Json, HealthAnswer]:
    return {"ok": True, "version": __version__, "pid": os.getpid(), **reads.health()}


@router.post("/drain", responses=errors(401, 403, 422, 503))
async def drain(p: Caller, commands: CommandsPort,
                on: bool = Query(True, description="false ends draining"),
                ) -> Annotated[Json, DrainAnswer]:
    """Start no new job (running ones go on) until drained with on=false."""
    p.require_admin("draining the machine")
    commands.set_draining(on)
    return {"draining": on}


@router.get("/queue", responses=errors(401, 422, 503))
async def queue(reads: ReadsPort,
                limit: int = Query(0, ge=0, le=MAX_PAGE, description=(
                    "list this many waiting jobs (and held ones); 0: only the totals")),
                offset: int = Query(0, ge=0, le=MAX_ID, description=(
                    "skip this many waiting jobs (next_offset of the last page)")),
                counts: bool = Query(True, description=(
                    "false leaves out the counts per state, which read every job's "
                    "row: the rest reads only the jobs it lists")),
                ) -> Annotated[Json, QueueAnswer]:
    """The queue as the scheduler holds it: totals per state, the GPUs kept for a job
    that waits; with ``limit``, the jobs on GPUs, then the waiting jobs in the order
    they will start (priority, then submission; those that never can, last), each with
    why it waits, then the oldest held jobs."""
    answer = reads.queue(limit=limit, offset=offset, counts=counts)
    # counts first, where the answer has always had them
    return {"counts": answer.pop("counts"), **answer} if counts else answer


@router.get("/summary", responses=errors(401, 503))
async def summary(reads: ReadsPort) -> Annotated[Json, SummaryAnswer]:
    """Counts by state, and GPU-hours used by user and by project, and wasted holding
    idle GPUs by user."""
    return {"counts": reads.store.count_by_state(),
            "gpu_hours": {**reads.store.gpu_hours(now=reads.now()),
                          "idle_by_user": reads.store.idle_gpu_hours()}}


@router.get("/stats", responses=errors(401))
async def stats(reads: ReadsPort) -> Annotated[Json, StatsAnswer]:
    return reads.stats()


@router.get("/sessions", responses=errors(401))
async def sessions(reads: ReadsPort) -> Annotated[Json, SessionsAnswer]:
    return {"sessions": reads.sessions()}


@router.get("/jobsfile", responses=errors(401))
async def jobsfile(reads: ReadsPort) -> Annotated[Json, JobsFileAnswer]:
    return reads.jobs_file()


class ReloadBody(BaseModel):
    #: line numbers to run again although they ran before (`rota add --again`)
    again: list[Annotated[int, Field(ge=1, le=MAX_ID)]] = Field(default=[], max_length=10_000)


@router.post("/jobsfile/reload", responses=errors(400, 401, 403, 422, 503))
async def jobsfile_reload(p: Caller, commands: CommandsPort, body: ReloadBody | None = None,
                          ) -> Annotated[Json, JobsFileAnswer]:
    p.require_admin("reloading the jobs file")
    return commands.reload_jobs_file(again=body.again if body else [])


@router.post("/shutdown", responses=errors(401, 403))
async def shutdown(p: Caller, commands: CommandsPort) -> Annotated[Json, ShutdownAnswer]:
    """Stop the daemon; running jobs go on and are taken up again at its next start."""
    p.require_admin("stopping the daemon")
    commands.shutdown()
    return {"stopping": True}


@router.post("/live", include_in_schema=False)
async def live(body: LiveBody, request: Request, reads: ReadsPort) -> dict[str, Any]:
    """For the API workers: what the daemon's memory knows of these jobs (see
    rota.server.daemon_reads.live_facts), by id."""
    _for_workers_only(request)
    rows = list(reads.store.jobs(body.ids).values())
    facts = await reads.facts(rows)
    return {"facts": {str(row.id): f for row, f in zip(rows, facts, strict=True)}}


@router.post("/worker-requests", include_in_schema=False)
async def worker_requests(body: WorkerRequestsBody, request: Request,
                          commands: CommandsPort) -> dict[str, Any]:
    """For the API workers: the running totals of the requests a worker answered, for
    /metrics (see rota.server.tracking.metrics.WorkerRequests)."""
    _for_workers_only(request)
    commands.report_worker_requests(body.slot, body.pid, body.totals())
    return {"ok": True}



#: /metrics, outside /v1 (where Prometheus looks)
metrics_router = APIRouter()


@metrics_router.get("/metrics", dependencies=[Depends(caller)], include_in_schema=False)
async def metrics(reads: ReadsPort) -> Response:
    """Prometheus text format; over TCP a scraper sends a token like any client."""
    return Response(reads.metrics_text(), media_type=CONTENT_TYPE)
