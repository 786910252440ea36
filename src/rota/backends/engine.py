"""The engine protocol: a cluster engine that places work itself (Slurm, Ray, Kubernetes).

Executors on this machine (rota.backends.base.Backend: process, tmux, screen, container)
get their GPUs from Rota's scheduler. An engine does not: Rota decides *when* a job is
handed over (priority order, holds, dependencies, a per-pool cap on jobs in flight) and the
engine decides *where* it runs. Rota then follows the job by the engine's id.

Nothing here knows the store or the daemon. Every call may block (a subprocess, an HTTP
request): the daemon makes them off its event loop.

Crash safety: the daemon commits an attempt before it calls ``submit``, and every engine
job carries :attr:`EngineJob.key` (in its name, label or comment), so that ``find``
re-finds it after a restart. The daemon asks ``find`` before it submits an attempt whose
answer it never recorded, so no attempt reaches an engine twice.

Arrays (``capabilities.arrays``, an :class:`ArrayEngine`): first attempts handed over in one
pass that differ only in their command, name and :data:`TASK_VARIABLES` (a sweep's points)
go as one engine job whose tasks are Rota's jobs. The group carries one key (its first
member's, see :func:`array_key`), written in every member's record before the submit, and
``find_array`` re-finds the tasks by it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

#: Rota's own per-attempt integers in ``EngineJob.env``, the only variables in which the
#: members of one array may differ: an engine sets each task's own (never a user's value).
TASK_VARIABLES = ("ROTA_JOB_ID", "ROTA_ATTEMPT")


@dataclass(frozen=True, slots=True)
class EngineJob:
    """One attempt of a job, as an engine is handed it: what the translation needs and
    nothing of Rota's store. Secret *values* never appear: ``secret_env`` names the
    variables, and the engine fills them through its own secret mechanism."""

    job_id: int
    attempt: int
    name: str
    argv: tuple[str, ...]  # one script string when ``shell``
    shell: bool = False
    env: Mapping[str, str] = field(default_factory=dict)  # plain variables only
    secret_env: Mapping[str, str] = field(default_factory=dict)  # variable -> secret name
    cwd: str | None = None
    gpus: float = 0.0  # per node: whole GPUs, or a fraction of one
    gpu_mem: int | None = None  # bytes per GPU
    gpu_type: str | None = None
    cpus: float | None = None  # per node
    memory: int | None = None  # bytes per node
    nodes: int = 1
    procs_per_node: int | None = None  # torchrun processes per node (default: its GPUs)
    time_limit: float | None = None  # seconds
    grace: float = 30.0  # seconds from the stop signal to the kill
    stop_signal: str = "SIGTERM"
    priority: int = 0  # Rota's: lower runs first
    conda: str | None = None
    image: str | None = None
    checkpoint_dir: str | None = None
    log_path: str | None = None  # where Rota reads the output, when the engine writes a file
    files: Mapping[str, str] = field(default_factory=dict)  # mount path -> text, read-only
    model_uri: str | None = None  # fetched before the job starts: runs:/..., s3://..., a path
    model_dir: str = "/models"  # where the fetched model lands (ROTA_MODEL_DIR)
    labels: Mapping[str, str] = field(default_factory=dict)  # user, project, ...
    install: str = ""  # this Rota installation's id: two of them never share a key
    # the engine's ids of jobs this one must wait for: it starts once each has completed
    # successfully, and the engine drops it when one cannot (capabilities.dependencies)
    after: tuple[str, ...] = ()
    # the Unix account the job runs as, when not the daemon's (capabilities.run_as)
    run_as: str | None = None
    # its user's and project's workspace, as USER/PROJECT, where the pool gives one (a
    # Kubernetes pool's workspace_claim: mounted at /workspace; a Slurm or Ray pool with
    # shared_workspaces has ROTA_WORKSPACE in env, the same path as on the daemon's machine;
    # a copy synced with a bucket home is the job's own doing: ROTA_WORKSPACE_SYNC in env)
    workspace: str | None = None

    @property
    def torchrun_procs(self) -> int:
        """torchrun's processes per node (PET_NPROC_PER_NODE on every engine): as asked,
        else one per whole GPU, at least one."""
        return self.procs_per_node or max(1, int(self.gpus))

    @property
    def key(self) -> str:
        """The idempotency key an engine job carries, to be found again by ``find``: one
        attempt of one job of one Rota installation (job ids restart with a new home)."""
        return engine_key(self.install, self.job_id, self.attempt)


def engine_key(install: str, job_id: int, attempt: int) -> str:
    return f"rota-{install}-{job_id}-{attempt}" if install else f"rota-{job_id}-{attempt}"


def array_key(first: EngineJob) -> str:
    """The key of an array whose first member is ``first``: no single attempt's key."""
    return f"{first.key}-array"


class EngineState(enum.StrEnum):
    QUEUED = "queued"  # the engine has it and has not started it
    RUNNING = "running"
    ENDED = "ended"  # exit_code / signal say how
    LOST = "lost"  # the engine no longer knows it and kept no record of its end


@dataclass(frozen=True, slots=True)
class EngineStatus:
    engine_id: str
    state: EngineState
    reason: str | None = None  # why it waits or how it ended, in the engine's words
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    nodes: tuple[str, ...] = ()
    # ENDED before it started because a job of ``EngineJob.after`` ended otherwise than
    # needed: not the job's failure (Rota's queue takes it back)
    unmet_dependency: bool = False
    # ENDED because the engine took it back (preempted it, lost or could not boot its
    # node): not the job's failure; Rota runs it again, from its checkpoint
    preempted: bool = False


@dataclass(frozen=True, slots=True)
class PoolHealth:
    reachable: bool
    message: str  # what a person reads in `rota pools`
    nodes: int | None = None
    gpus_total: float | None = None
    gpus_free: float | None = None


@dataclass(frozen=True, slots=True)
class EngineCapabilities:
    fractional_gpus: bool = False
    gpu_memory: bool = False  # can ask for GPU memory
    multi_node: bool = False
    arrays: bool = False  # sweeps as one engine job (Slurm arrays)
    dependencies: bool = False  # the engine holds a job until others end
    conda: bool = False
    images: bool = False
    run_as: bool = False  # submits a job as its owner's Unix account (EngineJob.run_as)


class Engine(Protocol):
    name: str  # "slurm", "ray", "kubernetes"
    capabilities: EngineCapabilities

    def refusal(self, job: EngineJob) -> str | None:
        """Why this engine cannot honour the job as asked, in a sentence a person can act
        on; None when it can. Read at submit, so nothing is silently dropped."""
        ...

    def render(self, job: EngineJob) -> str:
        """What ``submit`` would hand the engine (an sbatch script, a Ray job, manifests)."""
        ...

    def submit(self, job: EngineJob) -> str:
        """Hand the job to the engine; its id there. Raises BackendError."""
        ...

    def find(self, key: str) -> str | None:
        """The engine's id of the job carrying ``key``, if it ever received one."""
        ...

    def poll(self, engine_ids: list[str]) -> dict[str, EngineStatus]:
        """Where each job is; an id the engine does not know is LOST."""
        ...

    def stop(self, engine_id: str, signal: str, grace: float) -> None:
        """The stop handshake: ``signal`` to every rank, the kill after ``grace`` seconds."""
        ...

    def read_log(self, engine_id: str, offset: int) -> bytes:
        """The job's output from byte ``offset`` on (empty when nothing new)."""
        ...

    def health(self) -> PoolHealth: ...


@runtime_checkable
class ArrayEngine(Engine, Protocol):
    """An engine that takes several jobs as one (``capabilities.arrays``): the optional
    part of the protocol the adapter uses for a sweep's first attempts."""

    def submit_array(self, jobs: list[EngineJob], key: str) -> list[str]:
        """Hand ``jobs`` (identical but for their command, name and TASK_VARIABLES) to the
        engine as one job carrying ``key``; each job's engine id, in order. Raises
        BackendError (nothing was submitted, or the engine did not answer)."""
        ...

    def find_array(self, key: str, count: int) -> list[str] | None:
        """The engine ids of the ``count`` tasks of the array carrying ``key``, in order,
        if the engine ever received it."""
        ...
