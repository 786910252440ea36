"""What the daemon keeps about a job that holds GPUs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rota.backends.base import Backend, Handle
from rota.core.idle import JobIdle
from rota.core.outcome import StopReason
from rota.core.preempt import RunningJob
from rota.core.snapshot import PendingJob
from rota.core.spec import JobSpec
from rota.server.jobs.run_times import RunTimes
from rota.server.tracking.outputs import OutputReader
from rota.storage.owner_files import OwnerFiles


@dataclass
class Running:
    job_id: int
    attempt_id: int
    attempt_no: int
    spec: JobSpec
    gpus: tuple[int, ...]
    milli: int
    gpu_mem: int | None
    backend: Backend
    started_at: float
    pending: PendingJob  # as it was queued: requeued in the same place
    failures: int  # failed attempts before this one
    log_path: Path
    status_path: Path
    handle: Handle | None = None
    pidfd: int | None = None  # what the loop watches for its end (backend.watch)
    watched: bytes = b""  # what that fd held at the end (the local runner's end record)
    rewatches: int = 0
    stop_reason: StopReason | None = None  # why Rota is stopping it; None: it runs freely
    kill_in: float | None = None  # seconds from the stop signal to SIGKILL (None: its grace)
    timers: list[asyncio.TimerHandle] = field(default_factory=list)
    output: OutputReader | None = None  # metrics and progress read from what it writes
    submitted_at: float = 0.0  # checkpoints older than the job are not its own
    user: str = ""  # who submitted it: whose stored secrets it gets
    # its files (checkpoints, TensorBoard folder) are read with its account's rights; the
    # launcher and recovery set it (the default, the daemon's own, is a non-root daemon's)
    files: OwnerFiles = field(default_factory=lambda: OwnerFiles(None))
    peak_gpu_mem: int = 0  # the most GPU memory its processes held on one GPU, so far
    engine_started: bool = False  # a cluster engine's job: the engine has started it
    idle: JobIdle = field(default_factory=JobIdle)  # its GPUs' idle record (core.idle)
    idle_before: float = 0.0  # idle GPU-seconds stored before the daemon (re)took it up
    idle_flagged: bool = False  # its flag event is written (once per idle stretch)

    @property
    def idle_seconds(self) -> float:
        """Its attempt's idle GPU-seconds so far (what attempts.idle_seconds holds)."""
        return self.idle_before + self.idle.idle_seconds

    def cancel_timers(self) -> None:
        for t in self.timers:
            t.cancel()
        self.timers.clear()


def preemption_view(runs: Iterable[Running], now: float,
                    run_times: RunTimes | None = None) -> list[RunningJob]:
    """Running jobs as preemption weighs them, and as backfill and start estimates see
    them: each with its expected end (its start plus its time limit, else its predicted
    run time from ``run_times``; None when neither is known)."""
    out = []
    for r in runs:
        expected = r.spec.time_limit if run_times is None \
            else run_times.expected(r.spec.time_limit, r.spec.name)
        saved = ((r.output.progress.checkpoint or {}).get("ts") if r.output else None) or 0.0
        out.append(RunningJob(
            id=r.job_id, priority=r.pending.priority, gpu_indices=r.gpus, milli=r.milli,
            gpu_mem=r.gpu_mem, preemptible=r.spec.preemptible and r.handle is not None,
            since_checkpoint_s=max(0.0, now - max(r.started_at, float(saved))),
            stopping=r.stop_reason is not None,
            expected_end=None if expected is None else r.started_at + expected))
    return out
