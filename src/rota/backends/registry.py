"""Backend by name, as a job's ``session`` field and the daemon's config spell it."""

from __future__ import annotations

from pathlib import Path

from rota.backends.base import Backend
from rota.errors import BackendError

CHOICES = ("local", "none", "tmux", "screen", "container")


def make_backend(name: str, *, tmux_socket: str = "rota", screendir: str | None = None,
                 runner_socket: Path | None = None, docker_host: str | None = None,
                 network_mode: str = "bridge", container_cpus: float | None = None,
                 container_memory: int | None = None,
                 container_shm_size: int | None = None, simulated_gpus: bool = False,
                 ) -> Backend:
    """The backend called ``name``; "none" (no session) is the plain local backend, which
    starts jobs through the local runner listening on ``runner_socket`` (started on first
    use), or through a shell shim each without one.

    Modules are imported here, on demand, so that choosing one backend never imports the
    others (later engines bring optional SDKs).
    """
    if name in ("local", "none"):
        from rota.backends.local.backend import LocalBackend

        return LocalBackend(runner_socket)
    if name == "tmux":
        from rota.backends.sessions import TmuxBackend

        return TmuxBackend(socket_name=tmux_socket)
    if name == "container":
        from rota.backends.container import ContainerBackend
        from rota.backends.container.request import DEFAULT_SHM_SIZE

        shm = DEFAULT_SHM_SIZE if container_shm_size is None else container_shm_size
        return ContainerBackend(docker_host, network_mode=network_mode, cpus=container_cpus,
                                memory=container_memory, shm_size=shm,
                                simulated_gpus=simulated_gpus)
    if name == "screen":
        from rota.backends.sessions import ScreenBackend

        return ScreenBackend(screendir=screendir)
    raise BackendError(f"unknown backend {name!r}; choose one of: {', '.join(CHOICES)}")
