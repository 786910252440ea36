"""What every backend whose job is held by a shim (or the local runner) does the same way.

The job's start and end are recorded by what holds it, under the attempt's status path;
the backend reads that record back. Subclasses add how a job is started (``launch``) and
may read their records elsewhere (``read_status``: the local runner's journal).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rota.backends.base import (
    Capabilities,
    ExitInfo,
    Handle,
    Launched,
    LaunchFailed,
    LaunchOutcome,
    LaunchRequest,
    Located,
)
from rota.backends.common import (
    KILLED,
    exit_info_from_status,
    has_ended,
    is_shim_of,
    launch_in_order,
    pid_alive,
    read_status,
    signal_group,
)
from rota.errors import BackendError


class ProcessBackend:
    name: str
    capabilities = Capabilities()

    # --- hooks ----------------------------------------------------------------------------
    def launch(self, req: LaunchRequest) -> Handle:
        raise NotImplementedError

    def missing(self) -> str | None:
        """What this machine lacks to run jobs here (nothing, unless a backend says)."""
        return None

    def read_status(self, path: str | Path) -> dict[str, Any] | None:
        """The attempt's start/end record (see ``common.read_status``)."""
        return read_status(path)

    def _recorder_alive(self, handle: Handle) -> bool:
        """Whether something other than the job is still there to record its end."""
        return False

    def _handle_from_status(self, status: dict[str, Any], status_path: str,
                            started_at: float) -> Handle:
        return Handle(backend=self.name, pid=int(status["shim_pid"]), status_path=status_path,
                      extra={"started_at": started_at})

    def _is_ours(self, handle: Handle) -> bool:
        """Alive, and really our shim (not a new process that reused the pid)."""
        if not pid_alive(handle.pid):
            return False
        try:
            import psutil

            return is_shim_of(psutil.Process(handle.pid).cmdline(), handle.status_path)
        except Exception:
            return False

    # --- launch ---------------------------------------------------------------------------
    def launch_many(self, reqs: list[LaunchRequest]) -> list[LaunchOutcome]:
        """One at a time."""
        return [self._launch_one(req) for req in reqs]

    def _launch_one(self, req: LaunchRequest,
                    launch: Callable[[LaunchRequest], Handle] | None = None) -> LaunchOutcome:
        try:
            return Launched((launch or self.launch)(req))
        except (BackendError, OSError) as e:
            return LaunchFailed(str(e))

    def launch_later(self, reqs: list[LaunchRequest],
                     done: Callable[[int, LaunchOutcome], None]) -> bool:
        """A backend whose launch waits (``capabilities.launch_blocks``) launches on a worker
        thread, each outcome posted back to the event loop as it comes; others answer at
        once (False: use ``launch_many``)."""
        if not self.capabilities.launch_blocks:
            return False
        launch_in_order(reqs, self._launch_one, done)
        return True

    # --- after a restart ------------------------------------------------------------------
    def locate(self, handle: Handle | None, status_path: str, started_at: float) -> Located:
        if handle is None:
            handle = self._find_unrecorded(status_path, started_at)
            if handle is None:
                return Located(None)
        status = self.read_status(status_path) or {}
        if "ended_at" in status or not self._is_ours(handle):
            # it ended while the daemon was down (or its process is gone without a record)
            return Located(handle, self.collect(handle) or KILLED)
        return Located(handle)

    def _find_unrecorded(self, status_path: str, started_at: float) -> Handle | None:
        """The handle of an attempt the daemon did not store one for (it died between the
        launch and storing it): from the record under its status path, fixed before the
        launch; or, if the shim had not written one yet, from the shim's argv."""
        status = self.read_status(status_path)
        if status and status.get("shim_pid"):
            return self._handle_from_status(status, status_path, started_at)
        import psutil

        for p in psutil.process_iter(["pid", "cmdline"]):
            if is_shim_of(p.info.get("cmdline") or [], status_path):
                return Handle(backend=self.name, pid=p.info["pid"], status_path=status_path,
                              extra={"started_at": started_at})
        return None

    # --- watch and collect ----------------------------------------------------------------
    def watch(self, handle: Handle) -> int | None:
        """A pidfd of the job's watched process, or None when it has exited already."""
        try:
            return os.pidfd_open(handle.pid)
        except ProcessLookupError:
            return None

    def is_alive(self, handle: Handle) -> bool:
        """Guarded against a recycled pid; an end record means the job has ended even while
        the shim is still exiting, so that ``is_alive`` never contradicts ``collect``."""
        status = self.read_status(handle.status_path)
        if has_ended(status):
            return False
        return pid_alive(handle.pid, _started_at(status, handle)) or \
            self._recorder_alive(handle)

    def collect(self, handle: Handle, watched: bytes = b"") -> ExitInfo | None:
        """The end record; else None while alive; else killed. The record is read again
        after the liveness check: the shim writes it and then exits, so a job that ended
        between the first read and the check is not taken for killed."""
        status = self.read_status(handle.status_path)
        info = exit_info_from_status(status)
        if info is not None:
            return info
        if pid_alive(handle.pid, _started_at(status, handle)) or self._recorder_alive(handle):
            return None
        return exit_info_from_status(self.read_status(handle.status_path)) or KILLED

    # --- the rest -------------------------------------------------------------------------
    def tidy(self, status_dir: Path, active: set[str]) -> None:
        pass  # a status file per attempt, kept with the attempt's log

    def signal(self, handle: Handle, sig: int) -> None:
        signal_group(handle.pid, sig)

    def attach_argv(self, handle: Handle) -> list[str] | None:
        return None

    def list_sessions(self) -> list[str]:
        return []


def _started_at(status: dict[str, Any] | None, handle: Handle) -> float | None:
    """When the shim started: its own record (Python shim) or the launch time in the handle."""
    started = status.get("started_at") if status else None
    return started if started is not None else handle.extra.get("started_at")
