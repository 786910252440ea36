"""Handing the jobs of cluster pools to their engines: the pass's part for engine pools.

An engine places these jobs itself, so they take no GPU here: each pass hands over those
that may go now, in Rota's order and within each pool's max_in_flight
(rota.core.forward), and says in the plan why each other one waits.

A job whose dependencies run on its own pool, whose engine can hold it until they end, is
handed over while they run, with their engine ids (``engine_after``: read again at the
launch, since a dependency may have ended or been requeued since the pass).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from rota.backends.base import Backend
from rota.backends.engine_backend import EngineBackend
from rota.core.forward import forward
from rota.core.lifecycle import JobState
from rota.core.plan import Plan, Reason, ReasonCode, Start
from rota.core.snapshot import PendingJob
from rota.errors import BackendError
from rota.pools import Pools
from rota.server.jobs.job_table import JobTable
from rota.server.jobs.running import Running

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
    runs = list(running)
    in_flight = Counter(r.pending.pool for r in runs if r.pending.pool)
    deps = {d: job_state(d) for job in waiting for d in job.after}
    by_id = {r.job_id: r for r in runs}
    held = {d for d in deps if d in by_id and engine_id(by_id[d]) is not None}
    holding = {r.pending.pool for r in runs if holds_dependencies(r.backend)}
    starts: list[Start] = []
    for name, queue in queues.items():
        pool = pools.pools.get(name)
        if pool is None:  # declared when it was submitted, not since the restart
            gone = Reason(ReasonCode.UNSATISFIABLE,
                          f"its pool {name!r} is not declared in rota.toml any more")
            plan.reasons.update(dict.fromkeys((j.id for j in queue), gone))
            continue
        handed = forward(queue, pool=name, in_flight=in_flight[name],
                         max_in_flight=pool.max_in_flight, dependency_states=deps, now=now,
                         held_here={d for d in held if by_id[d].pending.pool == name},
                         holds_dependencies=name in holding)
        plan.reasons.update(handed.reasons)
        starts += [Start(job_id, (), 0, None) for job_id in handed.handed]
    return starts


def holds_dependencies(backend: Backend) -> bool:
    """Whether ``backend`` is a cluster engine's that holds a job until others end."""
    return isinstance(backend, EngineBackend) and backend.engine.capabilities.dependencies


def engine_id(run: Running) -> str | None:
    """The engine's id of a job in flight on a cluster pool, while it is not being stopped
    (a job being cancelled or requeued will not complete as this attempt)."""
    if run.handle is None or run.stop_reason is not None or not run.pending.pool:
        return None
    found = run.handle.extra.get("engine_id")
    return str(found) if found else None


def engine_ids(after: Iterable[int], pool: str | None, table: JobTable) -> dict[int, str]:
    """Of the jobs in ``after``, those in flight on ``pool`` by their engine's ids."""
    out: dict[int, str] = {}
    for dep in after:
        run = table.running.get(dep)
        found = engine_id(run) if run is not None and run.pending.pool == pool else None
        if found is not None:
            out[dep] = found
    return out


def engine_after(run: Running, table: JobTable) -> tuple[str, ...]:
    """The engine ids of the jobs ``run`` (about to be handed to its engine) must wait for
    there: those it depends on that have not completed. Raises BackendError when one of
    them is not in flight on the same pool any more (it ended, or was requeued since the
    pass): never handed over with a dependency dropped."""
    held = engine_ids(run.pending.after, run.pending.pool, table) \
        if holds_dependencies(run.backend) else {}
    for dep in run.pending.after:
        state = table.state(dep)
        if state is not JobState.COMPLETED and dep not in held:
            raise BackendError(f"job {run.job_id}: job {dep} it depends on is {state.value} "
                               f"and not held by {run.backend.name} any more")
    return tuple(held.values())
