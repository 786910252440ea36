"""The queue in fair-share order, for the daemon's pass (``[priority] fair_share = true``).

Usage is summed from the attempts (Store.usage: accounting is a read model, never a
counter of its own) at most every ``refresh`` seconds, and again as soon as a job starts or
ends; the ended attempts' part is kept between sums and decayed, so a sum reads only the
attempts stored since the last one and those that were running then (Store.usage_after).
The ordered queue is kept until the usage or the queue changes. The order is
rota.core.fairshare.order_queue's (the simulator calls it), worked out by
rota.core.kept_order.KeptOrder from the queue's changes (PendingQueue.changes) rather than
from every job each time.
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
from rota.server.jobs.queue import PendingQueue
from rota.store.repo import Store

#: more attempts running than this and a sum reads the whole horizon again rather than
#: naming each of them in its query
MAX_WATCHED = 5000


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
        self._shares: dict[str, dict[str, float]] | None = None  # as stored, until changed()
        # the decayed usage of ended attempts; the last attempt read and those running then
        # (read again at the next sum: an end is counted once, whenever it is stored)
        self._ended = EndedUsage(settings.half_life)
        self._last_id: int | None = None
        self._watched: set[int] = set()

    @property
    def on(self) -> bool:
        return self.settings.fair_share

    def changed(self) -> None:
        """Shares were set (through this daemon, the store's only writer): read them and
        sum again at the next pass."""
        self._at = float("-inf")
        self._shares = None

    def standing(self, running: Collection[int] = ()) -> Standing:
        """Every user's and project's fair share now (summed again when stale)."""
        now = self.clock()
        ids = running if isinstance(running, frozenset) else frozenset(running)
        if (self._standing is None or now - self._at >= self.settings.refresh
                or ids != self._running):
            if self._shares is None:
                self._shares = self.store.shares()
            shares = self._shares
            self._standing = Standing.of(self._usage(now), shares["user"],
                                         shares["project"])
            self._at, self._running, self._ordered = now, ids, None
        return self._standing

    def _usage(self, now: float) -> Accounts:
        """Decayed usage: the ended attempts' kept and brought up to date, with the ends
        stored since the last sum added once each, and the running ones' summed afresh. A
        restarted daemon (or one running very many attempts) reads the whole horizon."""
        h = self.settings.half_life
        if self._last_id is None or len(self._watched) > MAX_WATCHED:
            self._ended = EndedUsage(h)  # afresh: nothing kept is counted twice
            records = self.store.usage(now - HORIZON_HALF_LIVES * h, now)
        else:
            records = self.store.usage_after(self._last_id, self._watched)
        ended = self._ended
        ended.advance(now)
        running = []
        watched: set[int] = set()
        last = self._last_id or 0
        for r in weighted(records, self.settings.gpu_weights):
            last = max(last, r.attempt_id)
            if r.ended_at is None:
                running.append(r)
                watched.add(r.attempt_id)
            else:
                ended.add(r, now)
        self._last_id, self._watched = last, watched
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
