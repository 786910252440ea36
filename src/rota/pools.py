"""Pools: the places a job can run, as `rota.toml` declares them.

``local`` (this machine, Rota's own scheduler) always exists. Clusters are declared under
``[pools.NAME]`` with their engine and its settings; ``[pools.local]`` (no engine line
needed) holds only the container settings of ``--image`` jobs::

    [pools.local]
    container_shm_size = "8G"

    [pools.hpc]
    engine = "slurm"
    partition = "gpu"
    account = "lab"

    [pools.ray]
    engine = "ray"
    address = "http://127.0.0.1:8265"

    [pools.k8s]
    engine = "kubernetes"
    namespace = "ml"
    image = "ghcr.io/lab/train:2026.11"

A job names its pool (``pool``); without one it goes to ``default_pool``.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from rota.errors import InvalidSpec
from rota.units import format_memory, parse_memory

LOCAL = "local"
#: The engines, as ``engine`` names them (and pydantic's error locations do).
ENGINES = ("local", "slurm", "ray", "kubernetes")
#: The local pool's /dev/shm default: rota.backends.container.request.DEFAULT_SHM_SIZE
#: (not imported: settings import no backend; a test holds them equal).
DEFAULT_SHM_SIZE = 8 << 30
#: The least of each container size: Docker refuses a memory limit under 6 MiB, and a bare
#: number that small is a missing unit.
_MIN_SIZE = {"container_shm_size": 1 << 20, "container_memory": 6 << 20}
_NAME = re.compile(r"[a-z][a-z0-9-]{0,39}")
# a DNS-1123 subdomain: the name of most Kubernetes objects
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_OBJECT_NAME = re.compile(rf"(?=.{{1,253}}$){_DNS_LABEL}(\.{_DNS_LABEL})*")


def _object_name(v: str, example: str) -> str:
    if not _OBJECT_NAME.fullmatch(v):
        raise ValueError(f"{v!r} is not a Kubernetes object name (lower-case letters, "
                         f"digits, '-' and '.', at most 253, e.g. \"{example}\")")
    return v


#: how a pool's jobs see their workspace: this machine's folder (here), the same path on
#: the cluster's nodes (shared), a Kubernetes volume's folder (claim), a copy the job
#: brings from the workspaces' bucket and sends back (synced), or none
WorkspaceKind = Literal["here", "shared", "claim", "synced"] | None


class _Pool(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_in_flight: int = Field(
        default=100, ge=1, le=100_000,
        description="jobs handed to the engine and not yet ended, at most; the rest wait "
                    "in Rota's queue, in Rota's order")
    description: str = ""
    poll_every: float = Field(default=2.0, gt=0, le=300, description="seconds between two "
                              "questions to the engine about its jobs (state, output)")


class LocalPool(_Pool):
    """This machine: Rota places jobs on its GPUs itself."""

    engine: Literal["local"] = "local"

    @property
    def workspaces(self) -> WorkspaceKind:
        return "here"
    docker_host: str | None = Field(default=None, description="the Docker daemon of `--image` "
                                    "jobs (default: DOCKER_HOST, else the system socket)")
    container_network_mode: str = Field(default="bridge", description="the network of a "
                                        "container whose job asks for one (network=true); "
                                        "the others get none")
    # what an --image job that gives none gets (docs/containers.md); no default image:
    # --image is what makes a job a container job
    container_shm_size: int = Field(
        default=DEFAULT_SHM_SIZE, description="the size of /dev/shm in a container, e.g. "
        "\"8G\" (the default; Docker's own 64 MiB breaks PyTorch DataLoader workers); a "
        "ceiling, not a reservation: it counts against the memory limit as it fills")
    container_cpus: float | None = Field(default=None, gt=0, le=4096, description="the CPU "
                                         "limit of a container job without --cpus (default: "
                                         "none)")
    container_memory: int | None = Field(default=None, description="the memory limit of a "
                                         "container job without --memory, e.g. \"32G\" "
                                         "(default: none)")

    @field_validator("container_shm_size", "container_memory", mode="before")
    @classmethod
    def _size(cls, v: object, info: ValidationInfo) -> object:
        """A size as people write it ("8G", "512M"); an integer is bytes."""
        field = str(info.field_name)
        if isinstance(v, str):
            try:
                v = parse_memory(v, field=field)
            except InvalidSpec as e:
                raise ValueError(str(e).removeprefix(f"{field}: ")) from None
        if isinstance(v, bool):
            raise ValueError(f"{v} is not a size; write one with its unit, e.g. \"8G\"")
        if isinstance(v, int | float) and v < _MIN_SIZE[field]:
            raise ValueError(f"{v} bytes is less than {format_memory(_MIN_SIZE[field])}; "
                             "write the unit, e.g. \"8G\"")
        return v


class _NodesPool(_Pool):
    """A cluster whose nodes may share this machine's filesystem (Slurm, Ray)."""

    shared_workspaces: bool = Field(default=False, description="the nodes see the daemon's "
                                    "workspaces folder at the same path (a shared "
                                    "filesystem): jobs get ROTA_WORKSPACE there; else none")

    @property
    def workspaces(self) -> WorkspaceKind:
        return "shared" if self.shared_workspaces else None


class SlurmPool(_NodesPool):
    engine: Literal["slurm"]
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    sbatch_args: list[str] = Field(
        default_factory=list, description="extra sbatch options every job of the pool gets, "
                                          "e.g. [\"--exclusive\"]")
    gpu_gres: str = Field(default="gpu", description="the GRES name of GPUs (gpu:2)")
    shards: bool = Field(default=False, description="fractional GPUs as GRES shards "
                         "(needs shards configured in the cluster's gres.conf)")
    work_dir: str | None = Field(default=None, description="a folder every node sees, for "
                                 "scripts and logs (default: ROTA_HOME/slurm)")
    slurm_conf: str | None = Field(default=None, description="SLURM_CONF for the commands")
    bin_dir: str | None = Field(default=None, description="where sbatch, squeue, sacct "
                                "and scancel are (default: PATH)")


class RayPool(_NodesPool):
    engine: Literal["ray"]
    address: str = Field(default="http://127.0.0.1:8265",
                         description="the Ray head's dashboard (Jobs API) address")
    runtime_env: dict[str, object] = Field(default_factory=dict,
                                           description="merged into every job's runtime_env")


class PriorityClassRule(BaseModel):
    """Jobs whose Rota priority is at most ``up_to`` get the PriorityClass ``name``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    up_to: int = Field(description="the highest Rota priority (lower runs first) of the class")
    name: str = Field(description="a PriorityClass of the cluster")

    @field_validator("name")
    @classmethod
    def _class_name(cls, v: str) -> str:
        return _object_name(v, "high-priority")


class KubernetesPool(_Pool):
    engine: Literal["kubernetes"]
    context: str | None = Field(default=None, description="kubeconfig context")
    kubeconfig: str | None = None
    namespace: str = "default"
    image: str | None = Field(default=None, description="the image of jobs that name none")
    gpu_resource: str = "nvidia.com/gpu"
    gpu_type_label: str = Field(default="nvidia.com/gpu.product",
                                description="the node label a GPU type selects on")
    node_selector: dict[str, str] = Field(default_factory=dict)
    kueue_queue: str | None = Field(default=None, description="sets the "
                                    "kueue.x-k8s.io/queue-name label")
    service_account: str | None = None
    ttl_seconds_after_finished: int = Field(default=3600, ge=0)
    scratch_size: str = Field(default="10Gi", description="the ephemeral scratch volume")
    checkpoint_claim: str | None = Field(default=None, description="a ReadWriteMany "
                                         "PersistentVolumeClaim for checkpoints of "
                                         "multi-node jobs")
    workspace_claim: str | None = Field(default=None, description="a ReadWriteMany "
                                        "PersistentVolumeClaim holding the workspaces "
                                        "(USER/PROJECT in it): each job's is mounted at "
                                        "/workspace (ROTA_WORKSPACE); else jobs get none")
    multi_node: Literal["pytorchjob", "trainjob"] = Field(
        default="pytorchjob", description="the form of a multi-node job: a Kubeflow "
        "PyTorchJob (training operator v1) or a TrainJob (Kubeflow Trainer v2)")
    training_runtime: str = Field(default="torch-distributed", description="the "
                                  "ClusterTrainingRuntime a TrainJob runs on")
    priority_classes: list[PriorityClassRule] = Field(
        default_factory=list, description="Rota priorities as the cluster's PriorityClasses "
        "(which Kueue reads too): a job gets the first class, in rising up_to, whose up_to "
        "is at least its priority; above them all, the cluster's default. E.g. "
        "[{up_to = -1, name = \"urgent\"}, {up_to = 10, name = \"normal\"}]")

    @property
    def workspaces(self) -> WorkspaceKind:
        return "claim" if self.workspace_claim else None

    @field_validator("priority_classes")
    @classmethod
    def _rising(cls, v: list[PriorityClassRule]) -> list[PriorityClassRule]:
        bounds = [r.up_to for r in v]
        if len(set(bounds)) != len(bounds):
            raise ValueError(f"two priority classes share an up_to ({bounds})")
        return sorted(v, key=lambda r: r.up_to)

    def priority_class(self, priority: int) -> str | None:
        """The PriorityClass of a Rota priority (the first rule reaching it), or None for
        the cluster's default."""
        return next((r.name for r in self.priority_classes if priority <= r.up_to), None)

    @field_validator("training_runtime")
    @classmethod
    def _runtime_name(cls, v: str) -> str:
        return _object_name(v, "torch-distributed")


def local_engine_implied(pools: object) -> object:
    """``[pools.local]`` needs no ``engine`` line: it is this machine (the raw table of
    pools, before validation)."""
    if isinstance(pools, dict):
        local = pools.get(LOCAL)
        if isinstance(local, dict) and "engine" not in local:
            return {**pools, LOCAL: {"engine": LOCAL, **local}}
    return pools


Pool = Annotated[LocalPool | SlurmPool | RayPool | KubernetesPool,
                 Field(discriminator="engine")]


class Pools(BaseModel):
    """Every pool by name; ``local`` is always there (declared or not)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pools: dict[str, Pool] = Field(default_factory=dict, validate_default=True)
    default: str = LOCAL

    @field_validator("pools", mode="before")
    @classmethod
    def _local_needs_no_engine(cls, v: object) -> object:
        return local_engine_implied(v)

    @field_validator("pools")
    @classmethod
    def _names(cls, v: dict[str, Pool]) -> dict[str, Pool]:
        for name, pool in v.items():
            if not _NAME.fullmatch(name):
                raise ValueError(f"pool name {name!r}: lower-case letters, digits and '-', "
                                 "starting with a letter")
            if name == LOCAL and pool.engine != "local":
                raise ValueError("the pool 'local' is this machine; name a cluster otherwise")
        return {LOCAL: LocalPool(), **v}

    @model_validator(mode="after")
    def _default_exists(self) -> Pools:
        if self.default not in self.pools:
            raise ValueError(f"default pool {self.default!r} is not declared; the pools "
                             f"are: {', '.join(sorted(self.pools))}")
        return self

    def get(self, name: str | None) -> tuple[str, Pool]:
        """The pool called ``name`` (None: the default), or InvalidSpec naming the pools."""
        key = name or self.default
        pool = self.pools.get(key)
        if pool is None:
            raise InvalidSpec(f"no pool {key!r}; the pools are: {', '.join(sorted(self.pools))}",
                              field="pool")
        return key, pool


def workspace_kind(pool: Pool, *, bucket_home: bool) -> WorkspaceKind:
    """How ``pool``'s jobs see their workspace: what the pool gives, else, where the
    workspaces' home is a bucket, a copy each job of a cluster pool syncs itself."""
    return pool.workspaces or ("synced" if bucket_home else None)


def no_workspace(pool_name: str, pool: Pool) -> str:
    """Why ``pool``'s jobs get no workspace, and the ways out."""
    what = ("workspace_claim = \"PVC\" (a ReadWriteMany claim holding the workspaces)"
            if pool.engine == "kubernetes" else
            "shared_workspaces = true (its nodes see the workspaces folder at the same path)")
    return (f"pool {pool_name} gives its jobs no workspace: it needs {what} in "
            f"[pools.{pool_name}], or [storage] workspace_url (a bucket its jobs sync "
            "from); without --workspace (workspace: true) a job runs there without one")

