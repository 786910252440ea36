"""Whose Unix account a user's jobs run as, and who may submit at all.

A job runs with its owner's rights, never the daemon's (DESIGN.md invariant 9). A root
daemon starts each job as its owner's Unix account; a daemon run as anyone else cannot
switch accounts, so it runs its own account's jobs only, unless its admin chose
``shared_account = true`` (every user's jobs then run as the daemon's account, with its
rights: docs/security.md). Decided at submit, so no job is accepted that cannot start.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass

from rota.errors import Forbidden, InvalidSpec
from rota.store.repo import Store


@dataclass(frozen=True, slots=True)
class AccountRules:
    owner: str  # the daemon's Rota user (its owner)
    owner_account: str  # the Unix account the daemon runs as
    can_switch: bool  # root: it can start a job as any account
    shared_account: bool  # the admin's choice: every user's jobs run as the daemon's account

    @classmethod
    def here(cls, owner: str, shared_account: bool) -> AccountRules:
        uid = os.geteuid()
        try:
            account = pwd.getpwuid(uid).pw_name
        except KeyError:
            account = str(uid)
        return cls(owner=owner, owner_account=account, can_switch=uid == 0,
                   shared_account=shared_account)

    def account_of(self, user: str, *, unix_account: str | None, admin: bool) -> str | None:
        """The Unix account ``user``'s jobs run as: None for the daemon's own; Forbidden,
        with what to do, where the daemon cannot run them."""
        if user == self.owner or unix_account == self.owner_account:
            return None
        if unix_account is not None and self.can_switch:
            return unix_account
        if self.shared_account:
            return None
        if unix_account is None and admin:
            return None  # an admin already holds the daemon's rights over its API
        if unix_account is None:
            if self.can_switch:
                raise Forbidden(f"{user} has no Unix account to run jobs as; an admin maps "
                                f"one with `rota user add {user} --unix ACCOUNT` (or sets "
                                "shared_account = true in rota.toml: docs/security.md)")
            raise Forbidden(f"this daemon runs as {self.owner_account}, not root, so it "
                            f"runs {self.owner_account}'s jobs only and {user}'s job would "
                            f"get {self.owner_account}'s rights; run it as a system service "
                            "(`rota server install --system`) or set shared_account = true "
                            "in rota.toml (docs/security.md)")
        raise Forbidden(f"this daemon runs as {self.owner_account}, not root, so it cannot "
                        f"start jobs as the Unix account {unix_account} of {user}; run it as "
                        "a system service (`rota server install --system`) or set "
                        "shared_account = true in rota.toml (docs/security.md)")

    def account_in(self, store: Store, user: str) -> str | None:
        if user == self.owner:
            return None  # the single-user path: no lookup
        row = store.user_or_none(user)
        return self.account_of(user, unix_account=row.unix_account if row else None,
                               admin=row.admin if row else user == self.owner)


def check_unix_account(name: str) -> str:
    """``name`` is an account of this machine (its jobs are started as it)."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        raise InvalidSpec(f"there is no Unix account {name!r} on this machine",
                          field="unix_account") from None
    return name
