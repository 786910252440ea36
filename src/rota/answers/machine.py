"""The answers about the machine: GPUs, quotas, the queue, health, stats, the jobs
file (see rota.answers)."""

from typing import NotRequired, TypedDict

from rota.answers.jobs import JobAnswer


class GpuAnswer(TypedDict):
    index: int
    uuid: str
    name: str
    memory_total: int
    memory_used: int
    memory_external: int  # held by processes Rota did not start
    utilization: float
    allocated: float  # Rota's share of it, 0..1
    reserved_memory: int
    jobs: list[int]
    paused: bool
    healthy: bool
    temperature_c: float | None
    history: list[tuple[float, float, int, float]]  # time, allocated, memory used, util


class GpusAnswer(TypedDict):
    devices: str  # "nvml" or "simulated"
    gpus: list[GpuAnswer]
    draining: bool


class GpuPausedAnswer(TypedDict):
    index: int
    paused: bool


class QuotaAnswer(TypedDict):
    """One quota or budget (rota.core.quota) and what its owner used of it now."""

    kind: str  # user | project
    name: str
    what: str  # gpus | gpu_hours | money
    period: str  # none | day | week | month
    limit: float
    hard: bool
    lifted_until: float | None
    used: float  # GPUs held now, GPU-hours or money spent in the current period
    percent: float
    resets_at: float | None
    text: str  # in words


class QuotasAnswer(TypedDict):
    quotas: list[QuotaAnswer]


class QuotaChangedAnswer(TypedDict):
    changed: int  # how many quotas were lifted or removed


class SimulateAnswer(TypedDict):
    index: int
    ok: bool


class DrainAnswer(TypedDict):
    draining: bool


class HealthAnswer(TypedDict):
    ok: bool
    version: str
    pid: int
    devices: str
    gpus: int
    pending: int
    running: int
    draining: bool


class Reservation(TypedDict):
    """GPUs kept free for a job that waits for them."""

    job: int
    gpus: list[int]


class QueueAnswer(TypedDict):
    """GET /v1/queue: totals; with a ``limit`` the jobs on GPUs, ``limit`` waiting ones
    from ``offset`` in start order, and the oldest held ones; ``counts`` unless
    counts=false."""

    counts: NotRequired[dict[str, int]]  # jobs per state, in the store
    pending: int  # jobs waiting to start (the scheduler's queue)
    running: int  # jobs on GPUs (starting or running)
    held: int
    reservations: list[Reservation]
    offset: int
    limit: int
    next_offset: int | None  # the offset of the next page; None: the last
    running_jobs: NotRequired[list[JobAnswer]]
    waiting_jobs: NotRequired[list[JobAnswer]]  # from offset, in the order they will start
    held_jobs: NotRequired[list[JobAnswer]]  # the oldest held jobs


class StatsAnswer(TypedDict):
    passes: int
    pass_p50_ms: float | None
    pass_max_ms: float | None


class GpuHours(TypedDict):
    """GPU-hours of every attempt (running ones up to now); jobs with no project under ""."""

    by_user: dict[str, float]
    by_project: dict[str, float]
    idle_by_user: dict[str, float]  # of them, wasted holding idle GPUs (docs/policy.md)


class SummaryAnswer(TypedDict):
    """GET /v1/summary."""

    counts: dict[str, int]  # jobs per state, in the store
    gpu_hours: GpuHours


class JobsFileError(TypedDict):
    line: int
    message: str


class JobsFileRan(TypedDict):
    """A line not queued again: it ran before as ``job``, which is now ``state``."""

    line: int
    job: int
    state: str


class JobsFileAnswer(TypedDict):
    """The watched jobs file as the daemon last read it."""

    path: str
    loaded_at: float | None
    queued: list[int]
    skipped_duplicates: int
    ran_before: list[JobsFileRan]
    errors: list[JobsFileError]


class ShutdownAnswer(TypedDict):
    stopping: bool
