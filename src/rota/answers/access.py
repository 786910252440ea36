"""The answers about who may use it: users, tokens, secrets (see rota.answers)."""

from typing import Literal, TypedDict


class WhoAmIAnswer(TypedDict):
    """GET /v1/whoami: the socket's caller is the daemon's owner, an admin."""

    user: str
    admin: bool
    via: Literal["socket", "tcp"]


class UserAnswer(TypedDict):
    name: str
    admin: bool
    created_at: float
    unix_account: str | None  # the Unix account its jobs run as; None: the daemon's own


class UsersAnswer(TypedDict):
    users: list[UserAnswer]


class UserRemovedAnswer(TypedDict):
    user: str
    tokens_revoked: int
    jobs_cancelled: int


class TokenAnswer(TypedDict):
    """A token as listed: its first characters only."""

    id: int
    user: str
    prefix: str
    note: str | None
    created_at: float
    last_used_at: float | None
    revoked_at: float | None


class NewTokenAnswer(TokenAnswer):
    token: str  # in this answer only


class TokensAnswer(TypedDict):
    tokens: list[TokenAnswer]


class SecretAnswer(TypedDict):
    name: str
    created_at: float
    updated_at: float


class SecretsAnswer(TypedDict):
    user: str
    secrets: list[SecretAnswer]


class SecretSetAnswer(TypedDict):
    user: str
    name: str
    created: bool  # False: it replaced one


class SecretDeletedAnswer(TypedDict):
    user: str
    name: str
    deleted: bool
