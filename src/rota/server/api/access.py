"""Who may use the API: the caller (whoami), users, and their tokens."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field, StrictBool

from rota.answers import (
    NewTokenAnswer,
    TokenAnswer,
    TokensAnswer,
    UserAnswer,
    UserRemovedAnswer,
    UsersAnswer,
    WhoAmIAnswer,
)
from rota.server.access.auth import UserNameText
from rota.server.api._shared import Caller, CommandsPort, Json, ReadsPort, RowId, UserName
from rota.server.api.problems import errors
from rota.store.tables import TokenRow, UserRow


class UserBody(BaseModel):
    name: UserNameText = Field(description="1-64 lower-case letters, digits and . _ -, "
                                           "starting with a letter or _")
    admin: StrictBool = False
    unix_account: str | None = Field(default=None, pattern=r"^[a-z_][a-z0-9_.-]{0,31}$",
                                     description="the Unix account this user's jobs run as "
                                                 "(a root daemon starts them as it)")


class UserChange(BaseModel):
    """What to change; a key not sent stays as it is."""

    admin: StrictBool | None = Field(default=None, description="may act on every job and GPU")
    unix_account: str | None = Field(default=None, pattern=r"^[a-z_][a-z0-9_.-]{0,31}$",
                                     description="the Unix account this user's jobs run as "
                                                 "from now on (running ones stay as they "
                                                 "are); null: the daemon's own account again")


class TokenBody(BaseModel):
    user: UserNameText | None = Field(default=None, description="default: the caller")
    note: str | None = Field(default=None, max_length=200)


def _user_view(u: UserRow) -> dict[str, Any]:
    return {"name": u.name, "admin": u.admin, "created_at": u.created_at,
            "unix_account": u.unix_account}


def _token_view(t: TokenRow) -> dict[str, Any]:
    return {"id": t.id, "user": t.user, "prefix": t.prefix, "note": t.note,
            "created_at": t.created_at, "last_used_at": t.last_used_at,
            "revoked_at": t.revoked_at}


router = APIRouter(prefix="/v1")  # in the route templates (metrics labels)


@router.get("/whoami", responses=errors(401, 503))
async def whoami(p: Caller) -> Annotated[Json, WhoAmIAnswer]:
    return {"user": p.user, "admin": p.admin, "via": p.via}


@router.get("/users", responses=errors(401, 403, 503))
async def users(p: Caller, reads: ReadsPort) -> Annotated[Json, UsersAnswer]:
    p.require_admin("listing users")
    return {"users": [_user_view(u) for u in reads.store.users()]}


@router.post("/users", status_code=201, responses=errors(400, 401, 403, 409, 422, 503))
async def add_user(body: UserBody, p: Caller,
                   commands: CommandsPort) -> Annotated[Json, UserAnswer]:
    p.require_admin("adding users")
    u = commands.add_user(body.name, admin=body.admin, unix_account=body.unix_account)
    return _user_view(u)


@router.patch("/users/{name}", responses=errors(400, 401, 403, 404, 422, 503))
async def change_user(name: UserName, body: UserChange, p: Caller,
                      commands: CommandsPort) -> Annotated[Json, UserAnswer]:
    """Change a user's rights or the Unix account their jobs run as (an existing user,
    say one made on first use, mapped to their account); what is not given stays."""
    p.require_admin("changing users")
    account = "unix_account" in body.model_fields_set  # null sent: the daemon's own again
    return _user_view(commands.set_user(name, admin=body.admin, unix_account=body.unix_account,
                                        own_account=account and body.unix_account is None))


@router.delete("/users/{name}", responses=errors(401, 403, 404, 409, 422, 503))
async def remove_user(name: UserName, p: Caller, commands: CommandsPort,
                      cancel_jobs: bool = Query(False, description=(
                          "cancel the user's active jobs first (else 409 while they "
                          "have any)"))) -> Annotated[Json, UserRemovedAnswer]:
    """Revoke all the user's tokens and remove their stored secrets; their ended jobs
    stay as history. Not yourself, nor the daemon's owner (409)."""
    p.require_admin("removing users")
    done = commands.remove_user(name, cancel_jobs=cancel_jobs, by=p.user)
    return {"user": done.user, "tokens_revoked": done.tokens_revoked,
            "jobs_cancelled": done.jobs_cancelled}


@router.get("/tokens", responses=errors(401, 503))
async def tokens(p: Caller, reads: ReadsPort) -> Annotated[Json, TokensAnswer]:
    """An admin sees every user's tokens, anyone else their own (never the tokens
    themselves: their first characters)."""
    rows = reads.store.tokens(None if p.admin else p.user)
    return {"tokens": [_token_view(t) for t in rows]}


@router.post("/tokens", status_code=201, responses=errors(400, 401, 403, 404, 422, 503))
async def create_token(body: TokenBody, p: Caller,
                       commands: CommandsPort) -> Annotated[Json, NewTokenAnswer]:
    """The token itself is in this answer only; the store keeps its SHA-256."""
    user = body.user or p.user
    if user != p.user:
        p.require_admin(f"creating a token for {user!r}")
    row, token = commands.add_token(user, note=body.note)
    return {**_token_view(row), "token": token}


@router.post("/tokens/{token_id}/revoke", responses=errors(401, 403, 404, 409, 422, 503))
async def revoke_token(token_id: RowId, p: Caller, commands: CommandsPort,
                       reads: ReadsPort) -> Annotated[Json, TokenAnswer]:
    if reads.store.token(token_id).user != p.user:
        p.require_admin("revoking another user's token")
    return _token_view(commands.revoke_token(token_id))

