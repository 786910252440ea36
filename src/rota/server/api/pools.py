"""Pools: where jobs can run (this machine and the clusters rota.toml declares), and what a
pool's engine would be handed for a job."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from rota.answers import PoolsAnswer, RenderAnswer
from rota.server.api._shared import Caller, JobId, Json, ReadsPort, own
from rota.server.problems import errors

router = APIRouter(prefix="/v1")  # in the route templates (metrics labels)


@router.get("/pools", responses=errors(401, 503))
async def pools(reads: ReadsPort) -> Annotated[Json, PoolsAnswer]:
    """Every pool, the default first, with its engine's capabilities and health as the
    engine reports them (engines are asked at once, each for at most 10 s)."""
    return await reads.pools()


@router.get("/jobs/{job_id}/render", responses=errors(401, 403, 404, 409, 422, 503))
async def render(job_id: JobId, p: Caller, reads: ReadsPort,
                 pool: str | None = Query(None, pattern=r"^[a-z][a-z0-9-]{0,39}$",
                                          description="default: the default pool"),
                 ) -> Annotated[Json, RenderAnswer]:
    """What the pool's engine would be handed for the job's next attempt: an sbatch
    script, a Ray job, Kubernetes manifests. Secret values never appear. 404: no such
    job or pool; 409: the pool cannot take the job as it is (the sentence says why)."""
    return await reads.render(own(reads, p, job_id, "render"), pool)
