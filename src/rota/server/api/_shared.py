"""What every router of the API shares: path parameter types, the ports and the caller's
identity as FastAPI dependencies, and the ownership check.

The routers are module-level: the ports reach their handlers through ``app.state``
(set by rota.server.api.build_app), so a router holds no state of its own. The
dependencies are coroutines: FastAPI would run plain functions in a thread, and the
handlers run on the loop thread, beside the daemon, the single writer."""

from __future__ import annotations

from typing import Annotated, Any, cast

from fastapi import Depends, Request
from fastapi import Path as PathParam

from rota.server.access.auth import VIA_HEADER, VIA_KEY, Principal
from rota.server.access.peer import scope_peer_uid
from rota.server.api.job_reads import MAX_ID, JobId
from rota.server.ports import Commands, Reads

__all__ = ["MAX_ID", "Caller", "CommandsPort", "GpuIndex", "JobId", "Json", "ReadsPort",
           "RowId", "SecretName", "UserName", "caller", "own"]

#: an answer as a route builds it; its return annotation names the TypedDict of
#: rota.answers it is, for the OpenAPI document (rota.server.api.answer_schemas)
Json = dict[str, Any]

RowId = Annotated[int, PathParam(ge=1, le=MAX_ID)]
GpuIndex = Annotated[int, PathParam(ge=0, le=1023, description="a GPU's index")]
#: like an environment variable's name (rota.core.job_secrets.check_secret_name)
SecretName = Annotated[str, PathParam(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,99}$",
                                      description="like an environment variable's name")]
#: a user's name (rota.server.access.auth.check_user_name)
UserName = Annotated[str, PathParam(pattern=r"^[a-z_][a-z0-9_.-]{0,63}$",
                                    description="a user's name")]


async def _reads(request: Request) -> Reads:
    return cast(Reads, request.app.state.reads)


async def _commands(request: Request) -> Commands:
    return cast(Commands, request.app.state.commands)


async def caller(request: Request) -> Principal:
    """Who is asking (see rota.server.access.auth): every /v1 call needs one."""
    via = request.scope.get(VIA_KEY, "socket")
    if via == "socket" and request.headers.get(VIA_HEADER) == "tcp":
        via = "tcp"  # forwarded by an API worker: the caller's token decides
    return (await _reads(request)).principal(via, request.headers.get("authorization"),
                                             scope_peer_uid(request.scope))


ReadsPort = Annotated[Reads, Depends(_reads)]
CommandsPort = Annotated[Commands, Depends(_commands)]
Caller = Annotated[Principal, Depends(caller)]


def own(reads: Reads, p: Principal, job_id: int, what: str) -> int:
    """The job exists and the caller may change it or read its logs (its owner or an
    admin); NotFound or Forbidden otherwise."""
    p.require_owner(reads.store.get_job(job_id).user, f"{what} job {job_id}")
    return job_id
