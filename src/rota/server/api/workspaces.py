"""Workspaces (rota.server.workspaces): their sizes and quotas; an admin sets a quota."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter
from pydantic import BaseModel, Field

from rota.answers import WorkspaceAnswer, WorkspacesAnswer
from rota.errors import NotFound
from rota.server.api._shared import Caller, CommandsPort, Json, ReadsPort
from rota.server.problems import errors

router = APIRouter(prefix="/v1")  # in the route templates (metrics labels)

_NAME = r"^[a-z_][a-z0-9_.-]{0,63}/[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


class QuotaBody(BaseModel):
    name: str = Field(pattern=_NAME, description="USER/PROJECT (default: a job without a "
                                                 "project's)")
    limit: int | None = Field(default=None, gt=0, description="bytes; none: back to the "
                                                              "default quota")


@router.get("/workspaces", responses=errors(401, 422, 503))
async def workspaces_list(p: Caller, reads: ReadsPort) -> Annotated[Json, WorkspacesAnswer]:
    """The caller's workspaces (an admin's: everyone's), each with its size as last
    measured and its quota."""
    return {"workspaces": reads.workspaces(None if p.admin else p.user),
            "default_quota": reads.workspace_default_quota()}


@router.put("/workspaces/quota", responses=errors(401, 403, 404, 422, 503))
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
