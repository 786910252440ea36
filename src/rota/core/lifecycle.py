"""Job states and the one transition table every state change goes through."""

from __future__ import annotations

from enum import StrEnum

from rota.errors import IllegalTransition


class JobState(StrEnum):
    PENDING = "pending"
    HELD = "held"
    STARTING = "starting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def active(self) -> bool:
        """Holds (or is about to hold) GPUs."""
        return self in (JobState.STARTING, JobState.RUNNING, JobState.PREEMPTED)


TERMINAL = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT, JobState.CANCELLED})

_S = JobState
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    _S.PENDING: frozenset({_S.STARTING, _S.HELD, _S.CANCELLED, _S.FAILED}),
    _S.HELD: frozenset({_S.PENDING, _S.CANCELLED}),
    # STARTING -> PENDING: the launch failed or the daemon died before it; try again.
    _S.STARTING: frozenset({_S.RUNNING, _S.PENDING, _S.FAILED, _S.CANCELLED, _S.COMPLETED,
                            _S.TIMEOUT}),
    # RUNNING -> PENDING: a retry after failure, or its GPU was lost.
    _S.RUNNING: frozenset({_S.COMPLETED, _S.FAILED, _S.TIMEOUT, _S.CANCELLED, _S.PENDING,
                           _S.PREEMPTED}),
    # PREEMPTED: asked to stop so others can run; once it exits it waits again.
    _S.PREEMPTED: frozenset({_S.PENDING, _S.CANCELLED, _S.COMPLETED, _S.FAILED}),
    _S.COMPLETED: frozenset(),
    _S.FAILED: frozenset(),
    _S.TIMEOUT: frozenset(),
    _S.CANCELLED: frozenset(),
}


def check_transition(job_id: int | None, src: JobState, dst: JobState) -> None:
    """Raise IllegalTransition unless the table allows src -> dst."""
    if dst not in TRANSITIONS[src]:
        raise IllegalTransition(job_id, src.value, dst.value)
