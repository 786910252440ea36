"""The database schema. Alembic migrations in store/migrations follow these tables."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        # A restarted daemon reads its pending queue from this index alone, in queue order:
        # a million pending jobs are read in about a second, where reading their rows (each
        # with its spec) took minutes. Partial: it holds the waiting jobs only.
        Index("ix_jobs_queue", "priority", "id", "gpus", "gpu_mem", "not_before",
              "allowed_gpus", "after_ids", "mlflow", "state", "pool", "user", "project",
              "created_at", "time_limit", "name", "workspace",
              sqlite_where=text("state = 'pending'"),
              postgresql_where=text("state = 'pending'")),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # indexed: each submit asks for the last peak of every name it brings (last_peaks)
    name: Mapped[str | None] = mapped_column(String(200), index=True)
    user: Mapped[str] = mapped_column(String(100), default="")
    state: Mapped[str] = mapped_column(String(20), index=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    gpus: Mapped[float] = mapped_column(Float, default=1.0)
    gpu_mem: Mapped[int | None] = mapped_column(BigInteger)
    content_hash: Mapped[str] = mapped_column(String(64), index=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(200), unique=True)
    source: Mapped[str] = mapped_column(String(300), default="cli")
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    not_before: Mapped[float | None] = mapped_column(Float)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    end_reason: Mapped[str | None] = mapped_column(Text)
    # filled from the plan when a job waits; informational, the live plan is authoritative
    estimate_note: Mapped[str | None] = mapped_column(Text)
    project: Mapped[str | None] = mapped_column(String(100), index=True)
    # ",a,b," so one tag is found with LIKE '%,a,%' on every database
    tags: Mapped[str] = mapped_column(Text, default="")
    # the latest progress read from the job's output (step, totals, rate, eta, where the
    # reading of its log got to); see rota.server.tracking.outputs
    progress: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # the job's runs in experiment trackers: {"mlflow": {...}, "wandb": {...}}; see
    # rota.server.tracking.trackers
    tracking: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # what the scheduler reads from the spec, kept as columns so the queue loads from
    # ix_jobs_queue without the specs: "0,1,3" (allowed GPUs, job ids it runs after) or
    # NULL; mlflow: the spec's own choice (NULL: the daemon's setting decides)
    allowed_gpus: Mapped[str | None] = mapped_column(Text)
    # the cluster pool it runs in (rota.pools); NULL: this machine
    pool: Mapped[str | None] = mapped_column(String(40))
    after_ids: Mapped[str | None] = mapped_column(Text)
    mlflow: Mapped[bool | None] = mapped_column(Boolean)
    # the spec's time limit in seconds (NULL: none), with the name: a restarted daemon's
    # queue knows how long each job is expected to run (backfill) without the specs
    time_limit: Mapped[float | None] = mapped_column(Float)
    # false: the spec says the job needs no workspace (it is not held for one's quota or
    # copy); NULL: it gets one (the default; never stored as true)
    workspace: Mapped[bool | None] = mapped_column(Boolean)
    # the command as a job with no name is shown (rota.core.job_names.command_name),
    # stored for every job: the list's name filter matches a job given no name by it, as
    # people see it (`--name python`). Not in `name`, which stays the name the user gave
    # (submits, run-time predictions and memory peaks compare it). NULL only for a row
    # whose spec had no command to read when migration 0022 filled it in.
    command_text: Mapped[str | None] = mapped_column(String(200))


class AttemptRow(Base):
    __tablename__ = "attempts"
    __table_args__ = (Index("ix_attempts_job_number", "job_id", "number", unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    gpu_indices: Mapped[list[int]] = mapped_column(JSON)
    gpu_uuids: Mapped[list[str]] = mapped_column(JSON, default=list)
    milli: Mapped[int] = mapped_column(Integer)
    gpu_mem: Mapped[int | None] = mapped_column(BigInteger)
    backend: Mapped[str] = mapped_column(String(20))
    handle: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    log_path: Mapped[str] = mapped_column(Text)
    status_path: Mapped[str] = mapped_column(Text)
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    signal: Mapped[int | None] = mapped_column(Integer)
    outcome: Mapped[str | None] = mapped_column(String(20))
    reason: Mapped[str | None] = mapped_column(Text)
    peak_gpu_mem: Mapped[int | None] = mapped_column(BigInteger)
    # the tier it ran on and that tier's price per GPU-hour when it started (accounting)
    tier: Mapped[str | None] = mapped_column(String(40))
    price: Mapped[float | None] = mapped_column(Float)
    # the kind of GPU it ran on: its first GPU's name, or the type asked of an engine
    gpu_type: Mapped[str | None] = mapped_column(String(100))
    # GPU-seconds its GPUs stayed idle, in stretches long enough to flag it (core.idle)
    idle_seconds: Mapped[float] = mapped_column(Float, default=0.0)


class MetricRow(Base):
    """One value of one metric, read from a job's output or reported by ``rota.job``."""

    __tablename__ = "metrics"
    __table_args__ = (Index("ix_metrics_job_name", "job_id", "name", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    ts: Mapped[float] = mapped_column(Float)
    step: Mapped[int | None] = mapped_column(BigInteger)
    name: Mapped[str] = mapped_column(String(100))
    value: Mapped[float] = mapped_column(Float)


class EventRow(Base):
    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int | None] = mapped_column(Integer, index=True)
    ts: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(40))
    from_state: Mapped[str | None] = mapped_column(String(20))
    to_state: Mapped[str | None] = mapped_column(String(20))
    message: Mapped[str | None] = mapped_column(Text)


class GpuSettingRow(Base):
    """What people set on a GPU, kept across restarts (the original lost pauses)."""

    __tablename__ = "gpu_settings"

    uuid: Mapped[str] = mapped_column(String(100), primary_key=True)
    index: Mapped[int] = mapped_column(Integer)
    paused: Mapped[bool] = mapped_column(Boolean, default=False)
    note: Mapped[str | None] = mapped_column(Text)


class UserRow(Base):
    """Someone who may use the daemon: over TCP by a token, or over the socket as the Unix
    account the kernel names (created on first use). ``unix_account``: the account this
    user's jobs run as (None: the daemon's own)."""

    __tablename__ = "users"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)
    unix_account: Mapped[str | None] = mapped_column(String(64), nullable=True, default=None)


class TokenRow(Base):
    """An API token, stored as its SHA-256: the token itself is shown once, at creation."""

    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user: Mapped[str] = mapped_column(ForeignKey("users.name", ondelete="CASCADE"), index=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))  # enough to tell tokens apart in a list
    note: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    last_used_at: Mapped[float | None] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float)


class SecretRow(Base):
    """A user's named secret (an API key, a token), encrypted with the daemon's key; jobs
    get it in their environment, and no answer of the API ever carries it."""

    __tablename__ = "secrets"

    user: Mapped[str] = mapped_column(String(100), primary_key=True)
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    ciphertext: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class ShareRow(Base):
    """The fair share an admin gave a user or a project (rota.core.fairshare); one not
    here has 1."""

    __tablename__ = "shares"

    kind: Mapped[str] = mapped_column(String(10), primary_key=True)  # "user" | "project"
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    shares: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class QuotaRow(Base):
    """A quota or budget an admin set on a user or a project (rota.core.quota)."""

    __tablename__ = "quotas"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(10))  # user | project
    name: Mapped[str] = mapped_column(String(100))
    what: Mapped[str] = mapped_column(String(10))  # gpus | gpu_hours | money
    period: Mapped[str] = mapped_column(String(10))  # none | day | week | month
    limit: Mapped[float] = mapped_column(Float)
    hard: Mapped[bool] = mapped_column(Boolean, default=False)
    lifted_until: Mapped[float | None] = mapped_column(Float)  # not enforced before then
    set_by: Mapped[str] = mapped_column(String(100))
    updated_at: Mapped[float] = mapped_column(Float)
    __table_args__ = (Index("ux_quotas_owner_what", "kind", "name", "what", unique=True),)



class DaemonSettingRow(Base):
    __tablename__ = "daemon_settings"

    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class EvalScheduleRow(Base):
    """An evaluation that runs by itself (`rota eval schedule`): every so often, once
    after a job completes, or on each new checkpoint of a job. The daemon submits its jobs
    and moves ``next_at`` (or adds to ``evaluated``) in the same transaction, so a due run
    is submitted once across restarts; see rota.server.schedules.eval_schedules."""

    __tablename__ = "eval_schedules"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user: Mapped[str] = mapped_column(String(100))
    name: Mapped[str] = mapped_column(String(100))  # the config's
    config_text: Mapped[str] = mapped_column(Text)  # the YAML as validated when scheduled
    config_path: Mapped[str] = mapped_column(Text)
    git_commit: Mapped[str | None] = mapped_column(String(64))
    git_dirty: Mapped[bool | None] = mapped_column(Boolean)
    pool: Mapped[str | None] = mapped_column(String(40))  # None: the config's, else default
    kind: Mapped[str] = mapped_column(String(20))  # every | after_job | checkpoint
    every_s: Mapped[float | None] = mapped_column(Float)
    next_at: Mapped[float | None] = mapped_column(Float)
    job_id: Mapped[int | None] = mapped_column(Integer)  # the job watched
    # the checkpoints evaluated so far (paths), for kind checkpoint
    evaluated: Mapped[list[str]] = mapped_column(JSON, default=list)
    runs: Mapped[int] = mapped_column(Integer, default=0)  # evaluations submitted
    last_job: Mapped[int | None] = mapped_column(Integer)  # the last evaluation's job
    # the due check reads the enabled ones only (ix_eval_schedules_enabled)
    enabled: Mapped[bool] = mapped_column(Boolean, index=True)
    disabled_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)


class AlertRow(Base):
    """An alert waiting to be, or once, POSTed to the webhook (rota.server.policy.alert_sender):
    a durable outbox. ``key`` is the producer's once-only key: a second alert with the
    same key is not stored, which is what makes each alert go out once."""

    __tablename__ = "alerts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(200), unique=True)
    user: Mapped[str | None] = mapped_column(String(100), index=True)  # whom it concerns
    created_at: Mapped[float] = mapped_column(Float)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)  # Slack-compatible
    # pending | sent | failed; the sender reads the pending ones (ix_alerts_state)
    state: Mapped[str] = mapped_column(String(10), index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_try_at: Mapped[float] = mapped_column(Float)
    sent_at: Mapped[float | None] = mapped_column(Float)
    last_error: Mapped[str | None] = mapped_column(Text)


class PipelineRow(Base):
    """A recurring fine-tuning pipeline (`rota pipeline add`): its definition as validated
    when added, its schedule and the model the next round starts from. ``next_at`` is drawn
    when a round ends and stored, so a restart keeps it; see rota.server.schedules.pipelines."""

    __tablename__ = "pipelines"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    user: Mapped[str] = mapped_column(String(100))
    format: Mapped[str] = mapped_column(String(20))  # rota | gradients
    config_text: Mapped[str] = mapped_column(Text)  # the YAML as added (the whole file)
    config_path: Mapped[str] = mapped_column(Text)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)  # this pipeline's, validated
    paused: Mapped[bool] = mapped_column(Boolean)
    paused_reason: Mapped[str | None] = mapped_column(Text)
    next_at: Mapped[float | None] = mapped_column(Float)  # None: a round is open, or paused
    next_why: Mapped[str | None] = mapped_column(Text)  # how next_at was drawn
    base_model: Mapped[str] = mapped_column(Text)  # what the next round trains from
    base_round: Mapped[int | None] = mapped_column(Integer)  # the round that made it
    # the base's held-out metric and the held-out set (data hash) it was measured on
    base_metric: Mapped[float | None] = mapped_column(Float)
    base_metric_data: Mapped[str | None] = mapped_column(String(64))
    rounds: Mapped[int] = mapped_column(Integer, default=0)  # rounds begun
    failures: Mapped[int] = mapped_column(Integer, default=0)  # failed in a row
    created_at: Mapped[float] = mapped_column(Float)


class PipelineRoundRow(Base):
    """One round of a pipeline: its steps' jobs and what each made (the lineage: base ->
    adapter -> merged model, the data chunk, the held-out metrics, the verdict). Moved on
    by the daemon in the same transaction that submits the next step's job."""

    __tablename__ = "pipeline_rounds"
    __table_args__ = (Index("ix_pipeline_rounds_number", "pipeline_id", "number",
                            unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    pipeline_id: Mapped[int] = mapped_column(Integer)
    number: Mapped[int] = mapped_column(Integer)  # 1, 2, ... within the pipeline
    # running | accepted | rejected | failed; the daemon reads the running ones
    state: Mapped[str] = mapped_column(String(12), index=True)
    step: Mapped[str] = mapped_column(String(12))  # prep | train | merge | evaluate | done
    reason: Mapped[str | None] = mapped_column(Text)  # why it ended so
    jobs: Mapped[dict[str, int]] = mapped_column(JSON)  # step (evaluate_base ...) -> job
    folder: Mapped[str] = mapped_column(Text)
    data_hash: Mapped[str] = mapped_column(String(64))
    chunk: Mapped[int | None] = mapped_column(Integer)
    chunks: Mapped[int | None] = mapped_column(Integer)
    base_model: Mapped[str] = mapped_column(Text)
    adapter: Mapped[str | None] = mapped_column(Text)
    merged_model: Mapped[str | None] = mapped_column(Text)
    remote_task: Mapped[str | None] = mapped_column(String(100))  # the Gradients task id
    metric: Mapped[float | None] = mapped_column(Float)  # the merged model's
    base_metric: Mapped[float | None] = mapped_column(Float)  # the base's, same data
    facts: Mapped[dict[str, Any]] = mapped_column(JSON)  # the steps' results, as shown
    due_at: Mapped[float] = mapped_column(Float)  # when it was due
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)


class ArtifactRow(Base):
    """What a job's ``outputs`` saved when it ended (rota.server.storage.artifacts). A row is
    written ``pending`` in the batch that records the end, so a daemon killed before the
    save finished does it again after its restart; the store holds the files and their
    manifest under ``key``."""

    __tablename__ = "artifacts"

    job_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    state: Mapped[str] = mapped_column(String(10), index=True)  # pending | saved | failed
    key: Mapped[str] = mapped_column(String(200))  # in the artifact store (jobs/ID)
    store_url: Mapped[str] = mapped_column(Text)  # the store it went to
    # what is saved: its name in the artifact -> the folder on this machine (absolute)
    sources: Mapped[dict[str, str]] = mapped_column(JSON)
    user: Mapped[str] = mapped_column(String(100))  # whose rights read them
    files: Mapped[int | None] = mapped_column(Integer)
    bytes: Mapped[int | None] = mapped_column(BigInteger)
    skipped: Mapped[list[str] | None] = mapped_column(JSON)  # links and special files
    error: Mapped[str | None] = mapped_column(Text)  # why it was not saved
    tries: Mapped[int] = mapped_column(Integer, default=0)
    requested_at: Mapped[float] = mapped_column(Float)
    saved_at: Mapped[float | None] = mapped_column(Float)


class ShareLinkRow(Base):
    """A link to a job's saved outputs that works without a Rota account (rota share-link):
    served by the daemon at /share/TOKEN until it expires or is revoked. Stored as the
    token's SHA-256: the link itself is shown once, at creation."""

    __tablename__ = "share_links"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    job_id: Mapped[int] = mapped_column(Integer, index=True)
    path: Mapped[str | None] = mapped_column(Text)  # a file or folder of the list; None: all
    created_by: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float)
    downloads: Mapped[int] = mapped_column(Integer, default=0)


class WorkspaceQuotaRow(Base):
    """A workspace's own size quota, set by an admin (rota workspace quota); the others
    have ``[storage] workspace_quota``."""

    __tablename__ = "workspace_quotas"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)  # USER/PROJECT
    limit: Mapped[int] = mapped_column(BigInteger)  # bytes
    set_by: Mapped[str] = mapped_column(String(100))
    set_at: Mapped[float] = mapped_column(Float)


class DatasetRow(Base):
    """One version of a registered dataset (rota dataset add): its files are in the
    store under ``key``, and ``digest`` is its manifest's content hash. Adding the same
    content again finds this row rather than making a version; versions are numbered per
    dataset and a number is never given to other content (a removed version's row stays)."""

    __tablename__ = "datasets"
    __table_args__ = (UniqueConstraint("owner", "name", "version"),
                      UniqueConstraint("owner", "name", "digest"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    owner: Mapped[str] = mapped_column(String(100))
    name: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer)
    digest: Mapped[str] = mapped_column(String(64))
    key: Mapped[str] = mapped_column(String(300))  # in the store
    store_url: Mapped[str] = mapped_column(Text)
    shared: Mapped[bool] = mapped_column(Boolean)  # every user may read it
    files: Mapped[int] = mapped_column(Integer)
    bytes: Mapped[int] = mapped_column(BigInteger)
    source: Mapped[str] = mapped_column(Text)  # an upload's folder, or s3://...
    description: Mapped[str | None] = mapped_column(Text)
    created_by: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[float] = mapped_column(Float)
    removed_at: Mapped[float | None] = mapped_column(Float)  # its number is never reused


class JobDatasetRow(Base):
    """A dataset version a job reads (``--dataset``), as ``OWNER/NAME:vN``: a restarted
    daemon finds which waiting jobs need which versions without reading their specs, and a
    version in use cannot be removed."""

    __tablename__ = "job_datasets"

    job_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ref: Mapped[str] = mapped_column(String(200), primary_key=True, index=True)
