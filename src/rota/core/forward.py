"""Which waiting jobs of a cluster engine's pool Rota hands over now (pure).

An engine places work itself, so Rota does not fit these jobs onto GPUs: it keeps them in
its own queue and hands them over in its order (priority, then submission), as long as
their dependencies have completed and their retry backoff has passed, and while the pool
holds fewer of Rota's jobs than its ``max_in_flight``. A job that waits for a dependency
or a backoff lets the jobs behind it go first; a full pool holds everything back.

An engine that can hold a job until others end (Slurm's ``--dependency``) gets a job as
soon as each of its dependencies has completed or is in flight on that same pool: the
engine then starts it right after them, with no round trip through Rota in between.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from rota.core.lifecycle import JobState
from rota.core.plan import Reason, ReasonCode
from rota.core.schedule import gate, queue_order
from rota.core.snapshot import PendingJob


@dataclass(frozen=True, slots=True)
class Forwarding:
    handed: list[int] = field(default_factory=list)  # in the order they are handed over
    reasons: dict[int, Reason] = field(default_factory=dict)  # why each other one waits


def forward(queue: Sequence[PendingJob], *, pool: str, in_flight: int, max_in_flight: int,
            dependency_states: Mapping[int, JobState], now: float,
            held_here: Collection[int] = (), holds_dependencies: bool = False,
            ) -> Forwarding:
    """The jobs of ``queue`` (one pool's waiting jobs, in any order) to hand over now,
    given ``in_flight`` of Rota's jobs the pool already holds. ``held_here``: the jobs in
    flight on this pool that its engine knows by id; ``holds_dependencies``: whether that
    engine holds a job until those it depends on have completed."""
    out = Forwarding()
    room = max(0, max_in_flight - in_flight)
    full = Reason(ReasonCode.POOL_FULL,
                  f"waits in Rota's queue: pool {pool} holds {max_in_flight} of Rota's jobs, "
                  "its max_in_flight")
    for job in sorted(queue, key=queue_order):
        if holds_dependencies and job.after:  # those the engine waits for, Rota need not
            job = job._replace(after=tuple(d for d in job.after if d not in held_here))
        reason = gate(job, dependency_states, now) if job.after or job.not_before else None
        if reason is None and room:
            out.handed.append(job.id)
            room -= 1
            continue
        out.reasons[job.id] = reason or full
    return out
