"""The local backend: the job runs as a plain detached process on this machine."""

from __future__ import annotations

import os
import time

from rota.backends.base import Capabilities, ExitInfo, Handle, LaunchRequest
from rota.backends.common import (
    build_job_argv,
    check_request,
    prepare_paths,
    signal_group,
    status_exit_info,
    status_is_alive,
)
from rota.backends.shell_shim import SHELL, shell_shim_argv
from rota.errors import BackendError

_DEVNULL_IN = (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)
_DEVNULL_OUT = (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)
_DEVNULL_ERR = (os.POSIX_SPAWN_DUP2, 1, 2)


class LocalBackend:
    """Runs the shell shim in its own session, output appended to the job's log file.

    ``posix_spawn`` (vfork and exec, no Python between them) keeps the launch cheap (the
    shim creates the log file itself, so that cost is not the daemon's either), and
    no object in the daemon holds the child: the job must not depend on the daemon, which
    collects the exit status from the status file (reaping the zombie with
    ``common.reap``), so a restarted daemon sees the same thing a running one does.
    """

    name = "local"
    capabilities = Capabilities(attachable=False)

    def __init__(self) -> None:
        # the daemon's environment, read once: copying os.environ decodes every variable
        self.base_env = dict(os.environ)

    def check(self, req: LaunchRequest) -> None:
        check_request(req)

    def launch(self, req: LaunchRequest) -> Handle:
        self.check(req)
        argv = shell_shim_argv(req.status_path, req.log_path, req.log_header, req.cwd,
                               build_job_argv(req))
        prepare_paths(req)
        started_at = time.time()
        try:  # the shim opens the log itself; until then its output goes nowhere
            pid = os.posix_spawn(SHELL, argv, {**self.base_env, **req.env}, setsid=True,
                                 file_actions=[_DEVNULL_IN, _DEVNULL_OUT, _DEVNULL_ERR])
        except (OSError, ValueError) as e:  # ValueError: a NUL byte in an argument
            raise BackendError(f"job {req.job_id}: cannot start the shim: {e}") from e
        return Handle(backend=self.name, pid=pid, status_path=str(req.status_path),
                      extra={"started_at": started_at})

    def is_alive(self, handle: Handle) -> bool:
        return status_is_alive(handle)

    def exit_info(self, handle: Handle) -> ExitInfo | None:
        return status_exit_info(handle)

    def signal(self, handle: Handle, sig: int) -> None:
        signal_group(handle.pid, sig)

    def attach_argv(self, handle: Handle) -> list[str] | None:
        return None

    def list_sessions(self) -> list[str]:
        return []
