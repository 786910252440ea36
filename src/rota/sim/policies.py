"""Policy names -> (core Policy, queue ordering), in one table.

Every policy is the daemon's own pass (``core.schedule``); they differ in the Policy knobs
and in the ``priority`` the simulator gives each PendingJob (the queue runs in
(priority, seq) order, as the daemon's does). Preemption is off: traces carry no
checkpoints to resume from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rota.core.fairshare import fair_shares
from rota.core.snapshot import Policy
from rota.errors import InvalidSpec
from rota.sim.trace import SimJob

#: a job's queue priority (lower first) given the accounts' decayed usage, in GPU-seconds
Ordering = Callable[[SimJob, Mapping[str, float]], int]
#: fair-share factors are in [0, 1]; this many steps keep the order exact enough
FAIRSHARE_STEPS = 1_000_000


def by_nothing(job: SimJob, usage: Mapping[str, float]) -> int:
    return 0  # submission order alone


def by_priority(job: SimJob, usage: Mapping[str, float]) -> int:
    return job.priority


def by_run_time(job: SimJob, usage: Mapping[str, float]) -> int:
    return round(job.runs_for)  # the trace knows it; a real queue would use an estimate


def fairshare_priorities(users: set[str], usage: Mapping[str, float]) -> dict[str, int]:
    """The ONE fair-share ordering: users with the higher Slurm fair-share factor
    (core.fairshare, equal shares) first. The daemon's ordering in core replaces this."""
    shares = fair_shares({}, {u: usage.get(u, 0.0) for u in users})
    return {u: round((1.0 - shares[u].factor) * FAIRSHARE_STEPS) for u in users}


@dataclass(frozen=True)
class SimPolicy:
    name: str
    policy: Policy
    ordering: Ordering | None  # None: fair share, recomputed from usage before each pass
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
              "users with the least decayed usage against their share first; no backfill"),
)}


def policy_named(name: str) -> SimPolicy:
    got = POLICIES.get(name.strip().lower())
    if got is None:
        raise InvalidSpec(f"policy {name!r}: use one of {', '.join(POLICIES)}", field="policy")
    return got
