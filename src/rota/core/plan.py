"""The scheduler's output: starts, reservations, and a reason for every job that waits."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rota.core.snapshot import PendingJob


def _queue_key(job: PendingJob) -> tuple[int, int]:
    return (job.priority, job.seq)


class ReasonCode(StrEnum):
    HELD = "held"
    DEPENDENCY = "dependency"
    DEPENDENCY_FAILED = "dependency_failed"
    BACKOFF = "backoff"
    RESOURCES = "resources"
    PRIORITY = "priority"  # would fit, but GPUs are kept for a job ahead of it
    UNSATISFIABLE = "unsatisfiable"  # cannot fit on this machine as it is now
    DRAINING = "draining"
    NOT_SCHEDULED = "not_scheduled"  # no pass has looked at it yet
    POOL_FULL = "pool_full"  # an engine's pool has as many of Rota's jobs as it may hold
    QUOTA = "quota"  # its user or project is at a quota (rota.core.quota)
    DATA = "data"  # its datasets are not on this machine yet (rota.server.storage.datasets)


@dataclass(frozen=True, slots=True)
class Reason:
    code: ReasonCode
    message: str
    until: float | None = None  # for BACKOFF / QUOTA: the time it may start
    blocker: int | None = None  # for DEPENDENCY / PRIORITY: the job it waits for


@dataclass(frozen=True, slots=True)
class Start:
    job_id: int
    gpu_indices: tuple[int, ...]
    milli_per_gpu: int  # 1000 for whole GPUs, the share for a fractional job, 0 for CPU-only
    gpu_mem: int | None

    @property
    def fraction(self) -> float:
        return self.milli_per_gpu / 1000


@dataclass(frozen=True, slots=True)
class Preemption:
    victim: int  # the running job to stop (through the stop handshake)
    for_job: int  # the waiting job it makes room for


@dataclass(frozen=True, slots=True)
class Reservation:
    job_id: int
    gpu_indices: tuple[int, ...]
    # when the kept GPUs are expected to have room for it (rota.core.backfill.shadow_time);
    # None: unknown, and no job backfills onto them
    shadow: float | None = None


@dataclass
class Plan:
    """What one pass decided.

    Once no GPU can hold even the smallest pending job, the pass stops looking: the jobs
    behind that point (``tail``) share ``tail_reason`` unless a gate of their own (a
    dependency, a backoff) applies, which ``reason`` works out on demand. That keeps a pass
    over a long queue on a full machine proportional to the jobs that could start.
    """

    starts: list[Start] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    reasons: dict[int, Reason] = field(default_factory=dict)
    # for jobs waiting on resources: how many waiting jobs are ahead of it in the queue
    queue_position: dict[int, int] = field(default_factory=dict)
    tail: Sequence[PendingJob] = ()
    tail_reason: Reason | None = None
    tail_position: int = 0
    gate: Callable[[PendingJob], Reason | None] | None = None
    # job id -> the absolute time a waiting job may start (rota.core.backfill); absent:
    # unknown (no expected run times to go by, or beyond Policy.estimate_jobs)
    start_estimates: dict[int, float] = field(default_factory=dict)
    # the snapshot's index of pending jobs by id, if it had one (Snapshot.by_id)
    by_id: Mapping[int, PendingJob] | None = field(default=None, repr=False)
    _tail_index: dict[int, int] | None = field(default=None, repr=False)

    def _tail_lookup(self, job_id: int) -> tuple[int, PendingJob] | None:
        if not self.tail:
            return None
        if self.by_id is not None:  # the tail is in queue order: search it by the job's key
            job = self.by_id.get(job_id)
            if job is None:
                return None
            n = bisect_left(self.tail, (job.priority, job.seq), key=_queue_key)
            found = n < len(self.tail) and self.tail[n].id == job_id
            return (n, self.tail[n]) if found else None
        if self._tail_index is None:
            self._tail_index = {j.id: n for n, j in enumerate(self.tail)}
        at = self._tail_index.get(job_id)
        return None if at is None else (at, self.tail[at])

    def reason(self, job_id: int) -> Reason | None:
        r = self.reasons.get(job_id)
        if r is not None:
            return r
        hit = self._tail_lookup(job_id)
        if hit is None:
            return None
        return (self.gate(hit[1]) if self.gate else None) or self.tail_reason

    def position(self, job_id: int) -> int:
        if job_id in self.queue_position:
            return self.queue_position[job_id]
        hit = self._tail_lookup(job_id)
        return self.tail_position + hit[0] if hit else 0

    def waiting(self) -> Iterator[tuple[int, Reason]]:
        """Every job that stays pending, with its reason."""
        yield from self.reasons.items()
        for j in self.tail:
            r = self.reason(j.id)
            if r is not None:
                yield j.id, r

    def reason_text(self, job_id: int) -> str:
        r = self.reason(job_id)
        if r is None:
            return ""
        ahead = self.position(job_id)
        if ahead and r.code in (ReasonCode.RESOURCES, ReasonCode.PRIORITY):
            return f"{r.message}; {ahead} waiting job{'s' if ahead != 1 else ''} ahead of it"
        return r.message
