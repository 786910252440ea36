"""Policy names -> (core Policy, queue ordering), in one table.

Every policy is the daemon's own pass (``core.schedule``); they differ in the Policy knobs
and in the ``priority`` the simulator gives each PendingJob (the queue runs in
(priority, seq) order, as the daemon's does). Preemption is off: traces carry no
checkpoints to resume from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rota.core.snapshot import Policy
from rota.errors import InvalidSpec
from rota.sim.trace import SimJob

#: a job's queue priority (lower first) given the accounts' decayed usage, in GPU-seconds
Ordering = Callable[[SimJob, Mapping[str, float]], int]


def by_nothing(job: SimJob, usage: Mapping[str, float]) -> int:
    return 0  # submission order alone


def by_priority(job: SimJob, usage: Mapping[str, float]) -> int:
    return job.priority


def by_run_time(job: SimJob, usage: Mapping[str, float]) -> int:
    return round(job.runs_for)  # the trace knows it; a real queue would use an estimate


@dataclass(frozen=True)
class SimPolicy:
    name: str
    policy: Policy
    # None: fair share, the daemon's rota.core.fairshare.order_queue before each pass
    ordering: Ordering | None
    text: str


_STRICT = Policy(backfill=False, preemption=False)
POLICIES: dict[str, SimPolicy] = {p.name: p for p in (
    SimPolicy("fifo", _STRICT, by_nothing, "submission order; nothing passes a blocked job"),
    SimPolicy("priority", _STRICT, by_priority, "priority, then submission order; no backfill"),
    SimPolicy("backfill", Policy(backfill=True, preemption=False), by_priority,
              "priority, then submission order; the first blocked job keeps GPUs, later "
              "jobs use the rest"),
    SimPolicy("sjf", _STRICT, by_run_time, "shortest run time first; no backfill"),
    SimPolicy("fairshare", _STRICT, None,
              "the daemon's multifactor order (fair share over decayed usage, priority, age); "
              "no backfill"),
)}


def policy_named(name: str) -> SimPolicy:
    got = POLICIES.get(name.strip().lower())
    if got is None:
        raise InvalidSpec(f"policy {name!r}: use one of {', '.join(POLICIES)}", field="policy")
    return got
