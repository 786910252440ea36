"""The backends this daemon has made, by name, each made on first use."""

from __future__ import annotations

import logging

from rota.backends.base import Backend, Needs, refusal
from rota.backends.registry import make_backend
from rota.config import Settings
from rota.core.spec import JobSpec
from rota.errors import BackendError

log = logging.getLogger("rota.daemon")


class BackendSet:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._made: dict[str, Backend] = {}

    @staticmethod
    def name_of(spec: JobSpec) -> str:
        return "local" if spec.session == "none" else spec.session

    def get(self, name: str) -> Backend:
        name = "local" if name in ("none", "local") else name
        b = self._made.get(name)
        if b is None:
            b = self._made[name] = make_backend(
                name, tmux_socket=self.settings.tmux_socket,
                runner_socket=self.settings.home / "runner.sock")
        return b

    def refusal(self, spec: JobSpec) -> str | None:
        """Why no backend here can run this job (its session program is not installed, or
        it asks what its backend cannot do), in a sentence; None when one can. Read before
        the job is queued: it is refused at submit instead of failing at its launch."""
        try:
            backend = self.get(self.name_of(spec))
        except BackendError as e:
            return str(e)
        return refusal(backend, Needs(gpus=spec.gpus > 0, stop_signal=spec.stop_signal))

    def tidy(self, active: set[str]) -> None:
        """Let every backend drop its records of attempts whose end is stored (``active``:
        the status paths of those whose end is not)."""
        self.get("local")  # earlier runners' journals go too, before the first launch
        for b in list(self._made.values()):
            try:
                b.tidy(self.settings.status_dir, active)
            except OSError:
                log.exception("tidying the %s backend's records failed", b.name)
