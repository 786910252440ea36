"""The daemon's JSON answers as they come over the wire, described as TypedDicts: the one
definition of each answer, read by both sides.

The daemon documents each route's answer from these (rota.server.api.answer_schemas puts
their JSON schemas in /openapi.json, without validating any answer at run time), and
:class:`rota.client.RawClient` (the client the CLI uses) returns them: plain dicts at run
time, so they cost nothing to build or import, yet mypy checks every key the CLI reads.
The SDK's :class:`rota.Client` turns the same answers into pydantic models
(rota.client.models), with datetimes; here times stay epoch seconds, as sent.

A leaf every layer may import: only ``typing`` is imported, and the CLI imports this
module under ``TYPE_CHECKING`` only. The annotations are evaluated (no ``from __future__
import annotations``), so each class's ``__required_keys__`` is right at run time for
tools that read it. tests/sdk/test_answer_types.py holds these types to the daemon's
OpenAPI document and to its real answers, so a field added or renamed on the server fails
until they follow.
"""

from typing import Literal, NotRequired, TypedDict

__all__ = [
    "AlertAnswer",
    "AlertsAnswer",
    "AttachAnswer",
    "AttemptAnswer",
    "CheckpointAnswer",
    "CheckpointsAnswer",
    "ContainersAnswer",
    "DrainAnswer",
    "EngineCapabilitiesAnswer",
    "EngineJobAnswer",
    "EvalResultsAnswer",
    "EvalRunAnswer",
    "EvalScheduleAnswer",
    "EvalSchedulesAnswer",
    "EvalUnscheduledAnswer",
    "EventAnswer",
    "EventsAnswer",
    "GpuAnswer",
    "GpuHours",
    "GpuPausedAnswer",
    "GpusAnswer",
    "GradientsWinnerAnswer",
    "HealthAnswer",
    "JobAnswer",
    "JobDetailAnswer",
    "JobListAnswer",
    "JobStateAnswer",
    "JobStateName",
    "JobsFileAnswer",
    "JobsFileError",
    "JobsFileRan",
    "LogAnswer",
    "MetricPoint",
    "MetricsAnswer",
    "MetricsPageAnswer",
    "MlflowRun",
    "NewTokenAnswer",
    "PipelineAnswer",
    "PipelineDetailAnswer",
    "PipelineRemovedAnswer",
    "PipelineRoundAnswer",
    "PipelinesAnswer",
    "PoolAnswer",
    "PoolHealthAnswer",
    "PoolsAnswer",
    "ProgressAnswer",
    "QueueAnswer",
    "ReasonAnswer",
    "RenderAnswer",
    "ReportAnswer",
    "ReportRowAnswer",
    "ReportTotalAnswer",
    "ReportedCheckpoint",
    "RequeueAnswer",
    "Reservation",
    "RoundFactsAnswer",
    "SecretAnswer",
    "SecretDeletedAnswer",
    "SecretSetAnswer",
    "SecretsAnswer",
    "SessionAnswer",
    "SessionsAnswer",
    "ShutdownAnswer",
    "SimulateAnswer",
    "SpecAnswer",
    "StatsAnswer",
    "SubmitAnswer",
    "SummaryAnswer",
    "TierAnswer",
    "TiersAnswer",
    "TokenAnswer",
    "TokensAnswer",
    "TrackingAnswer",
    "UserAnswer",
    "UserRemovedAnswer",
    "UsersAnswer",
    "WaitAnswer",
    "WandbRun",
    "WhoAmIAnswer",
    "WhyAnswer",
]

#: a job's state (rota.core.lifecycle.JobState's values)
JobStateName = Literal["pending", "held", "starting", "running", "preempted", "completed",
                       "failed", "timeout", "cancelled"]


# --- one job -------------------------------------------------------------------------------
class ReasonAnswer(TypedDict):
    """Why a job waits; ``until`` and ``blocker`` come with a pass's reasons only."""

    code: str
    message: str
    until: NotRequired[float | None]  # backoff: when it may start
    blocker: NotRequired[int | None]  # dependency / priority: the job it waits for


class ReportedCheckpoint(TypedDict):
    """The last checkpoint the job reported through rota.job."""

    path: str
    step: int | None
    ts: float


class ProgressAnswer(TypedDict):
    """How far the job's output says it has got (the whole thing is None until then)."""

    attempt: int | None
    step: int | None
    total_steps: int | None
    epoch: float | None
    total_epochs: int | None
    fraction: float | None
    rate: float | None  # steps per second
    eta_s: float | None
    updated_at: float | None
    checkpoint: ReportedCheckpoint | None


class MlflowRun(TypedDict, total=False):
    """The job's MLflow run: made (run_id ...), failed (error), or not yet (state)."""

    run_id: str
    experiment_id: str
    experiment: str
    uri: str
    url: str | None
    error: str
    state: str


class WandbRun(TypedDict):
    run_id: str
    project: str
    entity: str | None
    url: str | None
    offline_dir: NotRequired[str]
    card: NotRequired[str]  # once it ended: "attached", or "failed: why"


class TrackingAnswer(TypedDict, total=False):
    mlflow: MlflowRun
    wandb: WandbRun


class EngineJobAnswer(TypedDict):
    """Where a cluster pool's engine has the job (the last time Rota asked it)."""

    backend: str  # ENGINE:POOL, e.g. slurm:hpc
    id: str | None  # the engine's id of the job (None until its answer is in)
    state: Literal["queued", "running", "ended", "lost"] | None  # None: not asked yet
    reason: str | None  # why it waits, or how it ended, in the engine's words


class IdleAnswer(TypedDict):
    """A running job holding GPUs under the [idle] threshold long enough to be flagged."""

    since: float  # since when its longest-idle GPU has been under the threshold
    gpus: list[int]  # its GPUs flagged idle
    threshold: float  # the utilisation (0..1) they stay under
    message: str  # 'its GPU 2 has been under 5 % for 17 min'


class JobAnswer(TypedDict):
    """A job as lists show it (GET /v1/jobs, the queue, a submit's answer)."""

    id: int
    name: str
    command: list[str]
    user: str
    state: JobStateName
    priority: int
    gpus: float
    gpu_mem: int | None
    created_at: float
    started_at: float | None
    ended_at: float | None
    attempts: int  # how many; the attempts themselves: JobDetailAnswer.attempts_detail
    exit_code: int | None
    end_reason: str | None
    source: str
    session: str
    time_limit: float | None
    project: str | None
    pool: str | None  # a cluster pool it runs in; None: the default pool
    tags: list[str]
    gpu_indices: list[int]
    progress: ProgressAnswer | None
    tracking: NotRequired[TrackingAnswer]
    reason: NotRequired[ReasonAnswer]  # a waiting or held job's; or an engine's word
    engine: NotRequired[EngineJobAnswer]  # a job handed to a cluster pool's engine
    idle_since: float | None  # a running job flagged idle: since when its GPU has been
    idle: NotRequired[IdleAnswer]  # the same job's idle GPUs, in words too
    # a pending job's: when it may start (absolute time; None: unknown). An estimate from
    # time limits and predicted run times (docs/policy.md, "Backfill and start estimates")
    estimated_start: NotRequired[float | None]


class SpecAnswer(TypedDict):
    """A job's spec as stored (rota.core.spec.JobSpec), secret env values masked."""

    command: list[str]
    name: str | None
    shell: bool
    gpus: float
    gpu_mem: int | None
    gpu_type: str | None  # on this machine, allowed_gpus holds the GPUs of that type
    llm: str | None
    priority: int
    allowed_gpus: list[int] | None
    conda: str | None
    cwd: str | None
    env: dict[str, str]
    secret_env: list[str]
    secrets: dict[str, str]
    time_limit: float | None
    grace: float
    retries: int
    retry_backoff: float
    retry_backoff_max: float
    after: list[int]
    hold: bool
    session: Literal["none", "tmux", "screen"]
    pool: str | None
    tier: str | None  # the tier it asked for; None: the cheapest it fits
    nodes: int
    procs_per_node: int | None
    image: str | None
    network: bool
    cpus: float | None
    memory: int | None
    cuda_arg: bool
    tags: list[str]
    project: str | None
    preemptible: bool
    stop_signal: str
    checkpoint_dir: str | None
    tensorboard_dir: str | None
    outputs: list[str]
    datasets: list[str]  # OWNER/NAME:vN, as resolved at submit
    workspace: bool  # False: it needs none (no ROTA_WORKSPACE)
    mlflow: bool | None
    mlflow_experiment: str | None
    wandb: bool
    wandb_project: str | None
    wandb_entity: str | None
    metric_patterns: list[str]
    log_metrics: Literal["all", "json"]
    files: dict[str, str]
    model: str | None
    model_dir: str


class AttemptAnswer(TypedDict):
    """One run of a job (a retry or a requeue is another)."""

    number: int
    gpus: list[int]
    fraction: float  # of each GPU
    gpu_mem: int | None
    backend: str
    started_at: float
    ended_at: float | None
    exit_code: int | None
    signal: int | None
    outcome: str | None
    reason: str | None
    peak_gpu_mem: int | None
    idle_seconds: float  # GPU-seconds it held idle GPUs (docs/policy.md, "Idle GPUs")
    pid: int | None
    session: str | None
    engine_id: str | None  # the job's id in its cluster engine (a Slurm job id, ...)


class JobDetailAnswer(JobAnswer):
    """GET /v1/jobs/{id}: the job with its spec and every attempt."""

    spec: SpecAnswer
    attempts_detail: list[AttemptAnswer]


class JobListAnswer(TypedDict):
    """GET /v1/jobs: newest first; ``next`` is the ``before`` of the next page."""

    jobs: list[JobAnswer]
    next: int | None


class SubmitAnswer(TypedDict):
    """POST /v1/jobs."""

    jobs: list[JobAnswer]
    warnings: NotRequired[list[str]]


class WhyAnswer(TypedDict):
    """GET /v1/jobs/{id}/why: a waiting job's reason, or what it does or how it ended."""

    id: int
    state: JobStateName
    code: str
    message: str
    until: NotRequired[float | None]
    blocker: NotRequired[int | None]
    estimated_start: NotRequired[float | None]  # a pending job's, as JobAnswer's


#: a line of a job's history ("from" is a keyword, hence this form)
EventAnswer = TypedDict("EventAnswer", {
    "ts": float, "kind": str, "from": str | None, "to": str | None, "message": str | None})


class EventsAnswer(TypedDict):
    events: list[EventAnswer]


class JobStateAnswer(TypedDict):
    """What cancel, hold, release and preempt answer: the job's state now."""

    id: int
    state: JobStateName


class RequeueAnswer(TypedDict):
    requeued: int
    job: JobAnswer  # the same job (it was running) or a new one (it had ended)


class WaitAnswer(TypedDict):
    id: int
    state: JobStateName
    exit_code: int | None
    done: bool  # False: the wait timed out first


class AttachAnswer(TypedDict):
    argv: list[str]


class LogAnswer(TypedDict):
    """Bytes ``offset`` to ``next`` of the job's log, decoded; ``end``: where a time window
    (``until``) stops, None without one."""

    offset: int
    next: int
    end: int | None
    data: str


#: step, value, time, attempt
MetricPoint = tuple[int | None, float, float, int]


class MetricsPageAnswer(TypedDict):
    """GET /v1/jobs/{id}/metrics: one page; ``next`` is the ``after`` of the next."""

    id: int
    series: dict[str, list[MetricPoint]]
    next: int
    more: bool
    progress: ProgressAnswer | None


class MetricsAnswer(TypedDict):
    """Every page merged (RawClient.metrics)."""

    series: dict[str, list[MetricPoint]]
    id: int
    progress: ProgressAnswer | None


class CheckpointAnswer(TypedDict):
    path: str
    step: int | None
    size: int
    mtime: float
    valid: bool  # False: it may still be being written
    reported: bool  # through rota.job (else found in the checkpoint_dir)


class CheckpointsAnswer(TypedDict):
    id: int
    checkpoints: list[CheckpointAnswer]
    resume_from: str | None


class ArtifactFileAnswer(TypedDict):
    path: str  # within the job's artifacts: the output folder's name, then the file's path
    size: int
    sha256: str


class ArtifactsAnswer(TypedDict):
    """GET /v1/jobs/{id}/artifacts: what the job's ``outputs`` saved when it ended."""

    id: int
    state: Literal["pending", "saved", "failed"]
    store: str  # the artifact store (no credentials)
    key: str  # the job's key in it
    sources: dict[str, str]  # name in the artifacts -> the folder it was read from
    files: list[ArtifactFileAnswer]
    bytes: int | None
    notes: list[str]  # links and special files passed over, folders that were not there
    error: str | None  # why they were not saved (failed), or the last passing trouble
    requested_at: float
    saved_at: float | None


class ShareLinkAnswer(TypedDict):
    """A link to a job's saved outputs that works without an account (rota share-link)."""

    id: int | None  # None: a presigned S3 URL, which is not kept (and cannot be revoked)
    job: int
    path: str | None  # a file or folder of the list; None: all of them
    kind: Literal["daemon", "presigned"]
    url: str | None  # given once, when it is made
    created_by: str | None
    created_at: float
    expires_at: float
    revoked_at: float | None
    downloads: int | None
    active: bool  # neither expired nor revoked


class ShareLinksAnswer(TypedDict):
    links: list[ShareLinkAnswer]


class WorkspaceSyncAnswer(TypedDict):
    """This machine's copy of a workspace whose home is a bucket ([storage] workspace_url)."""

    url: str  # s3://bucket/prefix/USER/PROJECT
    # sending, bringing, "sending, then bringing", failed, "to send", "in use", synced,
    # "not synced yet"
    state: str
    synced_at: float | None  # the last sync that went through, in this daemon's life
    error: NotRequired[str]  # why the last one failed
    retry_in: NotRequired[float]  # seconds until it is tried again


class WorkspaceAnswer(TypedDict):
    name: str  # USER/PROJECT
    user: str
    project: str  # "default" for jobs without one
    path: str  # on the daemon's machine (ROTA_WORKSPACE); /workspace in a container
    bytes: int | None  # as last measured (None: not measured yet)
    quota: int
    own_quota: bool  # set by an admin (else the default)
    over: bool  # its jobs wait until it is back under
    measured_at: float | None
    sync: WorkspaceSyncAnswer | None  # None: its home is this machine's folder


class WorkspacesAnswer(TypedDict):
    workspaces: list[WorkspaceAnswer]
    default_quota: int


class StaleFileAnswer(TypedDict):
    path: str  # in the workspace
    size: int
    mtime: float


class CleanupPlanAnswer(TypedDict):
    """A cleanup's dry run: what applying plan ``plan`` would remove, and nothing else."""

    plan: str
    workspace: str
    days: float
    made_at: float
    count: int
    bytes: int
    files: list[StaleFileAnswer]  # the first 1,000 (the plan holds them all)
    more: bool


class CleanupDoneAnswer(TypedDict):
    plan: str
    workspace: str
    removed: int
    bytes: int  # of the files removed
    kept: list[str]  # listed files kept, each with why (changed since the dry run, ...)


class SessionAnswer(TypedDict):
    job: int
    session: str | None
    backend: str
    gpus: list[int]
    attach: list[str]


class SessionsAnswer(TypedDict):
    sessions: list[SessionAnswer]


# --- the machine ---------------------------------------------------------------------------
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


# --- who may use it ------------------------------------------------------------------------
class WhoAmIAnswer(TypedDict):
    """GET /v1/whoami: the socket's caller is the daemon's owner, an admin."""

    user: str
    admin: bool
    via: Literal["socket", "tcp"]


class UserAnswer(TypedDict):
    name: str
    admin: bool
    created_at: float
    unix_account: str | None  # the Unix account its jobs run as; None: the daemon's own


class UsersAnswer(TypedDict):
    users: list[UserAnswer]


class UserRemovedAnswer(TypedDict):
    user: str
    tokens_revoked: int
    jobs_cancelled: int


class TokenAnswer(TypedDict):
    """A token as listed: its first characters only."""

    id: int
    user: str
    prefix: str
    note: str | None
    created_at: float
    last_used_at: float | None
    revoked_at: float | None


class NewTokenAnswer(TokenAnswer):
    token: str  # in this answer only


class TokensAnswer(TypedDict):
    tokens: list[TokenAnswer]


class SecretAnswer(TypedDict):
    name: str
    created_at: float
    updated_at: float


class SecretsAnswer(TypedDict):
    user: str
    secrets: list[SecretAnswer]


class SecretSetAnswer(TypedDict):
    user: str
    name: str
    created: bool  # False: it replaced one


class SecretDeletedAnswer(TypedDict):
    user: str
    name: str
    deleted: bool


# --- alerts (rota.server.alert_sender) -----------------------------------------------------
class AlertAnswer(TypedDict):
    """An alert as stored: never the webhook's URL."""

    id: int
    key: str  # the producer's once-only key
    user: str | None  # whom it concerns (None: everyone's admins)
    kind: str
    text: str
    state: str  # pending | sent | failed
    attempts: int
    created_at: float
    next_try_at: float | None  # None once sent or failed
    sent_at: float | None
    last_error: str | None


class AlertsAnswer(TypedDict):
    alerts: list[AlertAnswer]


# --- pools ---------------------------------------------------------------------------------
class PoolHealthAnswer(TypedDict):
    """What the engine said (rota.backends.engine.PoolHealth)."""

    reachable: bool
    message: str
    nodes: int | None
    gpus_total: float | None
    gpus_free: float | None


class EngineCapabilitiesAnswer(TypedDict):
    fractional_gpus: bool
    gpu_memory: bool
    multi_node: bool
    arrays: bool
    dependencies: bool
    conda: bool
    images: bool


class ContainersAnswer(TypedDict):
    """Whether this machine runs container jobs (``--image``), and how they get GPUs:
    "nvidia" (Docker's NVIDIA runtime), "simulated" (CUDA_VISIBLE_DEVICES only, the GPUs
    being simulated) or "none" (a container job with GPUs is refused at submit)."""

    available: bool
    gpus: Literal["nvidia", "simulated", "none"]
    message: str


class PoolAnswer(TypedDict):
    name: str
    engine: Literal["local", "slurm", "ray", "kubernetes"]
    description: str
    max_in_flight: int
    settings: dict[str, object]  # the pool's own settings from rota.toml
    health: PoolHealthAnswer
    capabilities: EngineCapabilitiesAnswer | None  # None: this machine (Rota places jobs)
    containers: ContainersAnswer | None  # this machine's; None for a cluster pool


class PoolsAnswer(TypedDict):
    default: str
    pools: list[PoolAnswer]


class RenderAnswer(TypedDict):
    """What a pool's engine would be handed for a job's next attempt, or for a spec's first
    (POST /v1/pools/{name}/render)."""

    id: int | None  # None: a spec not submitted (the text shows it as job 0)
    pool: str
    engine: Literal["local", "slurm", "ray", "kubernetes"]
    text: str


# --- evaluations -----------------------------------------------------------------------------
class EvalRunAnswer(TypedDict):
    """One evaluation run (a job tagged ``eval``), as `rota eval results` lists it."""

    id: int  # the job's
    name: str  # the config's name
    model: str | None  # the model as the config names it
    harness: str | None
    git_commit: str | None  # the config file's, when it was in a repository
    state: JobStateName
    pool: str | None
    created_at: float
    ended_at: float | None
    metrics: dict[str, float]  # the last value of each metric its latest attempt reported


class EvalResultsAnswer(TypedDict):
    runs: list[EvalRunAnswer]  # newest first


class EvalScheduleAnswer(TypedDict):
    """An evaluation that runs by itself (`rota eval schedule`)."""

    id: int
    user: str
    name: str  # the config's
    config_path: str  # the file it was read from when scheduled
    git_commit: str | None  # that file's, when it was in a repository
    pool: str | None  # None: the config's compute.pool, else the default pool
    trigger: Literal["every", "after_job", "checkpoint"]
    every_s: float | None  # every: the seconds between runs
    next_at: float | None  # every: when the next run is due
    job_id: int | None  # after_job, checkpoint: the job watched
    evaluated: list[str]  # checkpoint: the checkpoints evaluated so far
    runs: int  # evaluations submitted
    last_job: int | None  # the last evaluation's job
    enabled: bool
    disabled_reason: str | None  # why it no longer runs (done, refused, the job failed)
    created_at: float


class EvalSchedulesAnswer(TypedDict):
    schedules: list[EvalScheduleAnswer]  # oldest first: the caller's (an admin: everyone's)


class EvalUnscheduledAnswer(TypedDict):
    id: int
    removed: bool


# --- fair share and the order of the queue -------------------------------------------------
class ShareAnswer(TypedDict):
    """One user or project as ``rota share`` shows it (rota.core.fairshare.FairShare)."""

    kind: Literal["user", "project"]
    name: str
    shares: float  # as an admin set them (1 when none did)
    norm_shares: float  # its part of all shares, 0..1
    usage_gpu_hours: float  # decayed with the half-life
    norm_usage: float  # its part of everyone's decayed usage, 0..1
    effective: float  # norm_usage / norm_shares: 1 = used exactly its share
    factor: float  # 2 ** (-effective), 0..1
    gpu_hours_day: float  # GPU-hours used in the last 24 h (not decayed)
    gpu_hours_week: float  # in the last 7 days


class SharesAnswer(TypedDict):
    """GET /v1/shares: every user and project with a share set or some usage."""

    fair_share: bool  # whether the queue is ordered by it ([priority] fair_share)
    half_life: float  # seconds
    accounts: list[ShareAnswer]


class FactorAnswer(TypedDict):
    name: Literal["priority", "age", "size", "fair_share"]
    factor: float  # 0..1
    weight: float
    weighted: float  # factor x weight


class PriorityAnswer(TypedDict):
    """GET /v1/jobs/{id}/priority: a waiting job's factors and their sum, as sprio shows."""

    id: int
    user: str
    project: str | None
    fair_share: bool  # whether the queue is ordered by the sum ([priority] fair_share)
    factors: list[FactorAnswer]
    total: float

class TierAnswer(TypedDict):
    """A tier (rota.core.tiers.Tier): None where it sets no limit."""

    name: str
    price: float  # per GPU-hour
    gpu_type: str | None
    gpu_mem: int | None  # bytes on each GPU
    gpus: float | None  # most GPUs a job may use
    cpus: float | None
    memory: int | None  # bytes
    time_limit: float | None  # seconds: the longest a job on it may give
    description: str


class TiersAnswer(TypedDict):
    """GET /v1/tiers: every tier, cheapest first."""

    tiers: list[TierAnswer]


class ReportRowAnswer(TypedDict):
    group: str  # the user, project, pool or tier; "-": none
    bucket: str  # 2026-11-28, 2026-W48 (ISO week), 2026-11
    start: float  # the bucket's first second, epoch (UTC)
    gpu_hours: float
    cost: float
    wasted_gpu_hours: float  # of gpu_hours, held on idle GPUs (docs/policy.md, Idle GPUs)


class ReportTotalAnswer(TypedDict):
    group: str
    gpu_hours: float
    cost: float
    wasted_gpu_hours: float


class ReportAnswer(TypedDict):
    """GET /v1/report: GPU-hours and cost per group and period bucket."""

    by: Literal["user", "project", "pool", "tier"]
    period: Literal["day", "week", "month"]
    since: float
    until: float
    now: float
    user: str | None  # the caller's own usage only; None: everyone's (an admin)
    rows: list[ReportRowAnswer]
    totals: list[ReportTotalAnswer]


# --- pipelines (rota.server.pipelines) -----------------------------------------------------
class GradientsWinnerAnswer(TypedDict):
    """The Gradients entry whose adapter a round merged (lowest test loss with a repo)."""

    hotkey: str | None
    repo: str
    test_loss: float | None
    synth_loss: float | None
    quality_score: float | None


class RoundFactsAnswer(TypedDict):
    """What a round's steps reported (each key once its step has run)."""

    rows: NotRequired[int | None]  # examples after mapping and merging
    train_rows: NotRequired[int | None]  # of them, before the held-out tail
    heldout_rows: NotRequired[int | None]
    chunk_rows: NotRequired[int | None]  # trained on this round
    published: NotRequired[str | None]  # where the merged model was kept besides its folder
    merged_bytes: NotRequired[int | None]
    task_id: NotRequired[str | None]  # the Gradients task
    winner: NotRequired[GradientsWinnerAnswer | None]


class PipelineRoundAnswer(TypedDict):
    """One round of a pipeline: its steps' jobs and the lineage it made."""

    number: int
    state: Literal["running", "accepted", "rejected", "failed"]
    step: str  # prep | train | merge | evaluate | done
    reason: str | None  # why it ended so (the verdict with both numbers, or what failed)
    jobs: dict[str, int]  # step -> job id (evaluate_base: the base's evaluation)
    job_states: dict[str, str]  # step -> that job's state now
    folder: str
    data_hash: str  # the prepared data's (a new hash: a new held-out set)
    chunk: int | None  # the data chunk trained on (0-based) of `chunks`
    chunks: int | None
    base_model: str  # trained from
    adapter: str | None  # what training made
    merged_model: str | None  # what the merge made (the next base, if accepted)
    remote_task: str | None  # the Gradients task id
    metric: float | None  # the merged model's held-out metric
    base_metric: float | None  # the base's, on the same data
    facts: RoundFactsAnswer
    due_at: float
    started_at: float
    ended_at: float | None


class PipelineAnswer(TypedDict):
    """A pipeline as `rota pipeline list/show` shows it."""

    id: int
    name: str
    user: str
    format: Literal["rota", "gradients"]  # the file's form
    config_path: str
    train: Literal["local", "gradients"]  # where rounds train
    metric: str  # what the evaluation compares
    paused: bool
    paused_reason: str | None
    state: str  # running (a round is open), waiting, paused
    why: str  # when the next round runs and why, or what the open round does
    next_at: float | None
    base_model: str  # what the next round trains from
    base_round: int | None  # the round that made it (None: the config's model_repo)
    base_metric: float | None
    rounds: int  # begun
    failures: int  # failed in a row
    created_at: float


class PipelinesAnswer(TypedDict):
    pipelines: list[PipelineAnswer]  # oldest first: the caller's (an admin: everyone's)


class PipelineDetailAnswer(TypedDict):
    pipeline: PipelineAnswer
    rounds: list[PipelineRoundAnswer]  # newest first


class PipelineRemovedAnswer(TypedDict):
    name: str
    removed: bool
    cancelled_round: int | None  # the open round whose jobs were cancelled


class DatasetVersionAnswer(TypedDict):
    """One version of a registered dataset (rota dataset add)."""

    ref: str  # OWNER/NAME:vN, as jobs name it once resolved
    owner: str
    name: str
    version: int
    digest: str  # the manifest's content hash: the same content is the same version
    shared: bool  # every user may read it (else its owner and admins)
    files: int
    bytes: int
    source: str  # the folder it was uploaded from, or s3://...
    description: str | None
    created_by: str
    created_at: float
    store: str  # no credentials
    key: str  # in the store


class DatasetAnswer(DatasetVersionAnswer):
    """A dataset as listed: its latest version, and every version's number."""

    versions: list[int]
    cached: bool  # the latest version is in this machine's cache


class DatasetsAnswer(TypedDict):
    datasets: list[DatasetAnswer]


class DatasetFileAnswer(TypedDict):
    path: str
    size: int
    sha256: str


class DatasetJobAnswer(TypedDict):
    id: int
    state: str


class DatasetShowAnswer(DatasetAnswer):
    """GET /v1/datasets/{name}: one version with its files and the jobs that read it."""

    contents: list[DatasetFileAnswer]
    jobs: list[DatasetJobAnswer]  # the last 50
    in_store: bool  # its files are in the store (False: they went missing)


class DatasetUploadAnswer(TypedDict):
    id: str
    name: str
    files: int
    bytes: int
    received: int
    chunk_bytes: int  # the most one PUT of a chunk may carry
    # path -> bytes it has of that file: an upload of the same content cut off earlier
    # goes on from there
    received_files: dict[str, int]


class DatasetAddAnswer(TypedDict):
    """An upload begun (``upload``), or the version that holds the content (``version``:
    made now, or there already when ``made`` is false)."""

    upload: DatasetUploadAnswer | None
    version: DatasetVersionAnswer | None
    made: bool


class DatasetChunkAnswer(TypedDict):
    path: str
    received: int  # the file's bytes received so far


class DatasetFilesAnswer(TypedDict):
    received: dict[str, int]  # path -> the file's bytes received so far


class DatasetsRemovedAnswer(TypedDict):
    removed: list[DatasetVersionAnswer]


class DatasetCacheVersionAnswer(TypedDict):
    digest: str
    bytes: int
    used_at: float
    refs: list[str]


class DatasetCacheAnswer(TypedDict):
    """GET /v1/dataset-cache (admins): this machine's cache of dataset versions."""

    path: str
    limit: int | None
    bytes: int
    versions: list[DatasetCacheVersionAnswer]
    fetching: list[str]  # digests
    trouble: dict[str, str]  # digest -> why its last fetch failed
