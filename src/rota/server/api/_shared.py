"""What every router of the API shares: path parameter types, the caller's identity, and
the ownership check."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Path as PathParam

from rota.server.auth import Principal
from rota.server.job_reads import MAX_ID, JobId
from rota.server.ports import Reads

__all__ = ["MAX_ID", "GpuIndex", "JobId", "RowId", "SecretName", "UserName", "Who", "own"]

RowId = Annotated[int, PathParam(ge=1, le=MAX_ID)]
GpuIndex = Annotated[int, PathParam(ge=0, le=1023, description="a GPU's index")]
#: like an environment variable's name (rota.core.spec.check_secret_name)
SecretName = Annotated[str, PathParam(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,99}$",
                                      description="like an environment variable's name")]
#: a user's name (rota.server.auth.check_user_name)
UserName = Annotated[str, PathParam(pattern=r"^[a-z_][a-z0-9_.-]{0,63}$",
                                    description="a user's name")]
#: the dependency that says who is asking (see rota.server.auth)
Who = Callable[..., Awaitable[Principal]]


def own(reads: Reads, p: Principal, job_id: int, what: str) -> int:
    """The job exists and the caller may change it or read its logs (its owner or an
    admin); NotFound or Forbidden otherwise."""
    p.require_owner(reads.store.get_job(job_id).user, f"{what} job {job_id}")
    return job_id
