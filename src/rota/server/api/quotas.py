"""Quotas and budgets (rota.core.quota): anyone reads their own (and projects'); only an
admin sets, lifts or removes one."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field, StrictBool, field_validator

from rota.answers import QuotaAnswer, QuotaChangedAnswer, QuotasAnswer
from rota.core.quota import Quota
from rota.errors import NotFound
from rota.server.api._shared import Caller, CommandsPort, Json, ReadsPort
from rota.server.api.problems import errors
from rota.server.policy.quotas import quota_views

Kind = Literal["user", "project"]
What = Literal["gpus", "gpu_hours", "money"]
OwnerName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$",
                                 description="a user's or a project's name")]
MAX_LIMIT = 1e12


class _QuotaFields(BaseModel):
    kind: Kind
    name: OwnerName
    limit: float = Field(gt=0, le=MAX_LIMIT, allow_inf_nan=False)


class GpusQuotaBody(_QuotaFields):
    """GPUs held at once: no period, never a hard budget (the schema says so, so that a
    request the schema allows is never refused)."""

    what: Literal["gpus"]
    period: Literal["none"] = Field("none", description="a GPUs-at-once quota has no period")
    hard: StrictBool = Field(False, description="only GPU-hours and money can be hard",
                             json_schema_extra={"const": False})

    @field_validator("hard")
    @classmethod
    def _never_hard(cls, v: bool) -> bool:
        if v:
            raise ValueError("only a GPU-hours or money quota can be a hard budget")
        return v


class UsageQuotaBody(_QuotaFields):
    what: Literal["gpu_hours", "money"]
    period: Literal["none", "day", "week", "month"] = "none"
    hard: StrictBool = False


QuotaBody = Annotated[GpusQuotaBody | UsageQuotaBody, Field(discriminator="what")]


class LiftBody(BaseModel):
    kind: Kind
    name: OwnerName
    what: What | None = None  # None: every quota of the owner
    seconds: float = Field(gt=0, le=366 * 86400, allow_inf_nan=False,
                           description="how long the quota is not enforced")


router = APIRouter(prefix="/v1")  # in the route templates (metrics labels)


@router.get("/quotas", responses=errors(401, 503))
async def list_quotas(p: Caller, reads: ReadsPort) -> Annotated[Json, QuotasAnswer]:
    """An admin sees every quota; anyone else their own and the projects'."""
    quotas = [q for q in reads.store.quotas()
              if p.admin or q.kind == "project" or q.name == p.user]
    return {"quotas": quota_views(reads.store, quotas, reads.now())}


@router.put("/quotas", responses=errors(400, 401, 403, 422, 503))
async def set_quota(body: QuotaBody, p: Caller, reads: ReadsPort,
                    commands: CommandsPort) -> Annotated[Json, QuotaAnswer]:
    """Set (or replace) the owner's quota on that measure."""
    p.require_admin("setting a quota")
    quota = Quota(body.kind, body.name, body.what, body.period, body.limit, body.hard)
    commands.set_quota(quota, by=p.user)
    return quota_views(reads.store, [quota], reads.now())[0]


@router.post("/quotas/lift", responses=errors(400, 401, 403, 404, 422, 503))
async def lift_quota(body: LiftBody, p: Caller, reads: ReadsPort,
                     commands: CommandsPort) -> Annotated[Json, QuotaChangedAnswer]:
    """Stop enforcing the owner's quota (or all of them) for a while."""
    p.require_admin("lifting a quota")
    n = commands.lift_quota(body.kind, body.name, body.what,
                            until=reads.now() + body.seconds)
    return {"changed": _found(n, body.kind, body.name, body.what)}


@router.delete("/quotas", responses=errors(401, 403, 404, 422, 503))
async def remove_quota(p: Caller, commands: CommandsPort, kind: Kind,
                       name: Annotated[str, Query(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")],
                       what: What | None = None) -> Annotated[Json, QuotaChangedAnswer]:
    p.require_admin("removing a quota")
    return {"changed": _found(commands.remove_quota(kind, name, what), kind, name, what)}


def _found(n: int, kind: str, name: str, what: str | None) -> int:
    if not n:
        raise NotFound(f"{kind} {name} has no {what or ''} quota".replace("  ", " "))
    return n
