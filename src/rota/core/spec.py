"""JobSpec: what a person asks to run. Validated once, at the edge, with clear errors.

Beside it: a job's name and tags as a terminal shows them (``job_names``), a secret's name
and a sealed value (``job_secrets``), and how the spec's errors are worded
(``spec_errors``)."""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import signal
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from rota.core.job_names import _no_control, command_name
from rota.core.job_secrets import _SECRET_NAME, sealed_tag
from rota.core.spec_errors import _as_value_error, spec_error
from rota.errors import InvalidSpec
from rota.units import MAX_GPU_INDEX, parse_duration, parse_gpu_set, parse_memory

SessionKind = Literal["none", "tmux", "screen"]
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_GPUS_PER_JOB = 1024
#: a job's files in all (paths and texts): what a Kubernetes ConfigMap holds, less room for
#: its keys
FILES_MAX = 1000 * 1024
#: the command as JSON, in bytes: one argument's limit in the kernel (MAX_ARG_STRLEN), and
#: what keeps a page of 50 jobs in a job list under 10 MB
COMMAND_MAX = 128 * 1024
MAX_ARGS = 4096
#: argv and env as JSON, in bytes: what the local runner takes in one message
#: (backends.local.runner.MAX_MESSAGE, 1 MiB) less room for what the daemon adds at launch
#: (ROTA_* variables, trackers' and stored secrets' values)
LAUNCH_MAX = (1 << 20) - 64 * 1024
MAX_ENV = 1000
#: output folders one job may name (outputs)
MAX_OUTPUTS = 16
#: datasets one job may read (datasets)
MAX_DATASETS = 16
#: a dataset a job reads: [OWNER/]NAME[:VERSION] (rota.server.storage.datasets), VERSION vN, a
#: digest's first 6-64 hex digits, or latest (the default)
DATASET_OWNER = r"[a-z_][a-z0-9_.-]{0,63}"
DATASET_NAME = r"[a-z0-9][a-z0-9._-]{0,63}"
DATASET_VERSION = r"v[0-9]{1,9}|[0-9a-f]{6,64}|latest"
DATASET_REF = rf"^(?:{DATASET_OWNER}/)?{DATASET_NAME}(?::(?:{DATASET_VERSION}))?$"
#: the same, its parts named (owner, name, version); JSON Schema's patterns name no groups
DATASET_REF_PARTS = re.compile(rf"^(?:(?P<owner>{DATASET_OWNER})/)?(?P<name>{DATASET_NAME})"
                               rf"(?::(?P<version>{DATASET_VERSION}))?$")
#: a validation context for a spec read back from the store: the checks added since it was
#: stored (and secret values sealed since) must not make an old row unreadable
STORED = {"stored": True}


_LABEL = r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}"
# an index 0-1023 in at most 4 digits (units.MAX_GPU_INDEX)
_GPU_INDEX = r"(0{0,3}[0-9]|0{0,2}[1-9][0-9]|0?[1-9][0-9]{2}|10[01][0-9]|102[0-3])"
_GPU_RANGE = rf"{_GPU_INDEX}(-{_GPU_INDEX})?"
_GPU_SET = rf"^ *({_GPU_RANGE}( *, *{_GPU_RANGE})*)? *$"  # what units.parse_gpu_set reads ("": all)
#: a GPU type: what every engine takes as it is (a Slurm GRES type, a Ray resource name, a
#: Kubernetes label value: at most 63 characters, a letter or digit at each end)
_GPU_TYPE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")


def wants_mlflow(asked: bool | None, default: bool) -> bool:
    """Whether a job wants an MLflow run: its own ``mlflow`` field, else the daemon's
    default (``--mlflow`` at start-up). The one place this is decided (the store's queue
    query says the same in SQL)."""
    return default if asked is None else bool(asked)


def _submitted(info: ValidationInfo) -> bool:
    """Whether a spec is being submitted (not read back from the store)."""
    return not (isinstance(info.context, dict) and info.context.get("stored"))


def json_size(value: object) -> int:
    """Bytes of ``value`` as JSON, as the runner's messages and the API's answers carry it."""
    return len(json.dumps(value).encode())


def _metric_pattern(v: str, info: ValidationInfo) -> str:
    """One custom metric pattern: one RE2 runs (a stored one RE2 cannot run is left out by
    the reader instead)."""
    from rota.metric_patterns import compile_pattern  # RE2 only when a spec has patterns

    if _submitted(info):
        try:
            compile_pattern(v)
        except InvalidSpec as e:  # reported by pydantic at the pattern's place
            raise ValueError(str(e)) from None
    return v


class JobSpec(BaseModel):
    """A job as submitted. Field names are the API's and the YAML jobs file's."""

    # allow_inf_nan: no field means anything with an infinite or NaN value (no time limit is
    # None), and PostgreSQL's JSON columns refuse them
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    command: list[str] = Field(
        min_length=1, max_length=MAX_ARGS,
        description=f"argv; with shell=true one script string ({COMMAND_MAX // 1024} KiB as "
                    "JSON at most)",
        # what _argv checks, for the OpenAPI document: a program that is not blank, no NUL
        json_schema_extra={"prefixItems": [{"type": "string", "pattern": r"\S"}],
                           "items": {"type": "string", "pattern": "^[^\u0000]*$"}})
    name: str | None = Field(default=None, max_length=200)
    shell: StrictBool = False
    gpus: float = Field(default=1.0, ge=0, le=MAX_GPUS_PER_JOB)
    gpu_mem: int | None = Field(default=None, ge=0, description="bytes needed on each GPU")
    gpu_type: str | None = Field(
        default=None,
        description="GPU model, matched against the GPU's name (A100, H100, ...): on this "
                    "machine a part of its name in any case; on a cluster pool the engine's "
                    "GPU type (Slurm's GRES type, Ray's accelerator type, a node label)",
        json_schema_extra={"pattern": f"^{_GPU_TYPE.pattern}$", "maxLength": 63})
    llm: str | None = Field(default=None, max_length=200)
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000,
                          description="lower number runs first")
    allowed_gpus: list[StrictInt] | None = Field(
        default=None, description="GPU indices it may use: a list, one index, or a set like "
                                  "\"0-3,6\" (None: any)",
        json_schema_extra={"anyOf": [
            {"type": "array", "items": {"type": "integer", "minimum": 0,
                                        "maximum": MAX_GPU_INDEX}},
            {"type": "integer", "minimum": 0, "maximum": MAX_GPU_INDEX},
            {"type": "string", "pattern": _GPU_SET},
            {"type": "null"}]})
    conda: str | None = Field(default=None, max_length=4096)
    cwd: str | None = Field(default=None, max_length=4096)
    env: dict[str, str] = Field(default_factory=dict, max_length=MAX_ENV,
                                json_schema_extra={"propertyNames": {"pattern": _ENV_KEY.pattern},
                                                   "additionalProperties": {
                                                       "type": "string",
                                                       "pattern": "^[^\u0000]*$"}})
    secret_env: list[str] = Field(default_factory=list, description="env keys never shown")
    secrets: dict[str, str] = Field(
        default_factory=dict,
        json_schema_extra={"propertyNames": {"pattern": _ENV_KEY.pattern},
                           "additionalProperties": {"type": "string",
                                                    "pattern": f"^{_SECRET_NAME.pattern}$"}},
        description="environment variable -> name of a secret the submitting user stored "
                    "(rota secret set); the value is put in the job's environment at launch")
    time_limit: float | None = Field(default=None, gt=0, description="seconds")
    grace: float = Field(default=30.0, ge=0, le=3600, description="seconds from SIGTERM to SIGKILL")
    retries: int = Field(default=0, ge=0, le=100)
    retry_backoff: float = Field(default=10.0, ge=0, le=86400, description="first delay, seconds")
    retry_backoff_max: float = Field(default=600.0, ge=0, le=7 * 86400)
    after: list[StrictInt] = Field(default_factory=list, max_length=10_000,
                                   description="job ids that must complete first")
    hold: StrictBool = False
    session: SessionKind = "none"
    cuda_arg: StrictBool = False
    tags: list[str] = Field(default_factory=list, max_length=32)
    image: str | None = Field(default=None, max_length=500, pattern=r"^[^\s]+$",
                              description="run it in a container of this image (on this "
                                          "machine: Docker, on Rota's GPUs; a cluster's engine "
                                          "where it can)")
    network: StrictBool = Field(default=False, description="a container gets a network only "
                                                           "when this is true")
    cpus: float | None = Field(default=None, gt=0, le=4096, description="CPUs it may use: a "
                               "limit its container or a cluster's engine enforces")
    memory: int | None = Field(default=None, gt=0, description="bytes of memory it may use: a "
                               "limit its container or a cluster's engine enforces")
    nodes: int = Field(default=1, ge=1, le=1024, description="machines it spans (a cluster "
                       "pool's engine starts it on each: srun, a Ray gang, a PyTorchJob); "
                       "gpus, cpus and memory are per node")
    procs_per_node: int | None = Field(default=None, ge=1, le=1024, description="processes "
                                       "torchrun starts on each node (default: its GPUs)")
    pool: str | None = Field(default=None, max_length=40, pattern=r"^[a-z][a-z0-9-]{0,39}$",
                             description="where it runs: this machine (local) or a cluster "
                                         "rota.toml declares; None: the default pool")
    project: str | None = Field(default=None, max_length=100, pattern=f"^{_LABEL}$",
                                description="what the job counts towards (reports, filters)")
    tier: str | None = Field(default=None, max_length=40, pattern=r"^[a-z][a-z0-9-]{0,39}$",
                             description="the tier it runs and is charged on (rota tiers); "
                                         "None: the cheapest tier it fits")
    preemptible: StrictBool = Field(
        default=False, description="may be stopped (stop handshake) and queued again so a "
                                   "higher-priority job can start")
    stop_signal: str = Field(default="SIGTERM",
                             description="the signal of the stop handshake, e.g. SIGINT, SIGUSR1")
    checkpoint_dir: str | None = Field(
        default=None, max_length=4096,
        description="where the job saves checkpoints: a directory or a glob, relative to "
                    "cwd; a retry resumes from the newest (ROTA_RESUME_FROM, {checkpoint})")
    tensorboard_dir: str | None = Field(
        default=None, max_length=4096,
        description="where it writes TensorBoard logs (relative to cwd): its scalars are "
                    "metrics too, and `rota tensorboard JOB` serves them")
    outputs: list[Annotated[str, Field(min_length=1, max_length=4096)]] = Field(
        default_factory=list, max_length=MAX_OUTPUTS,
        description="folders (relative to cwd) whose files are saved to the artifact store "
                    "when the job ends, with a manifest of sizes and sha256 (rota "
                    "artifacts JOB)")
    datasets: list[Annotated[str, Field(pattern=DATASET_REF, max_length=200)]] = Field(
        default_factory=list, max_length=MAX_DATASETS,
        description="registered datasets the job reads, [OWNER/]NAME[:VERSION] (VERSION: vN, "
                    "a digest's first hex digits, or latest): each is in a read-only folder "
                    "named by ROTA_DATASET_<NAME> before the job starts; stored as "
                    "OWNER/NAME:vN")
    workspace: StrictBool = Field(
        default=True, description="the job gets its user's and project's workspace "
                                  "(ROTA_WORKSPACE; /workspace in a container) where its pool "
                                  "gives one; on a cluster pool that gives none it runs "
                                  "without, unless it asks for one (true given): then it is "
                                  "refused. false: it needs none")
    mlflow: StrictBool | None = Field(
        default=None, description="an MLflow run for the job (params, git tags, metrics, "
                                  "log and checkpoint list); None: the daemon's setting")
    mlflow_experiment: str | None = Field(default=None, max_length=200,
                                          description="default: the daemon's setting")
    wandb: StrictBool = Field(default=False,
                        description="name the job's Weights & Biases run (WANDB_* variables, "
                                    "the API key from the user's stored WANDB_API_KEY)")
    wandb_project: str | None = Field(default=None, max_length=128,
                                      description="default: the job's project, else rota")
    wandb_entity: str | None = Field(default=None, max_length=128)
    files: dict[str, str] = Field(
        default_factory=dict,
        json_schema_extra={"propertyNames": {"pattern": "^/"}},
        description="files the job reads: the absolute path it reads each at -> its text, "
                    f"mounted read-only in its pod (a Kubernetes ConfigMap); "
                    f"{FILES_MAX // 1024} KiB in all at most")
    model: str | None = Field(
        default=None, max_length=2000, pattern=r"^\S+$",
        description="a model fetched before the job starts, into model_dir (ROTA_MODEL_DIR): "
                    "an MLflow URI (runs:/, models:/, mlflow-artifacts:) or s3://")
    model_dir: str = Field(default="/models", max_length=4096, pattern="^/",
                           description="where the fetched model lands in the job's pod")
    metric_patterns: list[Annotated[str, AfterValidator(_metric_pattern)]] = Field(
        default_factory=list, max_length=20,
        description="extra regexes for metrics in the job's output; each named group "
                    "(?P<loss>...) is a metric. They run in RE2 (linear time): no "
                    "backreferences or lookarounds")
    log_metrics: Literal["all", "json"] = Field(
        default="all",
        description="the lines of the job's output Rota reads metrics from: all (every "
                    "format it knows), or json: only lines that are one JSON object, for a "
                    "program that prints its own results among other output (an "
                    "evaluation: a harness's settings and tables are no metrics)")

    @field_validator("gpus", "gpu_mem", "priority", "time_limit", "grace", "retries",
                     "retry_backoff", "retry_backoff_max", "cpus", "memory", "nodes",
                     "procs_per_node", mode="before")
    @classmethod
    def _not_bool(cls, v: Any) -> Any:
        if isinstance(v, bool):  # JSON's true is not a number (pydantic would take it as 1)
            raise ValueError("a number, not true or false")
        return v

    @field_validator("stop_signal", mode="before")
    @classmethod
    def _signal(cls, v: Any) -> Any:
        if not isinstance(v, str):
            return v
        name = v.strip().upper()
        name = name if name.startswith("SIG") else f"SIG{name}"
        if name not in signal.Signals.__members__ or name in ("SIGKILL", "SIGSTOP"):
            raise ValueError(f"{v!r} is not a signal a job can catch (e.g. SIGTERM, SIGINT, "
                             "SIGUSR1)")
        return name

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and _submitted(info):
            _no_control("the name", v)
        return v

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: list[str], info: ValidationInfo) -> list[str]:
        for t in v:  # a comma separates tags where they are stored; blanks separate words
            if not re.fullmatch(r"[^\s,]{1,64}", t):
                raise ValueError(f"tag {t!r}: 1-64 characters, no blanks and no commas")
            if _submitted(info):
                _no_control(f"tag {t!r}", t)
        return v

    @field_validator("command")
    @classmethod
    def _argv(cls, v: list[str], info: ValidationInfo) -> list[str]:
        if not v[0].strip():
            raise ValueError("the program (first word) is empty")
        for a in v:
            if "\x00" in a:
                raise ValueError("an argument contains a NUL byte")
        if _submitted(info) and (size := json_size(v)) > COMMAND_MAX:
            raise ValueError(f"{size} bytes as JSON; at most {COMMAND_MAX} (the kernel's limit "
                             "on one argument): put a long script or list in a file")
        return v

    @field_validator("cwd", "conda", "checkpoint_dir", "tensorboard_dir")
    @classmethod
    def _path(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and "\x00" in v and _submitted(info):
            raise ValueError("a NUL byte, which no path can hold")
        return v

    @field_validator("outputs")
    @classmethod
    def _outputs(cls, v: list[str], info: ValidationInfo) -> list[str]:
        if _submitted(info):
            for path in v:
                if "\x00" in path:
                    raise ValueError(f"output {path!r}: a NUL byte, which no path can hold")
            if len(set(v)) != len(v):
                raise ValueError("an output folder is named twice")
        return v

    @field_validator("datasets")
    @classmethod
    def _datasets(cls, v: list[str], info: ValidationInfo) -> list[str]:
        if _submitted(info) and len({d.partition(":")[0] for d in v}) != len(v):
            raise ValueError("a dataset is named twice")
        return v

    @field_validator("gpu_mem", "memory", mode="before")
    @classmethod
    def _mem(cls, v: Any) -> Any:
        return _as_value_error(parse_memory, v) if isinstance(v, str) else v

    @field_validator("time_limit", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> Any:
        return _as_value_error(parse_duration, v) if isinstance(v, str) else v

    @field_validator("allowed_gpus", mode="before")
    @classmethod
    def _allowed(cls, v: Any) -> Any:
        if isinstance(v, str):
            s = _as_value_error(parse_gpu_set, v)
            return sorted(s) if s is not None else None
        if isinstance(v, int) and not isinstance(v, bool):
            return [v]
        return v

    @field_validator("allowed_gpus")
    @classmethod
    def _allowed_norm(cls, v: list[int] | None) -> list[int] | None:
        if v is None:
            return None
        if any(i < 0 for i in v):
            raise ValueError("GPU indices cannot be negative")
        if any(i > MAX_GPU_INDEX for i in v):
            raise ValueError(f"GPU index {max(v)} is past {MAX_GPU_INDEX}, the highest a "
                             "machine has")
        return sorted(set(v)) or None

    @field_validator("gpu_type")
    @classmethod
    def _gpu_type(cls, v: str | None) -> str | None:
        if v is not None and not _GPU_TYPE.fullmatch(v):
            raise ValueError(f"{v!r} is not a GPU type: 1-63 letters, digits, '-', '_' and "
                             "'.', starting and ending with a letter or digit (e.g. A100, "
                             "H100, NVIDIA-A100-SXM4-80GB)")
        return v

    @field_validator("files")
    @classmethod
    def _files(cls, v: dict[str, str]) -> dict[str, str]:
        for path in v:
            if not path.startswith("/") or posixpath.normpath(path) != path or path == "/":
                raise ValueError(f"{path!r}: give each file's absolute path in the job, "
                                 "normalised (no '..', '.', '//' or trailing '/')")
            if "\0" in path or any("\0" in text for text in v.values()):
                raise ValueError(f"{path!r}: a NUL character")
        size = sum(len(p.encode()) + len(t.encode()) for p, t in v.items())
        if size > FILES_MAX:
            raise ValueError(f"{size} bytes of files in all; at most {FILES_MAX} (put larger "
                             "data where the job can read it and name the path)")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        for k, value in v.items():
            if not _ENV_KEY.match(k):
                raise ValueError(f"{k!r} is not a valid environment variable name")
            if not _submitted(info):
                continue
            if "\x00" in value:
                raise ValueError(f"{k}: the value has a NUL byte, which no environment can "
                                 "hold")
            if len(k) + 1 + len(value.encode()) > COMMAND_MAX:
                raise ValueError(f"{k}: more than {COMMAND_MAX} bytes (the kernel's limit on "
                                 "one variable): put the value in a file")
        return v

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, v: dict[str, str]) -> dict[str, str]:
        for k, name in v.items():
            if not _ENV_KEY.match(k):
                raise ValueError(f"{k!r} is not a valid environment variable name")
            if not _SECRET_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a secret name (letters, digits and _)")
        return v

    @model_validator(mode="after")
    def _shape(self, info: ValidationInfo) -> JobSpec:
        if self.gpus > 1 and self.gpus != int(self.gpus):
            raise ValueError(f"gpus={self.gpus:g}: more than one GPU must be a whole number "
                             "(fractions are for sharing one GPU)")
        if self.gpu_type is not None and self.gpus == 0:
            raise ValueError(f"gpu_type {self.gpu_type!r} names a kind of GPU but gpus=0 asks "
                             "for none: give gpus (e.g. 1), or drop gpu_type")
        if self.shell and len(self.command) != 1:
            raise ValueError("with shell=true give the command as one script string")
        if self.allowed_gpus is not None and self.gpus >= 1 and len(self.allowed_gpus) < self.gpus:
            raise ValueError(f"gpus={self.gpus:g} but only {len(self.allowed_gpus)} GPUs allowed "
                             f"({self.allowed_gpus})")
        missing = [k for k in self.secret_env if k not in self.env]
        if missing:
            raise ValueError(f"secret_env names keys not in env: {missing}")
        both = sorted(set(self.env) & set(self.secrets))
        if both:
            raise ValueError(f"{both} set both in env and in secrets")
        if self.retry_backoff_max < self.retry_backoff:
            raise ValueError("retry_backoff_max is smaller than retry_backoff")
        if _submitted(info) and (size := json_size([self.command, self.env])) > LAUNCH_MAX:
            raise ValueError(f"command and env take {size} bytes as JSON; at most {LAUNCH_MAX} "
                             "(what a launch can carry): put large values in a file")
        return self

    @classmethod
    def stored(cls, data: dict[str, Any]) -> JobSpec:
        """A spec read back from the store (checks added since it was stored are skipped)."""
        return cls.model_validate(data, context=STORED)

    # --- derived -----------------------------------------------------------------
    @property
    def whole_gpus(self) -> int:
        """Number of whole GPUs (0 for a fractional or CPU-only job)."""
        return int(self.gpus) if self.gpus >= 1 else 0

    @property
    def display_name(self) -> str:
        return self.name or command_name(self.command)

    def content_hash(self) -> str:
        """De-duplication key: what runs and where, not bookkeeping like hold or tags. A
        sealed secret value counts by its keyed tag (see sealed_tag): equal secrets give
        equal keys, and the key gives no way to test a guess of the value."""
        keys: tuple[str, ...] = ("command", "shell", "gpus", "gpu_mem", "llm", "allowed_gpus",
                                 "conda", "cwd", "env", "session", "cuda_arg", "priority")
        if self.gpu_type is not None:  # only when given: earlier jobs keep their keys
            keys += ("gpu_type",)
        fields = {k: getattr(self, k) for k in keys}
        fields["env"] = {k: sealed_tag(v) if k in self.secret_env else v
                         for k, v in self.env.items()}
        payload = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()

    def redacted(self) -> dict[str, Any]:
        """The spec as shown to people and API clients: secret env values masked."""
        d = self.model_dump()
        d["env"] = {k: ("***" if k in self.secret_env else v) for k, v in self.env.items()}
        return d


def parse_spec(data: dict[str, Any], *, where: str = "") -> JobSpec:
    """Build a JobSpec, turning pydantic's errors into one InvalidSpec naming the field."""
    try:
        return JobSpec.model_validate(data)
    except ValidationError as e:
        raise spec_error(e, where=where) from None
    except InvalidSpec as e:
        prefix = f"{where}: " if where else ""
        raise InvalidSpec(f"{prefix}{e}", field=e.field) from None


GpuCount = Annotated[float, Field(ge=0)]
