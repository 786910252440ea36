"""Pools: where jobs can run (this machine and the clusters rota.toml declares), and what a
pool's engine would be handed for a job, or for a spec before it is submitted."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi import Path as PathParam

from rota.answers import PoolsAnswer, RenderAnswer
from rota.core.spec import JobSpec
from rota.server.api._shared import Caller, JobId, Json, ReadsPort, own
from rota.server.api.problems import errors

router = APIRouter(prefix="/v1")  # in the route templates (metrics labels)

_POOL = r"^[a-z][a-z0-9-]{0,39}$"  # a pool's name (rota.pools)


@router.get("/pools", responses=errors(401, 503))
async def pools(reads: ReadsPort) -> Annotated[Json, PoolsAnswer]:
    """Every pool, the default first, with its engine's capabilities and health as the
    engine reports them (engines are asked at once, each for at most 10 s)."""
    return await reads.pools()


@router.get("/jobs/{job_id}/render", responses=errors(401, 403, 404, 409, 422, 503))
async def render(job_id: JobId, p: Caller, reads: ReadsPort,
                 pool: str | None = Query(None, pattern=_POOL,
                                          description="default: the default pool"),
                 ) -> Annotated[Json, RenderAnswer]:
    """What the pool's engine would be handed for the job's next attempt: an sbatch
    script, a Ray job, Kubernetes manifests. Secret values never appear. 404: no such
    job or pool; 409: the pool cannot take the job as it is (the sentence says why)."""
    return await reads.render(own(reads, p, job_id, "render"), pool)


@router.post("/pools/{name}/render", responses=errors(400, 401, 404, 409, 422, 503))
async def render_spec(name: Annotated[str, PathParam(pattern=_POOL, description="a pool")],
                      spec: JobSpec, p: Caller,
                      reads: ReadsPort) -> Annotated[Json, RenderAnswer]:
    """What the pool's engine would be handed for this spec were the caller to submit it
    (its first attempt, shown as job 0; ``id`` is null): nothing is stored or sent.
    404: no such pool; 409: the pool cannot take the spec as it is; 422: a bad spec."""
    return await reads.render_spec(spec, p.user, name)
