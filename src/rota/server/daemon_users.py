"""The daemon's users and tokens, as Commands (rota.server.ports): the part of DaemonPorts
that adds, changes and removes who may use the daemon."""

from __future__ import annotations

from rota.errors import Conflict
from rota.server.access.accounts import check_unix_account
from rota.server.access.auth import Authenticator, check_user_name, new_token, token_digest
from rota.server.loop.daemon import Daemon
from rota.server.ports import UserRemoved
from rota.store.tables import TokenRow, UserRow

#: the states of a job that has not ended: a removed user's jobs in them are cancelled first
ACTIVE = ("pending", "held", "starting", "running", "preempted")


class DaemonUsers:
    _d: Daemon
    _auth: Authenticator  # its cache of callers' rights is dropped on every change

    def add_user(self, name: str, *, admin: bool, unix_account: str | None = None) -> UserRow:
        if unix_account is not None:
            check_unix_account(unix_account)
        return self._d.store.add_user(check_user_name(name), admin=admin, now=self._d.clock(),
                                      unix_account=unix_account)

    def set_user(self, name: str, *, admin: bool | None, unix_account: str | None,
                 own_account: bool) -> UserRow:
        self._d.store.user(name)  # NotFound names the user, before the account is checked
        row = self._d.store.set_user(name, admin=admin, own_account=own_account,
                                     unix_account=unix_account and check_unix_account(unix_account))
        self._auth.forget()  # rights and accounts are cached per caller
        return row

    def remove_user(self, name: str, *, cancel_jobs: bool, by: str) -> UserRemoved:
        d = self._d
        if name == by:
            raise Conflict(f"{name} cannot remove themself; another admin can")
        if name == d.settings.user:
            raise Conflict(f"{name} owns this daemon and cannot be removed")
        d.store.user(name)  # NotFound names the user
        active = [r.id for r in d.store.list_jobs(states=ACTIVE, user=name, limit=1 << 62)]
        active = [i for i in active if not d.job_state(i).terminal]
        if active and not cancel_jobs:
            raise Conflict(f"{name} has {len(active)} active job{'s' * (len(active) != 1)} "
                           f"({', '.join(map(str, active[:10]))}"
                           f"{', ...' if len(active) > 10 else ''}); cancel them first, or "
                           "remove the user and cancel them at once (rota user rm "
                           "--cancel-jobs; cancel_jobs=true over the API)")
        for job_id in active:
            d.cancel(job_id)
        revoked = d.store.remove_user(name)
        self._auth.forget()
        return UserRemoved(name, revoked, len(active))

    def add_token(self, user: str, *, note: str | None) -> tuple[TokenRow, str]:
        token = new_token()
        row = self._d.store.add_token(user, digest=token_digest(token), prefix=token[:12],
                                      note=note, now=self._d.clock())
        return row, token

    def revoke_token(self, token_id: int) -> TokenRow:
        store = self._d.store
        if store.token(token_id).revoked_at is not None:
            raise Conflict(f"token {token_id} is already revoked")
        store.revoke_token(token_id, now=self._d.clock())
        self._auth.forget()
        return store.token(token_id)
