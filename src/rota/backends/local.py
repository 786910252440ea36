"""The local backend: the job runs as a plain detached process on this machine."""

from __future__ import annotations

import subprocess

from rota.backends.base import Capabilities, ExitInfo, Handle, LaunchRequest
from rota.backends.common import (
    check_request,
    job_env,
    prepare_paths,
    shim_argv,
    signal_group,
    status_exit_info,
    status_is_alive,
)
from rota.errors import BackendError


class LocalBackend:
    """Runs the shim in its own session with output appended to the job's log file.

    Nothing holds the Popen object after launch: the job must not depend on the daemon,
    and the daemon collects the exit status from the status file (reaping the zombie
    with ``common.reap``), so a restarted daemon sees the same thing a running one does.
    """

    name = "local"
    capabilities = Capabilities(attachable=False)

    def check(self, req: LaunchRequest) -> None:
        check_request(req)

    def launch(self, req: LaunchRequest) -> Handle:
        self.check(req)
        argv = shim_argv(req, tee=False)
        prepare_paths(req)
        try:
            with open(req.log_path, "ab") as log:
                proc = subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL,
                                        stdout=log, stderr=log, cwd=req.cwd, env=job_env(req),
                                        close_fds=True)
        except OSError as e:
            raise BackendError(f"job {req.job_id}: cannot start the shim: {e}") from e
        pid = proc.pid
        # Forget the Popen: its __del__ would otherwise keep it in subprocess._active and
        # reap the shim behind the daemon's back; the daemon reaps via common.reap.
        proc.returncode = 0
        return Handle(backend=self.name, pid=pid, status_path=str(req.status_path))

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
