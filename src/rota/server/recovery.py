"""Taking up the work after a restart: nothing lost, nothing run twice.

Jobs run detached, started by the local runner or a shim, which records the job's pid and,
at the end, its exit status under the attempt's status path, stored with the attempt
before the launch (the runner in its journal, a shim in a status file of that name:
``read_status`` reads either). So after a crash each unfinished job is in one of three
situations: its process still runs (adopt it), it ended meanwhile (record how, from that
record), or the launch never happened (queue it again; no process exists, so it cannot
run twice).
"""

from __future__ import annotations

import logging
import signal
from pathlib import Path

from rota.backends.base import ExitInfo, Handle
from rota.backends.common import is_shim_of, pid_alive, read_status
from rota.core.lifecycle import JobState
from rota.core.spec import JobSpec
from rota.server.running import Running
from rota.store.repo import AttemptRecord, JobRecord

log = logging.getLogger("rota.recovery")


def recover(daemon) -> None:  # type: ignore[no-untyped-def]  # Daemon (import cycle)
    rows = daemon.store.active_jobs()
    attempts = daemon.store.last_attempts(r.id for r in rows if r.attempts)
    for row in rows:
        state = JobState(row.state)
        daemon.states[row.id] = state
        if state is JobState.PENDING:
            daemon.enqueue(row)
        elif state is JobState.HELD:
            daemon.enqueue(row, queue=False)
        else:
            _take_up(daemon, row, state, attempts.get(row.id))


def _take_up(daemon, row: JobRecord, state: JobState,  # type: ignore[no-untyped-def]
             attempt: AttemptRecord | None) -> None:
    if attempt is None or attempt.ended_at is not None:
        # STARTING with no live attempt: the intent was never carried out
        daemon._requeue(row.id, state, "recovered: the launch had not happened",
                        daemon.pending_of(row), not_before=None)
        return
    spec = JobSpec.model_validate(row.spec)
    run = Running(job_id=row.id, attempt_id=attempt.id, attempt_no=attempt.number, spec=spec,
                  gpus=tuple(attempt.gpu_indices), milli=attempt.milli, gpu_mem=attempt.gpu_mem,
                  backend=daemon.backend(attempt.backend), started_at=attempt.started_at,
                  pending=daemon.pending_of(row), failures=row.failures,
                  log_path=Path(attempt.log_path), status_path=Path(attempt.status_path),
                  submitted_at=row.created_at, user=row.user)
    daemon.tracking.adopt(row.id, spec, row.tracking, row.created_at, run.log_path,
                          row.attempts)
    run.output = daemon.output_reader(run, row.progress)
    handle = _find_handle(attempt)
    if handle is None:
        daemon._requeue(row.id, state, "recovered: the launch had not happened", run.pending,
                        not_before=None)
        daemon.store.update_attempt(attempt.id, ended_at=daemon.clock(), outcome="not_started",
                                    reason="the daemon stopped before the launch")
        return
    daemon.running[row.id] = run
    if state is JobState.PREEMPTED:  # it was being stopped: finish the handshake
        run.stop_reason = "preempt"
    status = read_status(Path(attempt.status_path)) or {}
    if "ended_at" in status or not _is_ours(run, handle):
        # it ended while the daemon was down (or its process is gone without a record)
        run.handle = handle
        if not attempt.handle:  # found in the runner's records: the attempt keeps its pid
            daemon.store.update_attempt(attempt.id, handle=handle.to_json())
        info = run.backend.exit_info(handle) or ExitInfo(None, signal.SIGKILL, None)
        if state is JobState.STARTING:
            daemon._transition(row.id, state, JobState.RUNNING, message="recovered",
                               started_at=run.started_at)
        daemon.finish(run, info)
        return
    log.info("re-adopting job %s (pid %s)", row.id, handle.pid)
    daemon.store.add_event(job_id=row.id, kind="adopted", now=daemon.clock(),
                           message=f"re-adopted pid {handle.pid} after a daemon restart")
    daemon._adopted(run, handle, state)


def _find_handle(attempt: AttemptRecord) -> Handle | None:
    if attempt.handle:
        return Handle.from_json(attempt.handle)
    # The daemon died between the launch and storing the handle: the runner's journal or
    # the shim's status file, under a path fixed before the launch, still names it.
    status = read_status(Path(attempt.status_path))
    if status and status.get("shim_pid"):
        extra: dict[str, object] = {"started_at": attempt.started_at}
        if status.get("runner"):  # started by the local runner: the job itself, no shim
            extra["runner"] = int(status["runner"])
        return Handle(backend=attempt.backend, pid=int(status["shim_pid"]),
                      status_path=attempt.status_path, extra=extra)
    # Or the shim started but had not yet written its status file: find it by its argv.
    import psutil

    for p in psutil.process_iter(["pid", "cmdline"]):
        if is_shim_of(p.info.get("cmdline") or [], attempt.status_path):
            return Handle(backend=attempt.backend, pid=p.info["pid"],
                          status_path=attempt.status_path,
                          extra={"started_at": attempt.started_at})
    return None


def _is_ours(run: Running, handle: Handle) -> bool:
    """Alive, and really the process we started (not a new one that reused the pid)."""
    if handle.extra.get("runner"):  # the job itself, started by the local runner
        return run.backend.is_alive(handle)
    return _is_our_shim(handle)


def _is_our_shim(handle: Handle) -> bool:
    """Alive, and really our shim (not a new process that reused the pid)."""
    if not pid_alive(handle.pid):
        return False
    try:
        import psutil

        return is_shim_of(psutil.Process(handle.pid).cmdline(), handle.status_path)
    except Exception:
        return False
