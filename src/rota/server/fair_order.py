"""The queue in fair-share order, for the daemon's pass (``[priority] fair_share = true``).

Usage is summed from the attempts (Store.usage: accounting is a read model, never a
counter of its own) at most every ``refresh`` seconds, and again as soon as a job starts or
ends; the ordered queue is kept until the usage or the queue changes. The order itself is
rota.core.fairshare.order_queue, the function the simulator calls too.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from rota.config import PrioritySettings
from rota.core.fairshare import (
    HORIZON_HALF_LIVES,
    Factors,
    Standing,
    Weights,
    account_usage,
    order_queue,
    priority_of,
)
from rota.core.snapshot import MILLI, PendingJob
from rota.store.repo import Store


def weights_of(p: PrioritySettings) -> Weights:
    return Weights(priority=p.weight_priority, age=p.weight_age, size=p.weight_size,
                   fair_share=p.weight_fair_share, max_age_s=p.max_age,
                   favor_small=p.favor_small)


class FairOrder:
    def __init__(self, settings: PrioritySettings, store: Store,
                 clock: Callable[[], float]) -> None:
        self.settings, self.store, self.clock = settings, store, clock
        self.weights = weights_of(settings)
        self._standing: Standing | None = None
        self._at = float("-inf")  # when the standing was summed
        self._running: frozenset[int] = frozenset()  # the running jobs it was summed with
        self._ordered: list[PendingJob] | None = None
        self._for: tuple[int, int] = (-1, -1)  # (queue version, GPUs) it was ordered for

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
            h = self.settings.half_life
            runs = self.store.usage(now - HORIZON_HALF_LIVES * h, now)
            shares = self.store.shares()
            self._standing = Standing.of(account_usage(runs, now, h), shares["user"],
                                         shares["project"])
            self._at, self._running, self._ordered = now, ids, None
        return self._standing

    def ordered(self, jobs: list[PendingJob], version: int, gpus: int,
                running: Collection[int]) -> list[PendingJob]:
        """``jobs`` in fair-share order (cached while neither they nor the usage change)."""
        standing = self.standing(running)
        if self._ordered is None or self._for != (version, gpus):
            self._ordered = order_queue(jobs, standing, self.weights, self._at,
                                        largest_milli=gpus * MILLI)
            self._for = (version, gpus)
        return self._ordered

    def factors(self, job: PendingJob, gpus: int, running: Collection[int]) -> Factors:
        return priority_of(job, self.standing(running), self.weights, self.clock(),
                           gpus * MILLI)
