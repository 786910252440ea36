"""The daemon's idle watch (rota.server.policy.idle_watch) with a fake clock: one event per idle
stretch, an unhealthy GPU is not idle, stop only with action = "stop", and the stored
figure written with batches at most every WRITE_EVERY_S (a restarted daemon adds to it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

from rota.config import IdleSettings
from rota.core.outcome import StopReason
from rota.core.snapshot import PendingJob
from rota.core.spec import JobSpec
from rota.devices.base import GpuReading
from rota.server.jobs.running import Running
from rota.server.policy.idle_watch import WRITE_EVERY_S, IdleWatch


class FakeStore:
    def __init__(self) -> None:
        self.events: list[tuple[int | None, str, str]] = []
        self.attempts: dict[int, float] = {}

    def add_event(self, *, job_id: int | None, kind: str, now: float, message: str) -> None:
        self.events.append((job_id, kind, message))

    def update_attempt(self, attempt_id: int, **fields: Any) -> None:
        self.attempts[attempt_id] = fields["idle_seconds"]

    def on_rollback(self, undo: Any) -> None:
        pass


def a_run(gpus: tuple[int, ...] = (0,), milli: int = 1000, before: float = 0.0) -> Running:
    backend = MagicMock()
    backend.capabilities.engine = False
    return Running(job_id=1, attempt_id=10, attempt_no=1, spec=JobSpec(command=["x"]),
                   gpus=gpus, milli=milli, gpu_mem=None, backend=backend, started_at=0.0,
                   pending=MagicMock(spec=PendingJob), failures=0, log_path=Path("/l"),
                   status_path=Path("/s"), handle=MagicMock(), idle_before=before)


def reading(index: int, util: float, healthy: bool = True) -> GpuReading:
    return GpuReading(index=index, uuid=f"u{index}", name="g", memory_total=1,
                      memory_used=0, utilization=util, healthy=healthy)


def watch(run: Running, action: str = "flag") -> tuple[IdleWatch, FakeStore, MagicMock]:
    store, stopper = FakeStore(), MagicMock()
    w = IdleWatch(IdleSettings(minutes=1.0, action=action), store, lambda: 0.0,  # type: ignore[arg-type]
                  {run.job_id: run}, stopper)
    return w, store, stopper


def test_one_event_per_idle_stretch_and_no_stop_when_only_flagging() -> None:
    run = a_run()
    w, store, stopper = watch(run)
    for t in range(0, 200, 10):  # idle 0..190, busy at 200, idle again from 210
        w.observe({0: reading(0, 0.0)}, float(t))
    w.observe({0: reading(0, 0.9)}, 200.0)
    for t in range(210, 300, 10):
        w.observe({0: reading(0, 0.0)}, float(t))
    kinds = [(k, m) for _, k, m in store.events]
    assert kinds == [("idle", "idle: its GPU 0 has been under 5 % for 1 min")] * 2
    assert w.facts(run, 290.0) == {"since": 210.0, "gpus": [0], "threshold": 0.05,
                                   "message": "its GPU 0 has been under 5 % for 1 min"}
    stopper.stop.assert_not_called()


def test_an_unhealthy_gpu_reading_zero_is_not_idle() -> None:
    run = a_run()
    w, store, _ = watch(run)
    for t in range(0, 200, 10):
        w.observe({0: reading(0, 0.0, healthy=False)}, float(t))
    assert store.events == [] and w.facts(run, 190.0) is None


def test_action_stop_stops_it_through_the_handshake_once() -> None:
    run = a_run()
    w, _, stopper = watch(run, "stop")
    for t in range(0, 200, 10):
        w.observe({0: reading(0, 0.0)}, float(t))
    stopper.stop.assert_called_once()
    assert stopper.stop.call_args.args[:2] == (run, StopReason.IDLE)
    assert "under 5 %" in stopper.stop.call_args.args[2]


def test_the_figure_is_written_at_most_every_write_interval_and_adds_to_the_stored_one() -> None:
    run = a_run(milli=500, before=100.0)  # a half GPU; 100 s stored before a restart
    w, store, _ = watch(run)
    for t in range(0, 61, 10):
        w.observe({0: reading(0, 0.0)}, float(t))
    w.write(60.0)
    assert store.attempts == {10: 100.0 + 30.0}
    w.observe({0: reading(0, 0.0)}, 70.0)
    w.write(70.0)  # changed, but written 10 s ago: waits
    assert store.attempts == {10: 130.0}
    w.write(60.0 + WRITE_EVERY_S)
    assert store.attempts == {10: 135.0}
