"""Jobs' ends: watching their processes, and applying what ``core.outcome`` decides.

Each running job's backend gives the loop an fd that turns readable at the job's end;
exits that come within EXIT_GATHER_S of a first one are recorded in one commit. The facts
of the ended attempt (how it ended, why Rota was stopping it, GPU out-of-memory, the
checkpoint it left) go to ``core.outcome.decide``; its outcome is carried out here: the
job's transition and its place in the queue.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
from collections.abc import Callable
from typing import Any

from rota.backends.base import ExitInfo, NotStarted, TakenBack
from rota.backends.common import reap
from rota.core.lifecycle import JobState
from rota.core.outcome import (
    LOST,
    AttemptFacts,
    Cancelled,
    Complete,
    Exited,
    Fail,
    NeverStarted,
    OomFacts,
    Outcome,
    Requeue,
    RetryAt,
    RetryPolicy,
    RetryWithMoreMemory,
    StopReason,
    TimedOut,
    decide,
    ends_in_failure,
    lost_in_a_row,
)
from rota.core.outcome import Checkpoint as SavedCheckpoint
from rota.core.snapshot import MILLI
from rota.errors import StoreError
from rota.ml import checkpoints, oom, stated
from rota.server.jobs.batch import Batch, each
from rota.server.jobs.device_monitor import DeviceMonitor
from rota.server.jobs.job_output import checkpoints_of, read_outputs
from rota.server.jobs.job_table import JobTable
from rota.server.jobs.running import Running
from rota.server.storage.artifacts import Artifacts
from rota.server.storage.datasets import Datasets
from rota.server.storage.workspaces import Workspaces
from rota.server.tracking.logstream import read_tail
from rota.server.tracking.metrics import Metrics
from rota.server.tracking.trackers import Tracking
from rota.store.repo import Store

#: how long the exits after a first one are gathered before they are recorded in one
#: commit (as Nomad gathers its clients' allocation updates): the ends of short jobs come
#: one by one, and a commit each cost a quarter of a trivial job's daemon CPU
#: (bench/bench_daemon_cost.py, alternated: 1.85 -> 1.42 ms a job; recording an exit at
#: once after a quiet spell, then at most every 10 ms, saved less: 1.59 ms). An end is
#: stored, and its GPUs are free for the next job, at most this much later
EXIT_GATHER_S = 0.01

log = logging.getLogger("rota.daemon")


def _read_watched(fd: int) -> bytes:
    """What a watch fd holds at the job's end: the local runner's end record from its pipe;
    nothing from a pidfd (reading one is an error) or a runner that went away (EOF)."""
    try:
        return os.read(fd, 4096)
    except OSError:
        return b""


#: how often an attempt's watch may end without its end (a runner killed each time)
MAX_REWATCHES = 50


def recorded_end(info: ExitInfo, started_at: float, now: float) -> float:
    """When the attempt ended: the time its runner, shim or engine recorded (it may have
    ended long before the daemon learnt of it: while the daemon was down, or while the
    store could not be written), kept between its start and now (a clock that jumped, an
    engine's clock ahead of ours); now when nothing recorded it."""
    if info.ended_at is None:
        return now
    return min(max(info.ended_at, started_at), now)

class Exits:
    def __init__(self, *, store: Store, clock: Callable[[], float], table: JobTable,
                 monitor: DeviceMonitor, tracking: Tracking, metrics: Metrics, batch: Batch,
                 write_launches: Callable[[], None], kick: Callable[[], None],
                 tidy: Callable[[], bool], tidy_every: int,
                 artifacts: Artifacts | None = None, datasets: Datasets | None = None,
                 workspaces: Workspaces | None = None) -> None:
        self.store, self.clock, self.table, self.monitor = store, clock, table, monitor
        self.artifacts = artifacts  # saves a job's outputs at its end
        self.datasets = datasets  # a job's datasets stay in the cache while it runs
        self.workspaces = workspaces  # a bucket's workspace goes back when its last job ends
        self.tracking, self.metrics, self.batch = tracking, metrics, batch
        # an exit may be of a job whose start is not stored yet: stored first
        self.write_launches, self.kick = write_launches, kick
        # lets the backends drop their records of ended attempts; False: not now
        self.tidy, self.tidy_every = tidy, tidy_every
        self.loop: asyncio.AbstractEventLoop | None = None  # set when the daemon starts
        self._exits: list[int] = []  # jobs whose process ended, recorded together
        self._record_timer: asyncio.TimerHandle | None = None  # records them
        self._since_tidy = 0

    # --- watching ------------------------------------------------------------------------
    def watch(self, run: Running) -> None:
        assert run.handle is not None and self.loop is not None
        fd = run.backend.watch(run.handle)
        if fd is None:
            self._exited_now(run.job_id)
            return
        run.pidfd = fd
        self.loop.add_reader(fd, self._exited_now, run.job_id)

    def unwatch(self, run: Running) -> None:
        if run.pidfd is not None and self.loop is not None:
            self.loop.remove_reader(run.pidfd)
            os.close(run.pidfd)
            run.pidfd = None

    def forget(self) -> None:
        """Stop watching every job and drop the exits not yet recorded (the work is taken
        up again from the store; the processes go on)."""
        for run in self.table.running.values():
            run.cancel_timers()
            self.unwatch(run)
        self._exits.clear()
        self._stop_timer()

    def _stop_timer(self) -> None:
        if self._record_timer is not None:
            self._record_timer.cancel()
            self._record_timer = None

    def _exited_now(self, job_id: int) -> None:
        """A job's process ended: collect it with the others that end within
        EXIT_GATHER_S, so a burst of exits is recorded in one commit."""
        run = self.table.running.get(job_id)
        if run is not None:
            if run.pidfd is not None:
                run.watched = _read_watched(run.pidfd)
            self.unwatch(run)
        if not self._exits and self.loop is not None:
            self._record_timer = self.loop.call_later(EXIT_GATHER_S, self.record_exits)
        self._exits.append(job_id)

    def record_exits(self) -> None:
        """Record the exits gathered so far (also when the daemon stops)."""
        self._stop_timer()
        exits, self._exits = self._exits, []
        if not exits:
            return
        with self.batch():
            self.write_launches()
            for job_id in exits:
                each(self._on_exit, job_id)
        self.monitor.refresh()
        self._since_tidy += len(exits)
        if self._since_tidy >= self.tidy_every and self.tidy():
            self._since_tidy = 0

    def _on_exit(self, job_id: int) -> None:
        run = self.table.running.get(job_id)
        if run is None or run.handle is None:
            return
        self.unwatch(run)
        reap(run.handle.pid)
        info = run.backend.collect(run.handle, run.watched)
        if info is None and run.rewatches < MAX_REWATCHES and run.backend.is_alive(run.handle):
            # what was watched went away, not the job (the local runner died; its keeper
            # starts the next one, which takes the job over): watch it again
            run.rewatches += 1
            run.watched = b""
            self.watch(run)
            return
        self.finish(run, info or ExitInfo(None, signal.SIGKILL, None))

    # --- applying the outcome ----------------------------------------------------------
    def finish(self, run: Running, info: ExitInfo) -> None:
        """Record how an attempt ended and apply what ``core.outcome`` decides next."""
        now = self.clock()
        ended_at = recorded_end(info, run.started_at, now)
        run.cancel_timers()
        try:
            if run.output is not None:
                run.output.ended()
            read_outputs(self.store, self.tracking, [run], now, final=True)
            if run.output is not None and not run.output.caught_up():  # the rest: later
                self.table.ended_output[run.job_id] = run
        except (OSError, StoreError):  # the end must be recorded even so
            log.exception("job %s: reading its last output failed", run.job_id)
        self.table.running.pop(run.job_id, None)
        # should the end not be stored, reads show the job as the store still does (running,
        # on its GPUs) until the daemon takes the work up again and records the end anew
        self.store.on_rollback(lambda: self.table.running.setdefault(run.job_id, run))
        if run.output is not None:
            self.tracking.note_checkpoint(run.job_id, run.output.progress.checkpoint)
        self.monitor.release(run.job_id)
        end: Exited | NeverStarted = Exited(info.exit_code, info.signal, why=info.why)
        if ends_in_failure(run.stop_reason, end) and not isinstance(info, NotStarted
                                                                    | TakenBack):
            end = Exited(info.exit_code, info.signal, why=info.why, said=self._stated(run))
        if isinstance(info, NotStarted):  # its engine dropped it for an unmet dependency
            end = NeverStarted(info.why, waits=True)
        elif isinstance(info, TakenBack):  # its engine preempted it or lost its node
            end = Exited(info.exit_code, info.signal, why=info.why)  # (as above)
            run.stop_reason = run.stop_reason or StopReason.PREEMPT  # as Rota's preemption
        outcome = decide(self._facts(run, end), end, now)
        self._apply(run, self.table.state(run.job_id), outcome, end, ended_at)
        self._let_go(run)
        reason = outcome.reason if isinstance(outcome, Cancelled | TimedOut | Requeue) \
            else end.how
        self.store.update_attempt(run.attempt_id, ended_at=ended_at, exit_code=info.exit_code,
                                  signal=info.signal, outcome=outcome.record, reason=reason,
                                  peak_gpu_mem=run.peak_gpu_mem or None,
                                  idle_seconds=run.idle_seconds)
        self.metrics.ends.labels(outcome.record).inc()
        if outcome.record == "completed":  # a new run time for its name's prediction
            self.table.run_times.forget(run.spec.name)
        self.metrics.run_time.labels(outcome.record).observe(max(0.0, ended_at - run.started_at))
        if self.table.state(run.job_id).terminal:
            self.store.after_commit(lambda: self.table.notify_end(run.job_id))
            if run.spec.outputs and self.artifacts is not None:
                newest = self._saved(run) if run.spec.checkpoint_dir else None
                self.artifacts.want(run.job_id, run.spec, run.user,
                                    checkpoint=newest.path if newest else None)
        self.kick()

    def launch_failed(self, run: Running, why: str, passing: bool = False) -> None:
        """The attempt's launch failed: no process exists; the outcome decides what next
        (``passing``: a trouble of the backend's, not the job's: queued again, up to
        ``LOST_LAUNCHES_MAX`` times in a row)."""
        now = self.clock()
        # the losses before this one, from the store: a daemon restart keeps the count
        lost = lost_in_a_row(a.outcome for a in self.store.attempts(run.job_id)
                             if a.id != run.attempt_id) if passing else 0
        self.store.update_attempt(run.attempt_id, ended_at=now,
                                  outcome=LOST if passing else "launch_failed", reason=why)
        del self.table.running[run.job_id]
        self.store.on_rollback(lambda: self.table.running.setdefault(run.job_id, run))  # (finish)
        end = NeverStarted(why, waits=self._waits(run), passing=passing)
        facts = dataclasses.replace(self._facts(run, end), lost_before=lost)
        outcome = decide(facts, end, now)
        self._apply(run, JobState.STARTING, outcome, end, now)
        self._let_go(run)
        self.kick()

    def _let_go(self, run: Running) -> None:
        """A local job's datasets may leave the cache once it is not running; its
        workspace, if a bucket is its home, goes back there once none of its jobs is."""
        if self.workspaces is not None:
            self.workspaces.ended(run.job_id)
        if self.datasets is not None and run.spec.datasets \
                and not run.backend.capabilities.engine:
            self.datasets.ended(run.job_id, run.spec, waits=self.table.state(run.job_id)
                                in (JobState.PENDING, JobState.HELD))

    def _waits(self, run: Running) -> bool:
        """Whether the failed launch is a cluster job's with a dependency not completed: it
        was handed over to wait for that job in the engine, and the launch failed because
        that job moved (ended, or was requeued): not this job's failure."""
        return run.backend.capabilities.engine and any(
            self.table.state(dep) is not JobState.COMPLETED for dep in run.pending.after)

    def _facts(self, run: Running, end: Exited | NeverStarted) -> AttemptFacts:
        """What ``decide`` needs; the costly facts (the log's tail, checkpoints on disk)
        only where the decision reads them."""
        spec, stop = run.spec, run.stop_reason
        failed = ends_in_failure(stop, end)
        # a preempted job's record names what it saved, wherever it was found (its
        # checkpoint_dir, what it reported, or the usual layouts under its cwd); "saved no
        # checkpoint" only for a job that checkpoints and left none
        preempted = stop in (StopReason.PREEMPT, StopReason.IDLE)  # both resume from it
        saved = self._saved(run) if preempted else None
        checkpointing = preempted and (
            saved is not None or spec.checkpoint_dir is not None
            or bool(run.output and run.output.progress.checkpoint))
        return AttemptFacts(
            stop=stop, failures=run.failures,
            policy=RetryPolicy(spec.retries, spec.retry_backoff, spec.retry_backoff_max),
            gpus=run.gpus, milli=run.milli, gpu_mem=run.gpu_mem, time_limit=spec.time_limit,
            oom=self._oom_facts(run) if failed else None, checkpointing=checkpointing,
            checkpoint=saved)

    def _apply(self, run: Running, src: JobState, outcome: Outcome, end: Exited | NeverStarted,
               ended_at: float) -> None:
        """Carry out a decided outcome: the job's transition and its place in the queue
        (``ended_at``: when the attempt ended, as recorded where it ran)."""
        job_id, code, table = run.job_id, end.code, self.table
        match outcome:
            case Complete():
                table.transition(job_id, src, JobState.COMPLETED, message=outcome.message,
                                 ended_at=ended_at, exit_code=0, end_reason=outcome.message)
            case Cancelled():
                fields: dict[str, Any] = {"exit_code": code} if isinstance(end, Exited) \
                    else {}
                table.transition(job_id, src, JobState.CANCELLED, message=outcome.reason,
                                 ended_at=ended_at, end_reason=outcome.end_reason, **fields)
            case TimedOut():
                table.transition(job_id, src, JobState.TIMEOUT, message=outcome.reason,
                                 ended_at=ended_at, exit_code=code, end_reason=outcome.reason)
            case Requeue():
                table.requeue(job_id, src, outcome.reason, run.pending,
                              not_before=outcome.not_before)
                if outcome.held:  # in its place, for `rota release` to let it run again
                    table.queue.remove(job_id)
                    table.transition(job_id, JobState.PENDING, JobState.HELD,
                                     message="held: `rota release` lets it run again")
            case RetryWithMoreMemory():
                self.store.update_job(job_id, gpus=outcome.gpus_milli / MILLI,
                                      gpu_mem=outcome.gpu_mem)
                pending = run.pending._replace(gpus_milli=outcome.gpus_milli,
                                               gpu_mem=outcome.gpu_mem)
                table.requeue(job_id, src, outcome.reason, pending, exit_code=code)
                self.store.add_event(job_id=job_id, kind="oom_retry", now=self.clock(),
                                     message=outcome.note)
            case RetryAt():
                table.requeue(job_id, src, outcome.reason, run.pending, not_before=outcome.at,
                              failures=outcome.failures, exit_code=code)
            case Fail():
                table.transition(job_id, src, JobState.FAILED, message=outcome.reason,
                                 ended_at=ended_at, exit_code=code, end_reason=outcome.reason,
                                 failures=outcome.failures)

    @staticmethod
    def _stated(run: Running) -> str:
        """Why the failed attempt said it failed (its last ``rota: FAILED:`` line), or ""."""
        try:
            return stated.stated_reason(read_tail(run.log_path, stated.TAIL_BYTES)) or ""
        except OSError:
            return ""

    def _saved(self, run: Running) -> SavedCheckpoint | None:
        """The newest valid checkpoint the stopped attempt left."""
        # the attempt has just ended: what it wrote counts without waiting for it to settle
        best = checkpoints.newest_valid(checkpoints_of(
            run, since=run.started_at, now=self.clock() + checkpoints.SETTLE_S))
        return None if best is None else SavedCheckpoint(best.path, best.step)

    def _oom_facts(self, run: Running) -> OomFacts | None:
        """Whether the attempt died of GPU out-of-memory, and the larger request some GPU it
        may use can hold (a job runs once more with more memory)."""
        if not run.gpus or not oom.died_of_oom(read_tail(run.log_path, oom.TAIL_BYTES)):
            return None
        if any(e.kind == "oom_retry" for e in self.store.events(run.job_id)):
            return OomFacts(retried_before=True, bigger=None, peak=run.peak_gpu_mem)
        totals = [g.memory_total for i, g in self.monitor.readings.items()
                  if run.pending.allowed is None or i in run.pending.allowed]
        bigger = oom.bigger_request(asked=run.gpu_mem, peak=run.peak_gpu_mem,
                                    milli=run.milli, gpu_total=max(totals, default=0))
        return OomFacts(retried_before=False, bigger=bigger, peak=run.peak_gpu_mem)

