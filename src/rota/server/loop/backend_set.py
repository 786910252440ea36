"""The backends this daemon has made, by name, each made on first use."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from rota.backends.base import Backend, Needs, refusal
from rota.backends.registry import make_backend
from rota.config import Settings
from rota.core.spec import JobSpec
from rota.errors import BackendError
from rota.pools import LOCAL, LocalPool

if TYPE_CHECKING:
    from rota.backends.engine_poller import OnStart

log = logging.getLogger("rota.daemon")


class BackendSet:
    def __init__(self, settings: Settings, *, simulated_gpus: bool = False) -> None:
        self.settings = settings
        self.simulated_gpus = simulated_gpus  # the daemon's GPUs: containers get no devices
        self._made: dict[str, Backend] = {}
        self.install = ""  # this installation's id (the daemon's, set at start)
        # told (from any thread) when a cluster engine starts an attempt it queued: the
        # daemon's, set at start
        self.on_engine_start: OnStart | None = None

    def name_of(self, spec: JobSpec) -> str:
        """The backend of a job: its session's on this machine, ``ENGINE:POOL`` for a
        cluster pool's engine."""
        pool_name, pool = self.settings.pool_set.get(spec.pool)
        if pool.engine != LOCAL:
            return f"{pool.engine}:{pool_name}"
        if spec.image:
            return "container"
        return "local" if spec.session == "none" else spec.session

    def get(self, name: str) -> Backend:
        name = "local" if name in ("none", "local") else name
        b = self._made.get(name)
        if b is None:
            if ":" in name:  # a cluster pool's engine, as name_of spells it
                b = self._engine_backend(name.partition(":")[2])
            else:
                _, local = self.settings.pool_set.get(LOCAL)
                assert isinstance(local, LocalPool)
                b = make_backend(name, tmux_socket=self.settings.tmux_socket,
                                 runner_socket=self.settings.home / "runner.sock",
                                 docker_host=local.docker_host,
                                 network_mode=local.container_network_mode,
                                 container_cpus=local.container_cpus,
                                 container_memory=local.container_memory,
                                 container_shm_size=local.container_shm_size,
                                 simulated_gpus=self.simulated_gpus)
            self._made[b.name] = b
        return b

    def _engine_backend(self, pool_name: str) -> Backend:
        from rota.backends import engines
        from rota.backends.engine_backend import EngineBackend

        _, pool = self.settings.pool_set.get(pool_name)
        home = self.settings.home
        return EngineBackend(pool_name,
                             lambda secrets: engines.make(pool, home, secrets=secrets),
                             poll_every=pool.poll_every, install=self.install,
                             on_start=self._engine_started)

    def _engine_started(self, status_path: str, started_at: float | None) -> None:
        if self.on_engine_start is not None:
            self.on_engine_start(status_path, started_at)

    def close(self) -> None:
        """Stop what the backends run beside the daemon (engines' pollers)."""
        for b in self._made.values():
            close = getattr(b, "close", None)
            if close is not None:
                close()

    def refusal(self, spec: JobSpec) -> str | None:
        """Why no backend here can run this job (its session program is not installed, or
        it asks what its backend cannot do), in a sentence; None when one can. Read before
        the job is queued: it is refused at submit instead of failing at its launch."""
        try:
            backend = self.get(self.name_of(spec))
        except BackendError as e:
            return str(e)
        return refusal(backend, Needs(gpus=spec.gpus > 0, stop_signal=spec.stop_signal))

    def containers(self) -> dict[str, Any]:
        """Whether container jobs run here and can get GPUs (`rota pools`); asks Docker."""
        backend = self.get("container")
        missing = backend.missing()
        if missing is not None:
            return {"available": False, "gpus": "none", "message": missing}
        support = getattr(backend, "gpu_support")()  # noqa: B009 - the container backend's
        return {"available": True, "gpus": support.mode, "message": support.message}

    def tidy(self, active: set[str]) -> None:
        """Let every backend drop its records of attempts whose end is stored (``active``:
        the status paths of those whose end is not)."""
        self.get("local")  # earlier runners' journals go too, before the first launch
        for b in list(self._made.values()):
            try:
                b.tidy(self.settings.status_dir, active)
            except OSError:
                log.exception("tidying the %s backend's records failed", b.name)
