"""The answers about one job: its state, spec, attempts, events, logs, metrics,
checkpoints, artifacts, share links, workspaces and sessions (see rota.answers)."""

from typing import Literal, NotRequired, TypedDict

#: a job's state (rota.core.lifecycle.JobState's values)
JobStateName = Literal["pending", "held", "starting", "running", "preempted", "completed",
                       "failed", "timeout", "cancelled"]


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
    loss: float | None  # the training loss it printed last (loss, train/loss, train_loss)


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
    checkpoint_dir: str | None  # the folder the job was given (--checkpoint-dir), as given


class CardMetricAnswer(TypedDict):
    last: float
    min: float
    max: float
    samples: int
    last_step: int | None


class CardOutputAnswer(TypedDict):
    path: str  # within the job's saved outputs
    size: int
    sha256: NotRequired[str]  # once saved


class CardDatasetAnswer(TypedDict):
    ref: str
    digest: str | None  # None: removed since, or never resolved (note says which)
    files: int | None
    bytes: int | None
    note: str | None


class CardGitAnswer(TypedDict):
    commit: str
    dirty: bool
    branch: str | None
    remote: str | None  # without credentials
    source: Literal["submit", "card"]  # recorded at submit, or read when the card was made


class CardAnswer(TypedDict):
    """GET /v1/jobs/{id}/card?format=json: the card's facts (`rota card --json`)."""

    id: int
    name: str
    user: str
    project: str | None
    state: str
    created_at: float
    ended_at: float | None
    end_reason: str | None
    command: list[str]
    shell: bool
    cwd: str | None
    gpus: float
    gpu_type: str | None
    env: dict[str, str]  # a secret variable's value is "***"
    image: str | None
    tags: list[str]
    attempts: int
    gpu_hours: float
    cost: float | None  # None: no attempt had a priced tier
    default_prices: bool  # the cost is at Rota's shipped prices (rota.toml sets no tiers)
    checkpoint: str | None
    metrics: dict[str, CardMetricAnswer]
    outputs: list[CardOutputAnswer]
    datasets: list[CardDatasetAnswer]
    git: CardGitAnswer | None


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
