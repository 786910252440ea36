"""Workspaces (rota.server.storage.workspaces): their sizes and quotas; an admin sets a quota."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import BaseModel, Field

from rota.answers import CleanupDoneAnswer, CleanupPlanAnswer, WorkspaceAnswer, WorkspacesAnswer
from rota.errors import NotFound
from rota.server.access.auth import Principal
from rota.server.api._shared import Caller, CommandsPort, Json, ReadsPort
from rota.server.api.problems import errors

router = APIRouter(prefix="/v1")  # in the route templates (metrics labels)

_NAME = r"^[a-z_][a-z0-9_.-]{0,63}/[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


class QuotaBody(BaseModel):
    name: str = Field(pattern=_NAME, description="USER/PROJECT (default: a job without a "
                                                 "project's)")
    # (2**53: what a JSON number holds exactly, so every client reads the bound alike)
    limit: int | None = Field(default=None, gt=0, le=(1 << 53) - 1,
                              description="bytes (under 8 PiB); none: back to the default "
                                          "quota")


@router.get("/workspaces", responses=errors(401, 422, 503))
async def workspaces_list(p: Caller, reads: ReadsPort) -> Annotated[Json, WorkspacesAnswer]:
    """The caller's workspaces (an admin's: everyone's), each with its size as last
    measured and its quota."""
    return {"workspaces": reads.workspaces(None if p.admin else p.user),
            "default_quota": reads.workspace_default_quota()}


@router.put("/workspaces/quota", responses=errors(400, 401, 403, 404, 422, 503))
async def workspace_quota(body: QuotaBody, p: Caller, reads: ReadsPort,
                          commands: CommandsPort) -> Annotated[Json, WorkspaceAnswer]:
    """An admin sets a workspace's own quota (or drops it, back to the default)."""
    p.require_admin(f"setting the quota of workspace {body.name}")
    commands.set_workspace_quota(body.name, body.limit, by=p.user)
    found = [w for w in reads.workspaces(None) if w["name"] == body.name]
    if not found:
        raise NotFound(f"no workspace {body.name} yet: it is made at its first job's "
                       "launch (its quota is kept for then)")
    return found[0]


class CleanBody(BaseModel):
    name: str = Field(pattern=_NAME, description="USER/PROJECT")
    days: float | None = Field(default=None, gt=0, le=36500, description="files untouched "
                               "(neither modified nor read) for this many days; default: "
                               "[storage] cleanup_days")


def _may_clean(p: Principal, name: str) -> None:
    if name.partition("/")[0] != p.user:
        p.require_admin(f"cleaning workspace {name}")


@router.post("/workspaces/clean", responses=errors(400, 401, 403, 404, 422, 503))
async def workspace_clean_plan(body: CleanBody, p: Caller, reads: ReadsPort
                               ) -> Annotated[Json, CleanupPlanAnswer]:
    """A dry run: the files of the workspace untouched for ``days``, kept as a plan that
    ``.../clean/{plan}/apply`` carries out (removing nothing else). Its owner's or an
    admin's."""
    _may_clean(p, body.name)
    return await reads.cleanup_plan(body.name, body.days)


@router.post("/workspaces/clean/{plan}/apply", responses=errors(401, 403, 404, 422, 503))
async def workspace_clean_apply(p: Caller, commands: CommandsPort, reads: ReadsPort,
                                plan: str = Path(pattern=r"^[a-f0-9]{8,32}$"),
                                ) -> Annotated[Json, CleanupDoneAnswer]:
    """Remove the files the plan listed that are still as it saw them; those changed or
    moved since are kept and named."""
    _may_clean(p, reads.cleanup_workspace_of(plan))
    return await commands.apply_cleanup(plan)
