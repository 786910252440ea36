"""GPUs: what each holds, pausing one, and faults injected into simulated ones."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter
from pydantic import BaseModel, Field, StrictBool, field_validator

from rota.answers import GpuPausedAnswer, GpusAnswer, SimulateAnswer
from rota.server.api._shared import Caller, CommandsPort, GpuIndex, Json, ReadsPort
from rota.server.api.problems import errors
from rota.server.ports import Fault


class SimulateBody(BaseModel):
    healthy: StrictBool | None = None
    present: StrictBool | None = None
    external_mem: int | None = Field(default=None, ge=0, le=1 << 50,
                                      description="bytes used by processes Rota did not start")
    external_util: float | None = Field(default=None, ge=0, le=1,
                                        description="their share of the GPU's compute")
    utilization: float | None = Field(default=None, ge=0, le=1,
                                      description="report this utilisation whatever runs "
                                                  "there (present=true: follow jobs again)")

    @field_validator("external_mem", "external_util", "utilization", mode="before")
    @classmethod
    def _not_bool(cls, v: Any) -> Any:
        if isinstance(v, bool):  # JSON's true is not a number (pydantic would take it as 1)
            raise ValueError("a number, not true or false")
        return v


router = APIRouter(prefix="/v1")  # in the route templates (metrics labels)


@router.get("/gpus", responses=errors(401, 503))
async def gpus(reads: ReadsPort) -> Annotated[Json, GpusAnswer]:
    return reads.gpus()


@router.post("/gpus/{index}/pause", responses=errors(401, 403, 404, 422, 503))
async def pause(index: GpuIndex, p: Caller,
                commands: CommandsPort) -> Annotated[Json, GpuPausedAnswer]:
    """The GPU takes no new job; what runs there goes on."""
    p.require_admin("pausing a GPU")
    commands.set_paused(index, True)
    return {"index": index, "paused": True}


@router.post("/gpus/{index}/resume", responses=errors(401, 403, 404, 422, 503))
async def resume(index: GpuIndex, p: Caller,
                 commands: CommandsPort) -> Annotated[Json, GpuPausedAnswer]:
    p.require_admin("resuming a GPU")
    commands.set_paused(index, False)
    return {"index": index, "paused": False}


@router.post("/gpus/{index}/simulate", responses=errors(400, 401, 403, 404, 409, 422, 503))
async def simulate(index: GpuIndex, body: SimulateBody,
                   p: Caller, commands: CommandsPort) -> Annotated[Json, SimulateAnswer]:
    """Inject a fault into a simulated GPU (409 on real GPUs, 404 for an index the
    simulation does not have)."""
    p.require_admin("injecting GPU faults")
    commands.simulate(index, Fault(healthy=body.healthy, present=body.present,
                                   external_mem=body.external_mem,
                                   external_util=body.external_util,
                                   utilization=body.utilization))
    return {"index": index, "ok": True}

