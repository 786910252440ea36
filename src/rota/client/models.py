"""What the daemon answers, as typed objects.

Every model keeps fields it does not know (``extra="allow"``), so a client keeps working
against a newer daemon; times are aware UTC datetimes (the wire carries epoch seconds).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from rota.core.lifecycle import TERMINAL, JobState

__all__ = [
    "Alert", "Attempt", "EvalRun", "EvalSchedule", "Event", "Gpu", "Health", "Identity", "Job",
    "JobDetail", "JobState", "LogChunk", "Page", "Pipeline", "PipelineDetail", "PipelineRound",
    "QueuePage", "QueueSummary", "Reason",
    "Report", "ReportRow", "Reservation", "Tier", "Why",
]

T = TypeVar("T")


class Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


def _state() -> Any:
    # a state this client does not know yet stays a plain string instead of failing
    return Field(union_mode="left_to_right")


class Reason(Model):
    """Why a pending job is not running yet."""

    code: str
    message: str
    until: datetime | None = None
    blocker: int | None = None


class Progress(Model):
    """How far a job's output says it has got (see docs/ml.md)."""

    attempt: int | None = None
    step: int | None = None
    total_steps: int | None = None
    epoch: float | None = None
    total_epochs: int | None = None
    fraction: float | None = None  # 0..1 when a total is known
    rate: float | None = None  # steps per second
    eta_s: float | None = None
    updated_at: datetime | None = None
    checkpoint: dict[str, Any] | None = None  # the last one rota.job reported
    loss: float | None = None  # the training loss it printed last


class Job(Model):
    """One job as listed: what it asked for and where it is in its life."""

    id: int
    name: str
    command: list[str] = Field(default_factory=list)
    user: str
    state: JobState | str = _state()
    priority: int = 0
    gpus: float = 1.0
    gpu_mem: int | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    attempts: int = 0
    exit_code: int | None = None
    end_reason: str | None = None
    gpu_indices: list[int] = Field(default_factory=list)
    reason: Reason | None = None
    progress: Progress | None = None
    #: its experiment-tracker runs: {"mlflow": {"run_id", "experiment_id", "uri", "url"},
    #: "wandb": {"run_id", "project", "entity", "url", "offline_dir", "card"}} ("card":
    #: "attached" or "failed: why", once the job ended)
    tracking: dict[str, Any] | None = None
    pool: str | None = None  # a cluster pool it runs in (None: the default pool)
    #: a job handed to a cluster's engine: {"backend", "id", "state", "reason"}
    engine: dict[str, Any] | None = None
    #: a waiting job's start estimate (from time limits and predicted run times); None:
    #: unknown, or it does not wait
    estimated_start: datetime | None = None

    @property
    def done(self) -> bool:
        """Whether the job has ended (completed, failed, timed out or cancelled)."""
        return self.state in TERMINAL


class Attempt(Model):
    """One run of a job: a retry or a requeue after a lost GPU is a new attempt."""

    number: int
    gpus: list[int] = Field(default_factory=list)
    fraction: float = 0.0
    gpu_mem: int | None = None
    backend: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    exit_code: int | None = None
    signal: int | None = None
    outcome: str | None = None
    reason: str | None = None
    peak_gpu_mem: int | None = None  # the most GPU memory it held on one GPU (bytes)
    pid: int | None = None
    session: str | None = None
    engine_id: str | None = None  # its id in the cluster engine that ran it


class JobDetail(Job):
    """A job with its spec (secret env values masked) and every attempt.

    ``attempts`` stays the count, as on :class:`Job`; the attempts themselves are
    ``attempts_detail``, the daemon's name for them.
    """

    spec: dict[str, Any] = Field(default_factory=dict)
    attempts_detail: list[Attempt] = Field(default_factory=list)


class Why(Model):
    """The answer to "why is this job not running?" (or what it is doing instead)."""

    id: int
    state: JobState | str = _state()
    code: str
    message: str
    until: datetime | None = None
    blocker: int | None = None
    estimated_start: datetime | None = None  # a waiting job's; None: unknown


class Event(Model):
    """A line of a job's history: a state change or something the daemon noted."""

    ts: datetime
    kind: str
    from_state: str | None = Field(default=None, alias="from")
    to_state: str | None = Field(default=None, alias="to")
    message: str | None = None


class Gpu(Model):
    index: int
    uuid: str | None = None
    name: str | None = None
    memory_total: int = 0
    memory_used: int = 0
    memory_external: int = 0
    utilization: float = 0.0
    allocated: float = 0.0
    reserved_memory: int = 0
    jobs: list[int] = Field(default_factory=list)
    paused: bool = False
    healthy: bool = True
    temperature_c: float | None = None


class LogChunk(Model):
    """Bytes ``offset`` to ``next`` of a job's log, decoded; ask again from ``next``.
    ``end``: where the asked time window stops (None without ``until``)."""

    offset: int
    next: int
    data: str
    end: int | None = None


class Page(Model, Generic[T]):
    """One page of a listing, newest first; pass ``next`` as ``before`` for the next one."""

    items: list[T]
    next: int | None = None


class Reservation(Model):
    job: int
    gpus: list[int]


class QueueSummary(Model):
    """The queue's totals: ``counts`` per state (empty when asked without them), the jobs
    waiting (``pending``), on GPUs (``running``) and held, and the GPUs kept for a job
    that waits for them."""

    counts: dict[str, int] = Field(default_factory=dict)
    pending: int = 0
    running: int = 0
    held: int = 0
    reservations: list[Reservation] = Field(default_factory=list)


class QueuePage(QueueSummary):
    """The queue as the scheduler holds it: the totals, and with a ``limit`` the jobs on
    GPUs, then ``limit`` waiting jobs from ``offset`` in the order they will start (each
    with its ``reason``), then the oldest held ones. ``next_offset`` is the ``offset`` of
    the next page (None on the last)."""

    offset: int = 0
    limit: int = 0
    next_offset: int | None = None
    running_jobs: list[Job] = Field(default_factory=list)
    waiting_jobs: list[Job] = Field(default_factory=list)
    held_jobs: list[Job] = Field(default_factory=list)

    @property
    def jobs(self) -> list[Job]:
        """The page's jobs in the order `rota queue` lists them: running, waiting, held."""
        return [*self.running_jobs, *self.waiting_jobs, *self.held_jobs]


class Health(Model):
    ok: bool
    version: str
    pid: int | None = None
    devices: str | None = None
    gpus: int = 0
    pending: int = 0
    running: int = 0
    draining: bool = False


class Identity(Model):
    """Who the daemon thinks is asking."""

    user: str
    admin: bool = False
    via: str | None = None  #: "socket" (the daemon's owner) or "tcp" (a token)


class ShareAccount(Model):
    """A user or project with its fair share (``rota share``; docs/policy.md)."""

    kind: str  #: "user" or "project"
    name: str
    shares: float
    norm_shares: float
    usage_gpu_hours: float  #: decayed with the half-life
    norm_usage: float
    effective: float  #: usage against share: 1 = exactly its share
    factor: float  #: the fair-share factor, 2 ** -effective
    gpu_hours_day: float = 0.0
    gpu_hours_week: float = 0.0


class Shares(Model):
    fair_share: bool  #: whether the queue is ordered by it
    half_life: float
    accounts: list[ShareAccount] = []


class PriorityFactor(Model):
    name: str  #: priority, age, size or fair_share
    factor: float
    weight: float
    weighted: float


class Priority(Model):
    """A waiting job's priority factors and their sum (``rota priority``)."""

    id: int
    user: str
    project: str | None = None
    fair_share: bool
    factors: list[PriorityFactor] = []
    total: float


class Metrics(Model):
    """A job's metric samples: per metric, [step, value, time, attempt] points."""

    id: int
    series: dict[str, list[list[Any]]] = Field(default_factory=dict)
    next: int = 0  # the cursor: pass it as ``after`` for what came since
    more: bool = False
    progress: Progress | None = None

    def values(self, name: str) -> list[float]:
        """One metric's values in order (empty when the job never printed it)."""
        return [float(p[1]) for p in self.series.get(name, [])]


class Checkpoint(Model):
    path: str
    step: int | None = None
    size: int = 0
    mtime: datetime | None = None
    valid: bool = True
    reported: bool = False


class Checkpoints(Model):
    id: int
    checkpoints: list[Checkpoint] = Field(default_factory=list)
    resume_from: str | None = None  # what a retry would resume from
    checkpoint_dir: str | None = None  # the folder the job was given, as given


class EvalRun(Model):
    """One evaluation run (a job tagged ``eval``) and the last value of each metric it
    reported (its latest attempt's)."""

    id: int  # the job's
    name: str  # the config's name
    model: str | None = None  # the model as the config names it
    harness: str | None = None
    git_commit: str | None = None  # the config file's
    state: JobState | str = _state()
    pool: str | None = None
    created_at: datetime | None = None
    ended_at: datetime | None = None
    metrics: dict[str, float] = Field(default_factory=dict)


class EvalSchedule(Model):
    """An evaluation that runs by itself (`rota eval schedule`): every so often
    (``trigger`` "every"), once after a job completes ("after_job"), or on each new
    checkpoint of a job ("checkpoint")."""

    id: int
    user: str
    name: str  # the config's
    config_path: str
    git_commit: str | None = None
    pool: str | None = None
    trigger: str
    every_s: float | None = None
    next_at: datetime | None = None
    job_id: int | None = None  # the job watched
    evaluated: list[str] = Field(default_factory=list)  # checkpoints evaluated so far
    runs: int = 0
    last_job: int | None = None
    enabled: bool = True
    disabled_reason: str | None = None
    created_at: datetime | None = None


class Pipeline(Model):
    """A recurring fine-tuning pipeline (`rota pipeline`): what it does now in ``why``
    (when the next round runs and why, or the open round's step)."""

    id: int
    name: str
    user: str
    format: str  # rota | gradients (the file's form)
    config_path: str = ""
    train: str  # local | gradients
    metric: str
    paused: bool = False
    paused_reason: str | None = None
    state: str  # running | waiting | paused
    why: str = ""
    next_at: datetime | None = None
    base_model: str  # what the next round trains from
    base_round: int | None = None
    base_metric: float | None = None
    rounds: int = 0
    failures: int = 0
    created_at: datetime | None = None


class PipelineRound(Model):
    """One round: its steps' jobs and the lineage (base -> adapter -> merged model)."""

    number: int
    state: str  # running | accepted | rejected | failed
    step: str
    reason: str | None = None
    jobs: dict[str, int] = Field(default_factory=dict)
    job_states: dict[str, str] = Field(default_factory=dict)
    folder: str = ""
    data_hash: str = ""
    chunk: int | None = None
    chunks: int | None = None
    base_model: str = ""
    adapter: str | None = None
    merged_model: str | None = None
    remote_task: str | None = None
    metric: float | None = None
    base_metric: float | None = None
    facts: dict[str, Any] = Field(default_factory=dict)
    due_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None


class PipelineDetail(Model):
    pipeline: Pipeline
    rounds: list[PipelineRound] = Field(default_factory=list)  # newest first


class Tier(Model):
    """A tier: its limits (None: none on that) and price per GPU-hour."""

    name: str
    price: float
    gpu_type: str | None = None
    gpu_mem: int | None = None
    gpus: float | None = None
    cpus: float | None = None
    memory: int | None = None
    time_limit: float | None = None
    description: str = ""


class ReportRow(Model):
    group: str
    bucket: str
    start: datetime
    gpu_hours: float
    cost: float
    wasted_gpu_hours: float = 0.0  # of gpu_hours, on idle GPUs


class ReportTotal(Model):
    group: str
    gpu_hours: float
    cost: float
    wasted_gpu_hours: float = 0.0


class Report(Model):
    """GPU-hours and cost per group (``by``) and period bucket, inside [since, until)."""

    by: str
    period: str
    since: datetime
    until: datetime
    now: datetime
    user: str | None = None  # whose usage: the caller's; None: everyone's (an admin)
    rows: list[ReportRow] = []
    totals: list[ReportTotal] = []

class Alert(Model):
    """An alert sent (or to be sent) to the webhook once: never its URL."""

    id: int
    key: str  # the producer's once-only key
    user: str | None = None
    kind: str = "alert"
    text: str = ""
    state: str  # pending | sent | failed
    attempts: int = 0
    created_at: datetime | None = None
    next_try_at: datetime | None = None
    sent_at: datetime | None = None
    last_error: str | None = None
