"""Taking the work up again from the store when a batch could not be stored.

Should a batch's commit fail (the disk full, the database gone), the daemon's memory is
ahead of the store: a job would look ended, or running, to it alone. Rather than go on
from a state it could not store, the daemon forgets what memory says of its jobs and reads
it all again from the store and the backends' records, as a restart would; no pass runs
meanwhile (``diverged``), and a failed try is tried again, waiting twice as long each time.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol

from rota.server.loop.recovery import RecoveryPort, recover

if TYPE_CHECKING:
    from rota.server.jobs.device_monitor import DeviceMonitor
    from rota.server.storage.workspaces import Workspaces

log = logging.getLogger("rota.daemon")
#: after a batch could not be stored: the first wait before the work is taken up again from
#: the store, and the longest between tries while the store still fails
RESYNC_FIRST_S = 0.0
RESYNC_MAX_S = 30.0
RESYNC_POLL_S = 0.05  # while launches are still unanswered


class ResyncPort(RecoveryPort, Protocol):
    """What a resync needs of the daemon beyond recovery's: its loop, the workspaces and
    GPU monitor it refreshes, and a kick for the pass that follows."""

    loop: asyncio.AbstractEventLoop | None
    workspaces: Workspaces
    monitor: DeviceMonitor

    def kick(self) -> None: ...


class Resync:
    def __init__(self, daemon: ResyncPort) -> None:
        self.d = daemon
        # set when memory is ahead of the store (a batch's commit failed) until the work is
        # taken up again from the store; no pass runs meanwhile
        self.diverged = False
        self._timer: asyncio.TimerHandle | None = None
        self._wait = RESYNC_FIRST_S

    def after_failed_batch(self) -> None:
        log.exception("a batch could not be stored; taking the work up again from the store")
        self.soon(self._wait)

    def soon(self, delay: float) -> None:
        self.diverged = True
        d = self.d
        if self._timer is None and d.loop is not None and not d.stopping:
            self._timer = d.loop.call_later(delay, self._run)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _run(self) -> None:
        """Forget what memory says of the jobs and read it all again from the store, as at
        start-up. Only once every launch sent has been answered: the runner records a start
        when it answers, and an unanswered one would look never carried out (run twice)."""
        d = self.d
        self._timer = None
        if d.stopping:
            return
        if d.launcher.in_flight > 0:
            self.soon(RESYNC_POLL_S)
            return
        try:
            with d.store.transaction():  # should it fail, memory is put back as it was
                d.exits.forget()
                d.launcher.forget_unrecorded()
                d.table.forget()
                recover(d)
                d.workspaces.resume(d.running.values())
        except Exception:
            self._wait = min(max(2 * self._wait, 0.5), RESYNC_MAX_S)
            log.exception("taking the work up again failed; next try in %.1f s", self._wait)
            self.soon(self._wait)
            return
        self.diverged = False
        self._wait = RESYNC_FIRST_S
        log.info("taken up again from the store: %d running, %d pending", len(d.running),
                 len(d.queue))
        d.monitor.refresh()
        d.kick()
