"""The scheduler's input: an immutable picture of GPUs and the pending queue."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from rota.core.lifecycle import JobState

if TYPE_CHECKING:
    from rota.core.packing import Shape
    from rota.core.plan import Reason
    from rota.core.pool import GpuPool
    from rota.core.preempt import RunningJob

MILLI = 1000  # GPU fractions are counted in thousandths so sums are exact


def to_milli(gpus: float) -> int:
    return round(gpus * MILLI)


@dataclass(frozen=True, slots=True)
class GpuView:
    """One GPU as the scheduler sees it: capacity, outside use, and Rota's allocations."""

    index: int
    memory_total: int
    memory_external: int = 0  # bytes held by processes Rota did not start
    utilization: float = 0.0  # observed, 0..1
    healthy: bool = True
    paused: bool = False
    allocated_milli: int = 0  # Rota's allocations, thousandths of the GPU
    reserved_memory: int = 0  # bytes Rota's allocations asked for (gpu_mem)
    # the machine it is on: a job of k whole GPUs gets all k on one node (the daemon's own
    # GPUs are all node 0; the simulator passes a cluster's GPUs in one list)
    node: int = 0

    @property
    def free_milli(self) -> int:
        return MILLI - self.allocated_milli

    @property
    def free_memory(self) -> int:
        return self.memory_total - self.memory_external - self.reserved_memory


class PendingJob(NamedTuple):
    """What the scheduler needs to know of a job waiting to start.

    A named tuple rather than a dataclass: a restarted daemon builds one per pending job,
    a million of them, and a tuple is made from a row of the store in C (``_make``) where
    a frozen dataclass's ``__init__`` took 3 s per million. Change one with ``_replace``.
    """

    id: int
    priority: int  # lower runs first
    seq: int  # submission order; FIFO among equal priorities
    gpus_milli: int  # 0 = CPU only; < 1000 = a share of one GPU; k*1000 = k whole GPUs
    gpu_mem: int | None = None  # bytes per GPU
    allowed: frozenset[int] | None = None
    after: tuple[int, ...] = ()
    not_before: float | None = None  # retry backoff: not before this time
    pool: str | None = None  # a cluster engine's pool (rota.core.forward); None: this machine
    # whose it is and when it came (fair share and age: rota.core.fairshare.order_queue)
    user: str = ""
    project: str | None = None
    submitted: float = 0.0
    # seconds it is expected to run (its time limit, else a run time predicted from the
    # history of its name); None: unknown, and then it never backfills onto kept GPUs
    expected: float | None = None

    @property
    def shape(self) -> tuple[int, int | None, frozenset[int] | None]:
        return (self.gpus_milli, self.gpu_mem, self.allowed)

    @property
    def workspace(self) -> bool:
        """It gets its user's and project's workspace (spec.workspace), and so waits for
        it (its size quota, its copy from a bucket). Not a field: a job that needs none is
        a WorkspacelessJob, so the tuples of a million-job queue are no bigger (8 MB)."""
        return True


class WorkspacelessJob(PendingJob):
    """A waiting job that needs no workspace (spec ``workspace: false``). Equal to the
    PendingJob of the same fields: compare ``workspace`` where it matters."""

    __slots__ = ()

    @property
    def workspace(self) -> bool:
        return False


@dataclass(frozen=True)
class Policy:
    """Scheduling knobs, read from config once and passed in."""

    # A GPU whose memory is used by outside processes above this share gets nothing new;
    # so does a GPU Rota has nothing on whose utilisation is above util_threshold.
    mem_threshold: float = 0.8
    util_threshold: float = 0.8
    # Let later jobs use GPUs the top blocked job cannot use (it keeps a reservation).
    backfill: bool = True
    reserve_for_blocked: bool = True
    draining: bool = False  # start nothing new
    # stop preemptible lower-priority jobs (through the stop handshake) for a blocked one
    preemption: bool = True
    # which GPU a share of a GPU goes on (rota.core.packing.PACKINGS)
    packing: str = "best-fit"
    packing_seed: int = 0  # the random packing's generator is seeded with this
    # the shapes FGD expects (rota.core.packing.Shape); empty: those of the pending queue
    workload: tuple[Shape, ...] = ()
    # start estimates (Plan.start_estimates) for at most this many waiting jobs, in queue
    # order; 0: none
    estimate_jobs: int = 1000


@dataclass(frozen=True)
class Snapshot:
    gpus: Sequence[GpuView]
    pending: Sequence[PendingJob]  # any order, unless presorted
    # the caller keeps `pending` in queue order (priority, seq): the pass skips its sort
    presorted: bool = False
    # states of jobs named in some pending job's `after`
    dependency_states: Mapping[int, JobState] = field(default_factory=dict)
    # running jobs, for preemption (rota.core.preempt.RunningJob)
    running: Sequence[RunningJob] = ()
    # the caller's own index of `pending` by id, if it keeps one: the plan then finds a
    # waiting job's place by a binary search rather than an index of a million of its own
    by_id: Mapping[int, PendingJob] | None = None
    # the least gpus_milli among `pending`, if the caller keeps it: the pass then need not
    # look at every job for it (44 ms of an 80 ms pass over a million)
    smallest_milli: int | None = None
    # quotas (rota.core.quota), None when there are none: owners over a GPU-hours or money
    # quota, with the reason; and GPUs (thousandths) owners with a GPUs-at-once quota may
    # still start, with that limit
    over_quota: Mapping[tuple[str, str], Reason] | None = None
    gpu_allowance: Mapping[tuple[str, str], tuple[int, float]] | None = None
    # jobs held back by what they wait for outside the pass (their datasets being fetched
    # to this machine), with the reason; None when there are none
    held: Mapping[int, Reason] | None = None
    # the caller's own GpuPool of these GPUs, kept up to date with its starts and ends (the
    # simulator keeps one for its whole cluster): the pass works on a copy of it instead of
    # building one from `gpus` GPU by GPU, and does not read `gpus`
    pool: GpuPool | None = None
