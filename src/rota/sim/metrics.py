"""What a run measured (docs/simulator.md defines each figure)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rota.sim.engine import SimResult
from rota.sim.trace import SimJob


@dataclass(frozen=True)
class Spread:
    mean: float
    p50: float
    p99: float
    p90: float


@dataclass(frozen=True)
class Metrics:
    policy: str
    jobs: int
    finished: int
    never_started: int  # could not start on this cluster, or still waiting at the end
    timed_out: int
    jct: Spread  # job completion time: end - submit
    queueing: Spread  # start - submit
    makespan: float  # last end - first submit
    makespan_bound: float  # no schedule can finish sooner (see lower_bound)
    utilisation: float  # GPU-seconds used / (GPUs * makespan)
    utilisation_bound: float  # the same over makespan_bound: what a perfect schedule gets
    fragmentation: float | None  # mean of the samples; None when nothing ever waited
    fairness_worst: float | None  # the largest per-user finish-time fairness
    fairness_jain: float | None  # Jain's index over the users' finish-time fairness
    estimate_error: Spread | None  # |start - first estimate|; None: plans gave none
    estimated: int  # jobs that got an estimate (and started)
    passes: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def spread(values: Sequence[float]) -> Spread:
    if not values:
        return Spread(math.nan, math.nan, math.nan, math.nan)
    s = sorted(values)
    return Spread(sum(s) / len(s), _pct(s, 50), _pct(s, 99), _pct(s, 90))


def _pct(s: list[float], p: float) -> float:
    """Nearest-rank percentile of sorted values."""
    return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))]


def measure(result: SimResult) -> Metrics:
    done = [(r.job, r.start, r.end, r.estimate) for r in result.records
            if r.start is not None and r.end is not None]
    gpus = result.cluster.gpus
    jct = [end - job.submit for job, _, end, _ in done]
    wait = [start - job.submit for job, start, _, _ in done]
    first = min((r.job.submit for r in result.records), default=0.0)
    makespan = max((end for _, _, end, _ in done), default=first) - first
    work = sum(job.gpus * (end - start) for job, start, end, _ in done)
    bound = max(work / gpus, max((job.submit + job.runs_for for job, *_ in done),
                                 default=first) - first)
    errors = [abs(start - est) for _, start, _, est in done if est is not None]
    worst, jain = fairness(done)
    frag = result.fragmentation
    return Metrics(
        policy=result.policy, jobs=len(result.records), finished=len(done),
        never_started=sum(1 for r in result.records if r.start is None),
        timed_out=sum(1 for r in result.records if r.outcome == "timeout"),
        jct=spread(jct), queueing=spread(wait), makespan=makespan, makespan_bound=bound,
        utilisation=work / (gpus * makespan) if makespan > 0 else 0.0,
        utilisation_bound=work / (gpus * bound) if bound > 0 else 0.0,
        fragmentation=sum(frag) / len(frag) if frag else None,
        fairness_worst=worst, fairness_jain=jain,
        estimate_error=spread(errors) if result.estimates_offered and errors else None,
        estimated=len(errors),
        passes=result.passes)


def fairness(done: Sequence[tuple[SimJob, float, float, float | None]]
             ) -> tuple[float | None, float | None]:
    """Finish-time fairness per user: the sum of their jobs' JCTs in the shared run over
    the sum of what those jobs would take alone on the empty cluster (their run time), so
    1 = as if alone, 2 = twice as long. Returns the worst user's and Jain's index over
    all users' (1 = every user slowed alike)."""
    shared: dict[str, float] = {}
    alone: dict[str, float] = {}
    for job, _, end, _ in done:
        u = job.user
        shared[u] = shared.get(u, 0.0) + (end - job.submit)
        alone[u] = alone.get(u, 0.0) + job.runs_for
    rho = [shared[u] / alone[u] for u in shared if alone[u] > 0]
    if not rho:
        return None, None
    jain = sum(rho) ** 2 / (len(rho) * sum(x * x for x in rho))
    return max(rho), jain
