"""The answers about pools and their engines (see rota.answers)."""

from typing import Literal, TypedDict


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
