"""Who is asking: the Unix account the kernel names on the socket, or the user an API token
belongs to.

Over the Unix socket the kernel says who connected (SO_PEERCRED, rota.server.access.peer): the
daemon's own account and root act as the owner, an admin; any other local account is the
Rota user of that account's name, created on first use (not an admin, its jobs run as that
account). A daemon run as yourself keeps its socket owner-only (0600 in a 0700 home), so
only you and root reach it; a root daemon opens it to every local user. Over TCP every
``/v1`` request carries
``Authorization: Bearer rota_...``; tokens are stored as their SHA-256 (they are long
random strings, so a slow password hash would add nothing), shown once at creation, and
revoked at once (the in-memory cache is cleared on revocation).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pwd
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
                 read_only: bool = False, owner_uid: int | None = None) -> None:
        self.store, self.owner, self.clock = store, owner, clock
        self.read_only = read_only
        #: the daemon's own account: it and root are the owner over the socket
        self.owner_uid = os.geteuid() if owner_uid is None else owner_uid
        # digest -> the principal of a live token, and when it was looked up
        self._cache: dict[str, tuple[Principal, float]] = {}
        self._touched: dict[int, float] = {}
        self._peers: dict[int, Principal] = {}  # a local account's uid -> its principal

    def principal(self, via: str, authorization: str | None,
                  peer_uid: int | None = None) -> Principal:
        if via != "tcp":
            if peer_uid is None or peer_uid in (0, self.owner_uid):
                return Principal(user=self.owner, admin=True, via="socket")
            return self._peer(peer_uid)
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

    def _peer(self, uid: int) -> Principal:
        """The Rota user of the local account ``uid``: its account's name, created on first
        use with its jobs running as that account."""
        found = self._peers.get(uid)
        if found is not None:
            return found
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            raise Unauthorized(f"uid {uid} has no account name on this machine, so it has no "
                               "Rota user; ask an admin for a token instead") from None
        try:
            check_user_name(name)
        except InvalidSpec:
            raise Unauthorized(f"the Unix account {name!r} cannot be a Rota user name (1-64 "
                               "lower-case letters, digits and . _ -); ask an admin for a "
                               "token instead") from None
        row = self.store.user_or_none(name)
        if row is None:
            row = self.store.add_user(name, admin=False, now=self.clock(), unix_account=name,
                                      exist_ok=True)
        elif row.unix_account not in (None, name):
            raise Forbidden(f"Rota user {name} runs its jobs as the Unix account "
                            f"{row.unix_account}, not {name}; use its token over TCP")
        found = Principal(user=row.name, admin=row.admin, via="socket")
        self._peers[uid] = found
        return found

    def forget(self) -> None:
        """Drop cached tokens and local accounts (after a revocation or a change of a
        user's rights)."""
        self._cache.clear()
        self._peers.clear()
