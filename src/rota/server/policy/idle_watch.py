"""Idle allocated GPUs in the daemon: each GPU reading is fed to ``rota.core.idle`` for
every running job; a job newly flagged gets an ``idle`` event and, with ``[idle] action =
"stop"``, is stopped through the stop handshake (then held). Its wasted GPU-seconds go to
its attempt row with the outputs loop's batch (``write``), not once per reading, and when
the attempt ends (exits.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from rota.config import IdleSettings
from rota.core.idle import IdleRule, idle_gpus, idle_since, idle_text, observe
from rota.core.outcome import StopReason
from rota.core.snapshot import MILLI
from rota.devices.base import GpuReading
from rota.server.jobs.running import Running
from rota.server.jobs.stopper import Stopper
from rota.store.repo import Store

#: the longest a running attempt's stored idle figure lags behind the daemon's
WRITE_EVERY_S = 30.0


def rule_of(settings: IdleSettings) -> IdleRule:
    return IdleRule(threshold=settings.threshold, after_s=settings.minutes * 60.0)


class IdleWatch:
    def __init__(self, settings: IdleSettings, store: Store, clock: Callable[[], float],
                 running: Mapping[int, Running], stopper: Stopper) -> None:
        self.rule, self.stops = rule_of(settings), settings.action == "stop"
        self.store, self.clock, self.running, self.stopper = store, clock, running, stopper
        self._written: dict[int, tuple[float, float]] = {}  # attempt -> (figure, when)

    def observe(self, readings: Mapping[int, GpuReading], now: float) -> None:
        """One reading for every running job that holds GPUs of this machine."""
        # an unhealthy GPU reads 0 % (NVML gives nothing): unknown, not idle
        utils = {i: r.utilization for i, r in readings.items() if r.healthy}
        for run in list(self.running.values()):
            if not run.gpus or run.handle is None or run.stop_reason is not None \
                    or run.backend.capabilities.engine:
                continue
            run.idle = observe(run.idle, run.gpus, utils, now, self.rule,
                               share=min(1.0, run.milli / MILLI))
            since = idle_since(run.idle, now, self.rule)
            if since is None:
                run.idle_flagged = False  # busy again: a new stretch is flagged anew
            elif not run.idle_flagged:
                run.idle_flagged = True
                self._flag(run, since, now)

    def _flag(self, run: Running, since: float, now: float) -> None:
        text = idle_text(idle_gpus(run.idle, now, self.rule), since, now, self.rule.threshold)
        self.store.add_event(job_id=run.job_id, kind="idle", now=now,
                             message=f"idle: {text}")
        if self.stops:
            self.stopper.stop(run, StopReason.IDLE, f"{text} ([idle] action = stop)")

    def facts(self, run: Running, now: float) -> dict[str, object] | None:
        """A flagged job's idle facts for API answers, or None. Only once the device loop
        has flagged it (and stored its event): a read between two readings must not show
        a flag whose event is not there yet."""
        since = idle_since(run.idle, now, self.rule) if run.idle_flagged else None
        if since is None:
            return None
        gpus = idle_gpus(run.idle, now, self.rule)
        return {"since": since, "gpus": gpus, "threshold": self.rule.threshold,
                "message": idle_text(gpus, since, now, self.rule.threshold)}

    def write(self, now: float) -> None:
        """Inside a batch: running attempts' idle GPU-seconds that changed, each at most
        every WRITE_EVERY_S."""
        live = set()
        for run in self.running.values():
            live.add(run.attempt_id)
            figure = run.idle_seconds
            last, at = self._written.get(run.attempt_id, (run.idle_before, 0.0))
            if figure != last and now - at >= WRITE_EVERY_S:
                self.store.update_attempt(run.attempt_id, idle_seconds=figure)
                self._written[run.attempt_id] = (figure, now)
                self.store.on_rollback(self._forget(run.attempt_id))
        for gone in self._written.keys() - live:  # ended: exits stored the last figure
            del self._written[gone]

    def _forget(self, attempt_id: int) -> Callable[[], object]:
        """What a rolled-back batch undoes: the figure was not stored after all."""
        return lambda: self._written.pop(attempt_id, None)
