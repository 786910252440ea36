"""Taking up the work after a restart: nothing lost, nothing run twice.

Jobs run detached, started by their backend through something that records the job's
pid and, at the end, its exit status under the attempt's status path, stored with the
attempt before the launch. So after a crash each unfinished job is in one of three
situations, which its backend tells (``Backend.locate``): its process still runs (adopt
it), it ended meanwhile (record how), or the launch never happened (queue it again; no
process exists, so it cannot run twice).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from rota.backends.base import Handle
from rota.core.lifecycle import JobState
from rota.core.outcome import StopReason
from rota.core.spec import JobSpec
from rota.errors import BackendError
from rota.server.jobs.job_output import reader_for
from rota.server.jobs.job_table import pending_of
from rota.server.jobs.running import Running
from rota.server.loop.backend_set import BackendSet
from rota.store.repo import AttemptRecord, JobRecord

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from rota.config import Settings
    from rota.server.jobs.job_table import JobTable
    from rota.server.jobs.queue import PendingQueue
    from rota.server.loop.exits import Exits
    from rota.server.loop.launcher import Launcher
    from rota.server.tracking.trackers import Tracking
    from rota.store.repo import Store


class RecoveryPort(Protocol):
    """What taking up the work needs of the daemon (which meets it): the store and the
    job table, the queue and the states it fills, the backends that locate attempts, the
    launcher and exits that adopt or end them, and the loop's timer and batches."""

    settings: Settings
    store: Store
    table: JobTable
    backends: BackendSet
    launcher: Launcher
    exits: Exits
    tracking: Tracking
    clock: Callable[[], float]

    @property
    def queue(self) -> PendingQueue: ...
    @property
    def states(self) -> dict[int, JobState]: ...
    @property
    def running(self) -> dict[int, Running]: ...
    @property
    def stopping(self) -> bool: ...
    def later(self, delay: float, fn: Callable[[], None]) -> None: ...
    def batch(self) -> AbstractContextManager[None]: ...
    def enqueue(self, row: JobRecord, *, queue: bool = True) -> None: ...

#: seconds before an engine that could not say whether it holds an attempt is asked again
LOCATE_AGAIN_S = 30.0
log = logging.getLogger("rota.recovery")
NOT_LAUNCHED = "recovered: the launch had not happened"
#: up to this many names of completed jobs are read at a restart to know which waiting
#: jobs can have a predicted run time; past it every waiting job's name is asked about
KNOWN_NAMES_AT_MOST = 200_000
#: pending jobs read per page after a start (rota.server.loop.recovery.load_pending)
LOAD_PAGE = 50_000


def recover(daemon: RecoveryPort, *, pending: bool = True) -> None:
    """Take up every waiting, starting and running job. ``pending`` False: all but the
    pending jobs, which the daemon then reads page by page while it already answers
    (:func:`load_pending`); a resync reads them all at once here."""
    if pending:
        load_queue(daemon)
    else:
        _load_apart(daemon, *daemon.store.waiting_apart(mlflow_default=daemon.settings.mlflow))
    rows = daemon.store.active_jobs(waiting=False)
    attempts = daemon.store.last_attempts(r.id for r in rows if r.attempts)
    for row in rows:
        state = JobState(row.state)
        daemon.states[row.id] = state
        _take_up(daemon, row, state, attempts.get(row.id))


def load_queue(daemon: RecoveryPort) -> None:
    """The pending and held jobs rejoin the queue, read without their specs (a queue may
    be a million jobs long), each with its expected run time; those that want an MLflow
    run go the way a new job does."""
    queued = daemon.store.queued(mlflow_default=daemon.settings.mlflow,
                                 predicted=_predictor(daemon))
    daemon.queue.load(queued.pending)
    daemon.states.update(dict.fromkeys(map(attrgetter("id"), queued.pending), JobState.PENDING))
    _load_apart(daemon, queued.held, queued.tracked)


async def load_pending(daemon: RecoveryPort, page: int | None = None) -> bool:
    """After a start: the pending jobs join the queue a page at a time, in queue order,
    the loop answering between pages, so that the daemon's first answer does not wait
    for a long queue (a million jobs take seconds to read). Jobs that changed meanwhile
    are as memory says: one queued or ended since is not taken again from a page read
    before. False when a resync took the queue up afresh (or the daemon stopped) first."""
    queue, predicted = daemon.queue, _predictor(daemon)
    page = page or LOAD_PAGE
    after: tuple[int, int] | None = None
    while daemon.queue is queue and not daemon.stopping:
        jobs = daemon.store.pending_page(after, page, mlflow_default=daemon.settings.mlflow,
                                         predicted=predicted)
        if not jobs:
            return True
        after = (jobs[-1].priority, jobs[-1].id)
        states = daemon.states
        fresh = [j for j in jobs if j.id not in states]
        states.update(dict.fromkeys(map(attrgetter("id"), fresh), JobState.PENDING))
        queue.extend(fresh)
        await asyncio.sleep(0)
    return False


def _predictor(daemon: RecoveryPort) -> Callable[[list[str]], dict[str, float | None]]:
    """The expected run times of a restart's queue: asked only for names that some
    completed job had (a queue of a million uniquely named jobs asked a million times took
    minutes), unless there are too many such names to hold."""
    run_times = daemon.table.run_times
    known = daemon.store.completed_names(at_most=KNOWN_NAMES_AT_MOST)
    if known is None:
        return run_times.predicted_many
    return lambda names: run_times.predicted_many([n for n in names if n in known])


def _load_apart(daemon: RecoveryPort, held: list[int], tracked: list[int]) -> None:
    daemon.states.update(dict.fromkeys(held, JobState.HELD))
    for row in daemon.store.jobs(tracked).values():
        daemon.states[row.id] = JobState(row.state)
        daemon.enqueue(row, queue=row.state == JobState.PENDING.value)


def _take_up(daemon: RecoveryPort, row: JobRecord, state: JobState,
             attempt: AttemptRecord | None) -> None:
    """One job that was starting or running: requeue it, record its end, or adopt it."""
    table = daemon.table
    if attempt is None or attempt.ended_at is not None:
        # STARTING with no live attempt: the intent was never carried out
        table.requeue(row.id, state, NOT_LAUNCHED, pending_of(row, daemon.table.run_times))
        return
    run = _run_of(daemon.backends, row, attempt)
    run.files = daemon.launcher.files_of(row.user)
    daemon.tracking.adopt(row.id, run.spec, row.tracking, row.created_at, run.log_path,
                          row.attempts)
    run.output = reader_for(run, row.progress)
    try:
        found = run.backend.locate(Handle.from_json(attempt.handle) if attempt.handle else None,
                                   attempt.status_path, attempt.started_at)
    except BackendError as e:
        # an engine that cannot say now whether it holds the attempt: launching it again
        # could run it twice, so it stays as it is and is asked again shortly
        log.warning("job %s: %s; asking again in %gs", row.id, e, LOCATE_AGAIN_S)
        daemon.later(LOCATE_AGAIN_S, lambda: _take_up_again(daemon, row.id))
        return
    if found.handle is None:
        table.requeue(row.id, state, NOT_LAUNCHED, run.pending)
        daemon.store.update_attempt(attempt.id, ended_at=daemon.clock(), outcome="not_started",
                                    reason="the daemon stopped before the launch")
        return
    table.running[row.id] = run
    if state is JobState.PREEMPTED:  # it was being stopped: finish the handshake
        run.stop_reason = StopReason.PREEMPT
    if found.ended is not None:  # it ended while the daemon was down
        run.handle = found.handle
        if not attempt.handle:  # found in the backend's records: the attempt keeps its pid
            daemon.store.update_attempt(attempt.id, handle=found.handle.to_json())
        if state is JobState.STARTING:
            table.transition(row.id, state, JobState.RUNNING, message="recovered",
                             started_at=run.started_at)
        daemon.exits.finish(run, found.ended)
        return
    log.info("re-adopting job %s (pid %s)", row.id, found.handle.pid)
    daemon.store.add_event(job_id=row.id, kind="adopted", now=daemon.clock(),
                           message=f"re-adopted pid {found.handle.pid} after a daemon restart")
    daemon.launcher.adopt(run, found.handle, state)


def _take_up_again(daemon: RecoveryPort, job_id: int) -> None:
    row = daemon.store.get_job(job_id)
    state = JobState(row.state)
    if state in (JobState.STARTING, JobState.RUNNING, JobState.PREEMPTED) \
            and job_id not in daemon.running:
        with daemon.batch():
            attempt = daemon.store.last_attempts([job_id]).get(job_id)
            _take_up(daemon, row, state, attempt)


def _run_of(backends: BackendSet, row: JobRecord, attempt: AttemptRecord) -> Running:
    """The job's last attempt as the daemon keeps a running one."""
    return Running(job_id=row.id, attempt_id=attempt.id, attempt_no=attempt.number,
                   spec=JobSpec.stored(row.spec), gpus=tuple(attempt.gpu_indices),
                   milli=attempt.milli, gpu_mem=attempt.gpu_mem,
                   backend=backends.get(attempt.backend), started_at=attempt.started_at,
                   pending=pending_of(row), failures=row.failures,
                   log_path=Path(attempt.log_path), status_path=Path(attempt.status_path),
                   submitted_at=row.created_at, user=row.user,
                   idle_before=attempt.idle_seconds or 0.0)
