"""Accounts: users and tokens, secrets (stored encrypted), fair shares, removing a user.

A part of ``rota.store.repo.Store``: its methods run in the store's unit of work
(``StoreBase.transaction``)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import (
    delete,
    func,
    select,
    update,
)

from rota.errors import Conflict, NotFound
from rota.store.base import SHARE_KINDS, StoreBase
from rota.store.tables import (
    SecretRow,
    ShareRow,
    TokenRow,
    UserRow,
)


class AccountsRepo(StoreBase):
    # --- users and tokens ----------------------------------------------------------------
    def add_user(self, name: str, *, admin: bool, now: float,
                 unix_account: str | None = None, exist_ok: bool = False) -> UserRow:
        row = UserRow(name=name, admin=admin, created_at=now, unix_account=unix_account)
        with self.session() as s, s.begin():
            old = s.get(UserRow, name)
            if old is not None:
                if exist_ok:  # a race of two first uses: the first one's row
                    return old
                raise Conflict(f"user {name!r} already exists (`rota user set {name} --unix "
                               "ACCOUNT` changes the account its jobs run as, --admin its "
                               "rights)")
            s.add(row)
        return row

    def set_user(self, name: str, *, admin: bool | None = None,
                 unix_account: str | None = None, own_account: bool = False) -> UserRow:
        """Change a user's rights or Unix account (``own_account``: back to the daemon's
        own); what is not given stays."""
        with self.session() as s, s.begin():
            row = s.get(UserRow, name)
            if row is None:
                raise NotFound(f"no user {name!r}; add one with `rota user add {name}`")
            if admin is not None:
                row.admin = admin
            if unix_account is not None or own_account:
                row.unix_account = unix_account
        return row

    def user_or_none(self, name: str) -> UserRow | None:
        with self.session() as s:
            return s.get(UserRow, name)

    def unix_account(self, name: str) -> str | None:
        """The Unix account ``name``'s jobs run as; None: the daemon's own (or no such user)."""
        with self.session() as s:
            row = s.get(UserRow, name)
            return None if row is None else row.unix_account

    def users(self) -> list[UserRow]:
        with self.session() as s:
            return list(s.scalars(select(UserRow).order_by(UserRow.name)))

    def user(self, name: str) -> UserRow:
        with self.session() as s:
            row = s.get(UserRow, name)
            if row is None:
                raise NotFound(f"no user {name!r}; add one with `rota user add {name}`")
            return row

    def add_token(self, user: str, *, digest: str, prefix: str, note: str | None,
                  now: float) -> TokenRow:
        self.user(user)  # NotFound names the missing user
        row = TokenRow(user=user, digest=digest, prefix=prefix, note=note, created_at=now)
        with self.session() as s, s.begin():
            s.add(row)
        return row

    def token_by_digest(self, digest: str) -> tuple[TokenRow, UserRow] | None:
        with self.session() as s:
            got = s.execute(select(TokenRow, UserRow).join(UserRow, TokenRow.user == UserRow.name)
                            .where(TokenRow.digest == digest)).first()
            return None if got is None else (got[0], got[1])

    def tokens(self, user: str | None = None) -> list[TokenRow]:
        q = select(TokenRow).order_by(TokenRow.id)
        if user is not None:
            q = q.where(TokenRow.user == user)
        with self.session() as s:
            return list(s.scalars(q))

    def token(self, token_id: int) -> TokenRow:
        with self.session() as s:
            row = s.get(TokenRow, token_id)
            if row is None:
                raise NotFound(f"no token {token_id}")
            return row

    def revoke_token(self, token_id: int, *, now: float) -> None:
        with self.session() as s, s.begin():
            s.execute(update(TokenRow).where(TokenRow.id == token_id,
                                             TokenRow.revoked_at.is_(None))
                      .values(revoked_at=now))

    def touch_token(self, token_id: int, *, now: float) -> None:
        with self.transaction() as c:
            c.execute(update(TokenRow).where(TokenRow.id == token_id).values(last_used_at=now))

    # --- secrets (stored encrypted; see rota.server.access.secrets) ------------------------------
    def put_secret(self, user: str, name: str, ciphertext: bytes, *, now: float) -> bool:
        """Store or replace one; True when it is new."""
        with self.session() as s, s.begin():
            row = s.get(SecretRow, (user, name))
            if row is None:
                s.add(SecretRow(user=user, name=name, ciphertext=ciphertext, created_at=now,
                                updated_at=now))
                return True
            row.ciphertext, row.updated_at = ciphertext, now
            return False

    def secret_list(self, user: str) -> list[tuple[str, float, float]]:
        """(name, created_at, updated_at) of a user's secrets; never their values."""
        q = (select(SecretRow.name, SecretRow.created_at, SecretRow.updated_at)
             .where(SecretRow.user == user).order_by(SecretRow.name))
        with self._reading() as c:
            return [(r[0], r[1], r[2]) for r in c.execute(q)]

    def secret_ciphertexts(self, user: str, names: Iterable[str]) -> dict[str, bytes]:
        q = select(SecretRow.name, SecretRow.ciphertext).where(
            SecretRow.user == user, SecretRow.name.in_(list(names)))
        with self._reading() as c:
            return {r[0]: bytes(r[1]) for r in c.execute(q)}

    def delete_secret(self, user: str, name: str) -> None:
        with self.session() as s, s.begin():
            row = s.get(SecretRow, (user, name))
            if row is None:
                raise NotFound(f"{user} has no secret {name!r}")
            s.delete(row)

    # --- fair shares (rota.core.fairshare) ------------------------------------------------
    def shares(self) -> dict[str, dict[str, float]]:
        """The shares admins set: {"user": {name: shares}, "project": {name: shares}}."""
        out: dict[str, dict[str, float]] = {"user": {}, "project": {}}
        with self.session() as s:
            for row in s.scalars(select(ShareRow)):
                out.setdefault(row.kind, {})[row.name] = row.shares
        return out

    def set_share(self, kind: str, name: str, shares: float, *, now: float) -> None:
        """Give a user or project ``shares`` (kept until set again)."""
        if kind not in SHARE_KINDS:
            raise ValueError(f"a share is a user's or a project's, not a {kind!r}'s")
        with self.session() as s, s.begin():
            row = s.get(ShareRow, (kind, name))
            if row is None:
                s.add(ShareRow(kind=kind, name=name, shares=shares, updated_at=now))
            else:
                row.shares, row.updated_at = shares, now

    # --- removing a user (rota.server.daemon_ports; kept apart from the rest) -------------
    def remove_user(self, name: str) -> int:
        """Remove a user with their tokens and stored secrets, in one transaction; their
        jobs stay as history. Returns how many of their tokens were live (not revoked)."""

        with self.session() as s, s.begin():
            if s.get(UserRow, name) is None:
                raise NotFound(f"no user {name!r}")
            live = s.scalar(select(func.count()).select_from(TokenRow).where(
                TokenRow.user == name, TokenRow.revoked_at.is_(None))) or 0
            s.execute(delete(TokenRow).where(TokenRow.user == name))
            s.execute(delete(SecretRow).where(SecretRow.user == name))
            s.execute(delete(UserRow).where(UserRow.name == name))
        return int(live)
