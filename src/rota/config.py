"""Settings, read once at start-up (rota.toml, environment, .env) and passed down."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from rota.core.fairshare import Weights
from rota.core.tiers import CRUCIBLE, Tier
from rota.core.tiers import NAME as TIER_NAME
from rota.errors import InvalidSpec
from rota.home import default_home
from rota.pools import ENGINES, Pool, Pools, WorkspaceKind, local_engine_implied, workspace_kind
from rota.units import parse_duration, parse_memory

__all__ = ["AlertSettings", "Settings", "StorageSettings", "default_home", "load_settings"]


#: the largest request body the API takes by default: a submit of 10,000 jobs (the most
#: one submit takes) at 1.6 KB each; a single job's spec is at most ~1 MiB (core.spec)
DEFAULT_MAX_REQUEST_BYTES = 16 << 20
MIN_MAX_REQUEST_BYTES = 1 << 20


def _login_name() -> str:
    import pwd

    try:
        return os.environ.get("USER") or pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"uid{os.getuid()}"


def _split_address(text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:8787)")
    return host, int(port)


class IdleSettings(BaseModel):
    """[idle]: jobs that hold a GPU doing nothing (rota.core.idle, docs/policy.md)."""

    model_config = ConfigDict(extra="forbid")

    threshold: float = Field(default=0.05, gt=0, le=1, description="a held GPU under this "
                             "utilisation (0..1) counts as idle")
    minutes: float = Field(default=15.0, gt=0, description="how long a held GPU stays idle "
                           "before its job is flagged (a fraction of a minute is allowed)")
    action: Literal["flag", "stop"] = Field(default="flag", description="flag: shown in the "
                                            "queue, why, the dashboard and reports; stop: "
                                            "also stopped through the handshake and held")


class PrioritySettings(BaseModel):
    """``[priority]``: the order of the queue (rota.core.fairshare; docs/policy.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fair_share: bool = Field(default=False, description="order the queue by the weighted "
                             "factors below; false: priority, then submission order")
    weight_priority: float = Field(default=1000.0, ge=0, allow_inf_nan=False)
    weight_age: float = Field(default=100.0, ge=0, allow_inf_nan=False)
    weight_size: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    weight_fair_share: float = Field(default=1000.0, ge=0, allow_inf_nan=False)
    favor_small: bool = False
    half_life: float = Field(default=7 * 86_400.0, gt=0, description="seconds (or 7d, "
                             "12h): usage counts half after this long")
    max_age: float = Field(default=7 * 86_400.0, gt=0, description="seconds (or 7d): the "
                           "wait at which the age factor reaches 1")
    refresh: float = Field(default=2.0, gt=0, description="seconds: usage is summed from "
                           "the attempts at most this often (and when a job starts or ends)")
    gpu_weights: dict[str, Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(
        default_factory=dict, description="how much a GPU-second of a kind counts, by a "
        "part of the GPU's name ({H100 = 2.0}); other kinds count 1")

    @field_validator("half_life", "max_age", "refresh", mode="before")
    @classmethod
    def _duration(cls, v: object, info: Any) -> object:
        if not isinstance(v, str):
            return v
        try:
            return parse_duration(v, field=info.field_name)
        except InvalidSpec as e:  # pydantic names the setting when it is a ValueError
            raise ValueError(str(e)) from None

    def weights(self) -> Weights:
        """The weights rota.core.fairshare.order_queue takes (the daemon's and the
        simulator's)."""
        return Weights(priority=self.weight_priority, age=self.weight_age,
                       size=self.weight_size, fair_share=self.weight_fair_share,
                       max_age_s=self.max_age, favor_small=self.favor_small)


class AlertSettings(BaseModel):
    """``[alerts]``: where alerts go (rota.server.policy.alert_sender). The webhook's URL is a
    stored secret, never a setting: a Slack-style URL is itself the credential."""

    model_config = ConfigDict(extra="forbid")

    webhook_secret: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,99}$",
                                       description="the name of the stored secret that "
                                       "holds the webhook's URL; none: alerts stay pending")
    webhook_user: str | None = Field(default=None, description="whose secret it is "
                                     "(default: the daemon's user)")
    max_tries: int = Field(default=8, ge=1, le=100, description="POSTs before an alert is "
                           "given up as failed")
    first_backoff: float = Field(default=2.0, gt=0, le=3600, description="seconds before "
                                 "the first retry; doubled each try")
    max_backoff: float = Field(default=600.0, gt=0, le=86400, description="the longest "
                               "wait between two tries")
    timeout: float = Field(default=5.0, gt=0, le=60, description="seconds one POST may "
                           "take")


class StorageSettings(BaseModel):
    """``[storage]``: where the bytes a job leaves go (rota.storage, docs/storage.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str | None = Field(default=None, description="a local folder (/path) or an "
                            "S3-compatible bucket (s3://bucket/prefix); default: the "
                            "folder storage in the daemon's home")
    endpoint_url: str | None = Field(default=None, description="an S3-compatible server's "
                                     "address (MinIO, ...); default: boto3's (AWS_ENDPOINT_"
                                     "URL_S3, else AWS)")
    region: str | None = Field(default=None, description="the bucket's region; default: "
                               "boto3's")
    max_output_bytes: int = Field(default=100 << 30, gt=0, description="the most a job's "
                                  "outputs may hold (bytes, or with a unit: 20G); past it "
                                  "they are not saved, and the job's page says why")
    workspaces: Path | None = Field(default=None, description="the folder of the users' "
                                    "workspaces (USER/PROJECT in it); default: workspaces in "
                                    "the daemon's home")
    workspace_quota: int = Field(default=100 << 30, gt=0, description="what one workspace "
                                 "may hold unless an admin sets its own (rota workspace "
                                 "quota); past it its jobs wait")
    workspace_scan: float = Field(default=60.0, gt=0, description="seconds between "
                                  "measurements of the workspaces' sizes")
    workspace_url: str | None = Field(default=None, description="an S3 prefix "
                                      "(s3://bucket/prefix) that is the workspaces' home: "
                                      "USER/PROJECT/... objects in it, brought here before a "
                                      "job starts and sent back when the last one ends; "
                                      "default: none, the local folders alone")
    cleanup_days: float = Field(default=30.0, gt=0, description="`rota workspace clean` "
                                "lists files untouched for this many days by default")
    max_dataset_bytes: int = Field(default=100 << 30, gt=0, description="the most one "
                                   "dataset version may hold (rota dataset add)")
    dataset_cache: Path | None = Field(default=None, description="this machine's cache of "
                                       "dataset versions; default: dataset-cache in the "
                                       "daemon's home")
    dataset_cache_limit: int = Field(default=200 << 30, gt=0, description="the most the "
                                     "dataset cache holds; the versions used least lately "
                                     "(and read by no running job) make room")

    @field_validator("max_output_bytes", "workspace_quota", "max_dataset_bytes",
                     "dataset_cache_limit", mode="before")
    @classmethod
    def _bytes(cls, v: object) -> object:
        return parse_memory(v) if isinstance(v, str) else v

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("/", "file:///", "s3://")):
            raise ValueError(f"{v!r}: a local folder (/path, file:///path) or s3://bucket")
        return v

    @field_validator("workspace_url")
    @classmethod
    def _workspace_url(cls, v: str | None) -> str | None:
        if v is not None and (not v.startswith("s3://") or not v[5:].partition("/")[0]):
            raise ValueError(f"{v!r}: an S3 prefix, s3://bucket or s3://bucket/prefix")
        return v


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ROTA_", env_file=".env", extra="ignore")
    # (pools, default, Pools) as pool_set last made them
    _pool_set: tuple[Any, str, Pools] | None = PrivateAttr(default=None)

    home: Path = Field(default_factory=default_home)
    database_url: str | None = None  # default: SQLite in home
    simulate: str | None = None  # e.g. "4x24G"; None: NVML, else a simulated default
    jobs_file: Path | None = None  # default: home/jobs.txt
    llm_config: Path | None = None  # default: home/llm_config.json
    mem_threshold: float = Field(default=0.8, gt=0, le=1)
    util_threshold: float = Field(default=0.8, gt=0, le=1)
    backfill: bool = True
    packing: str = Field(default="best-fit", description="which GPU a share of a GPU goes "
                         "on: best-fit, first-fit, random or fgd (docs/policy.md)")
    packing_seed: int = Field(default=0, description="seed of the random packing")
    start_estimates: int = Field(default=1000, ge=0, le=100_000, description="how many waiting "
                                 "jobs, in queue order, each pass estimates a start time for "
                                 "(0: none)")
    safety_tick: float = Field(default=5.0, gt=0, description="seconds between safety passes")
    device_poll: float = Field(default=2.0, gt=0, description="seconds between GPU readings")
    quota_check: float = Field(default=30.0, gt=0, description="seconds between readings of "
                               "usage for GPU-hours and money quotas (rota.server.policy.quotas)")
    jobs_file_poll: float = Field(default=1.0, gt=0)
    tmux_socket: str = "rota"
    listen: str | None = Field(default=None, description="HOST:PORT for the API over TCP "
                               "(bearer tokens required there), e.g. 127.0.0.1:8787")
    public_url: str | None = Field(default=None, description="the address people reach "
                                   "the TCP API at, for the links the daemon gives (rota "
                                   "share-link); default: http://HOST:PORT of listen")
    api_workers: int = Field(default=0, ge=0, le=64, description="processes that serve the "
                             "TCP listener and answer job reads from the store, so that the "
                             "API uses more than one core; 0: the daemon serves it itself")
    max_request_bytes: int = Field(
        default=DEFAULT_MAX_REQUEST_BYTES, ge=MIN_MAX_REQUEST_BYTES,
        description="the largest request body the API takes (bytes, or with a unit: 32M); "
                    "a larger one is refused with 413")
    max_log_bytes: int = Field(
        default=1 << 30, ge=64 << 10,
        description="the most one job's log holds (bytes, or with a unit: 2G); past it the "
                    "log keeps its first half and its newest output, with a line between "
                    "that says how much was left out")
    user: str = Field(default_factory=lambda: _login_name())
    shared_account: bool = Field(default=False, description="a daemon not run as root runs "
                                 "every user's jobs as its own account, with its rights "
                                 "(docs/security.md); false: only its own account's jobs")
    # experiment trackers (rota.server.tracking.trackers)
    mlflow: bool = Field(default=False, description="every job gets an MLflow run unless "
                         "it says mlflow=false")
    mlflow_tracking_uri: str | None = Field(default=None, description="default: SQLite in "
                                            "home (mlflow.db), artifacts in home/mlartifacts")
    mlflow_experiment: str = "rota"
    wandb_entity: str | None = None
    wandb_project: str | None = None
    # where jobs run (rota.pools): this machine, and clusters under [pools.NAME]
    pools: dict[str, Pool] = Field(default_factory=dict, description="clusters by name, "
                                   "each with its engine and settings ([pools.NAME])")
    default_pool: str = Field(default="local", description="where a job that names no pool "
                              "runs")
    idle: IdleSettings = Field(default_factory=IdleSettings, description="[idle]: jobs "
                               "holding a GPU that stays idle")
    priority: PrioritySettings = Field(default_factory=PrioritySettings,
                                       description="the order of the queue ([priority])")

    # tiers and their prices (rota.core.tiers): [tiers.NAME]; none: the Crucible tiers
    tiers: dict[str, Tier] = Field(default_factory=dict, description="tiers by name, each "
                                   "with its limits and price per GPU-hour ([tiers.NAME])")
    tier_required: bool = Field(default=False, description="refuse at submit a job that "
                                "fits no tier; false: it runs untiered at price 0")
    alerts: AlertSettings = Field(default_factory=AlertSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings,
                                     description="[storage]: where outputs are saved")

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings],
                                   init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml = TomlConfigSettingsSource(settings_cls, toml_file=default_home() / "rota.toml")
        return (init_settings, env_settings, dotenv_settings, toml)

    @field_validator("pools", mode="before")
    @classmethod
    def _local_needs_no_engine(cls, v: object) -> object:
        return local_engine_implied(v)

    @model_validator(mode="after")
    def _pools_hold_together(self) -> Settings:
        self.pool_set  # noqa: B018 - a bad name or default is an error at start-up
        return self

    @field_validator("tiers")
    @classmethod
    def _tier_names(cls, v: dict[str, Tier]) -> dict[str, Tier]:
        for name in v:
            if not TIER_NAME.fullmatch(name):
                raise ValueError(f"tier name {name!r}: lower-case letters, digits and -, "
                                 "starting with a letter, at most 40")
        return v

    @property
    def tier_set(self) -> dict[str, Tier]:
        """The tiers rota.toml declares, or the Crucible tiers when it declares none."""
        return self.tiers or CRUCIBLE

    @property
    def pool_set(self) -> Pools:
        """The pools, with ``local`` always among them (made once: every submit, launch and
        pass asks, and validating them each time was ~3 % of the daemon's work per job)."""
        made = self._pool_set
        if made is None or made[0] is not self.pools or made[1] != self.default_pool:
            made = (self.pools, self.default_pool,
                    Pools(pools=self.pools, default=self.default_pool))
            self._pool_set = made
        return made[2]

    @field_validator("max_request_bytes", "max_log_bytes", mode="before")
    @classmethod
    def _request_bytes(cls, v: object, info: ValidationInfo) -> object:
        # "32M" with a unit; plain digits stay bytes (parse_memory would read them as GiB)
        if isinstance(v, str) and not v.strip().isdigit():
            name = info.field_name or "size"
            try:
                return parse_memory(v, field=name)
            except InvalidSpec as e:
                raise ValueError(str(e).removeprefix(f"{name}: ")) from None
        return v

    @field_validator("packing")
    @classmethod
    def _packing(cls, v: str) -> str:
        from rota.core.packing import check_packing

        return check_packing(v)

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str | None) -> str | None:
        if v is not None:
            _split_address(v)
        return v

    @property
    def listen_address(self) -> tuple[str, int]:
        assert self.listen is not None
        return _split_address(self.listen)

    def reach_url(self) -> str | None:
        """Where people reach the TCP API and the dashboard: ``public_url``, else the
        --listen address (a wildcard one named by this machine's name); None without one."""
        if self.public_url:
            return self.public_url.rstrip("/")
        if not self.listen:
            return None
        host, port = self.listen_address
        if host in ("0.0.0.0", "::", ""):
            host = socket.getfqdn()
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    # --- derived paths -----------------------------------------------------------------
    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'rota.db'}"

    @property
    def socket_path(self) -> Path:
        return self.home / "rota.sock"

    @property
    def pid_path(self) -> Path:
        return self.home / "rota.pid"

    @property
    def workspaces_root(self) -> Path:
        return self.storage.workspaces or self.home / "workspaces"

    def workspace_kind(self, pool: str | None) -> WorkspaceKind:
        """How the jobs of ``pool`` (None: the default) see their workspace."""
        return workspace_kind(self.pool_set.get(pool)[1],
                              bucket_home=bool(self.storage.workspace_url))

    @property
    def dataset_cache_root(self) -> Path:
        return self.storage.dataset_cache or self.home / "dataset-cache"

    @property
    def storage_url(self) -> str:
        """Where artifacts go: [storage] url, else the folder storage in home."""
        return self.storage.url or str(self.home / "storage")

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def status_dir(self) -> Path:
        return self.home / "status"

    @property
    def mlflow_uri(self) -> str:
        return self.mlflow_tracking_uri or f"sqlite:///{self.home / 'mlflow.db'}"

    @property
    def mlflow_artifacts(self) -> str | None:
        """Where experiments Rota makes keep artifacts: a tracking server decides for
        itself; for a local store, home/mlartifacts (MLflow's default, ./mlruns, would be
        relative to wherever the daemon was started)."""
        if self.mlflow_uri.startswith(("http://", "https://", "databricks")):
            return None
        return (self.home / "mlartifacts").as_uri()

    @property
    def secrets_key_path(self) -> Path:
        return self.home / "secrets.key"

    @property
    def jobs_file_path(self) -> Path:
        return self.jobs_file or self.home / "jobs.txt"

    @property
    def llm_config_path(self) -> Path:
        return self.llm_config or self.home / "llm_config.json"


def load_settings(**overrides: Any) -> Settings:
    """Read settings once; a bad value is an InvalidSpec naming the setting."""
    clean = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**clean)
    except ValidationError as e:
        first = e.errors()[0]
        parts = [str(x) for x in first["loc"]]
        if len(parts) > 3 and parts[0] == "pools" and parts[2] in ENGINES:
            del parts[2]  # the engine pydantic chose the pool's form by: not a key
        loc = ".".join(parts)
        msg = first["msg"].removeprefix("Value error, ")
        raise InvalidSpec(f"setting {loc}: {msg}" if loc else f"settings: {msg}",
                          field=loc or None) from None
