"""Handing the jobs of cluster pools to their engines: the pass's part for engine pools.

An engine places these jobs itself, so they take no GPU here: each pass hands over those
that may go now, in Rota's order and within each pool's max_in_flight
(rota.core.forward), and says in the plan why each other one waits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from rota.core.forward import forward
from rota.core.lifecycle import JobState
from rota.core.plan import Plan, Reason, ReasonCode, Start
from rota.core.snapshot import PendingJob
from rota.pools import Pools
from rota.server.running import Running

DRAINING = Reason(ReasonCode.DRAINING, "the machine is draining: nothing new starts")


def forwarded(queues: Mapping[str, list[PendingJob]], running: Iterable[Running],
              pools: Pools, job_state: Callable[[int], JobState], plan: Plan, *,
              now: float, draining: bool) -> list[Start]:
    """The starts (no GPUs) of the cluster pools' jobs to hand over now; the reasons of
    the others go into ``plan``."""
    if not queues:
        return []
    waiting = [job for queue in queues.values() for job in queue]
    if draining:
        plan.reasons.update(dict.fromkeys((j.id for j in waiting), DRAINING))
        return []
    in_flight = Counter(r.pending.pool for r in running if r.pending.pool)
    deps = {d: job_state(d) for job in waiting for d in job.after}
    starts: list[Start] = []
    for name, queue in queues.items():
        pool = pools.pools.get(name)
        if pool is None:  # declared when it was submitted, not since the restart
            gone = Reason(ReasonCode.UNSATISFIABLE,
                          f"its pool {name!r} is not declared in rota.toml any more")
            plan.reasons.update(dict.fromkeys((j.id for j in queue), gone))
            continue
        handed = forward(queue, pool=name, in_flight=in_flight[name],
                         max_in_flight=pool.max_in_flight, dependency_states=deps, now=now)
        plan.reasons.update(handed.reasons)
        starts += [Start(job_id, (), 0, None) for job_id in handed.handed]
    return starts
