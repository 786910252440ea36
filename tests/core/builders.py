"""Builders for scheduler tests: jobs, GPUs and passes that read like sentences.

    plan = plan_for(gpus(4, mem="24G"), [a_job(1).gpus(0.5), a_job(2).gpus(2).priority(-1)])
    machine(a_gpu(0), a_gpu(1).allocated(0.5).external_mem("10G"), a_gpu(2).paused())

Job and GPU builders are mutable and return themselves; ``build()`` gives the frozen value.
Wherever a helper takes jobs or GPUs it takes builders and built values alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from rota.core.lifecycle import JobState
from rota.core.plan import Plan, Reason, ReasonCode, Start
from rota.core.schedule import schedule
from rota.core.snapshot import MILLI, GpuView, PendingJob, Policy, Snapshot, to_milli
from rota.units import parse_gpu_set, parse_memory

GIB = 1 << 30
GATES = frozenset({ReasonCode.DEPENDENCY, ReasonCode.DEPENDENCY_FAILED, ReasonCode.BACKOFF})


def mem(value: str | int | None) -> int | None:
    """'20G' -> bytes; ints pass through; None stays None."""
    return None if value is None else parse_memory(value)


# --- jobs --------------------------------------------------------------------------------


class JobBuilder:
    def __init__(self, job_id: int) -> None:
        self._id = job_id
        self._priority = 0
        self._seq: int | None = None
        self._milli = MILLI
        self._mem: int | None = None
        self._allowed: frozenset[int] | None = None
        self._after: tuple[int, ...] = ()
        self._not_before: float | None = None
        self._expected: float | None = None

    def gpus(self, n: float) -> JobBuilder:
        self._milli = to_milli(n)
        return self

    def milli(self, m: int) -> JobBuilder:
        self._milli = m
        return self

    def cpu_only(self) -> JobBuilder:
        return self.milli(0)

    def priority(self, p: int) -> JobBuilder:
        self._priority = p
        return self

    def seq(self, s: int) -> JobBuilder:
        self._seq = s
        return self

    def mem(self, m: str | int | None) -> JobBuilder:
        self._mem = mem(m)
        return self

    def allowed(self, which: str | Iterable[int] | None) -> JobBuilder:
        self._allowed = (parse_gpu_set(which) if isinstance(which, str) or which is None
                         else frozenset(which))
        return self

    def after(self, *job_ids: int) -> JobBuilder:
        self._after = tuple(job_ids)
        return self

    def not_before(self, t: float | None) -> JobBuilder:
        self._not_before = t
        return self

    def expected(self, seconds: float | None) -> JobBuilder:
        """Seconds it is expected to run (its time limit or a predicted run time)."""
        self._expected = seconds
        return self

    def build(self) -> PendingJob:
        return PendingJob(id=self._id, priority=self._priority,
                          seq=self._id if self._seq is None else self._seq,
                          gpus_milli=self._milli, gpu_mem=self._mem, allowed=self._allowed,
                          after=self._after, not_before=self._not_before,
                          expected=self._expected)


def a_job(job_id: int) -> JobBuilder:
    """A 1-GPU job at priority 0 whose submission order (seq) is its id."""
    return JobBuilder(job_id)


def many_jobs(ids: Iterable[int], gpus: float = 1.0) -> list[PendingJob]:
    return [a_job(i).gpus(gpus).build() for i in ids]


JobLike = JobBuilder | PendingJob


def job_of(j: JobLike) -> PendingJob:
    return j.build() if isinstance(j, JobBuilder) else j


# --- GPUs --------------------------------------------------------------------------------


class GpuBuilder:
    def __init__(self, index: int, memory: str | int = "80G") -> None:
        self._view = GpuView(index=index, memory_total=parse_memory(memory))

    def _set(self, **changes: object) -> GpuBuilder:
        self._view = dataclasses.replace(self._view, **changes)  # type: ignore[arg-type]
        return self

    def memory(self, m: str | int) -> GpuBuilder:
        return self._set(memory_total=parse_memory(m))

    def allocated(self, share: float) -> GpuBuilder:
        """Rota already has this share of the GPU allocated to running jobs."""
        return self._set(allocated_milli=to_milli(share))

    def reserved_mem(self, m: str | int) -> GpuBuilder:
        """Memory Rota's running jobs on this GPU asked for."""
        return self._set(reserved_memory=parse_memory(m))

    def external_mem(self, m: str | int) -> GpuBuilder:
        """Memory held by processes Rota did not start."""
        return self._set(memory_external=parse_memory(m))

    def util(self, u: float) -> GpuBuilder:
        return self._set(utilization=u)

    def paused(self) -> GpuBuilder:
        return self._set(paused=True)

    def unhealthy(self) -> GpuBuilder:
        return self._set(healthy=False)

    def build(self) -> GpuView:
        return self._view


def a_gpu(index: int, memory: str | int = "80G") -> GpuBuilder:
    """An idle, healthy 80G GPU unless told otherwise."""
    return GpuBuilder(index, memory)


GpuLike = GpuBuilder | GpuView


def machine(*gs: GpuLike) -> list[GpuView]:
    return [g.build() if isinstance(g, GpuBuilder) else g for g in gs]


def gpus(n: int, mem: str | int = "80G") -> list[GpuView]:
    """n idle GPUs, indices 0..n-1."""
    return [a_gpu(i, mem).build() for i in range(n)]


# --- passes ------------------------------------------------------------------------------


def snapshot_of(gs: Sequence[GpuLike], jobs: Iterable[JobLike], *,
                deps: Mapping[int, JobState] | None = None,
                presorted: bool = False) -> Snapshot:
    return Snapshot(gpus=machine(*gs), pending=[job_of(j) for j in jobs],
                    presorted=presorted, dependency_states=dict(deps or {}))


def plan_for(gs: Sequence[GpuLike], jobs: Iterable[JobLike], *, policy: Policy | None = None,
             now: float = 0.0, deps: Mapping[int, JobState] | None = None,
             presorted: bool = False) -> Plan:
    """One scheduling pass over these GPUs and pending jobs."""
    snap = snapshot_of(gs, jobs, deps=deps, presorted=presorted)
    return schedule(snap, policy or Policy(), now)


def started(plan: Plan) -> dict[int, Start]:
    return {s.job_id: s for s in plan.starts}


def placed(plan: Plan) -> dict[int, tuple[int, ...]]:
    """job id -> the GPU indices it starts on."""
    return {s.job_id: s.gpu_indices for s in plan.starts}


def code(plan: Plan, job_id: int) -> ReasonCode | None:
    r = plan.reason(job_id)
    return None if r is None else r.code


def codes(plan: Plan) -> dict[int, ReasonCode]:
    """Every waiting job's reason code, tail included."""
    return {job_id: r.code for job_id, r in plan.waiting()}


def apply(gs: Sequence[GpuView], plan: Plan) -> list[GpuView]:
    """The GPUs as they stand once every start of the plan holds its share and memory."""
    by_index = {g.index: g for g in gs}
    for s in plan.starts:
        for i in s.gpu_indices:
            g = by_index[i]
            by_index[i] = dataclasses.replace(
                g, allocated_milli=g.allocated_milli + s.milli_per_gpu,
                reserved_memory=g.reserved_memory + (s.gpu_mem or 0))
    return [by_index[g.index] for g in gs]


def normalised(plan: Plan) -> tuple[object, ...]:
    """What a plan decided, in a form two plans can be compared by (the tail is lazy)."""
    waiting: dict[int, Reason] = dict(plan.waiting())
    return (tuple(plan.starts), tuple(plan.reservations), waiting,
            {j: plan.position(j) for j in sorted(waiting)})
