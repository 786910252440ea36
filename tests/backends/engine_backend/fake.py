"""An in-memory Engine for the adapter's unit tests: every call recorded, nothing blocks."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rota.backends.base import LaunchRequest
from rota.backends.engine import (
    EngineCapabilities,
    EngineJob,
    EngineState,
    EngineStatus,
    PoolHealth,
)
from rota.errors import BackendError


@dataclass
class FakeEngine:
    """A cluster in memory. ``secrets`` is the adapter's lookup, as a real engine gets it;
    at submit the engine fills the job's secret variables from it (``seen_env``)."""

    secrets: Callable[[str], str]
    name: str = "fake"
    capabilities: EngineCapabilities = field(default_factory=EngineCapabilities)
    jobs: dict[str, EngineJob] = field(default_factory=dict)
    states: dict[str, EngineStatus] = field(default_factory=dict)
    output: dict[str, bytes] = field(default_factory=dict)
    seen_env: dict[str, dict[str, str]] = field(default_factory=dict)
    calls: list[tuple[str, object]] = field(default_factory=list)
    refuse: str | None = None
    down: int = 0  # the next ``down`` calls to poll/submit fail as an unreachable engine
    after_submit: Callable[[str], None] | None = None  # e.g. "the daemon dies here"
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(100))

    def _maybe_down(self, what: str) -> None:
        if self.down > 0:
            self.down -= 1
            raise BackendError(f"{what}: the controller did not answer")

    def refusal(self, job: EngineJob) -> str | None:
        return self.refuse

    def render(self, job: EngineJob) -> str:
        return repr(job)

    def submit(self, job: EngineJob) -> str:
        self.calls.append(("submit", job.key))
        self._maybe_down("submit")
        eid = str(next(self._ids))
        self.seen_env[eid] = {var: self.secrets(name) for var, name in job.secret_env.items()}
        self.jobs[eid] = job
        self.states[eid] = EngineStatus(eid, EngineState.QUEUED, reason="Priority")
        if self.after_submit is not None:
            self.after_submit(eid)
        return eid

    def find(self, key: str) -> str | None:
        self.calls.append(("find", key))
        return next((eid for eid, job in self.jobs.items() if job.key == key), None)

    def poll(self, engine_ids: list[str]) -> dict[str, EngineStatus]:
        self.calls.append(("poll", list(engine_ids)))
        self._maybe_down("poll")
        return {eid: self.states.get(eid) or EngineStatus(eid, EngineState.LOST)
                for eid in engine_ids}

    def stop(self, engine_id: str, signal: str, grace: float) -> None:
        self.calls.append(("stop", (engine_id, signal, grace)))

    def read_log(self, engine_id: str, offset: int) -> bytes:
        return self.output.get(engine_id, b"")[offset:offset + 4]  # small reads: offsets count

    def health(self) -> PoolHealth:
        return PoolHealth(reachable=True, message="fake")

    # --- the cluster's side ---------------------------------------------------------------
    def run(self, eid: str, out: bytes = b"") -> None:
        self.states[eid] = EngineStatus(eid, EngineState.RUNNING, started_at=1000.0)
        self.output[eid] = self.output.get(eid, b"") + out

    def end(self, eid: str, code: int | None = 0, sig: int | None = None) -> None:
        self.states[eid] = EngineStatus(eid, EngineState.ENDED, exit_code=code, signal=sig,
                                        started_at=1000.0, ended_at=1010.0)

    def forget(self, eid: str) -> None:
        del self.states[eid]

    def count(self, op: str) -> int:
        return sum(1 for name, _ in self.calls if name == op)


def request(home: Path, job: EngineJob, env: dict[str, str] | None = None) -> LaunchRequest:
    """The launcher's request for ``job``'s attempt, in its layout under ``home``."""
    return LaunchRequest(
        job_id=job.job_id, attempt=job.attempt, argv=list(job.argv), shell=job.shell,
        env=env or {}, cwd=None, conda=None, log_path=home / "logs" / f"{job.job_id}.log",
        status_path=home / "status" / f"{job.job_id}-{job.attempt}.json", session_name="",
        log_header=f"=== rota: job {job.job_id} attempt {job.attempt}", engine_job=job)
