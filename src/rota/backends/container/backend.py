"""The container backend: each job in a Docker container on Rota's own GPU placement.

A launch creates and starts the container (a blocking call: the daemon launches off its
event loop) with the attempt's labels, then starts a follower thread (``follow``) that
copies the output into the job's log and records the end. Nothing in the daemon holds the
container: Docker does, so it outlives a daemon restart, and a new backend finds it again
by its labels (``locate``), resumes the log copy where it stopped and watches it again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rota.backends.base import Capabilities, ExitInfo, Handle, LaunchRequest, Located
from rota.backends.common import KILLED, append_log_header, hand_over, prepare_paths
from rota.backends.container import docker_api
from rota.backends.container.docker_api import errors
from rota.backends.container.follow import Follower
from rota.backends.container.logs import drop_cursor, start_cursor
from rota.backends.container.records import (
    exit_of_record,
    read_record,
    write_record,
)
from rota.backends.container.request import (
    DEFAULT_SHM_SIZE,
    LABEL_LOG,
    LABEL_STATUS,
    ContainerDefaults,
    create_kwargs,
    job_argv,
    spec_of,
)
from rota.backends.process import ProcessBackend
from rota.errors import BackendError

log = logging.getLogger("rota.backends.container")

_LIVE = ("running", "paused", "restarting")
#: How long ``collect`` waits for the follower of an ended container to finish its copy.
_DRAIN_S = 60.0


@dataclass(frozen=True, slots=True)
class GpuSupport:
    """``mode``: "nvidia" (devices through Docker), "simulated" (CUDA_VISIBLE_DEVICES
    only) or "none" (no GPU job runs in a container here); ``message`` says so."""

    mode: Literal["nvidia", "simulated", "none"]
    message: str


class ContainerBackend(ProcessBackend):
    """``base_url``: the Docker socket (None: DOCKER_HOST or the system's);
    ``default_image``: for a request that names none (the SDK's: the daemon's jobs name
    theirs); ``cpus``, ``memory`` (bytes) and ``shm_size`` (bytes of /dev/shm, None:
    Docker's 64 MiB): what a job that gives none gets (the local pool's container
    settings); ``network_mode``: what a job that asks for a network gets (others get none);
    ``user``: "uid:gid" the job runs as (the daemon's); ``simulated_gpus``: the daemon's
    GPUs are simulated, so a container gets no devices, only CUDA_VISIBLE_DEVICES (as a
    process does), and GPU jobs run where Docker has no NVIDIA runtime (demos, tests)."""

    name = "container"
    capabilities = Capabilities(attachable=False, gpu_pinning=True, adopt_after_restart=True,
                                run_as=True,
                                launch_blocks=True, stop_signal=True)

    def __init__(self, base_url: str | None = None, *, default_image: str | None = None,
                 cpus: float | None = None, memory: int | None = None,
                 shm_size: int | None = DEFAULT_SHM_SIZE, network_mode: str = "bridge",
                 user: str | None = None, simulated_gpus: bool = False) -> None:
        self.base_url, self.network_mode = base_url, network_mode
        self.simulated_gpus = simulated_gpus
        self._gpus: GpuSupport | None = None  # asked of Docker once
        self.defaults = ContainerDefaults(image=default_image, cpus=cpus, memory=memory,
                                          shm_size=shm_size)
        self.user = user or f"{os.getuid()}:{os.getgid()}"
        self._docker: Any = None
        self._lock = threading.Lock()
        self._followers: dict[str, Follower] = {}  # container id -> its follower
        self._launched: dict[str, int] = {}  # container id -> its first watch fd

    # --- Docker ---------------------------------------------------------------------------
    @property
    def docker(self) -> Any:
        if self._docker is None:
            self._docker = docker_api.connect(self.base_url)
        return self._docker

    def missing(self) -> str | None:
        try:
            self.docker  # noqa: B018 (connects, once)
        except BackendError as e:
            return str(e)
        return None

    def gpu_support(self) -> GpuSupport:
        """Whether a container here can get GPUs, and how, in words for `rota pools`."""
        if self.simulated_gpus:
            return GpuSupport("simulated", "the GPUs are simulated: a container job gets no "
                                           "devices, only CUDA_VISIBLE_DEVICES, as a process")
        if self._gpus is None:
            missing = self.missing()
            if missing is not None:
                return GpuSupport("none", missing)
            has, runtimes = docker_api.nvidia_runtime(self.docker)
            self._gpus = GpuSupport("nvidia", "Docker gives containers their GPUs (NVIDIA "
                                              "runtime)") if has else GpuSupport(
                "none", f"Docker here has no NVIDIA runtime (runtimes: "
                        f"{', '.join(runtimes) or 'none'}), so a container cannot get GPUs: "
                        "install the NVIDIA Container Toolkit and restart Docker, or run the "
                        "job without --image (CPU-only container jobs run)")
        return self._gpus

    def gpu_refusal(self) -> str | None:
        """Why a job with GPUs cannot run in a container here (see base.refusal)."""
        try:
            support = self.gpu_support()
        except BackendError as e:
            return str(e)
        return support.message if support.mode == "none" else None

    def _container(self, handle: Handle) -> Any | None:
        """The handle's container, or None when Docker no longer has it."""
        try:
            with errors(f"job container {handle.session_name}"):
                return self.docker.containers.get(handle.extra["container"])
        except BackendError as e:
            if docker_api.is_not_found(e.__cause__):
                return None
            raise

    # --- launch ---------------------------------------------------------------------------
    def check(self, req: LaunchRequest) -> None:
        spec_of(req, self.defaults)
        job_argv(req)
        if req.cwd is not None and not os.path.isdir(req.cwd):
            raise BackendError(f"job {req.job_id}: working directory {req.cwd!r} is not a "
                               "directory on this machine")

    def launch(self, req: LaunchRequest) -> Handle:
        self.check(req)
        spec = spec_of(req, self.defaults)
        prepare_paths(req)
        hand_over(req)  # its log and what it writes (its events) are its owner's
        # the job's owner's account, groups included (the daemon's own: self.user)
        user = self.user if req.run_as is None else f"{req.run_as.uid}:{req.run_as.gid}"
        kwargs = create_kwargs(req, spec, user=user, network_mode=self.network_mode,
                               gpu_devices=not self.simulated_gpus)
        append_log_header(req)
        start_cursor(req.status_path, req.log_path)
        with errors(f"job {req.job_id}: cannot create its container from {spec.image!r}"):
            container = self.docker.containers.create(**kwargs)
        try:
            with errors(f"job {req.job_id}: cannot start its container"):
                container.start()
                container.reload()
        except BackendError:
            self._remove(container)
            raise
        state = container.attrs.get("State") or {}
        started_at = time.time()
        write_record(req.status_path, {"container": container.id, "name": container.name,
                                       "pid": int(state.get("Pid") or 0),
                                       "started_at": started_at})
        handle = self._handle(container, str(req.status_path), started_at)
        self._launched[container.id] = self._follow(container, req.log_path, handle)
        return handle

    def _handle(self, container: Any, status_path: str, started_at: float) -> Handle:
        """pid: the container's init on this machine, the session leader of the job's
        processes (what the device monitor matches GPU processes by); 0 once it ended."""
        pid = int((container.attrs.get("State") or {}).get("Pid") or 0)
        return Handle(backend=self.name, pid=pid, status_path=status_path,
                      session_name=container.name,
                      extra={"container": container.id, "started_at": started_at,
                             "log_path": container.labels.get(LABEL_LOG, "")})

    def _follow(self, container: Any, log_path: Path, handle: Handle) -> int:
        """A watch fd from the container's follower, started if it has none."""
        with self._lock:
            f = self._followers.get(container.id)
            if f is None:
                f = self._followers[container.id] = Follower(
                    container, log_path, handle.status_path, self._forget)
                f.start()
            return f.pipe()

    def _forget(self, follower: Follower) -> None:
        with self._lock:
            if self._followers.get(follower.container.id) is follower:
                del self._followers[follower.container.id]

    # --- after a restart ------------------------------------------------------------------
    def locate(self, handle: Handle | None, status_path: str, started_at: float) -> Located:
        if handle is None:
            handle = self._find(status_path, started_at)
            if handle is None:
                return Located(None)
        ended = self.collect(handle)
        return Located(handle, ended)

    def _find(self, status_path: str, started_at: float) -> Handle | None:
        """The attempt's container by its label; one never started (the daemon stopped
        between create and start) is removed: the attempt is launched again."""
        with errors("cannot list Rota's containers"):
            found = self.docker.containers.list(
                all=True, filters={"label": f"{LABEL_STATUS}={status_path}"})
        if not found:
            return None
        container = found[0]
        if container.status == "created":
            self._remove(container)
            return None
        return self._handle(container, status_path, started_at)

    # --- watch and collect ----------------------------------------------------------------
    def watch(self, handle: Handle) -> int | None:
        cid = str(handle.extra["container"])
        fd = self._launched.pop(cid, None)
        if fd is not None:
            return fd
        if exit_of_record(read_record(handle.status_path)) is not None:
            return None
        container = self._container(handle)
        if container is None:
            return None
        return self._follow(container, _log_of(handle), handle)

    def is_alive(self, handle: Handle) -> bool:
        if exit_of_record(read_record(handle.status_path)) is not None:
            return False
        container = self._container(handle)
        return container is not None and container.status in _LIVE

    def collect(self, handle: Handle, watched: bytes = b"") -> ExitInfo | None:
        """From the status record the follower wrote; an ended container whose end is not
        recorded yet (no follower since a restart) gets its copy finished first."""
        info = exit_of_record(read_record(handle.status_path))
        if info is not None:
            return info
        container = self._container(handle)
        if container is None:  # removed by someone else before its end was recorded
            return exit_of_record(read_record(handle.status_path)) or KILLED
        if container.status in _LIVE or container.status == "created":
            return None
        os.close(self._follow(container, _log_of(handle), handle))
        follower = self._followers.get(container.id)
        if follower is not None:
            follower.thread.join(_DRAIN_S)
        return exit_of_record(read_record(handle.status_path))

    # --- the rest -------------------------------------------------------------------------
    def signal(self, handle: Handle, sig: int) -> None:
        """To the container's init, which passes it to the job's process group; a
        container that has ended (or is gone) is fine."""
        container = self._container(handle)
        if container is None:
            return
        try:
            with errors(f"cannot signal job container {handle.session_name}"):
                container.kill(signal=int(sig))
        except BackendError as e:
            if docker_api.status_code(e.__cause__) != 409:  # 409: not running
                raise

    def tidy(self, status_dir: Path, active: set[str]) -> None:
        """Remove the ended containers of this Rota home whose end is stored."""
        with errors("cannot list Rota's containers"):
            found = self.docker.containers.list(all=True, filters={"label": LABEL_STATUS})
        for container in found:
            key = container.labels.get(LABEL_STATUS, "")
            if key in active or not Path(key).is_relative_to(status_dir) \
                    or container.status in _LIVE or container.id in self._followers:
                continue
            self._remove(container)
            drop_cursor(key)

    def _remove(self, container: Any) -> None:
        try:
            with errors(f"cannot remove container {container.name}"):
                container.remove(v=True, force=True)
        except BackendError as e:
            log.warning("%s", e)


def _log_of(handle: Handle) -> Path:
    return Path(str(handle.extra["log_path"]))



