"""What people ask of a job (through the API, on the loop thread): cancel, hold, release,
preempt, requeue. Each is checked against the job's state and carried out through the
job table (a transition) or the stop handshake."""

from __future__ import annotations

from collections.abc import Callable

from rota.core.lifecycle import JobState
from rota.core.outcome import StopReason
from rota.errors import Conflict
from rota.server.jobs.job_table import JobTable, pending_of
from rota.server.jobs.stopper import Stopper
from rota.store.repo import Store


class JobCommands:
    def __init__(self, store: Store, clock: Callable[[], float], table: JobTable,
                 stopper: Stopper, kick: Callable[[], None]) -> None:
        self.store, self.clock, self.table = store, clock, table
        self.stopper, self.kick = stopper, kick

    def preempt(self, job_id: int, why: str = "preempted by request") -> None:
        """Stop a running job through the handshake and queue it again in its old place
        (RUNNING -> PREEMPTED now, -> PENDING when it has exited)."""
        state = self.table.state(job_id)
        run = self.table.running.get(job_id)
        if run is None or state is not JobState.RUNNING:
            raise Conflict(f"job {job_id} is {state.value}; only running jobs can be preempted")
        if run.stop_reason is not None:
            raise Conflict(f"job {job_id} is already being stopped ({run.stop_reason})")
        self.table.transition(job_id, state, JobState.PREEMPTED, message=why,
                              kind="preempting")
        self.stopper.stop(run, StopReason.PREEMPT, why)

    def cancel(self, job_id: int) -> JobState:
        state = self.table.state(job_id)
        if state.terminal:
            raise Conflict(f"job {job_id} already ended ({state.value})")
        run = self.table.running.get(job_id)
        if run is not None:
            if run.stop_reason not in (None, StopReason.CANCEL):  # stopped to run again: not now
                run.stop_reason = StopReason.CANCEL
                self.store.add_event(job_id=job_id, kind="stopping:cancel", now=self.clock(),
                                     message="cancelled by request while being stopped")
            self.stopper.stop(run, StopReason.CANCEL, "cancelled by request")
            return state
        self.table.queue.remove(job_id)
        self.table.transition(job_id, state, JobState.CANCELLED, message="cancelled by request",
                              ended_at=self.clock(), end_reason="cancelled by request")
        self.kick()
        return JobState.CANCELLED

    def requeue(self, job_id: int) -> None:
        """Stop a running job (SIGTERM, then SIGKILL after its grace) and queue it again."""
        state = self.table.state(job_id)
        run = self.table.running.get(job_id)
        if run is None:
            raise Conflict(f"job {job_id} is {state.value}; only running jobs are stopped and "
                           "queued again (an ended one is submitted anew)")
        self.stopper.stop(run, StopReason.REQUEUE, "requeued by request")

    def hold(self, job_id: int) -> None:
        state = self.table.state(job_id)
        if state is not JobState.PENDING:
            raise Conflict(f"job {job_id} is {state.value}; only pending jobs can be held")
        self.table.queue.remove(job_id)
        self.table.transition(job_id, state, JobState.HELD, message="held by request")

    def release(self, job_id: int) -> None:
        state = self.table.state(job_id)
        if state is not JobState.HELD:
            raise Conflict(f"job {job_id} is {state.value}; only held jobs can be released")
        row = self.store.get_job(job_id)
        self.table.transition(job_id, state, JobState.PENDING, message="released")
        self.table.add_pending(pending_of(row, self.table.run_times))
        self.kick()
