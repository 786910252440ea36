"""Schemathesis hooks for test_schemathesis.py's run over the operations that touch the
run itself (loaded through SCHEMATHESIS_HOOKS, in schemathesis's process).

The run's admin token comes from these hooks, not from a fixed header: it is minted
through the daemon's owner-only Unix socket (which needs no token), and minted again
once the run has revoked it. Generated token ids are small numbers, the run's own among
them, so the run does revoke it; with a fixed token every later request would get 401."""

from __future__ import annotations

import os
from typing import Any

import schemathesis

from rota.client import RawClient

#: where the daemon's socket is and whose tokens the run mints (set by the test)
SOCKET_ENV, USER_ENV = "ROTA_FUZZ_SOCKET", "ROTA_FUZZ_USER"
REVOKE = "/v1/tokens/{token_id}/revoke"


class _Held:
    """The token the run uses now (None: mint one before the next request)."""

    id: int | None = None
    token: str | None = None


def _token() -> str:
    if _Held.token is None:
        with RawClient(os.environ[SOCKET_ENV]) as c:
            made = c.request("POST", "/v1/tokens",
                             json={"user": os.environ[USER_ENV], "note": "schemathesis"})
        _Held.id, _Held.token = int(made["id"]), str(made["token"])
    return _Held.token


def _authorize(case: Any) -> None:
    case.headers = {**(case.headers or {}), "Authorization": f"Bearer {_token()}"}


@schemathesis.auth(refresh_interval=None)
class MintedToken:
    def get(self, case: Any, ctx: Any) -> str:
        return _token()

    def set(self, case: Any, data: str, ctx: Any) -> None:
        _authorize(case)


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    """Cases are made (and authorized) ahead of their turn: one made before the revoke
    is sent with the token of now (one sent without a token stays so)."""
    if "Authorization" in (case.headers or {}):
        _authorize(case)


@schemathesis.hook
def after_call(context: Any, case: Any, response: Any) -> None:
    """A revoke that took the run's own token: the next request gets a new one."""
    if case.operation.path == REVOKE and response.status_code == 200 \
            and response.json().get("id") == _Held.id:
        _Held.token = None
