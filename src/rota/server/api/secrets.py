"""Users' stored secrets: names and dates out, values in only (rota.server.access.secrets)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from rota.answers import SecretDeletedAnswer, SecretsAnswer, SecretSetAnswer
from rota.server.access.auth import Principal, UserNameText
from rota.server.access.secrets import MAX_VALUE_BYTES
from rota.server.api._shared import Caller, CommandsPort, Json, ReadsPort, SecretName
from rota.server.api.problems import errors

_NAME = r"^[a-z_][a-z0-9_.-]{0,63}$"
_OWNER = Query(None, pattern=_NAME, description="whose secrets (default: the caller's; "
                                               "another user's needs an admin)")


class SecretBody(BaseModel):
    value: str = Field(min_length=1, max_length=MAX_VALUE_BYTES, repr=False,
                       description=f"at most {MAX_VALUE_BYTES} bytes as UTF-8")
    user: UserNameText | None = Field(
        default=None, description="default: the caller; another user's needs an admin")


def _owner(p: Principal, user: str | None, what: str) -> str:
    owner = user or p.user
    if owner != p.user:
        p.require_admin(f"{what} of {owner!r}")
    return owner


router = APIRouter(prefix="/v1")  # in the route templates (metrics labels)


@router.get("/secrets", responses=errors(401, 403, 422, 503))
async def secrets_list(p: Caller, reads: ReadsPort,
                       user: str | None = _OWNER) -> Annotated[Json, SecretsAnswer]:
    """Names and dates only: no answer ever carries a secret's value."""
    owner = _owner(p, user, "listing the secrets")
    return {"user": owner, "secrets": [
        {"name": n, "created_at": c, "updated_at": u}
        for n, c, u in reads.store.secret_list(owner)]}


@router.put("/secrets/{name}", responses=errors(400, 401, 403, 422, 503))
async def secret_put(name: SecretName, body: SecretBody, p: Caller,
                     commands: CommandsPort) -> Annotated[Json, SecretSetAnswer]:
    owner = _owner(p, body.user, "setting a secret")
    created = commands.put_secret(owner, name, body.value)
    return {"user": owner, "name": name, "created": created}


@router.delete("/secrets/{name}", responses=errors(401, 403, 404, 422, 503))
async def secret_delete(name: SecretName, p: Caller, commands: CommandsPort,
                        user: str | None = _OWNER) -> Annotated[Json, SecretDeletedAnswer]:
    owner = _owner(p, user, "deleting a secret")
    commands.delete_secret(owner, name)
    return {"user": owner, "name": name, "deleted": True}

