"""Which running jobs to stop so a higher-priority job can start. Pure, like the pass.

Only jobs submitted ``preemptible`` and of lower priority (a higher number) than the
waiting job are candidates. The cheapest are taken first: the work a victim would lose
(time since its last checkpoint, or since it started) times the GPUs it holds, so a job
that just saved, or holds little, goes before one an hour past its last save. Victims are
added until the waiting job fits, then any that turned out unnecessary are given back.
Jobs already being stopped count as freed, so a pass during their grace period picks no
one new for the same job. When even every candidate stopped would not make room, no one is
stopped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from rota.core.pool import GpuPool
from rota.core.snapshot import MILLI, GpuView, PendingJob, Policy


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A running job as preemption sees it."""

    id: int
    priority: int
    gpu_indices: tuple[int, ...]
    milli: int  # per GPU
    gpu_mem: int | None
    preemptible: bool = False
    since_checkpoint_s: float = 0.0  # work lost if it stopped now
    stopping: bool = False  # already asked to stop: its GPUs are as good as free
    # when it is expected to end: started_at + its time limit or predicted run time;
    # None: unknown (backfill and start estimates then never count on its GPUs)
    expected_end: float | None = None

    @property
    def cost(self) -> float:
        """Work lost, weighted by what it holds (a CPU-only job costs its time alone)."""
        held = self.milli * len(self.gpu_indices) / MILLI
        return self.since_checkpoint_s * max(held, 0.001)


def victims_for(job: PendingJob, gpus: Sequence[GpuView], running: Iterable[RunningJob],
                policy: Policy) -> tuple[int, ...] | None:
    """The running jobs to stop so that ``job`` fits; () when it fits once the jobs already
    stopping are gone; None when no choice of candidates makes room."""
    views = {g.index: g for g in gpus}
    if not job.gpus_milli:
        return None  # a CPU-only job never waits for GPUs
    freed = [r for r in running if r.stopping]
    if _fits(job, _without(views, freed), policy):
        return ()
    candidates = sorted((r for r in running if r.preemptible and not r.stopping
                         and r.priority > job.priority and _helps(job, r)),
                        key=lambda r: (r.cost, len(r.gpu_indices), -r.priority, r.id))
    chosen: list[RunningJob] = []
    for r in candidates:
        chosen.append(r)
        if _fits(job, _without(views, freed + chosen), policy):
            break
    else:
        return None
    # most expensive first: give back each victim the job can do without
    for r in sorted(chosen, key=lambda r: r.cost, reverse=True):
        rest = [c for c in chosen if c is not r]
        if _fits(job, _without(views, freed + rest), policy):
            chosen = rest
    return tuple(sorted(r.id for r in chosen))


def _helps(job: PendingJob, r: RunningJob) -> bool:
    """A victim must free a GPU the job may use."""
    return bool(r.gpu_indices) and (job.allowed is None
                                    or any(i in job.allowed for i in r.gpu_indices))


def _without(views: Mapping[int, GpuView], gone: Iterable[RunningJob]) -> list[GpuView]:
    out = dict(views)
    for r in gone:
        for i in r.gpu_indices:
            g = out.get(i)
            if g is not None:  # its load goes with it: the observed utilisation was its own
                out[i] = replace(g, allocated_milli=max(0, g.allocated_milli - r.milli),
                                 reserved_memory=max(0, g.reserved_memory - (r.gpu_mem or 0)),
                                 utilization=0.0)
    return list(out.values())


def _fits(job: PendingJob, gpus: list[GpuView], policy: Policy) -> bool:
    return GpuPool(gpus, policy).find(job) is not None
