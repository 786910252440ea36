"""The queue in fair-share order, for the daemon's pass (``[priority] fair_share = true``).

Usage is summed from the attempts (Store.usage: accounting is a read model, never a
counter of its own) at most every ``refresh`` seconds, and again as soon as a job starts or
ends; the ended attempts' part is kept between sums and decayed, so a sum reads only what
ended since the last one and what runs. The ordered queue is kept until the usage or the
queue changes. The order is rota.core.fairshare.order_queue's (the simulator calls it),
worked out by rota.core.kept_order.KeptOrder from the queue's changes (PendingQueue.changes)
rather than from every job each time.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from rota.config import PrioritySettings
from rota.core.fairshare import (
    HORIZON_HALF_LIVES,
    Accounts,
    EndedUsage,
    Factors,
    Standing,
    priority_of,
)
from rota.core.kept_order import KeptOrder
from rota.core.snapshot import MILLI, PendingJob
from rota.core.usage import weighted
from rota.server.queue import PendingQueue
from rota.store.repo import Store

#: an attempt's end may be stored this long after the time it records (a batch, a launch
#: answer): ends this far back are read again at each sum, deduplicated
LATE_END_S = 300.0


class FairOrder:
    def __init__(self, settings: PrioritySettings, store: Store,
                 clock: Callable[[], float]) -> None:
        self.settings, self.store, self.clock = settings, store, clock
        self.weights = settings.weights()
        self._standing: Standing | None = None
        self._at = float("-inf")  # when the standing was summed
        self._running: frozenset[int] = frozenset()  # the running jobs it was summed with
        self._ordered: list[PendingJob] | None = None
        self._for: tuple[int, int] = (-1, -1)  # (queue version, GPUs) it was ordered for
        self._kept = KeptOrder()  # the queue's jobs as of its last changes()
        # the decayed usage of ended attempts as of _read_at, and the attempts in it that
        # ended within LATE_END_S of it (read again: not to be counted twice)
        self._ended = EndedUsage(settings.half_life)
        self._read_at: float | None = None
        self._seen: dict[tuple[int, int], float] = {}

    @property
    def on(self) -> bool:
        return self.settings.fair_share

    def changed(self) -> None:
        """Shares were set: sum again at the next pass."""
        self._at = float("-inf")

    def standing(self, running: Collection[int] = ()) -> Standing:
        """Every user's and project's fair share now (summed again when stale)."""
        now = self.clock()
        ids = running if isinstance(running, frozenset) else frozenset(running)
        if (self._standing is None or now - self._at >= self.settings.refresh
                or ids != self._running):
            shares = self.store.shares()
            self._standing = Standing.of(self._usage(now), shares["user"],
                                         shares["project"])
            self._at, self._running, self._ordered = now, ids, None
        return self._standing

    def _usage(self, now: float) -> Accounts:
        """Decayed usage: the ended attempts' kept and brought up to date (only those ended
        since the last read are read, with a margin for ends stored late), the running
        ones' summed afresh. A restarted daemon reads the whole horizon once."""
        h = self.settings.half_life
        horizon = now - HORIZON_HALF_LIVES * h
        since = horizon if self._read_at is None else max(horizon,
                                                          self._read_at - LATE_END_S)
        ended = self._ended
        ended.advance(now)
        running = []
        for r in weighted(self.store.usage(since, now), self.settings.gpu_weights):
            if r.ended_at is None:
                running.append(r)
            elif (r.job_id, r.attempt) not in self._seen:
                self._seen[(r.job_id, r.attempt)] = r.ended_at
                ended.add(r, now)
        self._read_at = now
        # the next read starts LATE_END_S before now: only those ends can come again
        self._seen = {key: end for key, end in self._seen.items() if end > now - LATE_END_S}
        return ended.with_running(running, now)

    def ordered(self, queue: PendingQueue, gpus: int,
                running: Collection[int]) -> list[PendingJob]:
        """The queue's jobs in fair-share order (kept while neither they nor the usage
        change)."""
        standing = self.standing(running)
        if self._ordered is None or self._for != (queue.version, gpus):
            changes = queue.changes()
            if changes is None:
                self._kept.reset(queue.ordered())
            else:
                for added, job in changes:
                    if added:
                        self._kept.add(job)
                    else:
                        self._kept.remove(job.id)
            self._ordered = self._kept.order(standing, self.weights, self._at,
                                             largest_milli=gpus * MILLI)
            self._for = (queue.version, gpus)
        return self._ordered

    def factors(self, job: PendingJob, gpus: int, running: Collection[int]) -> Factors:
        return priority_of(job, self.standing(running), self.weights, self.clock(),
                           gpus * MILLI)
