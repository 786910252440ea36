"""Fair share: each user's and project's share and usage, an admin setting a share, and a
waiting job's priority factors (rota.core.fairshare; docs/policy.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter
from fastapi import Path as PathParam
from pydantic import BaseModel, Field

from rota.answers import PriorityAnswer, SharesAnswer
from rota.server.api._shared import Caller, CommandsPort, JobId, Json, ReadsPort
from rota.server.api.problems import errors

router = APIRouter(prefix="/v1")

#: a user's name (rota.server.access.auth) or a project's (rota.core.spec: JobSpec.project)
AccountName = Annotated[str, PathParam(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}$",
                                       description="a user's or a project's name")]


class ShareBody(BaseModel):
    shares: float = Field(gt=0, le=1e6, allow_inf_nan=False, strict=True,
                          description="its shares (relative: 2 is twice one with 1)")


@router.get("/shares", responses=errors(401, 503))
async def shares(reads: ReadsPort) -> Annotated[Json, SharesAnswer]:
    """Every user and project with a share set or some usage within the horizon, with
    decayed usage, normalised share, fair-share factor and last day's and week's
    GPU-hours."""
    return reads.shares()


@router.put("/shares/{kind}/{name}", responses=errors(400, 401, 403, 422, 503))
async def set_share(kind: Literal["user", "project"], name: AccountName, body: ShareBody,
                    p: Caller, commands: CommandsPort,
                    reads: ReadsPort) -> Annotated[Json, SharesAnswer]:
    """Give a user or project a fair share (admins only); the shares back."""
    p.require_admin("setting fair shares")
    commands.set_share(kind, name, body.shares)
    return reads.shares()


@router.get("/jobs/{job_id}/priority", responses=errors(401, 404, 409, 422, 503))
async def priority(job_id: JobId, reads: ReadsPort) -> Annotated[Json, PriorityAnswer]:
    """A waiting job's priority factors (each 0..1), their weights and the weighted sum, as
    Slurm's sprio shows them; 409 for a job that is not waiting."""
    return reads.priority(job_id)
