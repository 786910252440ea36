"""The stop handshake: a job is asked to stop, then killed after its grace period.

The job's stop signal (SIGTERM unless its spec says another) goes to its process group and
its stop file is created (``rota.job.should_stop``); SIGKILL follows after its grace (or
the time left before its time limit). A job whose launch is still in flight is signalled
as soon as it has a process. Why it is being stopped is kept on the job
(``Running.stop_reason``): ``core.outcome.decide`` reads it when the process has ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Mapping

from rota.core.outcome import StopReason, stop_text, time_limit_text
from rota.server.jobs.running import Running
from rota.server.tracking.outputs import stop_file
from rota.store.repo import Store
from rota.units import format_duration


class Stopper:
    def __init__(self, store: Store, clock: Callable[[], float],
                 running: Mapping[int, Running]) -> None:
        self.store, self.clock, self.running = store, clock, running
        self.loop: asyncio.AbstractEventLoop | None = None  # set when the daemon starts

    def stop(self, run: Running, reason: StopReason, message: str, *,
             kill_in: float | None = None) -> None:
        """Start the handshake (once: a job already being stopped keeps its reason)."""
        if run.stop_reason is not None:
            return
        run.stop_reason, run.kill_in = reason, kill_in
        wait = run.spec.grace if kill_in is None else kill_in
        self.store.add_event(job_id=run.job_id, kind=f"stopping:{reason}", now=self.clock(),
                             message=stop_text(message, run.spec.stop_signal, wait))
        if run.handle is not None:
            self.signal_now(run)

    def signal_now(self, run: Running) -> None:
        """The stop signal and the stop file now, SIGKILL armed."""
        assert run.handle is not None
        with contextlib.suppress(OSError):  # the flag is a courtesy; the signal is the stop
            # never through a link (defence in depth: a job run as another account may
            # not write the flag's folder, and the daemon is root)
            os.close(os.open(stop_file(run.status_path), os.O_WRONLY | os.O_CREAT
                             | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644))
        run.backend.signal(run.handle, signal.Signals[run.spec.stop_signal])
        if self.loop is not None:
            wait = run.spec.grace if run.kill_in is None else run.kill_in
            run.timers.append(self.loop.call_later(max(0.0, wait), self._kill, run.job_id))

    def arm_time_limit(self, run: Running) -> None:
        """Warn ``grace`` before the limit (but not before half of it), so that a save fits
        in before SIGKILL at the limit itself."""
        limit = run.spec.time_limit
        if not limit or self.loop is None:
            return
        warn_at = run.started_at + max(limit / 2, limit - run.spec.grace)
        run.timers.append(self.loop.call_later(max(0.0, warn_at - self.clock()),
                                               self._time_limit, run.job_id))

    def _kill(self, job_id: int) -> None:
        run = self.running.get(job_id)
        if run is not None and run.handle is not None:
            run.backend.signal(run.handle, signal.SIGKILL)

    def _time_limit(self, job_id: int) -> None:
        run = self.running.get(job_id)
        if run is not None and run.spec.time_limit:
            now = self.clock()
            left = run.started_at + run.spec.time_limit - now
            self.stop(run, StopReason.TIMEOUT, _early_stop_text(
                run.spec.time_limit, now - run.started_at, run.spec.grace), kill_in=left)


def _early_stop_text(limit: float, ran: float, grace: float) -> str:
    """Why a job is stopped before its time limit: so that its grace (at most half the
    limit) fits before SIGKILL at the limit. "time limit reached" would be untrue then."""
    if ran >= limit:  # the daemon was down when the warning was due
        return time_limit_text(limit)
    cut = ", at most half the limit" if grace > limit - ran + 1 else ""
    return (f"asked to stop after {format_duration(ran)} so that it ends within its time "
            f"limit of {format_duration(limit)} (grace {format_duration(grace)}{cut})")
