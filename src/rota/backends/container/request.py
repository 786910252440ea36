"""What a container job asks for, and the arguments Docker creates its container with.

Pure apart from the lazy import of ``docker.types``: no daemon is contacted here, so the
create arguments (GPU device requests above all, which need an NVIDIA runtime to really
start) can be checked without one.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rota.backends.base import LaunchRequest
from rota.backends.common import JOB_WRITES
from rota.errors import BackendError

#: Labels every container of Rota's carries: found again by them after a daemon restart.
LABEL_JOB = "rota.job"
LABEL_ATTEMPT = "rota.attempt"
LABEL_STATUS = "rota.status"  # the attempt's status path: its key, unique per attempt
LABEL_LOG = "rota.log"  # the job's log: where the output is copied, also after a restart
#: tmpfs options for /tmp: writable by any user, nothing executable from devices or setuid.
_TMP_OPTIONS = "rw,nosuid,nodev,mode=1777"
_NO_ROTATION = {"max-size": "1t", "max-file": "1"}


#: /dev/shm of a container whose request and backend say nothing: Docker's own 64 MiB breaks
#: PyTorch DataLoader workers (they pass batches through /dev/shm: "bus error", "No space
#: left on device"). A tmpfs size is a ceiling, not a reservation: pages count (against the
#: job's memory limit too) only once written. The local pool's ``container_shm_size``.
DEFAULT_SHM_SIZE = 8 << 30


@dataclass(frozen=True, slots=True)
class ContainerRequest(LaunchRequest):
    """A LaunchRequest with what only a container has on top (the image, limits and
    network are LaunchRequest's own): for the SDK and tests; the daemon passes a
    LaunchRequest (no job option sets these yet)."""

    gpus: tuple[int, ...] | None = None  # host GPU indices; None: read CUDA_VISIBLE_DEVICES
    shm_size: int | None = None  # bytes of /dev/shm; None: the backend's default


@dataclass(frozen=True, slots=True)
class ContainerDefaults:
    """What a container gets where its request gives nothing: the local pool's container
    settings in rota.toml (``container_cpus``, ``container_memory``,
    ``container_shm_size``), or a backend's own arguments. ``image`` is for the SDK: no
    setting sets it (``--image`` is what makes a job a container job; docs/containers.md)."""

    image: str | None = None
    cpus: float | None = None
    memory: int | None = None  # bytes
    shm_size: int | None = DEFAULT_SHM_SIZE  # bytes; None: Docker's default (64 MiB)


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """The container options of one request, with the defaults filled in."""

    image: str
    gpus: tuple[int, ...]
    cpus: float | None
    memory: int | None
    network: bool
    shm_size: int | None


def spec_of(req: LaunchRequest, defaults: ContainerDefaults = ContainerDefaults()
            ) -> ContainerSpec:
    """The container options of ``req``: its own where it gives them, else ``defaults``
    (each limit on its own: a job that gives --cpus still gets the default memory)."""
    image = req.image or defaults.image
    if not image:
        raise BackendError(f"job {req.job_id}: no image to run it in (give --image)")
    own = req if isinstance(req, ContainerRequest) else None
    gpus = own.gpus if own is not None else None
    shm_size = own.shm_size if own is not None else None
    return ContainerSpec(image=image,
                         gpus=tuple(gpus) if gpus is not None else _visible(req),
                         cpus=req.cpus or defaults.cpus, memory=req.memory or defaults.memory,
                         network=req.network, shm_size=shm_size or defaults.shm_size)


def _visible(req: LaunchRequest) -> tuple[int, ...]:
    text = req.env.get("CUDA_VISIBLE_DEVICES", "")
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise BackendError(f"job {req.job_id}: CUDA_VISIBLE_DEVICES={text!r} is not a list "
                           "of GPU indices") from None


def container_name(req: LaunchRequest) -> str:
    """Unique per attempt (Docker refuses a second container of the same name, so an
    attempt cannot start twice); the hash keeps two Rota homes on one Docker apart."""
    tag = hashlib.sha1(str(req.status_path).encode()).hexdigest()[:8]
    return f"rota-{req.job_id}-{req.attempt}-{tag}"


def labels(req: LaunchRequest) -> dict[str, str]:
    return {LABEL_JOB: str(req.job_id), LABEL_ATTEMPT: str(req.attempt),
            LABEL_STATUS: str(req.status_path), LABEL_LOG: str(req.log_path)}


def job_argv(req: LaunchRequest) -> list[str]:
    """The container's command (the image's entrypoint, if any, stays in front of it)."""
    if not req.argv:
        raise BackendError(f"job {req.job_id}: empty command")
    if req.conda:
        raise BackendError(f"job {req.job_id}: conda environments are not used in containers; "
                           "put the environment in the image")
    if req.shell:
        return ["/bin/sh", "-c", req.argv[0], *(["sh", *req.argv[1:]] if req.argv[1:] else [])]
    return list(req.argv)


#: where a container job finds its user's and project's workspace (ROTA_WORKSPACE)
WORKSPACE_MOUNT = "/workspace"


def container_env(req: LaunchRequest, gpus: tuple[int, ...]) -> dict[str, str]:
    """The job's variables only (not the daemon's: its PATH and HOME mean nothing in the
    image). The container sees its GPUs numbered from 0, so CUDA_VISIBLE_DEVICES is too."""
    env = dict(req.env)
    if req.workspace:  # mounted there (create_kwargs)
        env["ROTA_WORKSPACE"] = WORKSPACE_MOUNT
    for inside, outside in req.datasets.items():  # (mounted read-only: create_kwargs)
        for var, value in req.env.items():
            if value == outside and var.startswith("ROTA_DATASET_"):
                env[var] = inside
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(gpus)))
    # docker-init (tini) passes signals to the job's whole process group, as killpg does
    env["TINI_KILL_PROCESS_GROUP"] = "1"
    return env


def job_files(req: LaunchRequest) -> list[str]:
    """Files of the attempt next to its status file that the job writes (``rota.job``'s
    events): created now, so that each can be bind-mounted alone at its own path."""
    out = []
    for var in JOB_WRITES:
        path = req.env.get(var)
        if path and Path(path).parent == req.status_path.parent:
            Path(path).touch()
            out.append(path)
    return out


def create_kwargs(req: LaunchRequest, spec: ContainerSpec, *, user: str,
                  network_mode: str, gpu_devices: bool = True) -> dict[str, Any]:
    """Arguments of ``DockerClient.containers.create`` for this attempt. ``network_mode``
    is used only for a job that asks for a network; others get none. Without
    ``gpu_devices`` (simulated GPUs: there are no devices to give) the job's GPUs are only
    named in CUDA_VISIBLE_DEVICES, as for a process."""
    from docker.types import DeviceRequest, LogConfig, Mount

    mounts = [Mount(target=p, source=p, type="bind", read_only=False) for p in job_files(req)]
    cwd = os.path.abspath(req.cwd) if req.cwd else None
    if cwd:  # the workspace, at the same path: paths in argv and checkpoints stay valid
        mounts.append(Mount(target=cwd, source=cwd, type="bind", read_only=False))
    if req.workspace and req.workspace != cwd:  # its user's and project's folder
        mounts.append(Mount(target=WORKSPACE_MOUNT, source=req.workspace, type="bind",
                            read_only=False))
    mounts += [Mount(target=inside, source=outside, type="bind", read_only=True)
               for inside, outside in req.datasets.items()]
    kwargs: dict[str, Any] = dict(
        image=spec.image, command=job_argv(req), name=container_name(req), labels=labels(req),
        environment=container_env(req, spec.gpus), working_dir=cwd, user=user, init=True,
        read_only=True, tmpfs={"/tmp": _TMP_OPTIONS}, mounts=mounts,
        network_mode=network_mode if spec.network else "none",
        security_opt=["no-new-privileges"], cap_drop=["ALL"],
        # json-file, in effect without rotation (Docker wants a size; explicit options win
        # over the daemon's log-opts): the copy into the job's log counts entries from the
        # start (logs.py), so none may be rotated away before the container is removed
        log_config=LogConfig(type=LogConfig.types.JSON, config=_NO_ROTATION))
    if req.run_as is not None:  # its files are its own already (common.hand_over)
        kwargs["group_add"] = [str(g) for g in req.run_as.groups if g != req.run_as.gid]
    if spec.cpus:
        kwargs["nano_cpus"] = int(spec.cpus * 1e9)
    if spec.memory:
        kwargs.update(mem_limit=spec.memory, memswap_limit=spec.memory)
    if spec.shm_size:
        kwargs["shm_size"] = spec.shm_size
    if spec.gpus and gpu_devices:
        kwargs["device_requests"] = [DeviceRequest(device_ids=[str(i) for i in spec.gpus],
                                                   capabilities=[["gpu"]])]
    return kwargs
