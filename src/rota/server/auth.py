"""Who is asking: the socket's owner, or the user an API token belongs to.

The Unix socket is owner-only (mode 0600 in a 0700 home), so whoever reaches it is the
daemon's owner and acts as an admin. Over TCP every ``/v1`` request carries
``Authorization: Bearer rota_...``; tokens are stored as their SHA-256 (they are long
random strings, so a slow password hash would add nothing), shown once at creation, and
revoked at once (the in-memory cache is cleared on revocation).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from rota.errors import Forbidden, InvalidSpec, Unauthorized
from rota.store.repo import Store

TOKEN_PREFIX = "rota_"
#: Scope key the TCP listener sets; requests without it came through the Unix socket.
VIA_KEY = "rota.via"
#: set by an API worker on a TCP request it forwards to the daemon's socket: the request
#: is then authorised by its token, as over TCP (the socket alone would make it the owner's)
VIA_HEADER = "x-rota-via"
_USER_NAME = re.compile(r"[a-z_][a-z0-9_.-]{0,63}")
_TOUCH_EVERY = 60.0  # seconds between last-used updates of one token
READ_ONLY_REMEMBER_S = 1.0


@dataclass(frozen=True, slots=True)
class Principal:
    user: str
    admin: bool
    via: Literal["socket", "tcp"]
    token_id: int | None = None

    def require_admin(self, what: str) -> None:
        if not self.admin:
            raise Forbidden(f"{what} needs an admin; {self.user} is not one")

    def require_owner(self, owner: str, what: str) -> None:
        """Only the job's owner or an admin may change it or read its logs."""
        if not self.admin and owner != self.user:
            raise Forbidden(f"{what}: it belongs to {owner}, and only its owner or an admin "
                            "may do that")


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def check_user_name(name: str) -> str:
    if not _USER_NAME.fullmatch(name):
        raise InvalidSpec(f"user name {name!r}: use 1-64 lower-case letters, digits and . _ -, "
                          "starting with a letter or _", field="name")
    return name


def _user_name_value(name: str) -> str:
    try:
        return check_user_name(name)
    except InvalidSpec as e:  # reported by pydantic at its field
        raise ValueError(str(e)) from None


#: a user's name in a request body, its rule in the OpenAPI document as a pattern and its
#: error in words (check_user_name)
UserNameText = Annotated[str, AfterValidator(_user_name_value),
                         Field(json_schema_extra={"pattern": f"^{_USER_NAME.pattern}$"})]


class Authenticator:
    """Who a request comes from. ``read_only`` (an API worker, which writes nothing and is
    not told of revocations): a token is looked up in the store again after
    READ_ONLY_REMEMBER_S, so a revoked one is refused within that time, and its last use
    is not recorded (the daemon records it on the requests it answers)."""

    def __init__(self, store: Store, owner: str, clock: Callable[[], float], *,
                 read_only: bool = False) -> None:
        self.store, self.owner, self.clock = store, owner, clock
        self.read_only = read_only
        # digest -> the principal of a live token, and when it was looked up
        self._cache: dict[str, tuple[Principal, float]] = {}
        self._touched: dict[int, float] = {}

    def principal(self, via: str, authorization: str | None) -> Principal:
        if via != "tcp":
            return Principal(user=self.owner, admin=True, via="socket")
        if not authorization:
            raise Unauthorized("this API needs a token over TCP: send `Authorization: Bearer "
                               "<token>` (create one with `rota token create --user NAME`)")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token.startswith(TOKEN_PREFIX):
            raise Unauthorized("the Authorization header must be `Bearer rota_...`")
        digest = token_digest(token)
        now = self.clock()
        cached = self._cache.get(digest)
        if cached is not None and (not self.read_only or now - cached[1] <= READ_ONLY_REMEMBER_S):
            found = cached[0]
        else:
            got = self.store.token_by_digest(digest)
            # compare digests in constant time, though a hit already proves equality
            if got is None or not hmac.compare_digest(got[0].digest, digest) \
                    or got[0].revoked_at is not None:
                self._cache.pop(digest, None)
                raise Unauthorized("the token is unknown or revoked")
            token_row, user_row = got
            found = Principal(user=user_row.name, admin=user_row.admin, via="tcp",
                              token_id=token_row.id)
            self._cache[digest] = (found, now)
        if self.read_only:
            return found
        if found.token_id is not None and now - self._touched.get(found.token_id, 0) > \
                _TOUCH_EVERY:
            self._touched[found.token_id] = now
            self.store.touch_token(found.token_id, now=now)
        return found

    def forget(self) -> None:
        """Drop cached tokens (after a revocation or a change of a user's rights)."""
        self._cache.clear()
