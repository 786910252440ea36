"""EASY backfill's time arithmetic: the shadow time of a reservation, and start estimates.

Pure, like the pass. Times come from expected run times: a job's time limit, else a run time
the server predicted from the history of its name (PendingJob.expected, and for running
jobs RunningJob.expected_end). A job whose expected run time is unknown is never counted on
to end: GPUs it holds free at no projected time.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from rota.core.plan import Plan, ReasonCode
from rota.core.pool import GpuPool
from rota.core.snapshot import MILLI, GpuView, PendingJob, Policy

# what holds GPUs until an expected time: (end or None for unknown, GPUs, milli per GPU,
# gpu_mem per GPU or None)
Occupant = tuple[float | None, tuple[int, ...], int, int | None]

_WAITS_FOR_GPUS = (ReasonCode.RESOURCES, ReasonCode.PRIORITY)


def shadow_time(job: PendingJob, kept: Iterable[int], free_milli: Mapping[int, int],
                free_mem: Mapping[int, int], occupants: Iterable[Occupant],
                now: float) -> float | None:
    """When every GPU kept for ``job`` is expected to have room for its part of it, as the
    jobs on it end in order of their expected ends; None when some GPU would still lack room
    once every job on it with a known end has ended (an unknown end, or a hold no job
    accounts for)."""
    milli, mem = min(job.gpus_milli, MILLI), job.gpu_mem or 0
    kept = set(kept)
    on_gpu: dict[int, list[tuple[float, int, int]]] = {i: [] for i in kept}
    for end, indices, m, gm in occupants:
        for i in indices:
            if i in on_gpu:
                on_gpu[i].append((float("inf") if end is None else end, m, gm or 0))
    shadow = now
    for i in kept:
        have_milli, have_mem = free_milli[i], free_mem[i]
        if have_milli >= milli and have_mem >= mem:
            continue
        for end, m, gm in sorted(on_gpu[i]):
            if end == float("inf"):
                return None
            have_milli, have_mem = have_milli + m, have_mem + gm
            if have_milli >= milli and have_mem >= mem:
                shadow = max(shadow, end)
                break
        else:
            return None
    return shadow


def start_estimates(gpus: Sequence[GpuView], pending: Sequence[PendingJob], plan: Plan,
                    occupants: Iterable[Occupant], policy: Policy, now: float,
                    limit: int) -> dict[int, float]:
    """When each of the first ``limit`` jobs waiting for GPUs may start: the GPUs as the
    plan leaves them, the occupants' expected ends replayed in time order, and the queue
    placed in order on what they free. A job starts no earlier than the one ahead of it
    (the projection counts on no backfill, so it errs late) and holds its GPUs for its
    expected run time, or for good when that is unknown. Jobs kept from GPUs by a gate
    (a dependency, a backoff), unsatisfiable ones, CPU-only ones and those of a cluster
    engine's pool get none; so does every job once the projection runs out of ends."""
    if limit <= 0:
        return {}
    started = {s.job_id for s in plan.starts}
    pool: GpuPool | None = None
    ends: list[tuple[float, int, tuple[int, ...], int, int | None]] = []
    tie = 0
    out: dict[int, float] = {}
    t = now
    taken = 0
    # each job is projected as soon as it is found waiting: with nothing expected to end,
    # the first that does not fit ends the projection, without walking up to ``limit``
    # waiting jobs first (every pass of a busy daemon does this)
    for job in pending:
        if taken >= limit:
            break
        if job.id in started or not job.gpus_milli or job.pool is not None:
            continue
        reason = plan.reasons.get(job.id)
        if reason is None:  # the lazy tail: its own gate, else the tail's reason (not
            # plan.reason, whose look-up in the tail may build an index of all of it)
            reason = (plan.gate(job) if plan.gate else None) or plan.tail_reason
        if reason is None or reason.code not in _WAITS_FOR_GPUS:
            continue
        taken += 1
        if pool is None:
            pool = GpuPool(_after_starts(gpus, plan), policy)
            for n, (end, indices, m, gm) in enumerate(occupants):
                if end is not None and indices:
                    ends.append((max(end, now), n, indices, m, gm))
            heapq.heapify(ends)
            tie = len(ends)
        found = pool.find(job)
        while found is None and ends:
            t = max(t, ends[0][0])
            while ends and ends[0][0] <= t:  # everything that ends by then
                _, _, indices, m, gm = heapq.heappop(ends)
                pool.give_back(indices, m, gm)
            found = pool.find(job)
        if found is None:
            break  # nothing left to end: this job and all behind it, unknown
        milli = min(job.gpus_milli, MILLI)
        pool.take(found, milli, job.gpu_mem)
        out[job.id] = t
        if job.expected is not None:
            heapq.heappush(ends, (t + job.expected, tie, found, milli, job.gpu_mem))
            tie += 1
    return out


def _after_starts(gpus: Sequence[GpuView], plan: Plan) -> list[GpuView]:
    """The GPUs with the plan's starts allocated on them."""
    views = {g.index: g for g in gpus}
    for s in plan.starts:
        for i in s.gpu_indices:
            g = views.get(i)
            if g is not None:
                views[i] = replace(g, allocated_milli=g.allocated_milli + s.milli_per_gpu,
                                   reserved_memory=g.reserved_memory + (s.gpu_mem or 0))
    return list(views.values())
