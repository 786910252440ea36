"""The jobs the daemon holds in memory, and the one place their states change.

Pending jobs wait in the queue (in scheduling order), jobs that hold GPUs are ``running``,
and ``states`` knows the state of every job seen this run (ahead of the store by at most
one batch). A state changes through ``transition`` only: the store first, then memory
(put back should the batch not commit), and once the end is committed whoever waits for
it learns of it. A job that wants an MLflow run it does not have yet joins the queue once
the run exists. The API reads a ``LiveJobs`` view.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from rota.config import Settings
from rota.core.lifecycle import JobState
from rota.core.snapshot import PendingJob, WorkspacelessJob, to_milli
from rota.core.spec import JobSpec
from rota.errors import NotFound
from rota.server.jobs.queue import PendingQueue
from rota.server.jobs.run_times import RunTimes
from rota.server.jobs.running import Running
from rota.server.tracking.trackers import Tracking
from rota.store.repo import JobRecord, Store

#: fresh specs kept at most (a submit past it keeps none: a launch reads the store)
FRESH_SPECS_MAX = 10_000


def pending_of(row: JobRecord, run_times: RunTimes | None = None) -> PendingJob:
    """A stored job as the queue holds it (its id is its place among equal priorities),
    with its expected run time: its time limit, else one predicted from ``run_times``."""
    spec = row.spec
    limit = spec.get("time_limit")
    expected = (float(limit) if limit is not None else None) if run_times is None \
        else run_times.expected(limit, row.name)
    allowed = spec.get("allowed_gpus")
    kind = PendingJob if spec.get("workspace", True) is not False else WorkspacelessJob
    return kind(id=row.id, priority=row.priority, seq=row.id,
                gpus_milli=to_milli(row.gpus), gpu_mem=row.gpu_mem,
                allowed=frozenset(allowed) if allowed else None,
                after=tuple(spec.get("after") or ()), not_before=row.not_before,
                pool=row.pool, user=row.user or "", project=row.project,
                submitted=row.created_at or 0.0, expected=expected)


@dataclass(frozen=True)
class LiveJobs:
    """A read-only view of the table for the API (live: it follows the table)."""

    states: Mapping[int, JobState]
    running: Mapping[int, Running]


class JobTable:
    def __init__(self, settings: Settings, store: Store, clock: Callable[[], float],
                 tracking: Tracking, kick: Callable[[], None]) -> None:
        self.settings, self.store, self.clock = settings, store, clock
        self.tracking, self.kick = tracking, kick
        self.queue = PendingQueue()
        self.run_times = RunTimes(store, clock)  # predicted run times, cached per name
        self.running: dict[int, Running] = {}
        # ended jobs whose output is still being read (job_output.read_ended)
        self.ended_output: dict[int, Running] = {}
        self.states: dict[int, JobState] = {}
        # the checked specs of jobs submitted to this daemon, for their first launch (read
        # back from the store, a spec is validated again: ~4 % of a trivial job's cost);
        # any other launch reads the store, as do jobs past FRESH_SPECS_MAX
        self.fresh_specs: dict[int, JobSpec] = {}
        self.live = LiveJobs(MappingProxyType(self.states), MappingProxyType(self.running))
        self._exited: dict[int, asyncio.Event] = {}  # job id -> set when it ends

    # --- states ----------------------------------------------------------------------------
    def state(self, job_id: int) -> JobState:
        st = self.states.get(job_id)
        if st is None:
            try:
                st = JobState(self.store.get_job(job_id).state)
            except NotFound:
                raise NotFound(f"no job {job_id}") from None
            self.states[job_id] = st
        return st

    def transition(self, job_id: int, src: JobState, dst: JobState, *, message: str,
                   kind: str | None = None, **fields: object) -> None:
        self.store.transition(job_id, src, dst, now=self.clock(), message=message, kind=kind,
                              **fields)
        # memory goes ahead of a batch's commit (later items read the new state) and back
        # should it fail, so that reads never show a state the store does not hold
        prior = self.states.get(job_id)
        self.states[job_id] = dst
        self.store.on_rollback(lambda: self._restore(job_id, prior))
        if dst.terminal:  # waiters and trackers learn of an end once it is stored
            self.fresh_specs.pop(job_id, None)
            self.store.after_commit(lambda: self._ended(job_id, dst))

    def _restore(self, job_id: int, prior: JobState | None) -> None:
        if prior is None:
            self.states.pop(job_id, None)
        else:
            self.states[job_id] = prior

    def _ended(self, job_id: int, state: JobState) -> None:
        self.notify_end(job_id)
        self.tracking.ended(job_id, state.value, now=self.clock())

    def requeue(self, job_id: int, src: JobState, why: str, pending: PendingJob, *,
                not_before: float | None = None, **fields: object) -> None:
        """Back to the queue, in its old place among jobs of its priority (same seq)."""
        self.transition(job_id, src, JobState.PENDING, message=why, kind="requeued",
                        not_before=not_before, **fields)
        self.queue.add(pending._replace(not_before=not_before))
        self.store.on_rollback(lambda: self.queue.remove(job_id))

    async def wait_for_end(self, job_id: int, timeout: float | None) -> JobState:
        state = self.state(job_id)
        if state.terminal:
            return state
        ev = self._exited.setdefault(job_id, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ev.wait(), timeout)
        return self.state(job_id)

    def notify_end(self, job_id: int) -> None:
        ev = self._exited.pop(job_id, None)
        if ev is not None:
            ev.set()

    def forget(self) -> None:
        """Drop what memory holds of jobs (to read it all again from the store); inside a
        transaction that then does not commit, memory is put back as it was, so reads go
        on showing the last stored state rather than nothing."""
        running, states, queue = dict(self.running), dict(self.states), self.queue
        parked = dict(self.tracking.parked)
        self.store.on_rollback(lambda: self._put_back(running, states, queue, parked))
        self.running.clear()
        self.states.clear()
        self.fresh_specs.clear()  # (a cache: the store has them)
        self.queue = PendingQueue()
        self.tracking.parked.clear()

    def _put_back(self, running: dict[int, Running], states: dict[int, JobState],
                  queue: PendingQueue, parked: dict[int, PendingJob]) -> None:
        # the dicts in place: LiveJobs views them
        self.running.clear()
        self.running.update(running)
        self.states.clear()
        self.states.update(states)
        self.queue = queue
        self.tracking.parked.clear()
        self.tracking.parked.update(parked)

    # --- joining the queue -------------------------------------------------------------
    def accept(self, rows: list[JobRecord], specs: Sequence[JobSpec] = ()) -> None:
        """Newly stored jobs join the queue and a pass runs (``specs``: the specs they were
        stored from, in their order, kept for their first launch)."""
        self.run_times.prefetch(r.name for r in rows if r.spec.get("time_limit") is None)
        if specs and len(self.fresh_specs) + len(rows) <= FRESH_SPECS_MAX:
            self.fresh_specs.update((r.id, spec) for r, spec in zip(rows, specs, strict=True))
        for row in rows:
            st = JobState(row.state)
            self.states[row.id] = st
            if st in (JobState.PENDING, JobState.HELD):
                self.enqueue(row, queue=st is JobState.PENDING)
        self.kick()

    def enqueue(self, row: JobRecord, *, queue: bool = True) -> None:
        """A pending job joins the queue (a held one only gets ready): a job that wants an
        MLflow run it does not have yet waits for it, so its first attempt logs there."""
        if self.tracking.wants_mlflow(row.spec) and row.id not in self.tracking.creating:
            spec = JobSpec.stored(row.spec)
            log_path = self.settings.logs_dir / f"{row.id}.log"
            if not self.tracking.adopt(row.id, spec, row.tracking, row.created_at, log_path,
                                       row.attempts):
                self.tracking.open_run(job_id=row.id, user=row.user, spec=spec,
                                       submitted_at=row.created_at, log_path=log_path,
                                       done=self._run_opened)
        if queue:
            self.add_pending(pending_of(row, self.run_times))

    def add_pending(self, pending: PendingJob) -> None:
        if pending.id in self.tracking.creating:
            self.tracking.parked[pending.id] = pending
        else:
            self.queue.add(pending)

    def _run_opened(self, job_id: int, found: dict[str, object] | None,
                    error: str | None) -> None:
        """The job's MLflow run exists (or could not be made): record it, and queue the job
        if it was waiting for it."""
        if found is not None:
            self.store.set_tracking(job_id, {"mlflow": found})
            self.store.add_event(job_id=job_id, kind="mlflow", now=self.clock(),
                                 message=f"MLflow run {found['run_id']} in experiment "
                                         f"{found['experiment']!r} at {found['uri']}")
        else:
            self.store.set_tracking(job_id, {"mlflow": {"error": error}})
            self.store.add_event(job_id=job_id, kind="mlflow_error", now=self.clock(),
                                 message=f"{error}; the job runs without an MLflow run")
        pending = self.tracking.parked.pop(job_id, None)
        if pending is not None and self.state(job_id) is JobState.PENDING:
            self.queue.add(pending)
            self.kick()
