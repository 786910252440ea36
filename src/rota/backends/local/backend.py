"""The local backend: the job runs as a plain detached process on this machine."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import time
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
    TakenBack,
)
from rota.backends.common import (
    KILLED,
    build_job_argv,
    check_request,
    exit_info_from_status,
    has_ended,
    pid_alive,
    prepare_paths,
    read_status,
    status_record,
)
from rota.backends.local.client import Answer, RunnerClient, RunnerLost
from rota.backends.local.journal import JOURNALS, parse_line
from rota.backends.process import ProcessBackend
from rota.backends.shell_shim import SHELL, shell_shim_argv
from rota.errors import BackendError

log = logging.getLogger("rota.backends.local")

_DEVNULL_IN = (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)
_DEVNULL_OUT = (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)
_DEVNULL_ERR = (os.POSIX_SPAWN_DUP2, 1, 2)
LOST_END = "its end was not recorded: the local runner and its keeper were killed"


class LocalBackend(ProcessBackend):
    """Runs each job detached, in its own session, output appended to its log file.

    With a runner socket (the daemon's way) jobs are started by the local runner
    (``rota.backends.local.runner``), a long-lived process that outlives the daemon and records
    each job's exit status; the daemon watches a pipe the runner closes once that record
    exists. The runner's keeper (``rota.backends.local.keeper``) outlives the runner in
    turn: it records the ends of a killed runner's jobs and starts the next runner, which
    the daemon watches them through again. Without one, each job gets the shell shim
    (``rota.backends.shell_shim``), started with ``posix_spawn``, which records the status
    itself. Either way no object in the daemon holds the job: it collects the exit status
    from the status file, so a restarted daemon sees the same thing a running one does.
    """

    name = "local"
    capabilities = Capabilities(attachable=False, run_as=True)

    def __init__(self, runner_socket: Path | None = None) -> None:
        # the daemon's environment, read once: copying os.environ decodes every variable
        self.base_env = dict(os.environ)
        self.runner = RunnerClient(runner_socket, self.base_env) if runner_socket else None
        self._watch_fds: dict[int, int] = {}  # pid -> the runner's pipe, until watched

    def check(self, req: LaunchRequest) -> None:
        check_request(req)

    def launch(self, req: LaunchRequest) -> Handle:
        [got] = self.launch_many([req])
        if isinstance(got, LaunchFailed):
            raise BackendError(got.reason)
        return got.handle

    def launch_many(self, reqs: list[LaunchRequest]) -> list[LaunchOutcome]:
        """Start several jobs: an outcome each. The runner gets every request before the
        first answer is awaited."""
        runner = self._ready_runner()
        if runner is None:
            return [self._launch_one(req, self._launch_with_shim) for req in reqs]
        out, asked, msgs = self._requests(reqs)
        try:
            answers = runner.request_many(msgs) if msgs else []
        except BackendError as e:
            answers = [RunnerLost(str(e))] * len(msgs)
        return self._outcomes(reqs, out, asked, answers)

    def launch_later(self, reqs: list[LaunchRequest],
                     done: Callable[[int, LaunchOutcome], None]) -> bool:
        """Start them without waiting: ``done(i, outcome)`` follows on the event loop for
        each as soon as it is known. False (nothing done) without a runner."""
        runner = self._ready_runner()
        if runner is None:
            return False
        out, asked, msgs = self._requests(reqs)
        loop = asyncio.get_running_loop()
        for i in sorted(set(range(len(reqs))) - set(asked)):  # refused here
            loop.call_soon(done, i, out[i])

        def answered(k: int, answer: Answer | RunnerLost) -> None:
            done(asked[k], self._outcome(reqs[asked[k]], answer))

        try:
            if msgs:
                runner.request_many_later(msgs, answered)
        except BackendError as e:
            for k in range(len(msgs)):
                loop.call_soon(answered, k, RunnerLost(str(e)))
        return True

    def _ready_runner(self) -> RunnerClient | None:
        """Whether the runner is there (started if need be). One that cannot be started at
        all (a ROTA_HOME path too long for a socket, say) leaves the shell shim in its
        place, said once in the daemon's log."""
        if self.runner is not None:
            try:
                self.runner.connect()
            except BackendError as e:
                log.warning("%s; jobs get a shell shim each instead", e)
                self.runner = None
        return self.runner

    def _requests(self, reqs: list[LaunchRequest]
                  ) -> tuple[list[LaunchOutcome], list[int], list[dict[str, Any]]]:
        """The runner's requests; a request refused here has its reason in ``out``."""
        out: list[LaunchOutcome] = [LaunchFailed("") for _ in reqs]
        asked: list[int] = []
        msgs = []
        for i, req in enumerate(reqs):
            try:
                self.check(req)
                argv = build_job_argv(req)  # the runner makes the paths (prepare_paths)
            except (BackendError, OSError) as e:
                out[i] = LaunchFailed(str(e))
                continue
            asked.append(i)
            msg = {"op": "launch", "argv": argv, "env": req.env, "cwd": req.cwd,
                   "log": str(req.log_path), "status": str(req.status_path),
                   "header": req.log_header}
            if req.run_as is not None:  # the runner starts it as that account
                msg["as"] = dataclasses.asdict(req.run_as)
            msgs.append(msg)
        return out, asked, msgs

    def _outcomes(self, reqs: list[LaunchRequest], out: list[LaunchOutcome], asked: list[int],
                  answers: list[Answer | RunnerLost]) -> list[LaunchOutcome]:
        for i, answer in zip(asked, answers, strict=True):
            out[i] = self._outcome(reqs[i], answer)
        return out

    def _outcome(self, req: LaunchRequest, answer: Answer | RunnerLost) -> LaunchOutcome:
        if isinstance(answer, RunnerLost):
            # if the runner had started the job, its journal says so (written before the
            # answer, or by the keeper, before the next runner answers: reached first),
            # and the job must not run twice
            if self.runner is not None:
                with contextlib.suppress(BackendError):
                    self.runner.connect()
            status = self.read_status(req.status_path)
            if not status or not status.get("shim_pid"):
                return LaunchFailed(f"job {req.job_id}: {answer}", retryable=True, lost=True)
            return Launched(self._handle(req, int(status["shim_pid"]), time.time(),
                                         int(status.get("runner") or 0)))
        reply, fds = answer
        if "error" in reply:
            for fd in fds:
                os.close(fd)
            return LaunchFailed(f"job {req.job_id}: {reply['error']}")
        pid = int(reply["pid"])
        if fds:
            self._watch_fds[pid] = fds[0]
        assert self.runner is not None
        return Launched(self._handle(req, pid, float(reply["started_at"]), self.runner.pid))

    def _launch_with_shim(self, req: LaunchRequest) -> Handle:
        self.check(req)
        if req.run_as is not None:
            raise BackendError(f"job {req.job_id}: only the local runner starts a job as "
                               f"another account ({req.run_as.user}), and it cannot be "
                               "started here: see the daemon's log")
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

    def _handle(self, req: LaunchRequest, pid: int, started_at: float, runner: int) -> Handle:
        return Handle(backend=self.name, pid=pid, status_path=str(req.status_path),
                      extra={"started_at": started_at, "runner": runner})

    # --- records: the runner's journal, or the shell shim's status file ---------------------
    def read_status(self, path: str | Path) -> dict[str, Any] | None:
        """The shell shim's status file (or an older runner's), else the runner's journal,
        where ``path`` is the attempt's key (``local.journal``)."""
        found = read_status(path)
        return found if found is not None else status_record(JOURNALS.lookup(str(path)))

    def _recorder_alive(self, handle: Handle) -> bool:
        """For a job the runner started: whether its waiter (or, for a job of an older
        runner, the runner) is still there to write its end record. Between the job's exit
        and that record the job is not over yet: taking it for killed then would be wrong."""
        runner = int(handle.extra.get("runner") or 0)
        if not runner:
            return False
        status = self.read_status(handle.status_path)
        if status is None or status.get("runner") != runner or has_ended(status):
            return False
        return bool(self._waiter_alive(status, handle)) or \
            pid_alive(runner, status.get("runner_started"))

    @staticmethod
    def _waiter_alive(status: dict[str, Any] | None, handle: Handle) -> int:
        """The pid of the job's waiter while it lives (it was forked just before the job:
        a later process of that pid is another one), else 0."""
        waiter = int((status or {}).get("waiter") or 0)
        return waiter if waiter and pid_alive(waiter, handle.extra.get("started_at")) else 0

    def _handle_from_status(self, status: dict[str, Any], status_path: str,
                            started_at: float) -> Handle:
        handle = super()._handle_from_status(status, status_path, started_at)
        if status.get("runner"):  # started by the runner: the job itself, no shim
            handle.extra["runner"] = int(status["runner"])
        return handle

    def _is_ours(self, handle: Handle) -> bool:
        if handle.extra.get("runner"):  # the job itself: the runner's records guard the pid
            return self.is_alive(handle)
        return super()._is_ours(handle)

    # --- watch and collect --------------------------------------------------------------
    def watch(self, handle: Handle) -> int | None:
        """An fd that turns readable once the job has ended and its end is recorded; None
        when that is so already."""
        fd = self._watch_fds.pop(handle.pid, None)
        if fd is not None:
            return fd
        if handle.extra.get("runner") and self.runner is not None:
            fd = self.runner.watch(handle.pid, int(handle.extra["runner"]))
            if fd is not None:
                return fd
            status = self.read_status(handle.status_path)
            if has_ended(status):  # (the runner forgets a job once its end is journaled)
                return None
            # its runner and keeper are gone: the waiter exits once the end is journaled
            # (and not before its other jobs have ended: the end is learnt late, not lost)
            waiter = self._waiter_alive(status, handle)
            if waiter:
                with contextlib.suppress(ProcessLookupError):
                    return os.pidfd_open(waiter)
        return super().watch(handle)

    def collect(self, handle: Handle, watched: bytes = b"") -> ExitInfo | None:
        """From the end record the runner wrote into the watch pipe; else (a pidfd, a
        runner lost, a restarted daemon) from the status file or the runner's journal."""
        record = parse_line(watched.rstrip(b"\n").rpartition(b"\n")[2]) if watched else None
        info = exit_info_from_status(status_record(record))
        if info is None:
            info = super().collect(handle)
        if info is KILLED and handle.extra.get("runner"):
            # ended with no record: the runner and its keeper both died (or the disk was
            # full): how it ended is not known, which is no failure of the job's
            return TakenBack(None, signal.SIGKILL, None, why=LOST_END)
        return info

    def tidy(self, status_dir: Path, active: set[str]) -> None:
        """Delete the runner's journal segments that name no active attempt."""
        gone = JOURNALS.prune(str(status_dir), active, pid_alive)
        if gone:
            log.info("deleted %d journal segments of ended jobs", len(gone))
