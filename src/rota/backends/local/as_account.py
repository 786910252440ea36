"""A local job started as another account, by a root runner (docs/security.md).

The runner (``rota.backends.local.runner``) gives such a job a login's environment for its
account, never the runner's own (root's), and hands the job's own files over to the
account before its waiter starts it: its log, and the file ``rota.job`` writes its metrics
to. What starting a job as an account needs at the waiter (the credentials, libc) the
runner imports before any fork (``Runner._can_start_as_accounts``).
"""

from __future__ import annotations

import os
from typing import Any


def account_env(account: dict[str, Any]) -> dict[str, str]:
    """A login's environment for the account; the runner's (root's) never reaches the job."""
    from rota.backends.base import login_env

    return login_env(account["user"], account["home"], account["shell"])


def _hand_over(account: dict[str, Any], log: int, status: str, events: str | None) -> None:
    """The job's own files become its account's: its log, and the file rota.job writes its
    metrics to (made here, in a status folder it may pass through but not list)."""
    uid, gid = account["uid"], account["gid"]
    os.fchown(log, uid, gid)
    os.fchmod(log, 0o600)
    status_dir = os.path.dirname(status)
    os.chmod(status_dir, 0o711)
    if events:
        fd = os.open(events, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            os.fchown(fd, uid, gid)
        finally:
            os.close(fd)
